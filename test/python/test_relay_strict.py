"""The project's relay config runs the upstream files it lists in mandatory
mode, known failures listed one by one with a reason; never wholesale as
xfail. `validate --strict` (config.strict_problems) enforces it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from torch_spyre.testing.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
PROJECT_CONFIG = ROOT / "test" / "relay" / "spyre.yaml"

LAX = textwrap.dedent("""\
    test_suite_config:
      files:
        - path: ${TORCH_ROOT}/test/test_view_ops.py
          unlisted_test_mode: xfail
        - path: ${TORCH_ROOT}/test/test_ops.py
          unlisted_test_mode: mandatory_success
          tests:
            - names: [TestCommon::test_out_.*]
              mode: xfail_strict
            - names: [TestCommon::test_out_topk_.*]
              mode: xfail
              reason: tie order of topk is unspecified
    """)


def test_the_project_config_is_strict():
    config = load_config(PROJECT_CONFIG)
    assert config.strict_problems() == []
    upstream = [f for f in config.files if f.path.startswith("${TORCH_ROOT}")]
    assert upstream, "the project config lists upstream files"
    for entry in upstream:
        assert entry.unlisted_test_mode in ("mandatory_success", "skip"), entry.path
        listed_modes = {t.mode for t in entry.tests}
        # a file whose unlisted tests are skipped runs its listed ones mandatory
        if entry.unlisted_test_mode == "skip":
            assert "mandatory_success" in listed_modes, entry.path
    known = [t for f in config.files for t in f.tests if t.mode in ("xfail", "xfail_strict")]
    assert known and all(len(t.reason) > 20 for t in known)


def test_strict_rule_names_each_problem():
    problems = parse_config(LAX, source="lax.yaml").strict_problems()
    assert problems == [
        "lax.yaml:3: files[0] (${TORCH_ROOT}/test/test_view_ops.py) runs its unlisted tests "
        "as xfail; use mandatory_success (or skip) and list the known failures",
        "lax.yaml:8: a xfail_strict entry of ${TORCH_ROOT}/test/test_ops.py without a "
        "`reason`: say why these tests fail",
    ]


def test_reason_reaches_the_mode_explanation(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCH_ROOT", str(tmp_path))
    config = parse_config(LAX, source="lax.yaml")
    policy = config.policy(str(tmp_path / "test" / "test_ops.py"), "TestCommon",
                           "test_out_topk_spyre_float16")
    assert policy.mode == "xfail"
    assert policy.why == "listed at lax.yaml:10 (tie order of topk is unspecified)"


def test_validate_strict_exit_code(tmp_path):
    lax = tmp_path / "lax.yaml"
    lax.write_text(LAX)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = lambda *a: subprocess.run([sys.executable, "-m", "torch_spyre.testing", "validate",  # noqa: E731
                                     *a], capture_output=True, text=True, env=env, timeout=120)
    assert run(str(lax)).returncode == 0  # the RFC allows it
    strict = run("--strict", str(lax))
    assert strict.returncode == 2 and "runs its unlisted tests as xfail" in strict.stderr
    assert run("--strict", str(PROJECT_CONFIG)).returncode == 0
