"""`python -m torch_spyre.testing` (also the `spyre-relay` console script).

  validate CONFIG [--strict]           check a relay YAML file (--strict: no
                                       wholesale xfail, a reason per xfail entry)
  native-ops                           list the OpInfos that run natively on spyre
  select   --config C [change input]   print what a change selects, and why
  run      --config C [change input] [--report-dir D] [--shard I/N
           [--shard-times SUMMARY]] [--cache-dir DIR] [-- pytest args]

Change input (any mix; none selects the full set):
  --diff FILE|-          a unified diff (git diff) of PyTorch or this project
  --changed-files F...   changed paths; --changed-files-from FILE: one per line
  --changed-ops OP,...   changed ops (OpInfo names)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from .config import ConfigError, load_config


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _parser():
    p = argparse.ArgumentParser(prog="python -m torch_spyre.testing",
                                description="Relay PyTorch's own tests to the spyre device.")
    sub = p.add_subparsers(required=True, metavar="command")

    v = sub.add_parser("validate", help="validate a relay YAML file")
    v.add_argument("config")
    v.add_argument("--strict", action="store_true",
                   help="also require mandatory files: no unlisted_test_mode xfail, a "
                        "reason on every xfail entry (exit 2 otherwise)")
    v.set_defaults(func=_validate)

    n = sub.add_parser("native-ops", help="list the OpInfos with a native spyre kernel")
    n.set_defaults(func=_native_ops)

    o = sub.add_parser("record-ops", help="record per test the ATen ops it dispatches to "
                                          "spyre (the op map selection uses)")
    o.add_argument("--out", default=None,
                   help="the map to write (default: op_map.json next to --config, else "
                        "test/relay/op_map.json)")
    o.add_argument("--config", default=None,
                   help="also record the relay's tests of this config (its active files)")
    o.add_argument("paths", nargs="*", help="test files (default: test/python/test_ops_*.py)")
    o.add_argument("--pytest-args", default="", help="extra pytest arguments, one string")
    o.set_defaults(func=_record_ops)

    for name, func, help_text in (("select", _select, "show what a change selects, and why"),
                                  ("run", _run, "run the relay and write its reports")):
        c = sub.add_parser(name, help=help_text)
        c.add_argument("--config", required=True)
        c.add_argument("--diff", help="unified diff file, or - for stdin")
        c.add_argument("--changed-files", nargs="*", default=[])
        c.add_argument("--changed-files-from", help="file with one changed path per line")
        c.add_argument("--changed-ops", default="", help="comma-separated OpInfo names")
        c.add_argument("--op-map", default=None,
                       help="the recorded op map (default: op_map.json next to the config, "
                            "if there); 'none' to ignore it")
        c.set_defaults(func=func)
    r = sub.choices["run"]
    r.add_argument("--report-dir", default="test-results")
    r.add_argument("--name", default=None,
                   help="report file stem (default: relay, relay-shard-I-of-N with --shard)")
    r.add_argument("--shard", default=None, metavar="I/N",
                   help="run the I-th of N disjoint parts of the selected tests")
    r.add_argument("--shard-times", default=None, metavar="FILE",
                   help="a previous run's relay-summary.json or relay-journal.jsonl: "
                        "balance the shards by its test times")
    r.add_argument("--cache-dir", default=None,
                   help="where native-op discovery is cached across processes "
                        "(default: $SPYRE_RELAY_CACHE_DIR or ~/.cache/torch_spyre/relay)")
    r.add_argument("--test-timeout", type=float, default=None, metavar="SECONDS",
                   help="a test running longer is recorded as failed ('timed out after N s') "
                        "and the run goes on with the rest")
    r.add_argument("--file-timeout", type=float, default=None, metavar="SECONDS",
                   help="a file's tests may take SECONDS in all: the test running at the "
                        "limit is recorded as failed and the file's later tests as skipped "
                        "('not run: ...'), and the run goes on with the other files")
    r.add_argument("--reruns", type=int, default=None, metavar="N",
                   help="run a failing test up to N more times; one that then meets its "
                        "mode is reported as flaky (not passed), with each failed attempt")
    r.add_argument("--memory-limit-mb", type=float, default=None, metavar="MB",
                   help="a test during which the test process's resident memory passes MB is "
                        "recorded as failed ('exceeded the memory guard') and the run goes on")
    r.add_argument("--disabled-tests", default=None, metavar="FILE",
                   help="upstream's disabled-tests JSON (.pytorch-disabled-tests.json: "
                        "'test (__main__.Class)' -> [issue url, [platforms]]); those tests "
                        "skip themselves, as in PyTorch's CI, and the summary lists them")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="after --: extra pytest arguments")
    sub.choices["select"].add_argument("--json", action="store_true")
    sub.choices["select"].add_argument("--nodeids", action="store_true",
                                       help="print only the selected recorded tests' node ids")
    sub.choices["select"].add_argument("--count", action="store_true",
                                       help="print how many recorded tests are selected")
    return p


def _validate(args):
    config = load_config(args.config)
    print(f"{args.config}: valid ({len(config.files)} file entries, "
          f"sha256 {config.sha256[:12]})")
    for entry, tokens in config.inactive_entries():
        print(f"  line {entry.line}: {entry.path} inactive until "
              f"{', '.join(tokens)} is set")
    if args.strict:
        problems = config.strict_problems()
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            return 2
    return 0


def _native_ops(args):
    from .native_ops import native_opinfos
    for _, native in native_opinfos():
        print(f"{native.full_name:40s} {native.why}")
    return 0


def _selection(args, config):
    from .selection import parse_diff, parse_file_list, select
    changes = []
    if args.diff:
        text = sys.stdin.read() if args.diff == "-" else open(args.diff).read()
        changes += parse_diff(text)
    paths = list(args.changed_files)
    if args.changed_files_from:
        with open(args.changed_files_from) as f:
            paths += f.read().splitlines()
    changes += parse_file_list(paths)
    ops = [o.strip() for o in args.changed_ops.split(",") if o.strip()]
    return select(changes, ops, config, op_map=_op_map(args))


def _op_map(args):
    from .opmap import OpMap
    path = args.op_map
    if path == "none":
        return None
    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(args.config)), "op_map.json")
        if not os.path.exists(path):
            return None
    return OpMap.load(path)


def _record_ops(args):
    """Two pytest sessions: the hand-written files as they are, then the
    config's files under the relay plugin (which skips files it does not
    list); their maps merge into --out."""
    import glob
    import tempfile
    from .config import _token_value
    from .opmap import OpMap
    root = _token_value("TORCH_DEVICE_ROOT")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.config)) if args.config
                                   else os.path.join(root, "test", "relay"), "op_map.json")
    patterns = args.paths or [os.path.join(root, p) for p in ("test/python/test_ops_*.py",)]
    plain = sorted({f for p in patterns for f in (glob.glob(p) or [p])})
    sessions = [(plain, [], {})]
    if args.config:
        config = load_config(args.config)
        relay_files = sorted({p for _, paths in config.active_files() for p in paths})
        env = {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1",
               **_native_ops_cache_env(argparse.Namespace(cache_dir=None), config)}
        sessions.append((relay_files, ["-p", "torch_spyre.testing.plugin",
                                       f"--relay-config={os.path.abspath(args.config)}"], env))
    merged = OpMap()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (files, plugin_args, extra_env) in enumerate(sessions):
            if not files:
                continue
            part = os.path.join(tmp, f"part{i}.json")
            command = [sys.executable, "-m", "pytest", "-p", "torch_spyre.testing.opmap",
                       "-p", "no:cacheprovider", "-q", f"--rootdir={root}",
                       f"--relay-record-ops={part}", f"--relay-record-root={root}",
                       *plugin_args, *args.pytest_args.split(), *files]
            print(f"relay: recording the ops of {len(files)} files")
            status = subprocess.call(command, env={**os.environ, **extra_env}, cwd=root)
            if not os.path.exists(part):
                print(f"relay: pytest wrote no op map (exit {status})", file=sys.stderr)
                return 2
            recorded = OpMap.load(part)
            merged.tests.update(recorded.tests)
            merged.meta = {"torch_version": recorded.meta.get("torch_version"),
                           "recorded_from": sorted(set(merged.meta.get("recorded_from", ())) |
                                                   set(recorded.meta["recorded_from"]))}
    # Failing tests are recorded too (up to their failure, "complete": false).
    merged.save(out)
    print(f"relay: {len(merged.tests)} tests recorded into {out}")
    return 0


def _select(args):
    config = load_config(args.config)
    selection = _selection(args, config)
    op_map = _op_map(args)
    if args.nodeids or args.count:
        if op_map is None:
            print("error: --nodeids/--count need an op map (--op-map)", file=sys.stderr)
            return 2
        chosen = selection.selected_tests(op_map)
        if args.nodeids:
            print("\n".join(chosen))
        else:
            print(f"{len(chosen)} of {len(op_map.tests)} recorded tests selected")
        return 0
    if args.json:
        print(json.dumps(selection.to_json(), indent=1))
    else:
        print("\n".join(selection.describe()))
    return 0


def _run(args):
    from .shard import parse_shard
    config = load_config(args.config)
    shard = None
    if args.shard:
        try:
            shard = parse_shard(args.shard)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    for flag, value in (("--test-timeout", args.test_timeout),
                        ("--file-timeout", args.file_timeout),
                        ("--memory-limit-mb", args.memory_limit_mb)):
        if value is not None and value <= 0:
            print(f"error: {flag} must be > 0", file=sys.stderr)
            return 2
    if args.reruns is not None and args.reruns < 0:
        print("error: --reruns must be >= 0", file=sys.stderr)
        return 2
    disabled = _disabled_tests_env(args)
    if disabled is None:
        return 2
    if args.name is None:
        args.name = "relay" if shard is None else f"relay-shard-{shard[0]}-of-{shard[1]}"
    selection = _selection(args, config)
    os.makedirs(args.report_dir, exist_ok=True)
    stem = os.path.join(args.report_dir, args.name)
    selection_path = f"{stem}-selection.json"
    with open(selection_path, "w") as f:
        json.dump(selection.to_json(), f, indent=1)
    files = sorted({path for _, paths in config.active_files() for path in paths})
    for entry, tokens in config.inactive_entries():
        print(f"relay: {entry.path} (line {entry.line}) inactive: {', '.join(tokens)} unset")
    if not files:
        print("relay: the config names no existing test file", file=sys.stderr)
        return 2
    extra = [a for a in args.pytest_args if a != "--"]
    journal = f"{stem}-journal.jsonl"
    if os.path.exists(journal):
        os.remove(journal)
    command = [sys.executable, "-m", "pytest", "-p", "torch_spyre.testing.plugin",
               "-p", "no:cacheprovider", "-q", "-rfE", "--continue-on-collection-errors",
               f"--relay-config={os.path.abspath(args.config)}",
               f"--relay-summary={stem}-summary.json", f"--relay-junit={stem}-junit.xml",
               f"--relay-selection={selection_path}", f"--relay-journal={journal}",
               *_shard_args(args, shard, stem), *_limit_args(args, config), *extra, *files]
    env = dict(os.environ)
    env.update(_native_ops_cache_env(args, config))
    # Only the spyre base instantiates (RFC 1287 §11); CPU runs as the reference.
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    env.update(disabled)
    print("relay: " + "\n relay: ".join(selection.describe()))
    started = time.time()
    status = _run_until_done(command, env, journal)
    print(f"relay: {time.time() - started:.1f} s, summary {stem}-summary.json, "
          f"JUnit {stem}-junit.xml")
    return status


def _shard_args(args, shard, stem):
    if shard is None:
        return []
    return ["-p", "torch_spyre.testing.shard", f"--relay-shard={shard[0]}/{shard[1]}",
            f"--relay-shard-out={stem}-shard.json",
            *([f"--relay-shard-times={os.path.abspath(args.shard_times)}"]
              if args.shard_times else [])]


def _limit_args(args, config):
    """The per-test and per-file timeouts (--test-timeout, --file-timeout, else
    the config's global.timeouts), the memory guard (--memory-limit-mb, else
    global.memory_limit_mb) and the reruns (--reruns, else global.reruns):
    a flag wins over the config."""
    g = config.global_
    chosen = (("--relay-test-timeout", args.test_timeout, g.test_timeout_s),
              ("--relay-file-timeout", args.file_timeout, g.file_timeout_s),
              ("--relay-memory-limit-mb", args.memory_limit_mb, g.memory_limit_mb),
              ("--relay-reruns", args.reruns, g.reruns))
    return [f"{option}={flag if flag is not None else configured}"
            for option, flag, configured in chosen
            if (flag if flag is not None else configured)]


def _disabled_tests_env(args):
    """The environment that makes PyTorch's test framework skip the tests of
    a disabled-tests file (common_utils reads DISABLED_TESTS_FILE at import
    and matches 'test (__main__.Class)' keys and their platforms itself):
    {} without a file, None (after saying why) for a file it cannot use."""
    if args.disabled_tests is None:
        return {}
    path = os.path.abspath(args.disabled_tests)
    try:
        with open(path) as f:
            entries = json.load(f)
    except (OSError, ValueError) as error:
        print(f"error: --disabled-tests {args.disabled_tests}: {error}", file=sys.stderr)
        return None
    well_formed = isinstance(entries, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], list)
        for v in entries.values())
    if not well_formed:
        print(f"error: --disabled-tests {args.disabled_tests}: expected upstream's form, "
              '{"test_name (__main__.TestClass)": ["issue url", ["platform", ...]]}',
              file=sys.stderr)
        return None
    return {"DISABLED_TESTS_FILE": path}


def _native_ops_cache_env(args, config):
    """Native-op discovery once per (torch version, config, extension build),
    shared by the shards and by the restarts after a crash."""
    from .native_ops import CACHE_ENV, cache_file
    if CACHE_ENV in os.environ:
        return {}
    cache_dir = (args.cache_dir or os.environ.get("SPYRE_RELAY_CACHE_DIR")
                 or os.path.join(os.path.expanduser("~"), ".cache", "torch_spyre", "relay"))
    return {CACHE_ENV: cache_file(os.path.abspath(cache_dir), config.sha256)}


MAX_CRASHES = 20


def _run_until_done(command, env, journal_path):
    """Runs pytest until a process finishes its session (journals "finish").
    A process that ends otherwise (a signal, or an exit status from
    os._exit) is recorded against the test or file it was in, and pytest
    runs again on what is left. The exit status comes from the records,
    never from pytest's (its 2 for a collection error would read as a bad
    config)."""
    from .plugin import Journal
    from .report import EXIT_OUTSIDE_TESTS, EXIT_USAGE

    for _ in range(MAX_CRASHES + 1):
        journal = Journal(journal_path)
        finishes, broken = journal.finishes(), journal.broken_files()
        # A file that killed a process while imported would kill the next one:
        # it is left out (pytest imports files it is given whatever the hooks say).
        status = subprocess.call([a for a in command if a not in broken], env=env)
        journal = Journal(journal_path)
        if journal.finishes() > finishes:
            break
        if status == 4 and len(journal.entries()) == 1:  # pytest's usage error, said why
            return EXIT_USAGE
        if not _record_death(journal, _death_name(status)):
            print("relay: the process died again outside any test; no summary written",
                  file=sys.stderr)
            return EXIT_OUTSIDE_TESTS
    else:
        print(f"relay: more than {MAX_CRASHES} crashes; stopping", file=sys.stderr)
        return EXIT_OUTSIDE_TESTS
    with open(journal_path.replace("-journal.jsonl", "-summary.json")) as f:
        summary = json.load(f)
    if summary["totals"]["tests"] == 0:
        print("relay: no test selected")
    for flaky in summary["flaky"]:
        print(f"relay: flaky (passed on attempt {flaky['attempts']}): {flaky['nodeid']}")
    return summary["exit_status"]


def _record_death(journal, died):
    """Journals what the dead process was doing; False when it died outside
    any test twice (a restart would only die again)."""
    from .report import crash_record, file_error_record

    if journal.entries()[-1]["event"] == "crash":  # a watchdog recorded its test
        return True
    crashed = journal.unfinished()
    if crashed is not None:
        print(f"relay: {crashed['nodeid']} killed the test process ({died}); "
              "recording it and running the remaining tests")
        journal.write("crash", crash_record(crashed, died))
        return True
    importing = journal.unfinished_collection()
    if importing is not None:
        print(f"relay: the process died ({died}) importing {importing}; recording it and "
              "running the other files")
        journal.write("end", file_error_record(
            importing, "collection", f"the process died while importing the file ({died})"))
        return True
    if any(r.get("kind") == "outside" for r in journal.records().values()):
        return False
    file = journal.last_started_file() or "<session>"
    print(f"relay: the process died ({died}) outside any test; recording it and "
          "running again for the rest and the reports", file=sys.stderr)
    journal.write("end", file_error_record(
        file, "outside", f"the test process died outside any test ({died})"))
    return True


def _death_name(status):
    return _signal_name(status) if status < 0 else f"exit status {status}"


def _signal_name(status):
    import signal
    try:
        return signal.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


if __name__ == "__main__":
    sys.exit(main())
