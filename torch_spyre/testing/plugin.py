"""The relay's pytest plugin: `pytest -p torch_spyre.testing.plugin`.

Before collection it loads the relay config (--relay-config, or the RFC's
PYTORCH_TEST_CONFIG variable) and installs SpyreTestBase, so test files that
call instantiate_device_type_tests generate spyre variants shaped by the
config. At collection it applies the selection (--relay-selection), each
variant's mode (skip / xfail / strict xfail / mandatory success) as pytest
marks, the config's tags and the RFC's op__/dtype__/module__ marks. After the
run it writes the JSON summary (--relay-summary) and JUnit XML
(--relay-junit) from the same per-test records.

With --relay-journal, each test's start and end are appended to a JSON-lines
file as they happen, and tests the journal already holds are deselected: if
a test kills the process (a segfault in a kernel), the CLI records it from
the journal as crashed and starts pytest again on the tests left. Each
file's import is journalled too (collect/collected), a file that fails to
import is recorded as that file's `<collection>` error, and a session that
finishes journals "finish": a process that ends without it died.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pytest

from . import records
from .report import (Outcome, _first_line, _full_text, build_summary, file_error_record,
                     relay_exit_status, write_json, write_junit)
from .selection import Selection

_RELAY = pytest.StashKey[dict]()
# The status a watchdog ends the process with (the CLI reads the journal).
EXIT_WATCHDOG = 70
# How often the watchdog looks at the clock and the resident memory.
WATCHDOG_PERIOD_S = 0.1


def resident_mb() -> float:
    """This process's resident memory in MB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pytest_addoption(parser):
    group = parser.getgroup("spyre relay")
    group.addoption("--relay-config", default=os.environ.get("PYTORCH_TEST_CONFIG"),
                    help="relay YAML config (default: $PYTORCH_TEST_CONFIG)")
    group.addoption("--relay-summary", default=None, help="write the JSON summary here")
    group.addoption("--relay-selection", default=None,
                    help="JSON selection written by `python -m torch_spyre.testing select`")
    group.addoption("--relay-junit", default=None, help="write JUnit XML here")
    group.addoption("--relay-journal", default=None,
                    help="JSON-lines journal of test starts/ends (crash recovery)")
    group.addoption("--relay-test-timeout", type=float, default=None,
                    help="seconds a test may run; past it the test is recorded as failed "
                         "and the process exits (the CLI runs the rest); needs --relay-journal")
    group.addoption("--relay-file-timeout", type=float, default=None,
                    help="seconds a file's tests may take in all; past it the running test "
                         "is recorded as failed and the file's later tests are skipped "
                         "(needs --relay-journal)")
    group.addoption("--relay-reruns", type=int, default=0,
                    help="run a failing test up to N more times (a pass then is 'flaky')")
    group.addoption("--relay-memory-limit-mb", type=float, default=None,
                    help="resident memory (MB) the test process may reach during a test; "
                         "past it the same (needs --relay-journal)")


class RelayPlugin:
    def __init__(self, config_path, selection, summary_path=None, junit_path=None,
                 journal_path=None, test_timeout=None, file_timeout=None,
                 memory_limit_mb=None, reruns=0):
        from .config import load_config
        from .device_type import install, set_active_config

        self.config = load_config(config_path) if config_path else None
        self.summary_path, self.junit_path = summary_path, junit_path
        self.journal = Journal(journal_path) if journal_path else None
        self.earlier = self.journal.records() if self.journal else {}
        self.selection = selection
        self.test_timeout, self.file_timeout = test_timeout, file_timeout
        self.memory_limit_mb = memory_limit_mb
        self.reruns = reruns
        # Seconds each file's tests have taken, earlier processes included
        # (the per-file limit spans the CLI's restarts).
        self.file_seconds: dict[str, float] = defaultdict(float)
        for record in self.earlier.values():
            self.file_seconds[record["nodeid"].split("::")[0]] += record.get("duration_s", 0.0)
        self.outcomes: dict[str, Outcome] = {}
        self.file_errors: dict[str, dict] = {}
        self.started = time.time()
        set_active_config(self.config)
        install()

    # ---- collection --------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        # Journalled so that a process dying while importing a file is
        # recorded against that file (Journal.unfinished_collection).
        module = isinstance(collector, pytest.Module) and self.journal is not None
        if module:
            self.journal.write("collect", {"file": str(collector.path)})
        report = yield
        if module:
            self.journal.write("collected", {"file": str(collector.path)})
        return report

    def pytest_collectreport(self, report):
        """A file that fails to import is an error of that file; the others
        still run (the CLI passes --continue-on-collection-errors)."""
        if not report.failed:
            return
        path = str(report.fspath) if report.fspath else report.nodeid
        record = file_error_record(os.path.abspath(path), "collection",
                                   f"the file failed to import: {_first_line(report)}",
                                   _full_text(report))
        self.file_errors[record["nodeid"]] = record
        if self.journal is not None:
            self.journal.write("end", record)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        kept, deselected = [], []
        for item in items:
            if item.nodeid in self.earlier:  # ran (or crashed) in an earlier process
                deselected.append(item)
                continue
            info = _variant(item)
            why_selected = self.selection.why(str(item.path), info)
            if why_selected is None:
                deselected.append(item)
                continue
            policy = self._policy(item, info)
            item.stash[_RELAY] = {"info": info, "policy": policy, "selected": why_selected}
            _apply(item, policy, info, config)
            kept.append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept

    def _policy(self, item, info):
        from .config import VariantPolicy
        if self.config is None:
            return VariantPolicy("mandatory_success", [], "no relay config")
        return self.config.policy(str(item.path), item.cls.__name__ if item.cls else "",
                                  item.name, op=info.get("op"), dtype=info.get("dtype"))

    # ---- running -----------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """pytest's own protocol, journalled, watched, and repeated while the
        test fails (up to --relay-reruns more times). Only the last attempt's
        reports reach pytest's reporters; the failed ones before it are kept
        in the test's record, which makes a test that then meets its mode
        'flaky', never 'passed'."""
        from _pytest.runner import runtestprotocol

        outcome = self.outcomes.setdefault(item.nodeid, Outcome(item.nodeid))
        relay = item.stash.get(_RELAY, None)
        if relay is not None:
            outcome.describe(item, relay)
        file = item.nodeid.split("::")[0]
        shown = outcome.file or file  # as the reports name it
        file_left = None if self.file_timeout is None else \
            self.file_timeout - self.file_seconds[file]
        if file_left is not None and file_left <= 0:
            item.add_marker(pytest.mark.skip(
                reason=f"not run: {shown} used up its per-file limit of {self.file_timeout:g} s"))
        if self.journal is not None and relay is not None:
            self.journal.write("start", outcome.start_record())
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        try:
            for attempt in range(self.reruns + 1):
                started = time.monotonic()
                watchdog = self._watchdog(outcome, shown, file_left)
                try:
                    reports = runtestprotocol(item, nextitem=nextitem, log=False)
                finally:
                    if watchdog is not None:
                        watchdog.set()
                    elapsed = time.monotonic() - started
                    self.file_seconds[file] += elapsed
                    if file_left is not None:
                        file_left -= elapsed
                if attempt == self.reruns or not any(r.failed for r in reports):
                    break
                # A failed class or module setup stays cached by pytest, so
                # its rerun fails the same way: honest, if pointless.
                outcome.add_failed_attempt(reports)
            for report in reports:
                item.ihook.pytest_runtest_logreport(report=report)
        finally:
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            if self.journal is not None:
                self.journal.write("end", outcome.record())
        return True

    def _watchdog(self, outcome, file, file_left):
        """A thread that, past the per-test or per-file time or the memory
        guard, journals the test as failed and ends the process: a hung
        kernel cannot be interrupted from Python, and memory a test holds
        cannot be taken back, so only a fresh process (the CLI's restart)
        goes on. Returns an event that stops it (None without limits)."""
        if self.journal is None or (self.test_timeout is None and file_left is None
                                    and self.memory_limit_mb is None):
            return None
        import threading
        from .report import crash_record

        done = threading.Event()
        started = time.monotonic()
        limits = [(seconds, why) for seconds, why in (
            (self.test_timeout, f"timed out after {self.test_timeout:g} s"
             if self.test_timeout else ""),
            (file_left, f"{file} passed its per-file limit of {self.file_timeout:g} s "
                        "during this test" if file_left is not None else ""))
            if seconds is not None]

        def watch():
            while not done.wait(WATCHDOG_PERIOD_S):
                elapsed = time.monotonic() - started
                reason = next((why for seconds, why in limits if elapsed > seconds), None)
                if reason is None and self.memory_limit_mb is not None:
                    rss_mb = resident_mb()
                    if rss_mb > self.memory_limit_mb:
                        reason = (f"exceeded the memory guard of {self.memory_limit_mb:g} MB "
                                  f"(resident {rss_mb:.0f} MB)")
                if reason is not None and not done.is_set():
                    record = crash_record(outcome.start_record(), reason, by_watchdog=True)
                    record["duration_s"] = round(outcome.duration + elapsed, 4)
                    self.journal.write("crash", record)
                    os._exit(EXIT_WATCHDOG)

        threading.Thread(target=watch, name="relay-watchdog", daemon=True).start()
        return done

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        records.take()
        try:
            return (yield)
        finally:
            item.stash.setdefault(_RELAY, {})["counts"] = records.take()

    def pytest_runtest_logreport(self, report):
        outcome = self.outcomes.get(report.nodeid)
        if outcome is None:
            outcome = self.outcomes[report.nodeid] = Outcome(report.nodeid)
        outcome.add(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        relay = item.stash.get(_RELAY, None)
        if relay is not None:
            outcome = self.outcomes.setdefault(report.nodeid, Outcome(report.nodeid))
            outcome.describe(item, relay)
            if call.when == "call":
                for key, value in relay.get("counts", {}).items():
                    item.user_properties.append((key, value))
        return report

    # ---- summary -----------------------------------------------------------

    def pytest_sessionfinish(self, session, exitstatus):
        from .device_type import removed_variants
        by_nodeid = {**self.earlier, **self.file_errors,
                     **{o.nodeid: o.record() for o in self.outcomes.values()}}
        records = list(by_nodeid.values())
        if self.journal is not None:
            # Across restarted processes the exit status follows the records.
            exitstatus = relay_exit_status(records)
        if self.summary_path:
            summary = build_summary(records, config=self.config, selection=self.selection,
                                    removed=removed_variants,
                                    wall_seconds=time.time() - self.journal_started(),
                                    exit_status=int(exitstatus),
                                    native_ops=_native_ops_if_known())
            write_json(self.summary_path, summary)
        if self.junit_path:
            write_junit(self.junit_path, records)
        if self.journal is not None:
            # The CLI tells a finished process from one that died by this.
            self.journal.write("finish", {"exit_status": int(exitstatus)})

    def journal_started(self):
        started = self.journal.started() if self.journal is not None else None
        return started if started is not None else self.started


class Journal:
    """Append-only JSON lines: {"event": start|end|crash, "record": {...}}.

    Each line is written and closed at once, so it survives the process
    being killed by the test that runs next.
    """

    def __init__(self, path):
        self.path = path
        if not os.path.exists(path):
            self.write("begin", {"time": time.time()})

    def write(self, event, record):
        line = (json.dumps({"event": event, "record": record}) + "\n").encode()
        with open(self.path, "a+b") as f:
            # A journal not ending its last line (written by hand, or by a
            # tool) must not have this entry glued onto that line.
            if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                line = b"\n" + line
            f.write(line)

    def entries(self):
        with open(self.path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def started(self):
        return next((e["record"]["time"] for e in self.entries() if e["event"] == "begin"), None)

    def records(self):
        """{nodeid: final record} of every test that ended or crashed."""
        done = {}
        for entry in self.entries():
            if entry["event"] in ("end", "crash"):
                done[entry["record"]["nodeid"]] = entry["record"]
        return done

    def broken_files(self):
        """The files recorded as failing to import (or dying while imported)."""
        return {r["nodeid"].split("::")[0] for r in self.records().values()
                if r.get("kind") == "collection"}

    def finishes(self):
        return sum(1 for e in self.entries() if e["event"] == "finish")

    def unfinished_collection(self):
        """The file being imported when the process died, if any."""
        collecting = None
        for entry in self.entries():
            if entry["event"] == "collect":
                collecting = entry["record"]["file"]
            elif entry["event"] == "collected":
                collecting = None
        return collecting

    def last_started_file(self):
        starts = [e["record"] for e in self.entries() if e["event"] == "start"]
        return starts[-1]["file"] if starts else None

    def unfinished(self):
        """The start record of the test that was running when the process died."""
        open_starts = {}
        for entry in self.entries():
            record = entry["record"]
            if entry["event"] == "start":
                open_starts[record["nodeid"]] = record
            elif entry["event"] in ("end", "crash"):
                open_starts.pop(record["nodeid"], None)
        return next(reversed(open_starts.values()), None)


def _native_ops_if_known():
    """The native OpInfos when this run computed them (never computes them)."""
    from .native_ops import native_opinfos
    if native_opinfos.cache_info().currsize == 0:
        return None
    return [{"op": n.full_name, "why": n.why} for _, n in native_opinfos()]


def _variant(item):
    fn = getattr(item.cls, item.name, None) if item.cls is not None else None
    return dict(getattr(fn, "relay_variant", None) or {})


def _marker_name(prefix, value):
    return prefix + "".join(c if c.isalnum() else "_" for c in value)


def _apply(item, policy, info, config):
    reason = f"relay mode {policy.mode}: {policy.why}"
    if policy.mode == "skip":
        item.add_marker(pytest.mark.skip(reason=reason))
    elif policy.mode in ("xfail", "xfail_strict"):
        item.add_marker(pytest.mark.xfail(reason=reason, strict=policy.mode == "xfail_strict"))
    marks = list(policy.tags)
    if info.get("op"):
        marks.append(_marker_name("op__", info["op"]["full_name"]))
    if info.get("dtype"):
        marks.append(_marker_name("dtype__", info["dtype"]))
    if info.get("module"):
        marks.append(_marker_name("module__", info["module"].removeprefix("torch.")))
    for name in marks:
        config.addinivalue_line("markers", f"{name}: added by the spyre relay")
        item.add_marker(getattr(pytest.mark, name))
    item.user_properties.append(("mode", policy.mode))
    for key in ("dtype", "module"):
        if info.get(key):
            item.user_properties.append((key, info[key]))
    if info.get("op"):
        item.user_properties.append(("op", info["op"]["full_name"]))
    if policy.tags:
        item.user_properties.append(("tags", ",".join(policy.tags)))


def pytest_configure(config):
    from .config import ConfigError
    try:
        selection = Selection.load(config.getoption("--relay-selection"))
        plugin = RelayPlugin(config.getoption("--relay-config"), selection,
                             summary_path=config.getoption("--relay-summary"),
                             junit_path=config.getoption("--relay-junit"),
                             journal_path=config.getoption("--relay-journal"),
                             test_timeout=config.getoption("--relay-test-timeout"),
                             file_timeout=config.getoption("--relay-file-timeout"),
                             memory_limit_mb=config.getoption("--relay-memory-limit-mb"),
                             reruns=config.getoption("--relay-reruns"))
    except ConfigError as error:
        raise pytest.UsageError(f"spyre relay config: {error}") from None
    config.pluginmanager.register(plugin, "spyre-relay")
