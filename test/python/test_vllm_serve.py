"""``vllm serve`` on spyre: the OpenAI-compatible server on loopback with the
spyre platform plugin, a tiny seeded Llama (no model hub), and the ``openai``
client. Completions and chat completions, streamed and not, give the tokens
transformers' greedy ``generate`` gives on the CPU; malformed and unsupported
requests get a 4xx with a clear message and the server keeps serving. A
completion with a repetition penalty and logprobs against transformers."""

import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from torch_spyre.vllm.tiny_models import write_tiny_model

# vLLM itself is never imported in this process: importing it patches
# torch._inductor (vllm/env_override.py) for every test that would run after.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM 0.32.0 is not installed (scripts/setup.sh installs it)")
openai = pytest.importorskip("openai")

NEW_TOKENS = 6
STARTUP_SECONDS = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_tiny_model("llama", str(tmp_path_factory.mktemp("served-llama")))
    port = free_port()
    log = open(tmp_path_factory.mktemp("serve-log") / "serve.log", "w+")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's default: engine in a process
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", path,
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "128", "--max-num-seqs", "4",
         "--kv-cache-memory-bytes", str(16 * 2**20), "--served-model-name", "tiny"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                           max_retries=0, timeout=60)
    try:
        deadline = time.time() + STARTUP_SECONDS
        while True:
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                if proc.poll() is not None or time.time() > deadline:
                    log.seek(0)
                    pytest.fail("vllm serve did not start:\n" + log.read()[-4000:])
                time.sleep(1)
        yield client, path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def cpu_greedy(path, ids, new_tokens=NEW_TOKENS):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False)
    return out[0, len(ids):].tolist()


def token_ids(choice):
    """The generated token ids vLLM returns with ``return_token_ids``."""
    return list(choice.model_extra["token_ids"] if choice.model_extra else choice.token_ids)


GREEDY = dict(temperature=0, extra_body={"ignore_eos": True, "return_token_ids": True})


def test_completions_equal_transformers_on_the_cpu(server):
    client, path = server
    out = client.completions.create(model="tiny", prompt="t5 t6 t7 t300", max_tokens=NEW_TOKENS,
                                    **GREEDY)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == 4 and out.usage.completion_tokens == NEW_TOKENS
    assert token_ids(out.choices[0]) == cpu_greedy(path, [5, 6, 7, 300])


def test_streamed_completion_equals_the_whole_one(server):
    client, _ = server
    prompt = "t17 t18 t19"
    whole = client.completions.create(model="tiny", prompt=prompt, max_tokens=NEW_TOKENS,
                                      temperature=0, extra_body={"ignore_eos": True})
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=NEW_TOKENS,
                                            temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    # streamed in pieces (vLLM may put two tokens in one chunk when the
    # client reads slower than the server produces), adding up to the whole
    assert 2 <= len(texts) <= NEW_TOKENS
    assert len("".join(texts).split()) == NEW_TOKENS
    assert "".join(texts) == whole.choices[0].text


def test_chat_completion_equals_transformers_on_the_cpu(server):
    from transformers import AutoTokenizer

    client, path = server
    messages = [{"role": "user", "content": "t40 t41 t42"}]
    out = client.chat.completions.create(model="tiny", messages=messages,
                                         max_tokens=NEW_TOKENS, **GREEDY)
    prompt_ids = AutoTokenizer.from_pretrained(path).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out.usage.prompt_tokens == len(prompt_ids)
    assert token_ids(out.choices[0]) == cpu_greedy(path, list(prompt_ids))

    streamed = client.chat.completions.create(model="tiny", messages=messages,
                                              max_tokens=NEW_TOKENS, temperature=0, stream=True,
                                              extra_body={"ignore_eos": True})
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == out.choices[0].message.content


def test_malformed_and_unsupported_requests_get_a_4xx_and_the_server_keeps_serving(server):
    client, path = server
    with pytest.raises(openai.BadRequestError):  # a prompt must be text or token ids
        client.completions.create(model="tiny", prompt=[{"not": "a prompt"}], max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="max_model_len"):
        client.completions.create(model="tiny", prompt="t5", max_tokens=1000)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="t5", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="out-of-vocab"):  # vocabulary of 512
        client.completions.create(model="tiny", prompt="t5", max_tokens=2,
                                  logit_bias={"9999": 5.0})
    with pytest.raises(openai.BadRequestError):  # a regex that does not compile
        client.completions.create(model="tiny", prompt="t5", max_tokens=2,
                                  extra_body={"structured_outputs": {"regex": "(t5"}})
    out = client.completions.create(model="tiny", prompt="t9 t10", max_tokens=3, **GREEDY)
    assert token_ids(out.choices[0]) == cpu_greedy(path, [9, 10], 3)


def test_logit_bias_and_structured_outputs_through_the_api(server):
    client, path = server
    plain = cpu_greedy(path, [21, 22], 2)
    out = client.completions.create(model="tiny", prompt="t21 t22", max_tokens=2,
                                    logit_bias={str(plain[0] + 1): 100.0}, **GREEDY)
    assert token_ids(out.choices[0]) == [plain[0] + 1] * 2
    out = client.completions.create(model="tiny", prompt="t21 t22", max_tokens=4, temperature=0,
                                    extra_body={"structured_outputs": {"choice": ["t7", "t9"]}})
    assert out.choices[0].text.strip() in ("t7", "t9") and out.choices[0].finish_reason == "stop"


def test_completion_with_repetition_penalty_and_logprobs(server):
    # Tokens as transformers' generate with its RepetitionPenaltyLogitsProcessor;
    # logprobs (vLLM's raw_logprobs) as a CPU log_softmax of the unpenalized logits.
    from transformers import AutoModelForCausalLM

    client, path = server
    new_tokens = 12
    out = client.completions.create(
        model="tiny", prompt="t5 t6 t7 t8 t9", max_tokens=new_tokens, logprobs=2, temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True, "repetition_penalty": 2.0})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False,
                              repetition_penalty=2.0, output_logits=True,
                              return_dict_in_generate=True)
    tokens = want.sequences[0, 5:].tolist()
    assert tokens != cpu_greedy(path, [5, 6, 7, 8, 9], new_tokens)  # the penalty matters
    assert token_ids(out.choices[0]) == tokens
    got = out.choices[0].logprobs
    for token, logprob, top, logits in zip(tokens, got.token_logprobs, got.top_logprobs,
                                           want.logits):
        ref = torch.log_softmax(logits[0].float(), dim=-1)
        assert logprob == pytest.approx(float(ref[token]), abs=1e-5)
        best = torch.topk(ref, 2)
        assert top == pytest.approx({f"t{i}": v for i, v in
                                     zip(best.indices.tolist(), best.values.tolist())}, abs=1e-5)
