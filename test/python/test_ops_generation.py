"""The ops of a generation loop (transformers' generate()) on the device
against the CPU: bitwise ops on integer tensors (bit patterns, every integer
dtype, scalars, bool mixed in), integer reductions (sums into int64,
extremes, their indices), isin (eos checks) and cumsum (position ids from
the attention mask); exact for integers, views and out= included, no CPU
fallback."""

import pytest
import torch

from ops_testing import no_fallbacks, offset_view

INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


def ints(shape, dtype, lo=-100, hi=100):
    if dtype == torch.uint8:
        lo = 0
    return torch.randint(lo, hi, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_bitwise_ops_on_integers(dtype):
    a, b = ints((7, 45), dtype), ints((7, 45), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    for op in [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor]:
        assert torch.equal(op(x, y).cpu(), op(a, b)), op
        assert torch.equal(op(x, 6).cpu(), op(a, 6)), op
    assert torch.equal((~x).cpu(), ~a)
    assert torch.equal((x & y[0]).cpu(), a & b[0])  # broadcast
    no_fallbacks()


def test_bitwise_ops_mixing_bool_and_int64():
    # generate(): unfinished_sequences (int64) & ~is_done (bool)
    unfinished = torch.tensor([1, 1, 0, 1])
    done = torch.tensor([False, True, False, False])
    got = unfinished.to("spyre") & ~done.to("spyre")
    assert got.dtype == torch.int64
    assert torch.equal(got.cpu(), unfinished & ~done)
    big = torch.tensor([2**40 + 5, -(2**50) - 1])
    assert torch.equal((big.to("spyre") ^ 3).cpu(), big ^ 3)  # all 64 bits
    v = offset_view(ints((4, 40), torch.int64))
    assert torch.equal((v | 1).cpu(), v.cpu() | 1)
    out = torch.zeros(4, 40, dtype=torch.int64).to("spyre")
    torch.bitwise_and(v, 7, out=out)
    assert torch.equal(out.cpu(), v.cpu() & 7)
    no_fallbacks()


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_reductions(dtype):
    a = ints((6, 5, 70), dtype)
    x = a.to("spyre")
    for dims in [None, -1, 0, (0, 2)]:
        got = x.sum() if dims is None else x.sum(dims)
        want = a.sum() if dims is None else a.sum(dims)
        assert got.dtype == want.dtype == torch.int64
        assert torch.equal(got.cpu(), want), dims
    for op in [torch.amax, torch.amin]:
        assert torch.equal(op(x, -1).cpu(), op(a, -1))
        assert torch.equal(op(x, (0, 1), keepdim=True).cpu(), op(a, (0, 1), keepdim=True))
    assert torch.equal(x.max().cpu(), a.max()) and torch.equal(x.min().cpu(), a.min())
    assert torch.equal(x.argmax(-1).cpu(), a.argmax(-1))
    no_fallbacks()


def test_int64_sums_are_exact_past_float_precision():
    a = torch.tensor([[2**40 + 1, 2**41 + 3, -5], [7, 2**53 + 1, 1]])
    x = a.to("spyre")
    assert torch.equal(x.sum(-1).cpu(), a.sum(-1))
    assert torch.equal(x.sum(0).cpu(), a.sum(0))
    assert torch.equal(x.max().cpu(), a.max())
    assert torch.equal(x[:, :1].sum(-1).cpu(), a[:, :1].sum(-1))  # one element
    no_fallbacks()


def test_isin():
    ids = torch.randint(0, 50, (3, 20))
    eos = torch.tensor([2, 7, 11])
    x = ids.to("spyre")
    assert torch.equal(torch.isin(x, eos.to("spyre")).cpu(), torch.isin(ids, eos))
    assert torch.equal(torch.isin(x, eos.to("spyre"), invert=True).cpu(),
                       torch.isin(ids, eos, invert=True))
    assert torch.equal(torch.isin(x, eos).cpu(), torch.isin(ids, eos))  # CPU tests
    empty = torch.tensor([], dtype=torch.long)
    assert torch.equal(torch.isin(x, empty.to("spyre")).cpu(), torch.isin(ids, empty))
    out = torch.zeros(3, 20, dtype=torch.bool).to("spyre")
    torch.isin(x, eos.to("spyre"), out=out)
    assert torch.equal(out.cpu(), torch.isin(ids, eos))
    no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
def test_cumsum_of_integers_is_exact(dtype):
    mask = torch.randint(0, 2, (3, 37)).to(dtype)
    x = mask.to("spyre")
    for dim in [0, 1, -1]:
        got = torch.cumsum(x, dim)
        assert got.dtype == torch.cumsum(mask, dim).dtype
        assert torch.equal(got.cpu(), torch.cumsum(mask, dim)), dim
    # position ids as generate() builds them
    am = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    pos = am.to("spyre").long().cumsum(-1) - 1
    assert torch.equal(pos.cpu(), am.long().cumsum(-1) - 1)
    no_fallbacks()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)],
                         ids=str)
def test_cumsum_of_floats(dtype, tol):
    a = torch.randn(4, 300).to(dtype)
    got = torch.cumsum(a.to("spyre"), -1).cpu().float()
    want = torch.cumsum(a.float(), -1)
    torch.testing.assert_close(got, want.to(dtype).float(), rtol=tol, atol=tol * 10)
    v = offset_view(a)
    torch.testing.assert_close(torch.cumsum(v, 0).cpu().float(),
                               torch.cumsum(a.float(), 0).to(dtype).float(),
                               rtol=tol, atol=tol * 10)
    out = torch.empty(4, 300, dtype=dtype).to("spyre")
    torch.cumsum(a.to("spyre"), 1, out=out)
    torch.testing.assert_close(out.cpu().float(), want.to(dtype).float(),
                               rtol=tol, atol=tol * 10)
    y = a.clone().to("spyre")
    y.cumsum_(1)
    torch.testing.assert_close(y.cpu().float(), want.to(dtype).float(),
                               rtol=tol, atol=tol * 10)
    no_fallbacks()


def test_histc():
    # Mixture-of-experts routing: tokens per expert, histc of int32 ids
    # (the CPU's kernel takes no integers; the device counts them).
    ids = torch.randint(0, 8, (5, 2)).int()
    got = torch.histc(ids.to("spyre"), bins=8, min=0, max=7)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), torch.histc(ids.float(), bins=8, min=0, max=7).int())
    f = torch.randn(500)
    for bins, lo, hi in [(20, -2, 2), (10, 0, 0), (7, -0.5, 3)]:
        assert torch.equal(torch.histc(f.to("spyre"), bins, lo, hi).cpu(),
                           torch.histc(f, bins, lo, hi)), (bins, lo, hi)
    out = torch.empty(3).to("spyre")
    torch.histc(f.to("spyre"), 3, -1, 1, out=out)
    assert torch.equal(out.cpu(), torch.histc(f, 3, -1, 1))
    no_fallbacks()
