"""Shared set-up of the torch_spyre Python tests.

Two emulated devices, so that device switching and cross-device copies are
tested; set before torch (and so torch_spyre) is imported and before the
runtime starts, which happens at first use.
"""

import os
import subprocess
import sys
import textwrap

os.environ.setdefault("SPYRE_SIM_DEVICES", "2")

import pytest  # noqa: E402
import torch  # noqa: E402


def run_python(code, **env):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update({k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=full_env, timeout=300)


@pytest.fixture
def fresh_python():
    return run_python


@pytest.fixture(autouse=True)
def _back_to_device_zero():
    yield
    torch.spyre.set_device(0)
    torch.spyre.set_strict(False)


@pytest.fixture
def strict_no_fallback():
    """The test runs in strict mode (a CPU fallback raises) and none ran:
    for files whose every op must be a device kernel."""
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        yield
    assert torch.spyre.fallback_stats() == {}


def needs_two_devices():
    return pytest.mark.skipif(torch.spyre.device_count() < 2,
                              reason="needs SPYRE_SIM_DEVICES>=2")
