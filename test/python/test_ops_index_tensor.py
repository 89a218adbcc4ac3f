"""Advanced indexing with integer index tensors (aten::index.Tensor) on the
device against the CPU: exact (data movement), every index placement
PyTorch distinguishes (leading, middle, trailing, non-adjacent, broadcast
indices, every dim indexed as in Hugging Face's attention-mask lookup),
negative indices, int32 and CPU indices, views with offsets, out= into a
view, clear errors; boolean and byte masks through nonzero on the device
(the count read back), nonzero and masked_select themselves; rows too
wide for one gather."""

import pytest
import torch

from ops_testing import FLOATS, no_fallbacks, offset_view, rand

DTYPES = FLOATS + [torch.bool, torch.int64, torch.int32]


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


def _table(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        bound = min(1000, torch.iinfo(dtype).max)
        return torch.randint(-bound, bound, shape, dtype=dtype)
    return rand(shape, dtype)


def _idx(*values):
    return torch.tensor(values)


# (table shape, index tuple builder): each a case PyTorch places differently.
CASES = {
    "leading": ((6, 5, 40), lambda: (_idx(4, 0, 0, 5),)),
    "middle": ((3, 7, 40), lambda: (slice(None), _idx([2, 6], [0, 1]))),
    "last dim": ((3, 4, 9), lambda: (slice(None), slice(None), _idx(8, 0, 3))),
    "two adjacent": ((4, 6, 33), lambda: (_idx(3, 1), _idx(5, 0))),
    "non-adjacent": ((4, 3, 6), lambda: (_idx(1, 2, 0), slice(None), _idx(5, 0, 2))),
    "broadcast, every dim": ((3, 11), lambda: (
        torch.arange(3).view(3, 1, 1, 1), torch.arange(11).view(1, 1, 1, 11))),
    "negative": ((5, 8), lambda: (_idx(-1, -5, 2),)),
    "2-D index": ((9, 70), lambda: (torch.randint(0, 9, (4, 3)),)),
    "unit trailing dim": ((6, 4, 1), lambda: (_idx(5, 1), _idx(3, 0))),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_index_matches_cpu(case, dtype):
    shape, build = CASES[case]
    a = _table(shape, dtype)
    index = build()
    on_device = tuple(i.to("spyre") if isinstance(i, torch.Tensor) else i
                      for i in index)
    got = a.to("spyre")[on_device]
    want = a[index]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)
    no_fallbacks()


def test_int32_and_cpu_indices():
    a = rand((7, 130), torch.float32)
    i32 = _idx(6, 1, 1).int()
    assert torch.equal(a.to("spyre")[i32.to("spyre")].cpu(), a[i32])
    # Indices on the CPU for a device tensor, as PyTorch accepts.
    cpu_index = _idx(0, 3)
    got = a.to("spyre")[:, cpu_index]
    assert got.device.type == "spyre"
    assert torch.equal(got.cpu(), a[:, cpu_index])
    no_fallbacks()


def test_views_with_offsets():
    a = rand((6, 50), torch.float16)
    view = offset_view(a)  # storage offset, every other row
    index = _idx(5, 0, 2)
    assert torch.equal(view[index].cpu(), a[index])
    # A transposed (non-contiguous) table indexed along its last dim.
    t = a.to("spyre").t()
    assert torch.equal(t[:, index].cpu(), a.t()[:, index])
    # The index itself a strided view.
    big = _idx(9, 1, 9, 3, 9, 0)
    assert torch.equal(a.to("spyre")[big.to("spyre")[1::2]].cpu(), a[big[1::2]])
    no_fallbacks()


def test_out_into_a_view_and_dtype_check():
    a = rand((5, 40), torch.float32)
    index = _idx(4, 2)
    base = torch.zeros(4, 40).to("spyre")
    out = base[1:3]
    torch.ops.aten.index.Tensor_out(a.to("spyre"), [index.to("spyre")], out=out)
    want = torch.zeros(4, 40)
    want[1:3] = a[index]
    assert torch.equal(base.cpu(), want)
    with pytest.raises(RuntimeError, match="same scalar type"):
        torch.ops.aten.index.Tensor_out(
            a.to("spyre"), [index.to("spyre")],
            out=torch.empty(2, 40, dtype=torch.float16).to("spyre"))
    no_fallbacks()


def test_empty_results():
    a = rand((4, 6), torch.float32)
    empty = torch.zeros(0, dtype=torch.long)
    assert a.to("spyre")[empty.to("spyre")].shape == a[empty].shape
    z = torch.zeros(4, 0)
    assert z.to("spyre")[_idx(1, 2).to("spyre")].shape == (2, 0)
    no_fallbacks()


def test_errors_are_clear():
    a = torch.randn(3, 4).to("spyre")
    with pytest.raises(IndexError, match="could not be broadcast"):
        a[_idx(0, 1).to("spyre"), _idx(0, 1, 2).to("spyre")]
    with pytest.raises(IndexError, match="too many indices"):
        a[_idx(0).to("spyre"), _idx(0).to("spyre"), _idx(0).to("spyre")]
    # Out of range, positive or negative: a device error at launch (as a
    # device-side assert on other accelerators), never a wrong element.
    for bad in [(_idx(0, 3),), (slice(None), _idx(-5))]:
        with pytest.raises(RuntimeError, match="outside the table"):
            a[tuple(i.to("spyre") if isinstance(i, torch.Tensor) else i
                    for i in bad)].cpu()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_boolean_masks(dtype):
    a = _table((4, 5, 67), dtype)
    with torch.spyre.strict():
        for mask in [torch.rand(4, 5, 67) > 0.5, torch.rand(4, 5) > 0.5,
                     torch.tensor([True, False, False, True]), torch.zeros(4, dtype=torch.bool)]:
            got = a.to("spyre")[mask.to("spyre")]
            assert torch.equal(got.cpu(), a[mask])
        rows = torch.tensor([False, True, True, False, True])  # a mask on a middle dim
        assert torch.equal(a.to("spyre")[:, rows.to("spyre")].cpu(), a[:, rows])
        assert torch.equal(a.to("spyre")[torch.tensor([1, 0, 0, 1], dtype=torch.uint8)
                                          .bool().to("spyre")].cpu(),
                           a[torch.tensor([True, False, False, True])])
        # xmod's language adapters: x[mask] = f(x[mask]) on the batch dim
        mask = torch.tensor([True, False, True, True])
        want = a.clone()
        want[mask] = a[mask].flip(0)
        y = a.to("spyre")
        y[mask.to("spyre")] = y[mask.to("spyre")].flip(0)
        assert torch.equal(y.cpu(), want)
        with pytest.raises(IndexError, match="shape of the mask"):
            a.to("spyre")[torch.tensor([True, False]).to("spyre")]
    no_fallbacks()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero(dtype):
    with torch.spyre.strict():
        for shape in [(70,), (3, 4, 45), (2, 1, 3)]:
            a = _table(shape, dtype)
            if dtype != torch.bool:
                a[a.abs() < (a.abs().float().mean().to(dtype) if dtype.is_floating_point
                             else 300)] = 0
            assert torch.equal(torch.nonzero(a.to("spyre")).cpu(), torch.nonzero(a))
            assert all(torch.equal(g.cpu(), w) for g, w in
                       zip(torch.where(a.to("spyre")), torch.where(a)))
        zeros = torch.zeros(3, 5, dtype=dtype)
        assert torch.nonzero(zeros.to("spyre")).shape == (0, 2)
        assert torch.nonzero(torch.empty(0, 4, dtype=dtype).to("spyre")).shape == (0, 2)
        v = offset_view(_table((4, 70), dtype))
        assert torch.equal(torch.nonzero(v).cpu(), torch.nonzero(v.cpu()))
        out = torch.empty(0, dtype=torch.long).to("spyre")
        torch.nonzero(v, out=out)
        assert torch.equal(out.cpu(), torch.nonzero(v.cpu()))
    if dtype.is_floating_point:
        nan = torch.tensor([0.0, float("nan"), -0.0, 1.0], dtype=dtype)
        assert torch.equal(torch.nonzero(nan.to("spyre")).cpu(), torch.nonzero(nan))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_index_copy_matches_cpu(dtype):
    # A static KV cache [batch, heads, max_len, head_dim] written at
    # cache_position: one decode position, then a prompt's run of them.
    cache = _table((2, 3, 16, 40), dtype)
    for positions in [[5], [0, 1, 2, 3], [15, 2, 9]]:
        index = torch.tensor(positions)
        source = _table((2, 3, len(positions), 40), dtype)
        want = cache.index_copy(2, index, source)
        got = cache.to("spyre").index_copy(2, index.to("spyre"), source.to("spyre"))
        assert torch.equal(got.cpu(), want), positions
        inplace = cache.to("spyre")
        inplace.index_copy_(2, index.to("spyre"), source.to("spyre"))
        assert torch.equal(inplace.cpu(), want)
    no_fallbacks()


def test_index_copy_into_a_view_and_out_of_range():
    base = torch.zeros(4, 10, 40)
    view = base.to("spyre")[1:3]  # storage offset
    source = torch.randn(2, 1, 40)
    view.index_copy_(1, torch.tensor([7]).to("spyre"), source.to("spyre"))
    want = base.clone()
    want[1:3].index_copy_(1, torch.tensor([7]), source)
    assert torch.equal(view.cpu(), want[1:3])
    no_fallbacks()
    cache = torch.zeros(2, 10, 40).to("spyre")
    with pytest.raises(RuntimeError, match="outside the table"):
        cache.index_copy_(1, torch.tensor([10]).to("spyre"),
                          torch.ones(2, 1, 40).to("spyre"))
        cache.cpu()


def test_index_copy_is_one_scatter_that_moves_only_the_slices():
    # A KV cache write per layer and token: one program, whatever the cache
    # size; the base around a view is untouched.
    base_cpu = _table((3, 2, 4, 64, 40), torch.float16)
    base = base_cpu.to("spyre")
    cache, cache_cpu = base[1], base_cpu[1]  # storage offset
    source = _table((2, 4, 2, 40), torch.float16)
    index = torch.tensor([63, 17])
    torch.spyre.synchronize()
    before = torch.spyre.op_stats()["launches"]
    torch.spyre.reset_device_time_stats()
    cache.index_copy_(2, index.to("spyre"), source.to("spyre"))
    torch.spyre.synchronize()
    assert torch.spyre.op_stats()["launches"] - before == 1
    # It moves the index and the two slices, not the cache.
    assert torch.spyre.device_time_stats()["launch_dma_bytes"] < cache.nbytes // 4
    cache_cpu.index_copy_(2, index, source)
    assert torch.equal(base.cpu(), base_cpu)
    no_fallbacks()


def test_index_copy_along_the_last_dim_matches_cpu():
    x = _table((3, 5, 40), torch.float32)
    index, source = torch.tensor([39, 0, 7]), _table((3, 5, 3), torch.float32)
    got = x.to("spyre").index_copy(2, index.to("spyre"), source.to("spyre"))
    assert torch.equal(got.cpu(), x.index_copy(2, index, source))
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_index_put_matches_cpu(dtype):
    # x[:, :, idx] = v (a static cache's write once compiled), x[mask] = s,
    # and a values broadcast along the kept dims.
    a = _table((2, 3, 12, 40), dtype)
    idx = torch.tensor([4, 0])
    v = _table((2, 3, 2, 40), dtype)
    x = a.to("spyre")
    x[:, :, idx.to("spyre")] = v.to("spyre")
    want = a.clone()
    want[:, :, idx] = v
    assert torch.equal(x.cpu(), want)
    one = _table((40,), dtype)[0]
    y = a.to("spyre")
    y[:, :, idx.to("spyre")] = one.to("spyre")  # one value, broadcast
    want = a.clone()
    want[:, :, idx] = one
    assert torch.equal(y.cpu(), want)
    mask = a > 0
    z = a.to("spyre")
    z[mask.to("spyre")] = torch.tensor(-1.0, dtype=dtype).to("spyre")
    want = a.clone()
    want[mask] = -1.0
    assert torch.equal(z.cpu(), want)
    no_fallbacks()


def _values_for(a, index, dtype, gen_shape=None):
    """Values of x[index]'s shape (distinct, so a misplaced write shows)."""
    shape = a[index].shape if gen_shape is None else gen_shape
    return _table(shape, dtype)


def _put(a, index, values, accumulate, view=None):
    """index_put_ on the device (into `view` of a's copy when given) and on
    the CPU; both whole bases returned."""
    on_device = tuple(i.to("spyre") if isinstance(i, torch.Tensor) else i for i in index)
    base, want = a.to("spyre"), a.clone()
    target, want_target = (base, want) if view is None else (view(base), view(want))
    if any(isinstance(i, slice) for i in index):
        if accumulate:
            pytest.skip("slices with accumulate are not an index_put_ form")
        target[on_device] = values.to("spyre")
        want_target[index] = values
    else:
        target.index_put_(on_device, values.to("spyre"), accumulate=accumulate)
        want_target.index_put_(index, values, accumulate=accumulate)
    return base.cpu(), want


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32],
                         ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_index_put_of_every_index_placement_matches_cpu(case, dtype):
    # Several index tensors (vLLM's logit_bias: logits[rows, tokens] += bias),
    # non-adjacent, broadcast, negative, int32: written on the device, not
    # the CPU fallback, and accumulated (float16 sums are left to the other
    # tests: duplicates rounded in another order).
    shape, build = CASES[case]
    a = _table(shape, dtype)
    index = build()
    values = _values_for(a, index, dtype)
    got, want = _put(a, index, values, accumulate=False)
    assert torch.equal(got, want)
    if not any(isinstance(i, slice) for i in index) and dtype != torch.float16:
        # Duplicate indices (the "leading" case) are summed in another order.
        got, want = _put(a, index, values, accumulate=True)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    no_fallbacks()


def test_index_put_accumulate_sums_duplicates_and_broadcasts():
    a = _table((5, 40), torch.float32)
    rows = torch.tensor([1, 1, 3])
    got, want = _put(a, (rows,), _table((3, 40), torch.float32), accumulate=True)
    torch.testing.assert_close(got, want)
    # Single elements hit twice, int32 indices, one value broadcast.
    r, c = torch.tensor([0, 0, 4], dtype=torch.int32), torch.tensor([7, 7, 39], dtype=torch.int32)
    got, want = _put(a, (r, c), torch.tensor(2.5), accumulate=True)
    torch.testing.assert_close(got, want)
    # The sampler's bias: rows by tokens of a [rows, vocab] table.
    logits = _table((4, 1000), torch.float32)
    r, c = torch.tensor([0, 2, 2, 3]), torch.tensor([5, 999, 0, 5])
    got, want = _put(logits, (r, c), torch.tensor([1.0, -2.0, 3.0, 4.0]), accumulate=True)
    torch.testing.assert_close(got, want)
    got, want = _put(logits, (r, c), torch.tensor(float("-inf")), accumulate=False)
    assert torch.equal(got, want)
    no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.bfloat16], ids=str)
def test_index_put_of_other_dtypes_matches_cpu(dtype):
    # Elements (bool through counted fallbacks of its parts) and whole rows.
    a = _table((4, 40), dtype)
    for index, values in (((torch.tensor([0, 3]), torch.tensor([1, 39])), _table((2,), dtype)),
                          ((torch.tensor([2, 0], dtype=torch.int32),), _table((2, 40), dtype))):
        for accumulate in (False, True):
            got, want = _put(a, index, values, accumulate)
            assert torch.equal(got, want), (index, accumulate)


def test_index_put_into_views_with_offsets():
    # Into a view with a storage offset and strides, and a transposed one:
    # elements outside the view untouched.
    a = _table((9, 40), torch.float32)
    index = (torch.tensor([2, 0]), torch.tensor([7, 1]))
    for view in (lambda t: t[3:7], lambda t: t[1::2], lambda t: t.t()[5:, 1:]):
        for accumulate in (False, True):
            values = _values_for(view(a), index, torch.float32)
            got, want = _put(a, index, values, accumulate, view=view)
            assert torch.equal(got, want), (view, accumulate)
    # Whole rows of a transposed table (rows of the layout's columns).
    got, want = _put(a, (torch.tensor([4, 0]),), _table((2, 9), torch.float32), True,
                     view=lambda t: t.t())
    assert torch.equal(got, want)
    no_fallbacks()


def test_index_put_errors_match_cpu():
    x = torch.zeros(3, 10).to("spyre")
    r, c = torch.tensor([0, 3]).to("spyre"), torch.tensor([1, 2]).to("spyre")
    with pytest.raises(IndexError, match="out of bounds"):
        x.index_put_((r, c), torch.ones(2).to("spyre"))
    with pytest.raises(IndexError, match="out of bounds"):
        x.index_put_((torch.tensor([0]).to("spyre"), torch.tensor([-11]).to("spyre")),
                     torch.ones(1).to("spyre"), accumulate=True)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.index_put_((torch.tensor([0, 1]).to("spyre"), torch.tensor([1, 2]).to("spyre")),
                     torch.ones(3).to("spyre"))
    assert torch.equal(x.cpu(), torch.zeros(3, 10))  # nothing written


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool], ids=str)
def test_gather_matches_cpu(dtype):
    # Along the stick dim (BERT's buffered token type ids gathered at the
    # position ids), along rows, with an index smaller than self, on a view.
    a = _table((5, 40), dtype)
    for dim, index in [(1, torch.randint(0, 40, (5, 7))), (0, torch.randint(0, 5, (3, 40))),
                       (1, torch.randint(0, 40, (2, 3)))]:
        got = torch.gather(a.to("spyre"), dim, index.to("spyre"))
        assert torch.equal(got.cpu(), torch.gather(a, dim, index)), (dim, index.shape)
    token_types = torch.zeros(1, 128, dtype=torch.long)
    positions = torch.arange(9)[None]
    assert torch.equal(torch.gather(token_types.to("spyre"), 1, positions.to("spyre")).cpu(),
                       torch.gather(token_types, 1, positions))
    v = offset_view(a)
    assert torch.equal(torch.gather(v, 1, torch.tensor([[3, 0]] * 5).to("spyre")).cpu(),
                       torch.gather(a, 1, torch.tensor([[3, 0]] * 5)))
    no_fallbacks()


def test_gather_rejects_negative_and_outside_indices():
    a = torch.randn(3, 40).to("spyre")
    for bad in [-1, 40]:
        with pytest.raises(RuntimeError, match="outside the table"):
            torch.gather(a, 1, torch.full((3, 2), bad).to("spyre")).cpu()
    with pytest.raises(RuntimeError, match="Size does not match"):
        torch.gather(a, 1, torch.zeros(4, 2, dtype=torch.long).to("spyre"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_wide_rows_are_gathered_in_pieces(dtype):
    # generate()'s batched experts: gate_up_proj[expert_ids], rows of
    # 2I * H = 16384 elements (did not fit the scratchpad as one row)
    w = _table((4, 256, 64), dtype)
    ids = torch.tensor([[3, 0], [2, 2], [1, 3]])
    with torch.spyre.strict():
        assert torch.equal(w.to("spyre")[ids.to("spyre")].cpu(), w[ids])
        wide = _table((5, 20000), dtype)  # 20000 = 5 pieces of 4000
        assert torch.equal(wide.to("spyre")[ids.to("spyre")].cpu(), wide[ids])
        with pytest.raises(RuntimeError):
            w.to("spyre")[torch.tensor([4]).to("spyre")].cpu()  # out of range
    no_fallbacks()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_select(dtype):
    a = _table((3, 5, 67), dtype)
    with torch.spyre.strict():
        for mask in [torch.rand(3, 5, 67) > 0.5, torch.rand(5, 67) > 0.5,
                     torch.rand(3, 1, 67) > 0.5, torch.zeros(67, dtype=torch.bool)]:
            got = torch.masked_select(a.to("spyre"), mask.to("spyre"))
            assert torch.equal(got.cpu(), torch.masked_select(a, mask))
        s = _table((), dtype)
        for flag in [True, False]:
            got = torch.masked_select(s.to("spyre"), torch.tensor(flag).to("spyre"))
            assert torch.equal(got.cpu(), torch.masked_select(s, torch.tensor(flag)))
        out = torch.empty(0, dtype=dtype).to("spyre")
        mask = torch.rand(3, 5, 67) > 0.5
        torch.masked_select(offset_view(a), mask.to("spyre"), out=out)
        assert torch.equal(out.cpu(), torch.masked_select(a, mask))
    no_fallbacks()
