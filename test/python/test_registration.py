"""Registration: autoload through the entry point, names, generated methods."""

import torch


def test_autoload_in_fresh_interpreter_needs_only_torch(fresh_python):
    result = fresh_python("""
        import sys, torch
        x = torch.randn(4, 128)
        y = x.to("spyre")
        assert "torch_spyre" in sys.modules
        assert y.device.type == "spyre" and y.is_spyre
        assert torch.equal(y.cpu(), x)
        print("ok", torch.spyre.device_count())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


def test_privateuse1_is_renamed_and_module_registered():
    assert torch._C._get_privateuse1_backend_name() == "spyre"
    import torch_spyre._device as device_module
    assert torch.spyre is device_module
    assert torch.device("spyre:0").type == "spyre"


def test_generated_tensor_module_and_storage_methods():
    x = torch.arange(6, dtype=torch.float32)
    y = x.spyre()
    assert y.is_spyre and not x.is_spyre
    module = torch.nn.Linear(3, 2).spyre()
    assert module.weight.device.type == "spyre"
    storage = x.untyped_storage().spyre()
    assert storage.is_spyre and storage.device.type == "spyre"
    assert torch.equal(torch.tensor([], dtype=torch.float32).set_(storage.cpu()), x)


def test_torch_accelerator_sees_spyre():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.accelerator.device_count() == torch.spyre.device_count()
    torch.accelerator.synchronize()
    assert torch.accelerator.current_device_index() == 0


def test_reimport_is_harmless():
    import importlib
    import torch_spyre
    torch_spyre._autoload()
    importlib.reload(torch_spyre)
    assert torch.randn(3).to("spyre").device.type == "spyre"


def test_device_properties():
    props = torch.spyre.get_device_properties(0)
    assert props.num_cores == 32
    assert props.scratchpad_bytes == 2 << 20
    assert props.stick_bytes == 128
    assert props.total_memory > 0
    assert isinstance(props.backend, str) and props.backend
    assert torch.spyre.get_device_name(0) == props.name


def test_last_launch_stats_has_the_modelled_figures():
    stats = torch.spyre.last_launch_stats()
    for key in ("cycles", "core_utilization", "dma_bytes", "ring_bytes", "time_ns"):
        assert key in stats
    assert stats["cycles"] >= 0 and stats["dma_bytes"] >= 0
