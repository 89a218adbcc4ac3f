"""The relay's YAML validator: good files load, bad ones are rejected with
the line and the reason."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_spyre.testing.config import ConfigError, Precision, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
PROJECT_CONFIG = ROOT / "test" / "relay" / "spyre.yaml"

FULL_EXAMPLE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
      unlisted_test_mode: xfail
      tests:
        - names:
            - TestBinaryUfuncs::test_scalar_support.*
            - TestBinaryUfuncs::test_contig_vs_transposed.*
          mode: xfail_strict
          tags: [model_a, another_model]
          edits:
            ops:
              include: [{name: gcd, description: "no ref, inject it"}]
              exclude: [{name: sub}]
            modules:
              include: [{name: torch.nn.BatchNorm2d}]
              exclude: [{name: torch.nn.Linear, description: OOM}]
            dtypes:
              include: [{name: int64}]
              exclude: [{name: bfloat16}]
        - names: [TestBinaryUfuncs::test_add]
    - path: ${SPYRE_SUITES}/test_spyre_opinfo.py
  global:
    devices: [cpu, spyre]
    supported_dtypes: [{name: float16}, {name: float32}]
    discover_native_ops: true
    supported_ops:
      - name: add
        dtypes:
          - name: float16
            precision: {atol: 1e-3, rtol: 0.002}
          - name: float32
      - name: gcd
        force_xfail: true
    supported_modules: [{name: torch.nn.Linear}]
"""


def test_the_project_config_is_valid():
    config = load_config(PROJECT_CONFIG)
    assert len(config.sha256) == 64
    assert config.global_.discover_native_ops
    suites = [f for f in config.files if f.path.startswith("${SPYRE_SUITES}")]
    assert [len(f.resolve()) for f in suites] == [1, 1], "each suite path names its file"


def test_full_example_reads_every_field():
    config = parse_config(FULL_EXAMPLE, source="example.yaml")
    first, second = config.files
    assert first.unlisted_test_mode == "xfail" and second.unlisted_test_mode == "skip"
    listed, bare = first.tests
    assert listed.mode == "xfail_strict" and listed.line == 6
    assert listed.tags == ["model_a", "another_model"]
    assert listed.edits.ops_include == {"gcd"} and listed.edits.ops_exclude == {"sub"}
    assert listed.edits.modules_include == {"torch.nn.BatchNorm2d"}
    assert listed.edits.modules_exclude == {"torch.nn.Linear"}
    assert listed.edits.dtypes_include == {"int64"}
    assert listed.edits.dtypes_exclude == {"bfloat16"}
    assert bare.mode == "mandatory_success"  # listed without a mode
    g = config.global_
    assert g.supported_dtypes == ["float16", "float32"]
    assert g.supported_ops["add"].dtypes == {"float16": Precision(1e-3, 0.002), "float32": None}
    assert g.supported_ops["gcd"].force_xfail
    assert g.supported_modules == ["torch.nn.Linear"]


def test_the_config_hash_follows_the_text():
    a = parse_config(FULL_EXAMPLE)
    b = parse_config(FULL_EXAMPLE.replace("model_a", "model_b"))
    assert a.sha256 != b.sha256 and a.sha256 == parse_config(FULL_EXAMPLE).sha256


def test_torch_root_entries_are_inactive_until_the_variable_is_set(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTORCH_ROOT", raising=False)
    config = parse_config(FULL_EXAMPLE)
    assert [(e.path, tokens) for e, tokens in config.inactive_entries()] == [
        ("${TORCH_ROOT}/test/test_binary_ufuncs.py", ["PYTORCH_ROOT"])]
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_binary_ufuncs.py").write_text("")
    monkeypatch.setenv("PYTORCH_ROOT", str(tmp_path))
    assert config.inactive_entries() == []
    assert config.files[0].resolve() == [str(tmp_path / "test" / "test_binary_ufuncs.py")]


def _minimal(files_body="", global_body=""):
    text = "test_suite_config:\n  files:\n" + textwrap.indent(
        textwrap.dedent(files_body) or "- path: ${SPYRE_SUITES}/test_spyre_opinfo.py\n", "    ")
    if global_body:
        text += "  global:\n" + textwrap.indent(textwrap.dedent(global_body), "    ")
    return text


BAD = [
    # (name, text, line, words in the reason)
    ("empty", "", 1, "empty"),
    ("yaml syntax", "test_suite_config:\n  files: [\n    - a\n", 3, "not valid YAML"),
    ("no root key", "suite: {}\n", 1, "unknown key `suite` (allowed: test_suite_config)"),
    ("root key only", "{}\n", 1, "missing required key `test_suite_config`"),
    ("unknown top key", "test_suite_config:\n  files: []\n  extra: 1\n", 3, "unknown key `extra`"),
    ("files not a list", "test_suite_config:\n  files: foo\n", 2, "must be a list"),
    ("files empty", "test_suite_config:\n  files: []\n", 2, "files is empty"),
    ("missing path", _minimal("- unlisted_test_mode: skip\n"), 3, "missing required key `path`"),
    ("bad unlisted mode", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          unlisted_test_mode: xfial
        """), 4, "'xfial' is not a mode"),
    ("bad test mode", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              mode: must_pass
        """), 6, "'must_pass' is not a mode"),
    ("name without class", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [test_add]
        """), 5, "must be ClassName::method_name"),
    ("bad regex", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names:
                - TestOps::test_(add
        """), 6, "bad regex"),
    ("tag not identifier", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              tags: [gpt-oss]
        """), 6, "not a valid Python identifier"),
    ("duplicate key", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          path: ${SPYRE_SUITES}/y.py
        """), 4, "duplicate key `path`"),
    ("unknown token", _minimal("- path: ${PYTORCH_DIR}/test/test_ops.py\n"), 3,
     "unknown token ${PYTORCH_DIR}"),
    ("selectors are planned", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              selectors: {include: []}
        """), 6, "selectors is planned"),
    ("inputs unsupported", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              edits:
                inputs: {args: []}
        """), 7, "inputs is not supported"),
    ("edit dtype unknown", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              edits:
                dtypes:
                  exclude: [{name: half}]
        """), 8, "'half' is not a PyTorch dtype name"),
    ("edit module not qualified", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              edits:
                modules:
                  include: [{name: Linear}]
        """), 8, "fully-qualified class path"),
    ("edit op without name", _minimal("""\
        - path: ${SPYRE_SUITES}/x.py
          tests:
            - names: [A::b]
              edits:
                ops:
                  include: [{description: x}]
        """), 8, "missing required key `name`"),
    ("global dtype unknown", _minimal(global_body="supported_dtypes: [{name: fp16}]\n"), 5,
     "'fp16' is not a PyTorch dtype name"),
    ("op dtype not a subset", _minimal(global_body="""\
        supported_dtypes: [{name: float16}]
        supported_ops:
          - name: add
            dtypes: [{name: float32}]
        """), 8, "not in global.supported_dtypes"),
    ("negative tolerance", _minimal(global_body="""\
        supported_ops:
          - name: add
            dtypes:
              - name: float16
                precision: {atol: -1}
        """), 9, "atol must be >= 0"),
    ("tolerance not a number", _minimal(global_body="""\
        supported_ops:
          - name: add
            dtypes:
              - name: float16
                precision: {rtol: tight}
        """), 9, "must be a float"),
    ("force_xfail not bool", _minimal(global_body="""\
        supported_ops:
          - name: add
            force_xfail: sometimes
        """), 7, "must be a bool"),
    ("op listed twice", _minimal(global_body="""\
        supported_ops:
          - name: add
          - name: add
        """), 7, "listed twice"),
    ("unknown device", _minimal(global_body="devices: [cpu, tpu]\n"), 5, "'tpu'"),
    ("discover not bool", _minimal(global_body="discover_native_ops: maybe\n"), 5, "must be a bool"),
]


@pytest.mark.parametrize("name,text,line,reason", BAD, ids=[b[0] for b in BAD])
def test_bad_file_is_rejected_with_line_and_reason(name, text, line, reason):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="bad.yaml")
    error = caught.value
    assert (error.line, reason in error.reason) == (line, True), str(error)
    assert str(error).startswith(f"bad.yaml:{line}: ")


def test_cli_validate_reports_the_line_and_fails(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(next(text for name, text, _, _ in BAD if name == "bad unlisted mode"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "torch_spyre.testing", "validate", str(bad)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2
    assert f"{bad}:4: " in result.stderr and "'xfial' is not a mode" in result.stderr
    good = subprocess.run([sys.executable, "-m", "torch_spyre.testing", "validate",
                           str(PROJECT_CONFIG)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert good.returncode == 0 and "valid" in good.stdout, good.stderr
