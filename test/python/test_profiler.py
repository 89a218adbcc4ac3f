"""Spyre work in PyTorch's profiler and the cumulative modelled device time:
every kernel launch is a "spyre::<kernel>" range, every copy a
"spyre::copy_*" range (torch.profiler, any mode); with use_device="spyre"
each op also gets its modelled device time; torch.spyre.device_time_stats()
sums the modelled time of all launches and copies since a reset."""

import json

import pytest
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128),
                         nn.Linear(128, 32), nn.Softmax(dim=-1)).eval()


def profiled_forward(activities):
    model = small_model().to("spyre")
    x = torch.randn(8, 64)
    with torch.no_grad():
        model(x.to("spyre")).cpu()  # programs built before profiling
        with profile(activities=activities) as prof:
            y = model(x.to("spyre"))
            y.cpu()
    return prof


@pytest.mark.parametrize("activities", [[ProfilerActivity.CPU],
                                        [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]])
def test_kernels_and_copies_are_profiler_events(activities):
    prof = profiled_forward(activities)
    names = {e.key for e in prof.key_averages()}
    for kernel in ("spyre::matmul", "spyre::gelu", "spyre::layer_norm", "spyre::softmax"):
        assert kernel in names, f"{kernel} missing from {sorted(names)}"
    assert "spyre::copy_host_to_device" in names
    assert "spyre::copy_device_to_host" in names
    # One range per launch: two linears -> two matmul ranges.
    counts = {e.key: e.count for e in prof.key_averages()}
    assert counts["spyre::matmul"] == 2
    assert counts["spyre::copy_host_to_device"] == 1


def test_kernel_ranges_nest_inside_their_aten_op(tmp_path):
    prof = profiled_forward([ProfilerActivity.CPU])
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("ph") == "X"]
    by_name = {}
    for e in events:
        by_name.setdefault(e["name"], []).append(e)
    assert "spyre::softmax" in by_name and "spyre::copy_device_to_host" in by_name
    kernel = by_name["spyre::softmax"][0]
    parents = [e for e in by_name["aten::_softmax"]
               if e["ts"] <= kernel["ts"] and kernel["ts"] + kernel["dur"] <= e["ts"] + e["dur"]]
    assert parents, "spyre::softmax is not inside aten::_softmax"


def test_use_device_spyre_reports_modelled_device_time():
    model = small_model().to("spyre")
    x = torch.randn(8, 64).to("spyre")
    with torch.no_grad():
        model(x)
        torch.spyre.synchronize()
        torch.spyre.reset_device_time_stats()
        with torch.autograd.profiler.profile(use_device="spyre", use_kineto=False) as prof:
            model(x)
            torch.spyre.synchronize()
    stats = torch.spyre.device_time_stats()
    rows = {e.key: e for e in prof.key_averages()}
    kernels = {k: e for k, e in rows.items() if k.startswith("spyre::")
               and not k.startswith("spyre::copy")}
    assert set(kernels) >= {"spyre::matmul", "spyre::gelu", "spyre::layer_norm",
                            "spyre::softmax"}
    for name, e in kernels.items():
        assert e.device_time_total > 0, name
    # Each kernel range's device time is its launch's modelled time (the
    # profiler keeps whole microseconds: within 1 us per launch).
    launches = sum(e.count for e in kernels.values())
    assert launches == stats["launches"]
    total = sum(e.device_time_total for e in kernels.values())
    assert abs(total - stats["launch_ns"] / 1000) <= launches
    # The aten op that launched a kernel carries its device time.
    assert rows["aten::linear"].device_time_total == pytest.approx(
        kernels["spyre::matmul"].device_time_total, abs=2)
    assert rows["aten::softmax"].device_time_total > 0


def test_device_time_stats_accumulate_launches_and_copies():
    torch.spyre.synchronize()
    torch.spyre.reset_device_time_stats()
    assert torch.spyre.device_time_stats() == {
        "total_ns": 0.0, "launches": 0, "launch_ns": 0.0, "launch_dma_bytes": 0,
        "copies": 0, "copy_ns": 0.0, "copy_bytes": 0,
        "link_transfers": 0, "link_ns": 0.0, "link_bytes": 0}
    x = torch.randn(64, 256, dtype=torch.float16).to("spyre")
    torch.spyre.synchronize()
    after_copy = torch.spyre.device_time_stats()
    assert after_copy["copies"] == 1 and after_copy["copy_bytes"] == 64 * 256 * 2
    assert after_copy["copy_ns"] > 0 and after_copy["launches"] == 0

    per_launch = []
    for _ in range(3):
        x + x
        torch.spyre.synchronize()
        per_launch.append(torch.spyre.last_launch_stats())
    stats = torch.spyre.device_time_stats()
    assert stats["launches"] == 3
    assert stats["launch_ns"] == pytest.approx(sum(s["time_ns"] for s in per_launch))
    assert stats["launch_dma_bytes"] == sum(s["dma_bytes"] for s in per_launch)
    assert stats["total_ns"] == pytest.approx(stats["launch_ns"] + stats["copy_ns"])
    torch.spyre.reset_device_time_stats()
    assert torch.spyre.device_time_stats()["launches"] == 0


def test_tiny_transformer_example_prints_the_forward_device_time():
    import pathlib
    import re
    import subprocess
    import sys
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tiny_transformer.py"
    out = subprocess.run([sys.executable, str(example), "--seq", "16"], check=True,
                         capture_output=True, text=True).stdout
    match = re.search(r"modelled device time of the forward: ([0-9.]+) us "
                      r"\((\d+) launches ([0-9.]+) us", out)
    assert match, out
    total, launches, launch_us = float(match[1]), int(match[2]), float(match[3])
    assert launches > 20 and 0 < launch_us <= total
    assert "CPU fallbacks: 0" in out
