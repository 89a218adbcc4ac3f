"""2-d pooling on the device against the CPU in strict mode (a CPU fallback
raises): avg_pool2d (count_include_pad, ceil_mode, divisor_override) and
max_pool2d with indices (NaN and -inf windows as the CPU's loop leaves
them), 3-d and 4-d inputs, 16-bit dtypes, views, out=; Funnel
Transformer's sequence pooling."""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, assert_matches, offset_view


# strict mode: any CPU fallback raises, and none may have run (conftest.py)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


# (shape, kernel, stride, padding, ceil_mode)
CASES = [
    ((2, 1, 9, 16), (2, 1), (2, 1), 0, True),  # Funnel: stride 2 on the sequence
    ((2, 3, 7, 9), 3, 2, 1, True),
    ((2, 3, 7, 9), 3, 2, 1, False),
    ((3, 8, 70), 2, None, 0, False),
    ((1, 2, 5, 5), (3, 2), (2, 1), (1, 1), True),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(dtype, case, count_include_pad):
    shape, kernel, stride, padding, ceil = CASES[case]
    x = torch.randn(shape).to(dtype)
    want = F.avg_pool2d(x.float(), kernel, stride, padding, ceil, count_include_pad)
    got = F.avg_pool2d(x.to("spyre"), kernel, stride, padding, ceil, count_include_pad)
    assert got.dtype == dtype
    assert_matches(got, want, dtype)
    got = F.avg_pool2d(x.to("spyre"), kernel, stride, padding, ceil, count_include_pad,
                       divisor_override=3)
    assert_matches(got, F.avg_pool2d(x.float(), kernel, stride, padding, ceil,
                                     count_include_pad, divisor_override=3), dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_max_pool2d_with_indices(dtype, case):
    shape, kernel, stride, padding, ceil = CASES[case]
    x = torch.randint(-3, 3, shape).to(dtype)  # ties: the first maximum's index
    flat = x.view(-1)
    flat[0], flat[7], flat[8] = math.nan, -math.inf, math.nan
    want, want_idx = F.max_pool2d(x, kernel, stride, padding, 1, ceil, return_indices=True)
    got, idx = F.max_pool2d(x.to("spyre"), kernel, stride, padding, 1, ceil,
                            return_indices=True)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(idx.cpu(), want_idx)
    assert torch.equal(F.max_pool2d(x.to("spyre"), kernel, stride, padding, 1, ceil).cpu()
                       .isnan(), want.isnan())


def test_all_minus_inf_windows_views_and_out():
    m = torch.tensor([[[[1.0, 1.0], [-math.inf, -math.inf], [2.0, 2.0]]]])
    got = F.max_pool2d(m.to("spyre"), (2, 1), (2, 1), ceil_mode=True, return_indices=True)
    want = F.max_pool2d(m, (2, 1), (2, 1), ceil_mode=True, return_indices=True)
    assert torch.equal(got[1].cpu(), want[1]) and torch.equal(got[0].cpu(), want[0])
    x = torch.randn(6, 9, 16)
    view = offset_view(x)  # a view with a storage offset, every other plane
    assert_matches(F.avg_pool2d(view, 2, ceil_mode=True),
                   F.avg_pool2d(x, 2, ceil_mode=True), torch.float32)
    out = torch.empty(0).to("spyre")
    torch.ops.aten.avg_pool2d.out(x.to("spyre"), [3, 3], [2, 2], [1, 1], out=out)
    assert_matches(out, F.avg_pool2d(x, 3, 2, 1), torch.float32)
