"""What vLLM's attention selector gets on the spyre platform.

vLLM asks the platform for an attention backend class
(``get_attn_backend_cls``) for its KV cache questions (layouts, dtypes, block
sizes) and, when the model is one of vLLM's (``model_impl="transformers"``:
vLLM's Transformers modeling backend; ``model_impl="vllm"``: vLLM's own
model), for the implementation behind each of vLLM's ``Attention`` layers.
``SpyreAttentionImpl`` attends with ``attention.attend_step``, the paged
attention the Hugging Face path uses too: the step (``attention.StepBatch``)
is the layer's attention metadata in vLLM's forward context, the layer's KV
cache (``layer.kv_cache``, bound by the model runner) its ``(keys, values)``
pair in device memory. The model runner builds the step itself: no metadata
builder.
"""

import torch
from vllm.v1.attention.backend import AttentionBackend, AttentionImpl, AttentionType

from . import attention

NAME = "SPYRE_PAGED"


def register():
    """Adds ``SPYRE_PAGED`` to vLLM's AttentionBackendEnum (once)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if NAME not in AttentionBackendEnum.__members__:
        register_backend(NAME, f"{__name__}.SpyreAttentionBackend")


class SpyreAttentionImpl(AttentionImpl):
    """vLLM's ``AttentionImpl`` over ``attention.attend_step``: decoder
    self-attention, optional sliding window and logit soft-capping; the KV
    cache in the model's dtype."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 **extra):
        unsupported = []
        if alibi_slopes is not None:
            unsupported.append("ALiBi")
        if attn_type != AttentionType.DECODER:
            unsupported.append(f"attention type {attn_type}")
        if kv_sharing_target_layer_name is not None:
            unsupported.append("KV cache sharing between layers")
        if kv_cache_dtype not in ("auto", None):
            unsupported.append(f"kv_cache_dtype={kv_cache_dtype!r}")
        if extra.get("sinks") is not None:
            unsupported.append("attention sinks")
        if unsupported:
            raise NotImplementedError("spyre: not supported yet by the spyre attention: "
                                      + ", ".join(unsupported))
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = logits_soft_cap or None

    # Outside any compiled graph (as the transformers attention function):
    # what it does depends on the step, not on shapes a graph could guard on.
    @torch.compiler.disable
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        """``query [tokens, heads, head]``, ``key/value [tokens, kv_heads,
        head]`` (views, as vLLM's ``Attention.forward`` passes them) into
        ``output [tokens, heads, head]``."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("spyre: fused output quantization is not supported")
        if attn_metadata is None:  # no step (a dummy run): nothing to attend
            return output
        key_cache, value_cache = kv_cache
        out = attention.attend_step(
            attn_metadata, key_cache, value_cache, query.transpose(0, 1).unsqueeze(0),
            key.transpose(0, 1).unsqueeze(0), value.transpose(0, 1).unsqueeze(0),
            self.scale, self.sliding_window, self.logits_soft_cap)
        output.copy_(out[0])
        return output


class SpyreAttentionBackend(AttentionBackend):
    """The KV cache dtypes and block sizes ``attention.attend_step``
    serves."""

    supported_dtypes = [torch.float32, torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes = ["auto"]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        # vLLM's Attention layer looks the name up in AttentionBackendEnum
        # (register() adds it).
        return NAME

    @staticmethod
    def get_impl_cls():
        return SpyreAttentionImpl

    @staticmethod
    def get_builder_cls():
        raise NotImplementedError("spyre: the model runner builds its own step "
                                  "(torch_spyre.vllm.attention.make_step)")

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        # Per layer, keys and values: [2, num_blocks * block_size, kv_heads, head].
        return (2, num_blocks * block_size, num_kv_heads, head_size)
