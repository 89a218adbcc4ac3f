"""Floating functions the vector unit has no op for, as chains of its ops
(kernels/src/formulas.cpp), against the CPU in strict mode (a CPU fallback
raises): log1p, expm1, softplus, log_sigmoid, acos, erfinv, the rounding
functions ceil, trunc, round and frac; and integer floor_divide. Special values as the CPU gives them, relative accuracy near
zero (where log1p and expm1 exist for), every form (functional, in place,
out=), ragged shapes, views."""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, TOL, assert_matches, offset_view

INF, NAN = math.inf, math.nan


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


def softplus_2_5(x):
    return F.softplus(x, beta=2.0, threshold=5.0)


def log_sigmoid(x):
    return F.logsigmoid(x)


# (function, inputs over its domain)
FUNCTIONS = {
    "log1p": (torch.log1p, lambda s: torch.rand(s) * 20 - 0.999),
    "expm1": (torch.expm1, lambda s: torch.randn(s) * 8),
    "softplus": (F.softplus, lambda s: torch.randn(s) * 15),
    "softplus_beta": (softplus_2_5, lambda s: torch.randn(s) * 5),
    "log_sigmoid": (log_sigmoid, lambda s: torch.randn(s) * 15),
    "acos": (torch.acos, lambda s: torch.rand(s) * 2 - 1),
    "erfinv": (torch.erfinv, lambda s: torch.rand(s) * 2 - 1),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_against_the_cpu(name, dtype):
    fn, domain = FUNCTIONS[name]
    x = domain((5, 67)).to(dtype)
    # The CPU computes 16-bit inputs in fp32 and rounds once, as the device.
    assert_matches(fn(x.to("spyre")), fn(x.float()), dtype)
    assert fn(x.to("spyre")).dtype == dtype
    assert_matches(fn(offset_view(x)), fn(x.float()), dtype)  # offset, strided
    assert_matches(fn(x.to("spyre").t()), fn(x.float()).t(), dtype)  # transposed
    assert fn(torch.empty(0, 3, dtype=dtype).to("spyre")).shape == (0, 3)


@pytest.mark.parametrize("name", ["log1p", "expm1", "acos", "erfinv"])
def test_in_place_and_out(name):
    fn = getattr(torch, name)
    x = FUNCTIONS[name][1]((4, 45))
    want = fn(x)
    y = x.clone().to("spyre")
    getattr(y, name + "_")()
    assert_matches(y, want, torch.float32)
    out = torch.empty(4, 45).to("spyre")
    fn(x.to("spyre"), out=out)
    assert_matches(out, want, torch.float32)
    out16 = torch.empty(4, 45, dtype=torch.float16).to("spyre")  # cast on the way out
    fn(x.to("spyre"), out=out16)
    assert_matches(out16, want, torch.float16)
    # out may be the input itself (elementwise, as the CPU allows)
    z = x.clone().to("spyre")
    fn(z, out=z)
    assert_matches(z, want, torch.float32)
    # integer inputs compute in the default float dtype
    ints = torch.tensor([0, 1, -1, 2])
    got = fn(ints.to("spyre"))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), fn(ints), equal_nan=True)


def test_softplus_and_log_sigmoid_forms():
    x = torch.randn(3, 70) * 10
    out = torch.empty(3, 70).to("spyre")
    F.softplus(x.to("spyre"), 0.5, 3.0)
    torch.ops.aten.softplus.out(x.to("spyre"), 0.5, 3.0, out=out)
    assert_matches(out, F.softplus(x, 0.5, 3.0), torch.float32)
    output, buffer = torch.ops.aten.log_sigmoid_forward(x.to("spyre"))
    want_output, want_buffer = torch.ops.aten.log_sigmoid_forward(x)
    assert_matches(output, want_output, torch.float32)
    assert_matches(buffer, want_buffer, torch.float32)
    o, b = torch.empty(0).to("spyre"), torch.empty(0).to("spyre")
    torch.ops.aten.log_sigmoid_forward.output(x.to("spyre"), output=o, buffer=b)
    assert_matches(o, want_output, torch.float32)
    assert_matches(b, want_buffer, torch.float32)


def relative_error(got, want):
    return ((got.cpu().double() - want.double()).abs() / want.double().abs()).max().item()


def test_accuracy_near_zero():
    # log1p and expm1 exist for their small arguments: relative accuracy.
    tiny = torch.tensor([1e-30, -1e-20, 3e-12, -7e-8, 1e-6, -2e-4, 0.01, 0.3])
    for fn in [torch.log1p, torch.expm1]:
        assert relative_error(fn(tiny.to("spyre")), fn(tiny.double())) < 1e-6, fn
    # softplus far below its threshold: exp(x) (tiny, positive, not 0)
    low = torch.tensor([-80.0, -50.0, -30.0, -17.0])
    assert relative_error(F.softplus(low.to("spyre")), F.softplus(low.double())) < 1e-5
    assert relative_error(F.logsigmoid(-low.to("spyre")), F.logsigmoid(-low.double())) < 1e-5


SPECIALS = {
    "log1p": [-1.0, -1.5, INF, -INF, NAN, -0.0, 0.0, 1e30],
    "expm1": [INF, -INF, NAN, -0.0, 0.0, 100.0, -100.0, 88.0],
    "softplus": [INF, -INF, NAN, 0.0, 20.0, 20.001, 19.999, -0.0],
    "log_sigmoid": [INF, -INF, NAN, 0.0, -0.0, 100.0, -100.0],
    "acos": [1.0, -1.0, 0.0, -0.0, 0.5, -0.5, 0.5000001, 1.5, -INF, NAN],
    "erfinv": [1.0, -1.0, 0.0, -0.0, 0.7, -0.7, 0.70001, 0.9999, 1.5, -2.0, NAN],
}


@pytest.mark.parametrize("name", SPECIALS)
def test_special_values(name):
    fn = FUNCTIONS[name][0]
    x = torch.tensor(SPECIALS[name])
    got, want = fn(x.to("spyre")).cpu(), fn(x)
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.equal(got.isinf(), want.isinf()), (got, want)
    finite = want.isfinite()
    torch.testing.assert_close(got[finite], want[finite], rtol=2e-6, atol=1e-7)
    assert torch.equal(torch.signbit(got[want == 0]), torch.signbit(want[want == 0]))


ROUNDING = {"ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round,
            "frac": torch.frac}
# Ties both ways, either side of zero (signed zero results), past 2^23 where
# every fp32 is an integer, the largest values, non-finite values.
ROUNDING_VALUES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.4, -0.4, 0.6, -0.6, 0.0, -0.0,
                   1.0, -1.0, 3.7, -3.7, 1023.5, -1023.25, 8388607.5, -8388609.0,
                   6.5e4, -6.5e4, 3e38, -3e38, 1e-30, -1e-30, INF, -INF, NAN]


def bits_equal(got, want):
    """Equal bit for bit, NaN to NaN and -0 to -0."""
    both_nan = got.isnan() & want.isnan()
    same = (got == want) & (torch.signbit(got) == torch.signbit(want))
    return bool((both_nan | same).all())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ROUNDING)
def test_rounding_functions_are_exact(name, dtype):
    fn = ROUNDING[name]
    special = torch.tensor(ROUNDING_VALUES).to(dtype)
    spread = (torch.randn(5, 67) * 40).to(dtype)
    for x in (special, spread):
        got = fn(x.to("spyre"))
        assert got.dtype == dtype
        assert bits_equal(got.cpu(), fn(x)), (x, got.cpu(), fn(x))
    assert bits_equal(fn(offset_view(spread)).cpu(), fn(spread))
    assert bits_equal(fn(spread.to("spyre").t()).cpu(), fn(spread).t())
    y = spread.to("spyre")
    getattr(y, name + "_")()
    assert bits_equal(y.cpu(), fn(spread))
    out = torch.empty(5, 67, dtype=dtype).to("spyre")
    fn(spread.to("spyre"), out=out)
    assert bits_equal(out.cpu(), fn(spread))


def test_rounding_in_a_compiled_graph_is_the_eager_kernel():
    x = torch.tensor(ROUNDING_VALUES).reshape(1, -1).repeat(3, 1)
    x[1:] = torch.randn(2, x.shape[1]) * 30

    def f(t):
        return torch.round(t) + torch.trunc(t) * 2 + torch.ceil(t) * 3

    from torch_spyre._inductor import runtime
    compiled = torch.compile(f, backend="spyre")
    before = runtime.stats()["host_kernels"]
    assert bits_equal(compiled(x.to("spyre")).cpu(), f(x.to("spyre")).cpu())
    assert bits_equal(compiled(x.to("spyre")).cpu(), f(x))
    assert runtime.stats()["host_kernels"] == before  # all of it on the device


INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_floor_divide_of_integers(dtype):
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (6, 45), dtype=dtype)
    b = torch.randint(1, 9, (6, 45), dtype=dtype)
    if dtype != torch.uint8:
        b[::2] = -b[::2]  # negative divisors round toward -inf too
    x, y = a.to("spyre"), b.to("spyre")
    assert torch.equal((x // y).cpu(), a // b)
    assert torch.equal((x // 3).cpu(), a // 3)
    assert torch.equal(torch.floor_divide(offset_view(a), 7).cpu(), a // 7)
    assert torch.equal((x // y[0]).cpu(), a // b[0])  # broadcast
    z = a.clone().to("spyre")
    z //= y
    assert torch.equal(z.cpu(), a // b)
    out = torch.empty(0, dtype=dtype).to("spyre")
    torch.floor_divide(x, y, out=out)
    assert torch.equal(out.cpu(), a // b)
    torch.floor_divide(x, y, out=x)  # out is an input: elementwise, as on the CPU
    assert torch.equal(x.cpu(), a // b)


def test_floor_divide_of_mixture_of_experts_pairs():
    pairs = torch.randperm(32)
    assert torch.equal((pairs.to("spyre") // 2).cpu(), pairs // 2)
    big = torch.tensor([2**40 + 7, -(2**50) - 3])
    assert torch.equal((big.to("spyre") // 3).cpu(), big // 3)  # all 64 bits
    assert torch.floor_divide(torch.empty(0, dtype=torch.long).to("spyre"), 2).shape == (0,)


def test_floor_divide_by_zero_raises():
    with pytest.raises(RuntimeError, match="division by zero"):
        (torch.tensor([4, 5]).to("spyre") // torch.tensor([1, 0]).to("spyre")).cpu()


@pytest.mark.parametrize("dtype", INTS[:3] + FLOATS, ids=str)
def test_div_with_rounding_modes(dtype):
    # JetMoE: token = pair.div(top_k, rounding_mode="trunc")
    if dtype.is_floating_point:
        a, b = (torch.randn(6, 45) * 20).to(dtype), (torch.randn(6, 45) * 3).to(dtype)
        a[0, :4] = torch.tensor([INF, -INF, NAN, -0.0])
        modes = ["trunc"]  # floor: the CPU's fmod formula (a counted fallback)
    else:
        a = torch.randint(-100, 100, (6, 45), dtype=dtype)
        b = torch.randint(1, 9, (6, 45), dtype=dtype)
        b[::2] = -b[::2]
        modes = ["trunc", "floor"]
    x, y = a.to("spyre"), b.to("spyre")
    for mode in modes:
        want = torch.div(a, b, rounding_mode=mode)
        got = torch.div(x, y, rounding_mode=mode)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(x.div(3, rounding_mode=mode).cpu(),
                                   a.div(3, rounding_mode=mode), equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(torch.div(offset_view(a), y, rounding_mode=mode).cpu(),
                                   want, equal_nan=True, rtol=0, atol=0)
        out = torch.empty(0, dtype=dtype).to("spyre")
        torch.div(x, y, rounding_mode=mode, out=out)
        torch.testing.assert_close(out.cpu(), want, equal_nan=True, rtol=0, atol=0)
        z = x.clone()
        z.div_(y, rounding_mode=mode)
        torch.testing.assert_close(z.cpu(), want, equal_nan=True, rtol=0, atol=0)
    # trunc of negative quotients keeps -0.0, as on the CPU
    if dtype.is_floating_point:
        small = torch.tensor([-0.5, 0.5, -3.5], dtype=dtype)
        got = small.to("spyre").div(2, rounding_mode="trunc").cpu()
        assert torch.equal(torch.signbit(got), torch.signbit(small.div(2, rounding_mode="trunc")))
    with pytest.raises(RuntimeError, match="rounding_mode"):
        torch.div(x, y, rounding_mode="round")
