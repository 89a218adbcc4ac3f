"""Device layouts as the compiler sees them, and buffer accesses in them.

Every buffer a compiled kernel touches is assumed to sit in the device's
default stick layout of its storage (what the spyre allocator gives a dense
tensor): with the storage's dimensions in memory order and size-1 dimensions
dropped, host sizes [h0 .. hk-1] live on the device as
[h1 .. hk-2, ceil(hk-1 / E), h0, E], E = 128 bytes / element size (the
kernel library's rule, spyre/kernels/layout.h, read through _C). The
launch's bind step checks the real layout against this assumption, so a
tensor in another layout fails loudly instead of computing garbage.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref

import sympy
import torch
from torch._inductor.virtualized import V

from .. import _C
from .capture import SpyreLoweringError

STICK_BYTES = _C.STICK_BYTES

DTYPE_NAMES = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.int8: "int8",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
    torch.uint8: "uint8",
}


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise SpyreLoweringError(f"dtype {dtype} has no spyre device representation") from None


@dataclasses.dataclass(frozen=True)
class BufferLayout:
    name: str
    dtype: torch.dtype
    host_sizes: tuple[int, ...]  # memory order, size-1 dims dropped

    @property
    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def per_stick(self) -> int:
        return STICK_BYTES // self.element_size

    @property
    def rank(self) -> int:
        return len(self.host_sizes)

    @property
    def host_strides(self) -> tuple[int, ...]:
        strides, acc = [], 1
        for size in reversed(self.host_sizes):
            strides.append(acc)
            acc *= size
        return tuple(reversed(strides))

    @functools.cached_property
    def device_size(self) -> list[int]:
        """The default stick layout of `host_sizes`: the layout rule is the
        kernel library's (spyre/kernels/layout.h), through _C."""
        return list(_C.default_layout(list(self.host_sizes), self.dtype, -1).device_size)

    @property
    def device_bytes(self) -> int:
        return math.prod(self.device_size) * self.element_size

    def _device_strides(self) -> list[int]:
        """Byte strides of the device dimensions (row-major)."""
        strides, acc = [], self.element_size
        for size in reversed(self.device_size):
            strides.append(acc)
            acc *= size
        return list(reversed(strides))

    def dim_stride_bytes(self, dim: int) -> int:
        """Device bytes between consecutive coordinates of host dim `dim`
        (not the last, stick, dim)."""
        assert dim != self.rank - 1
        strides = self._device_strides()
        if dim == 0:
            return strides[-2]  # the h0 device dim, one stick apart
        return strides[dim - 1]

    @property
    def stick_stride_bytes(self) -> int:
        """Device bytes between consecutive sticks of the last host dim."""
        strides = self._device_strides()
        return strides[-3] if self.rank >= 2 else strides[-2]

    def offset_bytes(self, coords: list[int]) -> tuple[int, int]:
        """(stick-aligned byte offset, element position inside the stick) of
        the element at host coordinates `coords`."""
        if self.rank == 0:
            return 0, 0
        last = coords[-1]
        offset = (last // self.per_stick) * self.stick_stride_bytes
        for dim in range(self.rank - 1):
            offset += coords[dim] * self.dim_stride_bytes(dim)
        return offset, last % self.per_stick


def _static(x, what: str, name: str) -> int:
    # specialised with a guard (see capture._static_ints)
    return V.graph.sizevars.guard_int(x)


def buffer_layout(name: str) -> BufferLayout:
    """The device layout a kernel assumes for buffer `name`'s storage."""
    extra = _wrapper_buffers.get(V.graph, {}).get(name)
    if extra is not None:
        return extra
    buf = V.graph.get_buffer(name)
    if buf is None:
        raise SpyreLoweringError(f"unknown buffer {name}")
    layout = buf.get_layout()
    sizes = [_static(s, "size", name) for s in layout.size]
    strides = [_static(s, "stride", name) for s in layout.stride]
    offset = _static(layout.offset, "storage offset", name)
    dims = sorted((i for i, s in enumerate(sizes) if s != 1), key=lambda i: -strides[i])
    host_sizes = tuple(sizes[i] for i in dims)
    expected = 1
    dense = True
    for i in reversed(dims):
        dense &= strides[i] == expected
        expected *= sizes[i]
    if not dense or offset != 0:
        raise SpyreLoweringError(
            f"buffer {name} (size {sizes}, stride {strides}, offset {offset}) is not a dense "
            "tensor starting its storage; the spyre backend binds whole storages in their "
            "default layout (make the input contiguous before the compiled call)")
    grouping = _input_grouping(name, host_sizes) or assigned_layout(name)
    if grouping is not None and not _coarsens(grouping, host_sizes):
        grouping = None
    return BufferLayout(name, buf.get_dtype(), grouping or host_sizes)


# Layouts the compiler chose for buffers of a graph (layout assignment): the
# host sizes whose default layout the buffer's storage gets, a coarsening of
# its own memory-order sizes (the same host image, other sticks).
_assigned: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# Buffers the wrapper allocates itself (re-layout copies), not in the graph.
_wrapper_buffers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def add_wrapper_buffer(layout: BufferLayout) -> None:
    _wrapper_buffers.setdefault(V.graph, {})[layout.name] = layout


def assign_layout(name: str, host_sizes: tuple) -> None:
    _assigned.setdefault(V.graph, {})[name] = tuple(host_sizes)


def unassign_layout(name: str) -> None:
    _assigned.get(V.graph, {}).pop(name, None)


def assigned_layout(name: str):
    """The host sizes assigned to buffer `name` of the current graph, or
    None for the default layout of its own shape."""
    return _assigned.get(V.graph, {}).get(name)


def input_layout_signature(inputs) -> tuple:
    """(position, host sizes, device size) of the storage layout of every
    spyre tensor among a graph's inputs: what a compiled variant assumes."""
    signature = []
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and t.device.type == "spyre":
            lay = t.device_tensor_layout()
            signature.append((i, tuple(lay.host_size), tuple(lay.device_size)))
    return tuple(signature)


def _coarsens(coarse: tuple, fine: tuple) -> bool:
    """Whether `coarse` merges runs of adjacent dims of `fine` (same numel)."""
    i, acc = 0, 1
    for size in fine:
        acc *= size
        if i < len(coarse) and acc == coarse[i]:
            i, acc = i + 1, 1
        elif i >= len(coarse) or acc > coarse[i]:
            return False
    return i == len(coarse) and acc == 1


def _input_grouping(name: str, host_sizes: tuple):
    """The host sizes of a graph input's storage when backend="spyre" saw
    it in the default layout of a coarser shape (a view such as
    x.view(b, s, h, d) of a [b, s, h*d] tensor): programs then read the
    storage as it is instead of a launch converting it."""
    from . import config
    if not config.input_layouts:
        return None
    names = list(V.graph.graph_input_names)
    if name not in names:
        return None
    position = names.index(name)
    for i, storage_sizes, device_size in config.input_layouts:
        if i != position:
            continue
        squeezed = tuple(n for n in storage_sizes if n != 1) or (1,)
        dtype = V.graph.get_dtype(name)
        if squeezed != host_sizes and _coarsens(squeezed, host_sizes) and \
                list(BufferLayout(name, dtype, squeezed).device_size) == list(device_size):
            return squeezed
    return None


@dataclasses.dataclass(frozen=True)
class VarMap:
    dim: int   # host dimension (memory order) the variable walks
    step: int  # host coordinates per variable step


@dataclasses.dataclass
class Access:
    """buffer[index] with index affine in the iteration variables."""
    layout: BufferLayout
    index: sympy.Expr
    base: list[int]                   # host coordinates at all variables zero
    vars: dict[sympy.Symbol, VarMap]  # variables with a nonzero coefficient


def analyze_access(layout: BufferLayout, index: sympy.Expr,
                   ranges: dict[sympy.Symbol, int], what: str,
                   joint_extent: dict | None = None) -> Access:
    """Splits an Inductor index expression into per-dimension host
    coordinates; raises for indices that are not affine per dimension
    (reshapes across dimensions, modular or floor-divided indexing).
    `joint_extent` maps a pair of variables that together walk one range
    (a split column: chunk * q + k) to that range's true last index, which
    is below the product of their ranges when the last chunk is short."""
    expr = sympy.expand(sympy.sympify(index))
    free = expr.free_symbols
    unknown = [s for s in free if s not in ranges]
    if unknown:
        raise SpyreLoweringError(f"{what}: index {index} uses {unknown}, which are not "
                                 "iteration variables (symbolic sizes or indirect indexing)")
    coeffs = {v: expr.coeff(v) for v in free}
    const = expr.subs({v: 0 for v in free})
    if sympy.expand(expr - sum(c * v for v, c in coeffs.items()) - const) != 0 or not all(
            isinstance(c, sympy.Integer) for c in list(coeffs.values()) + [const]):
        raise SpyreLoweringError(f"{what}: index {index} is not affine in the iteration "
                                 "variables (modular or floor-divided indexing from a view)")
    const = int(const)
    strides = layout.host_strides
    numel = math.prod(layout.host_sizes) if layout.rank else 1
    if const < 0 or const >= numel:
        raise SpyreLoweringError(f"{what}: constant offset {const} outside {layout.name}")
    base = [(const // strides[d]) % layout.host_sizes[d] for d in range(layout.rank)]
    maps: dict[sympy.Symbol, VarMap] = {}
    extent = list(base)
    for v, c in coeffs.items():
        c = int(c)
        if c == 0:
            continue
        if c < 0:
            raise SpyreLoweringError(f"{what}: index {index} walks {layout.name} backwards "
                                     "(flip); no device lowering")
        dims = [d for d in range(layout.rank) if c % strides[d] == 0]
        if not dims:
            raise SpyreLoweringError(f"{what}: index {index} does not follow the dims of "
                                     f"{layout.name} {list(layout.host_sizes)}")
        dim = max((d for d in dims if strides[d] <= c), key=lambda d: strides[d])
        step = c // strides[dim]
        # several variables may walk one dim (a view that split it, e.g.
        # [B*S, D] read as [B, S, D]); their coordinates add up below
        maps[v] = VarMap(dim, step)
        extent[dim] += step * (ranges[v] - 1)
    for (qv, kv), last in (joint_extent or {}).items():
        if qv in maps and kv in maps and maps[qv].dim == maps[kv].dim:
            m = maps[kv]
            extent[m.dim] -= maps[qv].step * (ranges[qv] - 1) + m.step * (ranges[kv] - 1)
            extent[m.dim] += m.step * last
    for d in range(layout.rank):
        if extent[d] >= layout.host_sizes[d]:
            raise SpyreLoweringError(
                f"{what}: index {index} runs past dim {d} of {layout.name} "
                f"{list(layout.host_sizes)} (the loop walks several dims at once, as after a "
                "reshape); no device lowering")
    return Access(layout, index, base, maps)
