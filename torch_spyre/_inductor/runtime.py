"""What compiled modules call at run time: load each program once, launch it
per call.

A compiled module defines one `SpyreKernel` per kernel at import (the
program's bytes are embedded in the module, so loading it again in another
process compiles nothing) and calls `launch` with the kernel's tensors.
"""

from __future__ import annotations

import base64
import hashlib
import threading

from .. import _C

_lock = threading.Lock()
_stats = {"kernels_loaded": 0, "launches": 0, "relayouts": 0, "host_kernels": 0}


def stats() -> dict:
    """Counters of compiled spyre kernels in this process: programs loaded,
    launches (each one a device program run through the patcher), input
    tensors copied into the device layout a kernel was built for, runs of
    host fallback kernels (kernels the device lowering rejected)."""
    with _lock:
        return dict(_stats)


def reset_stats() -> None:
    with _lock:
        for k in _stats:
            _stats[k] = 0


_profile: list | None = None


class profile:
    """Collects the modelled stats of every compiled launch (benchmarks):
    each launch is waited for and torch.spyre.last_launch_stats() recorded
    with the kernel's name in `self.launches`."""

    def __enter__(self):
        global _profile
        self.launches = []
        _profile = self.launches
        return self

    def __exit__(self, *exc):
        global _profile
        _profile = None

    def device_time_ns(self) -> float:
        return sum(s["time_ns"] for _, s in self.launches)


class SpyreKernel:
    """A device program of one compiled kernel, loaded at most once per
    device (validated, patch plan computed, prepared by the backend)."""

    def __init__(self, name: str, program_b64: str, arg_names: list[str]):
        self.name = name
        self._data = base64.b64decode(program_b64)
        self._digest = hashlib.sha256(self._data).hexdigest()
        self.arg_names = list(arg_names)
        self._loaded = {}

    def _program(self, device_index: int):
        program = self._loaded.get(device_index)
        if program is None:
            program = _C.CompiledProgram(self._data, self._digest, device_index)
            self._loaded[device_index] = program
            with _lock:
                _stats["kernels_loaded"] += 1
        return program

    def launch(self, tensors) -> None:
        # get_device(): the index as an int, without making a torch.device
        # (this runs for every kernel of every compiled step).
        program = self._program(max(tensors[0].get_device(), 0))
        relayouts = program.launch(tensors)
        with _lock:
            _stats["launches"] += 1
            _stats["relayouts"] += relayouts
        if _profile is not None:
            import torch
            torch.spyre.synchronize()
            _profile.append((self.name, torch.spyre.last_launch_stats()))


def get_raw_stream(device_index: int) -> int:
    import torch
    return torch.spyre.current_stream(device_index).stream_id


def count_host_kernel(name: str) -> None:
    with _lock:
        _stats["host_kernels"] += 1


def _storage_numel(tensor) -> int:
    return tensor.untyped_storage().nbytes() // tensor.element_size()


def host_storage(tensor):
    """A host copy of `tensor`'s whole storage as a flat tensor (the index
    space of Inductor's index expressions)."""
    return tensor.as_strided((_storage_numel(tensor),), (1,), 0).cpu()


def write_back(tensor, flat) -> None:
    """Copies a flat host image back into `tensor`'s whole storage."""
    tensor.as_strided((_storage_numel(tensor),), (1,), 0).copy_(flat)
