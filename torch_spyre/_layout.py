"""Device layouts of spyre storage.

A layout says where each element of a storage lives on the device:
``device_size`` is the device-side shape (row-major on the device; the last
dimension is one 128-byte stick), ``stride_map[k]`` the host-element stride of
one step along device dimension k (-1 for a synthetic dimension), and
``dim_map``/``dim_step`` which host dimension a device dimension walks and by
how much. The default for sizes [d0, ..., dn-1] (size-1 dims dropped, E =
128 / element size) is [d1, ..., dn-2, ceil(dn-1 / E), d0, E].
"""

import torch

from . import _C

DeviceLayout = _C.DeviceLayout


def default_layout(size, dtype=None, stick_dim=-1):
    """The default layout of a contiguous tensor of ``size``; ``stick_dim``
    picks another dimension to lie along the sticks."""
    dtype = dtype or torch.get_default_dtype()
    return _C.default_layout(list(size), dtype, stick_dim)


def _device_index(device):
    if device is None:
        return _C.current_device()
    device = torch.device(device)
    if device.type != "spyre":
        raise ValueError(f"torch_spyre: expected a spyre device, got {device}")
    return _C.current_device() if device.index is None else device.index


def _resolve_layout(tensor_size, dtype, layout, stick_dim):
    if layout is not None and stick_dim is not None:
        raise ValueError("torch_spyre: give either layout or stick_dim, not both")
    if layout is None:
        return default_layout(tensor_size, dtype, -1 if stick_dim is None else stick_dim)
    if not isinstance(layout, DeviceLayout):
        raise TypeError(f"torch_spyre: layout must be a DeviceLayout, got {type(layout)}")
    return layout


def to_device(tensor, layout=None, device=None, stick_dim=None):
    """``tensor`` copied to a spyre device with its storage in ``layout`` (a
    DeviceLayout for ``tensor.shape``) or with ``stick_dim`` along sticks."""
    layout = _resolve_layout(tensor.shape, tensor.dtype, layout, stick_dim)
    return _C.to_device(tensor, _device_index(device), layout)


def empty(size, dtype=None, layout=None, device=None, stick_dim=None):
    """An uninitialised contiguous spyre tensor whose storage has ``layout``."""
    dtype = dtype or torch.get_default_dtype()
    layout = _resolve_layout(size, dtype, layout, stick_dim)
    return _C.empty_with_layout(list(size), dtype, _device_index(device), layout)


def device_tensor_layout(self):
    """The DeviceLayout of this spyre tensor's storage (shared by its views)."""
    return _C.tensor_layout(self)
