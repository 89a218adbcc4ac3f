"""Compiled mask code as Hugging Face models write it: bitwise ops on bool
masks lower to device programs (the logical ops); integer bit patterns and
kernels the device lowering rejects run as counted host kernels with exact
results, including reductions over such kernels (they failed before)."""

import math

import torch

from compile_util import compile_and_compare
from torch_spyre._inductor import runtime


def host_kernels():
    return runtime.stats()["host_kernels"]


def test_bitwise_of_masks_are_device_programs():
    torch.manual_seed(0)
    a, b = torch.randn(6, 70), torch.randn(6, 70)
    before = host_kernels()
    compile_and_compare(lambda a, b: (a > 0) & (b > 0), a, b, expect_kernels=1)
    compile_and_compare(lambda a, b: ((a > 0) | (b < 0)) ^ ~(a > b), a, b, expect_kernels=1)
    x = a.clone()
    x[1] = -math.inf
    compile_and_compare(lambda x: torch.isneginf(x).all(-1), x)
    compile_and_compare(lambda a, b: torch.any((a > 0) & (b > 0), -1), a, b)
    assert host_kernels() == before


def test_integer_bit_patterns_are_device_programs():
    # int64 bit patterns on the vector unit's bitwise ops, negatives included
    ia, ib = torch.randint(-1000, 1000, (4, 9)), torch.randint(0, 2**40, (4, 9))
    before = host_kernels()
    compile_and_compare(lambda a, b: (a & b) | (a ^ 7) | ~b, ia, ib, tol=dict(atol=0, rtol=0))
    assert host_kernels() == before


def test_a_reduction_over_a_host_kernel():
    # flip is no affine index: the kernel runs on the host, its sum too.
    x = torch.randn(2, 4, 12)
    torch._dynamo.reset()
    got = torch.compile(lambda x: (x.flip(-1) * 2).sum(-1))(x.to("spyre"))
    torch.testing.assert_close(got.cpu(), (x.flip(-1) * 2).sum(-1))
    got = torch.compile(lambda x: x.flip(-1).amax(-1, keepdim=True))(x.to("spyre"))
    assert torch.equal(got.cpu(), x.flip(-1).amax(-1, keepdim=True))
