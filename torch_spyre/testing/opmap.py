"""The op map: per test, the ATen ops it dispatched to spyre and the
torch._refs functions it ran, recorded during a real run.

Selection uses it for tests no OpInfo describes (this project's hand-written
tests, or any recorded test): a change to an op (a native_functions.yaml
hunk, a kernel file under csrc/ naming the op) selects the tests that
dispatched that op; a torch/_refs change selects only the tests that ran
the refs it touches.

    python -m torch_spyre.testing record-ops [--out test/relay/op_map.json] [paths...]

runs pytest over the paths (default: this project's test/python/test_ops_*.py)
with this module as a plugin and writes the map. Recording: a
TorchDispatchMode sees every ATen op (after autograd and composite
decomposition, i.e. what reaches the backend) and keeps those with a spyre
tensor among their inputs or outputs; a trace function keeps the names of
the torch/_refs functions that ran. Tests are keyed by their pytest node id
relative to the project root (`test/python/test_ops_math.py::test_exp`).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

SCHEMA = "torch_spyre.relay.op_map/1"
DEFAULT_PATHS = ("test/python/test_ops_*.py",)


def base_name(op):
    """'aten::mul_.Tensor' / 'mul.Tensor' / 'mul_' -> 'mul' (the op, whatever
    its overload or in-place/out variant)."""
    name = op.split("::")[-1].split(".")[0]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class OpMap:
    def __init__(self, tests=None, meta=None):
        self.tests = tests or {}   # node id -> {"ops": [...], "refs": [...]}
        self.meta = meta or {}

    @classmethod
    def load(cls, path):
        with open(path) as f:
            data = json.load(f)
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{path}: not an op map ({SCHEMA})")
        return cls(data.get("tests", {}), {k: v for k, v in data.items() if k != "tests"})

    def save(self, path):
        data = {"schema": SCHEMA, **self.meta, "tests": dict(sorted(self.tests.items()))}
        with open(path, "w") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")

    def tests_dispatching(self, op):
        """Node ids of the tests that dispatched `op` (any overload/variant)."""
        wanted = base_name(op)
        return sorted(t for t, rec in self.tests.items()
                      if any(base_name(o) == wanted for o in rec.get("ops", ())))

    def tests_running_refs(self, names=None):
        """Node ids of the tests that ran torch._refs functions: any, or one
        defined by a def in `names` (a part of its qualified name)."""
        return sorted(t for t, rec in self.tests.items() if rec.get("refs") and (
            names is None or {part for q in rec["refs"] for part in q.split(".")} & set(names)))


# ---- recording (a pytest plugin) ---------------------------------------------------


def _refs_dir():
    import torch._refs
    return os.path.dirname(torch._refs.__file__) + os.sep


class _Recorder:
    """Records the spyre ATen ops and torch._refs functions of one test."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        recorder = self
        self.ops, self.refs = set(), set()
        self.refs_dir = _refs_dir()

        def on_spyre(values):
            import torch
            return any(isinstance(v, torch.Tensor) and v.device.type == "spyre"
                       for v in tree_flatten(values)[0])

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if func.namespace == "aten" and (on_spyre((args, kwargs)) or on_spyre(out)):
                    recorder.ops.add(func.name())
                return out

        self.mode = Mode()

    def _trace(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(self.refs_dir):
            # qualified: a function defined inside a ref maker is attributed
            # to the maker's def too (_make_x.<locals>._ref)
            self.refs.add(frame.f_code.co_qualname)
        return None  # no line tracing

    def __enter__(self):
        self.mode.__enter__()
        self._previous_trace = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous_trace)
        self.mode.__exit__(*exc)
        return False


class RecordPlugin:
    def __init__(self, out_path, root):
        self.out_path, self.root = out_path, root
        self.map = OpMap()

    def _key(self, item):
        rel = os.path.relpath(str(item.path), self.root).replace(os.sep, "/")
        return rel + item.nodeid[item.nodeid.index("::"):] if "::" in item.nodeid else rel

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        recorder = _Recorder()
        complete = False
        with recorder:
            try:
                result = yield
                complete = True
                return result
            finally:
                record = {"ops": sorted(recorder.ops), "refs": sorted(recorder.refs)}
                if not complete:  # it failed while recorded: the ops up to the failure
                    record["complete"] = False
                fn = getattr(item.cls, item.name, None) if item.cls is not None else None
                op = (getattr(fn, "relay_variant", None) or {}).get("op")
                if op:  # a relay variant of an OpInfo: selection can name it to the relay
                    record["opinfo"] = op["full_name"]
                self.map.tests[self._key(item)] = record

    def pytest_sessionfinish(self, session, exitstatus):
        import torch
        self.map.meta = {"torch_version": torch.__version__,
                         "recorded_from": sorted({k.split("::")[0] for k in self.map.tests})}
        self.map.save(self.out_path)


def pytest_addoption(parser):
    group = parser.getgroup("spyre relay")
    group.addoption("--relay-record-ops", default=None,
                    help="record each test's spyre ATen ops and torch._refs calls to this map")
    group.addoption("--relay-record-root", default=os.getcwd(),
                    help="node ids in the map are relative to this directory")


def pytest_configure(config):
    out = config.getoption("--relay-record-ops")
    if out:
        config.pluginmanager.register(
            RecordPlugin(out, os.path.abspath(config.getoption("--relay-record-root"))),
            "spyre-relay-record-ops")


# ---- this project's kernel files -----------------------------------------------------

_LITERAL = re.compile(r'"([a-z_][a-z0-9_]*)(?:\.[A-Za-z0-9_]+)?"')
_REGISTRATION = re.compile(r"TORCH_LIBRARY_IMPL\(\s*aten\s*,")


def _is_aten_op(name):
    import torch
    return isinstance(getattr(torch.ops.aten, name, None), torch._ops.OpOverloadPacket)


def ops_named(lines):
    """Base names of the ATen ops named by string literals ("mul.Tensor")."""
    names = set()
    for text in lines:
        for literal in _LITERAL.findall(text):
            if _is_aten_op(literal):
                names.add(base_name(literal))
    return names


def ops_registered_in(path):
    """The ATen ops a kernel source file registers for spyre (the literals of
    its TORCH_LIBRARY_IMPL(aten, ...) blocks), or an empty set."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return set()
    names = set()
    for m in _REGISTRATION.finditer(text):
        names |= ops_named(text[m.end():].split("\n}", 1)[0].splitlines())
    return names
