"""vLLM's layers on spyre, through vLLM's own extension point: ``CustomOp``.

vLLM builds its models from ``CustomOp`` layers (``RMSNorm``, ``SiluAndMul``,
``RotaryEmbedding``, ...); each dispatches its forward per platform, on an
out-of-tree platform to ``forward_oot`` (``vllm/model_executor/custom_op.py``:
``CustomOp.dispatch_forward``). ``CustomOp.register_oot`` names a subclass
that vLLM then instantiates in place of its own class (``CustomOp.__new__``
looks the class's ``__name__`` up in ``op_registry_oot``, so a subclass of
a layer needs a registration of its own). ``register()`` registers a spyre
class for each layer below and for each subclass vLLM defines of it that
keeps its forward (``TPAwareRMSNorm`` of the Transformers modeling backend,
the scaled rotary embeddings), once per class, in both of vLLM 0.32.0's
registries:

* ``vllm.model_executor.custom_op``: vLLM's own layers;
* ``vllm.model_executor.hw_agnostic.custom_op``: the hardware-agnostic
  layers the Transformers modeling backend takes with
  ``VLLM_USE_HW_AGNOSTIC=1`` (``models/transformers/layers.py``: its
  ``RMSNorm`` and ``SiluAndMul``; its ``GemmaRMSNorm`` is vLLM's own).

Each ``forward_oot`` computes what the layer's ``forward_native`` computes,
in device ops only (no CPU fallback):

* RMS norms: one ``F.rms_norm`` (the device's fused norm kernel, in fp32
  inside with one rounding of the output). With a residual, vLLM's
  ``fused_add_rms_norm``: ``residual = x + residual`` then the norm of it;
  returns ``(normed, residual)`` as new tensors, the inputs untouched (as
  ``forward_native`` on the CPU). A weight of another dtype than the input
  (``GemmaRMSNorm``'s ``1 + w`` in fp32) is applied in fp32 as vLLM does:
  the input cast to fp32, one ``F.rms_norm``, the result cast back. A
  ``var_hidden_size`` (statistics over the first features only) takes the
  reference's steps in device ops.
* ``SiluAndMul``/``GeluAndMul``: the activation of the first half times the
  second half (two device ops; views of the input, no copies).
* ``RotaryEmbedding`` and its subclasses that keep its ``forward_native``
  (Llama 3, linear, NTK and YaRN scaling...): the cos/sin rows of the
  positions (one ``index_select`` of the cache in the query's dtype on the
  device), the rotation of the first ``rotary_dim`` features, neox
  (halves) or GPT-J (interleaved) style, the rest passed through; new
  query and key tensors in the inputs' shapes, in the reference's order of
  operations.

The registration needs vLLM's config machinery imported (``CustomOp``
imports ``vllm.config``), so it is not done in ``torch_spyre.vllm.register``
(vLLM's platform resolution) but by ``SpyrePlatform.pre_register_and_update``
(the engine's process), ``SpyreWorker.init_device`` (each worker's) and the
model runner before it builds one of vLLM's models (subclasses defined since).
"""

import threading

import torch
import torch.nn.functional as F

_lock = threading.Lock()
# {registry name: our class}, per registry ("vllm", "hw_agnostic").
REGISTERED: dict[str, dict[str, type]] = {}


# --- the computations ---------------------------------------------------------


def rms_norm(x, weight, eps, variance_size=None):
    """vLLM's ``ir.ops.rms_norm`` in device ops."""
    if variance_size is not None:
        x32 = x.float()
        variance = x32[..., :variance_size].pow(2).mean(dim=-1, keepdim=True)
        out = x32 * torch.rsqrt(variance + eps)
        if weight is not None:
            out = out.to(weight.dtype) * weight
        return out.to(x.dtype)
    shape = (x.shape[-1],)
    if weight is None or weight.dtype == x.dtype:
        return F.rms_norm(x, shape, weight, eps)
    # The weight's dtype: vLLM normalizes in fp32 and multiplies in the
    # weight's dtype (fp32 for Gemma's 1 + w) before casting back.
    compute = torch.promote_types(weight.dtype, torch.float32)
    return F.rms_norm(x.to(compute), shape, weight.to(compute), eps).to(x.dtype)


def fused_add_rms_norm(x, residual, weight, eps, variance_size=None):
    """vLLM's ``ir.ops.fused_add_rms_norm``: ``(norm(x + residual), x +
    residual)``, new tensors."""
    total = x + residual
    return rms_norm(total, weight, eps, variance_size), total


def _rotate(x, cos, sin, num_tokens, head_size, rotary_dim, neox):
    """``x [..., heads * head_size]`` (any shape ``num_tokens * heads *
    head_size`` elements, as vLLM's ``forward_static``) rotated: its first
    ``rotary_dim`` features of each head; ``cos``/``sin`` ``[tokens, 1,
    rotary_dim // 2]``."""
    shape = x.shape
    x = x.reshape(num_tokens, -1, head_size)
    half = rotary_dim // 2
    if neox:
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
    else:
        x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if neox:
        pieces = (o1, o2)
    else:
        pieces = (torch.stack((o1, o2), dim=-1).flatten(-2),)
    if rotary_dim < head_size:
        pieces = pieces + (x[..., rotary_dim:],)
    out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)
    return out.reshape(shape)


def rotary_embedding(positions, query, key, cos_sin_cache, head_size, rotary_dim, neox):
    """vLLM's ``RotaryEmbedding.forward_static`` in device ops."""
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    cos_sin = cos_sin_cache.index_select(0, positions).unsqueeze(-2)
    half = cos_sin.shape[-1] // 2
    cos, sin = cos_sin[..., :half], cos_sin[..., half:]
    query = _rotate(query, cos, sin, num_tokens, head_size, rotary_dim, neox)
    if key is not None:
        key = _rotate(key, cos, sin, num_tokens, head_size, rotary_dim, neox)
    return query, key


# --- the layers' forward_oot, shared by the classes of both registries ----------


class RMSNormOOT:
    """``forward_oot`` of vLLM's ``RMSNorm`` (both registries)."""

    def _spyre_weight(self, residual):
        # vLLM's RMSNorm: pass_weight(_add) (its weight a plain tensor of
        # ones when has_weight=False); the hw-agnostic one: has_weight.
        flag = "pass_weight" if residual is None else "pass_weight_add"
        if not getattr(self, flag, getattr(self, "has_weight", True)):
            return None
        return self.weight.data

    def forward_oot(self, x, residual=None):
        weight = self._spyre_weight(residual)
        if residual is None:
            return rms_norm(x, weight, self.variance_epsilon, self.variance_size_override)
        return fused_add_rms_norm(x, residual, weight, self.variance_epsilon,
                                  self.variance_size_override)


class GemmaRMSNormOOT:
    """``forward_oot`` of vLLM's ``GemmaRMSNorm``: ``x * (1 + w)``, the
    weight ``1 + w`` in fp32 made on the device per call (one small op: a
    cached copy would miss weights loaded through ``param.data.copy_``,
    which leaves the parameter's version counter as it was)."""

    def forward_oot(self, x, residual=None):
        weight = self.weight.data.float() + 1.0
        if residual is None:
            return rms_norm(x, weight, self.variance_epsilon)
        return fused_add_rms_norm(x, residual, weight, self.variance_epsilon)


class SiluAndMulOOT:
    def forward_oot(self, x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class GeluAndMulOOT:
    def forward_oot(self, x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=self.approximate) * x[..., d:]


class RotaryEmbeddingOOT:
    """``forward_oot`` of vLLM's ``RotaryEmbedding`` and of its subclasses
    that keep its ``forward_native`` (they differ in their cos/sin cache
    only)."""

    def forward_oot(self, positions, query, key=None):
        cache = self._match_cos_sin_cache_dtype(query)
        return rotary_embedding(positions, query, key, cache, self.head_size,
                                self.rotary_dim, self.is_neox_style)


# --- registration ---------------------------------------------------------------

# forward_* methods a subclass of a registered layer must keep (inherit) to be
# served by the same spyre forward: norms and activations may wrap forward
# (vLLM's TPAwareRMSNorm of the Transformers modeling backend does) but not
# compute another native forward; rotary embeddings keep all of them.
_KEEP = ("forward_native", "forward_oot")
_KEEP_ROTARY = ("forward_native", "forward_static", "forward_oot", "forward")


def _oot_class(mixin, base, prefix):
    """``<prefix><base>``: the mixin's forward_oot over vLLM's class ``base``."""
    return type(f"{prefix}{base.__name__}", (mixin, base),
                {"__module__": __name__, "__doc__": f"vLLM's {base.__name__} on spyre "
                 f"(torch_spyre.vllm.layers.{mixin.__name__})."})


def _family(base, keep):
    """``base`` and its subclasses defined by vLLM that keep ``keep``."""
    found, todo, seen = [], [base], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__module__.startswith("vllm.") and all(
                getattr(cls, name) is getattr(base, name) for name in keep):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _families():
    """(registry, its custom_op module, mixin, base, keep, class name prefix)."""
    from vllm.model_executor import custom_op
    from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    import vllm.model_executor.layers.rotary_embedding  # noqa: F401 (its subclasses)

    families = [("vllm", custom_op, RMSNormOOT, RMSNorm, _KEEP, "Spyre"),
                ("vllm", custom_op, GemmaRMSNormOOT, GemmaRMSNorm, _KEEP, "Spyre"),
                ("vllm", custom_op, SiluAndMulOOT, SiluAndMul, _KEEP, "Spyre"),
                ("vllm", custom_op, GeluAndMulOOT, GeluAndMul, _KEEP, "Spyre"),
                ("vllm", custom_op, RotaryEmbeddingOOT, RotaryEmbedding, _KEEP_ROTARY,
                 "Spyre")]
    try:
        from vllm.model_executor.hw_agnostic import custom_op as hw_custom_op
        from vllm.model_executor.hw_agnostic.layers.activation import \
            SiluAndMul as HwSiluAndMul
        from vllm.model_executor.hw_agnostic.layers.layernorm import RMSNorm as HwRMSNorm
    except ImportError:  # a vLLM without the hardware-agnostic layers
        return families
    return families + [
        ("hw_agnostic", hw_custom_op, RMSNormOOT, HwRMSNorm, _KEEP, "SpyreHwAgnostic"),
        ("hw_agnostic", hw_custom_op, SiluAndMulOOT, HwSiluAndMul, _KEEP, "SpyreHwAgnostic"),
    ]


def register():
    """Registers the spyre layers with vLLM's CustomOp registries: for each
    layer, vLLM's class and the subclasses vLLM has defined so far that keep
    its forward (the Transformers modeling backend defines its TPAwareRMSNorm
    when imported: the model runner calls this again after importing it).
    A class is registered once; later calls add only new subclasses.
    Returns ``REGISTERED``: {registry: {class name: spyre class}}."""
    with _lock:
        for registry, custom_op, mixin, base, keep, prefix in _families():
            table = REGISTERED.setdefault(registry, {})
            for cls in _family(base, keep):
                name = cls.__name__
                if name in custom_op.op_registry_oot:
                    # Ours from an earlier call, or another plugin's: kept.
                    table.setdefault(name, custom_op.op_registry_oot[name])
                    continue
                ours = _oot_class(mixin, cls, prefix)
                custom_op.CustomOp.register_oot(ours, name=name)
                # register_oot names it by the class name; vLLM's own name (e.g.
                # "rms_norm") keeps custom_ops=["-rms_norm"] meaning what it says.
                if hasattr(cls, "name"):
                    ours.name = cls.name
                table[name] = ours
        return REGISTERED
