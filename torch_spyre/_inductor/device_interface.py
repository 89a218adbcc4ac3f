"""Dynamo's view of the spyre device (torch._dynamo.device_interface)."""

from __future__ import annotations

import types

import torch
from torch._dynamo.device_interface import DeviceInterface


class SpyreInterface(DeviceInterface):
    @staticmethod
    def _module():
        return torch.spyre

    class device:  # noqa: N801 - mirrors torch.cuda.device
        def __new__(cls, device):
            return torch.spyre.device(device)

    class Event:
        def __new__(cls, *args, **kwargs):
            return torch.spyre.Event(*args, **kwargs)

    class Stream:
        def __new__(cls, *args, **kwargs):
            return torch.spyre.Stream(*args, **kwargs)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.spyre.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.spyre.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return SpyreInterface.get_device_properties(device)

    @staticmethod
    def current_device() -> int:
        return torch.spyre.current_device()

    @staticmethod
    def set_device(device) -> None:
        torch.spyre.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.spyre.current_device()
        if device != previous:
            torch.spyre.set_device(device)
        return previous

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = torch.spyre.current_device()
        torch.spyre.set_device(device)
        return previous

    @staticmethod
    def device_count() -> int:
        return torch.spyre.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.spyre.is_available()

    @staticmethod
    def stream(stream):
        return torch.spyre.stream(stream)

    @staticmethod
    def current_stream():
        return torch.spyre.current_stream()

    @staticmethod
    def set_stream(stream) -> None:
        torch.spyre.set_stream(stream)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return torch.spyre.current_stream(device_idx).stream_id

    @staticmethod
    def synchronize(device=None) -> None:
        torch.spyre.synchronize(device)

    @classmethod
    def get_device_properties(cls, device=None):
        # Inductor reads multi_processor_count (its reduction heuristics);
        # on spyre that is the number of cores.
        props = torch.spyre.get_device_properties(device)
        fields = {k: getattr(props, k) for k in dir(props) if not k.startswith("_")}
        return types.SimpleNamespace(**fields, multi_processor_count=props.num_cores)

    @staticmethod
    def get_compute_capability(device=None):
        return "spyre"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.spyre.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False
