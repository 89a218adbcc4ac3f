"""The spyre_paged attention of the vLLM plugin (torch_spyre/vllm/attention.py)
on its own: a step that mixes every kind of request (a decode group at the
head, a chunk of a prompt after cached tokens, a decode request after it, a
fresh prompt, a one-token prompt), blocks scattered over the cache, against
attention over contiguous keys and values on the CPU; with no CPU fallback.
The attention module needs no vLLM."""

import pytest
import torch
import torch.nn.functional as F

from torch_spyre.vllm import attention

BLOCK, BLOCKS, KV_HEADS, Q_HEADS, HEAD = 4, 24, 2, 4, 16


class Layer:
    layer_idx = 0


def reference(q, k, v, scaling):
    """q [q_heads, n, head] the last n of the context k/v [ctx, kv_heads, head]."""
    n, ctx = q.shape[1], k.shape[0]
    k = k.transpose(0, 1).repeat_interleave(Q_HEADS // KV_HEADS, dim=0)
    v = v.transpose(0, 1).repeat_interleave(Q_HEADS // KV_HEADS, dim=0)
    mask = torch.arange(ctx).unsqueeze(0) <= torch.arange(ctx - n, ctx).unsqueeze(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)


def test_a_mixed_step_equals_contiguous_attention_on_the_cpu():
    gen = torch.Generator().manual_seed(0)
    # (new tokens, context) in packed order: decode, decode (the group), a
    # prompt chunk after 5 cached tokens, a decode after it, a fresh prompt,
    # a one-token prompt.
    shape = [(1, 7), (1, 3), (4, 9), (1, 5), (6, 6), (1, 1)]
    order = torch.randperm(BLOCKS, generator=gen).tolist()
    tables, contexts, at = [], [], 0
    for _, ctx in shape:
        n_blocks = -(-ctx // BLOCK) + 1  # one spare block, as the scheduler may give
        tables.append(order[at:at + n_blocks])
        at += n_blocks
        contexts.append((torch.randn(ctx, KV_HEADS, HEAD, generator=gen),
                         torch.randn(ctx, KV_HEADS, HEAD, generator=gen)))
    key_cache = torch.zeros(BLOCKS * BLOCK, KV_HEADS, HEAD)
    value_cache = torch.zeros_like(key_cache)
    # The cached part of each context, in its blocks.
    for (n, ctx), table, (k, v) in zip(shape, tables, contexts):
        for pos in range(ctx - n):
            slot = table[pos // BLOCK] * BLOCK + pos % BLOCK
            key_cache[slot], value_cache[slot] = k[pos], v[pos]
    total = sum(n for n, _ in shape)
    query = torch.randn(1, Q_HEADS, total, HEAD, generator=gen)
    key = torch.cat([k[ctx - n:] for (n, ctx), (k, _) in zip(shape, contexts)])
    value = torch.cat([v[ctx - n:] for (n, ctx), (_, v) in zip(shape, contexts)])
    key = key.transpose(0, 1).unsqueeze(0)  # [1, kv_heads, tokens, head]
    value = value.transpose(0, 1).unsqueeze(0)

    caches = [(key_cache.to("spyre"), value_cache.to("spyre"))]
    batch, _ = attention.make_step([(n, ctx, table) for (n, ctx), table in zip(shape, tables)],
                                   BLOCK, caches, "spyre")
    assert batch.decode is not None and batch.decode.size == 2
    assert [r.query_len for r in batch.requests] == [4, 1, 6, 1]
    torch.spyre.reset_fallback_stats()
    with torch.spyre.strict(), attention.step(batch):
        got, _ = attention.paged_attention(Layer(), query.to("spyre"), key.to("spyre"),
                                           value.to("spyre"), None, scaling=0.3)
    assert torch.spyre.fallback_stats() == {}

    want, start = [], 0
    for (n, ctx), (k, v) in zip(shape, contexts):
        want.append(reference(query[0, :, start:start + n], k, v, 0.3).transpose(0, 1))
        start += n
    want = torch.cat(want).unsqueeze(0)  # [1, tokens, q_heads, head]
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)

    # The new keys and values are in their slots; nothing else was written.
    keys_after = caches[0][0].cpu()
    for (n, ctx), table, (k, _) in zip(shape, tables, contexts):
        for pos in range(ctx):
            assert torch.equal(keys_after[table[pos // BLOCK] * BLOCK + pos % BLOCK], k[pos])
    used = {t * BLOCK + p for table in tables for t in table for p in range(BLOCK)}
    untouched = [row for row in range(BLOCKS * BLOCK) if row not in used]
    assert torch.count_nonzero(keys_after[untouched]) == 0


def test_outside_the_model_runner_the_attention_says_so():
    with pytest.raises(RuntimeError, match="inside the vLLM spyre model runner"):
        attention.paged_attention(Layer(), torch.zeros(1, 4, 1, 16), torch.zeros(1, 2, 1, 16),
                                  torch.zeros(1, 2, 1, 16), None)
