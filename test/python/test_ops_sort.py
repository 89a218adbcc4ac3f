"""Orderings on the device against the CPU, in strict mode (a CPU fallback
raises): sort, topk (mixture-of-experts routing), max/min along a dim.

The device's order is stable and total (NaN largest, ties in index order):
stable sorts give the CPU's indices exactly; otherwise PyTorch leaves the
order of ties open, so the values must equal the CPU's and the indices must
be a valid choice (they pick those values, each element at most once)."""

import math

import pytest
import torch

from ops_testing import offset_view

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32]


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


def sample(shape, dtype, ties=True, specials=True):
    """Values with many ties (a small range), and NaN/inf for floats."""
    if dtype.is_floating_point:
        x = torch.randint(-6, 6, shape).to(dtype) / 2 if ties else torch.randn(shape).to(dtype)
        if specials and x.numel() > 8:
            flat = x.view(-1)
            flat[1] = math.nan
            flat[4] = math.inf
            flat[6] = -math.inf
            flat[-2] = math.nan
            flat[3] = -0.0
        return x
    return torch.randint(-5, 5, shape, dtype=dtype)


def assert_valid_choice(x, dim, values, indices, want_values):
    """values are the CPU's, and indices pick them from x, each once."""
    assert torch.equal(values.cpu(), want_values) or torch.allclose(
        values.cpu().float(), want_values.float(), equal_nan=True, rtol=0, atol=0)
    picked = torch.gather(x, dim, indices.cpu())
    assert torch.allclose(picked.float(), want_values.float(), equal_nan=True, rtol=0, atol=0)
    ordered = indices.cpu().movedim(dim, -1).sort(-1).values
    assert (ordered[..., 1:] != ordered[..., :-1]).all() if ordered.size(-1) > 1 else True


def bits_equal(got, want):
    """Exact equality, NaN included (and -0.0 told from 0.0)."""
    got = got.cpu()
    if not want.is_floating_point():
        return torch.equal(got, want)
    same = (got == want) | (got.isnan() & want.isnan())
    return bool(same.all()) and torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", [((130,), 0), ((5, 70), -1), ((5, 70), 0),
                                       ((3, 4, 45), 1)], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_is_the_cpus(dtype, shape, dim, descending):
    x = sample(shape, dtype)
    values, indices = torch.sort(x.to("spyre"), dim=dim, descending=descending, stable=True)
    want_values, want_indices = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert bits_equal(values, want_values)
    assert torch.equal(indices.cpu(), want_indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_unstable_sort_values_and_valid_indices(dtype):
    x = sample((6, 50), dtype)
    values, indices = torch.sort(x.to("spyre"), descending=True)
    assert_valid_choice(x, -1, values, indices, torch.sort(x, descending=True).values)
    assert torch.equal(torch.argsort(x.to("spyre"), stable=True).cpu(),
                       torch.argsort(x, stable=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, largest):
    x = sample((7, 67), dtype)
    for k, dim in [(1, -1), (5, -1), (67, 1), (3, 0), (0, -1)]:
        values, indices = torch.topk(x.to("spyre"), k, dim=dim, largest=largest)
        want = torch.topk(x, k, dim=dim, largest=largest)
        assert_valid_choice(x, dim, values, indices, want.values)
        # The device takes ties in index order: the stable sort's first k.
        stable = torch.sort(x, dim=dim, descending=largest, stable=True)
        assert torch.equal(indices.cpu(), stable.indices.narrow(dim, 0, k))


def test_topk_of_mixture_of_experts_routing():
    # Router probabilities of 16 tokens over 8 experts, top 2 (no ties).
    probs = torch.softmax(torch.randn(16, 8), -1)
    values, indices = torch.topk(probs.to("spyre"), 2, dim=-1)
    want = torch.topk(probs, 2, dim=-1)
    assert torch.equal(values.cpu(), want.values)
    assert torch.equal(indices.cpu(), want.indices)
    expert_ids = want.indices.reshape(-1)
    got_ids, perm = torch.sort(expert_ids.to("spyre"))
    want_ids, want_perm = torch.sort(expert_ids, stable=True)
    assert torch.equal(got_ids.cpu(), want_ids) and torch.equal(perm.cpu(), want_perm)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_long_rows_one_pick_at_a_time(largest):
    # Rows too long to compare pairwise (a vocabulary): NaN, inf and ties.
    x = torch.randn(2, 5000)
    x[0, 7] = math.nan
    x[0, 9] = math.inf
    x[1, 100:200] = 3.0
    x[1, 300:400] = -3.0
    x[1, 17] = math.nan
    values, indices = torch.topk(x.to("spyre"), 6, largest=largest)
    stable = torch.sort(x, descending=largest, stable=True)
    assert bits_equal(values, stable.values[:, :6])
    assert torch.equal(indices.cpu(), stable.indices[:, :6])
    assert bits_equal(values, torch.topk(x, 6, largest=largest).values)
    ints = torch.randint(-3, 3, (2, 5000))
    values, indices = torch.topk(ints.to("spyre"), 4, largest=largest)
    stable = torch.sort(ints, descending=largest, stable=True)
    assert torch.equal(values.cpu(), stable.values[:, :4])
    assert torch.equal(indices.cpu(), stable.indices[:, :4])


def test_views_out_and_aliasing():
    x = sample((6, 70), torch.float32)
    view = offset_view(x)  # storage offset, every other row
    values, indices = torch.sort(view, stable=True)
    want = torch.sort(x, stable=True)
    assert bits_equal(values, want.values) and torch.equal(indices.cpu(), want.indices)
    values, indices = torch.sort(x.to("spyre").t(), dim=0, stable=True)  # transposed
    transposed = torch.sort(x.t(), dim=0, stable=True)
    assert bits_equal(values, transposed.values)
    assert torch.equal(indices.cpu(), transposed.indices)
    out_v = torch.empty(6, 3).to("spyre")
    out_i = torch.empty(6, 3, dtype=torch.long).to("spyre")
    torch.topk(view, 3, out=(out_v, out_i))
    assert_valid_choice(x, -1, out_v, out_i, torch.topk(x, 3).values)
    # values may be self (the CPU sorts in place), as with max's out=
    s = x.clone().to("spyre")
    idx = torch.empty(0, dtype=torch.long).to("spyre")
    torch.sort(s, stable=True, out=(s, idx))
    assert bits_equal(s, want.values) and torch.equal(idx.cpu(), want.indices)
    m = x.clone().to("spyre")
    col = torch.empty(6, dtype=torch.long).to("spyre")
    torch.max(m, 1, out=(m[:, 0], col))
    ref = x.clone()
    torch.max(ref, 1, out=(ref[:, 0], torch.empty(6, dtype=torch.long)))
    assert bits_equal(m, ref)
    with pytest.raises(RuntimeError, match="dtype"):
        torch.sort(x.to("spyre"), out=(torch.empty(0).to("spyre"),
                                        torch.empty(0, dtype=torch.int32).to("spyre")))


def test_empty_and_scalar():
    e = torch.empty(0, 5).to("spyre")
    assert torch.sort(e, dim=0).values.shape == (0, 5)
    assert torch.topk(e, 2, dim=1).indices.shape == (0, 2)
    s = torch.tensor(2.5)
    v, i = torch.sort(s.to("spyre"))
    assert v.item() == 2.5 and i.item() == 0 and v.dim() == 0
    v, i = torch.max(s.to("spyre"), 0)
    assert v.item() == 2.5 and i.item() == 0
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.topk(torch.randn(3, 4).to("spyre"), 5)
    with pytest.raises(IndexError, match="non-zero size"):
        torch.max(e, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", [torch.max, torch.min], ids=["max", "min"])
def test_max_min_along_a_dim(dtype, op):
    # The first index of the extreme, the first NaN when there is one.
    x = sample((5, 3, 70), dtype)
    x.view(-1)[[2, 5, 200, 201, 402]] = x.view(-1)[0].clone()  # ties with the first
    for dim in [0, 1, 2, -1]:
        for keepdim in [False, True]:
            values, indices = op(x.to("spyre"), dim, keepdim)
            want = op(x, dim, keepdim)
            assert bits_equal(values, want.values), (dim, keepdim)
            assert torch.equal(indices.cpu(), want.indices), (dim, keepdim)
    values, indices = op(offset_view(x[:, 0]), 1)
    want = op(x[:, 0], 1)
    assert bits_equal(values, want.values) and torch.equal(indices.cpu(), want.indices)
