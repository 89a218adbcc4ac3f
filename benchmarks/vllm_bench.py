#!/usr/bin/env python3
"""vLLM on spyre against plain transformers on the CPU, side by side in one
run: a tiny seeded Llama (torch_spyre.vllm.tiny_models), greedy, prompts of
16 tokens, 16 new tokens each, batches of 1, 8 and 32 prompts.

- spyre: ``vllm.LLM(...).generate`` through the spyre platform plugin, the
  engine in this process (so the device's counters see the model), the
  model compiled (the default) and eager (``enforce_eager=True``);
- CPU: transformers' ``generate`` of the same weights on the CPU, the batch
  in one call (prompts of equal length: no padding).

Reported per mode and batch: output tokens per second of host wall time
(median of ``--runs`` runs after a warm-up, spyre and the CPU taking turns),
and the modelled device time per output token of the spyre run (the
emulator's model of the chip: launches plus copies); the compiled mode's
compile time (the warm-up's first steps). The tokens of all are checked
equal. Prints a table and writes vllm_bench.json (to --out).

vLLM's own CPU path is not a comparator here: vLLM is installed with
VLLM_TARGET_DEVICE=empty (no compiled CPU kernels).
"""

import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

PROMPT_TOKENS = 16
NEW_TOKENS = 16
BATCHES = (1, 8, 32)


def prompts(batch, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(4, 512, (batch, PROMPT_TOKENS), generator=gen)


def bench_mode(llm, mode, cpu, batches, runs):
    """The rows of one spyre mode ("compiled" or "eager"), batch by batch."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    rows = []
    for batch in batches:
        ids = prompts(batch)
        requests = [TokensPrompt(prompt_token_ids=row.tolist()) for row in ids]

        def run_spyre():
            outs = llm.generate(requests, params, use_tqdm=False)
            torch.spyre.synchronize()
            return [list(o.outputs[0].token_ids) for o in outs]

        def run_cpu():
            with torch.no_grad():
                out = cpu.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
            return out[:, PROMPT_TOKENS:].tolist()

        compiled_before = llm.collective_rpc("spyre_stats")[0]["compile_seconds"]
        same = run_spyre() == run_cpu()  # also the warm-up (and the compile)
        compile_s = llm.collective_rpc("spyre_stats")[0]["compile_seconds"] - compiled_before
        spyre_s, cpu_s = [], []
        for _ in range(runs):
            start = time.perf_counter()
            run_spyre()
            spyre_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            run_cpu()
            cpu_s.append(time.perf_counter() - start)
        torch.spyre.synchronize()
        torch.spyre.reset_device_time_stats()
        run_spyre()
        device_ns = torch.spyre.device_time_stats()["total_ns"]
        tokens = batch * NEW_TOKENS
        rows.append({
            "mode": mode, "batch": batch, "output_tokens": tokens, "tokens_equal": same,
            "spyre_vllm_tokens_per_s": tokens / statistics.median(spyre_s),
            "cpu_transformers_tokens_per_s": tokens / statistics.median(cpu_s),
            "spyre_host_s": statistics.median(spyre_s), "cpu_host_s": statistics.median(cpu_s),
            "modelled_device_us_per_output_token": device_ns / 1e3 / tokens,
            "compile_s": compile_s,
        })
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    from transformers import AutoModelForCausalLM
    from vllm import LLM

    from torch_spyre.vllm.tiny_models import write_tiny_model

    torch.set_num_threads(1)  # the CPU comparator on one thread, as the sweep
    path = write_tiny_model("llama", tempfile.mkdtemp(prefix="vllm-bench-"))
    cpu = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    cpu.generation_config.eos_token_id = None
    rows = []
    for mode in ("compiled", "eager"):
        llm = LLM(model=path, dtype="float32", max_model_len=128, max_num_seqs=max(batches),
                  max_num_batched_tokens=max(batches) * PROMPT_TOKENS, seed=0,
                  kv_cache_memory_bytes=64 * 2**20, enable_prefix_caching=False,
                  enforce_eager=mode == "eager")
        rows += bench_mode(llm, mode, cpu, batches, args.runs)
        llm.llm_engine.engine_core.shutdown()
        del llm

    print(f"\nvLLM on spyre vs transformers on the CPU: tiny Llama, {PROMPT_TOKENS}-token "
          f"prompts, {NEW_TOKENS} new tokens, greedy, median of {args.runs}")
    print(f"{'mode':>8} {'batch':>5} {'spyre vLLM tok/s':>17} {'CPU HF tok/s':>13} "
          f"{'spyre/CPU':>10} {'device us/token':>16} {'compile s':>10} {'tokens equal':>13}")
    for r in rows:
        print(f"{r['mode']:>8} {r['batch']:>5} {r['spyre_vllm_tokens_per_s']:>17.1f} "
              f"{r['cpu_transformers_tokens_per_s']:>13.1f} "
              f"{r['spyre_vllm_tokens_per_s'] / r['cpu_transformers_tokens_per_s']:>10.2f} "
              f"{r['modelled_device_us_per_output_token']:>16.1f} "
              f"{r['compile_s']:>10.1f} {str(r['tokens_equal']):>13}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_bench.json").write_text(json.dumps({"rows": rows}, indent=2))
    if not all(r["tokens_equal"] for r in rows):
        raise SystemExit("vllm_bench: spyre's tokens differ from the CPU's")


if __name__ == "__main__":
    main()
