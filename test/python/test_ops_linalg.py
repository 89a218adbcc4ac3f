"""linalg_solve_triangular on the device (products of the Neumann series'
factors, csrc/ops/linalg.cpp) against the CPU's LAPACK solve, in strict
mode: lower/upper, unit and general diagonals, left and right, batch
broadcast, 16-bit dtypes, views, out=; the chunked gated delta rule's
(I + N) X = B with chunks of 64."""

import pytest
import torch

from ops_testing import FLOATS, TOL


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


def triangular(shape, upper, unit, gen):
    a = torch.randn(shape, generator=gen) * 0.3
    if not unit:
        a = a + torch.diag_embed(torch.rand(shape[:-1], generator=gen) + 1)
    return a.triu() if upper else a.tril()


def close(got, want, dtype):
    rtol, atol = TOL[dtype]
    scale = want.abs().max().item()
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=rtol * 4,
                               atol=atol * 4 * max(1.0, scale))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [1, 5, 33, 64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("unit", [True, False])
def test_solve_against_the_cpu(dtype, n, upper, unit):
    gen = torch.Generator().manual_seed(n)
    a = triangular((2, 3, n, n), upper, unit, gen).to(dtype)
    b = torch.randn(2, 3, n, 7, generator=gen).to(dtype)
    want = torch.linalg.solve_triangular(a.float(), b.float(), upper=upper, unitriangular=unit)
    got = torch.linalg.solve_triangular(a.to("spyre"), b.to("spyre"), upper=upper,
                                        unitriangular=unit)
    assert got.dtype == dtype
    close(got, want.to(dtype), dtype)
    # X A = B
    bt = torch.randn(2, 3, 7, n, generator=gen).to(dtype)
    want = torch.linalg.solve_triangular(a.float(), bt.float(), upper=upper, left=False,
                                         unitriangular=unit)
    got = torch.linalg.solve_triangular(a.to("spyre"), bt.to("spyre"), upper=upper,
                                        left=False, unitriangular=unit)
    close(got, want.to(dtype), dtype)


def test_gated_delta_rule_chunks_and_forms():
    # transformers' torch_chunk_gated_delta_rule: ut_system = I + strictly
    # lower attention, solved against v_beta and k_beta per chunk of 64;
    # the diagonal of the stored matrix is ignored with unitriangular=True.
    gen = torch.Generator().manual_seed(0)
    attn = torch.randn(2, 4, 1, 64, 64, generator=gen).tril(-1) * 0.1
    ut = attn + 5 * torch.eye(64)  # never read
    v = torch.randn(2, 4, 1, 64, 16, generator=gen)
    want = torch.linalg.solve_triangular(ut, v, upper=False, unitriangular=True)
    got = torch.linalg.solve_triangular(ut.to("spyre"), v.to("spyre"), upper=False,
                                        unitriangular=True)
    close(got, want, torch.float32)
    # batch broadcast, a transposed view as A, out=
    a = triangular((8, 8), False, False, gen)
    b = torch.randn(3, 8, 5, generator=gen)
    want = torch.linalg.solve_triangular(a.t(), b, upper=True)
    out = torch.empty(0).to("spyre")
    torch.linalg.solve_triangular(a.to("spyre").t(), b.to("spyre"), upper=True, out=out)
    close(out, want, torch.float32)
