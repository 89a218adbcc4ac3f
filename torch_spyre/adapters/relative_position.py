"""Relative-position buckets (T5 and its descendants): `abs` of an integer
position difference as a selection.

T5's `_relative_position_bucket` takes ``torch.abs(memory_position -
context_position)`` of two aranges. Inductor folds the aranges into the
index expression ``Abs(col - row)``, which is not affine, so the bucket
kernel of every attention bias runs as a host fallback. Written as
``where(x < 0, -x, x)`` the comparison and the negation stay ops over affine
index expressions, and the kernel is a device program.

Exact for every integer: where x < 0, -x is what abs gives (including the
most negative value, which both wrap to itself). Floating abs is left alone
(-0.0 and NaN would differ).
"""

from __future__ import annotations

import torch

from .fx import on_spyre, replace_with
from .registry import Adapter, register

aten = torch.ops.aten

FAMILIES = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano", "udop")


def integer_abs(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, -x, x)


def integer_abs_graph(gm: torch.fx.GraphModule) -> int:
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.abs.default:
            continue
        value = node.meta.get("val")
        if not on_spyre(node) or value.dtype.is_floating_point or value.dtype.is_complex \
                or value.dtype == torch.bool:
            continue
        replace_with(gm, node, integer_abs, [node.args[0]])
        count += 1
    return count


INTEGER_ABS = register(Adapter(
    name="integer_abs",
    families=FAMILIES,
    description="abs of an integer tensor (T5's relative positions) as where(x < 0, -x, x): "
                "exact for every integer, and the bucket kernel lowers to the device "
                "instead of a host fallback (Abs of an index expression is not affine)",
    graph=integer_abs_graph,
))
