"""Large host<->device copies go through reused host staging buffers
(copy.cpp StagingPool): values must survive reuse, several copies in flight
at once (non_blocking to pinned memory) must not share a buffer, and views
and layouts other than the default still convert correctly."""

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
