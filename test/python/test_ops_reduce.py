"""Reductions on the device against CPU fp32: sum, mean, prod, amax, amin,
argmax, argmin, var, std over every dim, several dims, all dims, keepdim,
offset views, zero-size; each float dtype; no CPU fallback. Tolerances:
ops_testing.TOL scaled by the reduced count for sums (fp32 accumulation)."""

import re

import pytest
import torch

from ops_testing import FLOATS, assert_matches, no_fallbacks, offset_view, rand

SHAPE = (3, 21, 67)


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, (0, 2), (1, 2), (0, 1, 2), None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_amax_amin(dtype, dim, keepdim):
    a = rand(SHAPE, dtype)
    x = a.to("spyre")
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    for name in ["sum", "mean", "amax", "amin"]:
        if dim is None and name in ("amax", "amin"):
            got, want = getattr(x, name)(), getattr(a.float(), name)()
        else:
            got, want = getattr(x, name)(**kw), getattr(a.float(), name)(**kw)
        assert got.shape == want.shape, name
        assert_matches(got, want, dtype, scale=8 if name == "sum" else 1)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, 2, None])
def test_argmax_argmin(dtype, dim):
    a = rand(SHAPE, dtype)
    x = a.to("spyre")
    for name in ["argmax", "argmin"]:
        got = getattr(x, name)(dim=dim)
        assert got.dtype == torch.int64
        assert torch.equal(got.cpu(), getattr(a, name)(dim=dim)), name
    assert torch.equal(x.argmax(1, keepdim=True).cpu(), a.argmax(1, keepdim=True))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(dtype, correction):
    a = rand(SHAPE, dtype)
    x = a.to("spyre")
    for dim in [1, 2, (0, 2)]:
        assert_matches(x.var(dim, correction=correction),
                       a.float().var(dim, correction=correction), dtype)
        assert_matches(x.std(dim, correction=correction, keepdim=True),
                       a.float().std(dim, correction=correction, keepdim=True),
                       dtype)
    assert_matches(x.var(), a.float().var(), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_prod_and_offset_views(dtype):
    a = (1 + 0.01 * rand((9, 70), torch.float32)).to(dtype)
    x = a.to("spyre")
    assert_matches(x.prod(1), a.float().prod(1), dtype)
    assert_matches(x.prod(), a.float().prod(), dtype)
    v = offset_view(a)
    assert_matches(v.sum(0), a.float().sum(0), dtype, scale=4)
    assert_matches(v.t().amax(0), a.float().t().amax(0), dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [64, 150])
def test_row_reductions_of_few_rows_spread_over_the_cores(dtype, rows):
    # One or a few sticks of results: the cores split the sticks and store
    # their own results masked. Whole tensors, an offset view with every
    # other row, and out= views into a larger tensor, whose other elements
    # must survive.
    a = rand((rows, 1000), dtype)
    for x in (a.to("spyre"), offset_view(a)):
        assert_matches(x.sum(-1), a.float().sum(-1), dtype, scale=16)
        assert_matches(x.amax(-1), a.float().amax(-1), dtype)
        assert_matches(x.mean(-1, keepdim=True), a.float().mean(-1, keepdim=True), dtype)
    big = torch.full((rows + 9,), 7.0, dtype=dtype)
    out = big.to("spyre")
    torch.sum(a.to("spyre"), -1, out=out[5:5 + rows])
    want = big.clone()
    want[5:5 + rows] = a.float().sum(-1).to(dtype)
    assert_matches(out, want.float(), dtype, scale=16)
    assert torch.equal(out.cpu()[:5], big[:5]) and torch.equal(out.cpu()[5 + rows:], big[5 + rows:])
    no_fallbacks()


def test_zero_size():
    e = torch.zeros(0, 5).to("spyre")
    assert torch.equal(e.sum(0).cpu(), torch.zeros(5))
    assert e.mean(0).cpu().isnan().all()
    assert e.sum(1).shape == (0,)
    with pytest.raises((RuntimeError, IndexError)):
        e.amax(0)


def test_scalar_and_one_dim():
    a = torch.randn(1000)
    x = a.to("spyre")
    torch.testing.assert_close(x.sum().cpu(), a.sum(), rtol=1e-5, atol=1e-4)
    assert x.argmax().item() == a.argmax().item()
    s = torch.tensor(3.5).to("spyre")
    assert s.sum().item() == 3.5


@pytest.mark.parametrize("call", [
    lambda x: x.amax(0), lambda x: x.amin((0, 1)), lambda x: x.argmax(0),
    lambda x: x.amax(), lambda x: x.max(),
])
def test_reductions_over_an_empty_dim_raise_as_the_cpu(call):
    cpu = torch.empty(0, 3)
    with pytest.raises(Exception) as expected:
        call(cpu)
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value)[:30])):
        call(cpu.to("spyre"))


@pytest.mark.parametrize("shape, dim", [((2, 1), 0), ((3, 1, 2), (0, 1)), ((1, 5), 1),
                                        ((4, 1, 1), (0, 2))])
@pytest.mark.parametrize("op", ["var", "std"])
def test_variance_over_dims_next_to_size_one_dims(shape, dim, op):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 100 + 2281
    for keepdim in (False, True):
        expected = getattr(x, op)(dim, keepdim=keepdim)
        got = getattr(x.to("spyre"), op)(dim, keepdim=keepdim).cpu()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
