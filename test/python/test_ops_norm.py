"""softmax, log_softmax, layer_norm, rms_norm on the device against CPU
fp32: every dim for softmax, N-d rows, offset views, affine and plain norms,
zero-size; each float dtype; no CPU fallback. Tolerances: ops_testing.TOL
(outputs of magnitude up to a few units, computed in fp32, rounded once)."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, assert_matches, no_fallbacks, offset_view, rand


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_log_softmax(dtype, dim):
    a = rand((5, 19, 130), dtype) * 3
    x = a.to("spyre")
    assert_matches(F.softmax(x, dim), F.softmax(a.float(), dim), dtype)
    assert_matches(F.log_softmax(x, dim), F.log_softmax(a.float(), dim), dtype,
                   scale=4)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_of_offset_view_and_empty(dtype):
    a = rand((9, 70), dtype)
    assert_matches(F.softmax(offset_view(a), -1), F.softmax(a.float(), -1), dtype)
    assert F.softmax(torch.zeros(0, 4).to("spyre"), -1).shape == (0, 4)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_safe_softmax_zeroes_fully_masked_rows_in_one_launch(dtype):
    # attention's softmax: a row of nothing but -inf gives zeros; a partly
    # masked row, and one with a NaN among -infs, are plain softmax's
    a = rand((3, 5, 7, 40), dtype) * 3
    a[0, 1, 2] = float("-inf")
    a[1, 2, 3, :20] = float("-inf")
    a[2, 0, 1] = float("-inf")
    a[2, 0, 1, 5] = float("nan")
    x = a.to("spyre")
    torch.spyre.synchronize()
    launches = torch.spyre.device_time_stats()["launches"]
    got = torch.ops.aten._safe_softmax(x, -1)
    torch.spyre.synchronize()
    assert torch.spyre.device_time_stats()["launches"] == launches + 1
    want = torch.ops.aten._safe_softmax(a.float(), -1)
    assert torch.equal(got.cpu().isnan(), want.isnan())
    assert torch.equal(got[0, 1, 2].cpu(), torch.zeros(40, dtype=dtype))
    assert_matches(got.cpu().nan_to_num(), want.nan_to_num(), dtype)
    # the unmasked rows are softmax's bits
    assert torch.equal(got[1:2, :2].cpu(), F.softmax(x[1:2, :2], -1).cpu())
    # an offset view, another dim, one element per row, a dtype argument
    assert_matches(torch.ops.aten._safe_softmax(offset_view(a[0, 0]), -1),
                   torch.ops.aten._safe_softmax(a[0, 0].float(), -1), dtype)
    b = rand((4, 6, 9), dtype)
    b[:, :, 2] = float("-inf")  # fully masked along dim 1
    assert_matches(torch.ops.aten._safe_softmax(b.to("spyre"), 1),
                   torch.ops.aten._safe_softmax(b.float(), 1), dtype)
    col = a[..., :1].contiguous()
    assert torch.equal(torch.ops.aten._safe_softmax(col.to("spyre"), -1).cpu(),
                       torch.ops.aten._safe_softmax(col, -1))
    wide = torch.ops.aten._safe_softmax(x[1], -1, torch.float32)
    assert wide.dtype == torch.float32
    assert_matches(wide, torch.ops.aten._safe_softmax(a[1], -1, torch.float32),
                   torch.float32 if dtype == torch.float32 else dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, affine):
    a = rand((2, 9, 201), dtype) * 2 + 1
    ln = torch.nn.LayerNorm(201, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ln.weight.copy_(torch.randn(201))
            ln.bias.copy_(torch.randn(201))
    want = ln(a.float())
    ln = ln.to(dtype)
    got = ln.to("spyre")(a.to("spyre"))
    assert_matches(got, want, dtype, scale=4)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_native_layer_norm_stats_and_two_dim_shape(dtype):
    a = rand((4, 6, 33), dtype)
    out, mean, rstd = torch.native_layer_norm(a.to("spyre"), [33], None, None, 1e-5)
    r_out, r_mean, r_rstd = torch.native_layer_norm(a.float(), [33], None, None, 1e-5)
    assert mean.shape == r_mean.shape == (4, 6, 1)
    assert_matches(out, r_out, dtype, scale=4)
    assert_matches(mean, r_mean, dtype)
    assert_matches(rstd, r_rstd, dtype, scale=4)
    got = F.layer_norm(a.to("spyre"), [6, 33])
    assert_matches(got, F.layer_norm(a.float(), [6, 33]), dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    a, w = rand((3, 7, 90), dtype), rand((90,), dtype)
    got = F.rms_norm(a.to("spyre"), [90], w.to("spyre"), 1e-6)
    assert_matches(got, F.rms_norm(a.float(), [90], w.float(), 1e-6), dtype,
                   scale=4)
    out, rstd = torch.ops.aten._fused_rms_norm(a.to("spyre"), [90], None, 1e-6)
    r_out, r_rstd = torch.ops.aten._fused_rms_norm(a.float(), [90], None, 1e-6)
    assert_matches(out, r_out, dtype, scale=4)
    assert_matches(rstd, r_rstd, dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(70, 4096), (2, 3, 3000)])
def test_native_layer_norm_stats_of_wide_rows(dtype, shape):
    # rows too wide for blocks of a stick of rows: the statistics are written
    # one per stick and copied into their own layout
    a = rand(shape, dtype)
    got = torch.native_layer_norm(a.to("spyre"), shape[-1:], None, None, 1e-5)
    want = torch.native_layer_norm(a.float(), shape[-1:], None, None, 1e-5)
    for g, w, scale in zip(got, want, (4, 1, 4)):
        assert g.shape == w.shape
        assert_matches(g, w, dtype, scale=scale)
    out, rstd = torch.ops.aten._fused_rms_norm(a.to("spyre"), shape[-1:], None, 1e-6)
    r_out, r_rstd = torch.ops.aten._fused_rms_norm(a.float(), shape[-1:], None, 1e-6)
    assert_matches(out, r_out, dtype, scale=4)
    assert_matches(rstd, r_rstd, dtype)
    no_fallbacks()


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_of_offset_views(dtype):
    a, w, b = rand((9, 70), dtype), rand((70,), dtype), rand((70,), dtype)
    x = offset_view(a)
    assert_matches(F.layer_norm(x, [70], w.to("spyre"), b.to("spyre")),
                   F.layer_norm(a.float(), [70], w.float(), b.float()), dtype, scale=4)
    assert_matches(F.rms_norm(x, [70], w.to("spyre")),
                   F.rms_norm(a.float(), [70], w.float()), dtype, scale=4)
    out, mean, rstd = torch.native_layer_norm(x, [70], None, None, 1e-5)
    want = torch.native_layer_norm(a.float(), [70], None, None, 1e-5)
    for g, r in zip((out, mean, rstd), want):
        assert_matches(g, r, dtype, scale=4)
    no_fallbacks()


def test_layer_norm_with_autograd_keeps_the_statistics():
    # F.layer_norm under autograd goes through native_layer_norm (its saved
    # mean/rstd feed the backward); without autograd one kernel writes none
    a = rand((6, 50), torch.float32)
    x = a.to("spyre").requires_grad_()
    ln = torch.nn.LayerNorm(50).to("spyre")
    ln(x).square().sum().backward()
    xr = a.clone().requires_grad_()
    lr = torch.nn.LayerNorm(50)
    lr(xr).square().sum().backward()
    assert_matches(x.grad, xr.grad, torch.float32, scale=4)
    assert_matches(ln.weight.grad, lr.weight.grad, torch.float32, scale=4)
