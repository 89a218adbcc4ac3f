"""Tensor parallelism of a Hugging Face decoder across spyre devices.

Each rank keeps its share of every decoder layer, Megatron-style: the
query/key/value projections by whole heads and the gate/up projections by
rows (column parallel), the output and down projections by the matching
columns (row parallel), whose partial outputs are summed over the ranks with
an all-reduce of the spyre tensors (the ``spyreccl`` c10d backend). Norms,
embeddings and the LM head stay whole on every rank, so every rank computes
the same logits and samples the same tokens. The attention modules need no
change: transformers' attention infers the number of heads from the shapes.
"""

import torch
import torch.distributed as dist


def _rows(linear, rank, size):
    out = linear.weight.shape[0]
    if out % size:
        raise ValueError(f"spyre: {out} output features do not split over {size} ranks")
    part = out // size
    linear.weight = torch.nn.Parameter(linear.weight[rank * part:(rank + 1) * part].clone(),
                                       requires_grad=False)
    if linear.bias is not None:
        linear.bias = torch.nn.Parameter(linear.bias[rank * part:(rank + 1) * part].clone(),
                                         requires_grad=False)
    linear.out_features = part


def _columns(linear, rank, size, group):
    inp = linear.weight.shape[1]
    if inp % size:
        raise ValueError(f"spyre: {inp} input features do not split over {size} ranks")
    part = inp // size
    linear.weight = torch.nn.Parameter(linear.weight[:, rank * part:(rank + 1) * part].clone(),
                                       requires_grad=False)
    if linear.bias is not None and rank != 0:
        # The bias once, on rank 0, before the sum.
        linear.bias = torch.nn.Parameter(torch.zeros_like(linear.bias), requires_grad=False)
    linear.in_features = part

    def all_reduce(module, args, output):
        dist.all_reduce(output, group=group)
        return output

    linear.register_forward_hook(all_reduce)


def shard(model, rank, size, group):
    """Keeps ``rank``'s share of ``model``'s decoder layers (in place)."""
    config = model.config.get_text_config()
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if heads % size or kv_heads % size:
        raise ValueError(f"spyre: {heads} query and {kv_heads} key/value heads do not split "
                         f"over {size} ranks")
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for name in ("q_proj", "k_proj", "v_proj"):
            _rows(getattr(attn, name), rank, size)
        _columns(attn.o_proj, rank, size, group)
        for name in ("gate_proj", "up_proj"):
            _rows(getattr(mlp, name), rank, size)
        _columns(mlp.down_proj, rank, size, group)
        for attr in ("num_heads", "num_attention_heads"):
            if hasattr(attn, attr):
                setattr(attn, attr, getattr(attn, attr) // size)
        for attr in ("num_key_value_heads",):
            if hasattr(attn, attr):
                setattr(attn, attr, getattr(attn, attr) // size)
    return model
