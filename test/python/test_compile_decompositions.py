"""The spyre decomposition registry and the eager routing of ops the device
lowering cannot handle, both applied to spyre nodes only."""

import pytest
import torch

from compile_util import compile_and_compare
from torch_spyre._inductor import decompositions

h = torch.float16


def test_registry_holds_the_rewrites():
    assert torch.ops.aten.pow.Tensor_Scalar in decompositions.DECOMPOSITIONS
    assert torch.ops.aten.log2.default in decompositions.DECOMPOSITIONS


def test_pow_cube_is_decomposed_on_spyre():
    before = decompositions.decomposition_counts().get("aten.pow.Tensor_Scalar", 0)
    x = torch.rand(40, 70, dtype=h) + 0.5
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: a.pow(3.0) - a.pow(0.5), x, expect_kernels=1)
    after = decompositions.decomposition_counts().get("aten.pow.Tensor_Scalar", 0)
    assert after - before == 2


def test_log2_log10_sign_tan():
    x = torch.rand(33, 70, dtype=h) + 0.5
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: torch.log2(a) + torch.log10(a) + torch.sign(a - 1.0)
                            + torch.tan(a * 0.5), x, tol=dict(atol=5e-3, rtol=5e-3))


def test_cpu_graphs_are_not_rewritten():
    before = decompositions.decomposition_counts()
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(lambda a: a.pow(3.0))(torch.rand(8, 8))
    assert decompositions.decomposition_counts() == before
    assert out.shape == (8, 8)


def test_unsupported_op_runs_eagerly_and_is_counted():
    before = decompositions.fallback_counts().get("aten.cumsum.default", 0)
    torch._dynamo.reset()
    x = torch.randn(16, 50, dtype=h)
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(lambda a: torch.cumsum(a * 2.0, -1) + 1.0)(x.to("spyre"))
    assert decompositions.fallback_counts()["aten.cumsum.default"] == before + 1
    torch.testing.assert_close(out.cpu().float(), torch.cumsum(x.float() * 2.0, -1) + 1.0,
                               atol=0.15, rtol=1e-2)


def _compiled_on_the_device(fn, *args):
    """fn compiled, in strict mode (eager twins run device kernels, never
    the CPU), against fn on the CPU."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True), torch.spyre.strict():
        got = torch.compile(fn)(*[a.to("spyre") for a in args])
    return got, fn(*args)


def test_eager_twins_of_division_pooling_and_solves():
    # x // k is div.Tensor_mode(x, k) after decomposition, with a Python
    # number where the schema takes a Tensor (its Scalar overload runs).
    ids = torch.randint(-50, 50, (32,))
    for fn in [lambda a: a // 2, lambda a: torch.div(a, 3, rounding_mode="trunc"),
               lambda a: a // a.clamp(min=1)]:
        got, want = _compiled_on_the_device(fn, ids)
        assert torch.equal(got.cpu(), want)
    # Funnel's pooling: windows with ceil-mode padding (masked loads)
    x = torch.randn(2, 1, 9, 16)
    got, want = _compiled_on_the_device(
        lambda a: torch.nn.functional.avg_pool2d(a, (2, 1), (2, 1), ceil_mode=True), x)
    torch.testing.assert_close(got.cpu(), want)
    # the gated delta rule's solve: an extern kernel whose result strides
    # (column-major matrices) compiled code checks
    a, b = torch.randn(2, 16, 16).tril(-1) * 0.1, torch.randn(2, 16, 4)
    got, want = _compiled_on_the_device(
        lambda p, q: torch.linalg.solve_triangular(p, q, upper=False, unitriangular=True) * 2,
        a, b)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)


def _compiled_code(fn, *args):
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        result, code = run_and_get_code(torch.compile(fn), *args)
    return result, "\n".join(code)


def _cache_and_update():
    cache = torch.randn(1, 2, 16, 8)  # [batch, heads, positions, head dim]
    values = torch.randn(1, 2, 2, 8)
    positions = torch.tensor([3, 9])
    return cache, positions, values


def test_an_input_updated_at_indexed_places_is_written_in_place():
    # a static KV cache: index_copy_ at the positions, then attention reads
    # the updated cache; compiled, the cache is written where it is (no
    # clone of it, no copy back) and the read sees the new rows
    def step(cache, positions, values):
        cache.index_copy_(2, positions, values)
        return (cache * 2).sum(-1)

    cache, positions, values = _cache_and_update()
    expected_cache = cache.clone()
    expected = step(expected_cache, positions, values)
    on_spyre = [t.to("spyre") for t in (cache, positions, values)]
    got, code = _compiled_code(step, *on_spyre)
    assert "index_put__default" in code and "index_put_default" not in code
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(on_spyre[0].cpu(), expected_cache)


def _old_value_read_after(cache, positions, values):
    updated = cache.index_copy(2, positions, values)
    before = cache + 1
    cache.copy_(updated)
    return before


def _view_read_after(cache, positions, values):
    head = cache[:, 0]  # a view made before the update, read after it
    total = head.sum()
    updated = cache.index_copy(2, positions, values)
    doubled = head * 2
    cache.copy_(updated)
    return total, doubled


def _values_from_the_input(cache, positions, values):
    updated = cache.index_copy(2, positions, cache[:, :, 4:6])
    cache.copy_(updated)
    return cache.sum(-1)


def _result_returned(cache, positions, values):
    updated = cache.index_copy(2, positions, values)
    cache.copy_(updated)
    return updated


@pytest.mark.parametrize("step", [_old_value_read_after, _view_read_after,
                                  _values_from_the_input, _result_returned])
def test_an_indexed_update_keeps_the_functional_form_where_in_place_would_differ(step):
    # written in place, the old value (read through the input or a view of
    # it) would show the new rows, the values written would overlap what is
    # written, or the returned tensor would be the input itself
    cache, positions, values = _cache_and_update()
    expected_cache = cache.clone()
    expected = step(expected_cache, positions, values)
    on_spyre = [t.to("spyre") for t in (cache, positions, values)]
    got, code = _compiled_code(step, *on_spyre)
    assert "index_put__default" not in code
    on_spyre[0].add_(1)  # a returned tensor must not be the input
    expected_cache.add_(1)
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), got), expected)
    torch.testing.assert_close(on_spyre[0].cpu(), expected_cache)


def test_an_indexed_update_of_an_input_view_is_written_through_the_view():
    # the cache a slice of a larger buffer (an offset view): only its rows
    # change, the rest of the buffer survives
    def step(cache, positions, values):
        cache.index_copy_(2, positions, values)
        return cache.amax(-1)

    cache, positions, values = _cache_and_update()
    whole = torch.randn(3, 2, 16, 8)
    expected_whole = whole.clone()
    expected_whole[1:2].copy_(cache)
    expected = step(expected_whole[1:2], positions, values)
    on_spyre_whole = whole.to("spyre")
    on_spyre_whole[1:2].copy_(cache.to("spyre"))
    got, _ = _compiled_code(step, on_spyre_whole[1:2], positions.to("spyre"),
                            values.to("spyre"))
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(on_spyre_whole.cpu(), expected_whole)


def _repeat_kv(x, rep):
    # transformers' repeat_kv, as grouped-query models call it before sdpa
    b, heads, s, d = x.shape
    return x[:, :, None, :, :].expand(b, heads, rep, s, d).reshape(b, heads * rep, s, d)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_attention_over_repeated_heads_reads_the_unrepeated_ones(dtype):
    # A decode step over a static cache: 8 query heads, 2 key/value heads,
    # a boolean mask of the cache's filled places. The repeated keys and
    # values are never written: one program for the mask, none for repeats.
    q = torch.randn(2, 8, 1, 64, dtype=dtype)
    k = torch.randn(2, 2, 48, 64, dtype=dtype)
    v = torch.randn(2, 2, 48, 64, dtype=dtype)
    mask = torch.arange(48).view(1, 1, 1, 48) < torch.tensor([30, 48]).view(2, 1, 1, 1)

    def attend(q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(
            q, _repeat_kv(k, 4), _repeat_kv(v, 4), attn_mask=mask, scale=0.125)
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(attend, q, k, v, mask, expect_kernels=1,
                            tol=dict(atol=2e-3, rtol=2e-3))


def test_heads_repeated_otherwise_stay_repeated():
    # Heads repeated as a whole block (not repeat_kv's interleave): query
    # head h reads key head h % 2, which grouping would not give.
    q, k, v = torch.randn(1, 4, 3, 32), torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32)

    def blocks(x):
        return x.unsqueeze(1).expand(1, 2, 2, 16, 32).reshape(1, 4, 16, 32)

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, blocks(k), blocks(v))
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(attend, q, k, v, tol=dict(atol=1e-4, rtol=1e-4))
