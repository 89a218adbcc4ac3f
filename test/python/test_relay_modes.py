"""Precedence of modes and edits, in the config's lookups and end to end on
an upstream-style test file (instantiate_device_type_tests + @ops) run by
the relay from a ${TORCH_ROOT} tree."""

import textwrap
from pathlib import Path

import pytest

from relay_cli import run_relay_cli
from torch_spyre.testing.config import Precision, parse_config

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_fake_upstream.py
      unlisted_test_mode: skip
      tests:
        - names: [TestFake::test_passes]
        - names: [TestFake::test_fails]
          mode: xfail
        - names: [TestFake::test_strict_but_passes]
          mode: xfail_strict
        - names: [TestFake::test_crashes]
        - names: [TestFake::test_dtyped_.*]
          edits:
            dtypes:
              exclude: [{name: float16}]
        - names: [TestFake::test_op_.*]
          tags: [fake_model]
          edits:
            ops:
              include: [{name: abs}]
              exclude: [{name: zero_}]
        - names: [TestFake::test_op_view_.*]
          mode: skip
  global:
    supported_dtypes: [{name: float16}, {name: float32}]
    supported_ops:
      - name: view
      - name: zero_
      - name: clone
        force_xfail: true
        dtypes:
          - name: float16
            precision: {atol: 0.125, rtol: 0.25}
          - name: float32
"""

UPSTREAM_FILE = '''\
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, ops)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

OPS = [op for op in op_db if op.name in ("view", "zero_", "abs", "clone", "neg")
       and not op.variant_test_name]


class TestFake(TestCase):
    def test_passes(self, device):
        self.assertEqual(torch.ones(3, device=device).cpu(), torch.ones(3))

    def test_fails(self, device):
        self.assertEqual(torch.ones(3, device=device).cpu(), torch.zeros(3))

    def test_strict_but_passes(self, device):
        self.assertEqual(torch.ones(3, device=device).cpu(), torch.ones(3))

    def test_crashes(self, device):
        import os
        import signal
        os.kill(os.getpid(), signal.SIGSEGV)  # as a broken kernel would

    def test_unlisted(self, device):
        self.fail("an unlisted test runs although unlisted_test_mode is skip")

    @dtypes(torch.float16, torch.float32, torch.bfloat16)
    def test_dtyped(self, device, dtype):
        self.assertEqual(torch.zeros(2, dtype=dtype, device=device).cpu(),
                         torch.zeros(2, dtype=dtype))

    @ops(OPS, allowed_dtypes=(torch.float16, torch.float32))
    def test_op(self, device, dtype, op):
        if op.name == "clone" and dtype == torch.float16:
            # the config's per-(op, dtype) precision reaches the test
            self.assertEqual((self.precision, self.rel_tol), (0.125, 0.25))
        sample = next(iter(op.sample_inputs("cpu", dtype)))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        moved = sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)
        actual = op(moved.input, *moved.args, **moved.kwargs)
        self.assertEqual(actual.cpu(), expected)


instantiate_device_type_tests(TestFake, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
'''

OPINFO = "/suites/test_spyre_opinfo.py"


def _op(name):
    return {"name": name, "full_name": name, "aten_name": name}


@pytest.fixture
def config(tmp_path, monkeypatch):
    (tmp_path / "test").mkdir()
    monkeypatch.setenv("PYTORCH_ROOT", str(tmp_path))
    return parse_config(CONFIG, source="modes.yaml"), str(tmp_path / "test" / "test_fake_upstream.py")


def test_listed_unlisted_and_the_last_matching_entry(config):
    cfg, path = config
    mode = lambda name, op=None, dtype=None: cfg.policy(path, "TestFakeSPYRE", name, op=op,  # noqa: E731
                                                        dtype=dtype).mode
    assert mode("test_passes_spyre") == "skip"  # names are full matches: the suffix differs
    assert mode("test_passes") == "mandatory_success"  # listed without a mode
    assert mode("test_fails") == "xfail"
    assert mode("test_strict_but_passes") == "xfail_strict"
    assert mode("test_unlisted") == "skip"  # unlisted_test_mode
    assert mode("test_op_abs_spyre_float16", _op("abs")) == "mandatory_success"
    assert mode("test_op_view_spyre_float16", _op("view")) == "skip"  # later entry wins
    policy = cfg.policy(path, "TestFake", "test_op_abs_spyre_float16", op=_op("abs"))
    assert policy.tags == ["fake_model"] and "modes.yaml:16" in policy.why
    assert cfg.policy("/elsewhere/test_x.py", "TestFake", "test_passes").mode == "skip"


def test_force_xfail_flips_only_mandatory_success(config):
    cfg, path = config
    flipped = cfg.policy(path, "TestFake", "test_op_clone_spyre_float16", op=_op("clone"),
                         dtype="float16")
    assert flipped.mode == "xfail" and "force_xfail of clone" in flipped.why
    assert flipped.precision == Precision(0.125, 0.25)
    # strict xfail and skip are left alone
    assert cfg.policy(path, "TestFake", "test_strict_but_passes", op=_op("clone")).mode == \
        "xfail_strict"
    assert cfg.policy(path, "TestFake", "test_op_view_spyre_float32", op=_op("clone")).mode == \
        "skip"


def test_edits_and_global_filters(config):
    cfg, path = config
    excluded = lambda name, **kw: cfg.variant_excluded(path, "TestFake", name, **kw)  # noqa: E731
    assert excluded("test_op_zero__spyre_float32", op=_op("zero_"), dtype="float32") == \
        "op zero_ excluded by edits.ops.exclude"
    assert excluded("test_op_abs_spyre_float32", op=_op("abs"), dtype="float32") is None
    assert "not in global.supported_ops" in excluded("test_op_neg_spyre_float32",
                                                     op=_op("neg"), dtype="float32")
    assert excluded("test_dtyped_spyre_float16", dtype="float16") == \
        "dtype float16 excluded by edits.dtypes.exclude"
    assert "supported_dtypes" in excluded("test_dtyped_spyre_bfloat16", dtype="bfloat16")
    assert excluded("test_dtyped_spyre_float32", dtype="float32") is None
    # include re-admits a dtype the global list leaves out
    dtyped = next(t for t in cfg.files[0].tests if t.names[0][1].pattern == "test_dtyped_.*")
    dtyped.edits.dtypes_include.add("bfloat16")
    assert excluded("test_dtyped_spyre_bfloat16", dtype="bfloat16") is None
    # native ops join supported_ops only with discover_native_ops
    assert excluded("test_other_spyre_float32", op=_op("neg"), dtype="float32",
                    native_ops={"neg"}) is not None
    cfg.global_.discover_native_ops = True
    assert excluded("test_other_spyre_float32", op=_op("neg"), dtype="float32",
                    native_ops={"neg"}) is None


def test_op_dtypes_narrow_the_supported_ones():
    cfg = parse_config(textwrap.dedent("""\
        test_suite_config:
          files: [{path: "${SPYRE_SUITES}/test_spyre_opinfo.py"}]
          global:
            supported_dtypes: [{name: float16}, {name: float32}]
            supported_ops:
              - name: add
                dtypes: [{name: float32}]
            supported_modules: [{name: torch.nn.Linear}]
        """))
    path = str(Path(cfg.files[0].resolve()[0]))
    assert "dtypes of supported op add" in cfg.variant_excluded(
        path, "T", "t", op=_op("add"), dtype="float16")
    assert cfg.variant_excluded(path, "T", "t", op=_op("add"), dtype="float32") is None
    assert "supported_modules" in cfg.variant_excluded(path, "T", "t", module="torch.nn.ReLU")
    assert cfg.variant_excluded(path, "T", "t", module="torch.nn.Linear") is None
    assert OPINFO in path


def _run_relay(tmp_path, config_text, *pytest_args):
    (tmp_path / "test" / "test_fake_upstream.py").write_text(UPSTREAM_FILE)
    config_path = tmp_path / "modes.yaml"
    config_path.write_text(config_text)
    return run_relay_cli(config_path, tmp_path, *(["--", *pytest_args] if pytest_args else []))


def test_end_to_end_modes_on_an_upstream_file(tmp_path):
    """One relay run over the upstream-style file: every mode, the edits,
    force_xfail, tolerances and tags; the strict xfail that passes makes the
    run fail (exit code 1) while the plain xfail that passes does not; a test
    that kills the process is recorded and the tests after it still run."""
    (tmp_path / "test").mkdir()
    config = CONFIG
    for name in ("test_passes", "test_fails", "test_strict_but_passes", "test_crashes"):
        config = config.replace(f"[TestFake::{name}]", f"[TestFake::{name}_.*]")
    result, summary, junit = _run_relay(tmp_path, config)
    outcomes = {t["name"]: (t["outcome"], t["mode"]) for t in summary["tests"]}
    assert outcomes == {
        "test_passes_spyre": ("passed", "mandatory_success"),
        "test_fails_spyre": ("xfailed", "xfail"),
        "test_strict_but_passes_spyre": ("failed", "xfail_strict"),
        "test_crashes_spyre": ("failed", "mandatory_success"),  # the tests after it ran
        "test_unlisted_spyre": ("skipped", "skip"),
        "test_dtyped_spyre_float32": ("passed", "mandatory_success"),  # the dtype left
        "test_op_abs_spyre_float16": ("passed", "mandatory_success"),  # edits.ops.include
        "test_op_abs_spyre_float32": ("passed", "mandatory_success"),
        "test_op_clone_spyre_float16": ("xpassed", "xfail"),  # force_xfail, and it passes
        "test_op_clone_spyre_float32": ("xpassed", "xfail"),
        "test_op_view_spyre_float16": ("skipped", "skip"),  # the later entry wins
        "test_op_view_spyre_float32": ("skipped", "skip"),
    }, result.stdout[-3000:]
    assert result.returncode == 1
    assert summary["ok"] is False and summary["exit_status"] == 1
    assert {f["name"]: f["message"] for f in summary["failures"]} == {
        "test_strict_but_passes_spyre": "unexpected pass of a strict xfail",
        "test_crashes_spyre": "the test process died (SIGSEGV)"}
    assert "test_crashes_spyre" in result.stdout and "killed the test process" in result.stdout
    removed = {r["name"]: r["why"] for r in summary["removed_by_config"]}
    assert removed["test_op_zero__spyre_float16"] == "op zero_ excluded by edits.ops.exclude"
    assert "supported_dtypes" in removed["test_dtyped_spyre_bfloat16"]
    assert "edits.dtypes.exclude" in removed["test_dtyped_spyre_float16"]
    assert "not in global.supported_ops" in removed["test_op_neg_spyre_float32"]
    per_file = summary["files"]["${TORCH_ROOT}/test/test_fake_upstream.py"]
    assert {k: per_file[k] for k in ("passed", "failed", "xfailed", "xpassed", "skipped",
                                      "tests")} == {"passed": 4, "failed": 2, "xfailed": 1,
                                                    "xpassed": 2, "skipped": 3, "tests": 12}
    assert summary["ops"]["clone"]["xpassed"] == 2
    assert summary["ops"]["clone"]["dtypes"] == ["float16", "float32"]
    properties = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
                  for c in junit.iter("testcase")}
    assert properties["test_op_abs_spyre_float16"]["tags"] == "fake_model"
    assert properties["test_op_clone_spyre_float16"]["mode"] == "xfail"
    assert properties["test_op_clone_spyre_float16"]["op"] == "clone"
    # one testsuite per file; the crash is an error, the strict xpass a failure
    (suite,) = junit.findall("testsuite")
    assert suite.get("name") == "${TORCH_ROOT}/test/test_fake_upstream.py"
    assert (suite.get("failures"), suite.get("errors"), suite.get("tests")) == ("1", "1", "12")
    crashed = next(c for c in junit.iter("testcase") if c.get("name") == "test_crashes_spyre")
    assert crashed.find("error").text == "the test process died (SIGSEGV)"


def test_failures_carry_their_whole_report(tmp_path):
    """A mandatory test that fails: the summary and the JUnit <failure> hold
    the whole report (the traceback and the mismatch), not just its first
    line; xfails are <skipped> with their reason."""
    (tmp_path / "test").mkdir()
    config = CONFIG.replace("""        - names: [TestFake::test_fails]
          mode: xfail""", """        - names: [TestFake::test_fails_.*]""")
    for name in ("test_passes", "test_strict_but_passes", "test_crashes",
                 "test_dtyped_.*", "test_op_.*"):
        config = config.replace(f"[TestFake::{name}]", "[TestFake::nothing_matches]")
    result, summary, junit = _run_relay(tmp_path, config)
    (failed,) = summary["failures"]
    assert failed["name"] == "test_fails_spyre" and failed["error"] is False
    assert "Mismatched elements: 3 / 3" in failed["details"], failed["details"][-2000:]
    assert "test_fake_upstream.py" in failed["details"]  # the traceback
    assert len(failed["message"]) < len(failed["details"])
    case = next(c for c in junit.iter("testcase") if c.get("name") == "test_fails_spyre")
    assert "Mismatched elements: 3 / 3" in case.find("failure").text
    (suite,) = junit.findall("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("1", "0")
    assert result.returncode == 1

