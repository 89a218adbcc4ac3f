"""Lowering of captured (fused) nodes to one device program.

Iteration space of a kernel, shared by all its nodes:
  outer vars  fixed inside a block, walked block by block;
  row var     a block holds a range of it (the tile's rows), split across
              cores;
  col var     a block holds all of it (the tile's columns): the last
              pointwise dim of a pointwise node, the reduced dim of a
              reduction.
This module checks that nodes share such a space (check_group), rewrites
their index expressions in it (sympy stays here) and DESCRIBES the kernel as
plain data: buffer accesses as per-dimension steps in each buffer's stick
layout, the fused bodies as ops in SSA form (describe_kernel). The kernel
library's loop-kernel builder (spyre/kernels/loop_kernel.h) EMITS the
program from it: stick boxes and their DMA, scratchpad regions planned by
liveness, double buffering, work division over the device's cores and
cross-core ring reductions.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from .. import _C
from .capture import CapturedNode, Reduction, SpyreKernelTooLarge, SpyreLoweringError, Value
from .layouts import DTYPE_NAMES, analyze_access, buffer_layout, dtype_name

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


def _kept_order(node: CapturedNode) -> list[int]:
    """The order of a reduction's kept dims in its space: Inductor's, except
    that the dim its store walks along the output's elements (step 1) becomes
    the row var when another one is last. A per-head norm of [b, s, h, d]
    read as [b, h, s, d] stores [b, s, h]: heads on the rows write whole
    runs of a stick, sequence positions on the rows would leave each block
    one element per stick."""
    order = list(range(len(node.sizes)))
    if len(node.stores) != 1 or len(order) < 2:
        return order
    index = sympy.expand(sympy.sympify(node.stores[0].index))
    unit = [i for i in order if index.coeff(node.index_vars[i]) == 1]
    if len(unit) == 1 and unit[0] != order[-1]:
        order.remove(unit[0])
        order.append(unit[0])
    return order


def node_space(node: CapturedNode) -> tuple[Space, dict]:
    """The node's space in role symbols and the substitution from its own
    iteration variables to them."""
    red_outer = []
    if node.is_reduction:
        kept = _kept_order(node)
        sizes = [node.sizes[i] for i in kept]
        kept_vars = [node.index_vars[i] for i in kept]
        own_outer = kept_vars[:-1]
        own_row = kept_vars[-1:] if sizes else []
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
    # outer vars split into digits (see _outer_digits)
    digits: dict = dataclasses.field(default_factory=dict)

    def ranges(self, node_i: int) -> dict:
        return self.node_spaces[node_i].ranges()

    def renamed(self, expr, node_i: int):
        """`expr` (node `node_i`'s own vars) in the kernel's role symbols."""
        return _in_digits(_renamed(expr, self.subs[node_i]), self.digits)

    def col_split(self) -> bool:
        """Whether the col var was split into digits: a block then writes
        one digit's run of a row, which may end or start inside a stick."""
        col = self.space.col
        return bool(col) and not any(n.is_reduction for n in self.nodes) and \
            any(ds[0][0] == col[0] for ds in self.digits.values())

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


def _layout_cuts(space: Space, accesses) -> dict:
    """Cut points of outer, row and col vars that walk past the end of a
    buffer dim into the next one out, as after a reshape that merged dims (the
    [b, s, h, d] attention output read as [b, s, h * d] rows, whose heads
    each fill a padded stick): {var: {steps per wrap}}. Cut there, the var's
    digits each walk one dim. `accesses` are (buffer, index) pairs in role
    symbols."""
    ranges = dict(space.outer)
    for var in (space.row, space.col):
        if var:
            ranges[var[0]] = var[1]
    cuts: dict = {}
    for buf, expr in accesses:
        try:
            lay = buffer_layout(buf)
        except SpyreLoweringError:
            continue
        strides, sizes = lay.host_strides, lay.host_sizes
        expr = sympy.expand(sympy.sympify(expr))
        for var, n in ranges.items():
            c = expr.coeff(var)
            if not isinstance(c, sympy.Integer) or c <= 0:
                continue
            c = int(c)
            dims = [d for d in range(lay.rank) if strides[d] <= c and c % strides[d] == 0]
            if not dims:
                continue
            d = max(dims, key=lambda d: strides[d])
            # a cut at each dim the var wraps out of (a flatten of several)
            while d > 0:
                span = strides[d] * sizes[d]  # the next dim out's stride
                if c * (n - 1) < span or span % c or n % (span // c):
                    break
                cuts.setdefault(var, set()).add(span // c)
                d -= 1
    return cuts


def _outer_digits(space: Space, exprs, split_col: bool, layout_cuts=None) -> dict:
    """Outer vars that the indices divide, as grouped-query attention's
    repeat_kv reads kv head h // n_rep: FloorDiv(o, d) and ModularIndexing(o,
    d, m) cut o at d (and d * m). A var whose cuts divide each other and its
    size becomes mixed-radix digits (o = sum weight * digit), in which such
    indices are affine. With `split_col` the col var too (RoPE's cos/sin of
    cat((freqs, freqs)) read col % (d / 2)): its lowest digit stays the col
    var, the others become outer vars. The row var likewise (a transposed
    read, rows taken 8 at a time: 1024 * (r // 8) + r % 8). Returns {var:
    [(digit, size, weight)], least first}."""
    sizes = dict(space.outer)
    if space.row:
        sizes[space.row[0]] = space.row[1]
    if split_col and space.col:
        sizes[space.col[0]] = space.col[1]
    cuts: dict = {}
    for expr in exprs:
        for atom in sympy.sympify(expr).atoms(FloorDiv, ModularIndexing):
            var = atom.args[0]
            if var not in sizes:
                continue
            ends = [atom.args[1]] if isinstance(atom, FloorDiv) else \
                [atom.args[1], atom.args[1] * atom.args[2]]
            if all(isinstance(e, sympy.Integer) for e in ends):
                cuts.setdefault(var, set()).update(int(e) for e in ends)
    for var, ends in (layout_cuts or {}).items():
        if var in sizes:
            cuts.setdefault(var, set()).update(ends)
    digits = {}
    for var, ends in cuts.items():
        n = sizes[var]
        chain = sorted(e for e in ends if 1 < e < n)
        if not chain or n % chain[-1] or any(b % a for a, b in zip(chain, chain[1:])):
            continue
        weights = [1] + chain
        bounds = chain + [n]
        digits[var] = [(sympy.Symbol(f"{var.name}d{i}", integer=True, nonnegative=True),
                        bounds[i] // weights[i], weights[i]) for i in range(len(weights))]
    return digits


def _digit_value(digits: list, lo: int, hi: Optional[int] = None):
    """(o // lo) % (hi // lo) in o's digits (lo and hi cut points)."""
    return sum((w // lo) * d for d, _, w in digits if w >= lo and (hi is None or w < hi))


def _in_digits(expr, digits: dict):
    if not digits:
        return expr
    replaced = {}
    for atom in expr.atoms(FloorDiv, ModularIndexing):
        var = atom.args[0]
        if var not in digits or not all(isinstance(a, sympy.Integer) for a in atom.args[1:]):
            continue
        lo = int(atom.args[1])
        hi = None if isinstance(atom, FloorDiv) else lo * int(atom.args[2])
        replaced[atom] = _digit_value(digits[var], lo, hi)
    expr = expr.xreplace(replaced)
    return sympy.expand(expr.xreplace({v: _digit_value(d, 1) for v, d in digits.items()}))


def _space_in_digits(space: Space, digits: dict, reduced: bool = False) -> Space:
    """`space` with its split vars replaced by their digits. The col var
    keeps its lowest digit; its higher digits become outer vars, or, when
    the col is `reduced`, accumulated reduced vars (red_outer)."""
    outer = []
    for var, n in space.outer:
        outer += [(d, size) for d, size, _ in reversed(digits[var])] if var in digits \
            else [(var, n)]
    row = space.row
    if row and row[0] in digits:
        low, *high = digits[row[0]]
        row = (low[0], low[1])
        outer += [(d, size) for d, size, _ in reversed(high)]
    col, red_outer = space.col, list(space.red_outer)
    if col and col[0] in digits:
        low, *high = digits[col[0]]
        col = (low[0], low[1])
        (red_outer if reduced else outer).extend((d, size) for d, size, _ in reversed(high))
    return dataclasses.replace(space, outer=outer, row=row, col=col, red_outer=red_outer)


def _col_is_cut(space: Space, exprs) -> bool:
    """Whether some index divides the col var or takes it modulo (the
    cos/sin of RoPE's cat((freqs, freqs)) read at col % (d / 2))."""
    return bool(space.col) and any(
        atom.args[0] == space.col[0]
        for expr in exprs for atom in sympy.sympify(expr).atoms(FloorDiv, ModularIndexing))


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


def _epilogue_space(node: CapturedNode, reduction: Space):
    """A pointwise node over the kept dims of a reduction in its group (mean's
    division by the count, a norm's rsqrt): its last dim as the row var, no
    col var, so it runs on the reduced rows inside the reduction's kernel.
    None when its dims are not the reduction's kept dims."""
    if node.is_reduction or not node.sizes or reduction.row is None or \
            [n for _, n in reduction.outer] + [reduction.rows] != list(node.sizes):
        return None
    subs = dict(zip(node.index_vars[:-1], [v for v, _ in reduction.outer]))
    subs[node.index_vars[-1]] = reduction.row[0]
    return Space(list(reduction.outer), reduction.row, None), subs


def _with_epilogues(nodes, spaces, subs):
    """Re-spaces pointwise nodes over a reduction's kept dims (see
    _epilogue_space) when the group has one reduction space they differ
    from; returns (spaces, subs, the group's space)."""
    reductions = [s for n, s in zip(nodes, spaces) if n.is_reduction]
    if not reductions or any(s.signature() != reductions[0].signature() for s in reductions) \
            or reductions[0].cols > RED_SPLIT_THRESHOLD:
        return spaces, subs, spaces[0]
    space = reductions[0]
    spaces, subs = list(spaces), list(subs)
    for i, n in enumerate(nodes):
        if spaces[i].signature() != space.signature():
            epilogue = _epilogue_space(n, space)
            if epilogue is not None:
                spaces[i], subs[i] = epilogue
    return spaces, subs, space


def check_group(name: str, nodes: list[CapturedNode], removable: set) -> KernelPlan:
    """Checks that the nodes share one space; raises SpyreLoweringError
    otherwise (the scheduler then keeps them in separate kernels)."""
    spaces, subs = zip(*(node_space(n) for n in nodes))
    spaces, subs, space = _with_epilogues(nodes, spaces, subs)
    for n, s in zip(nodes, spaces):
        if s.col is None and s.row == space.row and s.outer == space.outer:
            continue  # an epilogue on the reduced rows
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
    exprs = []
    for i, n in enumerate(nodes):
        exprs += [_renamed(st.index, subs[i]) for st in n.stores]
        exprs += [_renamed(v.args[0 if v.op == "index_expr" else 1], subs[i])
                  for st in n.stores for v in _walk(st.value, set())
                  if v.op in ("load", "index_expr")]
    accesses = []
    for i, n in enumerate(nodes):
        accesses += [(st.buffer, _renamed(st.index, subs[i])) for st in n.stores
                     if st.buffer not in internal]
        accesses += [(v.args[0], _renamed(v.args[1], subs[i])) for v in _loads(n)
                     if not (v.args[0] in produced and produced[v.args[0]][0] < i)]
    layout_cuts = _layout_cuts(space, accesses)
    reduces = any(n.is_reduction for n in nodes)
    split_col = space.col_tail is None and not any(s.red_outer for s in spaces)
    col_cut = space.col is not None and space.col[0] in layout_cuts
    if reduces and split_col and (col_cut or _col_is_cut(space, exprs)):
        # The reduced cols split into digits: the reduction accumulates over
        # the higher ones. A pointwise node over those cols (a norm's scaled
        # output) needs the finished reduction, so it runs in its own kernel.
        if any(not n.is_reduction and s.col is not None for n, s in zip(nodes, spaces)):
            raise SpyreLoweringError(
                f"{name}: the reduced cols are indexed by digits (col // m, col % m); "
                "a pointwise node over them cannot share the reduction's program")
    elif reduces:
        split_col = False
    digits = _outer_digits(space, exprs, split_col=split_col, layout_cuts=layout_cuts)
    plan = KernelPlan(name, _space_in_digits(space, digits, reduced=reduces), list(nodes),
                      list(subs), stored, internal, produced,
                      [_space_in_digits(sp, digits, reduced=n.is_reduction)
                       for n, sp in zip(nodes, spaces)],
                      digits)
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
# exp2, expm1, log1p, ceil and square the builder composes; acos, erfinv,
# trunc and round are chains of formulas.h, shared with the eager kernels)
UNARY_OPS = {
    "acos": "acos", "erfinv": "erfinv", "trunc": "trunc", "round": "round",
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
    # Python's remainder (the divisor's sign); an integer divisor of zero is
    # a device error, as it is an error on the CPU
    "remainder": "remainder",
}


# On bool values (masks) bitwise ops are the logical ones; on integers they
# act on the bit patterns (the vector unit's bitwise ops).
BOOL_BITWISE_OPS = {"bitwise_and": "logical_and", "bitwise_or": "logical_or",
                    "bitwise_xor": "ne"}


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


def _describe_buffer(name: str, is_output: bool, shares_sticks: bool) -> dict:
    """`shares_sticks`: the kernel's blocks write parts of one stick (their
    stores are masked to their elements)."""
    lay = buffer_layout(name)
    return dict(name=name, dtype=dtype_name(lay.dtype), device_bytes=lay.device_bytes,
                is_output=is_output, shares_sticks=shares_sticks,
                device_size=list(lay.device_size),
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
        acc = analyze_access(buffer_layout(buf), plan.renamed(index, node_i),
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
        # Integer values compute exactly in their own dtype (int64 inside
        # each instruction, wrapped to an int8 or int32 result as PyTorch's
        # are), floating ones in fp32, masks as bool.
        integer = v.dtype is not None and v.dtype != torch.bool and \
            not v.dtype.is_floating_point
        compute = "bool" if v.dtype == torch.bool else \
            DTYPE_NAMES.get(v.dtype) if integer else "float32"
        if compute is None:
            raise SpyreLoweringError(f"{plan.name}: {v.dtype} values have no device form")
        if v.op == "load":
            buf, index = v.args
            op.update(op="load", buffer=buf)
            if not (buf in plan.produced and plan.produced[buf][0] < node_i):
                op["access"] = access(node_i, buf, index, "load")
        elif v.op == "constant":
            if integer and float(v.args[0]) != v.args[0]:
                raise SpyreLoweringError(f"{plan.name}: the integer constant {v.args[0]} "
                                         "has no exact device form (beyond 2^53)")
            op.update(op="constant", value=float(v.args[0]), dtype=compute)
        elif v.op == "index_expr":
            expr = plan.renamed(v.args[0], node_i)
            coeffs = {s: expr.coeff(s) for s in node_roles[node_i]}
            rest = sympy.expand(expr - sum(c * s for s, c in coeffs.items()))
            if not all(isinstance(c, sympy.Integer) for c in [*coeffs.values(), rest]):
                raise SpyreLoweringError(f"{plan.name}: index expression {expr} is not affine")
            op.update(op="index", constant=int(rest),
                      terms=[[*node_roles[node_i][s], int(c)] for s, c in coeffs.items() if c])
            if integer:
                op["dtype"] = compute
        elif v.op == "to_dtype":
            op.update(op="to_dtype", dtype=DTYPE_NAMES.get(v.dtype),
                      to_float=v.dtype in (torch.float32, torch.float64))
        elif v.op == "reduction":
            red = v.args[0]
            op.update(op="reduction", name=red.reduction_type, part=red.part)
        elif name in BOOL_BITWISE_OPS and v.dtype == torch.bool:
            op.update(op="binary", name=BOOL_BITWISE_OPS[name], dtype="bool")
        elif name == "bitwise_not" and v.dtype == torch.bool:
            op.update(op="unary", name="logical_not")
        elif name in BOOL_BITWISE_OPS and integer:
            op.update(op="binary", name=name, dtype=compute)  # bit patterns
        elif name == "bitwise_not" and integer:
            op.update(op="unary", name=name, dtype=compute)
        elif name in UNARY_OPS:
            op.update(op="unary", name=UNARY_OPS[name])
            if integer:
                op["dtype"] = compute
        elif name in BINARY_OPS:
            op.update(op="binary", name=BINARY_OPS[name], dtype=compute)
        elif name == "where":
            op.update(op="select", dtype=compute)
        elif name == "fma":
            # a * b + c, rounded twice in fp32 (one ulp of fp32 from a fused
            # multiply-add; the vector unit has no three-operand op)
            a, b, c = value_args
            ops.append(dict(node=node_i, args=[a, b], op="binary", name="mul", dtype=compute))
            op.update(op="binary", name="add", dtype=compute, args=[len(ops) - 1, c])
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
        buffers=[_describe_buffer(b, b in plan.stored, b in plan.stored and plan.col_split())
                 for b in args],
        ops=ops, stores=stores)


def lower_kernel(plan: KernelPlan, device: Optional[int] = None):
    """The plan's program, built by the kernel library for `device` (None:
    the current spyre device). Returns (_C.Program, argument buffer names
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
