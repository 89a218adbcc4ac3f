#!/usr/bin/env python3
"""Runs every benchmark and collects one JSON file each in the output folder.

C++ benchmarks are the *_bench executables of the CMake build; Python
benchmarks are benchmarks/*_bench.py (they need the torch extension). A
summary of all results is written to <out>/summary.json.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def run(cmd, out_dir):
    print(f"\n$ {' '.join(map(str, cmd))}", flush=True)
    start = time.monotonic()
    proc = subprocess.run([*map(str, cmd), "--out", str(out_dir)])
    return proc.returncode, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    jobs = sorted((pathlib.Path(args.build_dir) / "bin").glob("*_bench"))
    jobs = [[job] for job in jobs]
    jobs += [[sys.executable, py] for py in sorted(HERE.glob("*_bench.py"))]
    if not jobs:
        sys.exit("no benchmarks found: build first (make build)")

    failures = []
    for cmd in jobs:
        code, seconds = run(cmd, out)
        print(f"   ({seconds:.1f} s, exit {code})")
        if code != 0:
            failures.append(str(cmd[-1]))

    summary = {}
    for path in sorted(out.glob("*.json")):
        if path.name != "summary.json":
            summary[path.stem] = json.loads(path.read_text())
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n{len(summary)} result files in {out}")
    if failures:
        sys.exit(f"benchmarks failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
