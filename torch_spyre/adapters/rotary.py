"""Rotary position embeddings (RoPE): `rotate_half` without a concatenation.

Stock RoPE code rotates the halves of the head dimension as
``torch.cat((-x2, x1), dim=-1)`` (x1, x2 the first and second half). The
spyre compiler has no device lowering of a concatenation (its loop body is
masked loads), so every rotate_half in every attention layer is an eager
extern kernel and a round trip of the rotated tensor through device memory.

The adapter computes the same tensor as a selection between the halves:
the head dimension viewed as (2, d/2), ``where(row == 1, x1, -x2)``,
flattened back. Negation is exact and `where` selects, so the result is
bit-identical to the concatenation (NaN and inf included).
"""

from __future__ import annotations

import types

import torch

from .fx import on_spyre, replace_with
from .registry import Adapter, register

aten = torch.ops.aten

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "granite",
            "granitemoe", "gemma", "gemma2", "gemma3_text", "phi3", "olmo", "olmo2",
            "cohere", "stablelm", "gpt_neox", "starcoder2", "helium", "glm")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half, ``cat((-x2, x1), -1)``, as a selection."""
    d = x.shape[-1]
    if d % 2:  # halves of different sizes: as written
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)
    halves = x.unflatten(-1, (2, d // 2))
    second = torch.arange(2, device=x.device).view(2, 1) == 1
    return torch.where(second, halves[..., 0:1, :], -halves[..., 1:2, :]).flatten(-2)


# --- graph form: cat([neg(slice(x, -1, h, 2h)), slice(x, -1, 0, h)], -1) ----

_END = (None, 2 ** 63 - 1)


def _slice_of(node, dim):
    """(source, start, end) of a unit-step slice along `dim` (or None)."""
    if not (isinstance(node, torch.fx.Node) and node.target is aten.slice.Tensor):
        return None
    args = list(node.args) + [None] * (5 - len(node.args))
    source, sdim, start, end, step = args[:5]
    sdim = node.kwargs.get("dim", sdim if sdim is not None else 0)
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    step = node.kwargs.get("step", step)
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if value is None or step not in (None, 1):
        return None
    if sdim % value.dim() != dim % value.dim():
        return None
    size = value.shape[dim]
    start = 0 if start is None else start
    end = size if end in _END or end >= size else end
    return source, start, end


def _rotate_half_source(node):
    """The x of a cat node that is rotate_half(x), else None."""
    if node.target is not aten.cat.default or not on_spyre(node):
        return None
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if len(tensors) != 2:
        return None
    negated, first = tensors
    if not (isinstance(negated, torch.fx.Node) and negated.target is aten.neg.default):
        return None
    value = node.meta["val"]
    if dim % value.dim() != value.dim() - 1:
        return None
    second, first = _slice_of(negated.args[0], -1), _slice_of(first, -1)
    if second is None or first is None or second[0] is not first[0]:
        return None
    d = first[0].meta["val"].shape[-1]
    if d % 2 or first[1:] != (0, d // 2) or second[1:] != (d // 2, d):
        return None
    return first[0]


def rotate_half_graph(gm: torch.fx.GraphModule) -> int:
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        source = _rotate_half_source(node)
        if source is not None:
            replace_with(gm, node, rotate_half, [source])
            count += 1
    return count


# --- module form: the attention forwards' apply_rotary_pos_emb --------------

# One rebound copy per function and bindings, shared by every module it is
# given to (see _rebind).
_rebound: dict = {}


def _rebind(fn, **names):
    """`fn` with some of its global names bound to other objects: a copy of
    the function with its own globals (the defining module is untouched).

    torch.compile keeps what it compiled, and the resume functions of a
    graph break, per code object, and installs those resume functions in the
    globals of the frame it compiled. So the copy has a code object of its
    own (the original stays compilable with its module's globals), and one
    copy serves every module: a copy per module would share the code but
    not the globals, and the second module would miss the first one's
    resume functions (NameError: __resume_at_...)."""
    key = (fn, tuple(sorted((name, id(value)) for name, value in names.items())))
    if key in _rebound:
        return _rebound[key][0]
    new = types.FunctionType(fn.__code__.replace(), {**fn.__globals__, **names}, fn.__name__,
                             fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__doc__ = fn.__qualname__, fn.__doc__
    _rebound[key] = (new, names)  # the bound objects kept alive with their ids
    return new


def _rotates_halves(fn) -> bool:
    """Whether `fn` is rotate_half as transformers writes it (checked on a
    probe: the adapter only replaces a function it reproduces)."""
    probe = torch.arange(12, dtype=torch.float32).view(2, 6) - 5
    try:
        return torch.equal(fn(probe), rotate_half(probe))
    except Exception:  # noqa: BLE001 - another function of that name
        return False


def rotate_half_module(model: torch.nn.Module) -> int:
    """Rebinds, per module instance, the forward of every attention module
    that calls `apply_rotary_pos_emb` so that function's `rotate_half` is
    the selection form. Returns the number of modules rewritten."""
    count = 0
    for module in model.modules():
        if "rotate_half" in module.__dict__.get("_spyre_adapters", ()):
            continue
        forward = type(module).forward
        code = getattr(forward, "__code__", None)
        if code is None or "apply_rotary_pos_emb" not in code.co_names:
            continue
        apply = forward.__globals__.get("apply_rotary_pos_emb")
        original = getattr(apply, "__globals__", {}).get("rotate_half")
        if (not isinstance(apply, types.FunctionType)
                or "rotate_half" not in apply.__code__.co_names
                or not isinstance(original, types.FunctionType)
                or not _rotates_halves(original)):
            continue
        new_apply = _rebind(apply, rotate_half=rotate_half)
        module.forward = types.MethodType(_rebind(forward, apply_rotary_pos_emb=new_apply),
                                          module)
        module.__dict__.setdefault("_spyre_adapters", set()).add("rotate_half")
        count += 1
    return count


ROTATE_HALF = register(Adapter(
    name="rotate_half",
    families=FAMILIES,
    description="RoPE's rotate_half, cat((-x2, x1), -1), as where(row == 1, x1, -x2) over "
                "the head dim viewed as (2, d/2): bit-identical, and no concatenation "
                "(an eager extern kernel per rotation under torch.compile)",
    graph=rotate_half_graph,
    module=rotate_half_module,
))
