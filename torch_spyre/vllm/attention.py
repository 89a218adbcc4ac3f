"""Paged attention on spyre over KV cache blocks in device memory.

The KV cache of each attention layer is a pair of device tensors ``(keys,
values)`` of shape ``[num_blocks * block_size, num_kv_heads, head_size]``: row
``block * block_size + offset`` holds one token's keys (values) for all KV
heads. vLLM's scheduler owns the blocks; a request's block table (its block
ids, in token order) says where its tokens live.

Per forward pass the model runner describes the step in a ``StepBatch`` (the
new tokens packed as one sequence, their slots, each request's block table on
the device) and runs the Hugging Face model with ``attn_implementation =
"spyre_paged"``. Transformers then calls ``paged_attention`` per layer with
the queries, keys and values of the new tokens (rotary embedding applied),
which

1. writes the new keys and values into their slots on the device, one
   ``copy_`` into a view of the cache per run of consecutive slots (a run
   ends at a block boundary; a decode step is one run per request). Not
   ``index_copy_`` with the slot mapping: the device's index_copy_ kernel
   rewrites the whole destination, O(cache size) per call;
2. per request, reads the request's own blocks (``index_select`` of its block
   table, a device tensor, over the cache viewed as blocks: the request's
   blocks only, never the whole cache), trims them to its context length and
   attends with ``scaled_dot_product_attention``: causal within the new
   tokens, everything before them visible (prefix-cached or earlier chunks).

No attention mask is built by transformers for this implementation (it is
not in transformers' mask registry); causality comes from the step's own
description. ``SpyreAttentionBackend`` is the name vLLM's attention selector
gets for this platform (its KV cache layout questions); vLLM's own attention
layers are not used by this model runner.
"""

import contextlib
import threading
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

NAME = "spyre_paged"

_state = threading.local()


@dataclass
class RequestSlice:
    """One request of a step: its new tokens are ``query_start : query_start +
    query_len`` of the packed sequence; with them it has ``context_len`` tokens
    in the cache (positions ``0 .. context_len - 1``), in the blocks of
    ``block_table`` (a device tensor, enough blocks for ``context_len``)."""

    query_start: int
    query_len: int
    context_len: int
    block_table: torch.Tensor
    # [query_len, context_len] bool on the device when some context precedes
    # the new tokens and there are several of them; None otherwise.
    mask: torch.Tensor | None = None


@dataclass
class StepBatch:
    # (first slot, first token, length): the step's slot mapping (the slot of
    # each new token) as runs of consecutive slots, the writes of the step.
    write_runs: list[tuple[int, int, int]]
    requests: list[RequestSlice]
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer
    block_size: int
    layer_calls: list[int] = field(default_factory=list)


@contextlib.contextmanager
def step(batch: StepBatch):
    """Makes ``batch`` the step ``paged_attention`` serves in this thread."""
    previous = getattr(_state, "batch", None)
    _state.batch = batch
    try:
        yield batch
    finally:
        _state.batch = previous


def causal_mask(query_len: int, context_len: int, device) -> torch.Tensor | None:
    """The bool mask of ``query_len`` new tokens at the end of ``context_len``
    tokens (True: may attend): None when no mask is needed."""
    if query_len == 1:
        return None
    start = context_len - query_len
    rows = torch.arange(query_len).unsqueeze(1) + start
    cols = torch.arange(context_len).unsqueeze(0)
    return (cols <= rows).to(device)


def slot_runs(slots):
    """``(first slot, first token, length)`` of each run of consecutive slots."""
    runs = []
    for token, slot in enumerate(slots):
        if runs and runs[-1][0] + runs[-1][2] == slot:
            first, start, length = runs[-1]
            runs[-1] = (first, start, length + 1)
        else:
            runs.append((slot, token, 1))
    return runs


def write_kv(key_cache, value_cache, runs, key, value):
    """Writes new tokens' keys and values ``[num_tokens, kv_heads, head]`` into
    their slots of the cache, on the device: one copy per run of slots."""
    for first, start, length in runs:
        key_cache[first:first + length].copy_(key[start:start + length])
        value_cache[first:first + length].copy_(value[start:start + length])


def read_blocks(cache, block_table, block_size, context_len):
    """The first ``context_len`` tokens of one request from its blocks:
    ``[context_len, kv_heads, head]``, an index_select of the request's blocks
    only."""
    rows, heads, dim = cache.shape
    blocks = cache.view(rows // block_size, block_size, heads, dim)
    picked = blocks.index_select(0, block_table)
    return picked.reshape(-1, heads, dim)[:context_len]


def attend(query, keys, values, mask, scaling, causal):
    """``query [1, q_heads, q_len, head]`` against ``keys/values [ctx, kv_heads,
    head]``: ``[1, q_heads, q_len, head]``."""
    q_heads, kv_heads = query.shape[1], keys.shape[1]
    keys = keys.transpose(0, 1).unsqueeze(0)
    values = values.transpose(0, 1).unsqueeze(0)
    if q_heads != kv_heads:
        keys = keys.repeat_interleave(q_heads // kv_heads, dim=1)
        values = values.repeat_interleave(q_heads // kv_heads, dim=1)
    if keys.shape[2] == 1:
        # One token of context (a one-token prompt): the softmax over one key
        # is 1, the output is its value. (The device's matmul cannot yet take
        # the [..., 1, 1] probabilities times [..., 1, head] values that
        # scaled_dot_product_attention makes of it: csrc/ops/matmul.cpp.)
        return values.expand(query.shape[0], q_heads, query.shape[2], values.shape[-1])
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                          is_causal=causal, scale=scaling)


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                    sliding_window=None, softcap=None, **kwargs):
    """The transformers attention function ``spyre_paged`` (see the module's
    docstring). ``query [1, q_heads, tokens, head]``, ``key/value [1, kv_heads,
    tokens, head]``; returns ``([1, tokens, q_heads, head], None)``."""
    batch = getattr(_state, "batch", None)
    if batch is None:
        raise RuntimeError("spyre_paged attention runs inside the vLLM spyre model runner "
                           "only (no step is set); load the model with another "
                           "attn_implementation to run it outside vLLM")
    if softcap is not None:
        raise NotImplementedError("spyre_paged attention: logit soft-capping is not supported "
                                  "yet")
    if query.shape[0] != 1:
        raise ValueError("spyre_paged attention expects the step's tokens packed in one "
                         f"sequence (batch 1), got batch {query.shape[0]}")
    layer = module.layer_idx
    key_cache, value_cache = batch.kv_caches[layer]
    new_keys = key[0].transpose(0, 1)
    new_values = value[0].transpose(0, 1)
    write_kv(key_cache, value_cache, batch.write_runs, new_keys, new_values)

    outputs = []
    for req in batch.requests:
        if sliding_window is not None and req.context_len > sliding_window:
            raise NotImplementedError(
                f"spyre_paged attention: sliding-window attention (window {sliding_window}) "
                f"is not supported yet; this context has {req.context_len} tokens")
        q = query[:, :, req.query_start:req.query_start + req.query_len]
        if req.context_len == req.query_len:
            # Only new tokens: they are their own context.
            keys = new_keys[req.query_start:req.query_start + req.query_len]
            values = new_values[req.query_start:req.query_start + req.query_len]
        else:
            keys = read_blocks(key_cache, req.block_table, batch.block_size, req.context_len)
            values = read_blocks(value_cache, req.block_table, batch.block_size,
                                 req.context_len)
        causal = req.context_len == req.query_len and req.query_len > 1
        outputs.append(attend(q, keys, values, req.mask, scaling, causal))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)
    return out.transpose(1, 2).contiguous(), None


def register():
    """Registers ``spyre_paged`` with transformers' attention functions."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, paged_attention)


def _backend_base():
    from vllm.v1.attention.backend import AttentionBackend

    return AttentionBackend


class SpyreAttentionBackend(_backend_base()):
    """What vLLM's attention selector gets on the spyre platform: the KV cache
    dtypes, block sizes and head sizes the paged attention above serves. The
    spyre model runner calls ``paged_attention`` itself; vLLM's attention layer
    implementation and metadata builder are not used."""

    supported_dtypes = [torch.float32, torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes = ["auto"]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return "SPYRE_PAGED"

    @staticmethod
    def get_impl_cls():
        raise NotImplementedError("spyre: the model runner attends through "
                                  "torch_spyre.vllm.attention.paged_attention; vLLM's "
                                  "attention layers are not used on spyre yet")

    @staticmethod
    def get_builder_cls():
        raise NotImplementedError("spyre: the model runner builds its own step "
                                  "(torch_spyre.vllm.attention.StepBatch)")

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        # Per layer, keys and values: [2, num_blocks * block_size, kv_heads, head].
        return (2, num_blocks * block_size, num_kv_heads, head_size)
