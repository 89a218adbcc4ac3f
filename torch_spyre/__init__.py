"""torch_spyre: the `spyre` PyTorch device (an emulated Spyre-class accelerator).

Importing torch is enough: torch loads this package through its
``torch.backends`` entry point (``_autoload``), which renames PrivateUse1 to
``spyre``, registers ``torch.spyre`` and the generated ``.spyre()`` /
``.is_spyre`` methods. One process can rename PrivateUse1 only once, so this
package cannot be used beside another PrivateUse1 backend such as IBM's
torch-spyre.

Device layouts: ``tensor.device_tensor_layout()`` describes how a spyre
tensor's storage sits on the device; ``torch_spyre.to_device(x, layout)``
copies a tensor to the device in a non-default layout (``x.to("spyre")``
always uses the default one).
"""

import warnings


def _autoload():
    """Entry point torch calls at import (group ``torch.backends``).

    Defined before ``import torch``: when this package is imported first
    (``python -m torch_spyre.testing``), importing torch calls this while the
    package is half initialised; then the last line of this file registers.
    """
    register = globals().get("_register")
    if register is not None:
        register()


import torch  # noqa: E402

try:
    from . import _C
except ImportError as error:
    # `import torch` loads this package through its entry point and fails as
    # a whole if the package raises; a broken build must not take torch down.
    _C = None
    _LOAD_ERROR = error
    warnings.warn(f"torch_spyre: the native extension could not be loaded, the spyre "
                  f"device is unavailable ({error}); rebuild with "
                  f"`pip install --no-build-isolation -e .`")
else:
    _LOAD_ERROR = None
    from ._layout import DeviceLayout, default_layout, empty, to_device

__all__ = ["DeviceLayout", "default_layout", "empty", "to_device"]

_BACKEND = "spyre"
_registered = False


def _rename_privateuse1():
    current = torch._C._get_privateuse1_backend_name()
    if current == _BACKEND:
        return
    if current != "privateuseone":
        raise RuntimeError(
            f"torch_spyre: PrivateUse1 is already registered as {current!r} in this "
            "process (IBM's torch-spyre or another out-of-tree backend); only one "
            "PrivateUse1 backend can be loaded per process. Uninstall the other one "
            "or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 and import only torch_spyre.")
    torch.utils.rename_privateuse1_backend(_BACKEND)


def _register():
    global _registered
    if _registered or _C is None:
        return
    _rename_privateuse1()
    from . import _device
    if getattr(torch, _BACKEND, None) is not _device:
        torch._register_device_module(_BACKEND, _device)
    if not hasattr(torch.Tensor, "is_spyre"):  # a reloaded module keeps them
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    from . import _layout
    torch.Tensor.device_tensor_layout = _layout.device_tensor_layout
    from . import _distributed
    _distributed.register()
    _registered = True


_register()
