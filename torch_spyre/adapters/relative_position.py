"""Relative-position buckets (T5 and its descendants): `abs`, `minimum` and
`maximum` of integer position differences as selections.

T5's `_relative_position_bucket` takes ``torch.abs(memory_position -
context_position)`` of two aranges. Inductor folds the aranges into the
index expression ``Abs(col - row)``, which is not affine, so the bucket
kernel of every attention bias runs as a host fallback. Written as
``where(x < 0, -x, x)`` the comparison and the negation stay ops over affine
index expressions, and the kernel is a device program.

The decoder's (unidirectional) buckets take ``-torch.min(relative,
zeros_like(relative))``, folded to ``-Min(0, col - row)``: the same holds for
``minimum(a, b)`` written ``where(a < b, a, b)`` (and maximum alike).

Exact for every integer: where x < 0, -x is what abs gives (including the
most negative value, which both wrap to itself), and integers have no NaN
for minimum/maximum to propagate. Floating tensors are left alone (-0.0 and
NaN would differ).
"""

from __future__ import annotations

import torch

from .fx import on_spyre, replace_with
from .registry import Adapter, register

aten = torch.ops.aten

FAMILIES = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano", "udop")


def integer_abs(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, -x, x)


def integer_minimum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a < b, a, b)


def integer_maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a > b, a, b)


_SELECTIONS = {aten.abs.default: integer_abs, aten.minimum.default: integer_minimum,
               aten.maximum.default: integer_maximum}


def _integer(node) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return (isinstance(value, torch.Tensor) and not value.dtype.is_floating_point
            and not value.dtype.is_complex and value.dtype != torch.bool)


def integer_abs_graph(gm: torch.fx.GraphModule) -> int:
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SELECTIONS or node.kwargs:
            continue
        # every operand an integer tensor of the result's dtype (no promotion)
        if not (on_spyre(node) and _integer(node) and all(
                _integer(a) and a.meta["val"].dtype == node.meta["val"].dtype
                for a in node.args)):
            continue
        replace_with(gm, node, _SELECTIONS[node.target], list(node.args))
        count += 1
    return count


INTEGER_ABS = register(Adapter(
    name="integer_abs_min_max",
    families=FAMILIES,
    description="abs, minimum and maximum of integer tensors (T5's relative positions) as "
                "where(x < 0, -x, x), where(a < b, a, b), where(a > b, a, b): exact for "
                "every integer, and the bucket kernel lowers to the device instead of a "
                "host fallback (Abs/Min of an index expression is not affine)",
    graph=integer_abs_graph,
))
