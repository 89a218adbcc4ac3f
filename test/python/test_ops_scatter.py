"""Writes at indexed places and reorderings on the device against the CPU,
in strict mode (a CPU fallback raises): scatter (value and src),
scatter_reduce, index_add, index_put_ along any dim (the inverse
permutation of mixture-of-experts dispatch), flip; with every device dtype,
ragged shapes, views, out= and the CPU's errors."""

import pytest
import torch

from ops_testing import offset_view

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.bool]


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


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
    with pytest.raises(RuntimeError, match="int32/int64"):
        z.scatter(1, torch.tensor([[0.0]]).to("spyre"), 1.0)
    # int32 indices work, as on the CPU
    assert torch.equal(
        z.scatter(1, torch.tensor([[2]], dtype=torch.int32).to("spyre"), 1.0).cpu(),
        torch.zeros(4, 6).scatter(1, torch.tensor([[2]], dtype=torch.int32), 1.0))
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64],
                         ids=str)
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_scatter_reduce(dtype, reduce, include_self):
    # TAPAS' segment reductions: scatter_reduce(0, segments, values, reduce)
    self_ = values((5, 70), dtype)
    index = torch.randint(0, 5, (7, 45))
    src = values((7, 45), dtype)
    if dtype.is_floating_point:
        src[2, 3] = float("nan")  # propagates through amax/amin, as on the CPU
    # 16-bit floats against the fp32 reference rounded once; integers exact.
    compute = torch.float32 if dtype.is_floating_point else dtype
    want = self_.to(compute).scatter_reduce(0, index, src.to(compute), reduce,
                                            include_self=include_self).to(dtype)
    got = self_.to("spyre").scatter_reduce(0, index.to("spyre"), src.to("spyre"), reduce,
                                           include_self=include_self)
    if dtype.is_floating_point:
        torch.testing.assert_close(got.cpu(), want, equal_nan=True,
                                   rtol=2e-2 if dtype != torch.float32 else 1e-5,
                                   atol=2e-2 if dtype != torch.float32 else 1e-5)
    else:
        assert torch.equal(got.cpu(), want)
    # along the last dim, in place and out=
    segments = torch.tensor([0, 1, 1, 3, 3, 3])
    row = values((6,), dtype)
    base = values((4,), dtype)
    want = base.scatter_reduce(0, segments, row, reduce, include_self=include_self)
    inplace = base.to("spyre")
    inplace.scatter_reduce_(0, segments.to("spyre"), row.to("spyre"), reduce,
                            include_self=include_self)
    out = torch.empty(0, dtype=dtype).to("spyre")
    torch.scatter_reduce(base.to("spyre"), 0, segments.to("spyre"), row.to("spyre"), reduce,
                         include_self=include_self, out=out)
    for got in (inplace, out):
        if dtype.is_floating_point:
            torch.testing.assert_close(got.cpu().float(), want.float(), rtol=1e-2, atol=1e-2,
                                       equal_nan=True)
        else:
            assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32], ids=str)
def test_index_add(dtype):
    # MoE: next_states.index_add_(0, token_idx, expert_outputs), repeated tokens
    self_ = values((9, 70), dtype)
    index = torch.tensor([0, 3, 3, 8, 3, 1])
    source = values((6, 70), dtype)
    want = self_.float().index_add(0, index, source.float()).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=3e-2)
    check = (lambda got, ref: torch.testing.assert_close(got.cpu().float(), ref.float(), **tol)) \
        if dtype.is_floating_point else (lambda got, ref: torch.equal(got.cpu(), ref) or
                                         pytest.fail(f"{got.cpu()} != {ref}"))
    check(self_.to("spyre").index_add(0, index.to("spyre"), source.to("spyre")), want)
    inplace = self_.to("spyre")
    inplace.index_add_(0, index.to("spyre"), source.to("spyre"))
    check(inplace, want)
    # along the last dim, alpha, int32 indices, a view as self
    src_t = values((9, 6), dtype)
    alpha = 2
    want = self_.index_add(1, index, src_t, alpha=alpha)
    view = offset_view(self_)
    view.index_add_(1, index.int().to("spyre"), src_t.to("spyre"), alpha=alpha)
    check(view, want)
    out = torch.empty(0, dtype=dtype).to("spyre")
    torch.index_add(self_.to("spyre"), 0, index.to("spyre"), source.to("spyre"), out=out)
    check(out, self_.float().index_add(0, index, source.float()).to(dtype))
    with pytest.raises(IndexError, match="out of bounds"):
        self_.to("spyre").index_add(0, torch.tensor([9]).to("spyre"), source[:1].to("spyre"))
