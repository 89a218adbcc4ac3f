#!/usr/bin/env python3
"""all_reduce bus bandwidth on two emulated cards under torchrun, side by
side with gloo on CPU tensors of the same size in the same run.

The script starts `torchrun --nproc-per-node 2` on itself (loopback). Each
rank holds one card; for each size from 1 KiB to 256 MiB (float32) the two
cases take turns run by run, each timed call after a barrier:
  - spyre: dist.all_reduce of a spyre tensor through spyreccl (staging
    through pinned host memory, gloo moving the bytes, the sum on the
    device), until the result is on the device (synchronize);
  - gloo: dist.all_reduce of a CPU tensor of the same size with gloo.
Reported per size: host wall medians and bus bandwidth (NCCL's convention,
bytes * 2(P-1)/P / time), and the modelled device time of the spyre
all_reduce (torch.spyre.device_time_stats(): its traffic on the card-to-card
link plus the device reduction) with the bus bandwidth that implies. Prints
a table and writes allreduce_bench.json (to --out).
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

KIB = 1 << 10
SIZES = [KIB, 16 * KIB, 256 * KIB, 4096 * KIB, 64 * KIB * KIB, 256 * KIB * KIB]
RANKS = 2


def bus_gb_per_s(nbytes, seconds):
    return nbytes * 2 * (RANKS - 1) / RANKS / seconds / 1e9


def runs_for(nbytes):
    return 9 if nbytes <= 4096 * KIB else 3


def measure_rank(results_path):
    import torch
    import torch.distributed as dist
    import torch_spyre  # noqa: F401

    rank = int(os.environ["RANK"])
    torch.spyre.set_device(int(os.environ["LOCAL_RANK"]) % torch.spyre.device_count())
    dist.init_process_group("cpu:gloo,spyre:spyreccl",
                            timeout=datetime.timedelta(seconds=600))
    rows = []
    for nbytes in SIZES:
        elements = nbytes // 4
        spyre = torch.ones(elements, device="spyre")
        cpu = torch.ones(elements)

        def on_spyre():
            dist.all_reduce(spyre)
            torch.spyre.synchronize()

        def on_cpu():
            dist.all_reduce(cpu)

        cases = [("spyre", on_spyre), ("gloo", on_cpu)]
        for _, fn in cases:
            fn()  # warm: programs, pinned buffers, connections
        samples = {name: [] for name, _ in cases}
        for _ in range(runs_for(nbytes)):
            for name, fn in cases:
                dist.barrier()
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
        torch.spyre.synchronize()
        torch.spyre.reset_device_time_stats()
        on_spyre()
        stats = torch.spyre.device_time_stats()
        wall = {name: statistics.median(times) for name, times in samples.items()}
        rows.append({
            "bytes": nbytes,
            "spyre_wall_s": wall["spyre"],
            "gloo_wall_s": wall["gloo"],
            "spyre_bus_gb_per_s": bus_gb_per_s(nbytes, wall["spyre"]),
            "gloo_bus_gb_per_s": bus_gb_per_s(nbytes, wall["gloo"]),
            "wall_ratio_spyre_over_gloo": wall["spyre"] / wall["gloo"],
            "modelled_ns": stats["total_ns"],
            "modelled_link_ns": stats["link_ns"],
            "modelled_reduce_ns": stats["launch_ns"],
            "modelled_bus_gb_per_s": bus_gb_per_s(nbytes, stats["total_ns"] * 1e-9),
        })
    props = torch.spyre.get_device_properties()
    if rank == 0:
        pathlib.Path(results_path).write_text(json.dumps({
            "ranks": RANKS,
            "dtype": "float32",
            "card_link_gb_per_s": props.card_link_gb_per_s,
            "card_link_latency_ns": props.card_link_latency_ns,
            "timing_table_version": props.timing_table_version,
            "rows": rows,
        }, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def human(nbytes):
    for unit, size in (("MiB", KIB * KIB), ("KiB", KIB)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def print_table(result):
    print(f"all_reduce float32 over {result['ranks']} emulated cards "
          f"(card link {result['card_link_gb_per_s']} GB/s, "
          f"{result['timing_table_version']}); bus bandwidth in GB/s")
    header = (f"{'size':>8} {'spyre wall':>11} {'gloo wall':>10} {'ratio':>6} "
              f"{'spyre bus':>10} {'gloo bus':>9} {'modelled':>10} {'model bus':>10}")
    print(header)
    for row in result["rows"]:
        print(f"{human(row['bytes']):>8} {row['spyre_wall_s'] * 1e3:>9.2f}ms "
              f"{row['gloo_wall_s'] * 1e3:>8.2f}ms {row['wall_ratio_spyre_over_gloo']:>6.2f} "
              f"{row['spyre_bus_gb_per_s']:>10.3f} {row['gloo_bus_gb_per_s']:>9.3f} "
              f"{row['modelled_ns'] / 1e3:>8.1f}us {row['modelled_bus_gb_per_s']:>10.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--rank-results", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_results:
        measure_rank(args.rank_results)
        return

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results_path = pathlib.Path(tmp) / "rank0.json"
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", SPYRE_SIM_DEVICES=str(RANKS),
                   OMP_NUM_THREADS="1")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={RANKS}", __file__, "--rank-results",
                   str(results_path)]
        subprocess.run(command, env=env, check=True, timeout=1800)
        result = json.loads(results_path.read_text())
    print_table(result)
    (out / "allreduce_bench.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
