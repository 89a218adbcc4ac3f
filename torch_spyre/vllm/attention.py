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

1. writes the new keys and values into their slots on the device: when the
   slots are one run of consecutive slots (a single request's step), one
   ``copy_`` into that slice of the cache each for keys and values; else
   ``index_copy_`` along the slot dim with the step's slot mapping (a device
   tensor), one scatter program each that moves only the new tokens' rows;
2. attends with ``torch.ops.spyre.paged_attention``: one device program
   per attention that reads each key and value row from the cache where its
   token lives (the cache slots of the request's positions, a device tensor
   made with the step's other integers; DMA gathers inside the program, no
   copy of any block). The decode requests at the head of the step (one new
   token each) attend together: their slot lists padded to the longest, one
   batched program per layer under a length mask. Every other request (a
   prompt or a chunk of one) attends on its own: causal within its new
   tokens, everything before them visible (prefix-cached blocks or earlier
   chunks). Gemma 2's soft-capped scores are not in that program: those
   layers read the requests' blocks with ``index_select`` (the step's
   blocks only) and compute the capped attention in device ops.

No attention mask is built by transformers for this implementation (it is
not in transformers' mask registry); causality comes from the step's own
description. This module needs no vLLM (``backend.py`` is what vLLM's
attention selector gets).
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
    # [1, context_len] int64 on the device: the cache slot of each position.
    key_rows: torch.Tensor | None = None
    # [query_len, context_len] bool on the device when some context precedes
    # the new tokens and there are several of them; None otherwise.
    mask: torch.Tensor | None = None
    # Sliding-window masks of this step, by window (made on first use).
    window_masks: dict = field(default_factory=dict)

    def window_mask(self, window: int, device) -> torch.Tensor:
        """The bool mask [query_len, context_len] of a layer that attends
        to its last ``window`` tokens only (True: may attend)."""
        if window not in self.window_masks:
            self.window_masks[window] = visible(
                torch.arange(self.query_len) + self.context_len - self.query_len,
                self.context_len, window).to(device)
        return self.window_masks[window]


@dataclass
class DecodeGroup:
    """The step's decode requests (one new token each, some context before
    it) that come first in the packed sequence: tokens ``0 .. size - 1``,
    attended together in one batched program per layer."""

    size: int
    # [size * max_blocks] block ids on the device: each request's block table
    # padded to the longest with block 0 (its rows masked out).
    block_tables: torch.Tensor
    max_blocks: int
    # [size, 1, 1, max_blocks * block_size] bool on the device: True up to
    # each request's context length.
    mask: torch.Tensor
    # [size, max_blocks * block_size] int64 on the device: the cache slot of
    # each position of each request's padded table.
    key_rows: torch.Tensor | None = None
    block_size: int = 0
    # Each request's context length (host), for sliding-window masks.
    lengths: list = field(default_factory=list)
    window_masks: dict = field(default_factory=dict)

    def window_mask(self, window: int, device) -> torch.Tensor:
        """The group's mask for a layer that attends to its last ``window``
        tokens only: each request's one query is at its last position."""
        if window not in self.window_masks:
            positions = torch.tensor(self.lengths) - 1
            mask = visible(positions, self.max_blocks * self.block_size, window)
            self.window_masks[window] = mask.view(self.size, 1, 1, -1).to(device)
        return self.window_masks[window]


@dataclass
class StepBatch:
    # The step's slot mapping on the device: the cache slot of each new
    # token, in packed order (int64); and its first slot when the slots are
    # consecutive (written as one slice), else None.
    slot_mapping: torch.Tensor
    first_slot: int | None
    requests: list[RequestSlice]  # the requests after the decode group
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer
    block_size: int
    decode: DecodeGroup | None = None
    max_context_len: int = 0
    # The step's new tokens; the model may run on more (a compiled model
    # runs the token counts it was compiled for: the rest are padding).
    num_tokens: int = 0


@contextlib.contextmanager
def step(batch: StepBatch):
    """Makes ``batch`` the step ``paged_attention`` serves in this thread."""
    previous = getattr(_state, "batch", None)
    _state.batch = batch
    try:
        yield batch
    finally:
        _state.batch = previous


def make_step(requests, block_size, kv_caches, device, host_ints=()):
    """The ``StepBatch`` of ``requests``, each ``(query_len, context_len,
    block_ids)`` in packed order (its new tokens are the last ``query_len`` of
    its ``context_len``; ``block_ids`` cover the context). ``host_ints`` (more
    int64 values the caller needs on the device) travel in the same
    host-to-device copy as the block tables; returns ``(batch, their device
    tensor)``."""
    slots, spans, query_start = [], [], 0
    for query_len, context_len, block_ids in requests:
        for pos in range(context_len - query_len, context_len):
            slots.append(block_ids[pos // block_size] * block_size + pos % block_size)
        spans.append((query_start, query_len, context_len))
        query_start += query_len
    tables = [list(block_ids[:-(-context_len // block_size)])
              for _, context_len, block_ids in requests]
    # The decode group: the leading requests with one new token each.
    group = 0
    while group < len(spans) and spans[group][1] == 1:
        group += 1
    max_blocks = max((len(t) for t in tables[:group]), default=0)
    padded = [b for t in tables[:group] for b in t + [0] * (max_blocks - len(t))]
    rest = [b for t in tables[group:] for b in t]
    # The cache slot of every position the step's attention reads: each
    # padded table's blocks, then each other request's first context_len.
    padded_rows = _slots_of(padded, block_size)
    rest_rows = [row for (_, _, context_len), table in zip(spans[group:], tables[group:])
                 for row in _slots_of(table, block_size)[:context_len]]
    host_ints = list(host_ints)
    # The slot mapping first: at the start of the storage, the scatter that
    # writes the new keys and values reads it as it is (no copy).
    flat = torch.tensor(slots + host_ints + padded + rest + padded_rows + rest_rows,
                        dtype=torch.long).to(device)
    slot_mapping = flat[:len(slots)]
    at = len(slots) + len(host_ints)
    rows_at = at + len(padded) + len(rest)
    decode = None
    if group:
        lengths = torch.tensor([span[2] for span in spans[:group]])
        mask = torch.arange(max_blocks * block_size).unsqueeze(0) < lengths.unsqueeze(1)
        decode = DecodeGroup(size=group, block_tables=flat[at:at + len(padded)],
                             max_blocks=max_blocks, mask=mask.view(group, 1, 1, -1).to(device),
                             key_rows=flat[rows_at:rows_at + len(padded_rows)].view(group, -1),
                             lengths=lengths.tolist(), block_size=block_size)
        at += len(padded)
        rows_at += len(padded_rows)
    slices = []
    for (query_start, query_len, context_len), table in zip(spans[group:], tables[group:]):
        mask = causal_mask(query_len, context_len, device) if context_len > query_len else None
        slices.append(RequestSlice(query_start, query_len, context_len,
                                   flat[at:at + len(table)],
                                   flat[rows_at:rows_at + context_len].view(1, -1), mask))
        at += len(table)
        rows_at += context_len
    consecutive = all(b == a + 1 for a, b in zip(slots, slots[1:]))
    batch = StepBatch(slot_mapping=slot_mapping, first_slot=slots[0] if consecutive else None,
                      requests=slices, kv_caches=kv_caches,
                      block_size=block_size, decode=decode,
                      max_context_len=max(span[2] for span in spans), num_tokens=len(slots))
    return batch, flat[len(slots):len(slots) + len(host_ints)]


def _slots_of(block_ids, block_size):
    """The cache slots of the positions that blocks ``block_ids`` hold, in order."""
    return [block * block_size + offset for block in block_ids for offset in range(block_size)]


def visible(positions: torch.Tensor, context_len: int, window: int) -> torch.Tensor:
    """[len(positions), context_len] bool: key j is visible to a query at
    position p when p - window < j <= p (transformers' sliding-window
    causal rule)."""
    cols = torch.arange(context_len).unsqueeze(0)
    rows = positions.unsqueeze(1)
    return (cols <= rows) & (cols > rows - window)


def causal_mask(query_len: int, context_len: int, device) -> torch.Tensor | None:
    """The bool mask of ``query_len`` new tokens at the end of ``context_len``
    tokens (True: may attend): None when no mask is needed."""
    if query_len == 1:
        return None
    start = context_len - query_len
    rows = torch.arange(query_len).unsqueeze(1) + start
    cols = torch.arange(context_len).unsqueeze(0)
    return (cols <= rows).to(device)


def write_kv(key_cache, value_cache, batch, key, value):
    """Writes new tokens' keys and values ``[num_tokens, kv_heads, head]`` into
    their slots of the cache, on the device: one copy each into a slice when
    the slots are consecutive (cheaper than a program), else one scatter
    each."""
    if batch.first_slot is not None:
        end = batch.first_slot + key.shape[0]
        key_cache[batch.first_slot:end].copy_(key)
        value_cache[batch.first_slot:end].copy_(value)
        return
    key_cache.index_copy_(0, batch.slot_mapping, key)
    value_cache.index_copy_(0, batch.slot_mapping, value)


def read_blocks(cache, block_table, block_size, context_len):
    """The first ``context_len`` tokens of one request from its blocks:
    ``[context_len, kv_heads, head]``, an index_select of the request's blocks
    only."""
    rows, heads, dim = cache.shape
    blocks = cache.view(rows // block_size, block_size, heads, dim)
    picked = blocks.index_select(0, block_table)
    return picked.reshape(-1, heads, dim)[:context_len]


def scaled_attention(query, keys, values, mask, scaling, causal=False, softcap=None):
    """scaled_dot_product_attention (keys and values with fewer heads than
    the query read by the heads grouped with them: enable_gqa), or with the
    scores soft-capped first (Gemma 2: ``softcap * tanh(scores / softcap)``),
    in device ops."""
    if softcap is None:
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                              is_causal=causal, scale=scaling,
                                              enable_gqa=True)
    q_heads, kv_heads = query.shape[1], keys.shape[1]
    if q_heads != kv_heads:
        keys = keys.repeat_interleave(q_heads // kv_heads, dim=1)
        values = values.repeat_interleave(q_heads // kv_heads, dim=1)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if causal:
        q_len, k_len = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len).to(query.device)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), values)


def attend(query, keys, values, mask, scaling, causal, softcap=None):
    """``query [1, q_heads, q_len, head]`` against ``keys/values [ctx, kv_heads,
    head]``: ``[1, q_heads, q_len, head]``."""
    q_heads = query.shape[1]
    keys = keys.transpose(0, 1).unsqueeze(0)
    values = values.transpose(0, 1).unsqueeze(0)
    if keys.shape[2] == 1:
        # One token of context (a one-token prompt): the softmax over one key
        # is 1, the output is its value. (The device's matmul cannot yet take
        # the [..., 1, 1] probabilities times [..., 1, head] values that
        # scaled_dot_product_attention makes of it: csrc/ops/matmul.cpp.)
        values = values.repeat_interleave(q_heads // values.shape[1], dim=1)
        return values.expand(query.shape[0], q_heads, query.shape[2], values.shape[-1])
    return scaled_attention(query, keys, values, mask, scaling, causal, softcap)


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
    if query.shape[0] != 1:
        raise ValueError("spyre_paged attention expects the step's tokens packed in one "
                         f"sequence (batch 1), got batch {query.shape[0]}")
    key_cache, value_cache = batch.kv_caches[module.layer_idx]
    return attend_step(batch, key_cache, value_cache, query, key, value, scaling,
                       sliding_window, softcap), None


def attend_step(batch, key_cache, value_cache, query, key, value, scaling=None,
                sliding_window=None, softcap=None):
    """One layer's attention of the step ``batch`` over its KV cache
    ``(key_cache, value_cache)``: writes the new keys and values into their
    slots, then attends as the module's docstring says. ``query [1, q_heads,
    tokens, head]``, ``key/value [1, kv_heads, tokens, head]``; returns ``[1,
    tokens, q_heads, head]`` (contiguous). Serves both the transformers
    attention function above and vLLM's attention layers
    (``backend.SpyreAttentionImpl``)."""
    padding = query.shape[2] - batch.num_tokens
    if padding:  # tokens past the step's: neither stored nor attended
        query = query[:, :, :batch.num_tokens]
        key, value = key[:, :, :batch.num_tokens], value[:, :, :batch.num_tokens]
    new_keys = key[0].transpose(0, 1)
    new_values = value[0].transpose(0, 1)
    write_kv(key_cache, value_cache, batch, new_keys, new_values)

    # A sliding window narrower than some context: masks that also hide
    # what lies before each query's window (per layer: Gemma alternates).
    window = sliding_window
    if window is not None and batch.max_context_len <= window:
        window = None

    # Pieces of the output [1, tokens, q_heads, head], in token order.
    outputs = []
    if batch.decode is not None:
        group = batch.decode
        mask = group.mask if window is None else group.window_mask(window, query.device)
        outputs.append(attend_decode(query, key_cache, value_cache, group, mask,
                                     batch.block_size, scaling, softcap))
    for req in batch.requests:
        q = query[:, :, req.query_start:req.query_start + req.query_len]
        causal = req.context_len == req.query_len and req.query_len > 1
        mask = req.mask
        if window is not None and req.context_len > window:
            mask, causal = req.window_mask(window, query.device), False
        if req.context_len == req.query_len:
            # Only new tokens: they are their own context.
            keys = new_keys[req.query_start:req.query_start + req.query_len]
            values = new_values[req.query_start:req.query_start + req.query_len]
            out = attend(q, keys, values, mask, scaling, causal, softcap)
        elif softcap is None:
            out = torch.ops.spyre.paged_attention(q, key_cache, value_cache, req.key_rows,
                                                  mask, causal, scaling)
        else:
            keys = read_blocks(key_cache, req.block_table, batch.block_size, req.context_len)
            values = read_blocks(value_cache, req.block_table, batch.block_size,
                                 req.context_len)
            out = attend(q, keys, values, mask, scaling, causal, softcap)
        outputs.append(out.transpose(1, 2))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
    if padding:
        out = F.pad(out, (0, 0, 0, 0, 0, padding))
    return out.contiguous()


def attend_decode(query, key_cache, value_cache, group, mask, block_size, scaling,
                  softcap=None):
    """The decode group's attention in one batched program: each request's
    one query against the rows of its blocks (its table padded to the
    longest) under ``mask`` (the group's length mask, or its sliding-window
    form), read in the cache by the program; soft-capped scores over the
    blocks read with one index_select. ``[1, size, q_heads, head]``."""
    rows, kv_heads, dim = key_cache.shape
    q_heads = query.shape[1]
    length = group.max_blocks * block_size
    q = query[0, :, :group.size].transpose(0, 1).unsqueeze(2)  # [size, q_heads, 1, head]
    if softcap is None:
        out = torch.ops.spyre.paged_attention(q, key_cache, value_cache, group.key_rows,
                                              mask, False, scaling)
        return out.transpose(1, 2).reshape(1, group.size, q_heads, dim)

    def gather(cache):
        blocks = cache.view(rows // block_size, block_size, kv_heads, dim)
        picked = blocks.index_select(0, group.block_tables)
        return picked.view(group.size, length, kv_heads, dim).transpose(1, 2)

    out = scaled_attention(q, gather(key_cache), gather(value_cache), mask, scaling,
                           softcap=softcap)
    return out.transpose(1, 2).reshape(1, group.size, q_heads, dim)


def register():
    """Registers ``spyre_paged`` with transformers' attention functions."""
    from transformers import AttentionInterface

    # Outside any compiled graph: what it does depends on the step (which
    # requests, how many tokens each), not on tensor shapes a graph could
    # guard on. The model's other layers compile around it.
    AttentionInterface.register(NAME, torch.compiler.disable(paged_attention))
