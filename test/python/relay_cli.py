"""Runs the relay's CLI (`python -m torch_spyre.testing run`) as CI would, in
a fresh process, and reads back its two reports."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_relay_cli(config_path, pytorch_root, *args, env_extra=None, timeout=900):
    """`run --config config_path` with its reports beside the config (in
    reports/), PYTORCH_ROOT at `pytorch_root`, then `args`. Returns
    (CompletedProcess, the JSON summary, the JUnit root)."""
    config_path = Path(config_path)
    reports = config_path.parent / "reports"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTORCH_ROOT=str(pytorch_root),
               **(env_extra or {}))
    command = [sys.executable, "-m", "torch_spyre.testing", "run", "--config", str(config_path),
               "--report-dir", str(reports), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                            cwd=config_path.parent)
    summary = json.loads((reports / "relay-summary.json").read_text())
    junit = ET.parse(reports / "relay-junit.xml").getroot()
    return result, summary, junit
