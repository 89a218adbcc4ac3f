"""`run --shard i/n`: the shards partition the selected tests (disjoint, their
union is the unsharded set), the same way every time, balanced by recorded
test times; native-op discovery is cached across processes."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from torch_spyre.testing import native_ops
from torch_spyre.testing.shard import assign, key_of, load_times, parse_shard, shard_loads, weights

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "test" / "relay" / "upstream"

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_multi_dtype.py
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes: [{name: float16}, {name: float32}, {name: float64}, {name: int64},
                       {name: bfloat16}, {name: complex64}]
"""


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard("1/1") == (1, 1)
    for bad in ("0/3", "4/3", "1/0", "x/2", "2", "1/2/3"):
        with pytest.raises(ValueError):
            parse_shard(bad)


KEYS = [key_of("${TORCH_ROOT}/test/test_x.py", "TestX", f"test_{i:03d}") for i in range(47)]


@pytest.mark.parametrize("count", [1, 2, 3, 5, 47, 60])
def test_shards_are_disjoint_complete_and_deterministic(count):
    times = {k: (i * 7919 % 97) / 10 for i, k in enumerate(KEYS[::2])}
    shards = assign(KEYS, count, times)
    assert len(shards) == count
    assert set().union(*shards) == set(KEYS)
    assert sum(len(s) for s in shards) == len(KEYS)  # no test in two shards
    shuffled = list(KEYS)
    random.Random(count).shuffle(shuffled)
    assert assign(shuffled, count, dict(reversed(list(times.items())))) == shards


def test_shards_balance_by_the_given_times():
    keys = ["a", "b", "c", "d", "e", "f"]
    times = {"a": 8.0, "b": 4.0, "c": 4.0, "d": 2.0, "e": 1.0, "f": 1.0}
    shards = assign(keys, 2, times)
    assert shard_loads(shards, keys, times) == [10.0, 10.0]
    assert {"a", "d"} in shards or {"a", "e", "f"} in shards
    # equal weights (no times) balance the counts instead
    assert sorted(len(s) for s in assign(keys, 4)) == [1, 1, 2, 2]
    # many tests, skewed times: loads within one test of each other
    rng = random.Random(7)
    many = [f"t{i}" for i in range(500)]
    skewed = {k: rng.expovariate(1.0) for k in many}
    loads = shard_loads(assign(many, 6, skewed), many, skewed)
    assert max(loads) - min(loads) <= max(skewed.values())
    by_count = shard_loads(assign(many, 6), many, skewed)  # ignoring the times
    assert max(loads) - min(loads) < max(by_count) - min(by_count)


def test_weights_fall_back_to_the_median_then_to_one():
    assert weights(["a", "b", "c"], {"a": 1.0, "b": 3.0}) == {"a": 1.0, "b": 3.0, "c": 2.0}
    assert weights(["a", "b"]) == {"a": 1.0, "b": 1.0}


def test_times_from_a_summary_and_from_a_journal(tmp_path):
    record = {"nodeid": "x.py::TestX::test_a", "file": "${TORCH_ROOT}/test/x.py",
              "class": "TestXSPYRE", "name": "test_a", "duration_s": 2.5}
    summary = tmp_path / "relay-summary.json"
    summary.write_text(json.dumps({"schema": "torch_spyre.relay.summary/1",
                                   "tests": [record]}))
    key = key_of("${TORCH_ROOT}/test/x.py", "TestXSPYRE", "test_a")
    assert load_times(summary) == {key: 2.5}
    journal = tmp_path / "relay-journal.jsonl"
    journal.write_text("\n".join(json.dumps(e) for e in [
        {"event": "begin", "record": {"time": 0}},
        {"event": "start", "record": {**record, "duration_s": 0.0}},
        {"event": "end", "record": record},
        {"event": "crash", "record": {**record, "name": "test_b", "duration_s": 0.0}},
    ]))
    assert load_times(journal) == {key: 2.5, key_of("${TORCH_ROOT}/test/x.py", "TestXSPYRE",
                                                    "test_b"): 0.0}


def _relay(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTORCH_ROOT=str(UPSTREAM))
    return subprocess.run([sys.executable, "-m", "torch_spyre.testing", *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)


def test_relay_shards_cover_the_unsharded_run(tmp_path):
    """Three shard runs of the CLI over the upstream-style fixture: each test
    of the unsharded run ran in exactly one shard, balanced by the times of a
    previous run's summary, and a shard run again picks the same tests."""
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    full = _relay(tmp_path, "run", "--config", str(config), "--report-dir", str(tmp_path / "all"))
    full_summary = json.loads((tmp_path / "all" / "relay-summary.json").read_text())
    everything = {key_of(t["file"], t["class"], t["name"]) for t in full_summary["tests"]}
    assert len(everything) >= 10, full.stdout[-2000:]
    # fabricated times: one slow test, the rest fast
    slow = sorted(everything)[0]
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"tests": [
        {"file": t["file"], "class": t["class"], "name": t["name"],
         "duration_s": 30.0 if key_of(t["file"], t["class"], t["name"]) == slow else 1.0}
        for t in full_summary["tests"]]}))
    parts, ran = [], []
    for i in (1, 2, 3):
        result = _relay(tmp_path, "run", "--config", str(config), "--report-dir",
                        str(tmp_path / "shards"), "--shard", f"{i}/3", "--shard-times", str(times),
                        "--cache-dir", str(tmp_path / "cache"))
        stem = tmp_path / "shards" / f"relay-shard-{i}-of-3"
        assignment = json.loads(Path(f"{stem}-shard.json").read_text())
        summary = json.loads(Path(f"{stem}-summary.json").read_text())
        ran.append({key_of(t["file"], t["class"], t["name"]) for t in summary["tests"]})
        parts.append(set(assignment["tests"]))
        assert ran[-1] == parts[-1], result.stdout[-2000:]
        assert assignment["timed_tests"] == len(everything)
    assert set().union(*ran) == everything
    assert sum(len(p) for p in ran) == len(everything)
    # the slow test has a shard to itself; the fast ones split over the others
    assert {slow} in parts
    loads = assignment["loads_s"]
    assert sorted(loads)[-1] == 30.0 and abs(loads[0] + loads[1] + loads[2] - 30.0 -
                                              (len(everything) - 1)) < 1e-6
    again = _relay(tmp_path, "run", "--config", str(config), "--report-dir",
                   str(tmp_path / "again"), "--shard", "2/3", "--shard-times", str(times),
                   "--cache-dir", str(tmp_path / "cache"))
    assert json.loads((tmp_path / "again" / "relay-shard-2-of-3-shard.json").read_text())[
        "tests"] == sorted(parts[1]), again.stdout[-2000:]


def test_bad_shard_is_a_usage_error(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    result = _relay(tmp_path, "run", "--config", str(config), "--shard", "4/3")
    assert result.returncode == 2 and "need 1 <= i <= n" in result.stderr


@pytest.fixture
def fresh_discovery(monkeypatch, tmp_path):
    """native_opinfos with a cheap classify (add and mul are native) and a
    cache file; the real discovery is restored afterwards."""
    def fake_classify(opinfo):
        calls.append(opinfo.full_name)
        if opinfo.full_name in ("add", "mul"):
            return native_ops.NativeOp(opinfo.name, opinfo.full_name, "fake kernel")
        return None
    calls = []
    monkeypatch.setattr(native_ops, "classify", fake_classify)
    path = native_ops.cache_file(str(tmp_path / "cache"), "0" * 64)
    monkeypatch.setenv(native_ops.CACHE_ENV, path)
    native_ops.native_opinfos.cache_clear()
    yield calls, path
    native_ops.native_opinfos.cache_clear()


def test_native_op_discovery_is_cached_across_processes(fresh_discovery):
    calls, path = fresh_discovery
    first = native_ops.native_opinfos()
    assert [n.full_name for _, n in first] == ["add", "mul"] and calls
    assert json.loads(Path(path).read_text())["ops"] == [
        {"full_name": "add", "why": "fake kernel"}, {"full_name": "mul", "why": "fake kernel"}]
    calls.clear()
    native_ops.native_opinfos.cache_clear()  # as a new process would start
    second = native_ops.native_opinfos()
    assert calls == []  # read from the file, nothing classified
    assert [(op.full_name, n.why) for op, n in second] == [("add", "fake kernel"),
                                                          ("mul", "fake kernel")]
    # a file of another torch version is ignored and rewritten
    data = json.loads(Path(path).read_text())
    Path(path).write_text(json.dumps({**data, "torch_version": "0.0"}))
    native_ops.native_opinfos.cache_clear()
    native_ops.native_opinfos()
    assert calls and json.loads(Path(path).read_text())["torch_version"] != "0.0"


def test_the_cache_key_follows_torch_config_and_build(monkeypatch):
    key = native_ops.cache_key("a" * 64)
    assert key == native_ops.cache_key("a" * 64)
    assert key != native_ops.cache_key("b" * 64)
    monkeypatch.setattr(native_ops, "extension_fingerprint", lambda: "rebuilt")
    assert key != native_ops.cache_key("a" * 64)
    monkeypatch.setattr(native_ops.torch, "__version__", "9.9.9")
    assert native_ops.cache_key("a" * 64) != key


def test_a_restarted_shard_keeps_its_part(tmp_path):
    """After a crash the CLI restarts pytest with the journal: the tests it
    holds are deselected by the relay, yet still count in the assignment, so
    the shard's part does not move."""
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTORCH_ROOT=str(UPSTREAM),
               PYTORCH_TESTING_DEVICE_ONLY_FOR="privateuse1")

    def collect(out, *extra):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
             "-p", "torch_spyre.testing.plugin", "-p", "torch_spyre.testing.shard",
             f"--relay-config={config}", "--relay-shard=1/2", f"--relay-shard-out={out}",
             *extra, str(UPSTREAM / "test" / "test_multi_dtype.py")],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        nodeids = [line for line in result.stdout.splitlines() if "::" in line]
        return json.loads(Path(out).read_text())["tests"], nodeids, result

    first, nodeids, result = collect(tmp_path / "a.json")
    assert len(nodeids) == len(first) >= 5, result.stdout[-2000:]
    done = nodeids[0]
    journal = tmp_path / "journal.jsonl"
    journal.write_text("\n".join(json.dumps(e) for e in [
        {"event": "begin", "record": {"time": 0}},
        {"event": "end", "record": {"nodeid": done, "outcome": "passed", "duration_s": 0.1}}]))
    again, left, result = collect(tmp_path / "b.json", f"--relay-journal={journal}")
    assert again == first
    assert left == nodeids[1:], result.stdout[-2000:]
