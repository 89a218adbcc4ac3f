"""Which Hugging Face architectures the sweep runs, and their tiny configs.

The architectures come from the installed transformers' auto mappings, so a
new transformers release brings its new models into the sweep by itself:

- ``decoder``: a causal-LM class (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``);
- ``encoder``: a text encoder (``MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES``,
  e.g. T5's encoder) or the base model of a masked LM (bert, roberta, ...);
- ``seq2seq``: an encoder-decoder LM (bart, marian, pegasus, ...).

Vision, audio and multimodal models are left out: any architecture named in
a mapping of such a task, or whose config holds a vision or audio sub-config.

Each config is the architecture's default config shrunk through one table of
field names (``TINY_FIELDS``): hidden size 64, 2 layers, 4 heads of 16, 2
key/value heads, intermediate size 128, vocabulary 512, 128 positions, 4
experts of which 2 are picked. A field is set only when the config has it, so
the same table fits every family; what an architecture needs beyond it is one
line in ``OVERRIDES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
KV_HEADS = 2
INTERMEDIATE = 128
VOCAB = 512
POSITIONS = 128
LAYERS = 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

# Field names of the same quantity across families, as (value, names) pairs.
# A name is set only when the default config has it (directly or through its
# attribute_map).
KV_HEAD_FIELDS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads",
                  "multi_query_group_num")
TINY_FIELDS = (
    (HIDDEN, ("hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "dim",
              "word_embed_proj_dim", "embedding_size", "embedding_dim")),
    (LAYERS, ("num_hidden_layers", "n_layer", "num_layers", "n_layers",
              "encoder_layers", "decoder_layers", "num_decoder_layers",
              "num_encoder_layers", "num_blocks")),
    (HEADS, ("num_attention_heads", "n_head", "num_heads", "n_heads",
             "encoder_attention_heads", "decoder_attention_heads")),
    (KV_HEADS, KV_HEAD_FIELDS),
    (HEAD_DIM, ("head_dim", "d_kv", "d_head", "attention_head_size", "kv_channels")),
    (INTERMEDIATE, ("intermediate_size", "ffn_dim", "d_ff", "n_inner",
                    "encoder_ffn_dim", "decoder_ffn_dim", "ffn_hidden_size", "dff",
                    "d_inner", "feed_forward_size", "hidden_dim")),
    (VOCAB, ("vocab_size",)),
    (POSITIONS, ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")),
)

# Mixture-of-experts fields: few small experts, so every expert gets tokens.
MOE_FIELDS = {
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4,
    "moe_num_experts": 4, "num_experts_per_tok": 2, "moe_topk": 2,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
    "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 1,
    "num_expert_group": 1, "topk_group": 1, "num_experts_per_token": 2,
    "expert_ffn_hidden_size": 64, "zero_expert_num": 2,
    # deepseek-style models: first layer dense, the second a MoE layer.
    "first_k_dense_replace": 1,
}

# Multi-head latent attention (deepseek family) and sparse-attention
# indexers: ranks and head sizes that fit HEAD_DIM (head_dim is the rotary
# part, qk_head_dim = nope + rope).
LATENT_ATTENTION_FIELDS = {
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": HEAD_DIM,
    "qk_nope_head_dim": HEAD_DIM, "v_head_dim": HEAD_DIM, "qk_head_dim": 2 * HEAD_DIM,
    "index_head_dim": HEAD_DIM, "index_n_heads": 2, "index_topk": 64,
}

# Linear-attention and state-space mixers (mamba, gated delta net, ...):
# their inner width is expand * hidden = MAMBA_HEADS * MAMBA_HEAD_DIM.
LINEAR_ATTENTION_FIELDS = {
    "linear_key_head_dim": HEAD_DIM, "linear_value_head_dim": HEAD_DIM,
    "linear_num_key_heads": 2, "linear_num_value_heads": HEADS,
    "linear_head_dim": HEAD_DIM, "linear_num_heads": HEADS,
    "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_headdim": 32,
    "mamba_d_state": 16, "mamba_chunk_size": 32, "mamba_dt_rank": 8,
    "chunk_size": 32, "state_size": 16, "time_step_rank": 8, "mamba_d_ssm": 128,
    "mamba_num_heads": 4, "mamba_head_dim": 32, "ssm_state_size": 16,
    "moe_shared_expert_intermediate_size": 64,
}

# Token ids must lie inside the tiny vocabulary.
TOKEN_FIELDS = {"pad_token_id": PAD_ID, "bos_token_id": BOS_ID,
                "eos_token_id": EOS_ID, "decoder_start_token_id": PAD_ID,
                "sep_token_id": EOS_ID, "cls_token_id": BOS_ID}

# Per-architecture fixes on top of the tables: keyword arguments of the
# config class, each with why.
OVERRIDES: dict[str, dict] = {
    # The default attention sub-config lacks the rope_theta the model reads.
    # (and its clip_qkv default None fails torch.clamp).
    "dbrx": {"attn_config": {"kv_n_heads": KV_HEADS, "rope_theta": 10000.0,
                             "clip_qkv": 8.0}},
    # Rotary parameters are per layer type here.
    "cohere_compass_text": {"rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # No grouped-query attention.
    "esmc": {"num_key_value_heads": HEADS},
    # Local/global alternation, one of each.
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # One block of one layer per stage (block_sizes sets the depth).
    "funnel": {"block_sizes": [1, 1]},
    # Rotary on half of each head, as in the full-size models.
    "codegen": {"rotary_dim": HEAD_DIM // 2},
    "gptj": {"rotary_dim": HEAD_DIM // 2},
    # One attention layer among the mixers (an all-mixer stack has no
    # attention cache, which generation needs).
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1,
              "expert_layer_period": 2, "expert_layer_offset": 1},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "zamba2": {"hybrid_layer_ids": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "attention"]},
    "nemotron_h": {"layers_block_type": ["linear_attention", "full_attention"],
                   "n_groups": 1},
    # The byte-group hash embeddings are vocabularies too.
    "blt": {"encoder_hash_byte_group_vocab": VOCAB},
    # mamba2's own mixer heads: inner width 2 * 64 = 4 heads of 32.
    "mamba2": {"num_heads": 4, "head_dim": 32, "n_groups": 1},
    "zaya": {"num_experts_per_tok": 1},
    # KV sharing across layers needs more layers than two.
    "gemma3n_text": {"num_kv_shared_layers": 0, "vocab_size_per_layer_input": VOCAB,
                     "hidden_size_per_layer_input": HEAD_DIM, "laurel_rank": 8},
    "gemma4_text": {"vocab_size_per_layer_input": VOCAB,
                    "hidden_size_per_layer_input": HEAD_DIM},
    # Entity and character-feature vocabularies are vocabularies too.
    "luke": {"entity_vocab_size": VOCAB, "entity_emb_size": 32},
    "roc_bert": {"pronunciation_vocab_size": VOCAB, "pronunciation_embed_dim": 32,
                 "shape_vocab_size": VOCAB, "shape_embed_dim": 32},
    # Axial positions must multiply to the positions and add up to hidden.
    "reformer": {"axial_pos_shape": [8, 16], "axial_pos_embds_dim": [32, 32],
                 "local_attn_chunk_length": 8, "lsh_attn_chunk_length": 8},
    # qk width rounds up to 64: a factor of 1 keeps it equal to hidden.
    "xlstm": {"qk_dim_factor": 1.0},
    # Two layers share the hybrid block's weights, so both must be hybrid.
    "zamba": {"num_hidden_layers": 3,
              "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # Language adapters need a language to pick.
    "xmod": {"default_language": "en_XX"},
    # The encoder-only variant (T5GemmaEncoderModel).
    "t5gemma": {"is_encoder_decoder": False},
}

# Per-layer lists (layer_types, mlp_layer_types, ...): kept with their
# distinct entries, first one first, so a 2-layer model still has e.g. one
# linear-attention and one full-attention layer.

# Architectures the mappings list as text models that are not (or that need
# more than token ids to run); the reason is reported.
NOT_STANDALONE_TEXT = {
    "moshi": "speech-text model (audio codes)",
    "gemma4_assistant": "draft model, built from its main model's config",
    "gemma4_unified_assistant": "draft model, built from its main model's config",
    "encoder-decoder": "composite of two sub-models, configured per pair",
}

_NON_TEXT_MAPPING = re.compile(
    "IMAGE|VISION|VISUAL|VIDEO|AUDIO|SPEECH|CTC|WAVEFORM|SPECTROGRAM|DEPTH|OBJECT|"
    "SEGMENTATION|KEYPOINT|MULTIMODAL|TDT|RNNT|BACKBONE|MASK_GENERATION|DOCUMENT|"
    "POSE|POINTMAP|NORMAL|TABLE_RECOGNITION|TEXT_RECOGNITION|MATTING|TIME_SERIES")
_NON_TEXT_SUB_CONFIG = re.compile("vision|audio|image|speech|video|vq|codec")


@dataclass(frozen=True)
class Architecture:
    name: str          # transformers model_type, e.g. "llama"
    kind: str          # "decoder", "encoder" or "seq2seq"
    model_class: str   # the transformers class the sweep instantiates


def discover_architectures():
    """Every text architecture of the installed transformers, sorted by name."""
    from transformers.models.auto import modeling_auto as auto

    non_text = set()
    for name in dir(auto):
        if name.endswith("_MAPPING_NAMES") and _NON_TEXT_MAPPING.search(name):
            non_text |= set(getattr(auto, name))
    causal = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    seq2seq = auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    text_encoders = auto.MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES
    base = auto.MODEL_MAPPING_NAMES

    found = {}
    base = {name: _first_class(cls) for name, cls in base.items()}
    for name, cls in text_encoders.items():
        found[name] = Architecture(name, "encoder", cls)
    for name in masked:
        # bart and friends are masked LMs too, but encoder-decoders first.
        if name in base and name not in found and name not in seq2seq:
            found[name] = Architecture(name, "encoder", base[name])
    for name, cls in seq2seq.items():
        found.setdefault(name, Architecture(name, "seq2seq", cls))
    for name, cls in causal.items():
        found.setdefault(name, Architecture(name, "decoder", cls))
    return sorted((arch for name, arch in found.items()
                   if name not in non_text and name not in NOT_STANDALONE_TEXT
                   and not _has_non_text_sub_config(name)),
                  key=lambda arch: arch.name)


def _first_class(class_names):
    """A mapping entry names one class or several (funnel: full and base)."""
    return class_names[0] if isinstance(class_names, (list, tuple)) else class_names


def _has_non_text_sub_config(name):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    try:
        config_class = CONFIG_MAPPING[name]
    except (KeyError, ImportError):
        return False
    sub_configs = getattr(config_class, "sub_configs", None) or {}
    return any(_NON_TEXT_SUB_CONFIG.search(key) for key in sub_configs)


def tiny_config(name):
    """The architecture's default config shrunk to the sweep's sizes."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    config_class = CONFIG_MAPPING[name]
    return config_class(**{**_tiny_kwargs(config_class), **OVERRIDES.get(name, {})})


def _tiny_kwargs(config_class):
    """Keyword arguments that shrink `config_class`, its sub-configs included
    (composite models such as blt hold their layers in sub-configs)."""
    default = config_class()
    kwargs = {}
    for value, fields in TINY_FIELDS:
        kwargs.update({field: value for field in fields if _has_field(default, field)})
    for fields in (MOE_FIELDS, LINEAR_ATTENTION_FIELDS):
        kwargs.update({field: value for field, value in fields.items()
                       if _has_field(default, field)})
    # A latent-attention field the default leaves None is a variant switched
    # off (e.g. no query compression): keep it off.
    kwargs.update({field: value for field, value in LATENT_ATTENTION_FIELDS.items()
                   if _has_field(default, field) and getattr(default, field) is not None})
    if "kv_lora_rank" in kwargs:  # latent attention has no grouped KV heads
        kwargs.update({field: HEADS for field in KV_HEAD_FIELDS if field in kwargs})
    kwargs.update({field: value for field, value in TOKEN_FIELDS.items()
                   if _has_field(default, field)})
    kwargs.update(_shrunk_layer_lists(default, kwargs))
    for key, sub_config_class in (getattr(config_class, "sub_configs", None) or {}).items():
        if isinstance(sub_config_class, type):
            kwargs[key] = _tiny_kwargs(sub_config_class)
    return kwargs


def _shrunk_layer_lists(default, kwargs):
    """Every per-layer list of the default config, cut to LAYERS entries."""
    depth = getattr(default, "num_hidden_layers", None)
    if not isinstance(depth, int) or depth <= LAYERS:
        return {}
    shrunk = {}
    for field, value in vars(default).items():
        if (field.startswith("_") or field in kwargs or not isinstance(value, (list, tuple))
                or len(value) != depth):
            continue
        try:
            distinct = list(dict.fromkeys(value))
        except TypeError:  # entries that are lists or dicts: not layer kinds
            continue
        if distinct:
            shrunk[field] = [distinct[min(i, len(distinct) - 1)] for i in range(LAYERS)]
    return shrunk


def _has_field(config, field):
    if field in getattr(config, "attribute_map", {}):
        return True
    return field in vars(config) and not field.startswith("_")
