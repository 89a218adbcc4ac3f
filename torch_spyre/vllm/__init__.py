"""vLLM on spyre: an out-of-tree platform plugin for vLLM 0.32.0.

vLLM finds it through the entry point group ``vllm.platform_plugins``
(``spyre = "torch_spyre.vllm:register"`` in pyproject.toml). One module per
concern:

* ``platform``: ``SpyrePlatform``, what vLLM asks of a device (names,
  dispatch key, memory, seeds, which worker and attention backend to use,
  which requests this first version can serve);
* ``worker``: ``SpyreWorker``, one per device, the executor's interface;
* ``model_runner``: ``SpyreModelRunner``, the request state, the KV cache in
  device memory and one forward pass per scheduler step;
* ``attention``: paged attention over KV cache blocks in device memory,
  plugged into the Hugging Face model as a transformers attention function;
* ``backend``: ``SpyreAttentionBackend``, what vLLM's attention selector gets,
  and ``SpyreAttentionImpl``, the paged attention behind vLLM's own
  ``Attention`` layers (``model_impl="transformers"`` or ``"vllm"``);
* ``layers``: vLLM's CustomOp layers (RMSNorm, SiluAndMul, rotary embedding,
  ...) as spyre layers, through ``CustomOp.register_oot``;
* ``sampler``: greedy and seeded random sampling on the host.

This module stays light: vLLM calls ``register()`` while it resolves its
current platform, before anything else of vLLM is imported.
"""

import logging
import os

_PLATFORM = "torch_spyre.vllm.platform.SpyrePlatform"

logger = logging.getLogger(__name__)


def register():
    """Entry point of group ``vllm.platform_plugins``: the platform's class
    path when the spyre device can be used, else None (vLLM then picks
    another platform). ``SPYRE_VLLM=0`` turns the plugin off."""
    if os.environ.get("SPYRE_VLLM", "1") == "0":
        return None
    import torch_spyre

    if torch_spyre._C is None:
        logger.warning("torch_spyre: the native extension is not loaded (%s); the vLLM "
                       "spyre platform is off. Rebuild torch_spyre.", torch_spyre._LOAD_ERROR)
        return None
    return _PLATFORM
