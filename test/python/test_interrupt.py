"""Long launches can be stopped.

A wait on the device (torch.spyre.synchronize(), a stream's or an event's
synchronize(), reading a result with .cpu() or .item()) ends with a
KeyboardInterrupt a fraction of a second after Ctrl-C: before, it ran to
the end of every queued launch, however long. A launch past the emulator's
watchdog is aborted with a device error (SPYRE_SIM_LAUNCH_LIMIT_US of
modelled time, checked before it runs; SPYRE_SIM_WATCHDOG_S of host time)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# Queues about a minute of launches, says "waiting", waits with `wait`; on
# KeyboardInterrupt says "interrupted" and leaves at once (the launches
# would run on at exit).
CHILD = """
import os, sys, torch
a = torch.randn(1024, 1024, device="spyre")
for _ in range(3):
    a @ a
torch.spyre.synchronize()
b = a
for _ in range(400):
    b = a @ a
WAIT
"""

WAITS = {
    "device": "torch.spyre.synchronize()",
    "stream": "torch.spyre.current_stream().synchronize()",
    "event": "e = torch.spyre.Event(); e.record(); e.synchronize()",
    "read": "b.sum().item()",
}


@pytest.mark.parametrize("wait", list(WAITS))
def test_ctrl_c_ends_a_wait_on_long_launches(wait):
    body = CHILD.replace("WAIT", textwrap.dedent(f"""
        try:
            print("waiting", flush=True)
            {WAITS[wait]}
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        os._exit(0)
    """).replace("\n", "\n"))
    child = subprocess.Popen([sys.executable, "-c", body], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().strip()
        latency = time.monotonic() - sent
        assert line == "interrupted", (line, child.stderr.read()[-2000:])
        # Ended within a few wait slices (50 ms each), with room for a loaded host.
        assert latency < 1.0, latency
    finally:
        child.kill()
        child.wait()


def test_a_launch_past_the_modelled_limit_is_a_device_error(fresh_python):
    result = fresh_python("""
        import torch
        a = torch.randn(512, 512, device="spyre")
        try:
            (a @ a).cpu()
        except RuntimeError as error:
            print("refused:", "SPYRE_SIM_LAUNCH_LIMIT_US" in str(error))
        x = torch.ones(4, device="spyre")
        print("usable:", (x + 1).cpu().tolist())
    """, SPYRE_SIM_LAUNCH_LIMIT_US="5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: True" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "usable: [2.0, 2.0, 2.0, 2.0]" in result.stdout


def test_watchdog_settings_are_validated(fresh_python):
    for name in ["SPYRE_SIM_LAUNCH_LIMIT_US", "SPYRE_SIM_WATCHDOG_S"]:
        result = fresh_python("import torch; torch.ones(1, device='spyre')",
                              **{name: "soon"})
        assert result.returncode != 0
        assert f"{name}='soon' is not an integer" in result.stderr
