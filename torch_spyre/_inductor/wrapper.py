"""Host-side wrapper code of compiled spyre graphs (Python)."""

from __future__ import annotations

import math

from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V


def _storage_layout_key(buffer):
    """Memory-order sizes without size-1 dims (or the sizes the compiler
    assigned the buffer): what decides the device layout of its storage."""
    from .layouts import assigned_layout
    assigned = assigned_layout(buffer.get_name())
    if assigned is not None:
        return assigned
    sizes, strides = buffer.get_size(), buffer.get_stride()
    dims = sorted((i for i, s in enumerate(sizes) if s != 1), key=lambda i: -strides[i])
    return tuple(V.graph.sizevars.simplify(sizes[i]) for i in dims)


class SpyreWrapperCodegen(PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper,
                                                partition_signatures)
        return SpyreWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.header.splice("from torch_spyre._inductor.runtime import SpyreKernel")

    def generate_fallback_kernel(self, node) -> None:
        # spyre_inductor::matmul / mlp: a device program built here, once;
        # anything the builder cannot take runs the op's eager form (counted)
        from .matmul import MATMUL_OP, MLP_OP, lower_extern_product
        if node.op_overload in (MATMUL_OP, MLP_OP) and lower_extern_product(self, node):
            return
        super().generate_fallback_kernel(node)

    def make_buffer_allocation(self, buffer):
        # a buffer assigned another stick layout (layouts.assign_layout) is
        # allocated in the default layout of its assigned sizes, then viewed
        # with its own (contiguous, same host image)
        from .layouts import assigned_layout
        assigned = assigned_layout(buffer.get_name())
        if assigned is None or buffer.get_device().type != "spyre":
            return super().make_buffer_allocation(buffer)
        sizes = tuple(V.graph.sizevars.guard_int(n) for n in buffer.get_size())
        strides = tuple(math.prod(assigned[i + 1:]) for i in range(len(assigned)))
        return (f"{buffer.get_name()} = empty_strided({tuple(assigned)}, {strides}, "
                f"device='spyre', dtype={buffer.get_dtype()}).view({sizes})")

    def make_buffer_reuse(self, old, new, delete_old: bool):
        # A spyre storage keeps the device layout of the shape it was
        # allocated for; reusing it for a buffer of another memory-order
        # shape would hand kernels a layout they did not plan for.
        if old.get_device().type == "spyre" and \
                _storage_layout_key(old) != _storage_layout_key(new):
            line = self.make_buffer_allocation(new)
            if old.get_name() not in V.graph.get_output_names() and delete_old:
                line += f"; {self.make_buffer_free(old)}"
            return line
        return super().make_buffer_reuse(old, new, delete_old)


class SpyreCppWrapperUnsupported:
    """Inductor's C++ wrapper (cpp_wrapper=True, AOTInductor) is not
    implemented for spyre; the Python wrapper launches the programs."""

    @staticmethod
    def create(*args, **kwargs):
        raise NotImplementedError(
            "spyre: the C++ wrapper (torch._inductor.config.cpp_wrapper / AOTInductor) is not "
            "supported; compile with the default Python wrapper")


class SpyreDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_spyre._inductor.runtime import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.spyre.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.spyre.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.spyre.device({device_idx})"
