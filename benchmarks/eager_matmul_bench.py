#!/usr/bin/env python3
"""Eager matmul: emulator wall time of an n^3 fp16 torch.matmul on spyre
against torch.matmul on the CPU in fp32, side by side in one run (median of
several repetitions each; the spyre time includes the launch and waits for
the device). Target: spyre within 2x of the CPU. Also checks the result and
reports the modelled device time of one launch.

Prints a table and writes eager_matmul_bench.json (to --out).
"""
import argparse
import json
import pathlib
import statistics
import time

import torch


def median_seconds(fn, reps):
    fn()  # warm: builds and loads the program once
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    n = args.n
    torch.manual_seed(0)
    a16, b16 = torch.randn(n, n).half(), torch.randn(n, n).half()
    a32, b32 = a16.float(), b16.float()
    a_dev, b_dev = a16.to("spyre"), b16.to("spyre")

    def on_spyre():
        c = torch.matmul(a_dev, b_dev)
        torch.spyre.synchronize()
        return c

    t_spyre = median_seconds(on_spyre, args.reps)
    stats = torch.spyre.last_launch_stats()
    t_cpu = median_seconds(lambda: torch.matmul(a32, b32), args.reps)
    got = on_spyre().cpu().float()
    want = torch.matmul(a32, b32)
    max_err = ((got - want.half().float()).abs() / want.abs().clamp(min=1)).max().item()
    fallbacks = sum(torch.spyre.fallback_stats().values())
    ratio = t_spyre / t_cpu
    flops = 2.0 * n ** 3
    props = torch.spyre.get_device_properties()
    result = dict(
        benchmark="eager_matmul_bench", shape=f"{n}x{n}x{n}",
        timing_table_version=props.timing_table_version,
        spyre_fp16_median_ms=t_spyre * 1e3, cpu_fp32_median_ms=t_cpu * 1e3,
        ratio_spyre_over_cpu=ratio, target_ratio=2.0, within_target=ratio <= 2.0,
        spyre_gflops=flops / t_spyre / 1e9, cpu_gflops=flops / t_cpu / 1e9,
        modelled_device_us=stats.get("time_ns", 0) / 1e3,
        max_relative_error=max_err, cpu_fallbacks=fallbacks)
    print(f"{'case':32s} {'median ms':>10s} {'GFLOP/s':>9s}")
    print(f"{'spyre eager fp16 (emulator)':32s} {t_spyre * 1e3:10.2f} "
          f"{flops / t_spyre / 1e9:9.1f}")
    print(f"{'cpu torch.matmul fp32':32s} {t_cpu * 1e3:10.2f} {flops / t_cpu / 1e9:9.1f}")
    print(f"ratio spyre/cpu {ratio:.2f} (target <= 2.0), modelled device time "
          f"{result['modelled_device_us']:.1f} us, max rel error {max_err:.2e}, "
          f"CPU fallbacks {fallbacks}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eager_matmul_bench.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
