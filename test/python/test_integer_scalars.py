"""Integer tensors with scalars of either sign or out of range match the CPU.

PyTorch casts a Python scalar to an integer tensor's dtype before computing
(TensorIterator's cast wraps: for uint8, -1 is 255, -3 is 253, 300 is 44),
and clamp converts its bounds with an overflow check (uint8 takes -5 as 251
but refuses 300). The device computes integers in int64, where the scalar
stayed -5: `u8.clamp(-5, 5)` and `torch.remainder(u8, -3)` differed."""

import pytest
import torch

VALUES = {
    torch.uint8: [0, 1, 2, 3, 5, 7, 100, 127, 200, 250, 251, 255],
    torch.int8: [0, 1, -1, 2, -3, 5, -7, 100, -100, 127, -128, 44],
    torch.int16: [0, 1, -1, 300, -300, 32767, -32768, 253, -5, 7, 1000, -1000],
    torch.int32: [0, 1, -1, 300, -300, 2**31 - 1, -2**31, 253, -5, 7, 10**6, -10**6],
    torch.int64: [0, 1, -1, 300, -300, 2**40, -2**40, 253, -5, 7, 10**6, -10**6],
}

SCALARS = [-300, -5, -3, -1, 3, 5, 44, 300]

OPS = {
    "clamp": lambda t, s: t.clamp(min(s, 5), max(s, 5)),
    "clamp_min": lambda t, s: t.clamp(min=s),
    "clamp_max": lambda t, s: t.clamp(max=s),
    "remainder": lambda t, s: torch.remainder(t, s),
    "floor_divide": lambda t, s: torch.floor_divide(t, s),
    "add": lambda t, s: t + s,
    "sub": lambda t, s: t - s,
    "mul": lambda t, s: t * s,
    "eq": lambda t, s: t == s,
    "lt": lambda t, s: t < s,
    "ge": lambda t, s: t >= s,
    "maximum": lambda t, s: torch.clamp_min(t, s),
}


def outcome(fn, t, s):
    try:
        return fn(t, s).cpu()
    except RuntimeError as error:
        return ("raises", str(error).split("\n")[0])


@pytest.mark.parametrize("dtype", list(VALUES))
def test_integer_tensor_with_scalar_of_any_sign_matches_the_cpu(dtype):
    cpu = torch.tensor(VALUES[dtype], dtype=dtype)
    dev = cpu.to("spyre")
    mismatches = []
    for name, fn in OPS.items():
        for s in SCALARS:
            expected, got = outcome(fn, cpu, s), outcome(fn, dev, s)
            same = (expected == got if isinstance(expected, tuple) or isinstance(got, tuple)
                    else expected.dtype == got.dtype and torch.equal(expected, got))
            if not same:
                mismatches.append((name, s, expected, got))
    assert not mismatches, mismatches[:5]


def test_the_issues_examples():
    u8 = torch.tensor([0, 1, 2, 3, 5, 200, 255], dtype=torch.uint8)
    d = u8.to("spyre")
    assert torch.equal(d.clamp(-5, 5).cpu(), u8.clamp(-5, 5))
    assert torch.equal(torch.remainder(d, -3).cpu(), torch.remainder(u8, -3))
    with pytest.raises(RuntimeError, match="without overflow"):
        d.clamp(3, 300)
