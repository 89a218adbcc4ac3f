"""Failures outside any test (issue 16, item 1): a file that fails to
import, a process that ends during an import, inside a test or outside any
test, with a signal or with os._exit(0). Each is a failed run in every
artefact, with its own exit code, and the other files still run."""

import json
import os
import subprocess
import sys

import pytest
from relay_cli import ROOT, run_relay_cli

FIXTURES = ROOT / "test" / "relay" / "fixtures" / "outside_tests"


def _config(files, global_text=""):
    entries = "".join(f"    - path: ${{TORCH_ROOT}}/{name}\n      unlisted_test_mode: "
                      "mandatory_success\n" for name in files)
    return f"test_suite_config:\n  files:\n{entries}{global_text}"


def _run_relay(tmp_path, *files, env_extra=None, extra_args=(), global_text=""):
    config_path = tmp_path / "relay.yaml"
    config_path.write_text(_config(files, global_text))
    return run_relay_cli(config_path, FIXTURES, "--op-map", "none", *extra_args,
                         env_extra=env_extra, timeout=300)


def _outcomes(summary):
    return {(t["file"].rsplit("/", 1)[-1], t["name"]): t["outcome"] for t in summary["tests"]}


def _junit_errors(junit):
    return {(suite.get("name").rsplit("/", 1)[-1], case.get("name")): case.find("error")
            for suite in junit for case in suite if case.find("error") is not None}


def test_a_file_that_fails_to_import_is_an_error_and_the_others_run(tmp_path):
    result, summary, junit = _run_relay(tmp_path, "test_import_error.py", "test_passes.py")
    assert result.returncode == 3, result.stdout + result.stderr
    assert summary["exit_status"] == 3 and summary["ok"] is False
    assert "failed to import" in summary["reason"]
    assert _outcomes(summary) == {("test_import_error.py", "<collection>"): "failed",
                                  ("test_passes.py", "test_passes"): "passed"}
    errors = _junit_errors(junit)
    assert list(errors) == [("test_import_error.py", "<collection>")]
    assert "a_module_that_does_not_exist" in errors[("test_import_error.py", "<collection>")].text


def test_a_process_ending_with_status_0_during_an_import_is_an_error(tmp_path):
    result, summary, junit = _run_relay(tmp_path, "test_exits_while_imported.py",
                                        "test_passes.py")
    assert result.returncode == 3, result.stdout + result.stderr
    assert summary["ok"] is False
    outcomes = _outcomes(summary)
    assert outcomes[("test_exits_while_imported.py", "<collection>")] == "failed"
    assert outcomes[("test_passes.py", "test_passes")] == "passed"
    message = next(t["message"] for t in summary["tests"] if t["name"] == "<collection>")
    assert "exit status 0" in message
    assert list(_junit_errors(junit)) == [("test_exits_while_imported.py", "<collection>")]


def test_os_exit_0_inside_a_test_fails_that_test_and_the_rest_run(tmp_path):
    result, summary, junit = _run_relay(tmp_path, "test_exits_in_test.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert summary["ok"] is False
    assert _outcomes(summary) == {("test_exits_in_test.py", "test_a_exits_zero"): "failed",
                                  ("test_exits_in_test.py", "test_b_passes_after"): "passed"}
    assert list(_junit_errors(junit)) == [("test_exits_in_test.py", "test_a_exits_zero")]


def test_a_death_outside_any_test_is_exit_3_and_the_tests_still_run(tmp_path):
    flag = tmp_path / "died-once"
    result, summary, junit = _run_relay(tmp_path, "test_passes.py",
                                        env_extra={"RELAY_FIXTURE_DIE_ONCE": str(flag)})
    assert flag.exists()
    assert result.returncode == 3, result.stdout + result.stderr
    assert summary["exit_status"] == 3 and summary["ok"] is False
    assert "outside any test" in summary["reason"]
    outcomes = _outcomes(summary)
    assert outcomes[("test_passes.py", "test_passes")] == "passed"
    assert [t["message"] for t in summary["tests"] if t["name"] == "<outside any test>"] == [
        "the test process died outside any test (exit status 7)"]
    assert len(_junit_errors(junit)) == 1


WATCHDOG_CASES = {
    # (fixture file, its first test, limit, the failed test's message)
    "timeout": ("test_hangs.py", "test_a_hangs", {"extra_args": ["--test-timeout", "2"]},
                "timed out after 2 s"),
    "memory": ("test_grows.py", "test_a_grows",
               {"extra_args": ["--memory-limit-mb", "2000"]},
               "exceeded the memory guard of 2000 MB (resident "),
}


def test_the_configs_limits_reach_the_test_process_as_the_flags_do(tmp_path):
    # global.timeouts and global.memory_limit_mb become the same options of
    # the test process as --test-timeout, --file-timeout and
    # --memory-limit-mb (the tests below run the limits end to end by flag);
    # a flag wins over the config
    from torch_spyre.testing.__main__ import _limit_args, _parser
    from torch_spyre.testing.config import parse_config
    by_config = parse_config(_config(["test_hangs.py"], (
        "  global:\n    timeouts: {test_seconds: 2, file_seconds: 3}\n"
        "    memory_limit_mb: 2000\n")))
    plain = parse_config(_config(["test_hangs.py"]))
    config_path = str(tmp_path / "relay.yaml")
    no_flags = _parser().parse_args(["run", "--config", config_path])
    flags = _parser().parse_args(["run", "--config", config_path, "--test-timeout", "2",
                                  "--file-timeout", "3", "--memory-limit-mb", "2000"])
    assert _limit_args(no_flags, by_config) == _limit_args(flags, plain) == [
        "--relay-test-timeout=2.0", "--relay-file-timeout=3.0",
        "--relay-memory-limit-mb=2000.0"]
    overridden = _parser().parse_args(["run", "--config", config_path, "--test-timeout", "5"])
    assert _limit_args(overridden, by_config)[0] == "--relay-test-timeout=5.0"


@pytest.mark.parametrize("case", WATCHDOG_CASES)
def test_a_test_past_a_watchdog_limit_fails_with_the_reason_and_the_rest_run(tmp_path, case):
    # The per-test timeout and the memory guard (by flag; the config keys
    # reach the test process as the same options, tested above).
    name, stopped, limit, message = WATCHDOG_CASES[case]
    result, summary, junit = _run_relay(tmp_path, name, **limit)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _outcomes(summary) == {(name, stopped): "failed", (name, "test_b_passes_after"): "passed"}
    record = next(t for t in summary["tests"] if t["name"] == stopped)
    assert record["message"].startswith(message), record["message"]
    assert list(_junit_errors(junit)) == [(name, stopped)]


def test_a_disabled_tests_file_in_upstreams_form_skips_its_tests(tmp_path):
    # .pytorch-disabled-tests.json as PyTorch's CI writes it: a test disabled
    # for every platform is skipped with its issue, one disabled on Windows
    # only runs here, the rest run.
    disabled = tmp_path / "disabled.json"
    issue = "https://github.com/pytorch/pytorch/issues/1"
    disabled.write_text(json.dumps({
        "test_disabled_everywhere (__main__.TestUpstreamStyle)": [issue, []],
        "test_disabled_on_windows_only (__main__.TestUpstreamStyle)": [issue + "2", ["win"]]}))
    result, summary, _ = _run_relay(tmp_path, "test_upstream_style.py",
                                    extra_args=["--disabled-tests", str(disabled)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert _outcomes(summary) == {
        ("test_upstream_style.py", "test_disabled_everywhere"): "skipped",
        ("test_upstream_style.py", "test_disabled_on_windows_only"): "passed",
        ("test_upstream_style.py", "test_enabled"): "passed"}
    assert [d["issue"] for d in summary["disabled"]] == [issue]


def test_a_malformed_disabled_tests_file_is_a_usage_error(tmp_path):
    disabled = tmp_path / "disabled.json"
    disabled.write_text(json.dumps({"test_x (__main__.T)": "not a list"}))
    (tmp_path / "relay.yaml").write_text(_config(["test_hangs.py"]))
    command = [sys.executable, "-m", "torch_spyre.testing", "run", "--config",
               str(tmp_path / "relay.yaml"), "--disabled-tests", str(disabled)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(ROOT),
                                     PYTORCH_ROOT=str(FIXTURES)))
    assert result.returncode == 2
    assert "expected upstream's form" in result.stderr


def test_a_file_past_its_time_limit_fails_there_and_its_later_tests_are_not_run(tmp_path):
    # Tests of 1.5 s under a per-file limit of 2 s: the second passes the
    # limit and fails with the reason (in a restarted process, the time
    # spent before counts), the later ones are skipped as not run, and the
    # other file runs.
    result, summary, junit = _run_relay(tmp_path, "test_slow_file.py", "test_passes.py",
                                        extra_args=["--file-timeout", "2"])
    assert result.returncode == 1, result.stdout + result.stderr
    assert _outcomes(summary) == {("test_slow_file.py", "test_a_sleeps"): "passed",
                                  ("test_slow_file.py", "test_b_sleeps"): "failed",
                                  ("test_slow_file.py", "test_c_sleeps"): "skipped",
                                  ("test_slow_file.py", "test_d_hangs"): "skipped",
                                  ("test_passes.py", "test_passes"): "passed"}
    by_name = {t["name"]: t for t in summary["tests"]}
    assert by_name["test_b_sleeps"]["message"] == \
        "${TORCH_ROOT}/test_slow_file.py passed its per-file limit of 2 s during this test"
    for name in ("test_c_sleeps", "test_d_hangs"):
        assert by_name[name]["message"] == \
            "not run: ${TORCH_ROOT}/test_slow_file.py used up its per-file limit of 2 s"
    assert list(_junit_errors(junit)) == [("test_slow_file.py", "test_b_sleeps")]


def test_a_test_that_fails_then_passes_on_a_rerun_is_flaky_not_passed(tmp_path):
    # --reruns 2: the test failing once is flaky with its failed attempt kept
    # (summary and JUnit flakyFailure), the one failing every time fails with
    # its two earlier attempts (rerunFailure), the passing one runs once.
    result, summary, junit = _run_relay(tmp_path, "test_flaky.py", extra_args=["--reruns", "2"],
                                        env_extra={"RELAY_FIXTURE_ATTEMPTS":
                                                   str(tmp_path / "attempts")})
    assert result.returncode == 1, result.stdout + result.stderr
    assert _outcomes(summary) == {("test_flaky.py", "test_a_fails_once"): "flaky",
                                  ("test_flaky.py", "test_b_always_fails"): "failed",
                                  ("test_flaky.py", "test_c_passes"): "passed"}
    assert summary["totals"]["flaky"] == 1 and summary["totals"]["passed"] == 1
    [flaky] = summary["flaky"]
    assert flaky["nodeid"].endswith("/test_flaky.py::test_a_fails_once")
    assert (flaky["attempts"], flaky["failures"]) == (2, ["AssertionError: attempt 1 fails"])
    attempts = {t["name"]: t["attempts"] for t in summary["tests"]}
    assert attempts == {"test_a_fails_once": 2, "test_b_always_fails": 3, "test_c_passes": 1}
    assert f"flaky (passed on attempt 2): {flaky['nodeid']}" in result.stdout
    cases = {case.get("name"): case for suite in junit for case in suite}
    flaky = cases["test_a_fails_once"]
    assert flaky.find("failure") is None
    assert [e.get("message") for e in flaky.findall("flakyFailure")] == \
        ["AssertionError: attempt 1 fails"]
    failing = cases["test_b_always_fails"]
    assert failing.find("failure") is not None and len(failing.findall("rerunFailure")) == 2
    assert cases["test_c_passes"].find("flakyFailure") is None


def test_reruns_from_the_config_make_a_run_with_only_flaky_tests_ok(tmp_path):
    result, summary, _ = _run_relay(tmp_path, "test_flaky.py",
                                    global_text="  global:\n    reruns: 1\n",
                                    extra_args=["--", "-k", "not always_fails"],
                                    env_extra={"RELAY_FIXTURE_ATTEMPTS":
                                               str(tmp_path / "attempts")})
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary["ok"] is True and summary["reason"] is None
    assert [f["nodeid"].rsplit("/", 1)[-1] for f in summary["flaky"]] == \
        ["test_flaky.py::test_a_fails_once"]
