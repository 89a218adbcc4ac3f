"""torch.compile for the spyre device: an Inductor backend whose kernels are
device programs.

Registered at torch_spyre import (`register()`): Inductor's scheduling and
wrapper codegen for the `spyre` device, its device op overrides, Dynamo's
device interface, and the backend name `"spyre"` (torch.compile(fn,
backend="spyre") is Inductor with the spyre decompositions). Inductor's
modules load lazily: registering costs no Inductor import.
"""

from __future__ import annotations

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    from torch._dynamo import register_backend
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import (register_backend_for_device,
                                                register_device_op_overrides)

    from .device_interface import SpyreInterface
    from .decompositions import SpyrePostGradPass, define_eager_twins
    from . import matmul  # noqa: F401  (defines the spyre_inductor ops)
    from .scheduling import SpyreScheduling
    from .wrapper import SpyreCppWrapperUnsupported, SpyreDeviceOpOverrides, SpyreWrapperCodegen

    register_backend_for_device("spyre", SpyreScheduling, SpyreWrapperCodegen,
                                SpyreCppWrapperUnsupported,
                                device_custom_pass=SpyrePostGradPass())
    register_device_op_overrides("spyre", SpyreDeviceOpOverrides())
    define_eager_twins()
    register_interface_for_device("spyre", SpyreInterface)
    from torch._dynamo.backends.registry import _BACKENDS
    if "spyre" not in _BACKENDS:
        register_backend(name="spyre", compiler_fn=spyre_backend)
    _registered = True


def spyre_backend(gm, example_inputs, **kwargs):
    """torch.compile(backend="spyre"): Inductor for the spyre device (the
    same lowering, decompositions and fallbacks as backend="inductor")."""
    register()
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs, **kwargs)
