"""Large host<->device copies convert to and from the stick layout while
they copy (Device::copy_to_device_packed / copy_to_host_unpacked); whole
images of views are read through reused host buffers (copy.cpp StagingPool).
Values must survive reuse, several copies in flight at once (non_blocking to
and from pinned memory) must not share a buffer, views and layouts other
than the default still convert correctly, and non_blocking keeps CUDA's
rules: from pageable memory the copy is done when it returns, from pinned
memory the source is read when the stream runs the copy."""

import torch

MIB = 1 << 20


def test_large_round_trips_reuse_staging_correctly():
    for rows, cols, dtype in [(512, 1024, torch.float32), (1024, 1536, torch.float16),
                              (300, 4097, torch.float16), (2048, 640, torch.bfloat16)]:
        a = torch.randn(rows, cols).to(dtype)
        assert a.numel() * a.element_size() >= MIB
        x = a.to("spyre")
        assert torch.equal(x.cpu(), a)
        b = a * 2
        x.copy_(b)  # same storage, staging buffer reused
        assert torch.equal(x.cpu(), b)


def test_copies_in_flight_do_not_share_staging():
    sources = [torch.full((1024, 1024), float(i)) for i in range(6)]
    devices = [s.to("spyre") for s in sources]
    outs = [torch.empty(1024, 1024).pin_memory() for _ in devices]
    for out, d in zip(outs, devices):
        out.copy_(d, non_blocking=True)
    pinned = [s.pin_memory() for s in sources]
    targets = [torch.empty(1024, 1024, device="spyre") for _ in pinned]
    for t, p in zip(targets, pinned):
        t.copy_(p, non_blocking=True)
    torch.spyre.synchronize()
    for i, (out, t) in enumerate(zip(outs, targets)):
        assert torch.equal(out, sources[i])
        assert torch.equal(t.cpu(), sources[i])


def test_large_views_and_transposed_copies():
    a = torch.randn(1024, 768)
    x = a.to("spyre")
    assert torch.equal(x[100:900, 5:700].cpu(), a[100:900, 5:700])
    assert torch.equal(x.t().contiguous().cpu(), a.t().contiguous())
    x[10:20].copy_(a[30:40])
    a[10:20] = a[30:40].clone()
    assert torch.equal(x.cpu(), a)


def test_non_blocking_upload_from_pageable_memory_is_done_on_return():
    src = torch.randn(1024, 1024)
    expected = src.clone()
    dst = torch.empty(1024, 1024, device="spyre")
    dst.copy_(src, non_blocking=True)
    src.zero_()  # allowed at once: the copy is synchronous
    torch.spyre.synchronize()
    assert torch.equal(dst.cpu(), expected)
    view_src = torch.randn(100, 1024)
    dst[200:300].copy_(view_src, non_blocking=True)  # a view of the storage
    expected[200:300] = view_src
    view_src.zero_()
    torch.spyre.synchronize()
    assert torch.equal(dst.cpu(), expected)


def test_non_blocking_upload_from_pinned_memory_outlives_its_tensor():
    # Queue a long upload first so the pinned one is likely still queued
    # when its only tensor goes away: the copy must hold the storage.
    expected = torch.randn(2048, 1024)
    busy = torch.empty(4096, 4096, device="spyre")
    dst = torch.empty(2048, 1024, device="spyre")
    busy.copy_(torch.randn(4096, 4096).pin_memory(), non_blocking=True)
    pinned = expected.pin_memory()
    dst.copy_(pinned, non_blocking=True)
    del pinned
    torch.spyre.synchronize()
    assert torch.equal(dst.cpu(), expected)
