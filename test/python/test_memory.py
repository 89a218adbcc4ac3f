"""Allocator statistics, torch.accelerator memory API, OOM."""

import math

import pytest
import torch


def padded_bytes(sizes, dtype):
    e = 128 // torch.empty((), dtype=dtype).element_size()
    kept = [d for d in sizes if d != 1]
    if not kept:
        dev = [1, e]
    elif len(kept) == 1:
        dev = [math.ceil(kept[0] / e), e]
    else:
        dev = kept[1:-1] + [math.ceil(kept[-1] / e), kept[0], e]
    return math.prod(dev) * (128 // e)


@pytest.mark.parametrize("sizes,dtype", [((3, 130), torch.float16), ((1000,), torch.float32),
                                         ((2, 3, 5, 7), torch.int64), ((), torch.bool),
                                         ((64, 64), torch.bfloat16)])
def test_allocated_changes_by_the_padded_layout_bytes(sizes, dtype):
    torch.spyre.synchronize()
    before = torch.spyre.memory_allocated()
    t = torch.empty(sizes, dtype=dtype, device="spyre")
    grown = torch.spyre.memory_allocated() - before
    assert grown == padded_bytes(sizes, dtype) == t.device_tensor_layout().device_bytes
    assert torch.accelerator.memory_allocated(0) - before == grown
    del t
    assert torch.spyre.memory_allocated() == before


def test_views_allocate_nothing():
    t = torch.empty(16, 256, device="spyre")
    before = torch.spyre.memory_allocated()
    views = [t[3:], t.t(), t.view(-1), t[:, 5:9]]
    assert torch.spyre.memory_allocated() == before
    del views


def test_peak_reserved_and_reset():
    torch.spyre.reset_peak_memory_stats()
    base = torch.spyre.memory_allocated()
    t = torch.empty(1 << 20, device="spyre")  # 4 MiB
    peak = torch.spyre.max_memory_allocated()
    assert peak >= base + (4 << 20)
    assert torch.spyre.memory_reserved() >= torch.spyre.memory_allocated()
    del t
    assert torch.spyre.max_memory_allocated() == peak
    torch.spyre.reset_peak_memory_stats()
    assert torch.spyre.max_memory_allocated() == torch.spyre.memory_allocated()


def test_memory_stats_counts_allocations():
    torch.spyre.reset_accumulated_memory_stats()
    tensors = [torch.empty(100, device="spyre") for _ in range(5)]
    stats = torch.spyre.memory_stats()
    assert stats["allocation.all.allocated"] == 5
    assert stats["allocated_bytes.all.allocated"] == 5 * 512
    del tensors
    stats = torch.spyre.memory_stats()
    assert stats["allocation.all.freed"] == 5
    assert stats["allocated_bytes.all.freed"] == 5 * 512


def test_empty_cache_and_mem_get_info():
    t = torch.empty(4 << 20, dtype=torch.uint8, device="spyre")
    free, total = torch.spyre.mem_get_info()
    assert 0 < free <= total == torch.spyre.get_device_properties().total_memory
    del t
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() >= torch.spyre.memory_allocated()
    assert torch.accelerator.get_memory_info(0)[1] == total


def test_out_of_memory_raises_and_allocator_stays_usable(fresh_python):
    result = fresh_python("""
        import torch
        total = torch.spyre.get_device_properties().total_memory
        try:
            torch.empty(total // 2 + total, dtype=torch.uint8, device="spyre")
        except torch.OutOfMemoryError as error:
            message = str(error)
        else:
            raise SystemExit("no OutOfMemoryError")
        assert torch.spyre.OutOfMemoryError is torch.OutOfMemoryError
        keep = torch.ones(1000, device="spyre")
        assert keep.cpu().sum().item() == 1000
        assert torch.spyre.memory_stats()["num_ooms"] >= 1
        print("OOM:", message.splitlines()[0])
    """, SPYRE_SIM_MEMORY_GB="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OOM:" in result.stdout


def test_allocation_waits_for_queued_work_before_out_of_memory(fresh_python):
    # Queued launches keep the storages they use alive until they ran. Memory
    # the program let go of but queued work still held made a refill of a
    # full device fail (8 of 60 tensors); the allocator now waits for the
    # device's work before it raises, and the refill fits whole.
    result = fresh_python("""
        import torch
        n = (16 << 20) // 4  # 16 MiB of float32
        xs = [torch.empty(n, device="spyre") for _ in range(60)]
        for x in xs:
            x.fill_(1.0)
            for _ in range(4):
                x.mul_(1.5)
        del xs, x
        ys = [torch.empty(n, device="spyre") for _ in range(60)]
        ys[-1].fill_(2.0)
        assert torch.equal(ys[-1][:4].cpu(), torch.full((4,), 2.0))
        print("refilled", len(ys))
    """, SPYRE_SIM_MEMORY_GB="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refilled 60" in result.stdout


def test_a_host_loop_that_outruns_the_device_runs_in_bounded_memory(fresh_python):
    # Each queued launch keeps its tensors alive until it ran; with no bound
    # on the queue this loop reached out of memory on a 4 GiB device (and
    # 63 GiB on the default one). The stream queues apply backpressure.
    result = fresh_python("""
        import torch
        x = torch.randn(128, 256, device="spyre")
        for _ in range(20000):
            (x * 1.01).relu().sum(0)
        torch.spyre.synchronize()
        print("peak MiB", torch.spyre.max_memory_allocated() / 2**20)
    """, SPYRE_SIM_MEMORY_GB="4")
    assert result.returncode == 0, result.stderr[-3000:]
    peak = float(result.stdout.split()[-1])
    assert peak < 512, peak
