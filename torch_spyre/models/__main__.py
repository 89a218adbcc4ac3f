"""`python -m torch_spyre.models`: Hugging Face architectures on spyre.

  list                                  the architectures the sweep would run
  sweep [--arch a,b] [--modes m,n] [--out DIR] [--timeout S] [--resume]
                                        run them on spyre against the CPU;
                                        writes DIR/sweep.json, sweep.md and a
                                        plot of the pass rates
  report [--out DIR]                    rewrite sweep.md and the plot from sweep.json
  run-one ARCH --kind K --model-class C --modes m,n --results FILE
                                        (internal) one architecture, in the
                                        sweep's child process

Modes: eager, strict (eager with CPU fallbacks forbidden), compiled
(torch.compile), generate (greedy generate() of decoders, tokens equal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network: tiny seeded configs only

DEFAULT_OUT = "sweep-results"
DEFAULT_TIMEOUT = 300.0


def main(argv=None):
    args = _parser().parse_args(argv)
    return args.func(args) or 0


def _parser():
    from .runner import MODES
    parser = argparse.ArgumentParser(prog="python -m torch_spyre.models",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True, metavar="command")

    listing = commands.add_parser("list", help="list the architectures the sweep runs")
    listing.set_defaults(func=_list)

    sweep = commands.add_parser("sweep", help="run the architectures on spyre")
    sweep.add_argument("--arch", help="comma-separated architectures (default: all)")
    sweep.add_argument("--modes", default=",".join(MODES),
                       help=f"comma-separated modes of {','.join(MODES)} (default: %(default)s)")
    sweep.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    sweep.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                       help="seconds per architecture, all its modes (default: %(default)s)")
    sweep.add_argument("--resume", action="store_true",
                       help="keep the results already in sweep.json; run only what is missing")
    sweep.add_argument("--timed-runs", type=int, default=3,
                       help="timed runs behind the host-time ratio (default: %(default)s)")
    sweep.set_defaults(func=_sweep)

    rewrite = commands.add_parser("report", help="rewrite sweep.md and the plot")
    rewrite.add_argument("--out", default=DEFAULT_OUT)
    rewrite.set_defaults(func=_report)

    one = commands.add_parser("run-one", help="(internal) one architecture in this process")
    one.add_argument("arch")
    one.add_argument("--kind", required=True)
    one.add_argument("--model-class", required=True)
    one.add_argument("--modes", required=True)
    one.add_argument("--results", required=True, help="JSON lines file, one line per mode")
    one.add_argument("--timed-runs", type=int, default=3)
    one.set_defaults(func=_run_one)
    return parser


def _list(args):
    from .configs import discover_architectures
    for arch in discover_architectures():
        print(f"{arch.name:28} {arch.kind:8} {arch.model_class}")


def _sweep(args):
    from .configs import discover_architectures
    from .runner import MODES
    from .sweep import run_sweep
    modes = _split(args.modes)
    unknown_modes = [mode for mode in modes if mode not in MODES]
    if unknown_modes:
        sys.exit(f"unknown modes {unknown_modes}; choose from {list(MODES)}")
    architectures = discover_architectures()
    if args.arch:
        by_name = {arch.name: arch for arch in architectures}
        unknown = [name for name in _split(args.arch) if name not in by_name]
        if unknown:
            sys.exit(f"unknown architectures {unknown}; `python -m torch_spyre.models list`")
        architectures = [by_name[name] for name in _split(args.arch)]
    run_sweep(architectures, modes, args.out, args.timeout, resume=args.resume,
              timed_runs=args.timed_runs)


def _report(args):
    from .report import write_reports
    from .sweep import load_results
    write_reports(load_results(args.out), args.out)


def _run_one(args):
    import torch
    from .configs import Architecture
    from .runner import run_architecture
    # One intra-op thread on both devices: with two, the CPU's timings swing
    # tenfold once the emulator's threads compete for the two cores.
    torch.set_num_threads(1)
    arch = Architecture(args.arch, args.kind, args.model_class)

    def append(mode, result):
        with open(args.results, "a") as lines:
            lines.write(json.dumps({"mode": mode, "result": result}) + "\n")

    run_architecture(arch, _split(args.modes), timed_runs=args.timed_runs, on_result=append)


def _split(text):
    return [item.strip() for item in text.split(",") if item.strip()]


if __name__ == "__main__":
    sys.exit(main())
