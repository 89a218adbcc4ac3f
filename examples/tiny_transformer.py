#!/usr/bin/env python3
"""The main job: a small transformer on the `spyre` device and on the CPU.

Random weights from a fixed seed; the same model and input run on both
devices. Prints whether the outputs agree within tolerance, the total
modelled device time of the forward pass (kernel launches and copies,
torch.spyre.device_time_stats()), and how many ops fell back to the
CPU (the goal is zero: every op of this model with a native spyre kernel).
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (y.reshape(shape).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(mask, float("-inf"))
        attn = F.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=512, dim=128, heads=4, layers=2, context=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float32", choices=["float16", "float32"])
    parser.add_argument("--seq", type=int, default=48)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    tol = {torch.float32: 1e-3, torch.float16: 3e-2}[dtype]

    torch.manual_seed(0)
    model = TinyTransformer().eval()
    tokens = torch.randint(0, 512, (2, args.seq))
    with torch.no_grad():
        expected = model.to(dtype=torch.float32)(tokens)
        device_model = TinyTransformer().eval()
        device_model.load_state_dict(model.state_dict())
        device_model = device_model.to(device="spyre", dtype=dtype)
        torch.spyre.reset_fallback_stats()
        torch.spyre.synchronize()
        torch.spyre.reset_device_time_stats()
        start = time.perf_counter()
        got = device_model(tokens.to("spyre"))
        torch.spyre.synchronize()
        wall = time.perf_counter() - start
        device_time = torch.spyre.device_time_stats()
        got = got.float().cpu()

    err = (got - expected).abs().max().item()
    scale = expected.abs().max().item()
    fallbacks = torch.spyre.fallback_stats()
    print(f"tiny transformer: 2 layers, dim 128, batch 2, seq {args.seq}, {args.dtype}")
    print(f"  outputs agree: {err <= tol * max(1.0, scale)} "
          f"(max abs error {err:.3e}, tolerance {tol * max(1.0, scale):.1e})")
    print(f"  host wall time on spyre: {wall * 1e3:.1f} ms")
    print(f"  modelled device time of the forward: "
          f"{device_time['total_ns'] / 1e3:.1f} us "
          f"({device_time['launches']} launches {device_time['launch_ns'] / 1e3:.1f} us, "
          f"{device_time['launch_dma_bytes']} DMA bytes; "
          f"{device_time['copies']} copies {device_time['copy_ns'] / 1e3:.1f} us)")
    print(f"  CPU fallbacks: {sum(fallbacks.values())} "
          f"({', '.join(f'{k} x{v}' for k, v in sorted(fallbacks.items())) or 'none'})")
    sys.exit(0 if err <= tol * max(1.0, scale) else 1)


if __name__ == "__main__":
    main()
