"""The OpInfo suite over every op with a native spyre kernel, on float16 and
float32, run by the relay with the project's config; its JUnit XML and JSON
summary parse and agree with each other and with the run.

The op list is whatever this build registers (the relay discovers it), so
this test grows with the eager kernels and names no op itself.
"""

import hashlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "test" / "relay" / "spyre.yaml"
DTYPES = {"float16", "float32"}


@pytest.fixture(scope="module")
def relay_run(tmp_path_factory):
    """The relay's reports: those of `make test`'s own full relay run with
    this config (SPYRE_RELAY_REPORTS names their directory; the full run
    holds these forward tests, so they do not run twice), else a run of the
    OpInfo forward tests made here."""
    given = os.environ.get("SPYRE_RELAY_REPORTS")
    if given:
        reports = Path(given)
        result = subprocess.CompletedProcess([], 0, stdout="(the reports in " + given + ")")
    else:
        reports = tmp_path_factory.mktemp("relay")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        result = subprocess.run(
            [sys.executable, "-m", "torch_spyre.testing", "run", "--config", str(CONFIG),
             "--report-dir", str(reports), "--", "-k", "TestSpyreOpInfo and test_forward"],
            capture_output=True, text=True, env=env, timeout=1200)
    summary = json.loads((reports / "relay-summary.json").read_text())
    junit = ET.parse(reports / "relay-junit.xml").getroot()
    return result, summary, junit


def _cpu_dtypes(op_name):
    """The dtype names an OpInfo (name or name.variant) supports on the CPU:
    an op is only owed a run on a dtype its OpInfo generates tests for."""
    from torch.testing._internal.common_methods_invocations import op_db
    for info in op_db:
        full = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if full == op_name:
            return {str(d).removeprefix("torch.") for d in info.supported_dtypes("cpu")}
    return set(DTYPES)


def test_every_native_op_ran_on_fp16_and_fp32(relay_run):
    result, summary, _ = relay_run
    assert result.returncode == 0 and summary["ok"], result.stdout[-4000:]
    native = {n["op"] for n in summary["native_ops"]}
    assert native, "the relay found no op with a native spyre kernel"
    removed = {r["name"] for r in summary["removed_by_config"]}
    ran = {(t["op"], t["dtype"]) for t in summary["tests"] if t["name"].startswith("test_forward")}
    for op in native:
        for dtype in DTYPES & _cpu_dtypes(op):
            name = f"test_forward_{op.replace('.', '_')}_spyre_{dtype}"
            assert (op, dtype) in ran or name in removed, f"{op} on {dtype} neither ran nor " \
                "was removed by the config"
    assert {d for _, d in ran} == DTYPES  # the config's supported_dtypes, no other
    for test in summary["tests"]:
        if test["outcome"] in ("passed", "xpassed"):
            assert test["samples"] > 0, f"{test['name']} passed without comparing a sample"


def test_summary_matches_the_run(relay_run):
    _, summary, _ = relay_run
    tests = summary["tests"]
    outcomes = Counter(t["outcome"] for t in tests)
    totals = summary["totals"]
    for key in ("passed", "failed", "xfailed", "xpassed", "skipped"):
        assert totals[key] == outcomes[key]
    assert totals["tests"] == len(tests) and totals["samples"] == sum(t["samples"] for t in tests)
    for group, key in (("ops", "op"), ("files", "file")):
        for name, counts in summary[group].items():
            mine = [t for t in tests if t[key] == name]
            assert counts["tests"] == len(mine) and counts["samples"] == sum(
                t["samples"] for t in mine)
    # every test of an op is counted under its op (module tests have none)
    assert sum(c["tests"] for c in summary["ops"].values()) == sum(
        1 for t in tests if t["op"] is not None)
    assert summary["config"]["sha256"] == hashlib.sha256(CONFIG.read_bytes()).hexdigest()
    assert summary["torch_version"] == torch.__version__
    assert summary["selection"]["full"] == "no change list given: the full set runs"
    assert all(t["why_selected"] and t["why_mode"] for t in tests)


def test_junit_matches_the_summary(relay_run):
    _, summary, junit = relay_run
    suites = [junit] if junit.tag == "testsuite" else junit.findall("testsuite")
    cases = [case for suite in suites for case in suite.iter("testcase")]
    by_name = {t["name"]: t for t in summary["tests"]}
    assert len(cases) == sum(int(s.get("tests")) for s in suites) == summary["totals"]["tests"]
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    failed = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
    assert failed == summary["totals"]["failed"]
    assert skipped == summary["totals"]["skipped"] + summary["totals"]["xfailed"]
    for case in cases:
        record = by_name[case.get("name")]
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert (properties.get("op"), properties["dtype"], properties["mode"]) == (
            record["op"], record["dtype"], record["mode"])
        if record["outcome"] == "passed":
            assert int(properties["samples"]) == record["samples"]
