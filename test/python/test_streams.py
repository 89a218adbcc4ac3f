"""Streams and events: c10 streams backed by runtime streams."""

import os

import pytest
import torch

import torch_spyre
from ops_testing import keep_busy


def test_default_and_current_stream():
    s = torch.spyre.current_stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("spyre:0")
    assert s.stream_id == 0 == torch.spyre.default_stream().stream_id
    assert torch.accelerator.current_stream().stream_id == 0


def test_new_streams_are_distinct_and_switchable():
    a, b = torch.spyre.Stream(), torch.spyre.Stream()
    assert a.stream_id != b.stream_id and a.stream_id != 0
    with torch.spyre.stream(a):
        assert torch.spyre.current_stream().stream_id == a.stream_id
        with b:
            assert torch.spyre.current_stream().stream_id == b.stream_id
        assert torch.spyre.current_stream().stream_id == a.stream_id
    assert torch.spyre.current_stream().stream_id == 0
    generic = torch.Stream(device="spyre")
    assert generic.device.type == "spyre"


def test_work_on_a_side_stream_is_ordered_by_events():
    side = torch.spyre.Stream()
    x = torch.randn(256, 512)
    with torch.spyre.stream(side):
        y = x.to("spyre", non_blocking=True)
        y.mul_(3)
        done = torch.spyre.Event()
        done.record(side)
    torch.spyre.current_stream().wait_event(done)
    z = y + 1
    assert torch.allclose(z.cpu(), x * 3 + 1)
    assert done.query()


def test_wait_stream_and_synchronize():
    side = torch.spyre.Stream()
    main = torch.spyre.current_stream()
    with torch.spyre.stream(side):
        a = torch.ones(128, 128, device="spyre")
        a.add_(1)
    main.wait_stream(side)
    assert a.sum().item() == 2 * 128 * 128
    side.synchronize()
    assert side.query()


def test_event_elapsed_time():
    start = torch.spyre.Event(enable_timing=True)
    end = torch.spyre.Event(enable_timing=True)
    start.record()
    x = torch.randn(512, 512).to("spyre")
    x.cpu()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    assert start.device_elapsed_time(end) >= 0
    generic_start = torch.Event(device="spyre", enable_timing=True)
    generic_end = torch.Event(device="spyre", enable_timing=True)
    generic_start.record()
    generic_end.record()
    generic_end.synchronize()
    assert generic_start.elapsed_time(generic_end) >= 0


def test_elapsed_time_needs_timing():
    start, end = torch.spyre.Event(), torch.spyre.Event()
    start.record()
    end.record()
    with pytest.raises((ValueError, RuntimeError)):
        start.elapsed_time(end)


def test_thousands_of_streams_reuse_a_bounded_pool():
    # As torch.cuda.Stream(): streams come from a fixed pool per device and
    # priority, so creating many costs no more worker threads than it has.
    def threads():
        return len(os.listdir("/proc/self/task"))

    torch.spyre.Stream(), torch.spyre.Stream(priority=-1)
    before = threads()
    ids = set()
    for i in range(2000):
        stream = torch.spyre.Stream(priority=-1 if i % 2 else 0)
        ids.add(stream.stream_id)
        with torch.spyre.stream(stream):
            y = torch.full((4,), float(i), device="spyre") + 1
    torch.spyre.synchronize()  # y was made on a side stream
    assert torch.equal(y.cpu(), torch.full((4,), 2000.0))
    assert len(ids) <= 16
    assert threads() <= before + 16


def test_forged_event_ids_are_refused():
    for start, end in [(12345, 67890), (0, 0)]:
        with pytest.raises(ValueError, match="spyre"):
            torch_spyre._C.device_elapsed_ms(start, end)
        with pytest.raises(ValueError, match="spyre"):
            torch_spyre._C.host_elapsed_ms(start, end)


def _read_on_a_busy_stream(record):
    side = torch.spyre.Stream()
    torch.spyre.synchronize()
    x = torch.arange(65536.0).to("spyre")
    torch.spyre.synchronize()
    keep_busy(side)
    with torch.spyre.stream(side):
        y = x * 2
    if record:
        x.record_stream(side)
    del x
    # The same size on the default stream: x's block, were it free already.
    torch.full((65536,), -1.0, device="spyre")
    side.synchronize()
    return y.cpu()


def test_record_stream_keeps_memory_until_the_other_stream_read_it():
    # Checked by value: the other stream's read sees x, not the values of a
    # tensor that took x's memory too early.
    assert torch.equal(_read_on_a_busy_stream(record=True), torch.arange(65536.0) * 2)


def test_record_stream_keeps_memory_alive():
    side = torch.spyre.Stream()
    x = torch.randn(1000).to("spyre")
    with torch.spyre.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    side.synchronize()
    assert y.shape == (1000,)


def test_a_storage_clone_is_ordered_after_the_kernel_writing_its_source():
    # a device-to-device copy does not wait on the host: behind a busy
    # stream, the kernel writing the source has not run yet when the clone
    # is queued, and the clone must still hold its result
    keep_busy(torch.spyre.current_stream())
    x = torch.arange(4096, dtype=torch.float32, device="spyre")
    doubled = x * 2
    copy = doubled.untyped_storage().clone()
    got = torch.empty(0, device="spyre").set_(copy, 0, (4096,), (1,))
    torch.testing.assert_close(got.cpu(), torch.arange(4096.) * 2)
