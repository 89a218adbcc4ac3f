"""Selection by recorded dispatch: the op map records, per test, the ATen
ops it dispatched to spyre and the torch._refs functions it ran; a diff to
an op (native_functions.yaml, a kernel file of this project) or to torch/_refs
selects the recorded tests (hand-written ones too) that used it."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_spyre.testing.config import parse_config
from torch_spyre.testing.opmap import OpMap, base_name, ops_named, ops_registered_in
from torch_spyre.testing.selection import parse_diff, parse_file_list, select

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "test/relay/fixtures/test_handwritten_ops.py"
DIFFS = ROOT / "test" / "relay" / "diffs"


def _diff(path, header, lines, start=10):
    body = "\n".join(lines)
    return textwrap.dedent(f"""\
        diff --git a/{path} b/{path}
        --- a/{path}
        +++ b/{path}
        @@ -{start},3 +{start},4 @@ {header}
        """) + body + "\n"


MAP = OpMap({
    "test/python/test_a.py::test_add": {"ops": ["aten::_to_copy", "aten::add.Tensor"],
                                        "refs": []},
    "test/python/test_a.py::test_add_inplace": {"ops": ["aten::add_.Tensor"], "refs": []},
    "test/python/test_b.py::test_mul": {"ops": ["aten::_to_copy", "aten::mul.Tensor"],
                                        "refs": []},
    "test/python/test_b.py::test_ref_neg": {"ops": ["aten::_to_copy"], "refs": [
        "_make_elementwise_unary_reference.<locals>.inner.<locals>._ref", "neg"]},
    "test/python/test_b.py::test_ref_gelu": {"ops": [], "refs": ["gelu"]},
    "suites/test_spyre_opinfo.py::TestSpyreOpInfoSPYRE::test_forward_sub_spyre_float16": {
        "ops": ["aten::sub.Tensor"], "refs": [], "opinfo": "sub"},
}, {"recorded_from": ["test/python/test_a.py", "test/python/test_b.py"]})


def test_base_names():
    assert base_name("aten::mul_.Tensor") == base_name("mul.out") == base_name("mul") == "mul"
    assert base_name("aten::_to_copy") == "_to_copy"
    assert base_name("__and__.Tensor") == "__and__"


def test_kernel_sources_name_their_ops(tmp_path):
    assert {"add", "sub"} <= ops_registered_in(ROOT / "csrc" / "ops" / "add_sub.cpp")
    assert {"mul", "exp", "where"} <= ops_registered_in(ROOT / "csrc" / "ops" / "elementwise.cpp")
    assert ops_registered_in(ROOT / "csrc" / "ops" / "launch.cpp") == set()
    assert ops_named(['  m.impl("mul.Tensor", f);', '"not_an_op_name", "exp_"']) == {"mul", "exp"}


def test_recording_a_hand_written_file(tmp_path):
    out = tmp_path / "map.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "torch_spyre.testing.opmap", f"--relay-record-ops={out}", f"--relay-record-root={ROOT}",
         FIXTURE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    tests = OpMap.load(out).tests
    key = lambda name: f"{FIXTURE}::{name}"  # noqa: E731
    assert set(tests) == {key(n) for n in ("test_adds", "test_muls", "test_runs_a_ref",
                                           "test_on_the_cpu_only")}
    assert "aten::add.Tensor" in tests[key("test_adds")]["ops"]
    assert "aten::mul.Tensor" in tests[key("test_muls")]["ops"]
    assert not any("mul" in op for op in tests[key("test_adds")]["ops"])
    assert tests[key("test_on_the_cpu_only")] == {"ops": [], "refs": []}  # CPU ops not recorded
    assert "neg" in tests[key("test_runs_a_ref")]["refs"]  # qualified names
    assert any(q.endswith("<locals>._ref") for q in tests[key("test_runs_a_ref")]["refs"])
    assert all(not tests[key(n)]["refs"] for n in ("test_adds", "test_muls"))


def _selected(text=None, files=None, ops=(), config=None):
    changes = parse_diff(text) if text else parse_file_list(files or [])
    s = select(changes, ops, config, op_map=MAP, project_root=str(ROOT))
    return s, s.selected_tests(MAP)


def test_native_functions_hunk_selects_the_tests_that_dispatched_the_op():
    s, chosen = _selected(_diff("aten/src/ATen/native/native_functions.yaml", "",
                                ["-- func: add.Tensor(Tensor self, Tensor other) -> Tensor",
                                 "+- func: add.Tensor(Tensor self, Tensor other, *) -> Tensor",
                                 "   device_check: NoCheck"]))
    assert s.full is None
    assert chosen == ["test/python/test_a.py::test_add", "test/python/test_a.py::test_add_inplace"]
    assert "dispatched aten::add" in s.why_test(chosen[0])


def test_kernel_file_hunks_select_by_the_ops_they_name_or_the_file_registers():
    named = _diff("csrc/ops/elementwise.cpp", "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {",
                  ['        "ge.Tensor_out", "ge.Scalar", "ge_.Scalar", "ge.Scalar_out",',
                   '-        "mul.Tensor", "mul_.Tensor",', '+        "mul.Tensor",'])
    s, chosen = _selected(named)
    assert s.full is None and chosen == ["test/python/test_b.py::test_mul"]
    # a hunk without a literal: the ops add_sub.cpp registers
    body = _diff("csrc/ops/add_sub.cpp", "at::Tensor add_impl(const at::Tensor& self) {",
                 ["   auto out = at::empty_like(self);", "-  int n = 0;", "+  int64_t n = 0;"])
    s, chosen = _selected(body)
    assert s.full is None
    assert chosen == ["suites/test_spyre_opinfo.py::TestSpyreOpInfoSPYRE::"
                      "test_forward_sub_spyre_float16", "test/python/test_a.py::test_add",
                      "test/python/test_a.py::test_add_inplace"]
    assert "sub" in s.ops  # the recorded relay variant names its OpInfo to the relay
    # shared kernel code registering no op: everything
    s, _ = _selected(files=["csrc/ops/launch.cpp"])
    assert s.full and "registers no op" in s.full
    # an op no recorded test dispatched: nothing narrower can be justified
    s, _ = _selected(_diff("csrc/ops/elementwise.cpp", "", ['+        "tan", "tan_",']))
    assert s.full and "no recorded test dispatched tan" in s.full


def test_refs_changes_select_only_tests_that_ran_those_refs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCH_ROOT", str(tmp_path))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_view_ops.py").write_text("")
    config = parse_config(textwrap.dedent("""\
        test_suite_config:
          files:
            - path: ${TORCH_ROOT}/test/test_view_ops.py
              unlisted_test_mode: mandatory_success
        """))
    s, chosen = _selected(_diff("torch/_refs/nn/functional/__init__.py",
                                "def gelu(a: TensorLikeType, approximate: str = \"none\"):",
                                ["     if not isinstance(a, TensorLike):", "-    x = 1", "+    x = 2"]),
                          config=config)
    assert s.full is None and chosen == ["test/python/test_b.py::test_ref_gelu"]
    # the config's file the map did not record runs whole (unknown whether it runs refs)
    assert [Path(p).name for p in s.files] == ["test_view_ops.py"]
    # a hunk in a nested def: the tests that ran a function the maker defines
    _, chosen = _selected(_diff("torch/_refs/__init__.py",
                                "def _make_elementwise_unary_reference(",
                                ["         def _ref(a: TensorLikeType) -> TensorLikeType:",
                                 "+            # the prim runs on a's device",
                                 "             result = prim(a)"]))
    assert chosen == ["test/python/test_b.py::test_ref_neg"]
    # a hunk outside any def: every test that ran refs
    _, chosen = _selected(_diff("torch/_refs/__init__.py", "", ["+import math"]))
    assert chosen == ["test/python/test_b.py::test_ref_gelu", "test/python/test_b.py::test_ref_neg"]


def test_without_a_map_refs_and_kernels_select_everything():
    for path in ("torch/_refs/__init__.py", "csrc/ops/add_sub.cpp"):
        assert select(parse_file_list([path])).full is not None


def test_changed_ops_select_recorded_tests_too():
    _, chosen = _selected(ops=["mul"])
    assert chosen == ["test/python/test_b.py::test_mul"]


@pytest.mark.parametrize("name", sorted(p.name for p in DIFFS.glob("*.diff")))
def test_fixture_diffs_against_the_committed_map(name):
    """The realistic diffs of test/relay/diffs against test/relay/op_map.json:
    each selects a strict subset unless it touches shared code (none for
    docs, or refs no recorded test ran)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "torch_spyre.testing", "select", "--config",
         str(ROOT / "test" / "relay" / "spyre.yaml"), "--diff", str(DIFFS / name), *a],
        capture_output=True, text=True, env=env, timeout=300)
    count = run("--count")
    assert count.returncode == 0, count.stderr
    selected, total = (int(w) for w in count.stdout.split()[:3:2])
    expected = json.loads((DIFFS / "expected.json").read_text())[name]
    assert total > 500
    if expected == "full":
        assert selected == total
    elif expected == "none":
        assert selected == 0, count.stdout
    else:
        assert 0 < selected < total and selected <= expected, count.stdout
