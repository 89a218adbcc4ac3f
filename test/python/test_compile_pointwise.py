"""torch.compile on spyre: pointwise kernels (fused chains, broadcasting,
layouts, dtypes) run as device programs."""

import pytest
import torch
import torch.nn.functional as F

from compile_util import POINTWISE_TOL, compile_and_compare
from torch_spyre._inductor import runtime, scheduling

h = torch.float16


def test_fused_chain_is_one_device_program():
    x, y = torch.randn(64, 200, dtype=h), torch.randn(200, dtype=h)
    compile_and_compare(lambda a, b: torch.relu(a * 2.0 + b).sigmoid() - 0.5, x, y,
                        expect_kernels=1)


@pytest.mark.parametrize("shape_a,shape_b", [
    ((33, 70), (70,)),         # row broadcast
    ((33, 70), (33, 1)),       # column broadcast (walks the other stick dim)
    ((4, 33, 70), (33, 70)),   # leading broadcast
    ((4, 33, 70), (4, 1, 70)),
    ((4, 1, 70), (1, 33, 1)),  # both broadcast
    ((5000,), (1,)),           # 1-D, split across cores
])
def test_broadcasting(shape_a, shape_b):
    a, b = torch.randn(shape_a, dtype=h), torch.randn(shape_b, dtype=h)
    compile_and_compare(lambda x, y: (x - y) * torch.tanh(x), a, b)


@pytest.mark.parametrize("fn", [
    F.gelu, F.silu, torch.exp, torch.sigmoid, torch.abs, torch.rsqrt,
    lambda x: torch.clamp(x, -0.5, 0.5), lambda x: torch.where(x > 0, x, 0.1 * x),
    lambda x: x.pow(2) + 1.0 / (x.abs() + 1.0),
], ids=["gelu", "silu", "exp", "sigmoid", "abs", "rsqrt", "clamp", "where", "pow_recip"])
def test_unary_families(fn):
    x = torch.randn(48, 130, dtype=h)
    if fn is torch.rsqrt:
        x = x.abs() + 0.5
    compile_and_compare(fn, x)


def test_transposed_input():
    a, b = torch.randn(70, 33, dtype=h), torch.randn(33, 70, dtype=h)
    compile_and_compare(lambda x, y: x.t() + y, a, b)


def test_float32_and_bfloat16():
    compile_and_compare(lambda x: x * 3.0 + 1.0, torch.randn(40, 50))
    compile_and_compare(lambda x: x * 3.0 + 1.0, torch.randn(40, 50, dtype=torch.bfloat16),
                        tol=dict(atol=2e-2, rtol=2e-2))


def test_multiple_outputs_and_reused_intermediates():
    x = torch.randn(64, 96, dtype=h)
    compile_and_compare(lambda a: (a.exp(), a.exp() * a, torch.tanh(a)), x)


def test_kernel_records_cores_and_blocks():
    scheduling.compiled_kernels.clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: a * 2.0, torch.randn(512, 256, dtype=h))
    (info,) = scheduling.compiled_kernels.values()
    assert info["cores"] == 32
    assert info["double_buffered"]


@pytest.mark.parametrize("shape,other", [((1_000_003,), (1,)), ((3, 100_000), (100_000,)),
                                         ((2, 50_000), (2, 1)), ((40_000,), (40_000,))],
                         ids=["1d_1M_ragged", "long_rows", "long_rows_col_bcast", "1d_40k"])
def test_long_rows_split_into_chunks(shape, other):
    scheduling.compiled_kernels.clear()
    x, y = torch.randn(shape, dtype=h), torch.randn(other, dtype=h)
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a, b: torch.sigmoid(a * b) + a, x, y, expect_kernels=1)
    (info,) = scheduling.compiled_kernels.values()
    assert info["cores"] >= 10  # the long rows spread over the cores


@pytest.mark.parametrize("fn,shape", [
    (lambda x: x + torch.arange(x.shape[-1], device=x.device, dtype=x.dtype), (37, 70)),
    (lambda x: torch.where(torch.arange(x.shape[0], device=x.device)[:, None]
                           >= torch.arange(x.shape[1], device=x.device), x, 0.0), (64, 64)),
    (lambda x: x * torch.arange(x.shape[1], device=x.device, dtype=x.dtype)[:, None],
     (3, 20, 50)),
], ids=["col_index", "causal_mask", "row_index_under_outer"])
def test_index_expressions(fn, shape):
    # values of the loop indices (iota tiles): along cols, rows and both
    compile_and_compare(fn, torch.randn(shape, dtype=h), expect_kernels=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_fused_chain_rounds_once_at_its_end(dtype):
    # exp(x - y) into a 16-bit output: the rounding belongs to exp's result,
    # never to the difference it reads (the same bits as the fp32 kernel's
    # result rounded)
    x, y = torch.randn(64, 130), torch.randn(64, 130) * 1e-2
    # differences exactly between two 16-bit values: rounded, exp moves
    x[0, :4], y[0, :4] = 8.0078125, 0.00390625
    x16, y16 = x.to(dtype), y.to(dtype)
    fn = lambda a, b: torch.exp(a - b)  # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="spyre")(x16.to("spyre"), y16.to("spyre")).cpu()
    torch._dynamo.reset()
    wide = torch.compile(fn, backend="spyre")(x16.float().to("spyre"), y16.float().to("spyre"))
    assert torch.equal(got, wide.cpu().to(dtype))


def _repeat_kv(x, n_rep):
    # transformers' repeat_kv (grouped-query attention): kv head h // n_rep
    b, heads, s, d = x.shape
    return x[:, :, None].expand(b, heads, n_rep, s, d).reshape(b, heads * n_rep, s, d)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("fn", [
    lambda k: _repeat_kv(k, 4) * 2.0,  # FloorDiv(head, 4)
    # the heads tiled 3 times: ModularIndexing(head, 1, 2)
    lambda k: k[:, None].expand(2, 3, 2, 5, 64).reshape(2, 6, 5, 64) + 1.0,
    # tiled and repeated: ModularIndexing(head, 2, 2), cuts at 2 and 4 of 12
    lambda k: k[:, None, :, None].expand(2, 3, 2, 2, 5, 64).reshape(2, 12, 5, 64) - 1.0,
], ids=["repeat_kv", "tiled", "tiled_repeated"])
def test_divided_head_index_is_a_device_program(fn, dtype):
    # the kv head of an outer var divided (or taken modulo) is affine in
    # the var's digits: one device program, no host kernel, exact
    k = torch.randn(2, 2, 5, 64, dtype=dtype)
    runtime.reset_stats()
    torch._dynamo.reset()
    with torch.spyre.strict():
        out = torch.compile(fn)(k.to("spyre"))
    assert runtime.stats()["host_kernels"] == 0
    assert torch.equal(out.cpu(), fn(k))


def _rope_cos_sin(pos, inv_freq, dtype):
    # transformers' rotary embedding: cos/sin of cat((freqs, freqs), -1)
    freqs = pos[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


@pytest.mark.parametrize("head_dim,dtype,host_kernels", [
    (128, torch.float16, 0),   # each half a whole stick: a device program
    (64, torch.float32, 0),
    (64, torch.float16, 0),    # half a stick: masked stores of each half
    (32, torch.float16, 0),    # a quarter
])
def test_rope_cos_sin_of_repeated_halves(head_dim, dtype, host_kernels):
    # the col var read modulo head_dim / 2 splits into a col var of one half
    # and an outer var over the halves
    pos = torch.arange(7)[None].expand(2, 7).contiguous()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    runtime.reset_stats()
    torch._dynamo.reset()
    with torch.spyre.strict():
        out = torch.compile(_rope_cos_sin)(pos.to("spyre"), inv_freq.to("spyre"), dtype)
    assert runtime.stats()["host_kernels"] == host_kernels
    for o, r in zip(out, _rope_cos_sin(pos, inv_freq, dtype)):
        torch.testing.assert_close(o.cpu(), r, **POINTWISE_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("shape,fn", [
    ((300, 70), lambda a: a.t().contiguous()),
    ((64, 4096), lambda a: a.t().contiguous()),            # few rows: column loads
    ((3, 130, 70), lambda a: a.transpose(1, 2).contiguous()),
    ((2, 3, 40, 65), lambda a: a.permute(0, 1, 3, 2).contiguous()),
    ((9, 200), lambda a: a[1:, 64:].t().contiguous()),       # a view, offset by sticks
], ids=["2d", "few_rows", "batched", "permuted", "view"])
def test_a_compiled_transpose_is_the_relayout_program(dtype, shape, fn):
    # A kernel that only transposes becomes the re-layout program the eager
    # copies use (the transpose pipeline), exact against the CPU; one that
    # also computes stays a loop kernel.
    x = torch.randn(*shape).to(dtype)
    scheduling.compiled_kernels.clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        out, _ = compile_and_compare(fn, x, tol=dict(atol=0, rtol=0))
    assert torch.equal(out.cpu(), fn(x))
    assert [k.get("kind") for k in scheduling.compiled_kernels.values()] == ["restickify"]
    scheduling.compiled_kernels.clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: fn(a) * 2, x, tol=dict(atol=0, rtol=0))
    assert "restickify" not in [k.get("kind") for k in scheduling.compiled_kernels.values()]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_transposes_into_part_of_a_buffer_keep_its_other_elements(dtype):
    # cat of two transposes: each lands in part of every row of one buffer
    # (100 columns: 64-element sticks shared by both), so neither may be
    # stored as whole sticks by the re-layout program.
    a, b = torch.randn(100, 70).to(dtype), torch.randn(37, 70).to(dtype)
    torch._dynamo.reset()
    scheduling.compiled_kernels.clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        f = torch.compile(lambda x, y: torch.cat([x.t(), y.t()], 1) + 0)
        out = f(a.to("spyre"), b.to("spyre"))
    assert torch.equal(out.cpu(), torch.cat([a.t(), b.t()], 1))
    assert "restickify" not in [k.get("kind") for k in scheduling.compiled_kernels.values()]


@pytest.mark.parametrize("fn,shape", [
    # rows read 8 at a time from a transposed layout (a Mamba-style
    # [b, d, n] read as [b, n, d] in blocks): 1024 * (r // 8) + r % 8
    (lambda x: x.view(2, 16, 8, 8).transpose(2, 3).reshape(2, 128, 8) * 3, (2, 16, 64)),
    # rows of 9 in rows of 18 (a [16, 18] buffer read as [32, 9]): the row
    # var wraps into the outer dim every 2 rows
    (lambda x: (x.exp().reshape(32, 9) + 1).sin(), (16, 18)),
], ids=["rows_in_blocks", "half_rows"])
def test_row_var_cut_into_digits_is_a_device_program(fn, shape):
    x = torch.randn(*shape, dtype=torch.float32)
    runtime.reset_stats()
    compile_and_compare(fn, x, tol=POINTWISE_TOL)
    assert runtime.stats()["host_kernels"] == 0
