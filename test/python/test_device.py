"""Device count, switching (also per thread), bad indices and devices."""

import threading

import pytest
import torch

from conftest import needs_two_devices


def test_count_and_current():
    assert torch.spyre.is_available()
    assert torch.spyre.device_count() >= 1
    assert torch.spyre.current_device() == 0
    assert torch.empty(2, device="spyre").device == torch.device("spyre:0")


@needs_two_devices()
def test_set_device_and_context_manager():
    torch.spyre.set_device(1)
    assert torch.spyre.current_device() == 1
    assert torch.empty(2, device="spyre").device == torch.device("spyre:1")
    torch.spyre.set_device("spyre:0")
    with torch.spyre.device(1):
        assert torch.spyre.current_device() == 1
        assert torch.ones(3).spyre().device.index == 1
    assert torch.spyre.current_device() == 0
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == 0


@needs_two_devices()
def test_current_device_is_per_thread():
    seen = {}
    barrier = threading.Barrier(4)

    def work(index):
        torch.spyre.set_device(index % 2)
        barrier.wait()
        x = torch.full((3, 70), float(index)).to("spyre")
        seen[index] = (torch.spyre.current_device(), x.device.index, x.cpu()[0, 0].item())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {i: (i % 2, i % 2, float(i)) for i in range(4)}
    assert torch.spyre.current_device() == 0


def test_wrong_device_index_is_a_clear_error():
    count = torch.spyre.device_count()
    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(3, device=f"spyre:{count + 5}")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.spyre.set_device(count + 5)
    with pytest.raises(ValueError, match="expected a spyre device"):
        torch.spyre.set_device("cpu")


@needs_two_devices()
def test_mismatched_devices_are_rejected():
    a = torch.ones(4, device="spyre:0")
    b = torch.ones(4, device="spyre:1")
    with pytest.raises((ValueError, RuntimeError), match="same device"):
        a + b
    with pytest.raises((ValueError, RuntimeError), match="same device"):
        a + torch.ones(4)
    with pytest.raises((ValueError, RuntimeError), match="same device"):
        torch.cat([a, b])
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((4,), 3.0))


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="torch.complex128 is not supported"):
        torch.zeros(3, dtype=torch.complex128).to("spyre")
    with pytest.raises(TypeError, match="torch.complex64 is not supported"):
        torch.empty(3, dtype=torch.complex64, device="spyre")


def test_pin_memory_on_device_tensor_is_rejected():
    with pytest.raises((ValueError, RuntimeError)):
        torch.empty(3, device="spyre", pin_memory=True)


def test_storage_only_dtypes_round_trip():
    x = torch.randn(3, 17, dtype=torch.float64)
    y = x.to("spyre")
    assert y.device_tensor_layout().device_size == [2, 3, 16]
    assert torch.equal(y.cpu(), x)
    assert torch.equal(torch.arange(40, dtype=torch.int16).to("spyre").cpu(),
                       torch.arange(40, dtype=torch.int16))
    assert "tensor(" in repr(torch.arange(5.0, device="spyre"))


def test_too_many_or_bad_devices_say_why_at_first_use(fresh_python):
    # 128 devices wrapped to -128 in torch's int8 device index; a garbage
    # count surfaced as "0 devices". The first use now names the cause.
    for value, cause in [("128", "at most 64 are supported"),
                         ("lots", "SPYRE_SIM_DEVICES='lots' is not an integer")]:
        result = fresh_python("""
            import torch
            print("count", torch.spyre.device_count())
            torch.ones(1, device="spyre")
        """, SPYRE_SIM_DEVICES=value)
        assert result.returncode != 0
        assert "count 0" in result.stdout, result.stdout
        assert cause in result.stderr, result.stderr[-2000:]
