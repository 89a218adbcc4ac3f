"""Tiny seeded checkpoints for vLLM on spyre, written to a local folder.

No model hub: the config is the sweep's tiny config of the architecture
(``torch_spyre.models.configs.tiny_config``: hidden 64, 2 layers, 4 heads of
16, 2 KV heads, vocabulary 512, 128 positions), the weights are random from a
seed, and the tokenizer is a word-level one over the names ``t4 .. t511``
(``<pad>``, ``<s>``, ``</s>``, ``<unk>`` are 0 .. 3) with a small chat template, so vLLM
can tokenize, detokenize and render chats offline.

``python -m torch_spyre.vllm.tiny_models llama /tmp/tiny-llama`` writes one.
"""

import json
import os
import sys

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} </s> "
                 "{% endfor %}{% if add_generation_prompt %}assistant : {% endif %}")


def write_tokenizer(directory, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, BOS: 1, EOS: 2, UNK: 3}
    vocab.update({f"t{i}": i for i in range(4, vocab_size)})
    # Words outside the vocabulary (chat roles, free text) become <unk>.
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)


def write_tiny_model(arch, directory, seed=0, dtype="float32", **config_overrides):
    """Writes the tiny ``arch`` (a transformers model type: llama, qwen2,
    qwen3, granite, gemma, ...) with weights from ``seed`` to ``directory``;
    ``config_overrides`` set config fields (``sliding_window=8``). Returns
    the directory."""
    import torch
    from transformers import AutoModelForCausalLM

    from torch_spyre.models.configs import tiny_config

    config = tiny_config(arch)
    for name, value in config_overrides.items():
        setattr(config, name, value)
    config.dtype = dtype
    config.tie_word_embeddings = getattr(config, "tie_word_embeddings", False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = config.eos_token_id
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    write_tokenizer(directory, config.vocab_size)
    with open(os.path.join(directory, "tiny_model.json"), "w") as f:
        json.dump({"arch": arch, "seed": seed, "dtype": dtype}, f)
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m torch_spyre.vllm.tiny_models ARCH DIRECTORY")
    print(write_tiny_model(sys.argv[1], sys.argv[2]))
