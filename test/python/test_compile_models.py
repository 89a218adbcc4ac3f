"""torch.compile on spyre of matrix products and small models: every kernel
Inductor generates is a device program; matrix products are device programs
of the matmul builder (test_compile_matmul.py) unless an operand view cannot
be read in place, then they (and embedding) run as extern kernels through
the eager op library (device programs where it has them, else its counted
CPU fallback)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_spyre._inductor import runtime

h = torch.float16
# fp16 inputs, fp32 accumulation, fp16 outputs; tolerances relative to the
# output's magnitude (products of K fp16 values)
MODEL_TOL = 3e-2
# ops Inductor keeps as extern kernels (eager), the only ones allowed to
# reach the eager library's CPU fallback
EXTERN_OPS = {"aten::mm.out", "aten::addmm.out", "aten::bmm.out", "aten::baddbmm.out",
              "aten::embedding", "aten::embedding.out", "aten::index_select.out",
              "aten::index_select", "aten::mm", "aten::bmm", "aten::addmm"}


def run_compiled(module, *inputs, **compile_kwargs):
    torch._dynamo.reset()
    torch.spyre.reset_fallback_stats()
    runtime.reset_stats()
    ref = module.float()(*[i.float() if i.is_floating_point() else i for i in inputs])
    dev = module.half().to("spyre")
    out = torch.compile(dev, **compile_kwargs)(*[i.to("spyre") for i in inputs])
    torch.spyre.synchronize()
    scale = max(1.0, ref.abs().max().item())
    torch.testing.assert_close(out.cpu().float(), ref, atol=MODEL_TOL * scale, rtol=MODEL_TOL)
    fallbacks = set(torch.spyre.fallback_stats())
    assert fallbacks <= EXTERN_OPS, f"compiled kernels ran on the host: {fallbacks - EXTERN_OPS}"
    return runtime.stats()["launches"]


class MatMul(nn.Module):
    def forward(self, a, b):
        return a @ b


@pytest.mark.parametrize("m,k,n", [(64, 128, 64), (128, 64, 256), (50, 70, 90), (33, 129, 7)],
                         ids=["aligned", "aligned_wide", "ragged", "ragged_small"])
def test_matmul(m, k, n):
    run_compiled(MatMul(), torch.randn(m, k, dtype=h) / math.sqrt(k), torch.randn(k, n, dtype=h))


def test_batched_matmul():
    run_compiled(MatMul(), torch.randn(4, 48, 80, dtype=h) / 9, torch.randn(4, 80, 40, dtype=h))


@pytest.mark.parametrize("act", [nn.ReLU(), nn.GELU(), nn.SiLU()], ids=["relu", "gelu", "silu"])
def test_linear_bias_activation(act):
    launches = run_compiled(nn.Sequential(nn.Linear(64, 96), act), torch.randn(40, 64, dtype=h))
    assert launches >= 1  # the activation epilogue is a device program


def test_mlp():
    mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    run_compiled(mlp, torch.randn(2, 24, 64, dtype=h))


class Attention(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, d=64, layers=2, seq=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.norm(self.blocks(self.embed(tokens) + self.pos)))


def test_attention_with_causal_mask():
    run_compiled(Attention(), torch.randn(2, 16, 64, dtype=h))


def test_transformer_block():
    launches = run_compiled(Block(), torch.randn(2, 16, 64, dtype=h))
    assert launches >= 5


def test_tiny_transformer():
    torch.manual_seed(0)
    run_compiled(TinyTransformer(), torch.randint(0, 100, (2, 16)))


def test_example_tiny_transformer_products_are_device_programs():
    # examples/tiny_transformer.py's model, inference: every matrix product
    # (qkv, scores, attention, projection, fused MLP, head) is a device
    # program; only the embedding lookups may run eagerly
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
    try:
        from tiny_transformer import TinyTransformer as ExampleTransformer
    finally:
        sys.path.pop(0)
    from torch_spyre._inductor import matmul as spyre_matmul
    from torch_spyre._inductor import scheduling
    torch.manual_seed(0)
    model = ExampleTransformer(vocab=128, dim=64, heads=4, layers=2, context=32)
    scheduling.compiled_kernels.clear()
    spyre_matmul.reset_fallback_counts()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        # 4 x 32 tokens: 128 rows of 64, enough for the fused MLP
        run_compiled(model, torch.randint(0, 128, (4, 32)))
    kinds = [k.get("kind", "pointwise") for k in scheduling.compiled_kernels.values()]
    # per block: qkv, scores, attention @ v, projection, fused MLP; and the head
    assert kinds.count("matmul") == 2 * 4 + 1 and kinds.count("mlp") == 2
    assert spyre_matmul.fallback_counts() == {}
