"""The model sweep's machinery on a fixed representative set: tiny seeded
bert, gpt2, llama, qwen3, mixtral and mamba on spyre against the CPU,
through the same functions `python -m torch_spyre.models sweep` runs in its
child processes.

EXPECTED holds today's outcome of every (architecture, mode): None where it
passes (and, in strict mode, no CPU fallback), else the exact first line of
today's failure, which marks the case xfail(strict=True): a fix turns it into
an XPASS that fails the run until the table is updated, and a different
failure fails the run as well."""

import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from torch_spyre.models import configs, runner  # noqa: E402

EXPECTED = {
    ("bert", "eager"): None,
    ("bert", "strict"): None,
    ("gpt2", "eager"): None,
    ("gpt2", "strict"): None,
    ("gpt2", "compiled"): None,
    ("gpt2", "generate"): None,
    ("llama", "eager"): None,
    ("llama", "strict"): None,
    ("qwen3", "eager"): None,
    ("qwen3", "strict"): None,
    # mixture-of-experts routing (topk, sort, floor_divide, histc, index_put_)
    # and a Mamba block (depthwise causal conv1d, a transposed x_proj input)
    ("mixtral", "strict"): None,
    ("mamba", "strict"): None,
    # a router gate initialised to zeros (sigmoid scores, top-k over ties)
    ("afmoe", "eager"): None,
}


class ModeFailed(Exception):
    """The mode failed on spyre (the result's error is the message)."""


def _case(arch, mode):
    failure = EXPECTED[arch, mode]
    marks = [] if failure is None else [
        pytest.mark.xfail(strict=True, raises=ModeFailed, reason=failure)]
    return pytest.param(arch, mode, failure, marks=marks, id=f"{arch}-{mode}")


@pytest.fixture(scope="module")
def sweep_results():
    """Each architecture's modes, run once (no timing: timed_runs=0)."""
    architectures = {arch.name: arch for arch in configs.discover_architectures()}
    results = {}
    for name in dict.fromkeys(arch for arch, _ in EXPECTED):
        modes = [mode for arch, mode in EXPECTED if arch == name]
        results[name] = runner.run_architecture(architectures[name], modes, timed_runs=0)
    return results


@pytest.mark.parametrize("arch,mode,failure", [_case(*key) for key in EXPECTED])
def test_architecture_mode(sweep_results, arch, mode, failure):
    result = sweep_results[arch][mode]
    assert result["status"] != "skip", result["error"]
    if result["status"] == "fail":
        if failure is not None and result["error"] != failure:
            pytest.fail(f"fails differently now: {result['error']}")
        raise ModeFailed(result["error"])
    assert result["max_error"] <= result["tolerance"]
    assert result["host_copies"] is not None and result["device_ns"] > 0
    if mode == "strict":
        assert result["fallbacks"] == {}


def test_constant_weight_matrices_are_redrawn_and_vectors_kept():
    """A zero router gate would tie every expert score; norm scales stay."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4, bias=True), torch.nn.LayerNorm(4))
    torch.nn.init.zeros_(model[0].weight)
    torch.nn.init.zeros_(model[0].bias)
    runner._redraw_constant_matrices(model, config=object())
    gate = model[0].weight
    assert gate.unique().numel() == gate.numel()
    assert 0 < gate.std().item() < 0.1  # the default initializer_range, 0.02
    assert torch.equal(model[0].bias, torch.zeros(4))
    assert torch.equal(model[1].weight, torch.ones(4))


def test_the_runner_leaves_strict_mode_off(sweep_results):
    assert not torch.spyre.is_strict()


def test_sweep_command_runs_children_and_writes_reports(tmp_path):
    """The CLI end to end on one architecture: a child process, the JSON,
    the Markdown table with its pass rates, the plot; --resume keeps it."""
    command = [sys.executable, "-m", "torch_spyre.models", "sweep", "--arch", "gpt2",
               "--modes", "eager", "--out", str(tmp_path), "--timed-runs", "1"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "[1/1] gpt2 eager ok" in run.stdout
    results = json.loads((tmp_path / "sweep.json").read_text())
    eager = results["architectures"]["gpt2"]["modes"]["eager"]
    assert eager["status"] == "pass" and eager["host_ratio"] > 0
    assert "| eager | 1 | 0 | 0 | 100.0% |" in (tmp_path / "sweep.md").read_text()
    assert (tmp_path / "sweep.png").exists() or (tmp_path / "sweep.svg").exists()

    again = subprocess.run(command + ["--resume"], capture_output=True, text=True,
                           timeout=300)
    assert "0 architectures to run (1 already done)" in again.stdout
