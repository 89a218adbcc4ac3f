"""Writes at indexed places and reorderings on the device against the CPU,
in strict mode (a CPU fallback raises): scatter (value and src), index_put_
along any dim (the inverse permutation of mixture-of-experts dispatch),
flip; with every device dtype, ragged shapes, views, out= and the CPU's
errors."""

import pytest
import torch

from ops_testing import offset_view

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.bool]


@pytest.fixture(autouse=True)
def _strict():
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        yield
    assert torch.spyre.fallback_stats() == {}


def values(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


def index_along(shape, dim, places):
    return torch.randint(0, places, shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_value_and_src(dtype, dim):
    self_ = values((5, 70), dtype)
    index = index_along((3, 40) if dim == 0 else (4, 9), dim, self_.size(dim))
    src = values((6, 45), dtype)
    value = True if dtype == torch.bool else 3
    want = self_.scatter(dim, index, value)
    got = self_.to("spyre").scatter(dim, index.to("spyre"), value)
    assert torch.equal(got.cpu(), want)
    # With repeated indices the CPU's loop leaves the last entry's source.
    want = self_.scatter(dim, index, src)
    got = self_.to("spyre").scatter(dim, index.to("spyre"), src.to("spyre"))
    assert torch.equal(got.cpu(), want)


def test_scatter_forms_and_views():
    # Routers' group masks: zeros_like(scores).scatter_(1, top_groups, 1)
    scores = torch.randn(16, 8)
    top = torch.topk(scores, 3, dim=-1).indices
    mask = torch.zeros_like(scores.to("spyre")).scatter_(1, top.to("spyre"), 1)
    assert torch.equal(mask.cpu(), torch.zeros_like(scores).scatter_(1, top, 1))
    base = torch.randn(6, 70)
    index = torch.randint(0, 70, (6, 5))
    view = offset_view(base)  # self a view with a storage offset
    view.scatter_(1, index.to("spyre"), -2.0)
    assert torch.equal(view.cpu(), base.scatter(1, index, -2.0))
    src = torch.randn(6, 5)
    out = torch.empty(0).to("spyre")
    torch.scatter(base.to("spyre"), 1, index.to("spyre"), src.to("spyre"), out=out)
    assert torch.equal(out.cpu(), base.scatter(1, index, src))
    t = base.to("spyre").t()  # transposed self
    got = t.scatter(0, index.t().to("spyre"), src.t().to("spyre"))
    assert torch.equal(got.cpu(), base.t().scatter(0, index.t(), src.t()))
    empty = torch.empty(6, 0, dtype=torch.long)
    assert torch.equal(base.to("spyre").scatter(1, empty.to("spyre"), 1.0).cpu(), base)


def test_scatter_errors_as_on_the_cpu():
    z = torch.zeros(4, 6).to("spyre")
    with pytest.raises(IndexError, match="out of bounds"):
        z.scatter(1, torch.tensor([[7]]).to("spyre"), 1.0)
    with pytest.raises(IndexError, match="out of bounds"):
        z.scatter(1, torch.tensor([[-1]]).to("spyre"), 1.0)
    assert torch.equal(z.cpu(), torch.zeros(4, 6))
    src = torch.randn(4, 6).to("spyre")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.scatter(z, 1, torch.tensor([[0]]).to("spyre"), src, out=src)
    with pytest.raises(RuntimeError, match="int64"):
        z.scatter(1, torch.tensor([[0]], dtype=torch.int32).to("spyre"), 1.0)
    with pytest.raises(RuntimeError, match="dtype"):
        z.scatter(1, torch.tensor([[0]]).to("spyre"), src.half())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_put_inverse_permutation(dtype):
    # transformers' grouped experts: inv_perm[perm] = arange(n)
    perm = torch.randperm(37)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(37)
    p = perm.to("spyre")
    got = torch.empty_like(p)
    got[p] = torch.arange(37, device="spyre")
    assert torch.equal(got.cpu(), inv)
    # any dtype, last dim of a matrix, negative indices, a scalar value
    x = values((4, 50), dtype)
    v = values((4, 3), dtype)
    idx = torch.tensor([5, -1, 17])
    want = x.clone()
    want[:, idx] = v
    y = x.to("spyre")
    y[:, idx.to("spyre")] = v.to("spyre")
    assert torch.equal(y.cpu(), want)
    fill = True if dtype == torch.bool else 1
    want[:, idx] = fill
    y[:, idx.to("spyre")] = fill
    assert torch.equal(y.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flip(dtype):
    x = values((3, 5, 67), dtype)
    for dims in [(0,), (-1,), (1, 2), (0, 1, 2), ()]:
        assert torch.equal(torch.flip(x.to("spyre"), dims).cpu(), torch.flip(x, dims)), dims
    assert torch.equal(torch.flip(offset_view(x[:, 0]), (0, 1)).cpu(), torch.flip(x[:, 0], (0, 1)))
    out = torch.empty(0, dtype=dtype).to("spyre")
    torch.ops.aten.flip.out(x.to("spyre"), (1,), out=out)
    assert torch.equal(out.cpu(), torch.flip(x, (1,)))
    assert torch.flip(torch.empty(0, 4, dtype=dtype).to("spyre"), (0, 1)).shape == (0, 4)
    y = x.to("spyre")
    assert not torch.flip(y, (0,)).cpu().data_ptr() == y.data_ptr()
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.flip(y, (0, 0))
