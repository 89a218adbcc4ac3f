"""torch.compile on spyre: matrix products (mm, addmm, bmm and what linear and
matmul decompose to) lowered to device programs built at compile time by the
kernel library's matmul builder, loaded once and launched per call.

Tolerances (fp16 inputs scaled so outputs are O(1), fp32 accumulation, one
rounding to fp16 against an fp32 CPU reference): MATMUL_TOL below."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from compile_util import compile_and_compare
from torch_spyre._inductor import matmul as spyre_matmul
from torch_spyre._inductor import runtime, scheduling

h = torch.float16
# one fp16 rounding of an O(1) output is 2^-11 relative; K-term fp32 sums of
# fp16 products add a little more
MATMUL_TOL = dict(atol=1e-2, rtol=1e-2)


def matmul_kernels():
    return [k for k in scheduling.compiled_kernels.values() if k.get("kind") == "matmul"]


def compile_products(fn, *args, programs=1, **kwargs):
    """Compiles fn (no grad: inference graphs), checks it against the CPU and
    that it ran as `programs` device programs, `programs` of them matrix
    products built by the matmul builder, none falling back."""
    scheduling.compiled_kernels.clear()
    spyre_matmul.reset_fallback_counts()
    # caches off: the test reads what this process lowered
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        out, _ = compile_and_compare(fn, *args, tol=MATMUL_TOL, expect_kernels=programs,
                                     **kwargs)
    assert spyre_matmul.fallback_counts() == {}
    return out, matmul_kernels()


def scaled(*size, k):
    return torch.randn(*size, dtype=h) / math.sqrt(k)


@pytest.mark.parametrize("m,k,n", [(64, 128, 64), (128, 64, 256), (256, 512, 192),
                                   (50, 70, 90), (33, 129, 7), (1, 100, 65)],
                         ids=["aligned", "aligned_wide", "aligned_large", "ragged",
                              "ragged_small", "one_row"])
def test_mm(m, k, n):
    _, kernels = compile_products(lambda a, b: a @ b, scaled(m, k, k=k), torch.randn(k, n, dtype=h))
    assert len(kernels) == 1 and kernels[0]["transposed"] == [False, False]


@pytest.mark.parametrize("m,k,n", [(64, 64, 128), (40, 70, 33)], ids=["aligned", "ragged"])
def test_transposed_weight_as_linear_reads_it(m, k, n):
    # x @ w.t(): the weight [n, k] is read in place as B^T (no re-layout)
    _, kernels = compile_products(lambda x, w: x @ w.t(), scaled(m, k, k=k),
                                  torch.randn(n, k, dtype=h))
    assert kernels[0]["transposed"] == [False, True]


def test_transposed_first_operand():
    _, kernels = compile_products(lambda a, b: a.t() @ b, scaled(96, 64, k=96),
                                  torch.randn(96, 80, dtype=h))
    assert kernels[0]["transposed"] == [True, False]


@pytest.mark.parametrize("batch,m,k,n", [(4, 48, 80, 40), (3, 64, 64, 64), (5, 17, 33, 70)],
                         ids=["ragged", "aligned", "ragged_small"])
def test_bmm(batch, m, k, n):
    compile_products(torch.bmm, scaled(batch, m, k, k=k), torch.randn(batch, k, n, dtype=h))


def test_four_dim_matmul_with_transposed_operand():
    # attention scores: [b, h, s, d] @ [b, h, d, s] from a transpose
    q, k = scaled(2, 4, 16, 32, k=32), torch.randn(2, 4, 16, 32, dtype=h)
    compile_products(lambda a, b: a @ b.transpose(-1, -2), q, k)


def test_matmul_broadcast_over_batch():
    # [b, s, k] @ [k, n]: one weight for every batch (linear without bias)
    compile_products(lambda a, w: a @ w, scaled(3, 20, 64, k=64), torch.randn(64, 96, dtype=h))


@pytest.mark.parametrize("shape", [(40, 64), (2, 24, 64)], ids=["2d", "3d"])
def test_linear_with_bias(shape):
    lin = nn.Linear(64, 96).half()
    compile_products(F.linear, torch.randn(*shape, dtype=h) / 8, lin.weight.detach(),
                     lin.bias.detach())


def test_addmm_alpha_beta():
    bias = torch.randn(48, 72, dtype=h)
    compile_products(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), bias,
                     scaled(48, 80, k=80), torch.randn(80, 72, dtype=h))


def test_programs_are_built_once_and_launched_per_call():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, w: F.linear(a, w))
    a = scaled(64, 96, k=96).to("spyre")
    w = torch.randn(80, 96, dtype=h).to("spyre")
    with torch.no_grad():
        compiled(a, w)
        lowered = len(scheduling.compiled_kernels)
        runtime.reset_stats()
        torch.spyre.reset_op_stats()
        with torch.spyre.strict():
            for _ in range(3):
                out = compiled(a, w)
    assert runtime.stats() == {"kernels_loaded": 0, "launches": 3, "relayouts": 0,
                               "host_kernels": 0}
    assert torch.spyre.op_stats()["program_misses"] == 0  # nothing built or loaded
    assert len(scheduling.compiled_kernels) == lowered   # nothing lowered again
    torch.testing.assert_close(out.cpu().float(), a.cpu().float() @ w.cpu().float().t(),
                               **MATMUL_TOL)


def test_extern_path_when_switched_off():
    from torch_spyre._inductor import config
    config.matmul_programs = False
    try:
        scheduling.compiled_kernels.clear()
        torch._dynamo.reset()
        a, b = scaled(32, 64, k=64), torch.randn(64, 32, dtype=h)
        with torch._inductor.config.patch(force_disable_caches=True):
            out = torch.compile(lambda x, y: x @ y)(a.to("spyre"), b.to("spyre"))
        assert matmul_kernels() == []
        torch.testing.assert_close(out.cpu().float(), a.float() @ b.float(), **MATMUL_TOL)
    finally:
        config.matmul_programs = True


# --------------------------------------------------------------------------
# Epilogues: linear + bias + activation as one device program
# --------------------------------------------------------------------------

ACTS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
        "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape", [(40, 64), (2, 24, 64)], ids=["2d", "3d"])
def test_linear_bias_activation_is_one_program(act, shape):
    lin = nn.Linear(64, 96).half()
    fn = ACTS[act]
    _, kernels = compile_products(lambda x, w, b: fn(F.linear(x, w, b)),
                                  torch.randn(*shape, dtype=h) / 8, lin.weight.detach(),
                                  lin.bias.detach(), programs=1)
    assert kernels[0]["activation"] == act


def test_activation_of_a_bmm_fuses():
    _, kernels = compile_products(lambda a, b: torch.relu(a @ b), scaled(3, 40, 64, k=64),
                                  torch.randn(3, 64, 72, dtype=h), programs=1)
    assert kernels[0]["activation"] == "relu"


def test_product_read_elsewhere_keeps_its_activation_separate():
    # the pre-activation value is an output too: no fusion, two programs
    def f(x, w):
        y = x @ w
        return y, torch.relu(y)
    _, kernels = compile_products(f, scaled(32, 64, k=64), torch.randn(64, 64, dtype=h),
                                  programs=2)
    assert kernels[0]["activation"] == "none"


def test_non_activation_epilogue_stays_a_pointwise_program():
    # y * 2 + 1 is no activation the builder applies: product + one pointwise program
    _, kernels = compile_products(lambda x, w: (x @ w) * 2.0 + 1.0, scaled(32, 64, k=64),
                                  torch.randn(64, 64, dtype=h), programs=2)
    assert kernels[0]["activation"] == "none"


def test_producer_is_assigned_the_stick_layout_its_product_reads():
    # (p @ v).transpose(1, 2).reshape(b, s, d) @ w.t(): the transposing copy
    # [b, s, heads, d_head] would have sticks of d_head; the projection reads
    # rows of d = heads * d_head, so layout assignment gives the copy's
    # buffer sticks of d (it stores them directly) and no re-layout is needed
    def attention_out(p, v, w):
        b, heads, s, dh = v.shape
        return ((p @ v).transpose(1, 2).reshape(b, s, heads * dh)) @ w.t()
    p = torch.softmax(torch.randn(2, 4, 16, 16), -1).half()
    v, w = torch.randn(2, 4, 16, 16, dtype=h), scaled(64, 64, k=64)
    scheduling.layout_assignments.clear()
    # three programs: p @ v, the transposing copy, the projection
    compile_products(attention_out, p, v, w, programs=3)
    assert spyre_matmul.relayouts_inserted() == 0
    assert [sizes for _, sizes in scheduling.layout_assignments] == [(2, 16, 64)]


@pytest.mark.parametrize("heads,dh", [(4, 16), (3, 20)], ids=["whole_sticks", "padded"])
def test_assigned_layout_with_a_padded_stick(heads, dh):
    # rows of heads * d_head = 60 elements: the last stick's padding is zeroed
    def f(x, w):
        b, s = x.shape[0], x.shape[2]
        return (x.transpose(1, 2) * 2.0).reshape(b, s, heads * dh) @ w
    x = torch.randn(2, heads, 16, dh, dtype=h) / 8
    scheduling.layout_assignments.clear()
    compile_products(f, x, torch.randn(heads * dh, 32, dtype=h), programs=2)
    assert spyre_matmul.relayouts_inserted() == 0
    assert [sizes for _, sizes in scheduling.layout_assignments] == [(2, 16, heads * dh)]


@pytest.mark.parametrize("heads,dh", [(4, 16), (3, 20)], ids=["whole_sticks", "padded"])
def test_an_input_in_another_stick_layout_is_relaid_out_once(heads, dh):
    # a graph input [b, s, heads, d_head] read as [b * s, d]: inputs keep the
    # layout they come in, so one re-layout program (sticks of d_head into
    # sticks of d) runs before the product
    _, kernels = compile_products(lambda x, w: x.reshape(32, heads * dh) @ w,
                                  torch.randn(2, 16, heads, dh, dtype=h) / 8,
                                  torch.randn(heads * dh, 48, dtype=h), programs=2)
    assert spyre_matmul.relayouts_inserted() == 1
    assert len(kernels[0]["relayouts"]) == 1
    kinds = [k.get("kind") for k in scheduling.compiled_kernels.values()]
    assert sorted(kinds) == ["matmul", "relayout"]


# --------------------------------------------------------------------------
# Fused MLP: up-projection, activation, down-projection as one program
# --------------------------------------------------------------------------

def mlp_params(d, hidden, e, bias=True):
    up, down = nn.Linear(d, hidden, bias=bias).half(), nn.Linear(hidden, e, bias=bias).half()
    params = [up.weight.detach(), down.weight.detach()]
    if bias:
        params += [up.bias.detach(), down.bias.detach()]
    return params


@pytest.mark.parametrize("act", ["gelu", "relu", "silu"])
@pytest.mark.parametrize("shape", [(160, 64), (2, 80, 64)], ids=["2d", "3d"])
def test_mlp_is_one_program(act, shape):
    w1, w2, b1, b2 = mlp_params(64, 256, 64)
    fn = ACTS[act]
    _, kernels = compile_products(lambda x, w1_, w2_, b1_, b2_:
                                  F.linear(fn(F.linear(x, w1_, b1_)), w2_, b2_),
                                  torch.randn(*shape, dtype=h) / 8, w1, w2, b1, b2, programs=1)
    assert [k["kind"] for k in kernels] == [] and \
        [k["kind"] for k in scheduling.compiled_kernels.values()] == ["mlp"]


def test_mlp_ragged_without_bias():
    w1, w2 = mlp_params(70, 150, 33, bias=False)
    compile_products(lambda x, a, b: F.linear(F.gelu(F.linear(x, a)), b),
                     torch.randn(150, 70, dtype=h) / 8, w1, w2, programs=1)


def test_mlp_fusion_switched_off_is_two_programs():
    from torch_spyre._inductor import config
    w1, w2, b1, b2 = mlp_params(64, 128, 64)
    config.mlp_fusion = False
    try:
        _, kernels = compile_products(lambda x, a, b, c, d: F.linear(F.relu(F.linear(x, a, c)),
                                                                     b, d),
                                      torch.randn(160, 64, dtype=h) / 8, w1, w2, b1, b2,
                                      programs=2)
    finally:
        config.mlp_fusion = True
    assert [k["activation"] for k in kernels] == ["relu", "none"]


def test_mlp_with_few_rows_stays_two_programs():
    # 40 rows of 64: streaming the weights to every core group costs more
    # than the intermediate's round trip (fused only from 2 * D rows)
    w1, w2, b1, b2 = mlp_params(64, 256, 64)
    _, kernels = compile_products(lambda x, a, b, c, d: F.linear(F.gelu(F.linear(x, a, c)),
                                                                 b, d),
                                  torch.randn(40, 64, dtype=h) / 8, w1, w2, b1, b2,
                                  programs=2)
    assert [k["activation"] for k in kernels] == ["gelu", "none"]
