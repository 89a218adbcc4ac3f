"""Capture of Inductor loop bodies as small value graphs.

A scheduler node's loop body is replayed under `CaptureHandler` (an Inductor
ops handler) with the node's unmerged iteration variables. Every op becomes a
`Value` (op name, arguments, dtype); loads and stores keep their index as a
sympy expression in the iteration variables. The lowering
(`lowering.py`) turns these graphs into device programs.

Nodes are captured with their default (unsimplified) sizes: Inductor's loop
simplification merges contiguous host dimensions, which does not match the
device's stick layout, so the lowering needs the real dimensions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch
from torch._inductor.ops_handler import DefaultHandler
from torch._inductor.virtualized import V


class SpyreLoweringError(RuntimeError):
    """A kernel the spyre backend cannot lower to a device program."""


class SpyreKernelTooLarge(SpyreLoweringError):
    """A kernel whose smallest block does not fit a core's scratchpad."""


@dataclasses.dataclass(eq=False)
class Value:
    op: str
    args: tuple
    dtype: torch.dtype

    def __repr__(self) -> str:  # short, for error messages
        return f"Value({self.op}, {self.dtype})"


_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
_LOGICAL = {"logical_and", "logical_or", "logical_not", "and_", "or_"}


def _result_dtype(name: str, args: tuple) -> torch.dtype:
    if name in _COMPARE or name in _LOGICAL:
        return torch.bool
    values = [a for a in args if isinstance(a, Value)]
    if name == "where" and len(values) == 3:
        values = values[1:]
    if not values:
        return torch.float32
    floats = [v.dtype for v in values if v.dtype.is_floating_point]
    if floats:
        return max(floats, key=lambda d: torch.finfo(d).bits)
    return values[0].dtype


@dataclasses.dataclass
class Store:
    buffer: str
    index: sympy.Expr
    value: Value


@dataclasses.dataclass
class Reduction:
    reduction_type: str
    value: Value
    # welford_reduce yields three results; `part` picks one (0 mean, 1 m2,
    # 2 weight); every other reduction has part 0.
    part: int = 0


class CaptureHandler(DefaultHandler):
    """Builds a Value graph; raises SpyreLoweringError for what the device
    cannot do (indirect indexing, masked loads, scans, atomic stores)."""

    def __init__(self, node_name: str):
        self.node_name = node_name
        self.stores: list[Store] = []
        self.values: list[Value] = []  # loads and index expressions

    def _default(self, name: str, args: tuple, kwargs: dict) -> Any:
        if kwargs:
            args = args + tuple(kwargs.values())
        return Value(name, tuple(args), _result_dtype(name, args))

    def load(self, name: str, index: sympy.Expr) -> Value:
        v = Value("load", (real_name(name), index), V.graph.get_dtype(name))
        self.values.append(v)
        return v

    def store(self, name, index, value, mode=None) -> None:
        if mode is not None:
            raise SpyreLoweringError(
                f"{self.node_name}: store mode {mode!r} (atomic/accumulating stores) "
                "has no device lowering")
        self.stores.append(Store(real_name(name), index, value))

    def store_reduction(self, name, index, value) -> None:
        self.stores.append(Store(real_name(name), index, value))

    def reduction(self, dtype, src_dtype, reduction_type, value):
        if isinstance(value, tuple):
            raise SpyreLoweringError(
                f"{self.node_name}: reduction {reduction_type!r} over a tuple of values "
                "(split or combined Welford reductions) has no device lowering")
        if reduction_type == "welford_reduce":
            return tuple(
                Value("reduction", (Reduction(reduction_type, value, part),), torch.float32)
                for part in range(3))
        if reduction_type in ("argmax", "argmin"):
            dtype = torch.int64
        return Value("reduction", (Reduction(reduction_type, value),), dtype)

    def constant(self, value, dtype) -> Value:
        return Value("constant", (value,), dtype)

    def index_expr(self, expr, dtype) -> Value:
        v = Value("index_expr", (sympy.sympify(expr),), dtype)
        self.values.append(v)
        return v

    def to_dtype(self, x, dtype, src_dtype=None, use_compute_types=True) -> Value:
        return Value("to_dtype", (x,), dtype)

    def masked(self, mask, body, other):
        raise SpyreLoweringError(
            f"{self.node_name}: masked loads (padding, cat, constant_pad_nd) have no "
            "device lowering yet")

    def indirect_indexing(self, index_var, size, check=True, wrap_neg=True):
        raise SpyreLoweringError(
            f"{self.node_name}: indirect indexing (gather, embedding, index) has no "
            "device lowering yet")

    def scan(self, *args, **kwargs):
        raise SpyreLoweringError(f"{self.node_name}: scans (cumsum, cumprod) have no "
                                 "device lowering")

    def sort(self, *args, **kwargs):
        raise SpyreLoweringError(f"{self.node_name}: sort has no device lowering")

    def bucketize(self, *args, **kwargs):
        raise SpyreLoweringError(f"{self.node_name}: bucketize has no device lowering")


@dataclasses.dataclass
class CapturedNode:
    """One scheduler node: iteration sizes, variables and its value graph."""
    name: str
    sizes: list[int]  # pointwise sizes (unmerged, size-1 dims dropped)
    reduction_sizes: list[int]
    index_vars: list[sympy.Symbol]
    reduce_vars: list[sympy.Symbol]
    stores: list[Store]

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduction_sizes)


def real_name(name: str) -> str:
    """The buffer a name stands for: a mutation (x.mul_) writes its input's
    storage under a new buffer name."""
    scheduler = V.graph.scheduler
    return scheduler.mutation_real_name.get(name, name) if scheduler else name


def _static_ints(sizes) -> list[int]:
    # Symbolic sizes (dynamic=True) are specialised to this call's values
    # with guards: a device program is built for concrete shapes, and a call
    # with other sizes recompiles.
    return [V.graph.sizevars.guard_int(s) for s in sizes]


def _specialise(expr, keep):
    expr = sympy.sympify(expr)
    syms = [s for s in expr.free_symbols if s not in keep]
    if not syms:
        return expr
    return expr.xreplace({s: V.graph.sizevars.guard_int(s) for s in syms})


def capture_node(snode) -> CapturedNode:
    """Replays a SchedulerNode's body with its default (unmerged) sizes."""
    buffer = snode.node
    name = snode.get_name()
    (sizes, reduction_sizes), body, (index_vars, reduce_vars) = \
        buffer.get_default_sizes_body()
    sizes = _static_ints(sizes)
    reduction_sizes = _static_ints(reduction_sizes)
    # fresh symbols: the body's own ones may not be passed back in
    index_vars = [sympy.Symbol(f"sp{i}", integer=True, nonnegative=True)
                  for i in range(len(index_vars))]
    reduce_vars = [sympy.Symbol(f"sr{i}", integer=True, nonnegative=True)
                   for i in range(len(reduce_vars))]
    handler = CaptureHandler(name)
    with V.set_ops_handler(handler):
        body(index_vars, reduce_vars)
    keep = set(index_vars) | set(reduce_vars)
    for value in handler.values:
        if value.op in ("load", "index_expr"):
            i = 1 if value.op == "load" else 0
            args = list(value.args)
            args[i] = _specialise(args[i], keep)
            value.args = tuple(args)
    for st in handler.stores:
        st.index = _specialise(st.index, keep)
    return CapturedNode(name, sizes, reduction_sizes, list(index_vars),
                        list(reduce_vars), handler.stores)
