"""Sharding a relay run: `run --shard i/n` runs the i-th of n disjoint parts
of the selected tests, together covering all of them.

The parts are balanced by recorded test times (a previous run's
relay-summary.json or relay-journal.jsonl, `--shard-times`), else every test
weighs the same. The assignment is a pure function of the selected tests and
the times: each shard collects the tests once, computes the same assignment
and keeps its own part, so no coordinator is needed.

Tests are keyed by `file::Class::name` with the file as the reports display
it (`${TORCH_ROOT}/test/x.py`), so times recorded on one machine apply on
another whatever its checkout path or pytest rootdir.

Balancing is greedy longest-processing-time: tests in order of decreasing
time (ties by key) each go to the shard with the least load so far (ties to
the lowest index). Every shard's load is within one test's time of the
others' (max load - min load <= the longest test).

As a pytest plugin (`-p torch_spyre.testing.shard --relay-shard=i/n`), it
shards after the relay plugin's selection. Tests the relay journal already
holds (run before a crash restarted pytest) still count in the assignment, so
a restarted shard keeps the same part.
"""

from __future__ import annotations

import json
import os
import statistics

import pytest


def parse_shard(text):
    """'i/n' (1 <= i <= n) -> (i, n); raises ValueError with the reason."""
    try:
        index, count = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 2/4") from None
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: need 1 <= i <= n")
    return index, count


def key_of(file, class_name, name):
    return f"{file}::{class_name}::{name}"


def load_times(path):
    """{test key: seconds} from a relay summary (JSON) or journal (JSON lines).

    A test recorded several times (a journal's restarts) keeps its last
    record; crashed tests count with the time they had before dying (0)."""
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
        records = data.get("tests", []) if isinstance(data, dict) else []
    except ValueError:  # JSON lines: a journal
        records = []
        for line in text.splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry.get("event") in ("end", "crash"):
                    records.append(entry["record"])
    times = {}
    for record in records:
        if record.get("name") and record.get("duration_s") is not None:
            key = key_of(record.get("file", ""), record.get("class", ""), record["name"])
            times[key] = float(record["duration_s"])
    return times


def weights(keys, times=None):
    """{key: weight}: the recorded time; a test without one weighs the median
    of the recorded times (1.0 when none is known: equal weights)."""
    times = times or {}
    known = [times[k] for k in keys if k in times]
    default = statistics.median(known) if known else 1.0
    return {k: times.get(k, default) for k in keys}


def assign(keys, count, times=None):
    """[set of keys] * count: a deterministic, disjoint, complete partition of
    `keys` balanced by `times`. Independent of the order of `keys`."""
    w = weights(sorted(set(keys)), times)
    shards = [set() for _ in range(count)]
    loads = [0.0] * count
    for key in sorted(w, key=lambda k: (-w[k], k)):
        target = min(range(count), key=lambda i: (loads[i], i))
        shards[target].add(key)
        loads[target] += w[key]
    return shards


def shard_loads(shards, keys, times=None):
    w = weights(sorted(set(keys)), times)
    return [round(sum(w[k] for k in part), 6) for part in shards]


# ---- pytest plugin -------------------------------------------------------------


def pytest_addoption(parser):
    group = parser.getgroup("spyre relay")
    group.addoption("--relay-shard", default=None, help="run shard i of n (i/n)")
    group.addoption("--relay-shard-times", default=None,
                    help="a previous relay summary or journal: test times to balance by")
    group.addoption("--relay-shard-out", default=None,
                    help="write this shard's assignment (JSON) here")


def pytest_configure(config):
    text = config.getoption("--relay-shard")
    if not text:
        return
    try:
        index, count = parse_shard(text)
        times_path = config.getoption("--relay-shard-times")
        times = load_times(times_path) if times_path else {}
    except (ValueError, OSError) as error:
        raise pytest.UsageError(f"spyre relay shard: {error}") from None
    config.pluginmanager.register(ShardPlugin(index, count, times, times_path,
                                              config.getoption("--relay-shard-out")),
                                  "spyre-relay-shard")


def _item_key(item):
    from .report import _display_path
    return key_of(_display_path(str(item.path)),
                    item.cls.__name__ if item.cls is not None else "", item.name)


def _journal_nodeids(config):
    try:
        path = config.getoption("--relay-journal")
    except ValueError:  # the relay plugin is not loaded
        return set()
    if not path or not os.path.exists(path):
        return set()
    done = set()
    with open(path) as f:
        for line in f:
            if line.strip():
                entry = json.loads(line)
                if entry.get("event") in ("end", "crash"):
                    done.add(entry["record"]["nodeid"])
    return done


class ShardPlugin:
    def __init__(self, index, count, times, times_path, out_path):
        self.index, self.count = index, count
        self.times, self.times_path, self.out_path = times, times_path, out_path

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, session, config, items):
        collected = list(items)
        result = yield  # the relay plugin's selection (and journal) run first
        kept = {id(item) for item in items}
        ran = _journal_nodeids(config)
        pool = [item for item in collected if id(item) in kept or item.nodeid in ran]
        keys = {_item_key(item): item for item in pool}
        shards = assign(keys, self.count, self.times)
        mine = shards[self.index - 1]
        deselected = [item for item in items if _item_key(item) not in mine]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if _item_key(item) in mine]
        if self.out_path:
            loads = shard_loads(shards, keys, self.times)
            with open(self.out_path, "w") as f:
                json.dump({"shard": self.index, "of": self.count,
                           "times_from": self.times_path,
                           "timed_tests": sum(1 for k in keys if k in self.times),
                           "selected_tests": len(keys), "loads_s": loads,
                           "tests": sorted(mine)}, f, indent=1)
        return result
