"""torch.compile on spyre with integer tensors: values beyond fp32's 2^24
(int64 positions, hashes, token ids times strides) computed exactly, as the
CPU does: arithmetic, comparisons and selects, bit patterns, reductions
(one core and across cores on the ring), int32 wrap-around, views."""

import pytest
import torch

from compile_util import compile_and_compare
from torch_spyre._inductor import runtime

EXACT = dict(atol=0, rtol=0)
BIG = [2**40 + 1, 2**53 + 3, -7, 123456789012, -(2**33) - 5, 16777217]


def big(dtype=torch.int64, n=6):
    values = torch.tensor(BIG[:n], dtype=torch.int64)
    return values if dtype == torch.int64 else values.to(dtype)


def compare(fn, *args):
    runtime.reset_stats()
    out, _ = compile_and_compare(fn, *args, tol=EXACT)
    want = fn(*args)
    for o, w in zip(out if isinstance(out, tuple) else (out,),
                    want if isinstance(want, tuple) else (want,)):
        assert o.dtype == w.dtype and torch.equal(o.cpu(), w)
    assert runtime.stats()["host_kernels"] == 0


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b,
    lambda a, b: a * b - 3,
    lambda a, b: torch.maximum(a, b) + torch.minimum(a, b),
    lambda a, b: torch.where(a > b, a, b * 2),
    lambda a, b: (-a).abs() + (a == b),
    lambda a, b: a & b | (a ^ 255),
    lambda a, b: ~a,
    lambda a, b: (a * a, a > 2**40),
], ids=["add", "mul_sub", "max_min", "where", "neg_abs_eq", "bit_and_or_xor", "bit_not",
        "square_compare"])
def test_int64_elementwise_beyond_fp32(fn):
    compare(fn, big(), torch.tensor([3, 5, 11, 987654321, 2**35, -1]))


@pytest.mark.parametrize("fn", [
    lambda a: a.sum(), lambda a: a.sum(-1), lambda a: a.amax(0), lambda a: a.amin(-1),
    lambda a: a.prod(-1), lambda a: (a * 3).sum(dim=(0, 2)),
], ids=["sum_all", "sum_rows", "amax", "amin", "prod_wraps", "sum_two_dims"])
def test_int64_reductions_exact(fn):
    # products of 7 values near 2^45 wrap around int64, on both sides alike
    gen = torch.Generator().manual_seed(0)
    compare(fn, torch.randint(-2**45, 2**45, (3, 5, 7), generator=gen))


def test_int64_sum_across_cores():
    # a full reduction long enough to spread over the ring: int64 partials
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(-2**50, 2**50, (1 << 17,), generator=gen)
    compare(lambda x: x.sum(), a)
    compare(lambda x: x.amax(), a)


def test_int32_wraps_like_the_cpu():
    a = torch.tensor([2**31 - 1, -(2**31), 2**30, 7], dtype=torch.int32)
    compare(lambda x: x + x, a)
    compare(lambda x: x * 3 + 1, a)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32], ids=str)
def test_narrow_products_wrap_before_they_are_summed(dtype):
    # (a * b) is of a's dtype and wraps there; the sum then accumulates the
    # wrapped values in int64 (an int64 product inside the fused kernel
    # would give 18242 for int8 instead of 66)
    a = torch.tensor([100, 127, 5, 90], dtype=dtype)
    b = torch.tensor([100, 1, 3, 90], dtype=dtype)
    compare(lambda x, y: (x * y).sum(), a, b)
    compare(lambda x, y: (x + y) * 2 - y, a, b)


def test_views_and_offsets():
    base = torch.arange(2**40, 2**40 + 3 * 70, dtype=torch.int64).view(3, 70)
    compare(lambda x: x[1:, 5:40] * 2 + x[:2, :35], base)
    compare(lambda x: x.t()[3:9].sum(-1), base)


def test_positions_from_arange_stay_exact():
    # an index expression beyond 2^24 (a flat position in a large tensor)
    compare(lambda x: x + torch.arange(2**25, 2**25 + x.numel(), device=x.device), big())


@pytest.mark.parametrize("fn,on_host", [
    (lambda a, b: torch.remainder(a, b), False),   # Python's sign rule, on the device
    (lambda a, b: torch.remainder(a.float(), b.float() + 0.5), False),
    (lambda a, b: a << 3, True),                   # no device shift: a counted host kernel
    (lambda a, b: a >> 2, True),
    (lambda a, b: torch.fmod(a, b), None),          # C's sign rule
], ids=["remainder", "remainder_float", "lshift", "rshift", "fmod"])
def test_division_ops_and_shifts_compile_and_match(fn, on_host):
    # the compiled path never raises on an op the eager path has
    a, b = big(), torch.tensor([3, -5, 11, 987654321, 2**35, -1])
    runtime.reset_stats()
    torch._dynamo.reset()
    got = torch.compile(fn)(a.to("spyre"), b.to("spyre"))
    want = fn(a, b)
    if want.is_floating_point():
        torch.testing.assert_close(got.cpu(), want)
    else:
        assert torch.equal(got.cpu(), want)
    if on_host is not None:
        assert (runtime.stats()["host_kernels"] > 0) == on_host


def test_an_integer_remainder_by_zero_is_an_error():
    a, b = big(n=4), torch.tensor([3, 0, 2, 1])
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="zero|divisor"):
        torch.compile(lambda x, y: x % y)(a.to("spyre"), b.to("spyre"))
        torch.spyre.synchronize()
