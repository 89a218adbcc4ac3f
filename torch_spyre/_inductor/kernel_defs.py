"""Device kernels of a compiled module: their names, their programs embedded
in the module's header, and the record of what this process compiled. Used
by the scheduler (fused loop kernels) and the matrix-product lowering alike,
so neither imports the other for it."""

from __future__ import annotations

import base64
import hashlib

# Kernels compiled in this process, for tests and benchmarks: name -> info.
compiled_kernels: dict = {}


def new_kernel_name(first_node: str) -> str:
    return f"spyre_kernel_{len(compiled_kernels)}_{first_node}"


def define_kernel(wrapper, kernel_name: str, spec, arg_names: list, info: dict) -> None:
    """Embeds a built program in the compiled module's header as a
    SpyreKernel (loaded once, launched per call) and records it."""
    data = spec.serialize()
    info.update(name=kernel_name, program_bytes=len(data), args=list(arg_names))
    compiled_kernels[kernel_name] = info
    digest = hashlib.sha256(data).hexdigest()[:16]
    encoded = base64.b64encode(data).decode()
    wrapper.header.splice(
        f"{kernel_name} = SpyreKernel({kernel_name!r}, '{encoded}', {list(arg_names)!r})"
        f"  # sha256 {digest}, {info['cores']} cores, {info['instructions']} instructions")
