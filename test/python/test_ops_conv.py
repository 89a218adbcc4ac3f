"""Forward convolutions over one or two spatial dims on the device, against
the CPU in strict mode (a CPU fallback raises): the depthwise causal conv1d
of Mamba-style blocks, grouped 1x1 and k-tap convolutions (SqueezeBERT,
ConvBERT), Nystromformer's depthwise (k, 1) conv2d, strides, dilations,
channel multipliers, fp16/bf16/fp32, views; im2col (nn.Unfold)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, assert_matches, offset_view


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


# (input, weight, bias, stride, padding, dilation, groups)
CASES = {
    "mamba_causal_depthwise": ((2, 128, 8), (128, 1, 4), True, 1, 3, 1, 128),
    "depthwise_no_bias": ((2, 67, 13), (67, 1, 4), False, 1, 3, 1, 67),
    "grouped_1x1": ((2, 64, 8), (64, 16, 1), True, 1, 0, 1, 4),
    "pointwise": ((2, 64, 9), (32, 64, 1), False, 1, 0, 1, 1),
    "grouped_2_taps": ((2, 96, 9), (96, 16, 2), True, 1, 0, 1, 6),
    "dense_3_taps": ((2, 4, 70), (6, 4, 3), True, 1, 1, 1, 1),
    "multiplier_stride_dilation": ((2, 6, 11), (12, 1, 3), True, 2, 1, 2, 6),
    "nystromformer_conv2d": ((2, 4, 8, 16), (4, 1, 65, 1), False, 1, (32, 0), 1, 4),
    "conv2d_strided": ((1, 3, 9, 9), (5, 3, 3, 3), True, 2, 1, 1, 1),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CASES)
def test_convolution_against_the_cpu(case, dtype):
    xs, ws, biased, stride, padding, dilation, groups = CASES[case]
    conv = F.conv1d if len(xs) == 3 else F.conv2d
    x, w = torch.randn(xs).to(dtype), torch.randn(ws).to(dtype)
    b = torch.randn(ws[0]).to(dtype) if biased else None
    # The CPU's reference in fp32, rounded once, as the device computes.
    want = conv(x.float(), w.float(), None if b is None else b.float(), stride, padding,
                dilation, groups)
    got = conv(x.to("spyre"), w.to("spyre"), None if b is None else b.to("spyre"),
               stride, padding, dilation, groups)
    assert got.dtype == dtype and got.shape == want.shape
    taps = w[0].numel()
    assert_matches(got, want, dtype, scale=max(1.0, taps ** 0.5))


def test_views_and_modules():
    # Mamba transposes its hidden states into the convolution.
    conv = torch.nn.Conv1d(64, 64, 4, padding=3, groups=64)
    h = torch.randn(2, 8, 64)
    want = conv(h.transpose(1, 2))[..., :8]
    got = copy.deepcopy(conv).to("spyre")(h.to("spyre").transpose(1, 2))[..., :8]
    assert_matches(got, want, torch.float32)
    x = torch.randn(3, 6, 20)
    conv = torch.nn.Conv1d(6, 4, 3, padding=1)
    on_spyre = copy.deepcopy(conv).to("spyre")
    assert_matches(on_spyre(offset_view(x)), conv(x), torch.float32)
    # unbatched input, as F.conv1d accepts it
    assert_matches(on_spyre(x[0].to("spyre")), conv(x[0]), torch.float32)


def test_shapes_the_cpu_refuses_still_raise():
    x, w = torch.randn(1, 4, 3), torch.randn(2, 4, 5)  # kernel longer than input
    with pytest.raises(RuntimeError):
        F.conv1d(x, w)
    with pytest.raises(RuntimeError):
        F.conv1d(x.to("spyre"), w.to("spyre"))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unfold_im2col(dtype):
    # ConvBERT's span-based dynamic convolution: nn.Unfold([k, 1], padding)
    for shape, kernel, dilation, padding, stride in [
            ((2, 64, 8, 1), (9, 1), 1, (4, 0), 1), ((2, 3, 7, 9), 3, 1, 1, 2),
            ((3, 5, 6), 2, 2, 0, 1), ((1, 2, 70, 3), (2, 3), (1, 1), (1, 1), (2, 1))]:
        x = (torch.randn(shape) * 10).to(dtype)
        want = F.unfold(x, kernel, dilation, padding, stride)
        got = F.unfold(x.to("spyre"), kernel, dilation, padding, stride)
        assert torch.equal(got.cpu(), want), shape
    x = torch.randn(4, 3, 9, 9)
    assert torch.equal(F.unfold(offset_view(x), 3).cpu(), F.unfold(x, 3))
