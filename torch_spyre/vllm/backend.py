"""What vLLM's attention selector gets on the spyre platform.

vLLM asks the platform for an attention backend class
(``get_attn_backend_cls``) for its KV cache questions (layouts, dtypes, block
sizes). The spyre model runner attends through ``attention.paged_attention``
itself; vLLM's attention layers, their implementation and metadata builder
are not used.
"""

import torch
from vllm.v1.attention.backend import AttentionBackend


class SpyreAttentionBackend(AttentionBackend):
    """The KV cache dtypes and block sizes ``attention.paged_attention``
    serves."""

    supported_dtypes = [torch.float32, torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes = ["auto"]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return "SPYRE_PAGED"

    @staticmethod
    def get_impl_cls():
        raise NotImplementedError("spyre: the model runner attends through "
                                  "torch_spyre.vllm.attention.paged_attention; vLLM's "
                                  "attention layers are not used on spyre yet")

    @staticmethod
    def get_builder_cls():
        raise NotImplementedError("spyre: the model runner builds its own step "
                                  "(torch_spyre.vllm.attention.make_step)")

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        # Per layer, keys and values: [2, num_blocks * block_size, kv_heads, head].
        return (2, num_blocks * block_size, num_kv_heads, head_size)
