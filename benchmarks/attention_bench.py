#!/usr/bin/env python3
"""Attention: the modelled device time of F.scaled_dot_product_attention on
spyre (one program, kernels/attention.h: scores in the scratchpads, the
softmax online over key blocks when the keys do not stay) against the same
attention unfused (q @ k^T * scale, softmax, @ v: three eager ops whose
[seq, seq] scores go through device memory), causal, fp16, batch 1, 8 heads
of 64, for sequence lengths 128, 1024 and 4096. Both results are checked
against the CPU.

Prints a table and writes attention_bench.json (to --out).
"""
import argparse
import json
import pathlib

import torch
import torch.nn.functional as F


def device_us(fn):
    fn()  # warm: builds and loads the programs once
    torch.spyre.synchronize()
    with torch.autograd.profiler.profile(use_device="spyre", use_kineto=False) as prof:
        out = fn()
        torch.spyre.synchronize()
    launches = [e for e in prof.key_averages() if e.key.startswith("spyre::")]
    return out, sum(e.device_time_total for e in launches), sum(e.count for e in launches)


def unfused(q, k, v):
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool,
                        device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seqs", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    rows = []
    for seq in args.seqs:
        g = torch.Generator().manual_seed(seq)
        q, k, v = (torch.randn(1, 8, seq, 64, generator=g).half() for _ in range(3))
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        dev = [t.to("spyre") for t in (q, k, v)]
        with torch.no_grad():
            fused_out, fused_us, fused_launches = device_us(
                lambda: F.scaled_dot_product_attention(*dev, is_causal=True))
            unfused_out, unfused_us, unfused_launches = device_us(lambda: unfused(*dev))
        rows.append(dict(
            seq=seq, fused_us=fused_us, fused_launches=fused_launches,
            unfused_us=unfused_us, unfused_launches=unfused_launches,
            speedup=unfused_us / fused_us,
            fused_max_err=(fused_out.cpu().float() - want).abs().max().item(),
            unfused_max_err=(unfused_out.cpu().float() - want).abs().max().item()))
    print(f"{'seq':>6} {'fused us':>10} {'launches':>8} {'unfused us':>11} {'launches':>8} "
          f"{'speedup':>8} {'fused err':>10} {'unfused err':>11}")
    for r in rows:
        print(f"{r['seq']:>6} {r['fused_us']:>10.1f} {r['fused_launches']:>8} "
              f"{r['unfused_us']:>11.1f} {r['unfused_launches']:>8} {r['speedup']:>8.2f} "
              f"{r['fused_max_err']:>10.2e} {r['unfused_max_err']:>11.2e}")
    props = torch.spyre.get_device_properties()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention_bench.json").write_text(json.dumps(dict(
        benchmark="attention_bench", dtype="float16", batch=1, heads=8, head_dim=64,
        causal=True, timing_table_version=props.timing_table_version, rows=rows), indent=2))
    print(f"-> {out / 'attention_bench.json'}")


if __name__ == "__main__":
    main()
