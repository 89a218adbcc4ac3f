"""vLLM 0.32.0 on spyre, offline: ``vllm.LLM(...).generate`` through the
spyre platform plugin (torch_spyre/vllm/) against Hugging Face transformers
on the CPU with the same weights.

Tiny seeded checkpoints written to a temporary folder (no model hub): the
sweep's tiny configs of Llama, Qwen2, Qwen3, Granite and Gemma. Greedy tokens
must equal transformers' greedy ``generate`` on the CPU for a batch of
prompts of different lengths (one token; within a block; across blocks), with
no CPU fallback (strict mode around the whole vLLM step). The scheduler's
chunked prefill and prefix caching, and seeded sampling, are checked the same
way. Presence, frequency and repetition penalties against vLLM's own CPU
penalty code and transformers' generate; logprobs and prompt logprobs against
a CPU log_softmax of the CPU model's logits. The engine runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so strict mode and the fallback counters
see the model's ops.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gc  # noqa: E402
import importlib.util  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from torch_spyre.vllm import sampler  # noqa: E402
from torch_spyre.vllm.tiny_models import write_tiny_model  # noqa: E402

# vLLM is imported when the first test here runs, not when pytest collects
# this file: importing it patches torch._inductor (vllm/env_override.py),
# which the other test files must not run under.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM 0.32.0 is not installed (scripts/setup.sh installs it)")


def LLM(**kwargs):
    from vllm import LLM as _LLM

    return _LLM(**kwargs)


def SamplingParams(**kwargs):
    from vllm import SamplingParams as _SamplingParams

    return _SamplingParams(**kwargs)


def TokensPrompt(**kwargs):
    from vllm.inputs import TokensPrompt as _TokensPrompt

    return _TokensPrompt(**kwargs)

NEW_TOKENS = 8


def prompts_of(lengths, seed=1, vocab=512):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def cpu_model(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, as ignore_eos
    return model


def cpu_greedy(model, prompts, new_tokens=NEW_TOKENS):
    out = []
    with torch.no_grad():
        for ids in prompts:
            ids = torch.tensor([ids])
            got = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
            out.append(got[0, ids.shape[1]:].tolist())
    return out


def make_llm(path, **kwargs):
    args = dict(model=path, dtype="float32", max_model_len=128, max_num_seqs=8, seed=0,
                kv_cache_memory_bytes=16 * 2**20, enable_prefix_caching=False)
    args.update(kwargs)
    return LLM(**args)


def close(llm):
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def spyre_outputs(llm, prompts, params):
    """vLLM's outputs per prompt, with any CPU fallback an error."""
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                            use_tqdm=False)
    assert torch.spyre.fallback_stats() == {}
    return outs


def spyre_generate(llm, prompts, params):
    """Token ids per prompt, with any CPU fallback an error."""
    return [list(o.outputs[0].token_ids) for o in spyre_outputs(llm, prompts, params)]


def outputs_of_one_engine(path, prompts, params):
    """spyre_outputs of an engine made for them and closed after."""
    llm = make_llm(path)
    try:
        return spyre_outputs(llm, prompts, params)
    finally:
        close(llm)


def greedy(max_tokens=NEW_TOKENS):
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return write_tiny_model("llama", str(tmp_path_factory.mktemp("tiny-llama")))


def test_the_current_vllm_platform_is_spyre():
    from vllm.platforms import current_platform

    from torch_spyre.vllm.platform import SpyrePlatform

    assert isinstance(current_platform, SpyrePlatform)
    assert current_platform.device_type == "spyre"
    assert current_platform.dispatch_key == "PrivateUse1"
    assert current_platform.is_out_of_tree()
    assert current_platform.get_device_total_memory(0) == torch.spyre.mem_get_info(0)[1]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "granite", "gemma"])
def test_greedy_tokens_equal_transformers_on_the_cpu(arch, tmp_path):
    path = write_tiny_model(arch, str(tmp_path / arch))
    # One token, within a block (16 tokens), across two and three blocks.
    prompts = prompts_of([1, 5, 17, 40])
    want = cpu_greedy(cpu_model(path), prompts)
    llm = make_llm(path)
    try:
        got = spyre_generate(llm, prompts, greedy())
        # The KV cache and the weights are in device memory.
        (keys, values), = llm.collective_rpc("spyre_kv_cache_devices")[:1]
        assert keys == values == "spyre:0"
    finally:
        close(llm)
    assert got == want


def test_the_model_is_compiled_by_default_and_eager_on_request(llama_dir):
    # torch.compile through the spyre backend by default: a graph per
    # power-of-two step size, the step's tokens padded to it, the same
    # tokens as eager (enforce_eager=True, vLLM's switch) and as the CPU.
    from torch_spyre._inductor import runtime

    prompts = prompts_of([3, 11, 20], seed=12)
    want = cpu_greedy(cpu_model(llama_dir), prompts)
    got, stats = {}, {}
    for eager in (False, True):
        llm = make_llm(llama_dir, enforce_eager=eager)
        try:
            runtime.reset_stats()
            got[eager] = spyre_generate(llm, prompts, greedy())
            stats[eager] = llm.collective_rpc("spyre_stats")[0]
            launches, relayouts = runtime.stats()["launches"], runtime.stats()["relayouts"]
        finally:
            close(llm)
        assert stats[eager]["compiled"] is not eager
        assert (launches > 0) is not eager
        assert relayouts == 0  # the step's inputs bound as they are, no copies
    assert got[False] == got[True] == want
    # The prompts step (34 tokens) and the decode steps of 3 requests.
    assert sorted(stats[False]["compiled_sizes"]) == [4, 64]
    assert stats[True]["compiled_sizes"] == []


@pytest.mark.parametrize("arch", ["mistral", "gemma2"])
def test_sliding_window_attention_equals_transformers_on_the_cpu(arch, tmp_path):
    # A window of 8 tokens, far shorter than the contexts: every layer with
    # a sliding window (all of Mistral's, every other of Gemma2's) hides
    # what lies before it, in prompts, chunks and decode steps alike.
    # Gemma2 keeps its attention and final logit soft-capping.
    path = write_tiny_model(arch, str(tmp_path / arch), sliding_window=8)
    prompts = prompts_of([3, 12, 30])
    want = cpu_greedy(cpu_model(path), prompts)
    got = generate_once(path, prompts, greedy())
    assert got == want


def test_chunked_prefill_and_prefix_caching_as_scheduled(llama_dir):
    # Two prompts sharing a 32-token prefix (two whole blocks), 16 tokens
    # per step at most: the prompts are prefilled in chunks, and the second
    # reuses the first's cached prefix blocks.
    shared = prompts_of([32], seed=5)[0]
    prompts = [shared + tail for tail in prompts_of([9, 14], seed=6)]
    want = cpu_greedy(cpu_model(llama_dir), prompts)
    llm = make_llm(llama_dir, enable_prefix_caching=True, enable_chunked_prefill=True,
                   max_num_batched_tokens=16, max_num_seqs=4)
    try:
        first = spyre_generate(llm, prompts[:1], greedy())
        second = spyre_generate(llm, prompts[1:], greedy())
        stats = llm.collective_rpc("spyre_stats")[0]
    finally:
        close(llm)
    assert first + second == want
    assert stats["prefill_chunks"] > 0
    assert stats["prefix_cached_tokens"] >= 32


def cpu_sample(logits, params, generator, min_p=0.0):
    """vLLM's choice from processed ``logits [vocab]`` on the CPU: greedy the
    argmax, else divided by the temperature, cut by min_p (vLLM's
    MinPLogitsProcessor: below ``min_p`` times the top probability) and drawn
    by the host sampler's ``draw``."""
    if sampler.is_greedy(params):
        return int(torch.argmax(logits))
    logits = logits / params.temperature
    if min_p:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < probs.max() * min_p, float("-inf"))
    return sampler.draw(logits, params, generator)


def cpu_generate(model, prompt, params, adjust=None, new_tokens=NEW_TOKENS, stop=None):
    """The tokens vLLM's sampler chooses from the CPU model's logits (float32,
    ``[vocab]``), each step's first passed through ``adjust(logits, output)``
    when given (what vLLM does to them before sampling); ends after ``stop``."""
    generator = sampler.make_generator(params)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            if adjust is not None:
                logits = adjust(logits.clone(), ids[len(prompt):])
            ids.append(cpu_sample(logits, params, generator, min_p=params.min_p))
            if ids[-1] == stop:
                break
    return ids[len(prompt):]


def cpu_sampled(model, prompt, params, new_tokens=NEW_TOKENS):
    """The tokens the host sampler draws from the CPU model's logits."""
    return cpu_generate(model, prompt, params, new_tokens=new_tokens)


def generate_once(path, prompts, params, **llm_kwargs):
    """spyre_generate on an engine of its own (make_llm's, with
    ``llm_kwargs``), closed after."""
    llm = make_llm(path, **llm_kwargs)
    try:
        return spyre_generate(llm, prompts, params)
    finally:
        close(llm)


def test_seeded_sampling_is_reproducible_and_equals_the_cpu(llama_dir):
    prompts = prompts_of([3, 11, 20], seed=9)
    params = [SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=100 + i,
                             max_tokens=NEW_TOKENS, ignore_eos=True) for i in range(3)]
    llm = make_llm(llama_dir)
    try:
        torch.spyre.reset_fallback_stats()
        with torch.spyre.strict():
            run = lambda order: llm.generate(  # noqa: E731
                [TokensPrompt(prompt_token_ids=prompts[i]) for i in order],
                [params[i] for i in order], use_tqdm=False)
            a = [list(o.outputs[0].token_ids) for o in run([0, 1, 2])]
            b = [list(o.outputs[0].token_ids) for o in run([2, 0, 1])]
    finally:
        close(llm)
    b = [b[1], b[2], b[0]]
    assert a == b  # the same seeds draw the same tokens whatever the batch
    model = cpu_model(llama_dir)
    assert a == [cpu_sampled(model, p, s) for p, s in zip(prompts, params)]
    assert len({tuple(t) for t in a}) == 3


def test_unsupported_sampling_is_refused_with_a_clear_error(llama_dir):
    llm = make_llm(llama_dir)
    try:
        # Scoring chosen prompt tokens: vLLM's V2 model runner only (refused by
        # vLLM before the platform's own refusal is reached).
        from vllm.exceptions import VLLMValidationError
        with pytest.raises((ValueError, VLLMValidationError), match="prompt_logprob_token_ids"):
            llm.generate([TokensPrompt(prompt_token_ids=[5, 6, 9])],
                         SamplingParams(max_tokens=2, prompt_logprob_token_ids=[[7], [8]]),
                         use_tqdm=False)
        # An id outside the vocabulary: vLLM's own error, before the device.
        with pytest.raises((ValueError, VLLMValidationError), match="out-of-vocab"):
            llm.generate([TokensPrompt(prompt_token_ids=[5, 6])],
                         SamplingParams(max_tokens=2, logprob_token_ids=[7, 10**6]),
                         use_tqdm=False)
        # The engine keeps serving.
        assert spyre_generate(llm, [[5, 6]], greedy(2)) == cpu_greedy(
            cpu_model(llama_dir), [[5, 6]], 2)
    finally:
        close(llm)


# --- vLLM's logits processors, allowed tokens, bad words, structured outputs ----

EOS = 2  # the tiny models' end of sequence (tiny_models.py)


def cpu_processed_greedy(model, prompt, adjust, new_tokens=NEW_TOKENS, stop=None):
    """Greedy tokens of the CPU model with ``adjust(logits, output)`` applied
    to each step's logits; ends after ``stop``."""
    return cpu_generate(model, prompt, SamplingParams(temperature=0), adjust, new_tokens, stop)


def banned_except(allowed):
    def adjust(logits, output):
        keep = torch.full_like(logits, float("-inf"))
        keep[allowed] = 0.0
        return logits + keep
    return adjust


def test_logit_bias_allowed_tokens_bad_words_and_min_tokens_equal_vllm_on_the_cpu(llama_dir):
    # One batch: each request with one of them (and one without), greedy,
    # against the CPU model's logits adjusted as vLLM 0.32.0 specifies.
    from vllm.v1.sample.ops.bad_words import apply_bad_words

    prompt = prompts_of([6], seed=5)[0]
    model = cpu_model(llama_dir)
    plain = cpu_greedy(model, [prompt])[0]
    bias = {plain[1] + 1: 40.0, plain[0]: -40.0}
    allowed = [10, 11, 12, plain[2]]
    bad = [[plain[1]], [plain[2], plain[3]]]  # a word of one token, one of two

    def biased(logits, output):
        for token, value in bias.items():
            logits[token] += value
        return logits

    def without_bad_words(logits, output):
        view = logits.view(1, -1)
        apply_bad_words(view, {0: bad}, [output])
        return view[0]

    def min_three_then_eos(logits, output):
        logits[EOS] += 100.0  # logit_bias of the request
        if len(output) < 3:
            logits[EOS] = float("-inf")
        return logits

    cases = [
        (dict(ignore_eos=True), lambda logits, output: logits, None),
        (dict(ignore_eos=True, logit_bias=bias), biased, None),
        (dict(ignore_eos=True, allowed_token_ids=allowed), banned_except(allowed), None),
        (dict(ignore_eos=True, bad_words=[" ".join(f"t{t}" for t in w) for w in bad]),
         without_bad_words, None),
        (dict(min_tokens=3, logit_bias={EOS: 100.0}), min_three_then_eos, EOS),
    ]
    want = [cpu_processed_greedy(model, prompt, adjust, stop=stop) for _, adjust, stop in cases]
    assert want[0] == plain
    assert all(w != plain for w in want[1:])  # each changes the tokens
    assert want[-1] == plain[:3] + [EOS]
    got = generate_once(llama_dir, [prompt] * len(cases),
                        [SamplingParams(temperature=0, max_tokens=NEW_TOKENS, **kw)
                         for kw, _, _ in cases])
    assert got == want


def test_seeded_sampling_with_min_p_and_logit_bias_equals_the_cpu(llama_dir):
    prompts = prompts_of([4, 13], seed=6)
    bias = {7: 3.0, 8: 2.0}
    params = [SamplingParams(temperature=1.5, min_p=0.2, seed=40 + i, max_tokens=NEW_TOKENS,
                             ignore_eos=True, logit_bias=bias if i else None)
              for i in range(2)]
    model = cpu_model(llama_dir)

    def biased(params):
        def adjust(logits, output):
            for token, value in (params.logit_bias or {}).items():
                logits[token] += value
            return logits
        return adjust

    want = [cpu_generate(model, p, s, biased(s)) for p, s in zip(prompts, params)]
    unfiltered = [cpu_sampled(model, p, SamplingParams(temperature=1.5, seed=40 + i))
                  for i, p in enumerate(prompts)]
    assert want != unfiltered  # min_p changes the draws
    got = generate_once(llama_dir, prompts, params)
    assert got == want


def test_structured_outputs_constrain_tokens_as_the_grammar_allows(llama_dir):
    # The word-level tiny tokenizer: each token is its own word t<id>, so a
    # regex over words allows exactly those tokens (and the end of sequence
    # once the grammar may stop).
    from vllm.sampling_params import StructuredOutputsParams

    prompt = prompts_of([5], seed=7)[0]
    model = cpu_model(llama_dir)
    regex = [5, 6]

    def regex_allows(logits, output):
        return banned_except(regex + ([EOS] if output else []))(logits, output)

    def choice_allows(logits, output):
        return banned_except([EOS] if output else [7, 9])(logits, output)

    want = [cpu_processed_greedy(model, prompt, regex_allows, stop=EOS),
            cpu_processed_greedy(model, prompt, choice_allows, stop=EOS),
            cpu_greedy(model, [prompt])[0]]
    got = generate_once(llama_dir, [prompt] * 3, [
        SamplingParams(temperature=0, max_tokens=NEW_TOKENS,
                       structured_outputs=StructuredOutputsParams(regex="(t5|t6)+")),
        SamplingParams(temperature=0, max_tokens=NEW_TOKENS,
                       structured_outputs=StructuredOutputsParams(choice=["t7", "t9"])),
        greedy()])
    assert got == want
    assert set(got[0]) <= {5, 6, EOS} and got[1] in ([7, EOS], [9, EOS])


def test_custom_logits_processors_run_on_the_device(llama_dir):
    # vLLM's extension point for logits processors (LLM(logits_processors=
    # [...])): one that keeps even tokens for the requests asking for it.
    from vllm.v1.sample.logits_processor import LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    class EvenTokensOnly(LogitsProcessor):
        def __init__(self, vllm_config, device, is_pin_memory):
            self.rows = {}

        def is_argmax_invariant(self):
            return False

        def update_state(self, batch_update):
            process_dict_updates(
                self.rows, batch_update,
                lambda params, _, __: True if (params.extra_args or {}).get("even") else None)

        def apply(self, logits):
            for row in self.rows:
                logits[row, 1::2] = float("-inf")
            return logits

    prompts = prompts_of([3, 9], seed=8)
    model = cpu_model(llama_dir)
    evens = list(range(0, 512, 2))
    want = [cpu_processed_greedy(model, prompts[0], banned_except(evens)),
            cpu_greedy(model, prompts[1:])[0]]
    got = generate_once(llama_dir, prompts, [
        SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True,
                       extra_args={"even": True}), greedy()], logits_processors=[EvenTokensOnly])
    assert got == want
    assert all(t % 2 == 0 for t in got[0]) and any(t % 2 for t in got[1])


# --- penalties and logprobs ------------------------------------------------------

PENALTY_TOKENS = 12
# Logprobs on the device against a CPU log_softmax of the CPU model's logits
# (float32 both): absolute tolerance (they agree to 1e-6 on the emulator).
LOGPROB_ATOL = 1e-5


def cpu_penalized_greedy(model, prompt, params, new_tokens=PENALTY_TOKENS):
    """Greedy tokens with vLLM 0.32.0's own penalty code
    (``vllm.model_executor.layers.utils.apply_penalties``) applied on the CPU
    to the CPU model's logits, and the raw (unpenalized) logits of each step."""
    from vllm.model_executor.layers.utils import apply_penalties

    ids, raw = list(prompt), []
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1:].float()
            raw.append(logits[0].clone())
            out = torch.tensor([ids[len(prompt):]], dtype=torch.int64).view(1, -1)
            logits = apply_penalties(logits, torch.tensor([prompt]), out,
                                     torch.tensor([params.presence_penalty]),
                                     torch.tensor([params.frequency_penalty]),
                                     torch.tensor([params.repetition_penalty]))
            ids.append(int(torch.argmax(logits[0])))
    return ids[len(prompt):], raw


PENALTIES = {
    "repetition": dict(repetition_penalty=2.0),
    "presence": dict(presence_penalty=1.5),
    "frequency": dict(frequency_penalty=0.7),
    "all": dict(repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.5),
}


def test_device_penalties_equal_vllms_apply_penalties_on_the_cpu():
    # A batch of rows with different penalties (one with none), prompts and
    # outputs with repeated tokens and of different lengths (one output empty),
    # negative, zero and positive logits; no CPU fallback.
    from vllm.model_executor.layers.utils import apply_penalties

    vocab = 300
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(4, vocab, generator=gen) * 3
    logits[:, :8] = 0.0
    params = [SamplingParams(repetition_penalty=1.7, presence_penalty=0.4, frequency_penalty=0.3),
              None,
              SamplingParams(frequency_penalty=-0.5),
              SamplingParams(repetition_penalty=0.8, presence_penalty=-1.0)]
    prompts = [[1, 2, 2, 5, 299], [7], [3, 3, 3], [0, 4, 6, 250, 251, 252]]
    outputs = [[2, 9, 9, 9, 120], [8, 8], [], [4, 4, 100, 299]]
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict():
        got = sampler.apply_penalties(logits.to("spyre"), params, prompts, outputs).cpu()
    assert torch.spyre.fallback_stats() == {}

    def padded(lists):
        width = max(len(t) for t in lists)
        return torch.tensor([t + [vocab] * (width - len(t)) for t in lists])

    want = apply_penalties(
        logits.clone(), padded(prompts), padded(outputs),
        torch.tensor([p.presence_penalty if p else 0.0 for p in params]),
        torch.tensor([p.frequency_penalty if p else 0.0 for p in params]),
        torch.tensor([p.repetition_penalty if p else 1.0 for p in params]))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[1], logits[1])
    assert not torch.equal(got, logits)


def cpu_penalized_sampled(model, prompt, params, new_tokens=NEW_TOKENS):
    """The host sampler's tokens from the CPU model's logits after vLLM's own
    CPU penalties (penalties before temperature, as vLLM's Sampler)."""
    from vllm.model_executor.layers.utils import apply_penalties

    def penalized(logits, output):
        out = torch.tensor([output], dtype=torch.int64).view(1, -1)
        return apply_penalties(logits.view(1, -1), torch.tensor([prompt]), out,
                               torch.tensor([params.presence_penalty]),
                               torch.tensor([params.frequency_penalty]),
                               torch.tensor([params.repetition_penalty]))[0]

    return cpu_generate(model, prompt, params, penalized, new_tokens)


def test_seeded_sampling_with_penalties_equals_the_cpu(llama_dir):
    prompts = prompts_of([6, 15], seed=11)
    params = [SamplingParams(temperature=0.7, top_k=50, seed=3 + i, max_tokens=PENALTY_TOKENS,
                             ignore_eos=True, **PENALTIES["all"]) for i in range(2)]
    model = cpu_model(llama_dir)
    want = [cpu_penalized_sampled(model, p, s, PENALTY_TOKENS) for p, s in zip(prompts, params)]
    unpenalized = [SamplingParams(temperature=0.7, top_k=50, seed=3 + i) for i in range(2)]
    assert want != [cpu_sampled(model, p, s, PENALTY_TOKENS) for p, s in zip(prompts, unpenalized)]
    got = generate_once(llama_dir, prompts, params)
    assert got == want


def test_greedy_with_penalties_equals_vllms_cpu_penalties(llama_dir):
    # Prompts whose plain greedy continuation repeats itself (or the
    # prompt), so each penalty changes the tokens; one batch mixing all the
    # penalties with a request without any.
    prompts = prompts_of([5, 20], seed=1)
    model = cpu_model(llama_dir)
    plain = cpu_greedy(model, prompts, PENALTY_TOKENS)
    cases = [(name, p) for name in PENALTIES for p in prompts]
    params = [SamplingParams(temperature=0, max_tokens=PENALTY_TOKENS, ignore_eos=True,
                             **PENALTIES[name]) for name, _ in cases]
    want = [cpu_penalized_greedy(model, p, s)[0] for (_, p), s in zip(cases, params)]
    got = generate_once(llama_dir, [p for _, p in cases] + prompts,
                        params + [greedy(PENALTY_TOKENS)] * len(prompts), max_num_seqs=16)
    assert got[len(cases):] == plain  # requests without penalties are untouched
    assert got[:len(cases)] == want
    # Every penalty changes the tokens of at least one prompt.
    for name in PENALTIES:
        changed = [w != plain[prompts.index(p)] for (n, p), w in zip(cases, want) if n == name]
        assert any(changed), name


def test_repetition_penalty_equals_transformers_generate(llama_dir):
    # transformers' RepetitionPenaltyLogitsProcessor (prompt and output tokens).
    prompts = prompts_of([5, 20], seed=1)
    model = cpu_model(llama_dir)
    want = []
    with torch.no_grad():
        for ids in prompts:
            ids = torch.tensor([ids])
            got = model.generate(ids, max_new_tokens=PENALTY_TOKENS, do_sample=False,
                                 repetition_penalty=2.0)
            want.append(got[0, ids.shape[1]:].tolist())
    assert want != cpu_greedy(model, prompts, PENALTY_TOKENS)
    llm = make_llm(llama_dir)
    try:
        got = spyre_generate(llm, prompts, SamplingParams(
            temperature=0, max_tokens=PENALTY_TOKENS, ignore_eos=True, repetition_penalty=2.0))
    finally:
        close(llm)
    assert got == want


def check_position(entry, token, ref, k):
    """One position's vLLM logprobs (``{token: Logprob}``) against the CPU
    logprobs ``ref [vocab]``: the token's own logprob and rank, and the top k."""
    assert entry[token].logprob == pytest.approx(float(ref[token]), abs=LOGPROB_ATOL)
    assert entry[token].rank == int((ref >= ref[token]).sum())
    top = torch.topk(ref, k)
    ranked = sorted((lp.rank, t, lp.logprob) for t, lp in entry.items() if lp.rank <= k)
    # The sampled token can be among the top k: then it is there once.
    assert [r for r, _, _ in ranked] == list(range(1, k + 1))
    assert [t for _, t, _ in ranked] == top.indices.tolist()
    assert [v for _, _, v in ranked] == pytest.approx(top.values.tolist(), abs=LOGPROB_ATOL)
    assert set(entry) == set(top.indices.tolist()) | {token}


def test_logprobs_are_the_raw_log_softmax_of_the_logits(llama_dir):
    # vLLM's default logprobs_mode="raw_logprobs": the logprobs of the model's
    # logits before the penalties. Requests asking for different counts, one
    # with a repetition penalty and one without logprobs, in one batch.
    prompts = prompts_of([4], seed=2) + prompts_of([5, 20], seed=1)[1:] + prompts_of([17], seed=2)
    counts = [5, 1, None]
    n = PENALTY_TOKENS
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=5),
              SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=1,
                             repetition_penalty=2.0),
              greedy(n)]
    model = cpu_model(llama_dir)
    refs = [cpu_penalized_greedy(model, p, s, n) for p, s in zip(prompts, params)]
    outs = outputs_of_one_engine(llama_dir, prompts, params)
    for out, (tokens, raw), k in zip(outs, refs, counts):
        got = out.outputs[0]
        assert list(got.token_ids) == tokens
        if k is None:
            assert got.logprobs is None
            continue
        assert len(got.logprobs) == n
        total = 0.0
        for entry, token, logits in zip(got.logprobs, tokens, raw):
            ref = torch.log_softmax(logits, dim=-1)
            check_position(entry, token, ref, k)
            total += float(ref[token])
        assert got.cumulative_logprob == pytest.approx(total, abs=n * LOGPROB_ATOL)
    # The penalized request's token logprobs are the raw ones, not the penalized.
    assert refs[1][0] != cpu_greedy(model, prompts[1:2], n)[0]


def test_logprob_token_ids_are_the_chosen_tokens_log_softmax(llama_dir):
    # vLLM's scoring: the logprobs of tokens the request names, after the
    # sampled token's, in one batch with a top-k request (different widths)
    # and one without logprobs.
    prompts = prompts_of([4, 9, 6], seed=3)
    n = 5
    chosen = [3, 17, 250, 17]  # a repeat: vLLM keeps one entry per token id
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True,
                             logprob_token_ids=chosen),
              SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=2),
              greedy(n)]
    model = cpu_model(llama_dir)
    refs = [cpu_penalized_greedy(model, p, s, n) for p, s in zip(prompts, params)]
    outs = outputs_of_one_engine(llama_dir, prompts, params)
    tokens, raw = refs[0]
    got = outs[0].outputs[0]
    assert list(got.token_ids) == tokens
    assert len(got.logprobs) == n
    total = 0.0
    for entry, token, logits in zip(got.logprobs, tokens, raw):
        ref = torch.log_softmax(logits, dim=-1)
        assert set(entry) == set(chosen) | {token}
        for t in set(chosen) | {token}:
            assert entry[t].logprob == pytest.approx(float(ref[t]), abs=LOGPROB_ATOL)
        assert entry[token].rank == int((ref >= ref[token]).sum())
        total += float(ref[token])
    assert got.cumulative_logprob == pytest.approx(total, abs=n * LOGPROB_ATOL)
    tokens, raw = refs[1]
    assert list(outs[1].outputs[0].token_ids) == tokens
    for entry, token, logits in zip(outs[1].outputs[0].logprobs, tokens, raw):
        check_position(entry, token, torch.log_softmax(logits, dim=-1), 2)
    assert outs[2].outputs[0].logprobs is None
    assert list(outs[2].outputs[0].token_ids) == refs[2][0]


def cpu_prompt_logprobs(model, prompt):
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


@pytest.mark.parametrize("chunked", [False, True])
def test_prompt_logprobs_are_the_log_softmax_of_the_prompt_logits(llama_dir, chunked):
    # Prompts of one token, within a block and (chunked: 16 tokens a step)
    # over several prefill chunks; with and without sampled logprobs.
    prompts = prompts_of([1, 6, 40], seed=4)
    params = [SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, prompt_logprobs=3),
              SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, prompt_logprobs=0,
                             logprobs=2),
              SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, prompt_logprobs=3)]
    extra = dict(enable_chunked_prefill=True, max_num_batched_tokens=16) if chunked else {}
    model = cpu_model(llama_dir)
    llm = make_llm(llama_dir, **extra)
    try:
        outs = spyre_outputs(llm, prompts, params)
        stats = llm.collective_rpc("spyre_stats")[0]
    finally:
        close(llm)
    if chunked:
        assert stats["prefill_chunks"] > 0
    for out, prompt, s in zip(outs, prompts, params):
        assert list(out.outputs[0].token_ids) == cpu_greedy(model, [prompt], 3)[0]
        got = out.prompt_logprobs
        assert len(got) == len(prompt) and got[0] is None
        ref = cpu_prompt_logprobs(model, prompt)
        for i in range(1, len(prompt)):
            check_position(got[i], prompt[i], ref[i - 1], s.prompt_logprobs)


def test_unsupported_logprobs_mode_is_refused(llama_dir):
    with pytest.raises(NotImplementedError, match="spyre: logprobs_mode='processed_logprobs'"):
        make_llm(llama_dir, logprobs_mode="processed_logprobs")


def test_tensor_parallel_over_two_devices_gives_the_same_tokens(llama_dir):
    # Two workers (processes), one per emulated device, each with half the
    # heads and half the MLP; the partial sums all-reduced by spyreccl.
    prompts = prompts_of([1, 6, 19], seed=3)
    want = cpu_greedy(cpu_model(llama_dir), prompts)
    llm = make_llm(llama_dir, tensor_parallel_size=2)
    try:
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], greedy(),
                            use_tqdm=False)
        devices = llm.collective_rpc("spyre_kv_cache_devices")
    finally:
        close(llm)
    assert [list(o.outputs[0].token_ids) for o in outs] == want
    assert [d[0] for d in devices] == ["spyre:0", "spyre:1"]
