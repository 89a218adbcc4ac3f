"""The config's dtype filter sees every dtype a variant is instantiated for:
@dtypes pairs (one variant, several dtypes), a dtype-valued @parametrize
next to @dtypes, @dtypesIfPRIVATEUSE1, and an OpInfo whose dtypes come from
its dtypesIf table. Fixture: test/relay/upstream/test/test_multi_dtype.py,
an upstream-style device-generic file."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.testing._internal import common_device_type as cdt

from torch_spyre.testing import device_type
from torch_spyre.testing.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "test" / "relay" / "upstream"
FIXTURE = UPSTREAM / "test" / "test_multi_dtype.py"

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_multi_dtype.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestMultiDtype::test_pair_.*]
          edits:
            dtypes:
              include: [{name: float64}]
              exclude: [{name: float16}]
  global:
    supported_dtypes: [{name: float16}, {name: float32}]
"""


def _instantiate(config_text, monkeypatch):
    """Imports the fixture with `config_text` active; returns (kept test
    names, {removed name: why})."""
    monkeypatch.setenv("PYTORCH_ROOT", str(UPSTREAM))
    monkeypatch.setattr(cdt, "device_type_test_bases", list(cdt.device_type_test_bases))
    monkeypatch.setattr(device_type, "removed_variants", [])
    monkeypatch.setattr(device_type, "_active_config", None)
    device_type.set_active_config(parse_config(config_text, source="dtypes.yaml"))
    device_type.install()
    spec = importlib.util.spec_from_file_location("relay_fixture_multi_dtype", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # the base reads its __file__
    spec.loader.exec_module(module)
    kept = sorted(n for n, v in vars(module.TestMultiDtypeSPYRE).items()
                  if n.startswith("test_") and callable(v))
    removed = {name: why for _, _, name, why in device_type.removed_variants}
    return kept, removed


def test_variant_info_lists_every_dtype():
    info = device_type.variant_info({"dtypes": (torch.float32, torch.complex64)})
    assert info["dtype"] == "float32,complex64"
    assert info["dtypes"] == ["float32", "complex64"]
    info = device_type.variant_info({"dtype": torch.float16, "other": torch.int64,
                                     "device": "spyre", "n": 3})
    assert (info["dtype"], info["dtypes"]) == ("float16", ["float16", "int64"])
    assert device_type.variant_info({"n": 3})["dtypes"] == []


def test_every_dtype_of_a_variant_is_filtered():
    cfg = parse_config(textwrap.dedent("""\
        test_suite_config:
          files: [{path: "${SPYRE_SUITES}/test_spyre_opinfo.py"}]
          global:
            supported_dtypes: [{name: float16}, {name: float32}]
            supported_ops:
              - name: add
                dtypes: [{name: float32}]
        """))
    path = cfg.files[0].resolve()[0]
    excluded = lambda **kw: cfg.variant_excluded(path, "T", "t", **kw)  # noqa: E731
    assert excluded(dtypes=["float32", "float16"]) is None
    assert excluded(dtypes=["float32", "complex64"]) == \
        "dtype complex64 is not in global.supported_dtypes"
    # the op's own dtype list applies to each dtype as well
    op = {"name": "add", "full_name": "add", "aten_name": "add"}
    assert "dtypes of supported op add" in excluded(op=op, dtypes=["float32", "float16"])
    assert excluded(op=op, dtypes=["float32"]) is None


def test_instantiation_drops_multi_dtype_variants(monkeypatch):
    kept, removed = _instantiate(CONFIG, monkeypatch)
    assert kept == [
        "test_if_device_spyre_float32",           # @dtypesIfPRIVATEUSE1 ∩ supported
        "test_op_fixture_neg_spyre_float16",      # the OpInfo's dtypesIf['spyre'] ∩ supported
        # float64 re-admitted by edits.dtypes.include for test_pair only
        "test_pair_spyre_float32_float64",
        "test_with_other_float32_spyre_float16",
        "test_with_other_float32_spyre_float32",
    ]
    assert removed == {
        "test_pair_spyre_float32_complex64": "dtype complex64 is not in global.supported_dtypes",
        "test_pair_spyre_float16_float32": "dtype float16 excluded by edits.dtypes.exclude",
        "test_with_other_int64_spyre_float16": "dtype int64 is not in global.supported_dtypes",
        "test_with_other_int64_spyre_float32": "dtype int64 is not in global.supported_dtypes",
        "test_if_device_spyre_bfloat16": "dtype bfloat16 is not in global.supported_dtypes",
        "test_op_fixture_neg_spyre_float64": "dtype float64 is not in global.supported_dtypes",
    }


def test_relay_run_reports_the_variants_dtypes(tmp_path):
    """Through the CLI and plugin: removed pair variants are reported, the
    kept ones run on the device and pass, with their dtypes in the summary."""
    config = tmp_path / "dtypes.yaml"
    config.write_text(CONFIG)
    reports = tmp_path / "reports"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTORCH_ROOT=str(UPSTREAM))
    result = subprocess.run([sys.executable, "-m", "torch_spyre.testing", "run", "--config",
                             str(config), "--report-dir", str(reports)],
                            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    summary = json.loads((reports / "relay-summary.json").read_text())
    outcomes = {t["name"]: (t["outcome"], t["dtype"]) for t in summary["tests"]}
    assert outcomes == {
        "test_if_device_spyre_float32": ("passed", "float32"),
        "test_op_fixture_neg_spyre_float16": ("passed", "float16"),
        "test_pair_spyre_float32_float64": ("passed", "float32,float64"),
        "test_with_other_float32_spyre_float16": ("passed", "float16"),
        "test_with_other_float32_spyre_float32": ("passed", "float32"),
    }, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0
    removed = {r["name"] for r in summary["removed_by_config"]}
    assert {"test_pair_spyre_float32_complex64", "test_with_other_int64_spyre_float32"} <= removed
