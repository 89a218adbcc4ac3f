"""The spyre generator: seeds, state, reproducible random ops."""

import pytest
import torch


def test_generator_on_spyre():
    g = torch.Generator("spyre")
    assert g.device.type == "spyre"
    g.manual_seed(123)
    assert g.initial_seed() == 123
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    a = torch.randn(5, 70, device="spyre", generator=g)
    g.set_state(state)
    b = torch.randn(5, 70, device="spyre", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    c = torch.randn(5, 70, device="spyre", generator=g)
    assert not torch.equal(b.cpu(), c.cpu())


def test_manual_seed_makes_default_generator_reproducible():
    torch.spyre.manual_seed(7)
    a = torch.rand(100, device="spyre")
    b = torch.randn(3, 3, device="spyre")
    torch.spyre.manual_seed(7)
    assert torch.equal(a.cpu(), torch.rand(100, device="spyre").cpu())
    assert torch.equal(b.cpu(), torch.randn(3, 3, device="spyre").cpu())
    torch.spyre.manual_seed(8)
    assert not torch.equal(a.cpu(), torch.rand(100, device="spyre").cpu())


def test_torch_manual_seed_seeds_spyre_too():
    torch.manual_seed(11)
    a = torch.rand(50, device="spyre")
    torch.manual_seed(11)
    assert torch.equal(a.cpu(), torch.rand(50, device="spyre").cpu())
    assert torch.spyre.initial_seed() == 11


def test_rng_state_round_trip_and_bad_state():
    torch.spyre.manual_seed(3)
    state = torch.spyre.get_rng_state()
    a = torch.rand(10, device="spyre")
    torch.spyre.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.rand(10, device="spyre").cpu())
    with pytest.raises((ValueError, RuntimeError), match="16 bytes"):
        torch.spyre.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_in_place_random_ops_use_spyre_seed():
    torch.spyre.manual_seed(5)
    x = torch.empty(64, device="spyre").uniform_()
    y = torch.empty(64, device="spyre").normal_()
    torch.spyre.manual_seed(5)
    assert torch.equal(x.cpu(), torch.empty(64, device="spyre").uniform_().cpu())
    assert torch.equal(y.cpu(), torch.empty(64, device="spyre").normal_().cpu())
