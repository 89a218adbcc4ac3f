"""vLLM 0.32.0's CustomOp layers on spyre (torch_spyre/vllm/layers.py).

Under the spyre platform, instantiating vLLM's RMSNorm, GemmaRMSNorm,
SiluAndMul, GeluAndMul, RotaryEmbedding (and its scaled subclasses), and the
hardware-agnostic RMSNorm and SiluAndMul (VLLM_USE_HW_AGNOSTIC=1), yields
the spyre classes, whose forward is ``forward_oot``. Each layer's spyre
forward, on spyre tensors, against the same layer's ``forward_native`` (vLLM's
reference) on the CPU, in fp32, fp16 and bf16, on contiguous inputs and on
views (a slice of a wider tensor, the query and key of a fused qkv
projection), in strict mode with no CPU fallback.

Tolerances (against the CPU reference): fp32 1e-5 absolute and relative;
fp16 2e-3 / 2e-3; bf16 1.6e-2 / 1.6e-2 (one or two roundings of the output:
the fused norm kernel computes in fp32 and rounds once, vLLM's reference
rounds the normalized input before the weight product). The residual that
the fused add-and-norm returns is the rounded sum: equal exactly.
"""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import copy  # noqa: E402
import importlib.util  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM 0.32.0 is not installed (scripts/setup.sh)")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5),
       torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}


@pytest.fixture
def vllm_config():
    """A default vLLM config made current (CustomOps read it when built),
    with the spyre layers registered as the platform registers them."""
    from vllm.config import VllmConfig, set_current_vllm_config

    from torch_spyre.vllm import layers

    layers.register()
    config = VllmConfig()
    with set_current_vllm_config(config):
        yield config


def strict(fn, *args, **kwargs):
    """``fn(*args)`` with any CPU fallback an error, and none run."""
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        out = fn(*args, **kwargs)
    assert torch.spyre.fallback_stats() == {}
    return out


def on_spyre(layer):
    return copy.deepcopy(layer).to("spyre")


def randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def view_of(shape, dtype, seed, view):
    """A tensor of ``shape`` on the CPU: contiguous, or a slice of the last
    dim of a wider one (offset, row stride of the wider tensor)."""
    if not view:
        return randn(*shape, dtype=dtype, seed=seed)
    wide = randn(*shape[:-1], shape[-1] + 48, dtype=dtype, seed=seed)
    return wide[..., 16:16 + shape[-1]]


def to_spyre_view(x):
    """``x`` on spyre with the same view (the base tensor copied)."""
    if x.is_contiguous():
        return x.to("spyre")
    base = x._base if x._base is not None else x
    return base.to("spyre").as_strided(x.shape, x.stride(), x.storage_offset())


def check(got, want, dtype):
    assert got.device.type == "spyre"
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **TOL[dtype])


# --- dispatch ---------------------------------------------------------------------


def test_vllms_layers_are_the_spyre_classes_under_the_spyre_platform(vllm_config):
    from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul, get_act_and_mul_fn
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.platforms import current_platform

    from torch_spyre.vllm import layers
    from torch_spyre.vllm.platform import SpyrePlatform

    assert isinstance(current_platform, SpyrePlatform)
    assert "all" in vllm_config.compilation_config.custom_ops
    built = {
        "RMSNorm": RMSNorm(64),
        "GemmaRMSNorm": GemmaRMSNorm(64),
        "SiluAndMul": get_act_and_mul_fn("silu"),
        "GeluAndMul": GeluAndMul(approximate="tanh"),
        "RotaryEmbedding": get_rope(16, 128, True, {"rope_theta": 10000.0}, torch.float32),
        "Llama3RotaryEmbedding": get_rope(
            16, 128, True, {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}, torch.float32),
    }
    assert isinstance(SiluAndMul(), layers.SiluAndMulOOT)
    for name, layer in built.items():
        cls = layers.REGISTERED["vllm"][name]
        assert type(layer) is cls, name
        assert cls.__name__ == "Spyre" + name
        assert layer._forward_method.__func__ is cls.forward_oot, name
    # vLLM's own names still switch them (custom_ops "-rms_norm").
    assert RMSNorm.name == layers.REGISTERED["vllm"]["RMSNorm"].name == "rms_norm"


def test_the_hardware_agnostic_layers_are_the_spyre_classes(vllm_config):
    from vllm.model_executor.hw_agnostic.layers.activation import SiluAndMul
    from vllm.model_executor.hw_agnostic.layers.layernorm import RMSNorm

    from torch_spyre.vllm import layers

    norm, act = RMSNorm(64), SiluAndMul()
    assert type(norm) is layers.REGISTERED["hw_agnostic"]["RMSNorm"]
    assert type(act) is layers.REGISTERED["hw_agnostic"]["SiluAndMul"]
    assert norm._forward_method.__func__ is layers.RMSNormOOT.forward_oot
    assert act._forward_method.__func__ is layers.SiluAndMulOOT.forward_oot


def test_registration_is_once_and_idempotent(vllm_config):
    from vllm.model_executor import custom_op
    from vllm.platforms import current_platform

    from torch_spyre.vllm import layers

    before = dict(custom_op.op_registry_oot)
    assert layers.register() is layers.register()
    current_platform.pre_register_and_update()  # the engine's hook: no second registration
    assert custom_op.op_registry_oot == before
    assert all(custom_op.op_registry_oot[n] is c for n, c in layers.REGISTERED["vllm"].items())


def test_a_disabled_custom_op_runs_vllms_native_forward():
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm

    config = VllmConfig(compilation_config=CompilationConfig(custom_ops=["all", "-rms_norm"]))
    with set_current_vllm_config(config):
        norm = RMSNorm(64)
    assert norm._forward_method == norm.forward_native


# --- RMS norms ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("view", [False, True], ids=["contiguous", "view"])
def test_rms_norm_equals_vllms_reference(vllm_config, dtype, residual, view):
    from vllm.model_executor.layers.layernorm import RMSNorm

    hidden = 96
    norm = RMSNorm(hidden, eps=1e-5, dtype=dtype)
    norm.weight.data.copy_(randn(hidden, dtype=dtype, seed=1))
    x = view_of((3, 5, hidden), dtype, 2, view)
    res = view_of((3, 5, hidden), dtype, 3, view) if residual else None
    want = norm.forward_native(x.clone(), None if res is None else res.clone())

    device = on_spyre(norm)
    xs = to_spyre_view(x)
    rs = None if res is None else to_spyre_view(res)
    x_before, r_before = xs.cpu(), None if rs is None else rs.cpu()
    got = strict(device, xs, rs)
    if not residual:
        check(got, want, dtype)
        return
    # (normed, x + residual) as forward_native returns them; inputs untouched.
    check(got[0], want[0], dtype)
    assert torch.equal(got[1].cpu(), want[1])
    assert torch.equal(xs.cpu(), x_before) and torch.equal(rs.cpu(), r_before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_variants_equal_vllms_reference(vllm_config, dtype):
    # Without a weight; with statistics over the first features only; with
    # a weight of another dtype than the input (fp32 weight, 16-bit input).
    from vllm.model_executor.layers.layernorm import RMSNorm

    hidden = 64
    x = randn(7, hidden, dtype=dtype, seed=4)
    res = randn(7, hidden, dtype=dtype, seed=5)
    variants = [RMSNorm(hidden, has_weight=False, dtype=dtype),
                RMSNorm(hidden, var_hidden_size=32, dtype=dtype),
                RMSNorm(hidden, dtype=torch.float32)]
    for norm in variants[1:]:
        norm.weight.data.copy_(randn(hidden, dtype=norm.weight.dtype, seed=6))
    for norm in variants:
        for r in (None, res):
            want = norm.forward_native(x.clone(), None if r is None else r.clone())
            got = strict(on_spyre(norm), x.to("spyre"), None if r is None else r.to("spyre"))
            if r is None:
                check(got, want, dtype)
            else:
                check(got[0], want[0], dtype)
                assert torch.equal(got[1].cpu(), want[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_gemma_rms_norm_equals_vllms_reference(vllm_config, dtype, residual):
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm

    hidden = 64
    norm = GemmaRMSNorm(hidden, eps=1e-6).to(dtype)
    norm.weight.data.copy_(randn(hidden, dtype=dtype, seed=7) * 0.5)
    x = view_of((6, hidden), dtype, 8, True)
    res = randn(6, hidden, dtype=dtype, seed=9) if residual else None
    want = norm.forward_native(x.clone(), None if res is None else res.clone())
    device = on_spyre(norm)
    got = strict(device, to_spyre_view(x), None if res is None else res.to("spyre"))
    if residual:
        check(got[0], want[0], dtype)
        assert torch.equal(got[1].cpu(), want[1])
    else:
        check(got, want, dtype)
    # A new weight (as loading writes it) is seen by the next call.
    device.weight.data.copy_(torch.zeros(hidden, dtype=dtype).to("spyre"))
    norm.weight.data.zero_()
    again = strict(device, x.to("spyre"))
    check(again, norm.forward_native(x.clone()), dtype)


# --- activations --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", [False, True], ids=["contiguous", "view"])
@pytest.mark.parametrize("kind", ["silu", "gelu", "gelu_pytorch_tanh"])
def test_act_and_mul_equals_vllms_reference(vllm_config, dtype, view, kind):
    from vllm.model_executor.layers.activation import get_act_and_mul_fn

    act = get_act_and_mul_fn(kind)
    x = view_of((2, 5, 128), dtype, 10, view)
    want = act.forward_native(x)
    got = strict(act, to_spyre_view(x))
    check(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hardware_agnostic_layers_equal_their_reference(vllm_config, dtype):
    from vllm.model_executor.hw_agnostic.layers.activation import SiluAndMul
    from vllm.model_executor.hw_agnostic.layers.layernorm import RMSNorm

    norm = RMSNorm(64, eps=1e-6, dtype=dtype)
    norm.weight.data.copy_(randn(64, dtype=dtype, seed=11))
    x = view_of((5, 64), dtype, 12, True)
    res = randn(5, 64, dtype=dtype, seed=13)
    device = on_spyre(norm)
    check(strict(device, to_spyre_view(x)), norm.forward_native(x), dtype)
    got, want = strict(device, to_spyre_view(x), res.to("spyre")), norm.forward_native(x, res)
    check(got[0], want[0], dtype)
    assert torch.equal(got[1].cpu(), want[1])
    act = SiluAndMul()
    y = view_of((5, 128), dtype, 14, True)
    check(strict(act, to_spyre_view(y)), act.forward_native(y), dtype)


# --- rotary embedding ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [32, 16], ids=["full", "partial"])
def test_rotary_embedding_equals_vllms_reference(vllm_config, dtype, neox, rotary_dim):
    from vllm.model_executor.layers.rotary_embedding import get_rope

    head, q_heads, kv_heads, tokens = 32, 4, 2, 9
    rope = get_rope(head, 256, neox, {"rope_theta": 10000.0,
                                      "partial_rotary_factor": rotary_dim / head}, dtype)
    assert rope.rotary_dim == rotary_dim
    positions = torch.tensor([0, 1, 2, 200, 7, 5, 255, 3, 3])
    # The query and key as vLLM's attention layers have them: views of the
    # fused qkv projection's output, [tokens, heads * head].
    qkv = randn(tokens, (q_heads + 2 * kv_heads) * head, dtype=dtype, seed=15)
    q, k, _ = qkv.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    want_q, want_k = rope.forward_native(positions, q.clone(), k.clone())

    device = on_spyre(rope)
    qkv_s = qkv.to("spyre")
    qs, ks, _ = qkv_s.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    got_q, got_k = strict(device, positions.to("spyre"), qs, ks)
    check(got_q, want_q, dtype)
    check(got_k, want_k, dtype)
    assert torch.equal(qkv_s.cpu(), qkv)  # inputs untouched
    # No key (cross-layer KV sharing); the query as [tokens, heads, head].
    got_q, got_k = strict(device, positions.to("spyre"), qs.reshape(tokens, q_heads, head))
    assert got_k is None
    check(got_q, want_q.view(tokens, q_heads, head), dtype)


def test_scaled_rotary_embeddings_equal_vllms_reference(vllm_config):
    from vllm.model_executor.layers.rotary_embedding import get_rope

    head, tokens = 16, 6
    positions = torch.tensor([0, 3, 17, 100, 63, 64])
    for params in ({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32},
                   {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}):
        rope = get_rope(head, 128, True, params, torch.float32)
        q = randn(tokens, 2 * head, dtype=torch.float32, seed=16)
        k = randn(tokens, head, dtype=torch.float32, seed=17)
        want = rope.forward_native(positions, q, k)
        got = strict(on_spyre(rope), positions.to("spyre"), q.to("spyre"), k.to("spyre"))
        check(got[0], want[0], torch.float32)
        check(got[1], want[1], torch.float32)


def test_the_transformers_backends_norms_are_the_spyre_classes(vllm_config):
    # vLLM's Transformers modeling backend swaps the model's RMSNorms for its
    # own subclass of vLLM's RMSNorm (TPAwareRMSNorm), defined when the
    # backend is imported: register() called again serves it too.
    import vllm.model_executor.models.transformers.fusers  # noqa: F401
    from vllm.model_executor.models.transformers.fusers.rms_norm import TPAwareRMSNorm

    from torch_spyre.vllm import layers

    layers.register()
    norm = TPAwareRMSNorm(64)
    assert type(norm).__name__.endswith("TPAwareRMSNorm") and type(norm) is not TPAwareRMSNorm
    assert norm._forward_method.__func__ is layers.RMSNormOOT.forward_oot
    x = randn(3, 64, dtype=torch.float32, seed=18)
    check(strict(on_spyre(norm), x.to("spyre")), norm.forward_native(x), torch.float32)


# --- vLLM's models end to end (model_impl) ---------------------------------------------

# In a fresh interpreter: vLLM's Transformers modeling backend decorates the
# Hugging Face model classes of the process for its compilation, and
# VLLM_USE_HW_AGNOSTIC is read when the backend is first imported.
ENGINE = """
import json, os
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import torch
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

path, impl, prompts, shared = {args}
greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

def generate(llm, prompts):
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], greedy,
                            use_tqdm=False)
    assert torch.spyre.fallback_stats() == {{}}, torch.spyre.fallback_stats()
    return [list(o.outputs[0].token_ids) for o in outs]

common = dict(model=path, dtype="float32", max_model_len=128, seed=0, model_impl=impl,
              kv_cache_memory_bytes=16 * 2**20)
llm = LLM(max_num_seqs=8, enable_prefix_caching=False, **common)
runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
kinds = sorted({{type(m).__name__ for m in runner.model.modules()
                 if type(m).__module__ == "torch_spyre.vllm.layers"}})
result = dict(batch=generate(llm, prompts), layers=kinds, model=type(runner.model).__name__,
              attention=[type(l.impl).__name__ for l in runner.attn_layers],
              kv_cache=[str(t.device) for t in runner.attn_layers[0].kv_cache],
              compiled=llm.collective_rpc("spyre_stats")[0])
llm.llm_engine.engine_core.shutdown()
del llm, runner
if not shared:
    print("RESULT", json.dumps(result))
    raise SystemExit(0)
# Eagerly, chunked prefill (16 tokens a step) and prefix caching: the
# second prompt reuses the first's two cached blocks.
llm = LLM(max_num_seqs=4, enable_prefix_caching=True, enable_chunked_prefill=True,
          max_num_batched_tokens=16, enforce_eager=True, **common)
result["chunked"] = generate(llm, shared[:1]) + generate(llm, shared[1:])
result["stats"] = llm.collective_rpc("spyre_stats")[0]
print("RESULT", json.dumps(result))
"""


def tiny_model(arch, directory):
    """A tiny ``arch``, its prompts and their greedy tokens from transformers
    on the CPU (as test_vllm_offline.py)."""
    from transformers import AutoModelForCausalLM

    from torch_spyre.vllm.tiny_models import write_tiny_model

    path = write_tiny_model(arch, directory)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 512, (n,), generator=gen).tolist() for n in (1, 5, 17, 40)]
    prefix = torch.randint(3, 512, (32,), generator=gen).tolist()
    shared = [prefix + torch.randint(3, 512, (n,), generator=gen).tolist() for n in (9, 14)]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None

    def greedy(ids):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
        return out[0, len(ids):].tolist()

    return path, prompts, shared, [greedy(p) for p in prompts], [greedy(p) for p in shared]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return tiny_model("llama", str(tmp_path_factory.mktemp("tiny-llama")))


def run_script(fresh_python, script, args, hw_agnostic):
    """``script`` (ENGINE or TENSOR_PARALLEL) given ``args`` in a fresh
    interpreter: the result it prints."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = fresh_python(script.format(args=repr(args)), VLLM_USE_HW_AGNOSTIC=hw_agnostic,
                        PYTHONPATH=root)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def run_engine(fresh_python, path, impl, prompts, shared, hw_agnostic):
    return run_script(fresh_python, ENGINE, (path, impl, prompts, shared), hw_agnostic)


@pytest.mark.parametrize("impl,hw_agnostic", [("transformers", "1"), ("transformers", "0"),
                                               ("vllm", "0")],
                         ids=["transformers-hw-agnostic", "transformers", "vllm"])
def test_vllms_models_generate_the_greedy_tokens_of_transformers_on_the_cpu(
        fresh_python, tiny_llama, impl, hw_agnostic):
    # vllm.LLM(model_impl=...): vLLM builds the model from its layers (the
    # spyre ones), loads the weights with its loader, and its Attention
    # layers attend through the spyre backend with the KV cache bound to
    # them; compiled through the spyre backend and eager, greedy tokens as
    # transformers on the CPU, no CPU fallback.
    path, prompts, shared, want, want_shared = tiny_llama
    # The eager engine with chunked prefill and prefix caching once (the
    # hardware-agnostic backend): the step logic is the same for every
    # model_impl, and each engine costs ~20 s of the suite.
    eager_too = hw_agnostic == "1"
    got = run_engine(fresh_python, path, impl, prompts, shared if eager_too else [],
                     hw_agnostic)
    assert got["batch"] == want  # compiled (the default)
    assert got["compiled"]["compiled"] and got["compiled"]["compiled_sizes"]
    if eager_too:
        assert got["chunked"] == want_shared
        assert not got["stats"]["compiled"]
        assert got["stats"]["prefill_chunks"] > 0 and got["stats"]["prefix_cached_tokens"] >= 32
    assert got["attention"] == ["SpyreAttentionImpl"] * 2
    assert got["kv_cache"] == ["spyre:0", "spyre:0"]
    prefix = "SpyreHwAgnostic" if hw_agnostic == "1" else "Spyre"
    if impl == "transformers":
        assert got["model"] == "TransformersForCausalLM"
        assert got["layers"] == [prefix + "SiluAndMul", prefix + "TPAwareRMSNorm"]
    else:
        assert got["model"] == "LlamaForCausalLM"
        assert got["layers"] == ["SpyreRMSNorm", "SpyreRotaryEmbedding", "SpyreSiluAndMul"]


def test_gemma_through_the_hardware_agnostic_transformers_backend(fresh_python, tmp_path):
    # Gemma: vLLM's GemmaRMSNorm (the hardware-agnostic layers have none)
    # and GeluAndMul (tanh), both the spyre ones; compiled.
    path, prompts, _, want, _ = tiny_model("gemma", str(tmp_path / "gemma"))
    got = run_engine(fresh_python, path, "transformers", prompts, [], "1")
    assert got["batch"] == want
    assert got["layers"] == ["SpyreGeluAndMul", "SpyreTPAwareGemmaRMSNorm"]


TENSOR_PARALLEL = """
import json, os
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import torch
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

path, prompts = {args}
llm = LLM(model=path, dtype="float32", max_model_len=128, seed=0, model_impl="transformers",
          kv_cache_memory_bytes=16 * 2**20, tensor_parallel_size=2, enforce_eager=True)
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                    SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
devices = [d[0] for d in llm.collective_rpc("spyre_kv_cache_devices")]
llm.llm_engine.engine_core.shutdown()
print("RESULT", json.dumps(dict(batch=[list(o.outputs[0].token_ids) for o in outs],
                                devices=devices)))
"""


def test_tensor_parallel_through_the_hardware_agnostic_transformers_backend(fresh_python,
                                                                            tiny_llama):
    # Two workers, one per emulated device: vLLM's column and row parallel
    # linears, vocab-parallel embedding and LM head, their all-reduces and
    # gathers through vLLM's device communicator over spyreccl.
    path, prompts, _, want, _ = tiny_llama
    got = run_script(fresh_python, TENSOR_PARALLEL, (path, prompts), "1")
    assert got["batch"] == want
    assert got["devices"] == ["spyre:0", "spyre:1"]
