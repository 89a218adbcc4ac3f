"""Test selection: from changed upstream files (a diff or a file list) or
changed ops to the relay tests that exercise them, each with its reason.

Rules, by changed path (paths relative to a PyTorch or torch_spyre root):

* OpInfo definitions (torch/testing/_internal/common_methods_invocations.py,
  torch/testing/_internal/opinfo/**): the ops whose `XInfo('name', ...)`
  entry or sample/reference function the hunks touch; all OpInfo variants
  when a hunk cannot be attributed (or only a file list is given).
* ModuleInfo definitions (torch/testing/_internal/common_modules.py): the
  modules whose ModuleInfo or module_inputs function the hunks touch.
* aten/src/ATen/native/native_functions.yaml: the ops whose `func:` lines
  the hunks touch, matched against OpInfo.aten_name.
* torch/nn/functional.py: nn.functional.<def touched>; torch/nn/modules/x.py:
  the module classes defined in torch.nn.modules.x.
* test/**.py named by a `files` entry of the config: that whole file.
* test-infrastructure (common_device_type.py, common_utils.py, the relay
  itself, its YAML) and any path these rules do not understand: the full
  set, because nothing narrower can be justified.
* documentation (*.md, *.rst, *.txt, docs/): nothing.

With an op map (opmap.py: per recorded test, the ATen ops it dispatched to
spyre and the torch._refs functions it ran), recorded tests are selected too
(`tests`, node ids; hand-written tests included): a native_functions.yaml
`func:` hunk or a changed op selects the tests that dispatched it; a kernel
file of this project (csrc/) the tests that dispatched the ops its changed
lines name, else the ops it registers (the full set when it registers none,
or no recorded test dispatched them); torch/_refs only the tests that ran
the refs the hunks touch.

No input at all selects the full set.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections import defaultdict

ALL = "*"


@dataclasses.dataclass
class Hunk:
    header: str                 # text after the second @@ (git's enclosing function)
    new_start: int              # first line number in the new file
    lines: list[tuple[str, str]]  # (' ', '+' or '-', text)


@dataclasses.dataclass
class Change:
    path: str
    hunks: list[Hunk] | None    # None: only the path is known


@dataclasses.dataclass
class Selection:
    full: str | None = None     # reason when everything is selected
    files: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    ops: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    aten_ops: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    modules: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    # recorded tests (node ids of the op map: hand-written tests too)
    tests: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    ignored: dict = dataclasses.field(default_factory=dict)

    # ---- queries -------------------------------------------------------

    def why(self, path, info):
        """Why a test (file path, variant info) is selected, or None."""
        if self.full is not None:
            return self.full
        reasons = []
        for pattern, why in self.files.items():
            if _path_matches(path, pattern):
                reasons += why
        op = info.get("op")
        if op:
            for key in (ALL, op["name"], op["full_name"]):
                reasons += self.ops.get(key, [])
            reasons += self.aten_ops.get(op.get("aten_name"), [])
        module = info.get("module")
        if module:
            for key in (ALL, module):
                reasons += self.modules.get(key, [])
        return "; ".join(dict.fromkeys(reasons)) if reasons else None

    def why_test(self, nodeid, opinfo=None):
        """Why a recorded test (an op map node id; `opinfo`: the variant info
        of a recorded relay test) is selected, or None."""
        if self.full is not None:
            return self.full
        reasons = list(self.tests.get(nodeid, ()))
        path = nodeid.split("::")[0]
        for pattern in self.files:
            if _path_matches(path, pattern) or pattern.replace("\\", "/").endswith("/" + path):
                reasons += self.files[pattern]
        if opinfo is not None and (why := self.why("", {"op": opinfo})):
            reasons.append(why)
        return "; ".join(dict.fromkeys(reasons)) if reasons else None

    def selected_tests(self, op_map):
        """The node ids of `op_map` this selection runs (recorded relay
        variants by their OpInfo too, as the relay would select them)."""
        infos = _opinfo_infos({r["opinfo"] for r in op_map.tests.values() if r.get("opinfo")})
        return sorted(t for t, r in op_map.tests.items()
                      if self.why_test(t, infos.get(r.get("opinfo"))) is not None)

    # ---- (de)serialisation ----------------------------------------------

    def to_json(self):
        return {"full": self.full, "files": dict(self.files), "ops": dict(self.ops),
                "aten_ops": dict(self.aten_ops), "modules": dict(self.modules),
                "tests": dict(self.tests), "ignored": self.ignored}

    @classmethod
    def from_json(cls, data):
        s = cls(full=data.get("full"), ignored=data.get("ignored", {}))
        for key in ("files", "ops", "aten_ops", "modules", "tests"):
            getattr(s, key).update(data.get(key, {}))
        return s

    @classmethod
    def load(cls, path):
        if not path:
            return cls(full="no change list given: the full set runs")
        with open(path) as f:
            return cls.from_json(json.load(f))

    def describe(self):
        """Human-readable lines: what is selected and why."""
        if self.full is not None:
            lines = [f"full set: {self.full}"]
        else:
            lines = []
            for title, table in (("file", self.files), ("op", self.ops),
                                 ("aten op", self.aten_ops), ("module", self.modules),
                                 ("test", self.tests)):
                for name, why in sorted(table.items()):
                    label = f"every {title}" if name == ALL else f"{title} {name}"
                    lines.append(f"{label}: {'; '.join(why)}")
            if not lines:
                lines.append("nothing selected")
        lines += [f"ignored {p}: {why}" for p, why in sorted(self.ignored.items())]
        return lines


def _opinfo_infos(full_names):
    """{full_name: {name, full_name, aten_name}} of the named OpInfos."""
    if not full_names:
        return {}
    from torch.testing._internal.common_methods_invocations import op_db
    return {op.full_name: {"name": op.name, "full_name": op.full_name,
                           "aten_name": op.aten_name}
            for op in op_db if op.full_name in full_names}


def _path_matches(path, pattern):
    path = path.replace("\\", "/")
    return path == pattern or path.endswith("/" + pattern) or fnmatch.fnmatch(path, pattern)


# ---- parsing the input ------------------------------------------------------

_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)")
_DIFF_OLD = re.compile(r"^--- (?:a/)?(\S+)")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@ ?(.*)$")


def parse_diff(text):
    """Changes from a unified diff (git diff / diff -u)."""
    changes, current, hunk, old_path = [], None, None, None
    for line in text.splitlines():
        if line.startswith("--- "):
            m = _DIFF_OLD.match(line)
            old_path = m.group(1) if m else None
            continue
        if line.startswith("+++ "):
            m = _DIFF_FILE.match(line)
            path = m.group(1) if m else None
            if path == "/dev/null":  # a deleted file: its old name
                path = old_path
            current = Change(_strip_prefix(path), [])
            changes.append(current)
            hunk = None
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            hunk = Hunk(m.group(2), int(m.group(1)), [])
            current.hunks.append(hunk)
            continue
        if hunk is not None and line[:1] in (" ", "+", "-"):
            hunk.lines.append((line[:1], line[1:]))
    return changes


def parse_file_list(paths):
    return [Change(_strip_prefix(p.strip()), None) for p in paths if p.strip()]


def _strip_prefix(path):
    path = (path or "").replace("\\", "/")
    for prefix in ("a/", "b/", "./"):
        if path.startswith(prefix):
            path = path[len(prefix):]
    return path


# ---- the rules --------------------------------------------------------------

_OPINFO_ENTRY = re.compile(r"\b\w*Info\(\s*['\"]([\w.]+)['\"]")
_OPINFO_OPEN = re.compile(r"\b\w*Info\(\s*$")
_QUOTED_NAME = re.compile(r"^\s*['\"]([\w.]+)['\"]\s*,")
_DEF = re.compile(r"\bdef (\w+)\s*\(")
_MODULEINFO = re.compile(r"\bModuleInfo\(\s*(?:torch\.)?nn\.(\w+)")
_FUNC_LINE = re.compile(r"^\s*-?\s*func:\s*(\w+)(?:\.\w+)?\(")
_INFRA = ("torch/testing/_internal/common_device_type.py",
          "torch/testing/_internal/common_utils.py",
          "torch/testing/_internal/common_dtype.py",
          "torch_spyre/testing/", "test/relay/")
_DOCS = re.compile(r"(^|/)docs?/|\.(md|rst|txt)$")


def select(changes=None, ops=(), config=None, op_map=None, project_root=None):
    """A Selection for the given changes and/or op names.

    With an op map (opmap.OpMap), recorded tests are selected by the ops they
    dispatched: changed ops, native_functions.yaml hunks, kernel files of
    this project (csrc/), and torch/_refs changes (only the tests that ran
    the refs touched)."""
    s = Selection()
    if not changes and not ops:
        s.full = "no change list given: the full set runs"
        return s
    ctx = _Context(config, op_map, project_root)
    for name in ops:
        s.ops[name].append("named as a changed op")
        if op_map is not None:
            from .opmap import _is_aten_op
            aten = name.split(".")[-1]  # nn.functional.relu -> relu
            if _is_aten_op(aten):
                ctx.select_dispatching(s, aten, "named as a changed op")
    for change in changes or ():
        _select_for(change, s, ctx)
    return s


class _Context:
    def __init__(self, config, op_map, project_root):
        self.config, self.op_map = config, op_map
        if project_root is None:
            from .config import _token_value
            project_root = _token_value("TORCH_DEVICE_ROOT")
        self.project_root = project_root

    def _take(self, s, nodeids, why):
        for nodeid in nodeids:
            s.tests[nodeid].append(why)
            opinfo = self.op_map.tests[nodeid].get("opinfo")
            if opinfo:  # a recorded relay variant: the relay selects by its OpInfo
                s.ops[opinfo].append(why)

    def select_dispatching(self, s, op, why):
        """Selects the recorded tests that dispatched `op`; how many."""
        if self.op_map is None:
            return 0
        found = self.op_map.tests_dispatching(op)
        self._take(s, found, f"{why}; dispatched aten::{op} when recorded")
        return len(found)

    def select_running_refs(self, s, names, why):
        found = self.op_map.tests_running_refs(names or None)
        self._take(s, found, why)
        return len(found)


def _select_for(change, s, ctx):
    config = ctx.config
    path = change.path
    if any(path == p or path.startswith(p) for p in _INFRA):
        return _full(s, f"{path} changed (test infrastructure): every test depends on it")
    if _DOCS.search(path):
        s.ignored[path] = "documentation; no test exercises it"
        return
    if path == "torch/testing/_internal/common_methods_invocations.py" or \
            path.startswith("torch/testing/_internal/opinfo/"):
        return _from_opinfo_source(change, s)
    if path == "torch/testing/_internal/common_modules.py":
        return _from_module_source(change, s)
    if path == "aten/src/ATen/native/native_functions.yaml":
        return _from_native_functions(change, s, ctx)
    if ctx.op_map is not None and re.fullmatch(r"csrc/.+\.(cpp|h|cc|hpp)", path):
        return _from_kernel_source(change, s, ctx)
    if ctx.op_map is not None and path.startswith("torch/_refs/") and path.endswith(".py"):
        return _from_refs(change, s, ctx)
    if path == "torch/nn/functional.py":
        return _from_functional(change, s)
    m = re.fullmatch(r"torch/nn/modules/(\w+)\.py", path)
    if m:
        return _from_nn_module_file(m.group(1), path, s)
    if path.startswith("test/") and path.endswith(".py"):
        entry = _config_entry_for(path, config)
        if entry is None:
            s.ignored[path] = "a test file the relay config does not list"
        else:
            s.files[path].append(f"{path} changed; listed by the config at line {entry.line}")
        return
    _full(s, f"{path} changed and no rule maps it to narrower tests")


def _full(s, reason):
    s.full = reason if s.full is None else s.full


def _touched_lines(hunk):
    """Changed lines with the context around them (both help attribution)."""
    return [text for _, text in hunk.lines]


def _changed(hunk):
    return [text for kind, text in hunk.lines if kind in "+-"]


def _from_opinfo_source(change, s):
    path = change.path
    if change.hunks is None:
        s.ops[ALL].append(f"{path} changed (file list only: every OpInfo may be affected)")
        return
    for hunk in change.hunks:
        found = _opinfo_names_in(hunk)
        for kind, name in found:
            why = (f"{path}: the hunk at line {hunk.new_start} edits " +
                   (f"OpInfo '{name}'" if kind == "entry" else f"{name}(), used by this OpInfo"))
            for op in ([name] if kind == "entry" else _ops_using_function(name)):
                s.ops[op].append(why)
        if not found:
            s.ops[ALL].append(f"{path}: the hunk at line {hunk.new_start} is not attributable "
                              "to one OpInfo")


def _opinfo_names_in(hunk):
    found = []
    lines = _touched_lines(hunk)
    for i, text in enumerate(lines):
        m = _OPINFO_ENTRY.search(text)
        if m:
            found.append(("entry", m.group(1)))
        elif _OPINFO_OPEN.search(text) and i + 1 < len(lines):
            m = _QUOTED_NAME.match(lines[i + 1])
            if m:
                found.append(("entry", m.group(1)))
    for text in [hunk.header] + _changed(hunk):
        m = _DEF.search(text)
        if m and _ops_using_function(m.group(1)):
            found.append(("function", m.group(1)))
    return list(dict.fromkeys(found))


def _ops_using_function(function_name):
    from torch.testing._internal.common_methods_invocations import op_db
    users = []
    for op in op_db:
        for attr in ("sample_inputs_func", "reference_inputs_func", "error_inputs_func",
                     "sample_inputs_sparse_coo_func", "ref"):
            fn = getattr(op, attr, None)
            if getattr(fn, "__name__", None) == function_name:
                users.append(op.full_name)
                break
    return users


def _from_module_source(change, s):
    path = change.path
    if change.hunks is None:
        s.modules[ALL].append(f"{path} changed (file list only: every ModuleInfo may be affected)")
        return
    for hunk in change.hunks:
        names = set()
        for text in _touched_lines(hunk):
            names.update(_MODULEINFO.findall(text))
        for text in [hunk.header] + _changed(hunk):
            m = re.search(r"def module_inputs_torch_nn_(\w+)\s*\(", text)
            if m:
                names.add(m.group(1))
        for name in sorted(names):
            s.modules[f"torch.nn.{name}"].append(
                f"{path}: the hunk at line {hunk.new_start} edits ModuleInfo nn.{name}")
        if not names:
            s.modules[ALL].append(f"{path}: the hunk at line {hunk.new_start} is not "
                                  "attributable to one ModuleInfo")


def _from_native_functions(change, s, ctx):
    path = change.path
    if change.hunks is None:
        return _full(s, f"{path} changed (file list only: any op may be affected)")
    for hunk in change.hunks:
        names = {m.group(1) for text in _touched_lines(hunk) if (m := _FUNC_LINE.match(text))}
        for name in sorted(names):
            why = f"{path}: the hunk at line {hunk.new_start} edits `func: {name}`"
            s.aten_ops[name].append(why)
            ctx.select_dispatching(s, name, why)
        if not names:
            _full(s, f"{path}: the hunk at line {hunk.new_start} names no `func:`")


def _from_kernel_source(change, s, ctx):
    """A kernel file of this project: the ops its changed lines name (string
    literals such as "mul.Tensor"), else every op the file registers; the
    recorded tests that dispatched them, and the OpInfos of those ops. A
    file registering no op (shared launch/layout code) selects everything."""
    from .opmap import ops_named, ops_registered_in
    import os
    path = change.path
    registered = ops_registered_in(os.path.join(ctx.project_root, path))
    hunks = change.hunks if change.hunks is not None else [None]
    for hunk in hunks:
        named = ops_named(_changed(hunk)) if hunk is not None else set()
        where = f"{path}" + (f": the hunk at line {hunk.new_start}" if hunk else "")
        if named:
            ops, how = named, "names"
        elif registered:
            ops, how = registered, "is in a file registering"
        else:
            return _full(s, f"{where} changes kernel code that registers no op (shared "
                            "by every kernel)")
        found = 0
        for op in sorted(ops):
            why = f"{where} {how} aten::{op}"
            s.aten_ops[op].append(why)
            found += ctx.select_dispatching(s, op, why)
        if not found:
            _full(s, f"{where}: no recorded test dispatched {', '.join(sorted(ops))}; "
                     "nothing narrower can be justified")


def _from_refs(change, s, ctx):
    """torch/_refs: only the recorded tests that ran the refs the hunks
    touch (every test that ran refs for a hunk outside a def); config files
    the op map did not record run whole."""
    path = change.path
    hunks = change.hunks if change.hunks is not None else [None]
    for hunk in hunks:
        # defs in the header, the changed lines and the context: a hunk in a
        # nested def (a ref maker's inner _ref) names both
        names = set() if hunk is None else {
            m.group(1) for text in [hunk.header] + _touched_lines(hunk)
            if (m := _DEF.search(text))}
        where = path + (f": the hunk at line {hunk.new_start}" if hunk else "")
        why = (f"{where} edits torch._refs {', '.join(sorted(names))}; ran it when recorded"
               if names else f"{where} (not one def): this test ran torch._refs when recorded")
        ctx.select_running_refs(s, names, why)
    recorded = set(ctx.op_map.meta.get("recorded_from", ()))
    for entry in (ctx.config.files if ctx.config is not None else ()):
        for file in entry.resolve():
            rel = _relative(file, ctx.project_root)
            if rel not in recorded:
                s.files[file].append(f"{path} changed and the op map did not record {rel} "
                                     "(whether its tests run refs is unknown)")


def _relative(path, root):
    import os
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    return rel.replace(os.sep, "/")


def _from_functional(change, s):
    path = change.path
    if change.hunks is None:
        s.ops[ALL].append(f"{path} changed (file list only)")
        return
    for hunk in change.hunks:
        names = {m.group(1) for text in [hunk.header] + _changed(hunk)
                 if (m := _DEF.search(text))}
        for name in sorted(names):
            s.ops[f"nn.functional.{name}"].append(
                f"{path}: the hunk at line {hunk.new_start} edits def {name}()")
        if not names:
            s.ops[ALL].append(f"{path}: the hunk at line {hunk.new_start} is outside any def")


def _from_nn_module_file(stem, path, s):
    import inspect

    import torch.nn
    module_name = f"torch.nn.modules.{stem}"
    classes = sorted(name for name, cls in vars(torch.nn).items()
                     if inspect.isclass(cls) and cls.__module__ == module_name)
    for name in classes:
        s.modules[f"torch.nn.{name}"].append(f"{path} defines torch.nn.{name}")
    if not classes:
        s.ignored[path] = "defines no public torch.nn module class"


def _config_entry_for(path, config):
    if config is None:
        return None
    for entry in config.files:
        pattern = entry.path.replace("${TORCH_ROOT}/", "")
        if "${" not in pattern and (path == pattern or fnmatch.fnmatch(path, pattern)):
            return entry
    return None
