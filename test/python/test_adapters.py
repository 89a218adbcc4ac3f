"""torch_spyre.adapters: exact rewrites of stock models' code.

Each adapter proves on the CPU that it computes what the code it replaces
computes (bit for bit where it says so), and that on spyre under
torch.compile it removes what it is for (counted), within the model sweep's
tolerance of the CPU's output."""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from torch_spyre import adapters  # noqa: E402
from torch_spyre._inductor import config, decompositions  # noqa: E402
from torch_spyre.models import configs, runner  # noqa: E402

CAT = "aten.cat.default"


def stock_rotate_half(x):
    """transformers' rotate_half as written (models/llama/modeling_llama.py)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _bit_equal(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    # signed zeros too: assert_close calls -0.0 and 0.0 equal
    assert torch.equal(torch.signbit(a), torch.signbit(b))


@pytest.mark.parametrize("shape", [(2, 4, 8, 16), (3, 6), (1, 2), (2, 3, 7)])
def test_rotate_half_is_bit_identical_on_cpu(shape):
    x = torch.randn(shape)
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])[:x.numel()]
    _bit_equal(adapters.rotary.rotate_half(x), stock_rotate_half(x))
    _bit_equal(adapters.rotary.rotate_half(x.half()), stock_rotate_half(x.half()))


def test_registry_records_name_families_and_forms():
    adapter = adapters.ADAPTERS["rotate_half"]
    assert "llama" in adapter.families and adapter.description
    assert adapter.graph is not None and adapter.module is not None
    with pytest.raises(ValueError):
        adapters.register(adapter)
    abs_adapter = adapters.ADAPTERS["integer_abs_min_max"]
    assert "t5" in abs_adapter.families and abs_adapter.module is None


def _tiny(name):
    arch = {a.name: a for a in configs.discover_architectures()}[name]
    return runner.build_case(arch)


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt_neox"])
def test_adapt_keeps_a_cpu_model_bit_identical(name):
    case = _tiny(name)
    with torch.no_grad():
        want = case.cpu_model(**case.inputs).logits
    applied = adapters.adapt(case.cpu_model)
    assert applied == {"rotate_half": configs.LAYERS}
    assert adapters.adapt(case.cpu_model) == {}  # applied once
    with torch.no_grad():
        got = case.cpu_model(**case.inputs).logits
    assert torch.equal(got, want)


def test_adapt_leaves_other_instances_alone():
    case = _tiny("llama")
    other = _tiny("llama").cpu_model
    adapters.adapt(case.cpu_model)
    attention = other.model.layers[0].self_attn
    assert "forward" not in attention.__dict__
    # only the rewritten modules are marked
    assert "_spyre_adapters" not in case.cpu_model.model.embed_tokens.__dict__
    assert case.cpu_model.model.layers[0].self_attn._spyre_adapters == {"rotate_half"}


def test_adapted_modules_share_one_forward_with_a_code_object_of_its_own():
    case = _tiny("llama")
    adapters.adapt(case.cpu_model)
    forwards = {layer.self_attn.forward.__func__ for layer in case.cpu_model.model.layers}
    assert len(forwards) == 1
    [forward] = forwards
    original = type(case.cpu_model.model.layers[0].self_attn).forward
    assert forward.__code__ is not original.__code__


def test_a_graph_break_inside_an_adapted_forward_compiles_in_every_layer():
    # jetmoe's attention breaks the graph (expert sizes .tolist()): the
    # resume functions torch.compile installs in the compiled frame's
    # globals must be found by every layer's forward (was: NameError
    # __resume_at_...)
    arch = {a.name: a for a in configs.discover_architectures()}["jetmoe"]
    result = runner.run_architecture(arch, ["compiled"], timed_runs=0)["compiled"]
    assert result["status"] == "pass", result["error"]
    assert result["adapters"].get("rotate_half") == configs.LAYERS


def test_adapt_skips_models_without_rope():
    assert adapters.adapt(_tiny("gpt2").cpu_model) == {}


def _compiled_counts(fn, *inputs, adapters_on):
    """Output of fn compiled on spyre and the cat externs and graph
    adapters counted while compiling."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    torch._dynamo.reset()
    cats = decompositions.fallback_counts().get(CAT, 0)
    applied = adapters.graph_counts().get("rotate_half", 0)
    with config.patch(adapters=adapters_on), inductor_config.patch(fx_graph_cache=False):
        out = torch.compile(fn)(*inputs)
        torch.spyre.synchronize()
    return (out, decompositions.fallback_counts().get(CAT, 0) - cats,
            adapters.graph_counts().get("rotate_half", 0) - applied)


def rope(q, cos, sin):
    return q * cos + stock_rotate_half(q) * sin


def test_graph_form_replaces_the_cat_under_compile():
    torch.manual_seed(0)
    q, cos, sin = torch.randn(2, 4, 8, 16), torch.randn(8, 16), torch.randn(8, 16)
    want = rope(q, cos, sin)
    spyre = [t.to("spyre") for t in (q, cos, sin)]
    out, cats, applied = _compiled_counts(rope, *spyre, adapters_on=False)
    assert (cats, applied) == (1, 0)
    torch.testing.assert_close(out.cpu(), want, rtol=0, atol=1e-6)
    out, cats, applied = _compiled_counts(rope, *spyre, adapters_on=True)
    assert (cats, applied) == (0, 1)
    torch.testing.assert_close(out.cpu(), want, rtol=0, atol=1e-6)


def test_graph_form_leaves_other_cats():
    def not_rotate(x):  # halves swapped without the negation
        return torch.cat((x[..., 8:], x[..., :8]), dim=-1) * 2
    x = torch.randn(4, 16)
    out, cats, applied = _compiled_counts(not_rotate, x.to("spyre"), adapters_on=True)
    assert (cats, applied) == (1, 0)
    torch.testing.assert_close(out.cpu(), not_rotate(x))


def test_tiny_llama_compiled_on_spyre_drops_the_cat_externs():
    """The default path (torch.compile, no adapt call): the graph form
    removes every rotate_half concatenation (2 per layer: q and k)."""
    case = _tiny("llama")
    want = runner._forward_output(case.cpu_model, case.inputs, case.arch)
    tolerance = runner.ATOL + runner.RTOL * want.abs().max().item()
    inputs = {k: v.to("spyre") for k, v in case.inputs.items()}
    counts = {}
    for on in (False, True):
        model = case.spyre_copy()
        out, cats, applied = _compiled_model(model, inputs, case.arch, on)
        assert (out.cpu() - want).abs().max().item() <= tolerance
        counts[on] = (cats, applied)
    assert counts[False] == (2 * configs.LAYERS, 0)
    assert counts[True] == (0, 2 * configs.LAYERS)


def _compiled_model(model, inputs, arch, on):
    import torch._dynamo
    import torch._inductor.config as inductor_config
    torch._dynamo.reset()
    cats = decompositions.fallback_counts().get(CAT, 0)
    applied = adapters.graph_counts().get("rotate_half", 0)
    with config.patch(adapters=on), inductor_config.patch(fx_graph_cache=False):
        out = runner._forward_output(torch.compile(model), inputs, arch)
        torch.spyre.synchronize()
    return (out, decompositions.fallback_counts().get(CAT, 0) - cats,
            adapters.graph_counts().get("rotate_half", 0) - applied)


def test_sweep_compiled_mode_counts_the_adapters():
    arch = {a.name: a for a in configs.discover_architectures()}["llama"]
    result = runner.run_architecture(arch, ["compiled"], timed_runs=0)["compiled"]
    assert result["status"] == "pass", result["error"]
    assert result["adapters"] == {"rotate_half": configs.LAYERS}
    assert result["host_kernels"] is not None


def test_report_shows_the_adapters():
    from torch_spyre.models import report
    result = runner.mode_result("pass", max_error=0.0, tolerance=1e-4, host_copies=0,
                                host_kernels=6, adapters={"rotate_half": 2})
    old = runner.mode_result("pass", max_error=0.0, tolerance=1e-4)
    del old["adapters"], old["host_kernels"]  # a sweep.json of before the fields
    results = {"settings": {}, "architectures": {
        "llama": {"kind": "decoder", "modes": {"compiled": result}},
        "bert": {"kind": "encoder", "modes": {"compiled": old}}}}
    text = report.markdown(results)
    assert "## Adapters applied" in text
    assert "| `rotate_half` | 1 | 2 | llama |" in text
    assert "hk 6 · ad 2" in text


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8])
def test_integer_abs_is_exact_on_cpu(dtype):
    info = torch.iinfo(dtype)
    x = torch.cat([torch.tensor([info.min, info.min + 1, -1, 0, 1, info.max], dtype=dtype),
                   torch.randint(info.min, info.max, (64,), dtype=dtype)])
    assert torch.equal(adapters.relative_position.integer_abs(x), torch.abs(x))


def t5_buckets(q, k):
    """T5's bidirectional bucket arithmetic (models/t5/modeling_t5.py)."""
    context = torch.arange(q, dtype=torch.long, device="spyre")[:, None]
    memory = torch.arange(k, dtype=torch.long, device="spyre")[None, :]
    relative = memory - context
    buckets = (relative > 0).to(torch.long) * 16
    relative = torch.abs(relative)
    large = 8 + (torch.log(relative.float() / 8) / math.log(128 / 8) * 8).to(torch.long)
    large = torch.min(large, torch.full_like(large, 15))
    return buckets + torch.where(relative < 8, relative, large)


def test_integer_abs_moves_t5_buckets_to_the_device():
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch_spyre._inductor import runtime
    want = t5_buckets(8, 8).cpu()  # eager
    runs = {}
    for on in (False, True):
        torch._dynamo.reset()
        runtime.reset_stats()
        before = adapters.graph_counts().get("integer_abs_min_max", 0)
        with config.patch(adapters=on), inductor_config.patch(fx_graph_cache=False):
            got = torch.compile(t5_buckets)(8, 8)
            torch.spyre.synchronize()
        assert torch.equal(got.cpu(), want)
        runs[on] = (runtime.stats()["host_kernels"],
                    adapters.graph_counts().get("integer_abs_min_max", 0) - before)
    assert runs == {False: (1, 0), True: (0, 2)}  # the abs and the min with 15


def test_tiny_t5_compiled_on_spyre_has_no_host_kernel():
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch_spyre._inductor import runtime
    case = _tiny("t5")
    want = runner._forward_output(case.cpu_model, case.inputs, case.arch)
    tolerance = runner.ATOL + runner.RTOL * want.abs().max().item()
    inputs = {k: v.to("spyre") for k, v in case.inputs.items()}
    host_kernels = {}
    for on in (False, True):
        torch._dynamo.reset()
        runtime.reset_stats()
        with config.patch(adapters=on), inductor_config.patch(fx_graph_cache=False):
            out = runner._forward_output(torch.compile(case.spyre_copy()), inputs, case.arch)
            torch.spyre.synchronize()
        assert (out.cpu() - want).abs().max().item() <= tolerance
        host_kernels[on] = runtime.stats()["host_kernels"]
    assert host_kernels == {False: 1, True: 0}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_minimum_maximum_are_exact_on_cpu(dtype):
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (256,), dtype=dtype)
    b = torch.randint(info.min, info.max, (256,), dtype=dtype)
    b[:4] = a[:4]  # ties
    a[4], b[5] = info.min, info.max
    rp = adapters.relative_position
    assert torch.equal(rp.integer_minimum(a, b), torch.minimum(a, b))
    assert torch.equal(rp.integer_maximum(a, b), torch.maximum(a, b))


def test_tiny_switch_transformers_compiles_with_its_decoder_buckets_on_the_device():
    """Its decoder's buckets take -min(relative, 0): without the adapter a
    host kernel whose index is -Min(0, col - row)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch_spyre._inductor import runtime
    case = _tiny("switch_transformers")
    want = runner._forward_output(case.cpu_model, case.inputs, case.arch)
    tolerance = runner.ATOL + runner.RTOL * want.abs().max().item()
    torch._dynamo.reset()
    runtime.reset_stats()
    before = adapters.graph_counts().get("integer_abs_min_max", 0)
    with inductor_config.patch(fx_graph_cache=False):
        out = runner._forward_output(torch.compile(case.spyre_copy()),
                                     {k: v.to("spyre") for k, v in case.inputs.items()},
                                     case.arch)
        torch.spyre.synchronize()
    assert (out.cpu() - want).abs().max().item() <= tolerance
    assert runtime.stats()["host_kernels"] == 0
    assert adapters.graph_counts().get("integer_abs_min_max", 0) - before == 4
