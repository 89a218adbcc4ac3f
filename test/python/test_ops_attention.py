"""F.scaled_dot_product_attention on spyre is one device program
(kernels/attention.h) for inference: the scores never leave the
scratchpads. Checked against the CPU in every floating dtype, with masks,
causality, grouped-query heads, Hugging Face's transposed head views and
offsets, keys streamed in blocks when they do not fit a scratchpad; the output
keeps the query's layout (what compiled graphs were traced with); training,
dropout and a head dim no block holds take the composite paths and still
match the CPU."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, no_fallbacks

@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    yield


TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def qkv(b=2, h=4, hk=4, l=9, s=20, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, l, d, generator=g), torch.randn(b, hk, s, d, generator=g),
            torch.randn(b, hk, s, d, generator=g))


def device_families(fn):
    with torch.autograd.profiler.profile(use_device="spyre", use_kineto=False) as prof:
        out = fn()
        torch.spyre.synchronize()
    return out, {e.key for e in prof.key_averages() if e.key.startswith("spyre::")}


def spyre(t, dtype):
    return t.to(dtype).to("spyre")


def close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu().float(), want.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", ["plain", "float_mask", "padding_mask", "causal", "gqa",
                                  "scale", "long_query", "decode"])
def test_inference_is_one_attention_program(case, dtype):
    q, k, v = qkv(hk=2 if case in ("gqa", "decode") else 4,
                  l={"long_query": 150, "decode": 1}.get(case, 9))
    kwargs = {}
    if case == "float_mask":
        kwargs["attn_mask"] = torch.randn(2, 1, 9, 20)
    elif case == "padding_mask":  # Hugging Face's [B, 1, 1, S] keys to attend
        mask = torch.ones(2, 1, 1, 20, dtype=torch.bool)
        mask[1, ..., 13:] = False
        kwargs["attn_mask"] = mask
    elif case == "causal":
        kwargs["is_causal"] = True
    elif case in ("gqa", "decode"):
        kwargs["enable_gqa"] = True
    elif case == "scale":
        kwargs["scale"] = 0.3
    want = F.scaled_dot_product_attention(
        q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), **kwargs)
    dev_kwargs = {n: (spyre(t, dtype) if t.is_floating_point() else t.to("spyre"))
                  if isinstance(t, torch.Tensor) else t for n, t in kwargs.items()}
    args = (spyre(q, dtype), spyre(k, dtype), spyre(v, dtype))
    torch.spyre.reset_op_stats()
    got, families = device_families(
        lambda: F.scaled_dot_product_attention(*args, **dev_kwargs))
    assert "spyre::attention" in families
    assert not families & {"spyre::bmm", "spyre::matmul", "spyre::safe_softmax"}
    if case in ("plain", "float_mask", "gqa", "scale", "long_query"):
        assert torch.spyre.op_stats()["launches"] == 1
    close(got, want, dtype)
    no_fallbacks()


def test_one_query_row_returns_a_contiguous_logsumexp():
    # A decode step's [B, H, 1] lse keeps its heads in one stick: the program
    # writes rows of whole sticks, copied into it after.
    q, k, v = qkv(hk=4, l=1, s=33, d=64)
    out, lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        q.to("spyre"), k.to("spyre"), v.to("spyre"))[:2]
    assert lse.shape == (2, 4, 1) and lse.is_contiguous()
    want = torch.logsumexp((q @ k.transpose(-2, -1)) / 8, -1)
    torch.testing.assert_close(lse.cpu(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_transposed_heads_keep_their_layout(dtype):
    # BERT/Llama attention: [B, L, H, d] projections viewed as [B, H, L, d];
    # q a slice at an offset of a bigger buffer.
    g = torch.Generator().manual_seed(3)
    big = torch.randn(2, 13, 3 * 4 * 32, generator=g)
    heads = [big[..., i * 128:(i + 1) * 128].reshape(2, 13, 4, 32).transpose(1, 2)
             for i in range(3)]
    want = F.scaled_dot_product_attention(*(t.to(dtype).float() for t in heads))
    dev = spyre(big, dtype)
    dev_heads = [dev[..., i * 128:(i + 1) * 128].view(2, 13, 4, 32).transpose(1, 2)
                 for i in range(3)]
    got, families = device_families(lambda: F.scaled_dot_product_attention(*dev_heads))
    assert "spyre::attention" in families
    assert got.stride() == torch.empty_like(heads[0]).stride()  # the query's layout
    close(got, want, dtype)


def test_row_logsumexp_and_fully_masked_rows():
    q, k, v = qkv(l=5, s=7, d=8)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    out, lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        q.to("spyre"), k.to("spyre"), v.to("spyre"), mask.to("spyre"))[:2]
    scores = (q @ k.transpose(-2, -1)) / 8 ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    want_lse = torch.logsumexp(scores, -1)
    assert torch.equal(lse.cpu()[:, :, 2], want_lse[:, :, 2])  # -inf
    torch.testing.assert_close(lse.cpu(), want_lse, atol=1e-5, rtol=1e-5)
    assert torch.equal(out.cpu()[:, :, 2], torch.zeros(2, 4, 8))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out.cpu()[:, :, [0, 1, 3, 4]], want[:, :, [0, 1, 3, 4]],
                               atol=1e-5, rtol=1e-5)


def test_training_and_dropout_take_pytorchs_math_path():
    q, k, v = (t.to("spyre") for t in qkv())
    assert torch._fused_sdp_choice(q, k, v) == torch._C._SDPBackend.OVERRIDEABLE.value
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.1) == \
        torch._C._SDPBackend.MATH.value
    qg = q.clone().requires_grad_()
    assert torch._fused_sdp_choice(qg, k, v) == torch._C._SDPBackend.MATH.value
    with torch.no_grad():
        assert torch._fused_sdp_choice(qg, k, v) == \
            torch._C._SDPBackend.OVERRIDEABLE.value
    out = F.scaled_dot_product_attention(qg, k, v)
    out.sum().backward()
    qc = qg.detach().cpu().requires_grad_()
    F.scaled_dot_product_attention(qc, k.cpu(), v.cpu()).sum().backward()
    torch.testing.assert_close(qg.grad.cpu(), qc.grad, atol=1e-4, rtol=1e-4)


def test_long_keys_run_online_over_key_blocks():
    # 40000 fp16 keys of head dim 64 (5 MB each for k and v) do not stay in a
    # scratchpad: the program streams them in blocks (online softmax).
    q, k, v = qkv(b=1, h=2, hk=2, l=40, s=40000, d=64)
    mask = torch.ones(1, 1, 40, 40000, dtype=torch.bool)
    mask[..., 3, 1:] = False  # query 3 sees only key 0, in the first block
    want = F.scaled_dot_product_attention(*(t.half().float() for t in (q, k, v)),
                                          attn_mask=mask)
    got, families = device_families(lambda: F.scaled_dot_product_attention(
        *(spyre(t, torch.float16) for t in (q, k, v)), attn_mask=mask.to("spyre")))
    assert "spyre::attention" in families
    close(got, want, torch.float16)
    no_fallbacks()


def test_a_head_dim_no_block_holds_takes_the_composite():
    # 32 query rows and one stick of keys of head dim 8192 overflow a
    # scratchpad: the decomposition computes it on the device.
    q, k, v = qkv(b=1, h=1, l=40, s=64, d=8192)
    want = F.scaled_dot_product_attention(*(t.half().float() for t in (q, k, v)))
    got, families = device_families(
        lambda: F.scaled_dot_product_attention(*(spyre(t, torch.float16) for t in (q, k, v))))
    assert "spyre::attention" not in families
    close(got, want, torch.float16)
    no_fallbacks()
