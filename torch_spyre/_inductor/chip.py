"""The chip facts the compiler plans for.

They come from the properties of the device a graph is compiled for
(`torch.spyre.get_device_properties`, filled by the device layer from its
backend: the emulator's timing table), never from figures written down in
the compiler, so a backend with other limits gets kernels planned for them.
"""

from __future__ import annotations

import dataclasses
import functools

import torch


@dataclasses.dataclass(frozen=True)
class Chip:
    device: int              # the spyre device index it was read from
    num_cores: int
    scratchpad_bytes: int    # per core
    scratchpad_reserve: int  # per core, kept by the device software

    @property
    def scratchpad_budget(self) -> int:
        """Scratchpad bytes per core a plan may use."""
        return self.scratchpad_bytes - self.scratchpad_reserve

    def usable_cores(self) -> int:
        """The cores a kernel may use: all, or `config.max_cores`."""
        from . import config
        cap = config.max_cores
        return self.num_cores if cap is None else max(1, min(int(cap), self.num_cores))


@functools.lru_cache(maxsize=None)
def chip_of(index: int) -> Chip:
    props = torch.spyre.get_device_properties(index)
    return Chip(index, props.num_cores, props.scratchpad_bytes, props.scratchpad_reserve)


def device_index(device) -> int:
    """A spyre device's index; the current device when it names none."""
    if device is None or device.index is None:
        return torch.spyre.current_device()
    return device.index


def compile_chip() -> Chip:
    """The chip of the device the graph being compiled runs on."""
    from torch._inductor.virtualized import V
    return chip_of(device_index(V.graph.get_current_device_or_throw()))
