"""Spyre-only graph rewrites, applied by Inductor's per-device post-grad pass
(register_backend_for_device(device_custom_pass=...)) to nodes on the spyre
device only; Inductor's global decomposition and lowering tables are never
touched.

1. DECOMPOSITIONS: one registry of exact rewrites into ops the device
   lowering handles (e.g. pow(x, 3.0) -> x*x*x, log2 -> log * 1/ln 2).
2. EAGER_OPS: ops whose Inductor lowering needs what the device lowering
   lacks (indirect indexing, masked loads, scans). Their nodes are routed to
   a `spyre_eager::` twin of the op, which Inductor keeps as an extern
   (fallback) kernel: it runs eagerly on spyre tensors (a device kernel of
   the eager library, or the counted CPU fallback). Counted in
   `fallback_counts()`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import pathlib
import threading
from typing import Callable

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass

aten = torch.ops.aten

DECOMPOSITIONS: dict = {}


def register_decomposition(*ops):
    def wrap(fn: Callable):
        for op in ops:
            if op in DECOMPOSITIONS:
                raise ValueError(f"spyre: {op} already has a decomposition")
            DECOMPOSITIONS[op] = fn
        return fn
    return wrap


@register_decomposition(aten.pow.Tensor_Scalar)
def pow_scalar(x, exponent):
    """Small integer and half-integer exponents as products (exact in fp32
    compute; pow on the vector unit goes through exp/log)."""
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return NotImplemented
    if exponent == 0.5:
        return torch.sqrt(x)
    if exponent == -0.5:
        return torch.rsqrt(x)
    if exponent == -1:
        return torch.reciprocal(x)
    if float(exponent).is_integer() and 1 <= exponent <= 4:
        out = x
        for _ in range(int(exponent) - 1):
            out = out * x
        return out
    return NotImplemented


@register_decomposition(aten.log2.default)
def log2(x):
    return torch.log(x) * (1.0 / math.log(2.0))


@register_decomposition(aten.log10.default)
def log10(x):
    return torch.log(x) * (1.0 / math.log(10.0))


@register_decomposition(aten.tan.default)
def tan(x):
    return torch.sin(x) / torch.cos(x)


@register_decomposition(aten.sign.default)
def sign(x):
    # post-grad graphs convert dtypes with prims (no aten._to_copy)
    convert = torch.ops.prims.convert_element_type.default
    return convert(x > 0, x.dtype) - convert(x < 0, x.dtype)


# Ops run eagerly (extern kernels) instead of being lowered.
EAGER_OPS = {
    aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default,
    aten.sort.default, aten.sort.stable, aten.topk.default, aten.argsort.default,
    aten.argsort.stable,
    aten.embedding.default, aten.index.Tensor, aten.gather.default,
    aten.index_select.default, aten.scatter.src, aten.scatter.value,
    aten.scatter_add.default, aten.cat.default, aten.constant_pad_nd.default,
    aten.flip.default, aten.roll.default, aten.slice_scatter.default,
    aten.select_scatter.default, aten.repeat.default,
    # writes at indexed places: a static KV cache's update (index_copy_ at
    # cache_position), index_put_ of masks, index_add/index_fill
    aten.index_copy.default, aten.index_put.default, aten.index_add.default,
    aten.index_fill.int_Scalar, aten.index_fill.int_Tensor,
    aten.masked_scatter.default, aten.scatter_reduce.two,
    # floor_divide's form after decomposition (integers: the device's
    # division; floating floor: the CPU's fmod formula, a counted fallback)
    aten.div.Tensor_mode, aten.div.Scalar_mode,
    # windows with padding (masked loads) have no device lowering
    aten.avg_pool2d.default,
}

# Post-grad graphs pass Python numbers where these schemas take a Tensor
# (x // 2 is div.Tensor_mode(x, 2)): their Scalar overloads take them.
SCALAR_OVERLOADS = {aten.div.Tensor_mode: aten.div.Scalar_mode}

# Functional ops that write into a copy of their first argument, whose in-place
# form the pass calls instead when the graph copies the result back into that
# argument, a graph input (a static KV cache's index_copy_ at cache_position,
# functionalised). Inductor's reinplacing would do this for aten's ops, but it
# runs after this pass and does not know their spyre_eager:: twins; without
# it each call first clones the whole cache, and a kernel copies it back.
INPLACE_FORMS = {aten.index_put.default: aten.index_put_.default,
                 aten.index_copy.default: aten.index_copy_.default}

_lock = threading.Lock()
_fallback_counts: dict[str, int] = {}
_decomposition_counts: dict[str, int] = {}
_eager_lib = None
_eager_ops: dict = {}


def fallback_counts() -> dict[str, int]:
    """Nodes routed to eager extern kernels by the pass, per op, in this
    process (counted at compile time)."""
    with _lock:
        return dict(_fallback_counts)


def decomposition_counts() -> dict[str, int]:
    """Nodes rewritten by DECOMPOSITIONS, per op, in this process."""
    with _lock:
        return dict(_decomposition_counts)


def _count(counts, key):
    with _lock:
        counts[key] = counts.get(key, 0) + 1


def _eager_twin(op):
    """spyre_eager::<op>_<overload>: the same schema, implemented by calling
    the op (so Inductor cannot lower it, and runs it as an extern kernel)."""
    global _eager_lib
    with _lock:
        if op in _eager_ops:
            return _eager_ops[op]
        if _eager_lib is None:
            _eager_lib = torch.library.Library("spyre_eager", "DEF")
        schema = op._schema
        in_place = op in INPLACE_FORMS.values()
        if not in_place and (any(a.alias_info is not None for a in schema.arguments) or any(
                r.alias_info is not None for r in schema.returns)):
            return None  # mutating or aliasing ops stay as they are
        name = f"{schema.name.split('::')[-1]}_{schema.overload_name or 'default'}"
        signature = str(schema)[len(schema.name) + (len(schema.overload_name) + 1
                                                    if schema.overload_name else 0):]
        if in_place:
            # the in-place form writes its first argument and returns
            # nothing (an extern kernel may not return an alias of an input)
            signature = signature[:signature.rindex(" -> ")] + " -> ()"
        _eager_lib.define(name + signature)

        def run(*args, **kwargs):
            result = op(*args, **kwargs)
            return None if in_place else result
        _eager_lib.impl(name, run, "CompositeExplicitAutograd")
        twin = getattr(getattr(torch.ops.spyre_eager, name), "default")
        _eager_ops[op] = twin
        return twin


def define_eager_twins() -> None:
    """Defines every spyre_eager:: op up front: a compiled module loaded from
    Inductor's cache calls them without this process having run the pass."""
    for op in [*EAGER_OPS, *INPLACE_FORMS.values()]:
        _eager_twin(op)


def _on_spyre(node) -> bool:
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    for v in vals:
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.device.type == "spyre":
                return True
    return False


def _written_back_in_place(gm: torch.fx.GraphModule, node) -> bool:
    """`node` (an INPLACE_FORMS op) as its in-place twin, when its result is
    copied back into its first argument, a graph input, and nothing reads
    that input's old value after it (the input itself or a view of it):
    readers of the result read the input, and the copy back goes. Not when
    the values written share the input's memory (the in-place op would read
    what it writes), nor when the result is returned (the function would
    return the input itself where eager returns a new tensor)."""
    from torch._inductor.fx_utils import get_node_storage
    target = node.args[0] if node.args else None
    if not isinstance(target, torch.fx.Node) or target.op != "placeholder":
        return False
    storage = get_node_storage(target)
    copies = [u for u in node.users if u.target is aten.copy_.default
              and u.args[0] is target and u.args[1] is node and not u.users]
    if storage is None or len(copies) != 1 or any(u.op == "output" for u in node.users):
        return False
    operands = torch.fx.node.map_arg((node.args[1:], node.kwargs), lambda n: n)
    written = [n for n in torch.utils._pytree.tree_leaves(operands)
               if isinstance(n, torch.fx.Node)]
    if any(get_node_storage(n) == storage for n in written):
        return False
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for alias in (n for n in gm.graph.nodes if get_node_storage(n) == storage):
        if any(order[u] > order[node] for u in alias.users if u not in (node, copies[0])):
            return False
    twin = _eager_twin(INPLACE_FORMS[node.target])
    with gm.graph.inserting_before(node):
        write = gm.graph.call_function(twin, node.args, node.kwargs)
    write.meta["val"] = None
    gm.graph.erase_node(copies[0])
    node.replace_all_uses_with(target)
    gm.graph.erase_node(node)
    return True


def _decompose(gm: torch.fx.GraphModule, node) -> bool:
    fn = DECOMPOSITIONS[node.target]
    args, kwargs = node.args, node.kwargs
    fake_args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    fake_kwargs = {k: (v.meta["val"] if isinstance(v, torch.fx.Node) else v)
                   for k, v in kwargs.items()}
    if fn(*fake_args, **fake_kwargs) is NotImplemented:
        return False
    from torch_spyre.adapters.fx import replace_with
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, torch.fx.Node)]

    def traced(*tensors):
        full = list(args)
        for i, t in zip(tensor_pos, tensors):
            full[i] = t
        return fn(*full, **kwargs)
    replace_with(gm, node, traced, [args[i] for i in tensor_pos], decompose=False)
    return True


def _normalise_by_reciprocal(gm: torch.fx.GraphModule) -> bool:
    """softmax's last step, e / e.sum(dim, keepdim=True) with e = exp(..),
    as PyTorch's CPU softmax kernel computes it: e * (1 / sum). The same
    values as the CPU's and as spyre's eager softmax (kernels/softmax.cpp
    describes that graph), and one reciprocal per row instead of a division
    per element."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.target is not aten.div.Tensor or not _on_spyre(node):
            continue
        e, total = node.args
        if not (isinstance(e, torch.fx.Node) and isinstance(total, torch.fx.Node)
                and e.target is aten.exp.default
                and total.target is aten.sum.dim_IntList and total.args[0] is e
                and (len(total.args) > 2 and total.args[2] or total.kwargs.get("keepdim"))):
            continue
        with gm.graph.inserting_before(node):
            inverse = gm.graph.call_function(aten.reciprocal.default, (total,))
            inverse.meta["val"] = total.meta["val"]
            product = gm.graph.call_function(aten.mul.Tensor, (e, inverse))
            product.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(product)
        gm.graph.erase_node(node)
        changed = True
    return changed


_VIEWS = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


def _repeated_heads_source(node):
    """`x` when `node` is transformers' repeat_kv(x, rep) of a [B, Hk, S, D]
    x, as a post-grad graph holds it: reshape(clone(expand(unsqueeze(x, 2),
    [B, Hk, rep, S, D])), [B, Hk * rep, S, D]); else None."""
    if not (isinstance(node, torch.fx.Node) and node.target in _VIEWS):
        return None
    clone = node.args[0]
    if not (isinstance(clone, torch.fx.Node) and clone.target is aten.clone.default):
        return None
    expand = clone.args[0]
    if not (isinstance(expand, torch.fx.Node) and expand.target is aten.expand.default):
        return None
    unsqueeze = expand.args[0]
    if not (isinstance(unsqueeze, torch.fx.Node)
            and unsqueeze.target is aten.unsqueeze.default and unsqueeze.args[1] == 2):
        return None
    source = unsqueeze.args[0]
    x, out = source.meta.get("val"), node.meta.get("val")
    if not (isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and x.dim() == 4):
        return None
    b, heads, s, d = x.shape
    rep = out.shape[1] // heads if heads else 0
    if (rep < 1 or list(expand.args[1]) != [b, heads, rep, s, d]
            or list(out.shape) != [b, heads * rep, s, d]):
        return None
    return source


def _attend_to_grouped_heads(gm: torch.fx.GraphModule) -> bool:
    """Attention over key/value heads repeated to the query's (repeat_kv
    before scaled_dot_product_attention, grouped-query models) reads the
    unrepeated heads: spyre's attention program groups query head h with
    key/value head h // rep, which is the head repeat_kv puts there. The
    same values, without writing the repeated keys and values to device
    memory on every call."""
    changed = False
    for node in list(gm.graph.nodes):
        if (node.target is not aten._scaled_dot_product_fused_attention_overrideable.default
                or not _on_spyre(node)):
            continue
        key, value = node.args[1], node.args[2]
        key_source, value_source = _repeated_heads_source(key), _repeated_heads_source(value)
        if key_source is None or value_source is None:
            continue
        if key_source.meta["val"].shape[1] != value_source.meta["val"].shape[1]:
            continue
        node.args = (node.args[0], key_source, value_source, *node.args[3:])
        changed = True
    if changed:
        gm.graph.eliminate_dead_code()
    return changed


def apply_spyre_rewrites(gm: torch.fx.GraphModule) -> None:
    # the adapters' graph forms first (torch_spyre/adapters: exact rewrites
    # of stock models' code, e.g. RoPE's rotate_half without a cat)
    from ..adapters import apply_graph_adapters
    from . import config
    changed = config.adapters and apply_graph_adapters(gm)
    changed = _normalise_by_reciprocal(gm) or changed
    changed = _attend_to_grouped_heads(gm) or changed
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not _on_spyre(node):
            continue
        if node.target in DECOMPOSITIONS:
            target = str(node.target)
            if _decompose(gm, node):
                _count(_decomposition_counts, target)
                changed = True
        elif node.target in INPLACE_FORMS and _written_back_in_place(gm, node):
            _count(_fallback_counts, str(node.target))
            changed = True
        elif node.target in EAGER_OPS:
            if (node.target in SCALAR_OVERLOADS and len(node.args) > 1
                    and not isinstance(node.args[1], torch.fx.Node)):
                node.target = SCALAR_OVERLOADS[node.target]
            twin = _eager_twin(node.target)
            if twin is not None:
                _count(_fallback_counts, str(node.target))
                node.target = twin
                changed = True
    from . import config
    from .matmul import rewrite_matmuls, supported_activations
    if config.matmul_programs and rewrite_matmuls(
            gm, supported_activations() if config.fusion else ("none",),
            fuse_mlp=config.fusion and config.mlp_fusion):
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


@functools.cache
def _native_library_digest() -> bytes:
    """The built kernel library and runtime: a compiled module embeds
    programs their builders made, serialised in the runtime's format, so a
    rebuilt library must not reuse modules compiled by the old one."""
    lib = pathlib.Path(__file__).resolve().parent.parent / "lib"
    digest = hashlib.sha256()
    for name in ("libspyre_kernels.so", "libspyre_runtime.so"):
        path = lib / name
        digest.update(path.read_bytes() if path.exists() else name.encode())
    return digest.digest()


class SpyrePostGradPass(CustomGraphModulePass):
    def __call__(self, gm: torch.fx.GraphModule) -> None:
        apply_spyre_rewrites(gm)

    def uuid(self):
        # Inductor's cache key: the text of the whole spyre compiler (this
        # pass, the lowering, the wrapper), so a changed lowering never
        # reuses a module compiled by the old one, the lowering switches
        # (config.py), which change the programs, and the native library
        # that builds and serialises them
        from . import config
        digest = hashlib.sha256()
        for path in sorted(pathlib.Path(__file__).parent.glob("*.py")):
            digest.update(path.read_bytes())
        for path in sorted((pathlib.Path(__file__).parent.parent / "adapters").glob("*.py")):
            digest.update(path.read_bytes())
        digest.update(repr(config.snapshot()).encode())
        digest.update(_native_library_digest())
        return digest.hexdigest()
