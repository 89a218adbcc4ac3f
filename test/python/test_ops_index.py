"""embedding, index_select, cat and stack on the device against the CPU:
exact (pure data movement), 2-D indices, int32 and int64 indices, middle
dims, unaligned cat offsets, zero-size; each float dtype; no CPU fallback."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, no_fallbacks, offset_view, rand


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding(dtype):
    w = rand((97, 150), dtype)
    for idx in [torch.randint(0, 97, (3, 41)), torch.randint(0, 97, (5,)).int()]:
        got = F.embedding(idx.to("spyre"), w.to("spyre"))
        assert torch.equal(got.cpu(), F.embedding(idx.long(), w))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_of_ids_with_trailing_unit_dims(dtype):
    # A decode step of generate() with several prompts embeds ids of shape
    # [batch, 1]; their layout drops the trailing 1 (it was an internal
    # assert). Also a view of such ids with a storage offset.
    w = rand((50, 16), dtype)
    for shape in [(2, 1), (4, 1), (3, 1, 1), (1, 1), (2, 3, 1)]:
        idx = torch.randint(0, 50, shape)
        got = F.embedding(idx.to("spyre"), w.to("spyre"))
        assert torch.equal(got.cpu(), F.embedding(idx, w)), shape
    ids = torch.randint(0, 50, (5, 1))
    view = ids.to("spyre")[2:]
    assert torch.equal(F.embedding(view, w.to("spyre")).cpu(), F.embedding(ids[2:], w))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_index_select(dtype):
    a = rand((4, 30, 70), dtype)
    idx = torch.tensor([3, 0, 2, 2, 1])
    for dim in [0, 1]:
        got = a.to("spyre").index_select(dim, idx.to("spyre"))
        assert torch.equal(got.cpu(), a.index_select(dim, idx))
    v = offset_view(a[0])
    assert torch.equal(v.index_select(0, idx.to("spyre")).cpu(),
                       a[0].index_select(0, idx))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool], ids=str)
def test_index_select_along_the_last_dim(dtype):
    # XLNet's relative shift: index_select(x, 3, arange(klen))
    a = rand((2, 3, 5, 70), torch.float32).to(dtype) if dtype != torch.bool else \
        torch.rand(2, 3, 5, 70) > 0.5
    with torch.spyre.strict():
        for idx in [torch.arange(40), torch.tensor([69, 0, 3, 3]), torch.tensor(5),
                    torch.tensor([2, 1], dtype=torch.int32)]:
            got = a.to("spyre").index_select(-1, idx.to("spyre"))
            assert torch.equal(got.cpu(), a.index_select(-1, idx)), idx
        v = offset_view(a[0, 0])
        assert torch.equal(v.index_select(1, torch.tensor([4, 1]).to("spyre")).cpu(),
                           a[0, 0].index_select(1, torch.tensor([4, 1])))
        out = torch.empty(0, dtype=dtype).to("spyre")
        torch.index_select(a.to("spyre"), 3, torch.tensor([1, 2]).to("spyre"), out=out)
        assert torch.equal(out.cpu(), a.index_select(3, torch.tensor([1, 2])))
        # negative indices are out of range for index_select (a device error)
        with pytest.raises(RuntimeError):
            a.to("spyre").index_select(-1, torch.tensor([-1]).to("spyre")).cpu()
    no_fallbacks()


def test_out_of_range_index_raises():
    w = torch.randn(10, 8).to("spyre")
    with pytest.raises(RuntimeError):
        F.embedding(torch.tensor([3, 10]).to("spyre"), w).cpu()


@pytest.mark.parametrize("dtype", FLOATS)
def test_cat_and_stack(dtype):
    a, b = rand((3, 5, 67), dtype), rand((3, 2, 67), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    assert torch.equal(torch.cat([x, y], 1).cpu(), torch.cat([a, b], 1))
    c = rand((3, 5, 10), dtype)
    assert torch.equal(torch.cat([x, c.to("spyre")], -1).cpu(),
                       torch.cat([a, c], -1))
    assert torch.equal(torch.stack([x, x], 0).cpu(), torch.stack([a, a], 0))
    e = torch.zeros(3, 0, 67, dtype=dtype)
    assert torch.equal(torch.cat([x, e.to("spyre")], 1).cpu(), a)
    no_fallbacks()


def test_cat_keeps_the_inputs_memory_format_as_the_cpu():
    # compiled code asserts the strides of cat's result (Mamba's compiled
    # state update concatenates channels-last views)
    a = torch.randn(2, 3, 5, 4).to(memory_format=torch.channels_last)
    b = torch.randn(2, 2, 5, 4).to(memory_format=torch.channels_last)
    c = torch.randn(2, 1, 5, 4)
    for parts in [(a, b), (a, c), (c, c)]:
        want = torch.cat(parts, 1)
        got = torch.cat([p.to("spyre") for p in parts], 1)
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)
    no_fallbacks()
