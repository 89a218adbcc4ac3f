"""torch.compile on spyre: reductions along every dim, and the fused
normalisations (softmax, layer_norm, rms_norm) as single device programs."""

import pytest
import torch
import torch.nn.functional as F

from compile_util import NORM_TOL, REDUCTION_TOL, compile_and_compare

h = torch.float16


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("op", ["sum", "amax", "amin", "mean"])
def test_reduction_along_every_dim(op, dim):
    x = torch.randn(6, 33, 70, dtype=h)
    compile_and_compare(lambda a: getattr(a, op)(dim), x, tol=REDUCTION_TOL)


def test_keepdim_and_epilogue_fuse():
    x = torch.randn(64, 300, dtype=h)
    compile_and_compare(lambda a: a - a.mean(-1, keepdim=True), x, tol=REDUCTION_TOL,
                        expect_kernels=1)


@pytest.mark.parametrize("dim", [0, -1])
def test_softmax(dim):
    x = torch.randn(96, 200, dtype=h)
    compile_and_compare(lambda a: torch.softmax(a, dim), x, tol=NORM_TOL)


def test_softmax_is_one_kernel():
    compile_and_compare(lambda a: torch.softmax(a, -1), torch.randn(128, 256, dtype=h),
                        tol=NORM_TOL, expect_kernels=1)


def test_layer_norm():
    x = torch.randn(2, 40, 96, dtype=h)
    w, b = torch.randn(96, dtype=h), torch.randn(96, dtype=h)
    compile_and_compare(lambda a, w_, b_: F.layer_norm(a, (96,), w_, b_), x, w, b, tol=NORM_TOL,
                        expect_kernels=1)


def test_rms_norm():
    x, w = torch.randn(50, 128, dtype=h), torch.randn(128, dtype=h)

    def rms(a, w_):
        return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w_
    compile_and_compare(rms, x, w, tol=NORM_TOL, expect_kernels=1)


def test_causal_mask_softmax():
    def masked(a):
        n = a.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=a.device).triu(1)
        return a.masked_fill(mask, float("-inf")).softmax(-1)
    compile_and_compare(masked, torch.randn(64, 64, dtype=h), tol=NORM_TOL)


def test_argmax():
    x = torch.randn(40, 77, dtype=h)
    compiled = torch.compile(lambda a: a.argmax(-1))
    assert torch.equal(compiled(x.to("spyre")).cpu(), x.argmax(-1))


@pytest.mark.parametrize("fn", [
    lambda a: a.sum(), lambda a: a.mean((1, 2)), lambda a: a.amax((0, 2)),
    lambda a: a.var((1, 2)), lambda a: ((a - 0.5) ** 2).mean(),
], ids=["sum_all", "mean_12", "amax_02", "var_12", "mse"])
def test_reduction_over_several_dims(fn):
    compile_and_compare(fn, torch.randn(6, 33, 70, dtype=h), tol=REDUCTION_TOL)


@pytest.mark.parametrize("op", ["sum", "amax", "amin"])
def test_full_reduction_spreads_over_cores_and_combines_on_the_ring(op):
    from torch_spyre._inductor import scheduling
    scheduling.compiled_kernels.clear()
    x = torch.randn(256, 33, 70, dtype=h)
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: getattr(a, op)(), x, tol=dict(atol=0.5, rtol=1e-2),
                            expect_kernels=1)
    (info,) = scheduling.compiled_kernels.values()
    assert info["cores"] == 32 and info["cross_core_reduction"]
    assert torch.spyre.last_launch_stats()["ring_bytes"] > 0


@pytest.mark.parametrize("shape", [(100, 300), (4, 7, 90)])
def test_pointwise_on_reduced_rows_fuses_into_the_reduction(shape):
    # mean's division by the count, var's, F.normalize's clamp: pointwise
    # nodes over a reduction's kept dims run on its reduced rows in one
    # program
    x = torch.randn(shape).half()
    for fn in (lambda x: x.mean(-1), lambda x: x.var(-1),
               lambda x: torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6),
               lambda x: torch.nn.functional.normalize(x, dim=-1)):
        compile_and_compare(fn, x, tol=REDUCTION_TOL, expect_kernels=1)
