#!/usr/bin/env python3
"""The main job of `make run`.

With the PyTorch extension built, embeds sentences with a real model,
sentence-transformers/all-MiniLM-L6-v2 and its trained weights, on the
`spyre` device and on the CPU (examples/sentence_embeddings.py), and prints
how closely they agree, the CPU fallbacks (none) and the modelled device
time. Without the extension, runs the emulator demo: a 1024^3 fp16 matrix
product program on 32 emulated cores, printing the modelled device time and
utilisation.
"""
import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    example = ROOT / "examples" / "sentence_embeddings.py"
    if importlib.util.find_spec("torch_spyre"):
        sys.exit(subprocess.call([sys.executable, str(example)]))
    demo = ROOT / "build" / "bin" / "emulator_matmul_bench"
    if not demo.exists():
        sys.exit(f"{demo} is missing: run `make build` first")
    print("torch_spyre extension not built: running the emulator demo")
    sys.exit(subprocess.call([str(demo), "--reps", "3", "--out",
                              str(ROOT / "bench-results")]))


if __name__ == "__main__":
    main()
