"""Matrix products of a compiled graph as device programs.

Three steps, each at compile time:
1. The spyre post-grad pass (`rewrite_matmuls`) replaces every mm, addmm,
   bmm and baddbmm on the spyre device (what linear and matmul decompose to)
   by `spyre_inductor::matmul(a, b, bias, alpha, beta, activation)`, absorbing
   an activation epilogue (relu, gelu, gelu-tanh, silu) that consumes only
   the product, and a linear -> activation -> linear chain into
   `spyre_inductor::mlp` when the kernel library can build it as one program.
2. Inductor keeps these ops as extern (fallback) kernels; the spyre wrapper
   (`wrapper.py`) lowers each one here: every operand view is described as a
   strided matrix in its storage's device layout (`operand_matrix`) and the
   kernel library's builder (`_C.build_matmul`) builds the program once.
3. The compiled module embeds the program; at run time it is loaded once and
   launched per call through the patcher (`runtime.SpyreKernel`).

A product whose operands the builder cannot read in place (a view that
splits sticks, an unaligned slice, a gather-like index) runs the op's eager
implementation instead; such fallbacks are counted (`fallback_counts()`)
with their reason.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Optional

import torch

from .capture import SpyreKernelTooLarge, SpyreLoweringError
from .kernel_defs import define_kernel, new_kernel_name
from .layouts import BufferLayout, buffer_layout, dtype_name
from .lowering import check_group, lower_kernel

aten = torch.ops.aten

# Epilogue activations the fused program applies to alpha * A @ B + beta *
# bias before its single rounding, and their eager definitions.
ACTIVATIONS = {
    "none": lambda x: x,
    "relu": torch.relu,
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


# --------------------------------------------------------------------------
# The ops
# --------------------------------------------------------------------------

@torch.library.custom_op("spyre_inductor::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], alpha: float,
           beta: float, activation: str) -> torch.Tensor:
    """activation(alpha * a @ b + beta * bias); a [..., M, K], b [..., K, N].
    The eager form (run when a compiled product falls back)."""
    out = torch.matmul(a, b)
    if alpha != 1:
        out = out * alpha
    if bias is not None:
        out = out + (bias * beta if beta != 1 else bias)
    return ACTIVATIONS[activation](out).contiguous()


@matmul.register_fake
def _matmul_fake(a, b, bias, alpha, beta, activation):
    return a.new_empty(_product_size(a.shape, b.shape))


@torch.library.custom_op("spyre_inductor::mlp", mutates_args=())
def mlp(x: torch.Tensor, w_up: torch.Tensor, b_up: Optional[torch.Tensor],
        w_down: torch.Tensor, b_down: Optional[torch.Tensor],
        activation: str) -> torch.Tensor:
    """down(activation(up(x))) with up(x) = x @ w_up + b_up (w_up [K, H],
    w_down [H, N], as the products' second operands)."""
    hidden = matmul(x, w_up, b_up, 1.0, 1.0, activation)
    return matmul(hidden, w_down, b_down, 1.0, 1.0, "none")


@mlp.register_fake
def _mlp_fake(x, w_up, b_up, w_down, b_down, activation):
    return x.new_empty(_product_size(x.shape, w_down.shape))


def _product_size(a_shape, b_shape):
    return list(a_shape[:-1]) + [b_shape[-1]]


MATMUL_OP = torch.ops.spyre_inductor.matmul.default
MLP_OP = torch.ops.spyre_inductor.mlp.default

_lock = threading.Lock()
_fallbacks: dict[str, int] = {}


def fallback_counts() -> dict[str, int]:
    """Compiled matrix products that run their eager form instead of a device
    program, per reason, in this process (counted at compile time)."""
    with _lock:
        return dict(_fallbacks)


def count_fallback(reason: str) -> None:
    with _lock:
        _fallbacks[reason] = _fallbacks.get(reason, 0) + 1


def reset_fallback_counts() -> None:
    with _lock:
        _fallbacks.clear()
        _relayouts[0] = 0


_relayouts = [0]


def relayouts_inserted() -> int:
    """Operand copies into another stick layout written into compiled
    modules in this process (where a producer's layout is not the one a
    product reads)."""
    with _lock:
        return _relayouts[0]


def count_relayout() -> None:
    with _lock:
        _relayouts[0] += 1


# --------------------------------------------------------------------------
# 1. Graph rewrite (post-grad, spyre nodes only)
# --------------------------------------------------------------------------

_PRODUCTS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
_RESHAPES = {aten.reshape.default, aten.view.default, aten._unsafe_view.default}
# Pointwise ops an activation's decomposed form is made of (no comparisons or
# selects: every closure of them is analytic, except relu's one kink).
_ACTIVATION_OPS = {
    aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor, aten.neg.default,
    aten.exp.default, aten.erf.default, aten.tanh.default, aten.sigmoid.default,
    aten.relu.default, aten.pow.Tensor_Scalar, torch.ops.prims.convert_element_type.default,
}
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _on_spyre(node) -> bool:
    v = _val(node)
    return isinstance(v, torch.Tensor) and v.device.type == "spyre"


def _product_args(node):
    """(a, b, bias, alpha, beta) of an mm/addmm/bmm/baddbmm node."""
    t = node.target
    kw = node.kwargs
    if t in (aten.mm.default, aten.bmm.default):
        return node.args[0], node.args[1], None, 1.0, 1.0
    bias, a, b = node.args[:3]
    beta = kw.get("beta", node.args[3] if len(node.args) > 3 else 1)
    alpha = kw.get("alpha", node.args[4] if len(node.args) > 4 else 1)
    return a, b, bias, float(alpha), float(beta)


def _evaluate_closure(start, nodes, end, x: torch.Tensor) -> torch.Tensor:
    """Runs the pointwise nodes between `start` and `end` in float64 on x."""
    env = {start: x}
    for n in nodes:
        if n.target == torch.ops.prims.convert_element_type.default:
            env[n] = env[n.args[0]]
            continue
        args = [env[a] if isinstance(a, torch.fx.Node) else a for a in n.args]
        env[n] = n.target(*args, **n.kwargs)
        if n is end:
            break
    return env[end]


def _match_activation(start):
    """(activation name, end node, nodes in between) when the nodes that
    consume `start` (the product) compute exactly one activation of it and
    nothing else reads the intermediates; None otherwise.

    The candidate subgraph is found structurally (pointwise ops of `start`
    and constants only, every intermediate read only inside it); which
    activation it computes is decided by evaluating it in float64 on a dense
    grid of [-30, 30] against each activation's eager definition (1e-12)."""
    graph_nodes = list(start.graph.nodes)
    order = {n: i for i, n in enumerate(graph_nodes)}
    inside = {start}
    closure = []
    for n in graph_nodes[order[start] + 1:]:
        if n.op != "call_function" or n.target not in _ACTIVATION_OPS:
            continue
        inputs = [a for a in n.all_input_nodes]
        if inputs and all(a in inside for a in inputs):
            inside.add(n)
            closure.append(n)
    if not closure:
        return None
    grid = torch.cat([torch.linspace(-30, 30, 601, dtype=torch.float64),
                      torch.linspace(-3, 3, 601, dtype=torch.float64)])
    for end in closure:
        if not isinstance(_val(end), torch.Tensor):
            continue
        members = _ancestors_within(end, start, inside)
        # nothing outside may read the product or an intermediate
        if any(u not in members for m in members - {end} for u in m.users):
            continue
        nodes = [n for n in closure if n in members]
        try:
            y = _evaluate_closure(start, nodes, end, grid.clone())
        except Exception:  # noqa: BLE001 - a subgraph that is not an activation
            continue
        for name, fn in ACTIVATIONS.items():
            if name != "none" and torch.allclose(y, fn(grid), rtol=1e-12, atol=1e-12):
                # a trailing conversion back to the product's dtype belongs to it
                users = list(end.users)
                if len(users) == 1 and users[0].target == \
                        torch.ops.prims.convert_element_type.default and \
                        users[0].args[1] == _val(start).dtype:
                    nodes.append(users[0])
                    end = users[0]
                if _val(end).dtype != _val(start).dtype:
                    return None
                return name, end, nodes
    return None


def _ancestors_within(end, start, inside):
    seen = {start}
    stack = [end]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes if a in inside)
    return seen


def _fake_call(target, args):
    from torch._guards import detect_fake_mode
    fakes = torch.fx.node.map_aggregate(
        list(args), lambda a: _val(a) if isinstance(a, torch.fx.Node) else a)
    leaves = torch.utils._pytree.tree_leaves(fakes)
    mode = detect_fake_mode([f for f in leaves if isinstance(f, torch.Tensor)])
    with mode:
        return target(*fakes)


def _insert(graph, target, args, before):
    with graph.inserting_before(before):
        node = graph.call_function(target, tuple(args))
    node.meta["val"] = _fake_call(target, args)
    return node


def rewrite_matmuls(gm: torch.fx.GraphModule, supported_activations,
                    fuse_mlp: bool = True) -> int:
    """Replaces matrix products on spyre by spyre_inductor::matmul (with
    their activation epilogues) and matmul -> activation -> matmul chains
    by spyre_inductor::mlp when `fuse_mlp` and the kernel library builds
    fused MLPs; returns the number of products rewritten."""
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _PRODUCTS or not _on_spyre(node):
            continue
        if _val(node).dtype not in _FLOAT_DTYPES:
            continue
        a, b, bias, alpha, beta = _product_args(node)
        start = node
        users = list(node.users)
        if len(users) == 1 and users[0].target in _RESHAPES:
            start = users[0]
        match = _match_activation(start)
        if match is not None and match[0] not in supported_activations:
            match = None
        activation, end = (match[0], match[1]) if match else ("none", node)
        anchor = end if match else node
        new = _insert(graph, MATMUL_OP, [a, b, bias, alpha, beta, activation], anchor)
        result = new
        if match and start is not node:
            result = _insert(graph, start.target, [new, start.args[1]], anchor)
            anchor.replace_all_uses_with(result)
        else:
            anchor.replace_all_uses_with(new)
        rewritten += 1
    graph.eliminate_dead_code()
    if fuse_mlp and mlp_supported():
        _fuse_mlps(graph)
    return rewritten


def supported_activations() -> tuple:
    """Epilogue activations the kernel library's matmul builder applies."""
    from .. import _C
    if hasattr(_C, "matmul_activations"):
        return tuple(_C.matmul_activations())
    return ("none",)


def mlp_supported() -> bool:
    from .. import _C
    return hasattr(_C, "build_mlp")


def _through_reshapes(node):
    while isinstance(node, torch.fx.Node) and node.target in _RESHAPES:
        node = node.args[0]
    return node


def _fused_mlp_pays(up) -> bool:
    """The fused MLP splits rows over the cores and streams both weights to
    every group of 8 cores; it saves the intermediate's round trip through
    device memory (2 * M * H elements). That outweighs the extra weight
    traffic (about 3 more passes over 2 * D * H) from M >= 2 * D rows
    (compile_bench, D 768, H 3072: fused loses at 1024 rows, 204 vs 155 us,
    and wins at 2048, 236 vs 287 us; D 64: wins from 256 rows)."""
    rows, d = _val(up.args[0]).shape[0], _val(up.args[0]).shape[-1]
    if not isinstance(rows, int) or not isinstance(d, int):
        return False  # symbolic sizes: keep two programs
    return rows >= 2 * d


def _fuse_mlps(graph) -> None:
    """spyre matmul(act) -> (reshapes) -> spyre matmul(none), both 2-D, the
    hidden activation read by the second product only: one mlp op."""
    for down in list(graph.nodes):
        if down.target != MATMUL_OP or down.args[5] != "none" or down.args[3] != 1 or \
                down.args[4] != 1:
            continue
        up = _through_reshapes(down.args[0])
        if not isinstance(up, torch.fx.Node) or up.target != MATMUL_OP or \
                up.args[5] == "none" or up.args[3] != 1 or up.args[4] != 1:
            continue
        chain, n = [], down.args[0]
        while n is not up:
            chain.append(n)
            n = n.args[0]
        if any(len(c.users) != 1 for c in [up] + chain):
            continue
        if _val(up).dim() != 2 or _val(down).dim() != 2 or not _fused_mlp_pays(up):
            continue
        x, w_up, b_up = up.args[0], up.args[1], up.args[2]
        w_down, b_down = down.args[1], down.args[2]
        fused = _insert(graph, MLP_OP, [x, w_up, b_up, w_down, b_down, up.args[5]], down)
        down.replace_all_uses_with(fused)
    graph.eliminate_dead_code()


# --------------------------------------------------------------------------
# 2. Operands as strided matrices in their storage's device layout
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Piece:
    """`size` steps of one view dim over one storage dim: `dim` (None for a
    broadcast, stride 0), `step` host coordinates per step."""
    size: int
    dim: Optional[int]
    step: int


def _view_dim_pieces(layout: BufferLayout, size: int, stride: int, base: list[int],
                     what: str) -> list[Piece]:
    """Splits one view dim into pieces that each walk one storage dim,
    outermost first (a view dim that merges contiguous storage dims, as
    [B*S, D] of a [B, S, D] buffer, becomes several)."""
    if size == 1:
        return []
    if stride == 0:
        return [Piece(size, None, 0)]
    strides = layout.host_strides
    dims = [d for d in range(layout.rank) if stride % strides[d] == 0 and strides[d] <= stride]
    if not dims:
        raise SpyreLoweringError(f"{what}: view stride {stride} does not follow the dims of "
                                 f"{layout.name} {list(layout.host_sizes)}")
    d = max(dims, key=lambda i: strides[i])
    step = stride // strides[d]
    if base[d] + step * (size - 1) < layout.host_sizes[d]:
        return [Piece(size, d, step)]
    inner = layout.host_sizes[d]
    if step == 1 and base[d] == 0 and size % inner == 0 and d > 0:
        return _view_dim_pieces(layout, size // inner, stride * inner, base, what) + \
            [Piece(inner, d, 1)]
    raise SpyreLoweringError(f"{what}: view dim of size {size}, stride {stride} runs past dim "
                             f"{d} of {layout.name} {list(layout.host_sizes)}")


def _piece_bytes(layout: BufferLayout, piece: Piece, what: str) -> int:
    """Device bytes between consecutive steps of a piece (not along sticks)."""
    if piece.dim is None:
        return 0
    if piece.dim != layout.rank - 1:
        return piece.step * layout.dim_stride_bytes(piece.dim)
    if piece.step % layout.per_stick == 0:
        return (piece.step // layout.per_stick) * layout.stick_stride_bytes
    raise SpyreLoweringError(f"{what}: a matrix row or batch dim steps through the sticks of "
                             f"{layout.name} by {piece.step} elements")


class NeedsRelayout(SpyreLoweringError):
    """The view's columns merge trailing dims of its storage, so in the
    storage's layout they are several sticks apart; in the layout of the same
    storage with those dims merged (`host_sizes`) the view is a matrix."""

    def __init__(self, message: str, host_sizes: tuple):
        super().__init__(message)
        self.host_sizes = host_sizes


def _merged_stick_layout(layout: BufferLayout, size, stride) -> Optional[tuple]:
    """Host sizes of `layout` with its trailing dims merged into one stick dim
    of the view's column count, when the view's columns are contiguous and
    cover exactly those dims; None otherwise."""
    cols, col_stride = size[-1], stride[-1]
    if col_stride != 1:
        return None
    acc = 1
    for j in range(layout.rank - 1, -1, -1):
        acc *= layout.host_sizes[j]
        if acc == cols and j < layout.rank - 1:
            return tuple(layout.host_sizes[:j]) + (cols,)
        if acc > cols:
            return None
    return None


@dataclasses.dataclass
class OperandMatrix:
    """A view [batch..., R, C] of a buffer as the kernel library's strided
    Matrix (see spyre/kernels/matrix.h); `transposed` when the view's rows
    run along the sticks (the matrix stored is the view's transpose)."""
    buffer: str
    layout: BufferLayout
    transposed: bool
    offset: int
    row_pieces: list[tuple[int, int]]     # (size, byte stride)
    cols: int
    stick_stride: int
    batch_pieces: list[tuple[int, int]]   # (size, byte stride), outermost first

    def as_tuple(self, batch_pieces=None):
        return (dtype_name(self.layout.dtype), self.offset, self.row_pieces, self.cols,
                self.stick_stride, list(batch_pieces if batch_pieces is not None
                                         else self.batch_pieces))


def operand_matrix(buffer: str, layout: BufferLayout, size, stride, offset: int,
                   what: str) -> OperandMatrix:
    """The view (size, stride, offset) of `buffer`'s storage, whose last two
    dims are the matrix, as a strided matrix in the device layout."""
    if layout.rank == 0:
        raise SpyreLoweringError(f"{what}: {buffer} is a scalar")
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    numel = math.prod(layout.host_sizes)
    if offset < 0 or offset >= numel:
        raise SpyreLoweringError(f"{what}: storage offset {offset} outside {buffer}")
    base = [(offset // layout.host_strides[d]) % layout.host_sizes[d]
            for d in range(layout.rank)]
    byte_offset, e0 = layout.offset_bytes(base)
    if e0 != 0:
        raise SpyreLoweringError(f"{what}: the view of {buffer} starts inside a stick "
                                 f"(element {e0}); the matrix unit reads whole sticks")
    pieces = [_view_dim_pieces(layout, n, s, base, what) for n, s in zip(size, stride)]
    stick_dim = layout.rank - 1
    along = [all(p.dim == stick_dim and p.step == 1 for p in ps) and len(ps) == 1
             for ps in pieces[-2:]]
    if len(size) < 2:
        raise SpyreLoweringError(f"{what}: {buffer} view {size} is not a matrix")
    if along[1]:
        transposed, row_ps, col_ps = False, pieces[-2], pieces[-1]
    elif along[0]:
        transposed, row_ps, col_ps = True, pieces[-1], pieces[-2]
    else:
        message = (f"{what}: neither matrix dim of the view {size} / {stride} walks the "
                   f"sticks of {buffer} {list(layout.host_sizes)}")
        merged = _merged_stick_layout(layout, size, stride)
        if merged is not None:
            raise NeedsRelayout(message, merged)
        raise SpyreLoweringError(message)
    rows = [(p.size, _piece_bytes(layout, p, what)) for p in row_ps]
    batch = [(p.size, _piece_bytes(layout, p, what)) for ps in pieces[:-2] for p in ps]
    return OperandMatrix(buffer, layout, transposed, byte_offset, rows, col_ps[0].size,
                         layout.stick_stride_bytes, batch)


def common_batch_pieces(operands: list[list[tuple[int, int]]], what: str):
    """Splits each operand's batch pieces at the union of all operands'
    boundaries so all list the same sizes (the builder's contract)."""
    totals = {math.prod(n for n, _ in ps) for ps in operands}
    if len(totals) != 1:
        raise SpyreLoweringError(f"{what}: operands disagree on the batch count {totals}")

    def bounds(ps):  # cumulative products from the innermost piece
        out, acc = {1}, 1
        for n, _ in reversed(ps):
            acc *= n
            out.add(acc)
        return out
    cuts = sorted(set().union(*(bounds(ps) for ps in operands)))
    for lo, hi in zip(cuts, cuts[1:]):
        if hi % lo:
            raise SpyreLoweringError(f"{what}: batch dims of the operands do not nest")
    result = []
    for ps in operands:
        split, acc = [], 1
        for n, s in reversed(ps):
            inner_cuts = [c for c in cuts if acc < c < acc * n]
            prev = acc
            for c in inner_cuts + [acc * n]:
                split.append((c // prev, s * (prev // acc)))
                prev = c
            acc *= n
        result.append(list(reversed(split)))
    return result


# --------------------------------------------------------------------------
# 3. The program of one extern matmul node
# --------------------------------------------------------------------------

def _view_of(ir_node):
    """(buffer name, size, stride, offset) of an extern kernel's input."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V
    sizevars = V.graph.sizevars
    if isinstance(ir_node, ir.ReinterpretView):
        lay = ir_node.layout
        name = ir_node.data.get_name()
    else:
        lay = ir_node.get_layout()
        name = ir_node.get_name()
    ints = [sizevars.guard_int(s) for s in lay.size]
    strides = [sizevars.guard_int(s) for s in lay.stride]
    return name, ints, strides, sizevars.guard_int(lay.offset)


def output_layout(name: str, dtype, size) -> BufferLayout:
    return BufferLayout(name, dtype, tuple(int(s) for s in size if s != 1))


def wanted_stick_layout(ir_node):
    """(buffer, host sizes) of the merged stick layout a product would read
    `ir_node` in without a re-layout, or (buffer, None) when it reads the
    buffer's current layout as it is."""
    name, size, stride, offset = _view_of(ir_node)
    try:
        operand_matrix(name, buffer_layout(name), size, stride, offset, "layout assignment")
    except NeedsRelayout as need:
        return name, need.host_sizes
    return name, None


def _input_operand(ir_node, what: str, kernel_name: str, relayouts: list) -> OperandMatrix:
    """An input view as a matrix; when its columns merge sticks of its
    storage's layout, a copy in the merged layout (appended to `relayouts`)."""
    name, size, stride, offset = _view_of(ir_node)
    try:
        return operand_matrix(name, buffer_layout(name), size, stride, offset, what)
    except NeedsRelayout as need:
        # producer and consumer disagree on the stick dim: a copy of the
        # storage in the layout the product reads (same host image)
        copy = f"{name}_sticks_{len(relayouts)}_{kernel_name}"
        layout = BufferLayout(copy, buffer_layout(name).dtype, need.host_sizes)
        relayouts.append(Relayout(name, copy, need.host_sizes))
        return operand_matrix(copy, layout, size, stride, offset, what)


def _output_operand(out_name: str, dtype, out_size: list, what: str) -> OperandMatrix:
    strides = [math.prod(out_size[i + 1:]) for i in range(len(out_size))]
    c = operand_matrix(out_name, output_layout(out_name, dtype, out_size), out_size, strides,
                       0, f"{what}: output")
    if c.transposed:
        raise SpyreLoweringError(f"{what}: an output with one column is stored along sticks")
    return c


def _bias_operand(ir_node, out_size: list, dtype, what: str) -> OperandMatrix:
    """The bias view broadcast (stride 0) to `out_size`."""
    name, bsize, bstride, offset = _view_of(ir_node)
    pad = len(out_size) - len(bsize)
    bsize, bstride = [1] * pad + bsize, [0] * pad + bstride
    stride = [0 if n == 1 else s for n, s in zip(bsize, bstride)]
    bias = operand_matrix(name, buffer_layout(name), list(out_size), stride, offset,
                          f"{what}: bias")
    if bias.transposed or bias.layout.dtype != dtype:
        raise SpyreLoweringError(f"{what}: the bias must be stored along its columns in the "
                                 "output's dtype")
    return bias


def build_mlp_program(kernel_name: str, x_in, w_up_in, b_up_in, w_down_in, b_down_in,
                      out_name: str, out_size, dtype, activation: str,
                      device: Optional[int], max_cores: Optional[int]):
    """The fused MLP program (kernel library's build_mlp): x [M, D] @ w_up
    [D, H] (+ b_up) -> activation -> @ w_down [H, E] (+ b_down), the
    intermediate resident in the scratchpads."""
    from .. import _C
    what = kernel_name
    relayouts = []
    x = _input_operand(x_in, f"{what}: x", kernel_name, relayouts)
    w_up = _input_operand(w_up_in, f"{what}: w_up", kernel_name, relayouts)
    w_down = _input_operand(w_down_in, f"{what}: w_down", kernel_name, relayouts)
    out_size = [int(s) for s in out_size]
    y = _output_operand(out_name, dtype, out_size, what)
    if x.transposed or x.batch_pieces or y.batch_pieces:
        raise SpyreLoweringError(f"{what}: the fused MLP takes a 2-d x stored by rows")
    b_up = None if b_up_in is None else _bias_operand(
        b_up_in, [1, _view_of(w_up_in)[1][-1]], dtype, f"{what}: b_up")
    b_down = None if b_down_in is None else _bias_operand(
        b_down_in, [1, out_size[-1]], dtype, f"{what}: b_down")
    mats = [x, w_up, w_down, y] + [m for m in (b_up, b_down) if m is not None]
    try:
        spec, plan = _C.build_mlp(*[m.as_tuple() for m in (x, w_up, w_down, y)],
                                  b_up=b_up.as_tuple() if b_up else None,
                                  b_down=b_down.as_tuple() if b_down else None,
                                  w_up_transposed=w_up.transposed,
                                  w_down_transposed=w_down.transposed,
                                  activation=activation,
                                  device=-1 if device is None else device,
                                  max_cores=max_cores)
    except _C.KernelBuildError as e:
        raise SpyreLoweringError(f"{what}: the fused MLP does not fit: {e}") from e
    for slot, m in enumerate(mats):
        spec.set_arg(slot, m.buffer, list(m.layout.device_size))
    info = dict(kind="mlp", plan=plan, activation=activation, cores=spec.num_cores,
                instructions=spec.instruction_count,
                transposed=[w_up.transposed, w_down.transposed], relayouts=relayouts)
    return spec, [m.buffer for m in mats], info


def build_matmul_program(kernel_name: str, a_in, b_in, bias_in, out_name: str, out_size,
                         dtype, alpha: float, beta: float, activation: str,
                         device: Optional[int], max_cores: Optional[int],
                         naive: bool = False):
    """The device program of activation(alpha * a @ b + beta * bias) into a
    fresh contiguous output `out_name` of `out_size`. Inputs are Inductor IR
    nodes. Returns (_C.Program, argument buffer names in slot order, info)."""
    from .. import _C
    what = kernel_name
    relayouts = []
    a = _input_operand(a_in, f"{what}: operand a", kernel_name, relayouts)
    b = _input_operand(b_in, f"{what}: operand b", kernel_name, relayouts)
    out_size = [int(s) for s in out_size]
    c = _output_operand(out_name, dtype, out_size, what)
    bias = None if bias_in is None else _bias_operand(bias_in, out_size, dtype, what)
    mats = [a, b, c] + ([bias] if bias else [])
    batches = common_batch_pieces([m.batch_pieces for m in mats], what)
    tuples = [m.as_tuple(bp) for m, bp in zip(mats, batches)]
    try:
        spec, plan = _C.build_matmul(tuples[0], tuples[1], tuples[2],
                                     tuples[3] if bias else None,
                                     a_transposed=a.transposed, b_transposed=b.transposed,
                                     alpha=alpha, beta=beta, activation=activation,
                                     device=-1 if device is None else device,
                                     max_cores=max_cores, naive=naive)
    except _C.KernelBuildError as e:
        # no tile fits the scratchpad: a compile error, never a wrong program
        raise SpyreKernelTooLarge(f"{what}: {e}") from e
    arg_names = [m.buffer for m in mats]
    for slot, m in enumerate(mats):
        spec.set_arg(slot, m.buffer, list(m.layout.device_size))
    info = dict(kind="matmul", plan=plan, activation=activation, cores=spec.num_cores,
                instructions=spec.instruction_count,
                transposed=[a.transposed, b.transposed], relayouts=relayouts)
    return spec, arg_names, info


@dataclasses.dataclass(frozen=True)
class Relayout:
    """`source`'s storage copied into a fresh storage `copy` whose device
    layout is the default one of `host_sizes` (the same host image)."""
    source: str
    copy: str
    host_sizes: tuple


def lower_extern_product(wrapper, node) -> bool:
    """Writes the launch of a spyre_inductor::matmul extern node's device
    program into the compiled module (the program itself into its header);
    False, counted, when the op must run its eager form instead."""
    from torch._inductor.virtualized import V

    from . import config
    args, kwargs = node.unflatten_args(node.inputs, node.constant_args)
    bound = node.op_overload._schema
    values = list(args) + [kwargs[a.name] for a in bound.arguments[len(args):]]
    out = node.outputs[0]
    sizevars = V.graph.sizevars
    size = [sizevars.guard_int(s) for s in out.get_size()]
    stride = [sizevars.guard_int(s) for s in out.get_stride()]
    out_name = node.get_name()
    kernel_name = new_kernel_name(out_name)
    device = out.get_device().index  # None: the current spyre device
    try:
        if stride != [math.prod(size[i + 1:]) for i in range(len(size))]:
            raise SpyreLoweringError(f"{kernel_name}: the output {size} / {stride} is not "
                                     "contiguous")
        if node.op_overload == MLP_OP:
            x, w_up, b_up, w_down, b_down, activation = values
            spec, arg_names, info = build_mlp_program(
                kernel_name, x, w_up, b_up, w_down, b_down, out_name, size, out.get_dtype(),
                activation, device, config.max_cores)
        else:
            a, b, bias, alpha, beta, activation = values
            spec, arg_names, info = build_matmul_program(
                kernel_name, a, b, bias, out_name, size, out.get_dtype(), float(alpha),
                float(beta), activation, device, config.max_cores,
                naive=not config.matmul_tiling)
    except SpyreLoweringError as e:
        if isinstance(e, SpyreKernelTooLarge):
            raise
        count_fallback(str(e).split(": ", 1)[-1])
        return False
    info.update(nodes=[out_name])
    define_kernel(wrapper, kernel_name, spec, arg_names, info)
    for r in info["relayouts"]:
        _write_relayout(wrapper, r, out.get_device())
    wrapper.writeline(wrapper.make_allocation(out_name, out.get_device(), out.get_dtype(),
                                              tuple(size), tuple(stride)))
    wrapper.writeline(f"{kernel_name}.launch([{', '.join(arg_names)}])")
    for r in info["relayouts"]:
        wrapper.writeline(f"del {r.copy}")
    return True


def _write_relayout(wrapper, r: Relayout, device) -> None:
    """Allocates the copy in its layout and copies the source into it: a
    device program of the pointwise lowering (an identity kernel from the
    source's layout into the copy's), or the eager copy when that lowering
    cannot store the copy's sticks."""
    from torch._inductor.virtualized import V
    source = V.graph.get_buffer(r.source)
    sizes = [V.graph.sizevars.guard_int(n) for n in source.get_size()]
    host = list(r.host_sizes)
    strides = [math.prod(host[i + 1:]) for i in range(len(host))]
    wrapper.writeline(wrapper.make_allocation(r.copy, device, source.get_dtype(), tuple(host),
                                              tuple(strides)))
    program = _relayout_program(r, source.get_dtype(), device.index)
    if program is None:
        wrapper.writeline(f"{r.copy}.view({tuple(sizes)}).copy_({r.source})")
    else:
        name = new_kernel_name(r.copy)
        spec, arg_names, info = program
        info.update(kind="relayout", nodes=[r.copy])
        define_kernel(wrapper, name, spec, arg_names, info)
        wrapper.writeline(f"{name}.launch([{', '.join(arg_names)}])")
    count_relayout()


def _relayout_program(r: Relayout, dtype, device: Optional[int]):
    """(spec, args, info) of an identity kernel over the source's
    memory-order dims storing into the copy's layout, built for spyre
    device `device` (None: the current one); None when the lowering rejects
    it."""
    import sympy

    from .capture import CapturedNode, Store, Value
    from .layouts import add_wrapper_buffer
    add_wrapper_buffer(BufferLayout(r.copy, dtype, tuple(r.host_sizes)))
    dims = list(buffer_layout(r.source).host_sizes)
    index_vars = [sympy.Symbol(f"sp{i}", integer=True, nonnegative=True)
                  for i in range(len(dims))]
    index = sum(v * math.prod(dims[i + 1:]) for i, v in enumerate(index_vars))
    node = CapturedNode(f"relayout_{r.copy}", dims, [], index_vars, [],
                        [Store(r.copy, index, Value("load", (r.source, index), dtype))])
    try:
        return lower_kernel(check_group(f"relayout {r.source}", [node], removable=set()), device)
    except SpyreLoweringError:
        return None
