"""The relay's JSON summary and JUnit XML (a dashboard reads them).

Outcomes per test: passed, failed (including errors and the unexpected pass
of a strict xfail), xfailed, xpassed (unexpected pass of a plain xfail),
skipped, and flaky (failed, then met its mode on a rerun: not a failure of
the run, never counted as passed). The summary groups them per file, per op and per module, with
durations, sample counts, the config's sha256 and the torch version.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections import defaultdict

OUTCOMES = ("passed", "failed", "xfailed", "xpassed", "skipped", "flaky")
SCHEMA = "torch_spyre.relay.summary/1"


class Outcome:
    """One test's outcome, assembled from its setup/call/teardown reports."""

    def __init__(self, nodeid):
        self.nodeid = nodeid
        self.outcome = None
        self.duration = 0.0
        self.message = ""
        self.details = ""  # a failure's whole report (traceback, mismatch)
        self.error = False  # failed outside the test body (setup, teardown)
        self.file = self.class_name = self.name = ""
        self.info, self.mode, self.why_mode, self.why_selected = {}, None, "", ""
        self.tags = []
        self.counts = {}
        self.failed_attempts = []  # [{"message", "details", "error"}] before the last

    def describe(self, item, relay):
        self.file = _display_path(str(item.path))
        self.class_name = item.cls.__name__ if item.cls is not None else ""
        self.name = item.name
        self.info = relay.get("info", {})
        policy = relay.get("policy")
        if policy is not None:
            self.mode, self.why_mode, self.tags = policy.mode, policy.why, policy.tags
        self.why_selected = relay.get("selected", "")
        self.counts = relay.get("counts", self.counts)

    def add(self, report):
        self.duration += report.duration
        xfail = hasattr(report, "wasxfail")
        if report.failed:
            strict_xpass = report.when == "call" and "XPASS(strict)" in str(report.longrepr)
            if self._set("failed", "unexpected pass of a strict xfail" if strict_xpass
                         else _first_line(report)):
                self.details = _full_text(report)[-MAX_DETAILS:]
                self.error = report.when != "call"
        elif report.skipped:
            self._set("xfailed" if xfail else "skipped",
                      report.wasxfail if xfail else _skip_reason(report))
        elif report.when == "call":
            self._set("xpassed" if xfail else "passed", "")

    def add_failed_attempt(self, reports):
        """An attempt that failed and is run again (--relay-reruns)."""
        self.duration += sum(r.duration for r in reports)
        failed = next(r for r in reports if r.failed)
        self.failed_attempts.append({"message": _first_line(failed),
                                     "details": _full_text(failed)[-MAX_DETAILS:],
                                     "error": failed.when != "call"})

    def _set(self, outcome, message):
        """False when an earlier failure stands (a failure in any phase does)."""
        if self.outcome == "failed":
            return False
        self.outcome, self.message = outcome, message
        return True

    def start_record(self):
        """What is known before the test runs (a crash leaves only this)."""
        record = self.record()
        record["outcome"] = None
        return record

    def record(self):
        op = self.info.get("op") or {}
        outcome = self.outcome or "skipped"
        if self.failed_attempts and outcome != "failed":
            outcome = "flaky"
        return {"nodeid": self.nodeid, "file": self.file, "class": self.class_name,
                "name": self.name, "op": op.get("full_name"), "dtype": self.info.get("dtype"),
                "module": self.info.get("module"), "mode": self.mode, "tags": self.tags,
                "outcome": outcome, "duration_s": round(self.duration, 4),
                "samples": self.counts.get("samples", 0), "message": self.message,
                "details": self.details, "error": self.error,
                "why_mode": self.why_mode, "why_selected": self.why_selected,
                "attempts": len(self.failed_attempts) + 1,
                "failed_attempts": self.failed_attempts}


# The tail of a failure's report kept in the summary and JUnit: where the
# traceback ends and the mismatch is told.
MAX_DETAILS = 20000


def _full_text(report):
    return getattr(report, "longreprtext", "") or str(report.longrepr)


def _first_line(report):
    text = _full_text(report)
    errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = errors or text.strip().splitlines()[-1:] or [""]
    return lines[0][:500]


def _skip_reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _display_path(path):
    from .config import SUITES_DIR
    suites = str(SUITES_DIR)
    if path.startswith(suites + os.sep):
        return "${SPYRE_SUITES}/" + os.path.relpath(path, suites)
    root = os.environ.get("PYTORCH_ROOT")
    if root and path.startswith(os.path.abspath(root) + os.sep):
        return "${TORCH_ROOT}/" + os.path.relpath(path, os.path.abspath(root))
    return path


def _empty_counts():
    return {**{k: 0 for k in OUTCOMES}, "tests": 0, "samples": 0, "duration_s": 0.0}


def _add(counts, rec):
    counts[rec["outcome"]] += 1
    counts["tests"] += 1
    counts["samples"] += rec["samples"]
    counts["duration_s"] = round(counts["duration_s"] + rec["duration_s"], 4)


def build_summary(records, *, config, selection, removed, wall_seconds, exit_status,
                  native_ops=None):
    import torch

    records = sorted(records, key=lambda r: r["nodeid"])
    totals, per_file = _empty_counts(), defaultdict(_empty_counts)
    per_op, per_module = defaultdict(_empty_counts), defaultdict(_empty_counts)
    op_dtypes = defaultdict(set)
    for rec in records:
        _add(totals, rec)
        _add(per_file[rec["file"]], rec)
        if rec["op"]:
            _add(per_op[rec["op"]], rec)
            if rec["dtype"]:
                op_dtypes[rec["op"]].add(rec["dtype"])
        if rec["module"]:
            _add(per_module[rec["module"]], rec)
    for op, dtypes in op_dtypes.items():
        per_op[op]["dtypes"] = sorted(dtypes)
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch_version": torch.__version__,
        "torch_spyre_version": _package_version(),
        "python": platform.python_version(),
        "config": None if config is None else {"path": config.source, "sha256": config.sha256},
        "exit_status": exit_status,
        "ok": exit_status == 0 and totals["failed"] == 0,
        "reason": _not_ok_reason(records),
        "wall_seconds": round(wall_seconds, 3),
        "totals": totals,
        "files": dict(sorted(per_file.items())),
        "ops": dict(sorted(per_op.items())),
        "modules": dict(sorted(per_module.items())),
        "failures": [r for r in records if r["outcome"] == "failed"],
        "flaky": [{"nodeid": r["nodeid"], "attempts": r["attempts"],
                   "failures": [a["message"] for a in r["failed_attempts"]]}
                  for r in records if r["outcome"] == "flaky"],
        "disabled": [{"nodeid": r["nodeid"], "issue": _disabling_issue(r["message"])}
                     for r in records if _disabling_issue(r["message"])],
        "native_ops": native_ops,
        "selection": selection.to_json() if selection is not None else None,
        "removed_by_config": [{"file": _display_path(f), "class": c, "name": n, "why": w}
                              for f, c, n, w in removed],
        "inactive_config_entries": [] if config is None else [
            {"path": e.path, "line": e.line, "unset": tokens}
            for e, tokens in config.inactive_entries()],
        "tests": records,
    }


# How PyTorch's test framework words the skip of a test an issue disables
# (common_utils.check_if_enable), before the issue's url.
DISABLED_SKIP = "Test is disabled because an issue exists disabling it: "


def _disabling_issue(message):
    """The issue url of a test skipped as disabled (None otherwise)."""
    if not message or not message.startswith(DISABLED_SKIP):
        return None
    return message[len(DISABLED_SKIP):].split()[0]


def _not_ok_reason(records):
    """Why the run is not ok, in words (None when it is)."""
    kinds = (("collection", "files failed to import"),
             ("outside", "processes died outside any test"),
             (None, "tests failed"))
    parts = []
    for kind, words in kinds:
        n = sum(1 for r in records if r["outcome"] == "failed" and r.get("kind") == kind)
        if n:
            parts.append(f"{n} {words}")
    return "; ".join(parts) or None


def _package_version():
    try:
        from importlib.metadata import version
        return version("torch_spyre")
    except Exception:
        return None


def crash_record(start, cause, by_watchdog=False):
    """The record of a test whose process died (`cause`: a signal's name or
    an exit status), or that the watchdog stopped (`cause`: "timed out after
    N s", "exceeded the memory guard of M MB ..."): its mode decides the
    outcome."""
    expected = start.get("mode") in ("xfail", "xfail_strict")
    message = cause if by_watchdog else f"the test process died ({cause})"
    return {**start, "outcome": "xfailed" if expected else "failed", "message": message,
            "details": message, "error": True}


# The CLI's exit codes (docs/relay.md, "Reports and exit code").
EXIT_OK, EXIT_TESTS_FAILED, EXIT_USAGE, EXIT_OUTSIDE_TESTS = 0, 1, 2, 3


def relay_exit_status(records):
    """Derived from the records alone, never from pytest's status: 3 when a
    file failed to import or a process died outside any test, 1 when a test
    missed its mode, else 0."""
    if any(r.get("kind") in ("collection", "outside") for r in records):
        return EXIT_OUTSIDE_TESTS
    return EXIT_TESTS_FAILED if any(r["outcome"] == "failed" for r in records) else EXIT_OK


def file_error_record(file, kind, message, details=""):
    """A record for a failure that belongs to a file, not a test: `kind`
    "collection" (the file failed to import) or "outside" (the process died
    outside any test, e.g. in a fixture's teardown or os._exit)."""
    name = "<collection>" if kind == "collection" else "<outside any test>"
    return {"nodeid": f"{file}::{name}", "file": _display_path(file), "class": "",
            "name": name, "op": None, "dtype": None, "module": None, "mode": None,
            "tags": [], "outcome": "failed", "duration_s": 0.0, "samples": 0,
            "message": message, "details": (details or message)[-MAX_DETAILS:],
            "error": True, "kind": kind, "why_mode": "", "why_selected": ""}


def write_junit(path, records):
    """JUnit XML from the same records as the summary: one testsuite per
    file. A failure in the test body is a <failure>, one in its setup or
    teardown (or a process that died) an <error>, both with the whole
    report as text; skips and xfails are <skipped> with their reason."""
    import xml.etree.ElementTree as ET

    by_file = defaultdict(list)
    for r in sorted(records, key=lambda r: r["nodeid"]):
        by_file[r["file"]].append(r)
    root = ET.Element("testsuites")
    for file, tests in sorted(by_file.items()):
        errors = sum(r["outcome"] == "failed" and r.get("error", False) for r in tests)
        failures = sum(r["outcome"] == "failed" for r in tests) - errors
        skipped = sum(r["outcome"] in ("skipped", "xfailed") for r in tests)
        suite = ET.SubElement(root, "testsuite", name=file, tests=str(len(tests)),
                              failures=str(failures), errors=str(errors),
                              skipped=str(skipped),
                              time=f"{sum(r['duration_s'] for r in tests):.3f}")
        for r in tests:
            _junit_case(suite, r)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _junit_case(suite, r):
    import xml.etree.ElementTree as ET

    case = ET.SubElement(suite, "testcase", classname=r["class"], name=r["name"],
                         file=r["file"], time=f"{r['duration_s']:.3f}")
    properties = ET.SubElement(case, "properties")
    for key in ("op", "dtype", "module", "mode", "tags", "samples", "outcome"):
        value = ",".join(r[key]) if key == "tags" else r.get(key)
        if value not in (None, ""):
            ET.SubElement(properties, "property", name=key, value=str(value))
    if r["outcome"] == "failed":
        kind = "error" if r.get("error", False) else "failure"
        ET.SubElement(case, kind, message=r["message"]).text = \
            r.get("details") or r["message"]
    elif r["outcome"] in ("skipped", "xfailed"):
        ET.SubElement(case, "skipped", type="pytest." + (
            "xfail" if r["outcome"] == "xfailed" else "skip"), message=r["message"])
    # Earlier failed attempts as Maven Surefire writes reruns, which JUnit
    # readers (Jenkins, GitLab) show: a flaky test passes with its
    # flakyFailure/flakyError, a failing one carries its rerunFailure/rerunError.
    prefix = "rerun" if r["outcome"] == "failed" else "flaky"
    for attempt in r.get("failed_attempts", ()):
        kind = prefix + ("Error" if attempt["error"] else "Failure")
        ET.SubElement(case, kind, message=attempt["message"]).text = attempt["details"]


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
