"""The counted fallback of a kernel the device lowering cannot take (an index
that is not affine per dimension, e.g. a reshape of a transpose, a flip):
its captured loop bodies become a Python function that evaluates them with
torch ops on host copies of the buffers' storage, vectorised over the
iteration space, and copies the stored buffers back to the device.

Every such kernel is recorded at compile time (`scheduling.compiled_kernels`,
kind "host", with the lowering's reason; `host_kernel_counts()`) and every
run is counted at run time (`runtime.stats()["host_kernels"]`), so a graph
that is not all device programs says so. Never a wrong answer, never a
compile failure; slow by design.
"""

from __future__ import annotations

import threading

import sympy
import torch

from .capture import CapturedNode, Reduction, SpyreLoweringError, Value

_lock = threading.Lock()
_counts: dict[str, int] = {}


def host_kernel_counts() -> dict[str, int]:
    """Kernels generated as host fallbacks in this process, per reason."""
    with _lock:
        return dict(_counts)


def _count(reason: str) -> None:
    with _lock:
        _counts[reason] = _counts.get(reason, 0) + 1


_BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "div": "/",
           "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "and_": "&", "or_": "|", "logical_and": "&", "logical_or": "|",
           "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
# Ops whose torch function has another name; any other op named as a torch
# function is that function (see _Writer.value).
_FUNCS = {"identity": "",
          # Inductor's integer division ops: Python's floor, C's remainder
          "floordiv": "torch.floor_divide", "mod": "torch.fmod",
          "int_truediv": "torch.true_divide"}
_REDUCTIONS = {"sum": "sum", "max": "amax", "min": "amin", "prod": "prod",
               "argmax": "argmax", "argmin": "argmin", "any": "any", "all": "all"}


class _Writer:
    def __init__(self, node: CapturedNode, node_i: int, printer, kept: set[str]):
        self.node, self.i, self.p = node, node_i, printer
        self.kept = kept  # the buffers stored; others are dead (an assertion's)
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        shape = list(node.sizes) + list(node.reduction_sizes)
        self.shape = shape
        self.vars = list(node.index_vars) + list(node.reduce_vars)

    def tmp(self, code: str) -> str:
        name = f"n{self.i}_t{len(self.lines)}"
        self.lines.append(f"{name} = {code}")
        return name

    def index(self, expr) -> str:
        expr = sympy.sympify(expr)
        return f"torch.as_tensor({self.p(expr)}, dtype=torch.int64)" if expr.free_symbols \
            else f"torch.tensor({int(expr)})"

    def value(self, v: Value) -> str:
        if id(v) in self.names:
            return self.names[id(v)]
        name = self._emit(v)
        self.names[id(v)] = name
        return name

    def _emit(self, v: Value) -> str:
        op = v.op
        if op == "load":
            buf, index = v.args
            return self.tmp(f"flat[{buf!r}][{self.index(index)}].float()"
                            if v.dtype.is_floating_point else
                            f"flat[{buf!r}][{self.index(index)}]")
        if op == "constant":
            return self.tmp(f"torch.tensor({v.args[0]!r}, dtype={v.dtype})")
        if op == "index_expr":
            return self.tmp(self.index(v.args[0]))
        if op == "to_dtype":
            dtype = torch.float32 if v.dtype.is_floating_point else v.dtype
            return self.tmp(f"{self.value(v.args[0])}.to({dtype})")
        if op == "reduction":
            return self._reduction(v.args[0])
        name = op[len("libdevice_"):] if op.startswith("libdevice_") else op
        if name == "device_assert_async":  # torch._assert_async: raise as CPU's kernel does
            condition, message = v.args
            checked = self.value(condition)
            self.lines.append(f"if not bool(torch.all({checked})): "
                              f"raise RuntimeError({str(message)!r})")
            return checked
        args = [self.value(a) if isinstance(a, Value) else repr(a) for a in v.args]
        if name == "fma" and len(args) == 3:
            return self.tmp(f"({args[0]} * {args[1]} + {args[2]})")
        if name in _BINARY and len(args) == 2:
            return self.tmp(f"({args[0]} {_BINARY[name]} {args[1]})")
        if name in _FUNCS:
            return self.tmp(f"{_FUNCS[name]}({', '.join(args)})")
        if name == "truncdiv" and len(args) == 2:
            return self.tmp(f"torch.div({args[0]}, {args[1]}, rounding_mode='trunc')")
        if callable(getattr(torch, name, None)) and not name.startswith("_"):
            # Inductor's pointwise ops carry torch's names (fmod, atan2,
            # hypot, copysign, sinh, ...): the torch function is the op
            return self.tmp(f"torch.{name}({', '.join(args)})")
        raise SpyreLoweringError(f"op {op!r} has no host evaluation")

    def _reduction(self, red: Reduction) -> str:
        x = self.value(red.value)
        kept = list(self.node.sizes)
        flat = self.tmp(f"torch.broadcast_to({x}, {self.shape}).reshape({kept + [-1]})")
        rt = red.reduction_type
        if rt == "welford_reduce":
            mean = self.tmp(f"{flat}.mean(-1)")
            if red.part == 0:
                return mean
            if red.part == 1:
                return self.tmp(f"(({flat} - {mean}.unsqueeze(-1)) ** 2).sum(-1)")
            count = 1
            for n in self.node.reduction_sizes:
                count *= n
            return self.tmp(f"torch.full({kept}, {float(count)})")
        if rt not in _REDUCTIONS:
            raise SpyreLoweringError(f"reduction {rt!r} has no host evaluation")
        return self.tmp(f"{flat}.{_REDUCTIONS[rt]}(-1)")

    def body(self) -> list[str]:
        out = []
        for k, var in enumerate(self.vars):
            view = [1] * len(self.shape)
            view[k] = -1
            out.append(f"{var} = torch.arange({self.shape[k]}).view({view})")
        for st in self.node.stores:
            val = self.value(st.value)
            if st.buffer not in self.kept:
                continue
            store_shape = list(self.node.sizes)
            # The index is built over the iteration vars, reduced ones
            # included (size 1 in a store's index): drop them.
            full = store_shape + [1] * len(self.node.reduction_sizes)
            idx = self.tmp(f"torch.broadcast_to({self.index(st.index)}, {full})"
                           f".reshape({store_shape})")
            self.lines.append(
                f"flat[{st.buffer!r}][{idx}] = "
                f"torch.broadcast_to({val}, {store_shape}).to(flat[{st.buffer!r}].dtype)")
        return out + self.lines


def _tensor_printer():
    """Inductor's Python printer, with Max and Min of index expressions as
    elementwise torch ops: the host evaluation's index variables are tensors
    (aranges), on which Python's max/min raise."""
    from torch._inductor.codegen.common import PythonPrinter

    class TensorPrinter(PythonPrinter):
        def _fold(self, fn, args):
            out = f"torch.as_tensor({self._print(args[0])})"
            for arg in args[1:]:
                out = f"{fn}({out}, torch.as_tensor({self._print(arg)}))"
            return out

        def _print_Max(self, expr):
            return self._fold("torch.maximum", expr.args)

        def _print_Min(self, expr):
            return self._fold("torch.minimum", expr.args)
    return TensorPrinter()


def host_kernel_source(kernel_name: str, nodes: list[CapturedNode], loads: list[str],
                       stores: list[str]) -> str:
    """Python source of `def kernel_name(*buffers)` (loads, then stores).
    Values stored to a buffer not in `stores` (one Inductor removed as
    unread, such as an assertion's) are computed, not kept."""
    printer = _tensor_printer().doprint
    lines = [f"def {kernel_name}({', '.join(loads + stores)}):",
             "    import torch",
             "    from torch_spyre._inductor.runtime import count_host_kernel, "
             "host_storage, write_back",
             f"    count_host_kernel({kernel_name!r})"]
    args = loads + stores
    lines.append("    flat = {" + ", ".join(f"{b!r}: host_storage({b})" for b in args) + "}")
    for i, node in enumerate(nodes):
        for line in _Writer(node, i, printer, set(stores)).body():
            lines.append("    " + line)
    for b in stores:
        lines.append(f"    write_back({b}, flat[{b!r}])")
    return "\n".join(lines)


def record(reason: str) -> None:
    _count(reason)
