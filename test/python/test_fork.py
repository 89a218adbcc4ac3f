"""Fork safety, as torch.cuda: a child forked after the device was used gets
a clear "cannot re-initialize" error at once (the device's threads do not
survive a fork) instead of hanging; a fork before any use, and the 'spawn'
start method, give children a working device."""

import json
import os
import subprocess
import sys
import textwrap
import time

import torch

import torch_spyre  # noqa: F401

CHILD_TIMEOUT_S = 30


def run_in_forked_child(fn):
    """Forks; the child runs fn() and sends its JSON result back. Returns it
    and the seconds the child took."""
    read_end, write_end = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_end)
        try:
            result = fn()
        except BaseException as error:  # noqa: BLE001
            result = {"unexpected": repr(error)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"the forked child hung for {CHILD_TIMEOUT_S} s")
    with os.fdopen(read_end) as pipe:
        return json.loads(pipe.read()), time.monotonic() - start


def error_of(fn):
    try:
        fn()
    except RuntimeError as error:
        return str(error)
    return None


def test_child_forked_after_use_raises_at_once():
    inherited = torch.arange(6.0).to("spyre") * 2
    torch.spyre.synchronize()
    assert not torch.spyre._is_in_bad_fork()

    def child():
        errors = {
            "new tensor": error_of(lambda: torch.ones(3, device="spyre")),
            "read inherited": error_of(lambda: inherited.cpu()),
            "synchronize": error_of(torch.spyre.synchronize),
        }
        return {"bad_fork": torch.spyre._is_in_bad_fork(),
                "initialized": torch.spyre.is_initialized(), "errors": errors}

    result, seconds = run_in_forked_child(child)
    assert result.get("unexpected") is None, result
    assert result["bad_fork"] is True
    assert result["initialized"] is False
    for what, message in result["errors"].items():
        assert message is not None, f"{what} worked in a bad fork"
        assert "forked subprocess" in message and "spawn" in message, message
    assert seconds < 10
    # The parent's device is unaffected.
    assert torch.equal(inherited.cpu(), torch.arange(6.0) * 2)


def run_script(body, tmp_path):
    # A file, not -c: spawn's children import the main module by its path.
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_fork_before_any_use_gives_the_child_a_working_device(tmp_path):
    out = run_script("""
        import os, torch, torch_spyre
        assert torch.spyre.device_count() > 0   # counting is not using
        pid = os.fork()
        if pid == 0:
            ok = (torch.ones(3, device="spyre") * 2).cpu().tolist() == [2.0, 2.0, 2.0]
            os._exit(0 if ok and not torch.spyre._is_in_bad_fork() else 1)
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status))
    """, tmp_path)
    assert "child status 0" in out


def test_spawn_children_use_the_device(tmp_path):
    out = run_script("""
        import multiprocessing as mp
        import torch, torch_spyre

        def work(q):
            import torch, torch_spyre
            q.put((torch.ones(3, device="spyre") * 3).cpu().tolist())

        if __name__ == "__main__":
            torch.ones(1, device="spyre").cpu()   # the parent uses the device first
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=work, args=(q,))
            p.start()
            print("spawned", q.get(timeout=60))
            p.join()
    """, tmp_path)
    assert "spawned [3.0, 3.0, 3.0]" in out
