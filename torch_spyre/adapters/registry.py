"""The adapter record and the registry.

An adapter is an exact rewrite that makes a stock model's code lowerable
where the spyre compiler cannot take an op as written. It names the model
families it serves and carries up to two forms of the same rewrite:

- ``graph``: a rewrite of a post-grad FX graph (``fn(gm) -> int``, the
  number of places rewritten). Applied by default under ``torch.compile`` on
  spyre, by the spyre post-grad pass, to nodes on the spyre device only.
- ``module``: a rewrite of an ``nn.Module`` tree (``fn(model) -> int``),
  applied by ``torch_spyre.adapters.adapt(model)``; it works for eager
  models and any compile backend.

Both forms give the original code's values: every adapter has a CPU test
(test/python/test_adapters.py) proving it.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Optional

import torch


@dataclasses.dataclass(frozen=True)
class Adapter:
    name: str
    families: tuple[str, ...]  # model families (transformers model types) it serves
    description: str
    graph: Optional[Callable[[torch.fx.GraphModule], int]] = None
    module: Optional[Callable[[torch.nn.Module], int]] = None


ADAPTERS: dict[str, Adapter] = {}

_lock = threading.Lock()
_graph_counts: dict[str, int] = {}


def register(adapter: Adapter) -> Adapter:
    if adapter.name in ADAPTERS:
        raise ValueError(f"spyre: adapter {adapter.name!r} is already registered")
    if adapter.graph is None and adapter.module is None:
        raise ValueError(f"spyre: adapter {adapter.name!r} has no rewrite")
    ADAPTERS[adapter.name] = adapter
    return adapter


def graph_counts() -> dict[str, int]:
    """Places rewritten by each adapter's graph form in this process (counted
    at compile time: a module loaded from Inductor's cache counts nothing)."""
    with _lock:
        return dict(_graph_counts)


def reset_graph_counts() -> None:
    with _lock:
        _graph_counts.clear()


def apply_graph_adapters(gm: torch.fx.GraphModule) -> bool:
    """Runs every graph adapter on `gm` (the spyre post-grad pass calls this
    first); True if any rewrote something."""
    changed = False
    for adapter in ADAPTERS.values():
        if adapter.graph is None:
            continue
        count = adapter.graph(gm)
        if count:
            with _lock:
                _graph_counts[adapter.name] = _graph_counts.get(adapter.name, 0) + count
            changed = True
    return changed
