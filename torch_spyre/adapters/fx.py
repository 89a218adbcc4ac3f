"""Helpers of the graph adapters: node tests and splicing a traced
replacement into a post-grad graph."""

from __future__ import annotations

import torch


def on_spyre(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.device.type == "spyre"


def replace_with(gm: torch.fx.GraphModule, node: torch.fx.Node, fn, inputs,
                 decompose: bool = True) -> None:
    """Replaces `node` by the ops of `fn(*inputs)`, traced on the inputs' fake
    values (make_fx). With `decompose`, the trace applies Inductor's
    decompositions: the same aten ops a post-grad graph holds."""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx
    table = select_decomp_table() if decompose else None
    sub = make_fx(fn, decomposition_table=table,
                  tracing_mode="fake")(*[n.meta["val"] for n in inputs])
    env, placeholders, result = {}, iter(inputs), None
    with gm.graph.inserting_before(node):
        for sn in sub.graph.nodes:
            if sn.op == "placeholder":
                env[sn] = next(placeholders)
            elif sn.op == "output":
                result = torch.fx.map_arg(sn.args[0], lambda n: env[n])
            else:
                env[sn] = gm.graph.node_copy(sn, lambda n: env[n])
    node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
