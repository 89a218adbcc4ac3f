"""mm, bmm, addmm, linear, matmul on the device against CPU fp32: odd sizes,
transposed and offset operands, broadcast batches, zero-size, each dtype,
no CPU fallback. Tolerances: ops_testing.TOL (one or two ulps of the
result dtype, the reference computed in fp32 from the same inputs)."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, assert_matches, no_fallbacks, offset_view, rand


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


def ref(fn, *tensors):
    return fn(*(t.float() for t in tensors))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(37, 75, 101), (1, 130, 3), (70, 300, 65)])
def test_mm_odd_sizes(dtype, m, k, n):
    a, b = rand((m, k), dtype), rand((k, n), dtype)
    got = torch.mm(a.to("spyre"), b.to("spyre"))
    assert got.dtype == dtype and got.shape == (m, n)
    assert_matches(got, ref(torch.mm, a, b), dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_transposed_and_offset_operands(dtype):
    a, b = rand((45, 33), dtype), rand((29, 33), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    assert_matches(x @ y.t(), ref(lambda p, q: p @ q.t(), a, b), dtype)
    assert_matches(y.t().t() @ x.t(), ref(lambda p, q: q @ p.t(), a, b), dtype)
    c = rand((40, 33), dtype)
    assert_matches(offset_view(c) @ y.t(), ref(lambda p, q: p @ q.t(), c, b),
                   dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_alpha_beta_and_broadcast_bias(dtype):
    a, b = rand((21, 40), dtype), rand((40, 17), dtype)
    bias_row, bias_full = rand((17,), dtype), rand((21, 17), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    assert_matches(torch.addmm(bias_row.to("spyre"), x, y),
                   ref(torch.addmm, bias_row, a, b), dtype)
    got = torch.addmm(bias_full.to("spyre"), x, y, beta=-0.5, alpha=2.0)
    want = ref(lambda c, p, q: torch.addmm(c, p, q, beta=-0.5, alpha=2.0),
               bias_full, a, b)
    assert_matches(got, want, dtype, scale=2)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm_and_batched_matmul(dtype):
    a, b = rand((5, 13, 20), dtype), rand((5, 20, 11), dtype)
    assert_matches(torch.bmm(a.to("spyre"), b.to("spyre")), ref(torch.bmm, a, b),
                   dtype)
    q = rand((2, 4, 9, 32), dtype)
    got = q.to("spyre") @ q.to("spyre").transpose(-2, -1)
    assert_matches(got, ref(lambda p: p @ p.transpose(-2, -1), q), dtype)
    w = rand((20, 7), dtype)  # broadcast over the batch
    assert_matches(a.to("spyre") @ w.to("spyre"), ref(torch.matmul, a, w), dtype)
    v = rand((20,), dtype)  # matrix-vector
    assert_matches(a.to("spyre") @ v.to("spyre"), ref(torch.matmul, a, v), dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_on_a_transposed_three_dim_input(dtype):
    # Mamba's x_proj(hidden_states.transpose(1, 2)): [B, L, K] stored as
    # [B, K, L]; read as one transposed matrix its rows ran over B and K
    # together ("matmul shapes disagree", 6 sweep architectures).
    h, w, b = rand((2, 128, 8), dtype), rand((40, 128), dtype), rand((40,), dtype)
    got = F.linear(h.to("spyre").transpose(1, 2), w.to("spyre"), b.to("spyre"))
    assert_matches(got, ref(lambda p, q, c: F.linear(p.transpose(1, 2), q, c), h, w, b), dtype)
    got = h.to("spyre").transpose(1, 2) @ w.to("spyre").t()
    assert_matches(got, ref(lambda p, q: p.transpose(1, 2) @ q.t(), h, w), dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm(dtype):
    # BLOOM's ALiBi scores: baddbmm(alibi, q, k^T, beta=1, alpha=1/sqrt(d))
    a, b = rand((6, 9, 16), dtype), rand((6, 16, 70), dtype)
    alibi = rand((6, 1, 70), dtype)  # broadcast over the rows
    with torch.spyre.strict():
        got = torch.baddbmm(alibi.to("spyre"), a.to("spyre"), b.to("spyre"),
                            beta=1.0, alpha=0.25)
        assert_matches(got, ref(lambda c, p, q: torch.baddbmm(c, p, q, beta=1.0, alpha=0.25),
                                alibi, a, b), dtype)
        full = rand((6, 9, 70), dtype)
        want = ref(lambda c, p, q: torch.baddbmm(c, p, q, beta=-0.5, alpha=2.0), full, a, b)
        out = torch.empty(0, dtype=dtype).to("spyre")
        torch.baddbmm(full.to("spyre"), a.to("spyre"), b.to("spyre"), beta=-0.5, alpha=2.0,
                      out=out)
        assert_matches(out, want, dtype, scale=2)
        inplace = full.to("spyre")  # baddbmm_: out is self, as addmm_
        inplace.baddbmm_(a.to("spyre"), b.to("spyre"), beta=-0.5, alpha=2.0)
        assert_matches(inplace, want, dtype, scale=2)
        # beta=0 ignores self, NaN included
        nan = torch.full((6, 9, 70), float("nan"), dtype=dtype)
        got = torch.baddbmm(nan.to("spyre"), offset_view(a), b.to("spyre"), beta=0)
        assert_matches(got, ref(torch.bmm, a, b), dtype)
        factor = a.to("spyre")
        with pytest.raises(RuntimeError, match="unsupported operation|shares memory"):
            torch.baddbmm(full.to("spyre"), factor, b.to("spyre"), out=factor)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_on_three_dim_input(dtype):
    x, w, b = rand((2, 9, 40), dtype), rand((24, 40), dtype), rand((24,), dtype)
    got = F.linear(x.to("spyre"), w.to("spyre"), b.to("spyre"))
    assert got.shape == (2, 9, 24)
    assert_matches(got, ref(F.linear, x, w, b), dtype)
    assert_matches(F.linear(x.to("spyre"), w.to("spyre")), ref(F.linear, x, w),
                   dtype)
    no_fallbacks()


def test_zero_size_and_empty_k():
    a, b = torch.randn(0, 5), torch.randn(5, 3)
    assert torch.mm(a.to("spyre"), b.to("spyre")).shape == (0, 3)
    c = torch.mm(torch.randn(4, 0).to("spyre"), torch.randn(0, 3).to("spyre"))
    assert torch.equal(c.cpu(), torch.zeros(4, 3))


def test_mismatched_shapes_raise_like_cpu():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(torch.randn(3, 4).to("spyre"), torch.randn(5, 2).to("spyre"))


def test_linear_keeps_autograd_when_grad_is_needed():
    w = torch.randn(6, 5).to("spyre").requires_grad_()
    y = F.linear(torch.randn(3, 5).to("spyre"), w)
    assert y.grad_fn is not None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shapes", [((2, 3, 1, 1), (2, 3, 1, 16)), ((2, 3, 5, 1), (2, 3, 1, 1)),
                                    ((4, 1), (1, 7)), ((2, 5, 1), (1, 6))])
def test_products_over_one_k_are_outer_products(dtype, shapes):
    # K == 1 with a [.., 1, 1] operand (attention over a single key) asserted
    # in the operand analysis; each result is one product, rounded once
    sa, sb = shapes
    a, b = torch.randn(sa).to(dtype), torch.randn(sb).to(dtype)
    with torch.spyre.strict():
        got = a.to("spyre") @ b.to("spyre")
        view = a.to("spyre").transpose(-1, -2).transpose(-1, -2) @ b.to("spyre")
    want = (a.float() @ b.float()).to(dtype)
    assert torch.equal(got.cpu(), want) and torch.equal(view.cpu(), want)
    bias = torch.randn(sb[-1]).to(dtype)
    if len(sa) == 2:
        got = torch.addmm(bias.to("spyre"), a.to("spyre"), b.to("spyre"), beta=0.5, alpha=2.0)
        want = torch.addmm(bias.float(), a.float(), b.float(), beta=0.5, alpha=2.0).to(dtype)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
