"""Copies between two cards of one process: one transfer over the modelled
card-to-card link (no bounce through the host), ordered on both cards'
streams, exact for whole tensors, views, offsets and dtype changes."""

import pytest
import torch

import torch_spyre  # noqa: F401
from conftest import needs_two_devices

pytestmark = needs_two_devices()


def link_ns(nbytes):
    props = torch.spyre.get_device_properties(0)
    return props.card_link_latency_ns + nbytes / props.card_link_gb_per_s


def measured(fn):
    torch.spyre.synchronize(0)
    torch.spyre.synchronize(1)
    torch.spyre.reset_device_time_stats()
    result = fn()
    torch.spyre.synchronize(0)
    torch.spyre.synchronize(1)
    return result, torch.spyre.device_time_stats()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int8, torch.bool])
def test_whole_tensor_moves_card_to_card_at_the_link_rate(dtype):
    x = (torch.randn(300, 70) * 50).to(dtype)
    a = x.to("spyre:0")
    b, stats = measured(lambda: a.to("spyre:1"))
    assert b.device == torch.device("spyre:1")
    # One transfer of the stick-laid image, modelled on the card link; no
    # host copies.
    assert stats["link_transfers"] == 1, stats
    assert stats["copies"] == 0, stats
    assert stats["link_ns"] == pytest.approx(link_ns(stats["link_bytes"]))
    assert stats["link_bytes"] >= x.nbytes
    assert torch.equal(b.cpu(), x)


def test_link_is_cheaper_than_a_round_trip_through_the_host():
    a = torch.randn(2048, 2048).to("spyre:0")
    _, over_link = measured(lambda: a.to("spyre:1"))
    _, through_host = measured(lambda: a.cpu().to("spyre:1"))
    assert over_link["total_ns"] < 0.6 * through_host["total_ns"]


@pytest.mark.parametrize("case", ["row_slice", "column_view", "transposed", "offset",
                                  "to_half", "into_view"])
def test_views_offsets_and_dtypes_match_the_cpu(case):
    x = torch.randn(40, 64)
    a = x.to("spyre:0")
    if case == "row_slice":
        got, want = a[5:17].to("spyre:1"), x[5:17]
    elif case == "column_view":
        got, want = a[:, 3::2].to("spyre:1"), x[:, 3::2]
    elif case == "transposed":
        got, want = a.t().to("spyre:1"), x.t()
    elif case == "offset":
        got, want = a.view(-1)[7:900].to("spyre:1"), x.view(-1)[7:900]
    elif case == "to_half":
        got = torch.empty(40, 64, dtype=torch.float16, device="spyre:1")
        got.copy_(a)
        want = x.half()
    else:  # into a view of a larger tensor on the other card
        base_cpu = torch.zeros(40, 130)
        base = base_cpu.to("spyre:1")
        base[:, 1:129:2] = a
        base_cpu[:, 1:129:2] = x
        got, want = base, base_cpu
    assert got.device == torch.device("spyre:1")
    assert torch.equal(got.cpu(), want)


def test_ordered_after_the_source_cards_work():
    """Queued work that produces the source runs before the transfer, and
    work queued after it on the destination sees the copied values."""
    x = torch.randn(256, 256)
    a = x.to("spyre:0")
    for _ in range(5):
        a = a * 1.5 + 1.0
    b = a.to("spyre:1", non_blocking=True)
    c = b * 2.0
    expected = x
    for _ in range(5):
        expected = expected * 1.5 + 1.0
    torch.testing.assert_close(c.cpu(), expected * 2.0)


def test_source_is_not_overwritten_before_the_transfer_reads_it():
    x = torch.randn(128, 128)
    a = x.to("spyre:0")
    b = a.to("spyre:1", non_blocking=True)
    a.fill_(-7.0)  # queued after the transfer on the source card's stream
    assert torch.equal(b.cpu(), x)
    assert torch.equal(a.cpu(), torch.full_like(x, -7.0))
