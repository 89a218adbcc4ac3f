"""Shared helpers of the per-family op tests (test_ops_*.py): random inputs,
per-dtype tolerances against a CPU fp32 reference, views with storage
offsets and non-contiguous strides, and the zero-fallback assertion."""

import torch

FLOATS = [torch.float16, torch.bfloat16, torch.float32]

# (rtol, atol) of a result rounded once to the dtype against the CPU fp32
# reference rounded to the same dtype: one or two ulps of the dtype.
TOL = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def rand(shape, dtype, gen=None):
    return torch.randn(shape, generator=gen).to(dtype)


def assert_matches(got, ref, dtype, scale=1.0):
    """`got` (spyre) against `ref` (CPU, fp32 math), both rounded to dtype."""
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.cpu().float(), ref.to(dtype).float(),
                               rtol=rtol, atol=atol * scale)


def offset_view(t):
    """A view of `t`'s values whose storage starts 2 rows later and whose
    rows are every other row of a larger tensor (non-contiguous)."""
    big = torch.zeros((2 * t.shape[0] + 3,) + tuple(t.shape[1:]), dtype=t.dtype)
    big[3::2] = t
    return big.to("spyre")[3::2]


def no_fallbacks():
    assert torch.spyre.fallback_stats() == {}


def keep_busy(stream):
    """Queues work on `stream` that keeps it busy a while (four 512^3
    matmuls), so what is queued after it runs late."""
    with torch.spyre.stream(stream):
        busy = torch.randn(512, 512, device="spyre")
        for _ in range(4):
            busy = busy @ busy
