"""Adapters: exact rewrites that make stock models' code lowerable by the
spyre compiler (see registry.py and docs/design.md, "Adapters").

- ``adapt(model)`` applies every adapter's module form to `model` (in place)
  and returns what it applied: ``{adapter name: places rewritten}``;
- under ``torch.compile`` on spyre, every adapter's graph form is applied by
  default (the spyre post-grad pass), counted in ``graph_counts()``.
"""

from __future__ import annotations

import torch

from .registry import (ADAPTERS, Adapter, apply_graph_adapters, graph_counts, register,
                       reset_graph_counts)
from . import relative_position, rotary  # noqa: F401  (register their adapters)

__all__ = ["ADAPTERS", "Adapter", "adapt", "apply_graph_adapters", "graph_counts",
           "register", "reset_graph_counts"]


def adapt(model: torch.nn.Module, names=None) -> dict[str, int]:
    """Applies the module form of the adapters (all, or those in `names`) to
    `model` in place; returns {adapter name: modules rewritten} for those
    that rewrote something. Applying twice rewrites nothing the second time."""
    applied = {}
    for name, adapter in ADAPTERS.items():
        if adapter.module is None or (names is not None and name not in names):
            continue
        count = adapter.module(model)
        if count:
            applied[name] = count
    return applied
