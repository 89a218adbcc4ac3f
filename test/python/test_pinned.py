"""Pinned host memory and non-blocking copies."""

import torch


def test_pin_memory_and_inner_pointers():
    x = torch.randn(1000).pin_memory()
    assert x.is_pinned()
    assert x[10:].is_pinned()  # a pointer inside the block
    assert not torch.randn(1000).is_pinned()
    y = torch.empty(50, pin_memory=True)
    assert y.is_pinned()


def test_non_blocking_round_trip_with_pinned_memory():
    x = torch.randn(64, 300).pin_memory()
    y = x.to("spyre", non_blocking=True)
    out = torch.empty(64, 300).pin_memory()
    out.copy_(y, non_blocking=True)
    torch.spyre.synchronize()
    assert torch.equal(out, x)


def test_non_blocking_to_pageable_memory_is_still_correct():
    y = torch.randn(10, 130).to("spyre", non_blocking=True)
    host = y.to("cpu", non_blocking=True)
    torch.spyre.synchronize()
    assert torch.equal(host, y.cpu())


def test_pinned_block_released_with_tensor():
    import torch_spyre
    before = torch_spyre._C.pinned_bytes_in_use()
    x = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    assert torch_spyre._C.pinned_bytes_in_use() >= before + (1 << 20)
    assert torch_spyre._C.is_pinned_ptr(x.data_ptr() + 12345)
    del x
    assert torch_spyre._C.pinned_bytes_in_use() == before


def test_the_host_allocator_of_the_accelerator():
    # PyTorch's host allocator of spyre is the pinned allocator: emptying
    # the accelerator's host cache works (it dereferenced a null allocator and
    # crashed the process before; vLLM calls it when it shuts down).
    x = torch.randn(100).pin_memory()
    torch.accelerator.empty_host_cache()
    assert x.is_pinned()
    assert x.to("spyre").cpu().equal(x)
