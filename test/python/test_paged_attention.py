"""torch.ops.spyre.paged_attention: attention over a KV cache in slots (the
paged cache of the vLLM plugin) against scaled_dot_product_attention of the
gathered keys and values on the CPU: dtypes, grouped-query heads, bool and
additive masks, causal, int32 rows, repeated rows, query views, caches that
are views, the gather-first path when the program cannot fit, and errors."""

import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def reference(query, key_cache, value_cache, key_rows, mask=None, causal=False, scale=None):
    b, _, _, d = query.shape
    heads = key_cache.shape[1]

    def gathered(cache):
        rows = cache[key_rows.flatten().long()].float()
        return rows.view(b, -1, heads, cache.shape[-1]).transpose(1, 2)
    return F.scaled_dot_product_attention(query.float(), gathered(key_cache),
                                          gathered(value_cache),
                                          attn_mask=mask if mask is None or mask.dtype == torch.bool
                                          else mask.float(),
                                          is_causal=causal, scale=scale, enable_gqa=True)


def paged(query, key_cache, value_cache, key_rows, mask=None, causal=False, scale=None):
    on = [t.to("spyre") if t is not None else None
          for t in (query, key_cache, value_cache, key_rows, mask)]
    return torch.ops.spyre.paged_attention(*on, causal, scale)


def case(dtype, batch=3, heads=4, kv_heads=2, queries=1, keys=40, dim=64, slots=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, dim, generator=gen).to(dtype)
    key_cache = torch.randn(slots, kv_heads, dim, generator=gen).to(dtype)
    value_cache = torch.randn(slots, kv_heads, dim, generator=gen).to(dtype)
    key_rows = torch.randint(0, slots, (batch, keys), generator=gen)
    return query, key_cache, value_cache, key_rows


def check(got, want, dtype):
    assert got.device.type == "spyre" and got.dtype == dtype
    torch.testing.assert_close(got.cpu().float(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [16, 64, 160])
def test_decode_with_length_mask(dtype, dim):
    # one query per request, each request its own length (padding masked)
    args = case(dtype, dim=dim)
    mask = (torch.arange(40)[None] < torch.tensor([40, 17, 33])[:, None]).view(3, 1, 1, 40)
    check(paged(*args, mask=mask), reference(*args, mask=mask), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_prefill_causal_and_explicit_masks(dtype):
    query, key_cache, value_cache, _ = case(dtype, batch=1, queries=24, keys=24)
    rows = torch.randperm(96)[:24].view(1, 24)  # a prompt in scattered slots
    args = (query, key_cache, value_cache, rows)
    check(paged(*args, causal=True), reference(*args, causal=True), dtype)
    # new tokens after 16 cached ones: a bool mask, then the same as a bias
    query = query[:, :, :8]
    visible = torch.arange(24)[None] <= torch.arange(16, 24)[:, None]
    args = (query, key_cache, value_cache, rows)
    check(paged(*args, mask=visible), reference(*args, mask=visible), dtype)
    bias = torch.zeros(8, 24).masked_fill(~visible, float("-inf")).to(dtype)
    check(paged(*args, mask=bias, scale=0.3), reference(*args, mask=bias, scale=0.3), dtype)


def test_int32_rows_repeated_rows_and_views():
    query, key_cache, value_cache, key_rows = case(torch.float32, queries=3)
    key_rows[:, ::2] = 5  # many keys read the same slot
    # the query a transposed view ([B, L, H, d] as [B, H, L, d]); the rows a
    # column slice of a wider int32 table
    query_view = query.transpose(1, 2).contiguous().transpose(1, 2)
    wide = torch.zeros(3, 50, dtype=torch.int32)
    wide[:, 7:47] = key_rows
    want = reference(query, key_cache, value_cache, key_rows)
    got = torch.ops.spyre.paged_attention(
        query_view.to("spyre"), key_cache.to("spyre"), value_cache.to("spyre"),
        wide.to("spyre")[:, 7:47])
    check(got, want, torch.float32)


def test_caches_that_are_views_of_a_larger_tensor():
    # [slots, 2 * kv_heads, d] split into key and value halves along heads
    query, _, _, key_rows = case(torch.float16)
    both = torch.randn(96, 4, 64).half()
    key_cache, value_cache = both[:, :2], both[:, 2:]
    on = both.to("spyre")
    got = torch.ops.spyre.paged_attention(query.to("spyre"), on[:, :2], on[:, 2:],
                                          key_rows.to("spyre"))
    check(got, reference(query, key_cache, value_cache, key_rows), torch.float16)


def test_head_dims_too_wide_for_the_program_gather_first():
    # keys of head dim 8192 and their transpose do not fit a scratchpad: the
    # rows are gathered first, then attended (same result)
    args = case(torch.float16, batch=1, heads=1, kv_heads=1, keys=8, dim=8192, slots=12)
    check(paged(*args), reference(*args), torch.float16)


def test_one_program_no_cpu_fallback_and_the_cache_is_not_written():
    query, key_cache, value_cache, key_rows = case(torch.float16)
    on = [t.to("spyre") for t in (query, key_cache, value_cache, key_rows)]
    torch.spyre.synchronize()
    torch.spyre.reset_fallback_stats()
    launches = torch.spyre.op_stats()["launches"]
    with torch.spyre.strict():
        torch.ops.spyre.paged_attention(*on)
    # the keys and values are read in the cache: no gather program first
    assert torch.spyre.op_stats()["launches"] - launches == 1
    assert torch.spyre.fallback_stats() == {}
    assert torch.equal(on[1].cpu(), key_cache)


@pytest.mark.parametrize("change,message", [
    (lambda a: (a[0][0], *a[1:]), "expects query"),
    (lambda a: (a[0], a[1][:, :, :8], *a[2:]), "head dim"),
    (lambda a: (a[0][:, :3], *a[1:]), "not a multiple"),
    (lambda a: (a[0], a[1].float(), *a[2:]), "dtype"),
    (lambda a: (*a[:3], a[3].float()), "int64 or int32"),
    (lambda a: (*a[:3], a[3][:2]), "one row per"),
])
def test_bad_input_says_what_to_fix(change, message):
    args = change(case(torch.float16))
    with pytest.raises(RuntimeError, match=message):
        paged(*args)


def test_a_slot_outside_the_cache_is_an_error_not_a_read():
    query, key_cache, value_cache, key_rows = case(torch.float32)
    key_rows[1, 3] = 96
    with pytest.raises(RuntimeError):
        paged(query, key_cache, value_cache, key_rows)
        torch.spyre.synchronize()
