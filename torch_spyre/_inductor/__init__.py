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
    same lowering, decompositions and fallbacks as backend="inductor"),
    specialised to the device layouts of the inputs' storages.

    Dynamo guards on sizes and strides, not on device layouts, so the
    backend keeps one compiled variant per input layout signature: the
    signature is part of Inductor's cache key (config.input_layouts), the
    programs read inputs in their real layout where the lowering can
    (layouts.buffer_layout), and a call with other layouts compiles (or
    loads from the cache) the variant for them."""
    register()
    import copy

    import torch
    from torch._inductor.compile_fx import compile_fx

    from . import config
    from .layouts import input_layout_signature

    variants = {}

    def compile_variant(signature):
        with config.patch(input_layouts=signature):
            if torch._guards.TracingContext.try_get() is not None:
                return compile_fx(copy.deepcopy(gm), example_inputs, **kwargs)
            # a variant compiled at call time: a tracing context of its own,
            # so Inductor's cache (which needs a shape env) is used
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx.experimental.symbolic_shapes import ShapeEnv
            context = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
            with torch._guards.tracing(context):
                return compile_fx(copy.deepcopy(gm), example_inputs, **kwargs)

    first = input_layout_signature(example_inputs)
    variants[first] = compile_variant(first)

    def run(*args):
        signature = input_layout_signature(args)
        fn = variants.get(signature)
        if fn is None:
            fn = variants[signature] = compile_variant(signature)
        return fn(*args)
    return run
