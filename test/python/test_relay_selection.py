"""Test selection from a sample upstream diff, a file list, op names; and
that every selected test says why."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from torch_spyre.testing.config import parse_config
from torch_spyre.testing.selection import ALL, Selection, parse_diff, parse_file_list, select

ROOT = Path(__file__).resolve().parents[2]

SAMPLE_DIFF = textwrap.dedent('''\
    diff --git a/torch/testing/_internal/common_methods_invocations.py b/torch/testing/_internal/common_methods_invocations.py
    index 1111111..2222222 100644
    --- a/torch/testing/_internal/common_methods_invocations.py
    +++ b/torch/testing/_internal/common_methods_invocations.py
    @@ -1200,7 +1200,8 @@ def sample_inputs_softmax_variant(op_info, device, dtype, requires_grad, with_dtype=False, **kwargs):
         make_arg = partial(make_tensor, device=device, dtype=dtype, requires_grad=requires_grad)
         cases = [
             ((S,), (0,)),
    +        ((S, S, S), (2,)),
             ((S, S), (1,)),
         ]
    @@ -14000,6 +14001,7 @@ op_db: list[OpInfo] = [
         BinaryUfuncInfo('mul',
                         aliases=('multiply',),
    +                    supports_two_python_scalars=True,
                         dtypes=all_types_and_complex_and(torch.chalf, torch.float16, torch.bfloat16, torch.bool),
    diff --git a/torch/testing/_internal/common_modules.py b/torch/testing/_internal/common_modules.py
    --- a/torch/testing/_internal/common_modules.py
    +++ b/torch/testing/_internal/common_modules.py
    @@ -300,6 +300,7 @@ def module_inputs_torch_nn_Linear(module_info, device, dtype, requires_grad, training, **kwargs):
         module_inputs = [
    +        ModuleInput(constructor_input=FunctionInput(10, 8, bias=False)),
         ]
    diff --git a/aten/src/ATen/native/native_functions.yaml b/aten/src/ATen/native/native_functions.yaml
    --- a/aten/src/ATen/native/native_functions.yaml
    +++ b/aten/src/ATen/native/native_functions.yaml
    @@ -500,7 +500,7 @@
     - func: view(Tensor(a) self, SymInt[] size) -> Tensor(a)
       variants: method
    -  device_check: NoCheck
    +  device_check: NoCheck  # comment
    diff --git a/test/test_view_ops.py b/test/test_view_ops.py
    --- a/test/test_view_ops.py
    +++ b/test/test_view_ops.py
    @@ -10,3 +10,4 @@ class TestViewOps(TestCase):
         def test_view(self, device):
    +        pass
    diff --git a/test/test_sparse.py b/test/test_sparse.py
    --- a/test/test_sparse.py
    +++ b/test/test_sparse.py
    @@ -1,1 +1,2 @@
    +# a comment
    diff --git a/docs/source/notes.rst b/docs/source/notes.rst
    --- a/docs/source/notes.rst
    +++ b/docs/source/notes.rst
    @@ -1,1 +1,2 @@
    +text
    ''')

CONFIG = parse_config(textwrap.dedent("""\
    test_suite_config:
      files:
        - path: ${SPYRE_SUITES}/test_spyre_opinfo.py
        - path: ${TORCH_ROOT}/test/test_view_ops.py
    """))


def _op(name, aten_name=None):
    return {"name": name, "full_name": name, "aten_name": aten_name or name}


def test_sample_diff_selects_what_it_touches_and_says_why():
    selection = select(parse_diff(SAMPLE_DIFF), config=CONFIG)
    assert selection.full is None
    # a sample-input function: every OpInfo built on it
    assert {"softmax", "log_softmax", "nn.functional.softmin"} <= set(selection.ops)
    assert "sample_inputs_softmax_variant(), used by this OpInfo" in selection.ops["softmax"][0]
    assert "common_methods_invocations.py: the hunk at line 1200" in selection.ops["softmax"][0]
    # an OpInfo entry
    assert selection.ops["mul"] == [
        "torch/testing/_internal/common_methods_invocations.py: the hunk at line 14001 "
        "edits OpInfo 'mul'"]
    assert ALL not in selection.ops
    assert list(selection.modules) == ["torch.nn.Linear"]
    assert list(selection.aten_ops) == ["view"]
    assert selection.files == {"test/test_view_ops.py": [
        "test/test_view_ops.py changed; listed by the config at line 4"]}
    assert selection.ignored == {
        "test/test_sparse.py": "a test file the relay config does not list",
        "docs/source/notes.rst": "documentation; no test exercises it"}


def test_why_names_the_reason_for_each_test():
    selection = select(parse_diff(SAMPLE_DIFF), config=CONFIG)
    suite = "/x/torch_spyre/testing/suites/test_spyre_opinfo.py"
    assert "edits OpInfo 'mul'" in selection.why(suite, {"op": _op("mul")})
    assert "`func: view`" in selection.why(suite, {"op": _op("view")})
    assert selection.why(suite, {"op": _op("add")}) is None
    assert "ModuleInfo nn.Linear" in selection.why(suite, {"module": "torch.nn.Linear"})
    assert selection.why(suite, {"module": "torch.nn.ReLU"}) is None
    # a selected upstream file selects all its tests, with or without an op
    assert "test/test_view_ops.py changed" in selection.why("/pt/test/test_view_ops.py", {})
    # JSON round trip (the CLI hands it to the pytest plugin this way)
    again = Selection.from_json(json.loads(json.dumps(selection.to_json())))
    assert again.why(suite, {"op": _op("mul")}) == selection.why(suite, {"op": _op("mul")})


def test_unknown_input_selects_the_full_set():
    assert select().full == "no change list given: the full set runs"
    assert Selection.load(None).why("/any.py", {}) == "no change list given: the full set runs"
    # a path no rule understands, and test infrastructure, select everything
    full = select(parse_file_list(["c10/core/TensorImpl.cpp"]))
    assert full.full == "c10/core/TensorImpl.cpp changed and no rule maps it to narrower tests"
    infra = select(parse_file_list(["torch/testing/_internal/common_device_type.py"]))
    assert "test infrastructure" in infra.full
    # a file list without hunks cannot be attributed to one OpInfo
    broad = select(parse_file_list(["torch/testing/_internal/common_methods_invocations.py"]))
    assert broad.full is None and ALL in broad.ops
    assert broad.why("/s.py", {"op": _op("anything")}).startswith(
        "torch/testing/_internal/common_methods_invocations.py changed (file list only")


def test_op_names_and_nn_sources():
    selection = select(parse_file_list(["torch/nn/modules/normalization.py"]), ops=["add"])
    assert selection.ops == {"add": ["named as a changed op"]}
    assert {"torch.nn.LayerNorm", "torch.nn.GroupNorm", "torch.nn.RMSNorm"} <= set(
        selection.modules)
    functional = select(parse_diff(textwrap.dedent('''\
        --- a/torch/nn/functional.py
        +++ b/torch/nn/functional.py
        @@ -2900,6 +2900,7 @@ def layer_norm(
             normalized_shape: list[int],
        +    # note
        ''')))
    assert list(functional.ops) == ["nn.functional.layer_norm"]


def test_cli_select_prints_each_reason(tmp_path):
    diff = tmp_path / "change.diff"
    diff.write_text(SAMPLE_DIFF)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "torch_spyre.testing", "select", "--config",
                             str(ROOT / "test" / "relay" / "spyre.yaml"), "--diff", str(diff),
                             "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["full"] is None and "mul" in data["ops"] and "view" in data["aten_ops"]
    assert "listed by the config at line" in data["files"]["test/test_view_ops.py"][0]
