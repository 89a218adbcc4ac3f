"""The ops Hugging Face models use to build and test masks, on the device
against the CPU: all/any (any dims, keepdim, empty, uint8, out=, views),
sum of bool, bitwise and/or/xor/not on bool, isneginf/isposinf/isnan with
special values, and linalg_vector_norm (orders 2, 1, inf, -inf). None of
them may fall back to the CPU; integer bit patterns do, counted."""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, no_fallbacks, offset_view


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


def masks():
    torch.manual_seed(0)
    m = torch.rand(3, 5, 70) > 0.3
    m[1] = True  # a slice that is all true
    m[2, :, 3] = False
    return m


@pytest.mark.parametrize("op", [torch.all, torch.any])
def test_all_any_over_dims(op):
    m = masks()
    d = m.to("spyre")
    assert torch.equal(op(d).cpu(), op(m))
    for dim in [0, 1, 2, -1]:
        for keepdim in [False, True]:
            assert torch.equal(op(d, dim, keepdim=keepdim).cpu(), op(m, dim, keepdim=keepdim))
    assert torch.equal(op(d, dim=(0, 2)).cpu(), op(m, dim=(0, 2)))
    assert torch.equal(op(d, dim=()).cpu(), op(m, dim=()))
    f = torch.randn(4, 70)
    f[0, 5] = 0
    assert torch.equal(op(f.to("spyre"), -1).cpu(), op(f, -1))
    u = torch.randint(0, 3, (6, 9), dtype=torch.uint8)
    got = op(u.to("spyre"), 1)
    assert got.dtype == torch.uint8 and torch.equal(got.cpu(), op(u, 1))
    v = offset_view(m[0].to(torch.float32))
    assert torch.equal(op(v, -1).cpu(), op(v.cpu(), -1))
    out = torch.zeros(5, dtype=torch.bool, device="spyre")
    op(d[0], -1, out=out)
    assert torch.equal(out.cpu(), op(m[0], -1))
    empty = torch.zeros(0, 4, dtype=torch.bool)
    assert torch.equal(op(empty.to("spyre"), 0).cpu(), op(empty, 0))
    assert torch.equal(op(empty.to("spyre")).cpu(), op(empty))
    no_fallbacks()


def test_sum_of_bool_counts():
    m = masks()
    d = m.to("spyre")
    for dim in [None, 0, -1, (0, 2)]:
        got = d.sum() if dim is None else d.sum(dim)
        ref = m.sum() if dim is None else m.sum(dim)
        assert got.dtype == torch.int64 and torch.equal(got.cpu(), ref)
    no_fallbacks()


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_on_bool(name):
    a, b = masks(), masks().flip(-1)
    fn = getattr(torch, name)
    x, y = a.to("spyre"), b.to("spyre")
    assert torch.equal(fn(x, y).cpu(), fn(a, b))
    assert torch.equal(fn(x, y[0, 0]).cpu(), fn(a, b[0, 0]))  # broadcast
    z = x.clone()
    getattr(z, name + "_")(y)
    assert torch.equal(z.cpu(), fn(a, b))
    out = torch.empty(3, 5, 70, dtype=torch.bool, device="spyre")
    fn(x, y, out=out)
    assert torch.equal(out.cpu(), fn(a, b))
    assert torch.equal((x & y).cpu(), a & b) and torch.equal((x | y).cpu(), a | b)
    assert torch.equal((~x).cpu(), ~a)
    no_fallbacks()


def test_mul_maximum_minimum_of_masks():
    a, b = masks(), masks().flip(0)
    x, y = a.to("spyre"), b.to("spyre")
    for fn in [torch.mul, torch.maximum, torch.minimum]:
        got = fn(x, y)
        assert got.dtype == torch.bool and torch.equal(got.cpu(), fn(a, b)), fn.__name__
    z = x.clone()
    z *= y
    assert torch.equal(z.cpu(), a * b)
    no_fallbacks()


def test_bitwise_on_integers_is_exact_and_on_floats_raises():
    # Integer bit patterns run on the device (test_ops_generation.py);
    # floating operands raise PyTorch's own error.
    a = torch.randint(0, 255, (4, 9), dtype=torch.int32)
    b = torch.randint(0, 255, (4, 9), dtype=torch.int32)
    assert torch.equal((a.to("spyre") & b.to("spyre")).cpu(), a & b)
    assert torch.equal((~a.to("spyre")).cpu(), ~a)
    no_fallbacks()
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        torch.randn(3).to("spyre") & torch.randn(3).to("spyre")


@pytest.mark.parametrize("dtype", FLOATS)
def test_isneginf_isposinf_isnan(dtype):
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 65504.0,
                      -1e-8, 3.0e38 if dtype != torch.float16 else 6e4])
    x = x.repeat(7, 3).to(dtype)
    d = x.to("spyre")
    for fn in [torch.isneginf, torch.isposinf, torch.isnan, torch.isinf, torch.isfinite]:
        assert torch.equal(fn(d).cpu(), fn(x)), fn.__name__
    out = torch.empty(7, 30, dtype=torch.bool, device="spyre")
    torch.isneginf(d, out=out)
    assert torch.equal(out.cpu(), torch.isneginf(x))
    v = offset_view(x)
    assert torch.equal(torch.isneginf(v).cpu(), torch.isneginf(v.cpu()))
    if dtype == torch.float32:  # isfinite of 16-bit types is composite too
        no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_linalg_vector_norm(dtype):
    x = torch.randn(6, 33, 40).to(dtype)
    d = x.to("spyre")
    tol = dict(rtol=2e-2, atol=1e-2) if dtype != torch.float32 else dict(rtol=1e-5, atol=1e-5)
    for ord in [2, 1, math.inf, -math.inf]:
        for dim in [None, -1, (0, 2)]:
            for keepdim in [False, True]:
                got = torch.linalg.vector_norm(d, ord, dim=dim, keepdim=keepdim)
                ref = torch.linalg.vector_norm(x.float(), ord, dim=dim, keepdim=keepdim)
                assert got.dtype == dtype
                torch.testing.assert_close(got.cpu().float(), ref, **tol)
    got = torch.linalg.vector_norm(d, dim=-1, dtype=torch.float32)
    torch.testing.assert_close(got.cpu(), torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32),
                               **tol)
    e = F.normalize(d.float(), p=2, dim=-1)
    torch.testing.assert_close(e.cpu(), F.normalize(x.float(), p=2, dim=-1), rtol=1e-5,
                               atol=1e-5)
    no_fallbacks()


def test_vector_norm_of_other_orders_falls_back_counted():
    x = torch.randn(4, 7)
    got = torch.linalg.vector_norm(x.to("spyre"), 3, dim=-1)
    torch.testing.assert_close(got.cpu(), torch.linalg.vector_norm(x, 3, dim=-1))
    assert "aten::linalg_vector_norm.out" in torch.spyre.fallback_stats()
