"""The sweep: every selected architecture in its own child process.

A child (``python -m torch_spyre.models run-one``) runs the modes of one
architecture and appends one JSON line per finished mode to a results file;
the parent prints each line as it arrives. A crash or a hang of the child
fails only the modes it had not finished (a hang is killed at the timeout,
with its whole process group, compile workers included). Results go to
``sweep.json`` after every architecture, so an interrupted sweep resumes
with ``--resume``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import configs, report

POLL_SECONDS = 0.5
RESULTS_FILE = "sweep.json"


def run_sweep(architectures, modes, out_dir, timeout, resume=False, timed_runs=3):
    """Runs `modes` of `architectures`; writes and returns the results."""
    out_dir = Path(out_dir)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    results = load_results(out_dir) if resume else new_results()
    _record_settings(results, timed_runs)
    pending = [(arch, [mode for mode in modes if not _has_result(results, arch, mode)])
               for arch in architectures]
    pending = [(arch, todo) for arch, todo in pending if todo]
    print(f"{len(pending)} architectures to run ({len(architectures) - len(pending)} "
          f"already done), modes {','.join(modes)}, timeout {timeout:.0f} s each", flush=True)
    for index, (arch, todo) in enumerate(pending, 1):
        entry = results["architectures"].setdefault(
            arch.name, {"kind": arch.kind, "class": arch.model_class, "modes": {}})
        prefix = f"[{index}/{len(pending)}] {arch.name}"
        for mode, result in run_in_child(arch, todo, out_dir, timeout, timed_runs,
                                         on_result=lambda m, r: print(
                                             progress_line(prefix, m, r), flush=True)):
            entry["modes"][mode] = result
        save_results(results, out_dir)
    report.write_reports(results, out_dir)
    return results


def run_in_child(arch, modes, out_dir, timeout, timed_runs, on_result):
    """Runs one architecture in a child process; returns [(mode, result)]
    for every requested mode, in order, whatever became of the child."""
    lines_path = out_dir / "logs" / f"{arch.name}.jsonl"
    log_path = out_dir / "logs" / f"{arch.name}.log"
    lines_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "torch_spyre.models", "run-one", arch.name,
               "--kind", arch.kind, "--model-class", arch.model_class,
               "--modes", ",".join(modes), "--results", str(lines_path),
               "--timed-runs", str(timed_runs)]
    done = {}
    with open(log_path, "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                 env=_child_environment(), start_new_session=True)
        deadline = time.monotonic() + timeout
        outcome = None
        while outcome is None:
            try:
                child.wait(timeout=POLL_SECONDS)
                outcome = _exit_description(child.returncode, log_path)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    _kill_group(child)
                    outcome = f"timeout after {timeout:.0f} s"
            for mode, result in _read_new_results(lines_path, done):
                on_result(mode, result)
    for mode in modes:
        if mode not in done:
            result = _lost_result(outcome)
            on_result(mode, result)
            done[mode] = result
    return [(mode, done[mode]) for mode in modes]


def _child_environment():
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    # One compile worker: the build machine has two cores and the emulator
    # uses its own threads.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    env.setdefault("PYTHONWARNINGS", "ignore")
    # A crash leaves the Python stack of every thread in the log.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def _read_new_results(lines_path, done):
    if not lines_path.exists():
        return []
    new = []
    for line in lines_path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
        if record["mode"] not in done:
            done[record["mode"]] = record["result"]
            new.append((record["mode"], record["result"]))
    return new


def _exit_description(returncode, log_path):
    if returncode == 0:
        return "child exited without a result"
    how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
           else f"exit code {returncode}")
    last = _last_log_line(log_path)
    return f"crashed ({how})" + (f": {last}" if last else "")


def _last_log_line(log_path):
    """The last line that says something (a fault handler's report ends in
    frames and module lists: its first line is the one to show)."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()
             if line.strip()]
    faults = [line for line in lines if line.startswith("Fatal Python error")]
    if faults:
        return faults[-1][:300]
    return lines[-1][:300] if lines else ""


def _kill_group(child):
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _lost_result(outcome):
    from .runner import mode_result
    return mode_result("fail", error=outcome)


def progress_line(prefix, mode, result):
    status = {"pass": "ok", "fail": "FAIL", "skip": "skip"}[result["status"]]
    parts = [prefix, mode, status]
    if result["max_error"] is not None:
        parts.append(f"{result['max_error']:.1e}")
    if result["host_copies"] is not None or result["fallbacks"]:  # measured
        parts.append(f"fallbacks={sum(result['fallbacks'].values())}")
    if result["host_copies"] is not None:
        parts.append(f"host_copies={result['host_copies']}")
    if result.get("host_kernels"):
        parts.append(f"host_kernels={result['host_kernels']}")
    if result.get("adapters"):
        parts.append("adapters=" + ",".join(f"{k}:{v}" for k, v in result["adapters"].items()))
    if result["host_ratio"] is not None:
        parts.append(f"host x{result['host_ratio']:.1f}")
    if result["device_ns"] is not None:
        parts.append(f"device {result['device_ns'] / 1e3:.0f} us")
    parts.append(f"{result['seconds'] or 0:.1f} s")
    if result["error"]:
        parts.append(f"| {result['error'][:160]}")
    return " ".join(parts)


def new_results():
    return {"settings": {}, "architectures": {}}


def load_results(out_dir):
    path = Path(out_dir) / RESULTS_FILE
    return json.loads(path.read_text()) if path.exists() else new_results()


def save_results(results, out_dir):
    path = Path(out_dir) / RESULTS_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(results, indent=1, sort_keys=True))
    temporary.replace(path)  # never a half-written file to resume from


def _has_result(results, arch, mode):
    return mode in results["architectures"].get(arch.name, {}).get("modes", {})


def _record_settings(results, timed_runs):
    import torch
    import transformers
    from . import runner
    results["settings"].update({
        "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "tiny_sizes": {"hidden": configs.HIDDEN, "layers": configs.LAYERS,
                       "heads": configs.HEADS, "kv_heads": configs.KV_HEADS,
                       "head_dim": configs.HEAD_DIM,
                       "intermediate": configs.INTERMEDIATE, "vocab": configs.VOCAB,
                       "positions": configs.POSITIONS},
        "tolerance": f"max abs error <= {runner.ATOL} + {runner.RTOL} * max |cpu|",
        "timed_runs": timed_runs,
    })
