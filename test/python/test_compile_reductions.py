"""torch.compile on spyre: reductions along every dim, and the fused
normalisations (softmax, layer_norm, rms_norm) as single device programs."""

import pytest
import torch
import torch.nn.functional as F

from compile_util import NORM_TOL, REDUCTION_TOL, compile_and_compare
from torch_spyre._inductor import runtime

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


def _norm_of_rotated(q, inv_freq):
    # RoPE's cos/sin of cat((freqs, freqs)) computed inside a norm over the
    # head dim (QK-norm after the rotary embedding, as nanochat, hunyuan and
    # apertus do): the reduced cols are read modulo head_dim / 2
    pos = torch.arange(q.shape[-2], device=q.device).float()
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    x = q * emb.cos() + rotated * emb.sin()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("head_dim,dtype", [(16, torch.float32), (64, h), (128, h)], ids=str)
def test_norm_over_cols_read_modulo_is_device_programs(head_dim, dtype):
    # the reduced col var splits into digits (the reduction accumulates over
    # the higher one); the scaled output runs in its own program
    q = torch.randn(2, 4, 8, head_dim, dtype=dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    runtime.reset_stats()
    compile_and_compare(_norm_of_rotated, q, inv_freq, tol=NORM_TOL)
    assert runtime.stats()["host_kernels"] == 0


def test_sum_over_cols_read_modulo_views_and_offsets():
    # the split reduction alone, over a sliced, offset input: exact order
    # aside, the CPU's sums
    base = torch.randn(3, 9, 40, dtype=torch.float32)
    table = torch.randn(8, dtype=torch.float32)

    def fn(a, t):
        x = a[1:, 1:, 8:]  # [2, 8, 32], offset by a row and a stick's part
        return (x * torch.cat((t, t, t, t))).sum(-1)
    runtime.reset_stats()
    compile_and_compare(fn, base, table, tol=REDUCTION_TOL)
    assert runtime.stats()["host_kernels"] == 0


@pytest.mark.parametrize("fn", [
    # a per-head sum of squares of [b, s, h, d] read as [b, h, s, d]: the
    # heads walk the stored sticks, so they are the rows
    lambda x: x.transpose(1, 2).pow(2).sum(-1),
    # ... and its result copied back transposed: the copy cannot share the
    # reduction's program (a transposed store), so it gets its own
    lambda x: x.transpose(1, 2).pow(2).sum(-1).transpose(1, 2).contiguous(),
], ids=["heads_on_rows", "split_after_failed_fusion"])
def test_reduction_stored_across_heads_is_device_programs(fn):
    x = torch.randn(2, 8, 4, 16, dtype=torch.float32)
    runtime.reset_stats()
    compile_and_compare(fn, x, tol=REDUCTION_TOL)
    assert runtime.stats()["host_kernels"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("fn", [
    # [b, s, h, d] heads of 16 (each a padded stick) read as [b, s, h * d]:
    # the col var walks two dims, cut into digits at each head
    lambda x, w: x.reshape(2, 8, 64) * w,
    lambda x, w: (x.reshape(2, 8, 64).pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt(),
    lambda x, w: x.reshape(2, 8, 64) * torch.rsqrt(
        x.reshape(2, 8, 64).pow(2).mean(-1, keepdim=True) + 1e-6) * w,
    # a [b, s, h, d] slice of a wider buffer (an offset view)
    lambda x, w: (x[:, :, 1:3].reshape(2, 8, 32) * w[:32]).sum(-1),
], ids=["pointwise", "reduction", "rms_norm", "slice"])
def test_cols_across_padded_heads_are_device_programs(fn, dtype):
    x = torch.randn(2, 8, 4, 16, dtype=dtype)
    w = torch.randn(64, dtype=dtype)
    runtime.reset_stats()
    compile_and_compare(fn, x, w, tol=NORM_TOL)
    assert runtime.stats()["host_kernels"] == 0


@pytest.mark.parametrize("fn", [
    lambda m: m.any(),                      # longformer's is_index_global_attn.any()
    lambda m: m.all(),
    lambda m: m.flatten().any(),
    lambda m: m[:, 1:].all(dim=(0, 2)),     # over two dims of a view, one kept
    lambda m: (m.float() > 0.5).any(),      # a computed bool
], ids=["any", "all", "flatten_any", "view_all_two_dims", "computed"])
@pytest.mark.parametrize("fill", ["random", "all_false", "all_true", "one_true"])
def test_any_and_all_over_several_dims(fn, fill):
    m = {"random": torch.rand(3, 9, 40) > 0.3, "all_false": torch.zeros(3, 9, 40, dtype=torch.bool),
         "all_true": torch.ones(3, 9, 40, dtype=torch.bool)}.get(fill)
    if m is None:
        m = torch.zeros(3, 9, 40, dtype=torch.bool)
        m[2, 8, 39] = True
    runtime.reset_stats()
    out, _ = compile_and_compare(fn, m, tol=REDUCTION_TOL)
    assert torch.equal(out.cpu(), fn(m))
    assert runtime.stats()["host_kernels"] == 0
