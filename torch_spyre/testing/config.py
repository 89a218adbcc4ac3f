"""The relay's YAML configuration: schema, validation and policy lookups.

The schema follows torch-spyre's RFC 1287 ("Test Suite Configuration for
Upstream PyTorch Tests on OOT Devices") so that a file written for one
out-of-tree device reads the same here:

    test_suite_config:
      files:                       # one entry per test file or glob
        - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
          unlisted_test_mode: skip # skip | xfail | xfail_strict | mandatory_success
          tests:
            - names: [TestBinaryUfuncs::test_add_.*]
              mode: xfail          # default mandatory_success
              tags: [my_model]
              edits: {ops: {include: [...], exclude: [...]},
                      modules: {...}, dtypes: {...}}
      global:
        supported_dtypes: [{name: float16}, {name: float32}]
        supported_ops:
          - name: add
            force_xfail: false
            dtypes: [{name: float16, precision: {atol: 1e-3, rtol: 1e-3}}]
        supported_modules: [{name: torch.nn.Linear}]    # (extension)
        discover_native_ops: true                       # (extension)

Two extensions, both in `global`: `discover_native_ops` adds every op with a
native spyre kernel to `supported_ops` at run time, and `supported_modules`
is the module-side twin of `supported_ops` that the RFC's `edits.modules`
refers to. Path tokens: `${TORCH_ROOT}` (env PYTORCH_ROOT),
`${TORCH_DEVICE_ROOT}` (env TORCH_SPYRE_ROOT, default: this checkout) and
`${SPYRE_SUITES}` (the suites shipped in this package). `edits.inputs` and
`selectors` (marked "planned" in the RFC) are rejected with a clear message.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import hashlib
import os
import re
from pathlib import Path

import yaml

MODES = ("skip", "xfail", "xfail_strict", "mandatory_success")
DEFAULT_UNLISTED_MODE = "skip"
DEFAULT_LISTED_MODE = "mandatory_success"

# Dtype names accepted in the file (RFC rule 3: valid PyTorch dtype names).
DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
               "int64", "uint8", "bool", "complex32", "complex64", "complex128",
               "float8_e4m3fn", "float8_e5m2")

SUITES_DIR = Path(__file__).resolve().parent / "suites"
PATH_TOKENS = {
    "TORCH_ROOT": "PYTORCH_ROOT",
    "TORCH_DEVICE_ROOT": "TORCH_SPYRE_ROOT",
    "SPYRE_SUITES": None,  # resolved to SUITES_DIR, no env var
}
_TOKEN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::(.+)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """A relay configuration file is invalid; says where and why."""

    def __init__(self, source, line, reason):
        self.source, self.line, self.reason = str(source), line, reason
        where = f"{self.source}:{line}" if line else self.source
        super().__init__(f"{where}: {reason}")


@dataclasses.dataclass(frozen=True)
class Precision:
    atol: float | None = None
    rtol: float | None = None


@dataclasses.dataclass
class OpSupport:
    name: str
    line: int
    force_xfail: bool = False
    # dtype name -> precision override (None: framework default); None: all
    # of global.supported_dtypes.
    dtypes: dict[str, Precision | None] | None = None


@dataclasses.dataclass
class Edits:
    ops_include: set[str] = dataclasses.field(default_factory=set)
    ops_exclude: set[str] = dataclasses.field(default_factory=set)
    modules_include: set[str] = dataclasses.field(default_factory=set)
    modules_exclude: set[str] = dataclasses.field(default_factory=set)
    dtypes_include: set[str] = dataclasses.field(default_factory=set)
    dtypes_exclude: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class TestEntry:
    __test__ = False  # not a pytest test class
    names: list[tuple[str, re.Pattern]]
    line: int
    mode: str = DEFAULT_LISTED_MODE
    tags: list[str] = dataclasses.field(default_factory=list)
    edits: Edits = dataclasses.field(default_factory=Edits)
    reason: str | None = None  # why the listed tests take this mode (extension)

    def matches(self, class_name, method_name):
        return any(_class_matches(cls, class_name) and pattern.fullmatch(method_name)
                   for cls, pattern in self.names)


@dataclasses.dataclass
class FileEntry:
    path: str
    line: int
    unlisted_test_mode: str = DEFAULT_UNLISTED_MODE
    tests: list[TestEntry] = dataclasses.field(default_factory=list)

    def unresolved_tokens(self):
        """Environment variables of this path's tokens that are unset (the
        entry is inactive until they are)."""
        return [PATH_TOKENS[tok] for tok in _TOKEN.findall(self.path)
                if PATH_TOKENS[tok] and not _token_value(tok)]

    def resolved_pattern(self):
        """The path with its tokens substituted, or None if one is unset."""
        if self.unresolved_tokens():
            return None
        return os.path.normpath(_TOKEN.sub(lambda m: _token_value(m.group(1)), self.path))

    def resolve(self):
        """The existing files this entry names (sorted)."""
        pattern = self.resolved_pattern()
        if pattern is None:
            return []
        return sorted(os.path.normpath(p) for p in glob.glob(pattern, recursive=True)
                      if os.path.isfile(p))

    def matches_file(self, path):
        pattern = self.resolved_pattern()
        if pattern is None:
            return False
        path = os.path.normpath(os.path.abspath(path))
        return path == os.path.abspath(pattern) or fnmatch.fnmatch(path, os.path.abspath(pattern))


@dataclasses.dataclass
class GlobalConfig:
    supported_dtypes: list[str] | None = None
    supported_ops: dict[str, OpSupport] | None = None
    supported_modules: list[str] | None = None
    discover_native_ops: bool = False
    test_timeout_s: float | None = None  # global.timeouts.test_seconds (CLI --test-timeout)
    file_timeout_s: float | None = None  # global.timeouts.file_seconds (CLI --file-timeout)
    reruns: int = 0  # global.reruns (CLI --reruns): extra attempts of a failing test
    memory_limit_mb: float | None = None  # global.memory_limit_mb (CLI --memory-limit-mb)


@dataclasses.dataclass
class VariantPolicy:
    """What the configuration says about one generated test variant."""
    mode: str
    tags: list[str]
    why: str  # the rule that decided the mode, for reports
    precision: Precision | None = None


@dataclasses.dataclass
class RelayConfig:
    source: str
    sha256: str
    files: list[FileEntry]
    global_: GlobalConfig

    # ---- lookups used by the test base and the pytest plugin -------------

    def file_entry(self, path):
        """The first file entry naming `path`, or None."""
        return next((f for f in self.files if f.matches_file(path)), None)

    def op_support(self, op_name, full_name=None):
        ops = self.global_.supported_ops or {}
        return ops.get(full_name) or ops.get(op_name)

    def policy(self, path, class_name, method_name, op=None, dtype=None):
        """Mode, tags and precision of one instantiated test.

        Precedence (RFC 1287 §5.1, §6.3.1): a listed test takes the mode of
        the last entry whose names match it (so a broad pattern first and its
        exceptions after it read top-down; listed without a mode means
        mandatory_success); an unlisted test takes the file's
        unlisted_test_mode; then an op's force_xfail turns mandatory_success
        into xfail. Tags of every matching entry are merged.
        """
        entry = self.file_entry(path)
        if entry is None:
            return VariantPolicy("skip", [], f"{path} is not named by any files entry")
        matching = [t for t in entry.tests if t.matches(class_name, method_name)]
        if matching:
            mode = matching[-1].mode
            why = f"listed at {self.source}:{matching[-1].line}"
            if matching[-1].reason:
                why += f" ({matching[-1].reason})"
        else:
            mode = entry.unlisted_test_mode
            why = f"unlisted; unlisted_test_mode of {self.source}:{entry.line}"
        tags = sorted({tag for t in matching for tag in t.tags})
        precision = None
        if op is not None:
            support = self.op_support(op.get("name"), op.get("full_name"))
            if support is not None:
                if support.force_xfail and mode == "mandatory_success":
                    mode = "xfail"
                    why += f"; force_xfail of {support.name} ({self.source}:{support.line})"
                if dtype is not None and support.dtypes:
                    precision = support.dtypes.get(dtype)
        return VariantPolicy(mode, tags, why, precision)

    def variant_excluded(self, path, class_name, method_name, *, op=None, dtype=None,
                         dtypes=None, module=None, native_ops=()):
        """Why a generated variant must not exist, or None to keep it.

        Ops: global.supported_ops (plus native ops when discover_native_ops)
        restricts @ops variants; edits.ops.include adds back, exclude removes.
        Dtypes (RFC §5.3.3): generated ∩ supported_dtypes ∩ the op's dtypes,
        + edits include, - edits exclude, applied to each of the variant's
        dtypes (`dtype`, and every name in `dtypes` for a variant
        instantiated for several): one dtype that fails removes the variant.
        Modules likewise with supported_modules and edits.modules.
        """
        entry = self.file_entry(path)
        matching = [] if entry is None else [t for t in entry.tests
                                             if t.matches(class_name, method_name)]
        edits = _merge_edits(t.edits for t in matching)
        g = self.global_
        if op is not None:
            names = {op["name"], op["full_name"]}
            if names & edits.ops_exclude:
                return f"op {op['full_name']} excluded by edits.ops.exclude"
            allowed = None
            if g.supported_ops is not None or g.discover_native_ops:
                allowed = set(g.supported_ops or ()) | (set(native_ops) if g.discover_native_ops else set())
            if allowed is not None and not names & (allowed | edits.ops_include):
                return f"op {op['full_name']} is not in global.supported_ops"
        if module is not None:
            if module in edits.modules_exclude:
                return f"module {module} excluded by edits.modules.exclude"
            if (g.supported_modules is not None and module not in g.supported_modules
                    and module not in edits.modules_include):
                return f"module {module} is not in global.supported_modules"
        every = ([dtype] if dtype is not None else []) + list(dtypes or ())
        support = self.op_support(op["name"], op["full_name"]) if op else None
        for name in dict.fromkeys(every):
            if name in edits.dtypes_exclude:
                return f"dtype {name} excluded by edits.dtypes.exclude"
            if name in edits.dtypes_include:
                continue
            if g.supported_dtypes is not None and name not in g.supported_dtypes:
                return f"dtype {name} is not in global.supported_dtypes"
            if support is not None and support.dtypes is not None and name not in support.dtypes:
                return f"dtype {name} is not among the dtypes of supported op {support.name}"
        return None

    def strict_problems(self):
        """Why this config does not hold the project's strict rule, as
        "file:line: reason" strings ([] when it does): a file's tests run
        mandatory with listed known failures, never wholesale as xfail. So
        no files entry has unlisted_test_mode xfail or xfail_strict, and
        every tests entry of mode xfail or xfail_strict gives its `reason`.
        (`validate --strict`; the RFC itself allows both.)"""
        problems = []
        for i, f in enumerate(self.files):
            if f.unlisted_test_mode in ("xfail", "xfail_strict"):
                problems.append(f"{self.source}:{f.line}: files[{i}] ({f.path}) runs its "
                                f"unlisted tests as {f.unlisted_test_mode}; use "
                                "mandatory_success (or skip) and list the known failures")
            for t in f.tests:
                if t.mode in ("xfail", "xfail_strict") and not t.reason:
                    problems.append(f"{self.source}:{t.line}: a {t.mode} entry of {f.path} "
                                    "without a `reason`: say why these tests fail")
        return problems

    def active_files(self):
        """[(entry, [files])] for every entry whose path tokens resolve."""
        return [(f, f.resolve()) for f in self.files if f.resolved_pattern() is not None]

    def inactive_entries(self):
        return [(f, f.unresolved_tokens()) for f in self.files if f.resolved_pattern() is None]


def _class_matches(pattern, class_name):
    # Names in the file use the generic class (TestFoo); the instantiated one
    # carries the device suffix (TestFooSPYRE / TestFooPRIVATEUSE1).
    return class_name in (pattern, pattern + "SPYRE", pattern + "PRIVATEUSE1")


def _merge_edits(edits_list):
    merged = Edits()
    for e in edits_list:
        for f in dataclasses.fields(Edits):
            getattr(merged, f.name).update(getattr(e, f.name))
    return merged


def _token_value(token):
    if token == "SPYRE_SUITES":
        return str(SUITES_DIR)
    value = os.environ.get(PATH_TOKENS[token])
    if not value and token == "TORCH_DEVICE_ROOT":
        return str(SUITES_DIR.parents[2])  # the checkout holding torch_spyre/
    return value


# ---- loading and validation ---------------------------------------------


def load_config(path):
    """Reads and validates a relay YAML file; raises ConfigError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(path, None, f"cannot read the file ({error.strerror})") from None
    return parse_config(text, source=str(path))


def parse_config(text, source="<string>"):
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ConfigError(source, line, f"not valid YAML: {getattr(error, 'problem', error)}") from None
    v = _Validator(source)
    if root is None:
        raise ConfigError(source, 1, "the file is empty; expected a `test_suite_config` mapping")
    top = v.mapping(root, "the document", required=("test_suite_config",),
                    allowed=("test_suite_config",))
    suite = v.mapping(top["test_suite_config"], "test_suite_config", required=("files",),
                      allowed=("files", "global"))
    global_ = _parse_global(v, suite.get("global"))
    files = [_parse_file(v, node, f"files[{i}]", global_)
             for i, node in enumerate(v.sequence(suite["files"], "test_suite_config.files"))]
    if not files:
        raise ConfigError(source, _line(suite["files"]), "test_suite_config.files is empty; "
                          "list at least one test file")
    return RelayConfig(source, hashlib.sha256(text.encode()).hexdigest(), files, global_)


def _line(node):
    return node.start_mark.line + 1


class _Validator:
    """Walks composed YAML nodes, so every error carries its line."""

    def __init__(self, source):
        self.source = source

    def fail(self, node, reason):
        raise ConfigError(self.source, _line(node), reason)

    def mapping(self, node, what, required=(), allowed=None):
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping")
        out = {}
        for key_node, value in node.value:
            key = key_node.value
            if key in out:
                self.fail(key_node, f"{what}: duplicate key `{key}`")
            if allowed is not None and key not in allowed:
                self.fail(key_node, f"{what}: unknown key `{key}` (allowed: {', '.join(allowed)})")
            out[key] = value
        for key in required:
            if key not in out:
                self.fail(node, f"{what}: missing required key `{key}`")
        return out

    def sequence(self, node, what):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{what} must be a list")
        return node.value

    def scalar(self, node, what, kind=str):
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, f"{what} must be a {kind.__name__}")
        value = yaml.constructor.SafeConstructor().construct_object(node)
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is float and isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
            except ValueError:
                pass
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            self.fail(node, f"{what} must be a {kind.__name__}, got {node.value!r}")
        return value

    def mode(self, node, what):
        value = self.scalar(node, what)
        if value not in MODES:
            self.fail(node, f"{what}: {value!r} is not a mode; use one of {', '.join(MODES)}")
        return value

    def named_list(self, node, what, extra=()):
        """A list of {name, description?, ...extra} mappings -> [(name, mapping, node)]."""
        out = []
        for i, item in enumerate(self.sequence(node, what)):
            fields = self.mapping(item, f"{what}[{i}]", required=("name",),
                                  allowed=("name", "description") + tuple(extra))
            out.append((self.scalar(fields["name"], f"{what}[{i}].name"), fields, item))
        return out

    def dtype(self, node, name, what):
        if name not in DTYPE_NAMES:
            self.fail(node, f"{what}: {name!r} is not a PyTorch dtype name "
                            f"(e.g. {', '.join(DTYPE_NAMES[:4])})")
        return name


def _parse_global(v, node):
    g = GlobalConfig()
    if node is None:
        return g
    fields = v.mapping(node, "global", allowed=("devices", "supported_dtypes", "supported_ops",
                                                "supported_modules", "discover_native_ops",
                                                "timeouts", "memory_limit_mb", "reruns"))
    if "timeouts" in fields:
        limits = v.mapping(fields["timeouts"], "global.timeouts",
                           allowed=("test_seconds", "file_seconds"))
        for key, attribute in (("test_seconds", "test_timeout_s"),
                               ("file_seconds", "file_timeout_s")):
            if key in limits:
                seconds = v.scalar(limits[key], f"global.timeouts.{key}", float)
                if seconds <= 0:
                    v.fail(limits[key], f"global.timeouts.{key} must be > 0")
                setattr(g, attribute, seconds)
    if "reruns" in fields:
        g.reruns = v.scalar(fields["reruns"], "global.reruns", int)
        if g.reruns < 0:
            v.fail(fields["reruns"], "global.reruns must be >= 0")
    if "memory_limit_mb" in fields:
        g.memory_limit_mb = v.scalar(fields["memory_limit_mb"], "global.memory_limit_mb", float)
        if g.memory_limit_mb <= 0:
            v.fail(fields["memory_limit_mb"], "global.memory_limit_mb must be > 0")
    if "devices" in fields:
        for d in v.sequence(fields["devices"], "global.devices"):
            name = v.scalar(d, "global.devices[]")
            if name not in ("cpu", "spyre", "privateuse1"):
                v.fail(d, f"global.devices: {name!r} is not a device this relay runs on "
                          "(cpu, spyre, privateuse1)")
    if "supported_dtypes" in fields:
        g.supported_dtypes = [v.dtype(n, name, "global.supported_dtypes")
                              for name, _, n in v.named_list(fields["supported_dtypes"],
                                                             "global.supported_dtypes")]
    if "discover_native_ops" in fields:
        g.discover_native_ops = v.scalar(fields["discover_native_ops"],
                                         "global.discover_native_ops", bool)
    if "supported_ops" in fields:
        g.supported_ops = {}
        for name, op, item in v.named_list(fields["supported_ops"], "global.supported_ops",
                                           extra=("force_xfail", "dtypes")):
            if name in g.supported_ops:
                v.fail(item, f"global.supported_ops: {name!r} is listed twice "
                             f"(first at line {g.supported_ops[name].line})")
            support = OpSupport(name, _line(item))
            if "force_xfail" in op:
                support.force_xfail = v.scalar(op["force_xfail"], f"{name}.force_xfail", bool)
            if "dtypes" in op:
                support.dtypes = {}
                for dname, d, dnode in v.named_list(op["dtypes"], f"supported_ops[{name}].dtypes",
                                                    extra=("precision",)):
                    v.dtype(dnode, dname, f"supported_ops[{name}].dtypes")
                    if g.supported_dtypes is not None and dname not in g.supported_dtypes:
                        v.fail(dnode, f"supported_ops[{name}].dtypes: {dname} is not in "
                                      "global.supported_dtypes (op dtypes must be a subset)")
                    support.dtypes[dname] = _parse_precision(v, d.get("precision"),
                                                             f"{name}/{dname}.precision")
            g.supported_ops[name] = support
    if "supported_modules" in fields:
        g.supported_modules = [_module_name(v, n, name, "global.supported_modules")
                               for name, _, n in v.named_list(fields["supported_modules"],
                                                              "global.supported_modules")]
    return g


def _parse_precision(v, node, what):
    if node is None:
        return None
    fields = v.mapping(node, what, allowed=("atol", "rtol"))
    values = {k: v.scalar(n, f"{what}.{k}", float) for k, n in fields.items()}
    for k, value in values.items():
        if value < 0:
            v.fail(fields[k], f"{what}.{k} must be >= 0, got {value}")
    return Precision(values.get("atol"), values.get("rtol"))


def _module_name(v, node, name, what):
    if not re.fullmatch(r"torch(\.[A-Za-z_][A-Za-z0-9_]*)+", name):
        v.fail(node, f"{what}: {name!r} must be a fully-qualified class path such as "
                     "torch.nn.Linear")
    return name


def _parse_file(v, node, what, global_):
    fields = v.mapping(node, what, required=("path",),
                       allowed=("path", "unlisted_test_mode", "tests"))
    path = v.scalar(fields["path"], f"{what}.path")
    for token in _TOKEN.findall(path):
        if token not in PATH_TOKENS:
            v.fail(fields["path"], f"{what}.path: unknown token ${{{token}}} "
                                   f"(known: {', '.join('${%s}' % t for t in PATH_TOKENS)})")
    entry = FileEntry(path, _line(node))
    if "unlisted_test_mode" in fields:
        entry.unlisted_test_mode = v.mode(fields["unlisted_test_mode"],
                                          f"{what}.unlisted_test_mode")
    if "tests" in fields:
        for i, t in enumerate(v.sequence(fields["tests"], f"{what}.tests")):
            entry.tests.append(_parse_test(v, t, f"{what}.tests[{i}]"))
    return entry


def _parse_test(v, node, what):
    fields = v.mapping(node, what, required=("names",),
                       allowed=("names", "mode", "tags", "edits", "reason", "selectors"))
    if "selectors" in fields:
        v.fail(fields["selectors"], f"{what}.selectors is planned in RFC 1287 but not "
                                    "implemented here; list the tests by `names` instead")
    names = []
    for n in v.sequence(fields["names"], f"{what}.names"):
        text = v.scalar(n, f"{what}.names[]")
        m = _NAME.match(text)
        if not m:
            v.fail(n, f"{what}.names: {text!r} must be ClassName::method_name "
                      "(the method part is a regex, e.g. TestOps::test_add_.*)")
        try:
            names.append((m.group(1), re.compile(m.group(2))))
        except re.error as error:
            v.fail(n, f"{what}.names: {text!r}: bad regex in the method part ({error})")
    if not names:
        v.fail(fields["names"], f"{what}.names is empty")
    entry = TestEntry(names, _line(node))
    if "mode" in fields:
        entry.mode = v.mode(fields["mode"], f"{what}.mode")
    if "tags" in fields:
        for t in v.sequence(fields["tags"], f"{what}.tags"):
            tag = v.scalar(t, f"{what}.tags[]")
            if not _IDENTIFIER.match(tag):
                v.fail(t, f"{what}.tags: {tag!r} is not a valid Python identifier "
                          "(tags become pytest marks)")
            entry.tags.append(tag)
    if "edits" in fields:
        entry.edits = _parse_edits(v, fields["edits"], f"{what}.edits")
    if "reason" in fields:
        entry.reason = v.scalar(fields["reason"], f"{what}.reason").strip() or None
    return entry


def _parse_edits(v, node, what):
    fields = v.mapping(node, what, allowed=("ops", "modules", "dtypes", "inputs"))
    if "inputs" in fields:
        v.fail(fields["inputs"], f"{what}.inputs is not supported by this relay; the suites "
                                 "use the OpInfo/ModuleInfo sample inputs")
    edits = Edits()
    for kind in ("ops", "modules", "dtypes"):
        if kind not in fields:
            continue
        part = v.mapping(fields[kind], f"{what}.{kind}", allowed=("include", "exclude"))
        for direction in ("include", "exclude"):
            if direction not in part:
                continue
            where = f"{what}.{kind}.{direction}"
            target = getattr(edits, f"{kind}_{direction}")
            for name, _, item in v.named_list(part[direction], where):
                if kind == "dtypes":
                    v.dtype(item, name, where)
                elif kind == "modules":
                    _module_name(v, item, name, where)
                target.add(name)
    return edits
