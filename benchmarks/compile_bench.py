#!/usr/bin/env python3
"""torch.compile on spyre: modelled device time of the optimised lowering
against this backend's own naive lowering, side by side in one run, and
compile time of a tiny transformer against CPU Inductor.

Device time is the emulator's modelled time (sum of the compiled graph's
launches, each waited for: torch_spyre._inductor.runtime.profile). Cases:
  fusion      fused programs vs one program per scheduler node (intermediates
              through device memory) -- softmax 512x1024, layer_norm, rms_norm
              (pointwise chains are already one node in Inductor's IR, so they
              have no unfused form to compare)
  buffering   double-buffered scratchpad regions vs one region
              -- softmax 4096x2048 (several blocks per core)
  cores       blocks over 32 cores vs one core -- softmax 512x1024
  tiling      the matmul builder's planned tiles/core grid vs its naive
              lowering -- matmul 1024^3
  epilogue    linear + bias + gelu as one program vs product and a
              pointwise program
  mlp         the fused MLP program vs two matmul programs (intermediate
              through device memory)
A second table compares compiled matrix products as device programs against
the extern path (config.matmul_programs=False: Inductor's extern kernel, run
by the eager op library): host wall time per call (median of 5) and modelled
device time, side by side.
Prints the tables and writes compile_bench.json (to --out).
"""

import argparse
import contextlib
import json
import pathlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_spyre._inductor import config as spyre_config
from torch_spyre._inductor import runtime

h = torch.float16


@contextlib.contextmanager
def compiled_on_spyre(fn, args, switches):
    """Under the lowering switches: fn compiled afresh (no caches), args moved
    to spyre and one call made (compile + load); yields (compiled, device
    args). The switches are restored on exit."""
    with spyre_config.patch(**switches):
        torch._dynamo.reset()
        with torch._inductor.config.patch(force_disable_caches=True):
            compiled = torch.compile(fn)
            dev = [a.to("spyre") for a in args]
            compiled(*dev)
            torch.spyre.synchronize()
            yield compiled, dev


def modelled_ns(fn, args, **switches):
    """Compiles fn under the lowering switches and returns (device ns,
    launches, mean core utilisation)."""
    with compiled_on_spyre(fn, args, switches) as (compiled, dev):
        with runtime.profile() as prof:
            compiled(*dev)
    util = [s["core_utilization"] for _, s in prof.launches]
    return prof.device_time_ns(), len(prof.launches), sum(util) / max(1, len(util))


def wall_and_device(fn, args, reps=5, **switches):
    """Compiles fn under the switches; returns (median host wall us per call,
    modelled device us of its compiled launches, or, when it has none, of
    its last eager-library launch; eager launches and CPU fallbacks per
    call)."""
    with compiled_on_spyre(fn, args, switches) as (compiled, dev):
        walls = []
        torch.spyre.reset_op_stats()
        torch.spyre.reset_fallback_stats()
        for _ in range(reps):
            start = time.perf_counter()
            compiled(*dev)
            torch.spyre.synchronize()
            walls.append(time.perf_counter() - start)
        eager = torch.spyre.op_stats()["launches"] / reps
        fallbacks = sum(torch.spyre.fallback_stats().values()) / reps
        with runtime.profile() as prof:
            compiled(*dev)
        torch.spyre.synchronize()
        device_ns = prof.device_time_ns() if prof.launches else \
            torch.spyre.last_launch_stats()["time_ns"]
    return statistics.median(walls) * 1e6, device_ns / 1e3, eager, fallbacks


def gelu_linear(x, w, b):
    return F.gelu(F.linear(x, w, b))


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


CASES = [
    ("softmax 512x1024", "fusion", lambda a: torch.softmax(a, -1),
     lambda: [torch.randn(512, 1024, dtype=h)], dict(fusion=False)),
    ("layer_norm 1024x768", "fusion", layer_norm,
     lambda: [torch.randn(1024, 768, dtype=h), torch.randn(768, dtype=h),
              torch.randn(768, dtype=h)], dict(fusion=False)),
    ("rms_norm 2048x1024", "fusion", rms_norm,
     lambda: [torch.randn(2048, 1024, dtype=h), torch.randn(1024, dtype=h)],
     dict(fusion=False)),
    ("softmax 4096x2048", "buffering", lambda a: torch.softmax(a, -1),
     lambda: [torch.randn(4096, 2048, dtype=h)], dict(double_buffer=False)),
    ("softmax 512x1024", "cores", lambda a: torch.softmax(a, -1),
     lambda: [torch.randn(512, 1024, dtype=h)], dict(max_cores=1)),
    ("matmul 1024x1024x1024", "tiling", lambda a, b: a @ b,
     lambda: [torch.randn(1024, 1024, dtype=h) / 32, torch.randn(1024, 1024, dtype=h)],
     dict(matmul_tiling=False)),
    ("linear+bias+gelu 512x768->3072", "epilogue", gelu_linear,
     lambda: [torch.randn(512, 768, dtype=h) / 8, torch.randn(3072, 768, dtype=h) / 28,
              torch.randn(3072, dtype=h)], dict(fusion=False)),
    ("mlp 2048x768x3072x768", "mlp", mlp,
     lambda: [torch.randn(2048, 768, dtype=h) / 8, torch.randn(3072, 768, dtype=h) / 28,
              torch.randn(3072, dtype=h), torch.randn(768, 3072, dtype=h) / 55,
              torch.randn(768, dtype=h)], dict(mlp_fusion=False)),
    ("mlp 4096x768x3072x768", "mlp", mlp,
     lambda: [torch.randn(4096, 768, dtype=h) / 8, torch.randn(3072, 768, dtype=h) / 28,
              torch.randn(3072, dtype=h), torch.randn(768, 3072, dtype=h) / 55,
              torch.randn(768, dtype=h)], dict(mlp_fusion=False)),
]

EXTERN_CASES = [
    ("matmul 512x1024x768", lambda a, b: a @ b,
     lambda: [torch.randn(512, 1024, dtype=h) / 32, torch.randn(1024, 768, dtype=h)]),
    ("linear 2x128x768->768", lambda x, w, b: F.linear(x, w, b),
     lambda: [torch.randn(2, 128, 768, dtype=h) / 8, torch.randn(768, 768, dtype=h) / 28,
              torch.randn(768, dtype=h)]),
]


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


def compile_seconds(device: str) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block(), nn.LayerNorm(64)).half().to(device)
    if device == "cpu":
        model = model.float()
    x = torch.randn(2, 16, 64, dtype=h if device != "cpu" else torch.float32).to(device)
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        torch.compile(model)(x)
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for name, what, fn, make, naive in CASES:
        inputs = make()
        opt_ns, opt_launches, opt_util = modelled_ns(fn, inputs)
        naive_ns, naive_launches, naive_util = modelled_ns(fn, inputs, **naive)
        rows.append(dict(case=name, compares=what, naive_switches=naive,
                         optimised_us=opt_ns / 1e3, naive_us=naive_ns / 1e3,
                         saving_pct=100.0 * (1 - opt_ns / naive_ns),
                         optimised_launches=opt_launches, naive_launches=naive_launches,
                         optimised_core_utilization=opt_util,
                         naive_core_utilization=naive_util))
    extern_rows = []
    for name, fn, make in EXTERN_CASES:
        inputs = make()
        prog_wall, prog_dev, prog_eager, prog_fb = wall_and_device(fn, inputs)
        ext_wall, ext_dev, ext_eager, ext_fb = wall_and_device(fn, inputs,
                                                               matmul_programs=False)
        extern_rows.append(dict(case=name, program_wall_us=prog_wall,
                                program_device_us=prog_dev,
                                extern_wall_us=ext_wall, extern_device_us=ext_dev,
                                extern_eager_launches_per_call=ext_eager,
                                extern_cpu_fallbacks_per_call=ext_fb,
                                program_eager_launches_per_call=prog_eager,
                                program_cpu_fallbacks_per_call=prog_fb))
    spyre_s = compile_seconds("spyre")
    cpu_s = compile_seconds("cpu")
    props = torch.spyre.get_device_properties()
    result = dict(benchmark="compile_bench", timing_table_version=props.timing_table_version,
                  cases=rows, matmul_program_vs_extern=extern_rows, compile_seconds=dict(tiny_transformer_spyre=spyre_s,
                                                   tiny_transformer_cpu_inductor=cpu_s,
                                                   ratio=spyre_s / cpu_s))
    print(f"{'case':28s} {'compares':10s} {'optimised us':>13s} {'naive us':>10s} "
          f"{'saving':>7s} {'launches':>9s} {'util opt/naive':>15s}")
    for r in rows:
        print(f"{r['case']:28s} {r['compares']:10s} {r['optimised_us']:13.2f} "
              f"{r['naive_us']:10.2f} {r['saving_pct']:6.1f}% "
              f"{r['optimised_launches']:>4d}/{r['naive_launches']:<4d} "
              f"{r['optimised_core_utilization']:7.2f}/{r['naive_core_utilization']:.2f}")
    print(f"\n{'matmul: program vs extern':28s} {'program wall us':>16s} "
          f"{'device us':>10s} {'extern wall us':>15s} {'device us':>10s} "
          f"{'extern eager/CPU per call':>26s}")
    for r in extern_rows:
        print(f"{r['case']:28s} {r['program_wall_us']:16.1f} {r['program_device_us']:10.2f} "
              f"{r['extern_wall_us']:15.1f} {r['extern_device_us']:10.2f} "
              f"{r['extern_eager_launches_per_call']:>12.0f}/"
              f"{r['extern_cpu_fallbacks_per_call']:<.0f}")
    print(f"compile time, 2-block tiny transformer: spyre {spyre_s:.2f} s, "
          f"CPU Inductor {cpu_s:.2f} s (ratio {spyre_s / cpu_s:.2f})")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_bench.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
