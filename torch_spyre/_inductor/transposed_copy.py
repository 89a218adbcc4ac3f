"""Compiled kernels that only transpose: a copy whose source runs along
another stick dim than its destination (`x.t().contiguous()`, a permute made
contiguous) becomes the kernel library's re-layout program, the one eager
copies use, instead of a loop kernel. The re-layout moves the pieces core to
core through the on-chip transpose pipeline (or, for few rows, has each core
load its own columns), where a loop kernel transposes inside each core and
reads its source more than once."""

from __future__ import annotations

import math
from typing import Optional

import sympy

from .capture import CapturedNode, SpyreLoweringError
from .layouts import buffer_layout


def _affine_view(index: sympy.Expr, index_vars):
    """(strides, offset) of an index that is affine in `index_vars`; None
    when it is not."""
    strides = []
    for var in index_vars:
        coeff = sympy.diff(index, var)
        if not coeff.is_Integer:
            return None
        strides.append(int(coeff))
    offset = index.subs({v: 0 for v in index_vars})
    if not offset.is_Integer:
        return None
    return strides, int(offset)


def transposed_copy_program(kernel_name: str, captured: list[CapturedNode],
                            device: Optional[int]):
    """(spec, arg names, info) of the re-layout program when the kernel is one
    pure copy whose source's sticks run along the destination's rows; None
    when it is anything else (the loop kernel lowers it then)."""
    from .. import _C
    from .matmul import common_batch_pieces, operand_matrix

    if len(captured) != 1 or captured[0].is_reduction or len(captured[0].stores) != 1:
        return None
    node = captured[0]
    store = node.stores[0]
    value = store.value
    if value.op != "load" or len(node.sizes) < 2:
        return None
    source, load_index = value.args
    if source == store.buffer:
        return None
    src_layout, dst_layout = buffer_layout(source), buffer_layout(store.buffer)
    if src_layout.dtype != dst_layout.dtype or value.dtype != dst_layout.dtype:
        return None
    src_view = _affine_view(load_index, node.index_vars)
    dst_view = _affine_view(store.index, node.index_vars)
    if src_view is None or dst_view is None:
        return None
    # The program stores whole sticks of the destination's rows (their
    # padding zeroed): only a store that covers the whole destination buffer
    # may do so, never a slice whose sticks hold other kernels' elements (a
    # transpose written into part of a concatenation).
    if dst_view[1] != 0 or math.prod(node.sizes) != math.prod(dst_layout.host_sizes):
        return None
    try:
        src = operand_matrix(source, src_layout, node.sizes, *src_view, kernel_name)
        dst = operand_matrix(store.buffer, dst_layout, node.sizes, *dst_view, kernel_name)
    except SpyreLoweringError:
        return None
    # The source's stored matrix is the view's transpose (its rows run along
    # the sticks), the destination's the view itself: dst = src^T.
    if not src.transposed or dst.transposed:
        return None
    try:
        batches = common_batch_pieces([src.batch_pieces, dst.batch_pieces], kernel_name)
        spec = _C.build_restickify(src.as_tuple(batches[0]), dst.as_tuple(batches[1]),
                                   device=-1 if device is None else device)
    except (SpyreLoweringError, _C.KernelBuildError):
        return None
    for slot, m in enumerate((src, dst)):
        spec.set_arg(slot, m.buffer, list(m.layout.device_size))
    info = dict(kind="restickify", cores=spec.num_cores,
                instructions=spec.instruction_count)
    return spec, [src.buffer, dst.buffer], info
