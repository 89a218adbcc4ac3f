"""Views that attention code makes (heads split off the hidden dim,
transposed keys, heads merged back) stay on the device: each result
matches the CPU exactly, and op_stats() shows no copy through the host.
Covers permuted elementwise results (their storage takes their memory
order), whole-stick steps along the stick dim, a stick dim read across
the dims it was split into, re-layouts of transposes (2-D, batched,
permuted, offsets, every float dtype) and copies that alias."""

import pytest
import torch

from ops_testing import FLOATS, no_fallbacks, rand


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    yield


def no_host_copies():
    assert torch.spyre.op_stats()["host_materializations"] == 0
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_attention_heads_round_trip(dtype):
    # Heads of one stick each: head_dim 32 in float32 (MiniLM), 64 in
    # 16-bit dtypes (BERT-base, GPT-2, Llama).
    b, s, h = 3, 16, 6
    d = 128 // (torch.finfo(dtype).bits // 8)
    x = rand((b, s, h * d), dtype)
    heads = x.to("spyre").view(b, s, h, d).transpose(1, 2)
    ref = x.view(b, s, h, d).transpose(1, 2)
    scaled = heads * 0.5  # a permuted result, as on the CPU
    assert scaled.stride() == (ref * 0.5).stride()
    assert torch.equal(scaled.cpu(), ref * 0.5)
    keys_t = scaled.transpose(-1, -2)
    scores = torch.matmul(scaled, keys_t)
    torch.testing.assert_close(scores.cpu().float(),
                               torch.matmul(ref * 0.5, (ref * 0.5).transpose(-1, -2)).float(),
                               rtol=2e-2, atol=2e-2)
    merged = scaled.transpose(1, 2).reshape(b, s, h * d)
    assert torch.equal((merged + 1).cpu(), (ref * 0.5).transpose(1, 2).reshape(b, s, h * d) + 1)
    no_host_copies()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(5, 7), (64, 48), (3, 40, 33), (2, 3, 130, 70)],
                         ids=str)
def test_transpose_made_contiguous(shape, dtype):
    x = rand(shape, dtype)
    got = x.to("spyre").transpose(-1, -2).contiguous()
    assert torch.equal(got.cpu(), x.transpose(-1, -2).contiguous())
    no_host_copies()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_transpose_of_few_rows_loads_columns_on_every_core(dtype):
    # 64 rows are one row block: each core loads its own columns straight
    # from device memory (no exchange), for a whole tensor, a view with a
    # storage offset, and a copy into a transposed out view.
    x = rand((70, 4096 + 30), dtype)
    whole = x[:64, :4096]
    view = x.to("spyre")[3:67, 30:]
    assert torch.equal(whole.to("spyre").t().contiguous().cpu(), whole.t().contiguous())
    assert torch.equal(view.t().contiguous().cpu(), x[3:67, 30:].t().contiguous())
    dst = torch.zeros(64, 4096, dtype=dtype).to("spyre")
    dst.t().copy_(view.t())
    assert torch.equal(dst.cpu(), x[3:67, 30:])
    no_host_copies()


def test_permutes_and_offsets():
    x = rand((2, 3, 4, 40), torch.float32)
    for perm in [(0, 3, 1, 2), (3, 1, 2, 0), (0, 2, 3, 1)]:
        got = x.to("spyre").permute(perm).contiguous()
        assert torch.equal(got.cpu(), x.permute(perm).contiguous()), perm
    big = rand((9, 70), torch.float16)
    view = big.to("spyre")[2:7, 3:40]  # storage offset, a part of each row
    assert torch.equal(view.t().contiguous().cpu(), big[2:7, 3:40].t().contiguous())
    dst = torch.zeros(37, 5, dtype=torch.float16).to("spyre")
    dst.copy_(view.t())
    assert torch.equal(dst.cpu(), big[2:7, 3:40].t())
    no_host_copies()


def test_copies_that_alias():
    a = rand((48, 48), torch.float32)
    x = a.to("spyre")
    # Copying a matrix onto its own transpose: refused, as on the CPU.
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x.copy_(x.t())
    x.copy_(x.t().clone())
    assert torch.equal(x.cpu(), a.t())
    # A permuted out= (PyTorch refuses one overlapping its input).
    y = torch.zeros(48, 48).to("spyre")
    torch.add(x, 1, out=y.t())
    assert torch.equal(y.cpu(), (a.t() + 1).t())
    # In place through a transposed view of itself.
    x.t().mul_(2)
    assert torch.equal(x.cpu(), a.t() * 2)
    no_fallbacks()


@pytest.mark.parametrize("head_dim", [32, 16, 48], ids=str)
def test_heads_of_part_of_a_stick(head_dim):
    # head_dim 32 in float16 (MiniLM in half precision), 16 (tiny test
    # configs), 48 (a stick and a half): each head starts at another position
    # of its first stick; the kernel starts each head's tiles there.
    x = rand((2, 8, 4 * head_dim), torch.float16)
    ref = x.view(2, 8, 4, head_dim).transpose(1, 2)
    heads = x.to("spyre").view(2, 8, 4, head_dim).transpose(1, 2)
    assert torch.equal((heads + 1).cpu(), ref + 1)
    assert torch.equal(heads.contiguous().cpu(), ref.contiguous())
    # Rotary embeddings' halves of each head, too.
    half = head_dim // 2
    got = torch.cat([-heads[..., half:], heads[..., :half]], -1)
    assert torch.equal(got.cpu(), torch.cat([-ref[..., half:], ref[..., :half]], -1))
    no_host_copies()


@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.float32, torch.bfloat16],
                         ids=str)
def test_permute_of_long_rows_is_one_relayout(dtype):
    # [3, 3, 100000].permute(2, 0, 1): rows of 100000 elements do not fit a
    # scratchpad in one pass; the re-layout goes through them in passes in
    # one program. Before, the copy read one stick per element: a program
    # of ~1M instructions, 20 s and over 6 GB of host memory.
    x = torch.randint(-1000, 1000, (3, 3, 100000)).to(dtype)
    on_device = x.to("spyre")
    torch.spyre.synchronize()
    torch.spyre.reset_op_stats()
    got = on_device.permute(2, 0, 1).contiguous()
    assert torch.spyre.op_stats()["launches"] == 1
    assert torch.equal(got.cpu(), x.permute(2, 0, 1).contiguous())
    no_host_copies()


def test_stride_within_a_stick_goes_through_the_host_counted():
    a = rand((6, 70), torch.float32)
    got = a.to("spyre")[:, ::2].contiguous()
    assert torch.equal(got.cpu(), a[:, ::2].contiguous())
    assert torch.spyre.op_stats()["host_materializations"] >= 1
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool], ids=str)
def test_columns_are_read_on_the_device(dtype):
    # ids[:, -1:] and mask[:, -1] in generate(); x[:, :, j] of a 3-d tensor;
    # a column offset into the storage; a column broadcast against a row.
    a = (torch.randn(6, 37) * 50).to(dtype)
    x = a.to("spyre")
    for view, ref in [(x[:, -1:], a[:, -1:]), (x[:, 5], a[:, 5]),
                      (x[1:4, 33], a[1:4, 33])]:
        assert torch.equal(view.clone().cpu(), ref.clone())
    b = (torch.randn(3, 4, 70) * 50).to(dtype)
    assert torch.equal(b.to("spyre")[:, :, 66].contiguous().cpu(), b[:, :, 66].contiguous())
    if dtype != torch.bool:
        got = x[:, 3:4] + x[0]  # [6, 1] + [37] -> [6, 37]
        assert torch.equal(got.cpu(), a[:, 3:4] + a[0])
        assert torch.equal((x[:, 2] * 2).cpu(), a[:, 2] * 2)
    no_host_copies()


def test_column_as_out_keeps_the_rest_of_each_stick():
    # A column written as out=: one element per row, each stick read and
    # written back around it (read-modify-write), on the device.
    a = torch.randn(6, 37)
    x = a.to("spyre")
    torch.add(x[:, 0], 1, out=x[:, 3])
    ref = a.clone()
    torch.add(ref[:, 0], 1, out=ref[:, 3])
    assert torch.equal(x.cpu(), ref)
    no_host_copies()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_decode_step_heads_and_repeated_kv_heads(dtype):
    # A decode step's heads, [batch, heads, 1, head_dim] split off
    # [batch, 1, hidden] with head_dim part of a stick (read as a batch dim
    # over rows of one); and grouped-query attention's repeated key heads,
    # [batch, kv, n_rep, seq, head_dim] reshaped to [batch, heads, seq,
    # head_dim] and transposed.
    head_dim = 64 // (torch.finfo(dtype).bits // 8) // 2  # half a stick
    x = rand((2, 1, 4 * head_dim), dtype)
    ref = x.view(2, 1, 4, head_dim).transpose(1, 2)
    heads = x.to("spyre").view(2, 1, 4, head_dim).transpose(1, 2)
    assert torch.equal((-heads[..., head_dim // 2:]).cpu(), -ref[..., head_dim // 2:])
    kv = rand((2, 2, 7, head_dim), dtype)
    rep = kv[:, :, None].expand(2, 2, 2, 7, head_dim).reshape(2, 4, 7, head_dim)
    rep_dev = kv.to("spyre")[:, :, None].expand(2, 2, 2, 7, head_dim).reshape(2, 4, 7, head_dim)
    assert torch.equal((rep_dev.transpose(-1, -2) * 0.5).cpu(), rep.transpose(-1, -2) * 0.5)
    no_host_copies()


# (storage shape, view of it, as the compiled MoE routers and Mamba mixers of
# aria, axk1 and bamba read them): dims a reshape merged, split again into
# the storage's own dims, then one device copy.
MERGED_VIEWS = {
    "first_two_dims": ((2, 8, 64), lambda t: t.view(16, 64)),
    "flattened": ((2, 4, 8, 64), lambda t: t.view(-1)),
    "batch_dims": ((2, 4, 32, 64), lambda t: t.view(8, 32, 64)),
    "expanded_column": ((16, 2), lambda t: t.view(32, 1).expand(32, 2)),
    "with_an_offset": ((3, 8, 64), lambda t: t[1:].reshape(16, 64)),
}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
@pytest.mark.parametrize("case", MERGED_VIEWS)
def test_merged_dims_are_split_again_on_the_device(case, dtype):
    shape, view = MERGED_VIEWS[case]
    x = rand(shape, dtype) if dtype.is_floating_point else torch.randint(-9, 9, shape)
    got = view(x.to("spyre")) + 1
    assert torch.equal(got.cpu(), view(x) + 1)
    assert torch.spyre.op_stats()["device_materializations"] >= 1
    no_host_copies()


def test_a_write_into_merged_dims_stays_on_the_device():
    # out= a view whose dims merge two of its storage's: written through
    # the split view, the rest of the storage untouched
    base = torch.zeros(3, 8, 64)
    on_device = base.to("spyre")
    src = torch.randn(16, 64)
    torch.add(src.to("spyre"), 1, out=on_device[1:].view(16, 64))
    base[1:].view(16, 64).copy_(src + 1)
    assert torch.equal(on_device.cpu(), base)
    no_host_copies()


# (storage shape, view of it): rows narrower than a stick, each padded to its
# own sticks, read with several of them side by side (MoE routing's
# [tokens, top_k] indices flattened): packed on the device by one program.
PACKED_ROWS = {
    "top2_flattened": ((16, 2), lambda t: t.view(-1)),
    "top6_flattened": ((10, 6), lambda t: t.view(-1)),  # rows straddle sticks
    "two_sticks_a_row": ((16, 40), lambda t: t.view(-1)),
    "into_wider_rows": ((4, 4, 2), lambda t: t.view(4, 8)),
    "rows_of_a_slice": ((20, 2), lambda t: t[3:19].reshape(-1)),
    "merged_then_flat": ((3, 5, 7), lambda t: t.view(15, 7).view(-1)),
    "many_rows_all_cores": ((4096, 2), lambda t: t.view(-1)),
    "with_a_unit_dim": ((16, 2), lambda t: t.view(32, 1)),  # Mixtral's router
    "heads_merged_back": ((2, 8, 4, 16), lambda t: t.view(2, 8, 64)),  # half-stick heads
}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int8, torch.bool], ids=str)
@pytest.mark.parametrize("case", PACKED_ROWS)
def test_narrow_rows_are_packed_on_the_device(case, dtype):
    shape, view = PACKED_ROWS[case]
    if dtype.is_floating_point:
        x = rand(shape, dtype)
    else:
        x = torch.randint(0, 2 if dtype == torch.bool else 100, shape).to(dtype)
    packed = view(x.to("spyre")).clone()  # the view's values, densely
    assert packed.is_contiguous()
    assert torch.equal(packed.cpu(), view(x))
    no_host_copies()  # each went through the host before


def test_packing_leaves_the_source_and_feeds_a_kernel():
    ids = torch.randint(0, 64, (16, 2))
    on_device = ids.to("spyre")
    flat = on_device.view(-1)
    table = torch.randn(64, 32)
    got = table.to("spyre")[flat]  # an index_select by the flattened ids
    assert torch.equal(got.cpu(), table[ids.view(-1)])
    assert torch.equal(on_device.cpu(), ids)
    no_host_copies()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_transpose_of_merged_dims_is_one_relayout(dtype):
    # qwen2_moe's router: a [2, 8, 64] storage read as [16, 64], transposed
    # and made contiguous; the merged rows are split again for the re-layout.
    x = rand((2, 8, 64), dtype)
    got = x.to("spyre").view(16, 64).t().contiguous()
    assert torch.equal(got.cpu(), x.view(16, 64).t().contiguous())
    no_host_copies()


KV_CASES = {
    # [batch, kv heads, sequence, head dim]: one prompt, a batch of two, a
    # head dim that pads its sticks, integers (a cache of token ids).
    "one prompt": ((1, 2, 33, 64), torch.float32),
    "batch of two": ((2, 3, 17, 64), torch.float16),
    "padded sticks": ((1, 4, 9, 50), torch.bfloat16),
    "int64": ((2, 2, 5, 16), torch.int64),
}


@pytest.mark.parametrize("case", KV_CASES, ids=str)
def test_cache_appends_and_crops_are_byte_copies(case):
    # A DynamicCache's cat along the sequence, a crop of it and a narrow
    # written back: copies between boxes of storages, which need no program
    # per sequence length (no launch, no program built), exact as on the CPU.
    shape, dtype = KV_CASES[case]
    full = torch.arange(torch.Size(shape).numel() * 2).reshape(
        shape[0], shape[1], 2 * shape[2], shape[3]).to(dtype)
    new = (-torch.arange(shape[0] * shape[1] * shape[3])).reshape(
        shape[0], shape[1], 1, shape[3]).to(dtype)
    cache, token = full.to("spyre"), new.to("spyre")
    torch.spyre.reset_op_stats()
    cropped = cache[:, :, 3:3 + shape[2]]  # a view at an offset
    grown = torch.cat([cropped, token], dim=-2)
    assert torch.equal(grown.cpu(), torch.cat([full[:, :, 3:3 + shape[2]], new], dim=-2))
    # Into a narrow of the same storage, away from the source.
    cache[:, :, -shape[2]:].copy_(cache[:, :, :shape[2]])
    full[:, :, -shape[2]:].copy_(full[:, :, :shape[2]].clone())
    assert torch.equal(cache.cpu(), full)
    # out=, from the crop as the copy above left it.
    out = torch.zeros(shape[0], shape[1], shape[2] + 1, shape[3], dtype=dtype).to("spyre")
    torch.cat([cropped, token], dim=-2, out=out)
    assert torch.equal(out.cpu(), torch.cat([full[:, :, 3:3 + shape[2]], new], dim=-2))
    stats = torch.spyre.op_stats()
    assert stats["launches"] == 0 and stats["program_misses"] == 0
    # The new token's heads split off a projection's result (a view that
    # splits the hidden dim), into the cache's next slot: byte copies when
    # each head is whole sticks, a program otherwise.
    hidden = torch.arange(shape[0] * shape[1] * shape[3]).reshape(shape[0], 1, -1).to(dtype)
    heads = hidden.view(shape[0], 1, shape[1], shape[3]).transpose(1, 2)
    dev_heads = hidden.to("spyre").view(shape[0], 1, shape[1], shape[3]).transpose(1, 2)
    appended = torch.cat([cropped, dev_heads], dim=-2)
    assert torch.equal(appended.cpu(), torch.cat([full[:, :, 3:3 + shape[2]], heads], dim=-2))
    whole_sticks = shape[3] * full.element_size() % 128 == 0
    assert (torch.spyre.op_stats()["launches"] == 0) == whole_sticks
    no_host_copies()


def test_cuts_inside_sticks_still_copy_exactly():
    # Not boxes of whole sticks (part of each row, a transpose, every other
    # row): a device program, with the same results as the CPU.
    a = rand((6, 100), torch.float32)
    x = a.to("spyre")
    assert torch.equal(torch.cat([x[:, 3:53], x[:, :7]], dim=1).cpu(),
                       torch.cat([a[:, 3:53], a[:, :7]], dim=1))
    assert torch.equal(torch.cat([x.t(), x.t()], dim=0).cpu(), torch.cat([a.t(), a.t()]))
    assert torch.equal(torch.cat([x[::2], x[1::2]]).cpu(), torch.cat([a[::2], a[1::2]]))
    no_host_copies()
