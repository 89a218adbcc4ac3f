"""Lowering of captured (fused) nodes to one device program.

Iteration space of a kernel, shared by all its nodes:
  outer vars  fixed inside a block, walked block by block;
  row var     a block holds a range of it (the tile's rows), split across
              cores;
  col var     a block holds all of it (the tile's columns): the last
              pointwise dim of a pointwise node, the reduced dim of a
              reduction.
A block loads, for every buffer access, the box of whole sticks it needs
into the scratchpad (stick-granular 3-D DMA), runs one Vector/Reduce
instruction per op on tiles whose strides express the access (0 for a
broadcast), and stores each output box back. Values produced and consumed
inside the kernel stay in the scratchpad. Blocks of one core alternate
between two scratchpad regions (double buffering), each planned by liveness.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Optional

import sympy
import torch

from .. import _C
from .capture import CapturedNode, Reduction, SpyreKernelTooLarge, SpyreLoweringError, Store, Value
from .layouts import (DTYPE_NAMES, STICK_BYTES, Access, BufferLayout, analyze_access, buffer_layout,
                      dtype_name)

NUM_CORES = 32
SCRATCHPAD_BYTES = 2 << 20
SCRATCHPAD_RESERVE = 64 << 10  # kept by the device software (HARDWARE.md)

VecOp = _C.VecOp
RedOp = _C.RedOp

UNARY = {
    "neg": VecOp.neg, "abs": VecOp.abs, "exp": VecOp.exp, "log": VecOp.log,
    "sqrt": VecOp.sqrt, "rsqrt": VecOp.rsqrt, "reciprocal": VecOp.recip,
    "tanh": VecOp.tanh, "sigmoid": VecOp.sigmoid, "relu": VecOp.relu, "erf": VecOp.erf,
    "sin": VecOp.sin, "cos": VecOp.cos, "floor": VecOp.floor,
    "logical_not": VecOp.logical_not, "identity": VecOp.copy,
}
BINARY = {
    "add": VecOp.add, "sub": VecOp.sub, "mul": VecOp.mul, "truediv": VecOp.div,
    "div": VecOp.div, "maximum": VecOp.max, "minimum": VecOp.min, "pow": VecOp.pow,
    "eq": VecOp.eq, "ne": VecOp.ne, "lt": VecOp.lt, "le": VecOp.le, "gt": VecOp.gt,
    "ge": VecOp.ge, "logical_and": VecOp.logical_and, "logical_or": VecOp.logical_or,
    "and_": VecOp.logical_and, "or_": VecOp.logical_or,
}
REDUCE = {"sum": RedOp.sum, "max": RedOp.max, "min": RedOp.min, "prod": RedOp.prod,
          "argmax": RedOp.argmax, "argmin": RedOp.argmin}
COMMUTATIVE = {"add", "mul", "maximum", "minimum", "eq", "ne", "logical_and", "logical_or",
               "and_", "or_"}


# --------------------------------------------------------------------------
# Roles: the kernel's shared iteration space
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Space:
    outer: list[tuple[sympy.Symbol, int]]
    row: Optional[tuple[sympy.Symbol, int]]
    col: Optional[tuple[sympy.Symbol, int]]
    # reduced dims besides the col dim, walked inside a block with
    # accumulating reductions (one node's; not part of the signature)
    red_outer: list = dataclasses.field(default_factory=list)
    # after a column split: valid cols of the last row (None: all rows full)
    col_tail: Optional[int] = None

    @property
    def rows(self) -> int:
        return self.row[1] if self.row else 1

    @property
    def cols(self) -> int:
        return self.col[1] if self.col else 1

    def signature(self):
        return ([n for _, n in self.outer], self.rows, self.cols)

    def ranges(self) -> dict:
        out = {v: n for v, n in self.outer}
        if self.row:
            out[self.row[0]] = self.row[1]
        if self.col:
            out[self.col[0]] = self.col[1]
        for v, n in self.red_outer:
            out[v] = n
        return out


def _role_symbols(count: int):
    outer = [sympy.Symbol(f"o{i}", integer=True, nonnegative=True) for i in range(count)]
    return outer, sympy.Symbol("rw", integer=True, nonnegative=True), \
        sympy.Symbol("cl", integer=True, nonnegative=True)


def node_space(node: CapturedNode) -> tuple[Space, dict]:
    """The node's space in role symbols and the substitution from its own
    iteration variables to them."""
    red_outer = []
    if node.is_reduction:
        sizes = node.sizes
        own_outer = node.index_vars[:-1]
        own_row = node.index_vars[-1:] if sizes else []
        own_col = node.reduce_vars[-1:]
        col_size = node.reduction_sizes[-1]
        red_outer = list(zip(node.reduce_vars[:-1], node.reduction_sizes[:-1]))
        row_size = sizes[-1] if sizes else None
        outer_sizes = sizes[:-1]
    else:
        sizes = node.sizes
        own_col = node.index_vars[-1:]
        col_size = sizes[-1] if sizes else None
        own_row = node.index_vars[-2:-1]
        row_size = sizes[-2] if len(sizes) >= 2 else None
        own_outer = node.index_vars[:-2]
        outer_sizes = sizes[:-2]
    outer, rw, cl = _role_symbols(len(own_outer))
    subs = dict(zip(own_outer, outer))
    if own_row:
        subs[own_row[0]] = rw
    if own_col:
        subs[own_col[0]] = cl
    red_syms = [sympy.Symbol(f"ro{i}", integer=True, nonnegative=True)
                for i in range(len(red_outer))]
    for (v, _), sym in zip(red_outer, red_syms):
        subs[v] = sym
    space = Space(list(zip(outer, outer_sizes)),
                  (rw, row_size) if own_row else None,
                  (cl, col_size) if own_col else None,
                  [(sym, n) for sym, (_, n) in zip(red_syms, red_outer)])
    return space, subs


# --------------------------------------------------------------------------
# Kernel description: nodes rewritten in role symbols
# --------------------------------------------------------------------------

@dataclasses.dataclass
class KernelPlan:
    name: str
    space: Space
    nodes: list[CapturedNode]
    subs: list[dict]
    stored: list[str]        # buffers written to device memory
    internal: set            # buffers produced and consumed only inside
    produced: dict           # buffer -> (node index, store)
    node_spaces: list = dataclasses.field(default_factory=list)

    def ranges(self, node_i: int) -> dict:
        return self.node_spaces[node_i].ranges()

    def joint_extent(self) -> dict | None:
        sp = self.space
        if sp.col_tail is None:
            return None
        return {(sp.row[0], sp.col[0]): (sp.rows - 1) * sp.cols + sp.col_tail - 1}


def _renamed(expr, subs):
    return sympy.expand(sympy.sympify(expr).xreplace(subs))


# Pointwise kernels with longer rows walk them in chunks of COL_CHUNK elements
# (a multiple of every dtype's elements per stick): the col var c becomes
# COL_CHUNK * q + k, q a row var, so long rows spread over cores and blocks.
COL_SPLIT_THRESHOLD = 8192
COL_CHUNK = 4096


def _split_cols(space: Space, subs):
    q = sympy.Symbol("cq", integer=True, nonnegative=True)
    k = sympy.Symbol("ck", integer=True, nonnegative=True)
    cl = space.col[0]
    chunks = -(-space.cols // COL_CHUNK)
    outer = list(space.outer) + ([space.row] if space.row else [])
    new_space = Space(outer, (q, chunks), (k, COL_CHUNK), [],
                      col_tail=space.cols - (chunks - 1) * COL_CHUNK)
    new_subs = []
    for sub in subs:
        sub = dict(sub)
        for own, role in list(sub.items()):
            if role == cl:
                sub[own] = COL_CHUNK * q + k
        new_subs.append(sub)
    return new_space, new_subs


# Reductions over rows longer than this walk them in chunks of a divisor of
# the row (accumulating Reduce instructions), so a block fits the scratchpad.
RED_SPLIT_THRESHOLD = 32768
RED_CHUNK_RANGE = (1024, 8192)


def _reduction_chunk(n: int) -> Optional[int]:
    """The largest divisor of n in RED_CHUNK_RANGE, preferring whole sticks."""
    lo, hi = RED_CHUNK_RANGE
    divisors = [c for c in range(hi, lo - 1, -1) if n % c == 0]
    whole = [c for c in divisors if c % 64 == 0]
    return (whole or divisors or [None])[0]


def _split_reduced_cols(spaces, subs, chunk: int):
    """Each node's reduced (col) var c of size n becomes chunk * q + k: q an
    accumulated outer reduced var, k the col var of one chunk."""
    q = sympy.Symbol("rq", integer=True, nonnegative=True)
    new_spaces, new_subs = [], []
    for space, sub in zip(spaces, subs):
        cl = space.col[0]
        new_spaces.append(Space(list(space.outer), space.row, (cl, chunk),
                                [(q, space.cols // chunk)]))
        sub = dict(sub)
        for own, role in list(sub.items()):
            if role == cl:
                sub[own] = chunk * q + cl
        new_subs.append(sub)
    return new_spaces, new_subs


def check_group(name: str, nodes: list[CapturedNode], removable: set) -> KernelPlan:
    """Checks that the nodes share one space; raises SpyreLoweringError
    otherwise (the scheduler then keeps them in separate kernels)."""
    spaces, subs = zip(*(node_space(n) for n in nodes))
    space = spaces[0]
    for n, s in zip(nodes, spaces):
        if s.signature() != space.signature():
            raise SpyreLoweringError(
                f"{name}: {n.name} iterates {s.signature()} but {nodes[0].name} "
                f"{space.signature()}; they cannot share a device program")
    if space.cols > COL_SPLIT_THRESHOLD and not any(n.is_reduction for n in nodes):
        space, subs = _split_cols(space, subs)
        spaces = [space] * len(nodes)
    elif space.cols > RED_SPLIT_THRESHOLD and all(n.is_reduction for n in nodes) and \
            not any(s.red_outer for s in spaces) and _reduction_chunk(space.cols):
        spaces, subs = _split_reduced_cols(spaces, subs, _reduction_chunk(space.cols))
        space = spaces[0]
    produced = {}
    for i, n in enumerate(nodes):
        for st in n.stores:
            produced[st.buffer] = (i, st)
    internal = {b for b in produced if b in removable}
    stored = [b for b in produced if b not in internal]
    plan = KernelPlan(name, space, list(nodes), list(subs), stored, internal, produced,
                      list(spaces))
    # In-kernel reads must see the producer's element at the same place.
    for i, n in enumerate(nodes):
        for load in _loads(n):
            buf, index = load.args
            if buf in produced and produced[buf][0] < i:
                j, st = produced[buf]
                if _renamed(index, subs[i]) != _renamed(st.index, subs[j]):
                    raise SpyreLoweringError(
                        f"{name}: {n.name} reads {buf} at {index}, not where {nodes[j].name} "
                        "wrote it; they cannot share a device program")
    return plan


def _walk(value, seen):
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    for a in value.args:
        if isinstance(a, Value):
            yield from _walk(a, seen)
        elif isinstance(a, Reduction):
            yield from _walk(a.value, seen)


def _loads(node: CapturedNode):
    seen = set()
    for st in node.stores:
        for v in _walk(st.value, seen):
            if v.op == "load":
                yield v


# --------------------------------------------------------------------------
# The kernel description the kernel library builds the program from
# (spyre/kernels/loop_kernel.h): plain data, so it serialises as JSON
# --------------------------------------------------------------------------

# Inductor op names -> the description's unary / binary op names (VecOp names;
# exp2, expm1, log1p, ceil and square the builder composes)
UNARY_OPS = {
    "neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "reciprocal": "recip", "tanh": "tanh", "sigmoid": "sigmoid",
    "relu": "relu", "erf": "erf", "sin": "sin", "cos": "cos", "floor": "floor",
    "logical_not": "logical_not", "identity": "copy", "exp2": "exp2", "expm1": "expm1",
    "log1p": "log1p", "ceil": "ceil", "square": "square",
}
BINARY_OPS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "div": "div",
    "maximum": "max", "minimum": "min", "pow": "pow", "eq": "eq", "ne": "ne", "lt": "lt",
    "le": "le", "gt": "gt", "ge": "ge", "logical_and": "logical_and",
    "logical_or": "logical_or", "and_": "logical_and", "or_": "logical_or",
}


def kernel_args(plan: KernelPlan) -> list[str]:
    """The kernel's argument buffers in slot order: what it loads from device
    memory, then what it stores there."""
    loads = []
    for node in plan.nodes:
        for ld in _loads(node):
            b = ld.args[0]
            if b not in plan.produced and b not in loads:
                loads.append(b)
    return loads + [b for b in plan.stored if b not in loads]


def _describe_buffer(name: str, is_output: bool) -> dict:
    lay = buffer_layout(name)
    return dict(name=name, dtype=dtype_name(lay.dtype), device_bytes=lay.device_bytes,
                is_output=is_output, device_size=list(lay.device_size),
                host_sizes=list(lay.host_sizes),
                stick_stride_bytes=lay.stick_stride_bytes if lay.rank else 0,
                dim_stride_bytes=[lay.dim_stride_bytes(d) if d != lay.rank - 1 else 0
                                  for d in range(lay.rank)])


def describe_kernel(plan: KernelPlan) -> dict:
    """The plan as a loop kernel description: accesses and index expressions
    resolved (sympy stays here), ops in SSA form. Raises SpyreLoweringError
    for what the description cannot express."""
    space = plan.space

    def roles_of(ns: Space) -> dict:
        roles = {v: ("outer", k) for k, (v, _) in enumerate(ns.outer)}
        roles.update({v: ("reduced", k) for k, (v, _) in enumerate(ns.red_outer)})
        if ns.row:
            roles[ns.row[0]] = ("row", 0)
        if ns.col:
            roles[ns.col[0]] = ("col", 0)
        return roles
    node_roles = [roles_of(ns) for ns in plan.node_spaces]
    args = kernel_args(plan)

    def access(node_i, buf, index, what):
        acc = analyze_access(buffer_layout(buf), _renamed(index, plan.subs[node_i]),
                             plan.ranges(node_i), f"{plan.name}: {what} {buf}",
                             plan.joint_extent())
        return dict(base=list(acc.base),
                    vars=[[*node_roles[node_i][v], m.dim, m.step] for v, m in acc.vars.items()])

    ops, ids = [], {}

    def visit(v: Value, node_i: int) -> int:
        if id(v) in ids:
            return ids[id(v)]
        value_args = [visit(a.value if isinstance(a, Reduction) else a, node_i)
                      for a in v.args if isinstance(a, (Value, Reduction))]
        op = dict(node=node_i, args=value_args)
        name = v.op[len("libdevice_"):] if v.op.startswith("libdevice_") else v.op
        compute = "bool" if v.dtype == torch.bool else "float32"
        if v.op == "load":
            buf, index = v.args
            op.update(op="load", buffer=buf)
            if not (buf in plan.produced and plan.produced[buf][0] < node_i):
                op["access"] = access(node_i, buf, index, "load")
        elif v.op == "constant":
            op.update(op="constant", value=float(v.args[0]), dtype=compute)
        elif v.op == "index_expr":
            expr = _renamed(v.args[0], plan.subs[node_i])
            terms = [[*node_roles[node_i][s], int(expr.coeff(s))]
                     for s in sorted(expr.free_symbols & node_roles[node_i].keys(), key=str)]
            rest = sympy.expand(expr - sum((expr.coeff(s) * s for s in node_roles[node_i]),
                                           sympy.Integer(0)))
            if rest.free_symbols or not rest.is_Integer or \
                    not all(isinstance(expr.coeff(s), sympy.Integer) for s in node_roles[node_i]):
                raise SpyreLoweringError(f"{plan.name}: index expression {expr} is not affine")
            op.update(op="index", terms=terms, constant=int(rest))
        elif v.op == "to_dtype":
            op.update(op="to_dtype", dtype=DTYPE_NAMES.get(v.dtype),
                      to_float=v.dtype in (torch.float32, torch.float64))
        elif v.op == "reduction":
            red = v.args[0]
            op.update(op="reduction", name=red.reduction_type, part=red.part)
        elif name in UNARY_OPS:
            op.update(op="unary", name=UNARY_OPS[name])
        elif name in BINARY_OPS:
            op.update(op="binary", name=BINARY_OPS[name], dtype=compute)
        elif name == "where":
            op.update(op="select", dtype=compute)
        else:
            raise SpyreLoweringError(f"{plan.name}: op {v.op!r} has no device lowering")
        ops.append(op)
        ids[id(v)] = len(ops) - 1
        return ids[id(v)]

    stores = []
    for node_i, node in enumerate(plan.nodes):
        for st in node.stores:
            stores.append(dict(node=node_i, value=visit(st.value, node_i), buffer=st.buffer,
                               access=access(node_i, st.buffer, st.index, "store")
                               if st.buffer in plan.stored else None))
    return dict(
        name=plan.name, outer=[n for _, n in space.outer],
        rows=space.row[1] if space.row else None, cols=space.col[1] if space.col else None,
        col_tail=space.col_tail,
        nodes=[dict(reduced_outer=[n for _, n in ns.red_outer]) for ns in plan.node_spaces],
        buffers=[_describe_buffer(b, b in plan.stored) for b in args],
        ops=ops, stores=stores)


def build_kernel(plan: KernelPlan, device: Optional[int] = None):
    """The plan's program, built by the kernel library for `device` (None:
    the current spyre device). Returns (ProgramSpec, argument buffer names
    in slot order, info)."""
    from . import config
    description = describe_kernel(plan)
    try:
        spec, info = _C.build_loop_kernel(
            description, -1 if device is None else device, max_cores=config.max_cores,
            double_buffer=config.double_buffer)
    except _C.LoopKernelTooLarge as e:
        raise SpyreKernelTooLarge(str(e)) from None
    except _C.KernelBuildError as e:
        raise SpyreLoweringError(str(e)) from None
    return spec, [b["name"] for b in description["buffers"]], info


# --------------------------------------------------------------------------
# Scratchpad: liveness-based allocation inside one block region
# --------------------------------------------------------------------------

class RegionAllocator:
    """First-fit allocator of stick-aligned ranges with frees; records the
    peak so a dry run sizes the region."""

    def __init__(self):
        self.free_list: list[tuple[int, int]] = []  # (offset, size)
        self.top = 0
        self.peak = 0

    def alloc(self, nbytes: int) -> int:
        nbytes = max(STICK_BYTES, -(-nbytes // STICK_BYTES) * STICK_BYTES)
        for i, (off, size) in enumerate(self.free_list):
            if size >= nbytes:
                if size == nbytes:
                    self.free_list.pop(i)
                else:
                    self.free_list[i] = (off + nbytes, size - nbytes)
                return off
        off = self.top
        self.top += nbytes
        self.peak = max(self.peak, self.top)
        return off

    def free(self, off: int, nbytes: int):
        nbytes = max(STICK_BYTES, -(-nbytes // STICK_BYTES) * STICK_BYTES)
        self.free_list.append((off, nbytes))
        self.free_list.sort()
        merged = []
        for o, s in self.free_list:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        if merged and merged[-1][0] + merged[-1][1] == self.top:
            self.top = merged[-1][0]
            merged.pop()
        self.free_list = merged


# --------------------------------------------------------------------------
# Tiles and boxes
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Tile:
    offset: int
    dtype: torch.dtype
    row_stride: int
    col_stride: int
    has_rows: bool
    has_cols: bool
    alloc: Optional[tuple[int, int]] = None  # (offset, bytes) to free

    def t(self, base: int):
        return (base + self.offset, dtype_name(self.dtype), self.row_stride, self.col_stride)


@dataclasses.dataclass
class Box:
    """The sticks of one buffer access for one block, as DMA transfers."""
    bytes: int
    transfers: list[dict]  # dma kwargs with spad relative to the box start
    elem_offset: int       # byte offset of element (0, 0) inside the box
    row_stride: int
    col_stride: int
    has_rows: bool
    has_cols: bool
    # "row"/"col": the var walking the sticks; "joint": rows and cols tiling
    # one stick run together; "joint_lins": the same, one run per point of
    # the other dims (no padding fill)
    stick_var: Optional[str]
    stick_count: int
    valid: int             # elements of the stick var in this box


def make_box(access: Access, space: Space, fixed: dict, r0: int, nrows: int,
             ncols: int, slot: int, worst_alignment: bool = False) -> Box:
    lay = access.layout
    es, per_stick = lay.element_size, lay.per_stick
    coords = list(access.base)
    for v, m in access.vars.items():
        if v in fixed:
            coords[m.dim] += m.step * fixed[v]
    row_v = space.row[0] if space.row else None
    col_v = space.col[0] if space.col else None
    if row_v in access.vars:
        m = access.vars[row_v]
        coords[m.dim] += m.step * r0
    dram_offset, e0 = lay.offset_bytes(coords)
    lins, sticks = [], []  # lins: (role, count, dram stride); sticks: (role, count, step)
    for role, v, n in (("row", row_v, nrows), ("col", col_v, ncols)):
        if v is None or v not in access.vars:
            continue
        m = access.vars[v]
        if m.dim == lay.rank - 1 and m.step % per_stick != 0:
            sticks.append((role, n, m.step))
        elif m.dim == lay.rank - 1:
            lins.append((role, n, (m.step // per_stick) * lay.stick_stride_bytes))
        else:
            lins.append((role, n, m.step * lay.dim_stride_bytes(m.dim)))
    if sticks:
        first = per_stick - 1 if worst_alignment else e0
        last = first + sum(step * (n - 1) for _, n, step in sticks)
        n_sticks = last // per_stick + 1
    else:
        n_sticks = 1
    inner = n_sticks * STICK_BYTES  # bytes of the stick run of one lin point
    spad_strides = {}
    size = inner
    for role, n, _ in reversed(lins):
        spad_strides[role] = size
        size *= n
    strides = {role: spad_strides.get(role, 0) for role in ("row", "col")}
    for role, _, step in sticks:
        strides[role] = step * es
    transfers = []
    sticks_contiguous = n_sticks == 1 or lay.stick_stride_bytes == STICK_BYTES
    run = dict(run_bytes=inner, count1=1, dram_stride1=0, spad_stride1=0) if sticks_contiguous \
        else dict(run_bytes=STICK_BYTES, count1=n_sticks, dram_stride1=lay.stick_stride_bytes,
                  spad_stride1=STICK_BYTES)
    if not lins:
        transfers.append(dict(slot=slot, offset=dram_offset, spad=0, **run))
    elif len(lins) == 1:
        _, n, ds = lins[0]
        transfers.append(dict(slot=slot, offset=dram_offset, spad=0, count2=n, dram_stride2=ds,
                              spad_stride2=inner, **run))
    elif sticks_contiguous:
        (_, n1, ds1), (_, n2, ds2) = lins
        # one transfer: count1 walks the inner lin dim, count2 the outer
        transfers.append(dict(slot=slot, offset=dram_offset, spad=0, run_bytes=inner,
                              count1=n2, dram_stride1=ds2, spad_stride1=inner,
                              count2=n1, dram_stride2=ds1, spad_stride2=n2 * inner))
    else:
        (_, n1, ds1), (_, n2, ds2) = lins
        for i in range(n1):
            transfers.append(dict(slot=slot, offset=dram_offset + i * ds1, spad=i * n2 * inner,
                                  count2=n2, dram_stride2=ds2, spad_stride2=inner, **run))
    roles = {role for role, _, _ in lins} | {role for role, _, _ in sticks}
    # the padding fill of a store needs one variable along the sticks, or
    # rows and cols that tile them jointly (row step = the cols' extent)
    single = sticks[0] if len(sticks) == 1 and sticks[0][2] == 1 else None
    if single:
        stick_var, valid = single[0], single[1]
    elif _joint_sticks(sticks):
        # "joint_lins": one stick run per point of the other dims; only a
        # run without padding can be stored (no fill per run)
        rows_n, row_step = [(n, st) for r, n, st in sticks if r == "row"][0]
        stick_var, valid = ("joint_lins" if lins else "joint"), rows_n * row_step
    else:
        stick_var, valid = None, 0
    return Box(size, transfers, e0 * es, strides["row"], strides["col"], "row" in roles,
               "col" in roles, stick_var, n_sticks, valid)


def _joint_sticks(sticks) -> bool:
    """Rows stepping by the cols' extent and cols by one element: together
    they walk a contiguous run of the stick dim (a [.., h, d] value stored
    into sticks of h * d)."""
    if len(sticks) != 2:
        return False
    by_role = {role: (n, step) for role, n, step in sticks}
    if set(by_role) != {"row", "col"}:
        return False
    (_, row_step), (cols, col_step) = by_role["row"], by_role["col"]
    return col_step == 1 and row_step == cols


def _joint_store(access: Access, space: Space) -> bool:
    lay = access.layout
    if not (space.row and space.col):
        return False
    rm, cm = access.vars.get(space.row[0]), access.vars.get(space.col[0])
    return rm is not None and cm is not None and rm.dim == cm.dim == lay.rank - 1 and \
        cm.step == 1 and rm.step == space.cols


def check_store_box(box: Box, access: Access, space: Space, r0: int, what: str):
    lay = access.layout
    if box.elem_offset != 0:
        raise SpyreLoweringError(f"{what}: the store into {lay.name} does not start a stick")
    if lay.rank == 0:
        return
    stick_walker = None
    joint = _joint_store(access, space)
    if box.stick_var == "joint_lins" and box.stick_count * lay.per_stick != box.valid:
        raise SpyreLoweringError(f"{what}: a store into {lay.name} tiling its sticks with rows "
                                 "and cols leaves padding it cannot fill")
    for role, v in (("row", space.row), ("col", space.col)):
        if v and v[0] in access.vars and access.vars[v[0]].dim == lay.rank - 1:
            step = access.vars[v[0]].step
            if step == 1:
                stick_walker = role
            elif step % lay.per_stick != 0 and not (joint and role == "row"):
                # whole-stick steps are fine; so are rows tiling the sticks
                # with the cols (blocks of whole sticks: _row_quantum)
                raise SpyreLoweringError(f"{what}: strided store into the sticks of {lay.name}")
    if stick_walker is None and lay.host_sizes[-1] > 1:
        raise SpyreLoweringError(
            f"{what}: the store into {lay.name} {list(lay.host_sizes)} does not walk its stick "
            "dim inside a block (blocks would share sticks); no device lowering")


# --------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------

class Emitter:
    """Emits one block's instructions (or, with spec None, only plans its
    scratchpad)."""

    def __init__(self, plan: KernelPlan, slots: dict, spec, core: int, region: int,
                 alloc: RegionAllocator):
        self.plan, self.slots, self.spec, self.core = plan, slots, spec, core
        self.region, self.alloc = region, alloc
        self.instructions = 0
        self.R_alloc = 1
        self.K_alloc = 1
        self._welford = {}
        # cross-core reduction: (this core's range of the first red-outer
        # var, the cores taking part in order); core 0 combines and stores
        self.ring_split = None

    # -- instruction helpers --
    def _vec(self, op, dst: Tile, srcs, rows, cols, imm=None, imm2=0.0):
        dummy = (dst.t(self.region))
        ts = [s.t(self.region) for s in srcs] + [dummy] * (3 - len(srcs))
        if imm is not None and len(srcs) == 1 and _C_arity(op) == 2:
            ts = [srcs[0].t(self.region), dummy, dummy]
        self.instructions += 1
        if self.spec is not None:
            self.spec.vector(self.core, op, dst.t(self.region), ts[0], ts[1], ts[2], rows, cols,
                             src1_is_imm=imm is not None and _C_arity(op) == 2,
                             imm=float(imm if imm is not None else 0.0), imm2=float(imm2))

    def _new_tile(self, dtype, has_rows, has_cols, R, K) -> Tile:
        # sized for the largest block, so every block of a core plans alike
        es = dtype.itemsize
        rows, cols = (self.R_alloc if has_rows else 1), (self.K_alloc if has_cols else 1)
        row_bytes = cols * es
        nbytes = rows * row_bytes
        off = self.alloc.alloc(nbytes)
        return Tile(off, dtype, row_bytes if has_rows else 0, es if has_cols else 0,
                    has_rows, has_cols, (off, nbytes))

    def _free(self, tile: Tile):
        if tile.alloc is not None:
            self.alloc.free(*tile.alloc)
            tile.alloc = None

    def _load_box(self, access: Access, buffer: str, fixed, r0, R, K, R_alloc, K_alloc) -> Tile:
        slot = self.slots[buffer]
        box = make_box(access, self.plan.space, fixed, r0, R, K, slot)
        # sized for the largest block and the worst stick alignment, so every
        # block plans alike
        nbytes = make_box(access, self.plan.space, fixed, 0, R_alloc, K_alloc, slot,
                          worst_alignment=True).bytes
        assert box.bytes <= nbytes
        off = self.alloc.alloc(nbytes)
        for x in box.transfers:
            self.instructions += 1
            if self.spec is not None:
                kw = dict(x)
                kw["spad"] = self.region + off + kw["spad"]
                self.spec.dma_load(self.core, **kw)
        return Tile(off + box.elem_offset, access.layout.dtype, box.row_stride, box.col_stride,
                    box.has_rows, box.has_cols, (off, nbytes))

    # -- the block --
    def block(self, fixed: dict, r0: int, R: int, R_alloc: int, K: Optional[int] = None):
        plan = self.plan
        self.K_alloc = plan.space.cols
        K = K or plan.space.cols
        self.R_alloc = R_alloc
        tiles: dict[int, Tile] = {}        # Value id -> its tile
        refs: dict[int, int] = {}          # Tile id -> live Values using it
        remaining = self._use_counts()     # Value id -> uses not yet emitted
        kept: dict[str, Tile] = {}         # in-kernel buffers read later

        def bind(v: Value, t: Tile):
            tiles[id(v)] = t
            refs[id(t)] = refs.get(id(t), 0) + 1

        def release(v: Value):
            remaining[id(v)] -= 1
            if remaining[id(v)] == 0 and id(v) in tiles:
                t = tiles[id(v)]
                refs[id(t)] -= 1
                if refs[id(t)] == 0:
                    self._free(t)

        def ev(v: Value, node_i: int) -> Tile:
            if id(v) not in tiles:
                bind(v, self._compute(v, node_i, ev, kept, fixed, r0, R, R_alloc, K))
                for a in v.args:
                    if isinstance(a, Value):
                        release(a)
                    elif isinstance(a, Reduction):
                        release(a.value)
            return tiles[id(v)]

        try:
            self._emit_nodes(ev, kept, refs, release, fixed, r0, R, R_alloc, K)
        except _PartialSent:
            pass  # a helper core of a cross-core reduction is done
        for t in kept.values():
            self._free(t)

    def _emit_nodes(self, ev, kept, refs, release, fixed, r0, R, R_alloc, K):
        plan = self.plan
        for node_i, node in enumerate(plan.nodes):
            for st in node.stores:
                t = ev(st.value, node_i)
                if any(st.buffer == ld.args[0] for n2 in plan.nodes[node_i + 1:]
                       for ld in _loads(n2)):
                    kept[st.buffer] = t
                    refs[id(t)] += 1  # held to the end of the block
                if st.buffer in plan.stored:
                    self._store(st, node_i, t, fixed, r0, R, R_alloc, K)
                release(st.value)

    def _use_counts(self):
        counts = {}
        for node in self.plan.nodes:
            seen = set()
            for st in node.stores:
                counts[id(st.value)] = counts.get(id(st.value), 0) + 1
                for v in _walk(st.value, seen):
                    counts.setdefault(id(v), 0)
                    for a in v.args:
                        a = a.value if isinstance(a, Reduction) else a
                        if isinstance(a, Value):
                            counts[id(a)] = counts.get(id(a), 0) + 1
        return counts

    def _compute(self, v: Value, node_i, ev, kept, fixed, r0, R, R_alloc, K) -> Tile:
        plan = self.plan
        subs = plan.subs[node_i]
        op = v.op
        if op == "load":
            buf, index = v.args
            if buf in kept:
                return kept[buf]
            access = analyze_access(buffer_layout(buf), _renamed(index, subs),
                                    plan.ranges(node_i), f"{plan.name}: load {buf}",
                                    plan.joint_extent())
            return self._load_box(access, buf, fixed, r0, R, K, R_alloc, self.K_alloc)
        if op == "constant":
            dtype = _compute_dtype(v.dtype)
            t = self._new_tile(dtype, False, False, R, K)
            self._vec(VecOp.fill, t, [], 1, 1, imm=float(v.args[0]))
            return t
        if op == "index_expr":
            return self._index_tile(_renamed(v.args[0], subs), fixed, r0, R, K)
        if op == "to_dtype":
            src = ev(v.args[0], node_i)
            target = v.dtype
            if target in (torch.float32, torch.float64) and src.dtype.is_floating_point:
                return src  # tiles compute in fp32 already
            return self._copy(src, target, R, K)
        if op == "reduction":
            if plan.node_spaces[node_i].red_outer:
                return self._reduction_multi(v.args[0], node_i, kept, fixed, r0, R, R_alloc, K)
            return self._reduction(v.args[0], node_i, ev, R, K)
        if op == "square":
            x = ev(v.args[0], node_i)
            dst = self._new_tile(torch.float32, x.has_rows, x.has_cols, R, K)
            self._vec(VecOp.mul, dst, [x, x], R if dst.has_rows else 1, K if dst.has_cols else 1)
            return dst
        name = op[len("libdevice_"):] if op.startswith("libdevice_") else op
        if name in UNARY or name in ("exp2", "expm1", "log1p", "ceil"):
            return self._unary(name, ev(v.args[0], node_i), R, K)
        if name in BINARY:
            return self._binary(name, v, node_i, ev, R, K)
        if name == "where":
            c, a, b = (ev(x, node_i) for x in v.args)
            hr = c.has_rows or a.has_rows or b.has_rows
            hc = c.has_cols or a.has_cols or b.has_cols
            dst = self._new_tile(_compute_dtype(v.dtype), hr, hc, R, K)
            self._vec(VecOp.select, dst, [c, a, b], R if hr else 1, K if hc else 1)
            return dst
        raise SpyreLoweringError(f"{plan.name}: op {op!r} has no device lowering")

    def _copy(self, src: Tile, dtype, R, K) -> Tile:
        dst = self._new_tile(dtype, src.has_rows, src.has_cols, R, K)
        self._vec(VecOp.copy, dst, [src], R if src.has_rows else 1, K if src.has_cols else 1)
        return dst

    def _unary(self, name, x: Tile, R, K) -> Tile:
        rows, cols = (R if x.has_rows else 1), (K if x.has_cols else 1)
        dst = self._new_tile(torch.bool if name == "logical_not" else torch.float32,
                             x.has_rows, x.has_cols, R, K)
        if name == "exp2":
            self._vec(VecOp.mul, dst, [x], rows, cols, imm=math.log(2.0))
            self._vec(VecOp.exp, dst, [dst], rows, cols)
        elif name == "expm1":
            self._vec(VecOp.exp, dst, [x], rows, cols)
            self._vec(VecOp.sub, dst, [dst], rows, cols, imm=1.0)
        elif name == "log1p":
            self._vec(VecOp.add, dst, [x], rows, cols, imm=1.0)
            self._vec(VecOp.log, dst, [dst], rows, cols)
        elif name == "ceil":
            self._vec(VecOp.neg, dst, [x], rows, cols)
            self._vec(VecOp.floor, dst, [dst], rows, cols)
            self._vec(VecOp.neg, dst, [dst], rows, cols)
        else:
            self._vec(UNARY[name], dst, [x], rows, cols)
        return dst

    def _binary(self, name, v: Value, node_i, ev, R, K) -> Tile:
        a, b = v.args[0], v.args[1]
        if a.op == "constant" and b.op != "constant" and name in COMMUTATIVE:
            a, b = b, a
        ta = ev(a, node_i)
        imm = b.args[0] if b.op == "constant" else None
        tb = None if imm is not None else ev(b, node_i)
        srcs = [ta] if tb is None else [ta, tb]
        hr, hc = any(t.has_rows for t in srcs), any(t.has_cols for t in srcs)
        dst = self._new_tile(_compute_dtype(v.dtype), hr, hc, R, K)
        self._vec(BINARY[name], dst, srcs, R if hr else 1, K if hc else 1,
                  imm=None if imm is None else float(imm))
        return dst

    def _reduction(self, red: Reduction, node_i, ev, R, K) -> Tile:
        x = ev(red.value, node_i)
        if not x.has_cols:
            raise SpyreLoweringError(f"{self.plan.name}: a reduction of a value constant "
                                     "along the reduced dim")
        rows = R if x.has_rows else 1
        rt = red.reduction_type
        if rt == "welford_reduce":
            cache = self._welford.setdefault(id(red.value), {})
            if not cache:
                mean = self._new_tile(torch.float32, x.has_rows, False, R, K)
                self._reduce(RedOp.sum, mean, x, rows, K)
                self._vec(VecOp.div, mean, [mean], rows, 1, imm=float(K))
                diff = self._new_tile(torch.float32, x.has_rows, True, R, K)
                self._vec(VecOp.sub, diff, [x, mean], rows, K)
                self._vec(VecOp.mul, diff, [diff, diff], rows, K)
                m2 = self._new_tile(torch.float32, x.has_rows, False, R, K)
                self._reduce(RedOp.sum, m2, diff, rows, K)
                self._free(diff)
                weight = self._new_tile(torch.float32, False, False, R, K)
                self._vec(VecOp.fill, weight, [], 1, 1, imm=float(K))
                cache.update({0: mean, 1: m2, 2: weight})
            return cache[red.part]
        if rt in ("any", "all"):
            # as numbers: any = max(x != 0), all = min(x != 0)
            as_float = self._new_tile(torch.float32, x.has_rows, True, R, K)
            self._vec(VecOp.copy, as_float, [x], rows, K)
            folded = self._new_tile(torch.float32, x.has_rows, False, R, K)
            self._reduce(RedOp.max if rt == "any" else RedOp.min, folded, as_float, rows, K)
            self._free(as_float)
            dst = self._new_tile(torch.bool, x.has_rows, False, R, K)
            self._vec(VecOp.ne, dst, [folded], rows, 1, imm=0.0)
            self._free(folded)
            return dst
        if rt not in REDUCE:
            raise SpyreLoweringError(f"{self.plan.name}: reduction {rt!r} has no device lowering")
        arg = rt in ("argmax", "argmin")
        dst = self._new_tile(torch.int64 if arg else torch.float32, x.has_rows, False, R, K)
        self._reduce(REDUCE[rt], dst, x, rows, K)
        return dst

    def _combine_across_cores(self, op, partial: Tile) -> Tile:
        """Helper cores send their one-element partial to the first core over
        the ring and stop; the first core gathers and reduces them."""
        _, cores = self.ring_split
        me = self.core_id
        if me != cores[0]:
            self._ring_send(channel=me, dst_core=cores[0], tile=partial)
            raise _PartialSent()
        nbytes = STICK_BYTES * len(cores)  # one stick per core: aligned receives
        off = self.alloc.alloc(nbytes)
        gathered = Tile(off, torch.float32, 0, STICK_BYTES, False, True, (off, nbytes))
        self._vec(VecOp.copy, Tile(off, torch.float32, 0, 0, False, False), [partial], 1, 1)
        for i, c in enumerate(cores[1:], start=1):
            self.instructions += 1
            if self.spec is not None:
                self.spec.ring_recv(self.core, channel=c, src_core=c,
                                    spad=self.region + off + i * STICK_BYTES, bytes=4)
        out = self._new_tile(torch.float32, False, False, 1, 1)
        self._reduce(op, out, gathered, 1, len(cores))
        self._free(gathered)
        return out

    def _ring_send(self, channel, dst_core, tile: Tile):
        self.instructions += 1
        if self.spec is not None:
            self.spec.ring_send(self.core, channel=channel, dst_core=dst_core,
                                spad=self.region + tile.offset, bytes=4)

    def _reduce(self, op, dst: Tile, src: Tile, rows, cols, accumulate=False):
        self.instructions += 1
        if self.spec is not None:
            self.spec.reduce(self.core, op, dst.t(self.region), src.t(self.region), rows, cols,
                             accumulate=accumulate)

    def _reduction_multi(self, red: Reduction, node_i, kept, fixed, r0, R, R_alloc, K) -> Tile:
        """A reduction over several dims: the col dim inside each Reduce, the
        others (red-outer) walked here, accumulating into one result."""
        space = self.plan.node_spaces[node_i]
        ranges = [range(n) for _, n in space.red_outer]
        count = float(K * math.prod(n for _, n in space.red_outer))
        if self.ring_split is not None:
            ranges[0] = range(*self.ring_split[0])
        combos = list(itertools.product(*ranges))
        kept_ids = {id(t) for t in kept.values()}

        def evaluate(combo):
            fx = dict(fixed)
            fx.update({v: c for (v, _), c in zip(space.red_outer, combo)})
            local, made = {}, {}

            def ev_local(v, ni):
                if id(v) not in local:
                    t = self._compute(v, ni, ev_local, kept, fx, r0, R, R_alloc, K)
                    local[id(v)] = t
                    if id(t) not in kept_ids:
                        made[id(t)] = t
                return local[id(v)]
            return ev_local(red.value, node_i), list(made.values())

        def fold(op, dst, transform=None):
            for i, combo in enumerate(combos):
                x, made = evaluate(combo)
                rows = R if x.has_rows else 1
                if transform is not None:
                    x2 = transform(x, rows)
                    made.append(x2)
                    x = x2
                if dst is None:
                    dst = self._new_tile(torch.float32, x.has_rows, False, R, K)
                self._reduce(op, dst, x, rows, K, accumulate=i > 0)
                for t in made:
                    self._free(t)
            return dst

        rt = red.reduction_type
        simple = {"sum": RedOp.sum, "max": RedOp.max, "min": RedOp.min, "prod": RedOp.prod}
        if rt in simple:
            partial = fold(simple[rt], None)
            if self.ring_split is None:
                return partial
            return self._combine_across_cores(simple[rt], partial)
        if rt == "welford_reduce":
            cache = self._welford.setdefault(id(red.value), {})
            if not cache:
                mean = fold(RedOp.sum, None)
                rows = R if mean.has_rows else 1
                self._vec(VecOp.div, mean, [mean], rows, 1, imm=count)

                def squared_diff(x, rows_):
                    d = self._new_tile(torch.float32, x.has_rows or mean.has_rows, True, R, K)
                    self._vec(VecOp.sub, d, [x, mean], rows_, K)
                    self._vec(VecOp.mul, d, [d, d], rows_, K)
                    return d
                m2 = fold(RedOp.sum, None, squared_diff)
                weight = self._new_tile(torch.float32, False, False, R, K)
                self._vec(VecOp.fill, weight, [], 1, 1, imm=count)
                cache.update({0: mean, 1: m2, 2: weight})
            return cache[red.part]
        raise SpyreLoweringError(f"{self.plan.name}: reduction {rt!r} over several dims has no "
                                 "device lowering")

    def _index_tile(self, expr, fixed, r0, R, K) -> Tile:
        space = self.plan.space
        expr = sympy.expand(expr.xreplace(fixed))
        rv = space.row[0] if space.row else None
        cv = space.col[0] if space.col else None
        a = int(expr.coeff(rv)) if rv is not None else 0
        b = int(expr.coeff(cv)) if cv is not None else 0
        rest = expr - (a * rv if rv is not None else 0) - (b * cv if cv is not None else 0)
        rest = sympy.expand(rest)
        if rest.free_symbols:
            raise SpyreLoweringError(f"{self.plan.name}: index expression {expr} is not affine")
        c = int(rest) + a * r0
        dt = torch.float32
        if a and b:
            rt_ = self._new_tile(dt, True, False, R, K)
            self._vec(VecOp.iota, rt_, [], R, 1, imm=float(c), imm2=float(a))
            ct = self._new_tile(dt, False, True, R, K)
            self._vec(VecOp.iota, ct, [], 1, K, imm=0.0, imm2=float(b))
            dst = self._new_tile(dt, True, True, R, K)
            self._vec(VecOp.add, dst, [rt_, ct], R, K)
            self._free(rt_)
            self._free(ct)
            return dst
        if a:
            dst = self._new_tile(dt, True, False, R, K)
            self._vec(VecOp.iota, dst, [], R, 1, imm=float(c), imm2=float(a))
            return dst
        if b:
            dst = self._new_tile(dt, False, True, R, K)
            self._vec(VecOp.iota, dst, [], 1, K, imm=float(c), imm2=float(b))
            return dst
        dst = self._new_tile(dt, False, False, R, K)
        self._vec(VecOp.fill, dst, [], 1, 1, imm=float(c))
        return dst

    def _store(self, st: Store, node_i, value: Tile, fixed, r0, R, R_alloc, K):
        plan = self.plan
        slot = self.slots[st.buffer]
        lay = buffer_layout(st.buffer)
        access = analyze_access(lay, _renamed(st.index, plan.subs[node_i]), plan.ranges(node_i),
                                f"{plan.name}: store {st.buffer}", plan.joint_extent())
        box = make_box(access, plan.space, fixed, r0, R, K, slot)
        check_store_box(box, access, plan.space, r0, f"{plan.name}")
        nbytes = make_box(access, plan.space, fixed, 0, R_alloc, self.K_alloc, slot).bytes
        assert box.bytes <= nbytes
        off = self.alloc.alloc(nbytes)
        out = Tile(off, lay.dtype, box.row_stride, box.col_stride, box.has_rows, box.has_cols)
        rows = R if box.has_rows else 1
        cols = K if box.has_cols else 1
        self._vec(VecOp.copy, out, [value], rows, cols)
        if box.stick_var not in (None, "joint_lins") and \
                box.stick_count * lay.per_stick > box.valid:
            pad = box.stick_count * lay.per_stick - box.valid
            es = lay.element_size
            if box.stick_var == "joint":
                fill = Tile(off + box.valid * es, lay.dtype, 0, es, False, True)
                self._vec(VecOp.fill, fill, [], 1, pad, imm=0.0)
            elif box.stick_var == "col":
                fill = Tile(off + box.valid * es, lay.dtype, box.row_stride, es, True, True)
                self._vec(VecOp.fill, fill, [], rows, pad, imm=0.0)
            else:
                fill = Tile(off + box.valid * es, lay.dtype, es, box.col_stride, True, True)
                self._vec(VecOp.fill, fill, [], pad, cols, imm=0.0)
        for x in box.transfers:
            self.instructions += 1
            if self.spec is not None:
                kw = dict(x)
                kw["spad"] = self.region + off + kw["spad"]
                self.spec.dma_store(self.core, **kw)
        self.alloc.free(off, nbytes)


class _PartialSent(Exception):
    """A helper core of a cross-core reduction has sent its partial."""


def _C_arity(op) -> int:
    if op in (VecOp.fill, VecOp.iota):
        return 0
    if op == VecOp.select:
        return 3
    return 2 if int(op) >= int(VecOp.add) else 1


def _compute_dtype(dtype):
    return torch.bool if dtype == torch.bool else torch.float32


# --------------------------------------------------------------------------
# Work division and the program
# --------------------------------------------------------------------------

def _row_quantum(plan: KernelPlan) -> int:
    """Row blocks must cover whole sticks of every stored buffer whose stick
    dim the row var walks (else two cores would write one stick)."""
    q = 1
    space = plan.space
    if not space.row:
        return 1
    for buf in plan.stored:
        i, st = plan.produced[buf]
        lay = buffer_layout(buf)
        access = analyze_access(lay, _renamed(st.index, plan.subs[i]), plan.ranges(i),
                                f"{plan.name}: store {buf}", plan.joint_extent())
        m = access.vars.get(space.row[0])
        if m is not None and m.dim == lay.rank - 1 and m.step % lay.per_stick != 0:
            q = max(q, lay.per_stick)
    return q


def _ring_cores(plan: KernelPlan, num_cores: int) -> int:
    """Cores a full reduction (no kept dims) spreads its first reduced dim
    over, combining partials over the ring; 1 when it runs on one core."""
    space = plan.space
    if space.outer or space.row or len(plan.nodes) != 1 or not plan.nodes[0].is_reduction:
        return 1
    red_outer = plan.node_spaces[0].red_outer
    if not red_outer:
        return 1
    reductions = [v for v in _walk(plan.nodes[0].stores[0].value, set()) if v.op == "reduction"]
    if len(plan.nodes[0].stores) != 1 or len(reductions) != 1 or \
            reductions[0].args[0].reduction_type not in ("sum", "max", "min", "prod"):
        return 1
    return min(num_cores, red_outer[0][1])


def _lower_ring_reduction(plan, spec, slots, arg_names, ncores, budget, device_cores,
                          scratchpad_bytes):
    n0 = plan.node_spaces[0].red_outer[0][1]
    cores = list(range(ncores))
    peak = 0
    for core in cores:
        lo, hi = core * n0 // ncores, (core + 1) * n0 // ncores
        for dry in (True, False):
            alloc = RegionAllocator()
            em = Emitter(plan, slots, None if dry else spec,
                         None if dry else spec.add_core(core, max(STICK_BYTES, peak)), 0, alloc)
            em.core_id = core
            em.ring_split = ((lo, hi), cores)
            em.block({}, 0, 1, 1)
            if dry:
                peak = alloc.peak
                if peak > budget:
                    raise SpyreKernelTooLarge(f"{plan.name}: a reduction block needs {peak} "
                                              f"bytes of scratchpad, {budget} available")
    spec.validate(device_cores, scratchpad_bytes)
    info = dict(cores=ncores, blocks=ncores, rows_per_block=1, region_bytes=peak,
                double_buffered=False, instructions=spec.instruction_count,
                cross_core_reduction=True)
    return spec, arg_names, info


def _region_bytes(plan: KernelPlan, slots: dict, R: int) -> int:
    alloc = RegionAllocator()
    em = Emitter(plan, slots, None, 0, 0, alloc)
    em.block({v: 0 for v, _ in plan.space.outer}, 0, R, R)
    return alloc.peak


def lower_kernel(plan: KernelPlan):
    """Returns (ProgramSpec, argument buffer names in slot order, info).

    TEMPORARY (while the kernel library's loop-kernel builder replaces the
    Python emitter below): with SPYRE_CHECK_LOOP_KERNEL=1 every kernel is
    built both ways and the serialised programs, infos and errors must be
    identical."""
    import os
    if os.environ.get("SPYRE_CHECK_LOOP_KERNEL") != "1":
        return build_kernel(plan)

    def outcome(fn):
        try:
            spec, args, info = fn(plan)
            return ("ok", spec.serialize(), args, info), (spec, args, info)
        except SpyreLoweringError as e:
            return (type(e).__name__,), e
    want, want_result = outcome(_lower_kernel_python)
    got, got_result = outcome(build_kernel)
    if got != want:
        detail = f"python: {want_result!r}\nlibrary: {got_result!r}"
        if want[0] == got[0] == "ok":
            detail = (f"program bytes equal: {want[1] == got[1]} ({len(want[1])} vs "
                      f"{len(got[1])}); args {want[2]} vs {got[2]}; info {want[3]} vs {got[3]}")
        raise AssertionError(f"{plan.name}: the loop-kernel builder differs from the Python "
                             f"emitter: {detail}")
    if want[0] != "ok":
        if str(want_result) != str(got_result):
            print(f"SPYRE_CHECK_LOOP_KERNEL message differs:\n  python:  {want_result}\n"
                  f"  library: {got_result}")
        raise got_result
    return got_result


def _lower_kernel_python(plan: KernelPlan, num_cores: int = NUM_CORES,
                         scratchpad_bytes: int = SCRATCHPAD_BYTES):
    """Returns (ProgramSpec, argument buffer names in slot order, info)."""
    from . import config
    space = plan.space
    device_cores = num_cores
    num_cores = min(num_cores, config.max_cores)
    loads = []
    for node in plan.nodes:
        for ld in _loads(node):
            b = ld.args[0]
            if b not in plan.produced and b not in loads:
                loads.append(b)
    arg_names = loads + [b for b in plan.stored if b not in loads]
    spec = _C.ProgramSpec(plan.name)
    slots = {}
    for b in arg_names:
        lay = buffer_layout(b)
        slots[b] = spec.add_arg(b, dtype_name(lay.dtype), lay.device_bytes, b in plan.stored,
                                lay.device_size)
    budget = scratchpad_bytes - SCRATCHPAD_RESERVE
    q = _row_quantum(plan)
    rows = space.rows
    n_outer = math.prod(n for _, n in space.outer) if space.outer else 1
    cores_for_rows = max(1, num_cores // n_outer)
    rc = math.ceil(rows / cores_for_rows)
    rc = min(rows, -(-rc // q) * q)
    # largest row block (a multiple of q) whose regions fit, double-buffered
    # when possible
    double = config.double_buffer
    while True:
        need = _region_bytes(plan, slots, rc)
        if double and 2 * need <= budget:
            break
        if need <= budget and (rc <= q or rc == 1 or not double):
            double = False
            break
        if rc <= q or rc == 1:
            raise SpyreKernelTooLarge(
                f"{plan.name}: a block of {rc} row(s) x {space.cols} column(s) needs "
                f"{need} bytes of scratchpad per core but {budget} are available (2 MiB minus "
                f"the {SCRATCHPAD_RESERVE // 1024} KiB reserve); the kernel cannot be lowered "
                "without splitting its reduced/column dim")
        rc = max(q, -(-(rc // 2) // q) * q) if q > 1 else max(1, rc // 2)
    region = need
    ring_cores = _ring_cores(plan, num_cores)
    if ring_cores > 1:
        return _lower_ring_reduction(plan, spec, slots, arg_names, ring_cores, budget,
                                     device_cores, scratchpad_bytes)
    units = []
    import itertools
    outer_ranges = [range(n) for _, n in space.outer]
    for combo in itertools.product(*outer_ranges):
        fixed = {v: c for (v, _), c in zip(space.outer, combo)}
        full_rows = rows - 1 if space.col_tail not in (None, space.cols) else rows
        for r0 in range(0, full_rows, rc):
            units.append((fixed, r0, min(rc, full_rows - r0), None))
        if full_rows < rows:  # the last chunk of a split row is shorter
            units.append((fixed, full_rows, 1, space.col_tail))
    ncores = min(num_cores, len(units))
    instructions = 0
    for core in range(ncores):
        lo, hi = core * len(units) // ncores, (core + 1) * len(units) // ncores
        regions = 2 if double and hi - lo > 1 else 1
        ci = spec.add_core(core, max(STICK_BYTES, regions * region))
        for k, (fixed, r0, R, K) in enumerate(units[lo:hi]):
            alloc = RegionAllocator()
            em = Emitter(plan, slots, spec, ci, (k % regions) * region, alloc)
            em.block(fixed, r0, R, rc, K)
            instructions += em.instructions
    spec.validate(device_cores, scratchpad_bytes)
    info = dict(cores=ncores, blocks=len(units), rows_per_block=rc, region_bytes=region,
                double_buffered=double, instructions=instructions)
    return spec, arg_names, info
