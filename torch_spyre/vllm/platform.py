"""The spyre platform: what vLLM 0.32.0 asks of a device.

vLLM resolves its ``current_platform`` through ``torch_spyre.vllm.register``
(entry point group ``vllm.platform_plugins``) to ``SpyrePlatform``. The
platform names the device (``spyre``, dispatch key PrivateUse1), answers
vLLM's memory and seed questions through ``torch.spyre``, and in
``check_and_update_config`` makes the configuration one this first version
serves: its own worker and model runner (the Hugging Face model eager on the
device with paged attention over a KV cache in device memory), tensor
parallelism over the spyre devices (no pipeline parallelism yet), synchronous
scheduling and no vLLM compilation or CUDA graphs. What it cannot serve it refuses with an error
that says so, at configuration time or per request (``validate_request``).
"""

import os

import torch
from vllm.exceptions import VLLMValidationError
from vllm.platforms.interface import Platform, PlatformEnum

WORKER = "torch_spyre.vllm.worker.SpyreWorker"
ATTENTION_BACKEND = "torch_spyre.vllm.backend.SpyreAttentionBackend"
DEFAULT_BLOCK_SIZE = 16


class UnsupportedRequest(VLLMValidationError, ValueError):
    """A request this platform cannot serve yet: a client error (HTTP 400
    when served) and a ValueError (offline)."""


class SpyrePlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "spyre"
    device_type: str = "spyre"
    dispatch_key: str = "PrivateUse1"
    # torch.distributed backend of spyre tensors (torch_spyre/_distributed.py).
    dist_backend: str = "spyreccl"
    device_control_env_var: str = "SPYRE_VISIBLE_DEVICES"
    simple_compile_backend: str = "spyre"
    supported_quantization: list[str] = []

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        # The first is vLLM's pick for dtype="auto" when the model's own dtype
        # is not listed; float32 is what matches the CPU exactly.
        return [torch.float32, torch.float16, torch.bfloat16]

    # --- the device -----------------------------------------------------------

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.spyre.get_device_name(device_id)

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        props = torch.spyre.get_device_properties(device_id)
        return f"spyre-{props.backend}-{device_id}"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.spyre.mem_get_info(device_id)[1]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.spyre.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.spyre.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.spyre.memory_allocated(device))

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype):
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"spyre: dtype {dtype} is not supported for models; use "
                             "float32, float16 or bfloat16 (--dtype)")

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        return ATTENTION_BACKEND

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("spyre: LoRA is not supported yet")

    # --- the configuration ----------------------------------------------------

    @classmethod
    def pre_register_and_update(cls, parser=None) -> None:
        """Before the engine's configuration: vLLM's extension points get
        the spyre pieces (``register_extensions``)."""
        cls.register_extensions()

    @staticmethod
    def register_extensions() -> None:
        """The spyre layers in place of vLLM's CustomOps (``layers.py``) and
        the spyre attention backend in vLLM's registry of backends
        (``backend.py``): once per process, from the engine's process
        (``pre_register_and_update``) and each worker's (``init_device``)."""
        from . import backend, layers

        layers.register()
        backend.register()

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config) -> None:
        """vLLM's CustomOps run their spyre forward (``forward_oot``) by
        default: vLLM would turn them off (``custom_ops=["none"]``) for its
        Inductor compilation, which never runs here (``check_and_update_config``
        sets compilation mode NONE). ``custom_ops`` given by the user are kept."""
        custom_ops = vllm_config.compilation_config.custom_ops
        if "all" not in custom_ops and "none" not in custom_ops:
            custom_ops.append("all")

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        parallel = vllm_config.parallel_config
        if parallel.pipeline_parallel_size > 1:
            raise NotImplementedError(
                "spyre: pipeline parallelism is not supported yet by the vLLM spyre platform "
                f"(pipeline_parallel_size={parallel.pipeline_parallel_size}); use 1")
        if parallel.tensor_parallel_size > torch.spyre.device_count():
            raise ValueError(
                f"spyre: tensor_parallel_size={parallel.tensor_parallel_size} needs as many "
                f"spyre devices, there are {torch.spyre.device_count()} (the emulator: "
                "SPYRE_SIM_DEVICES)")
        if parallel.data_parallel_size > 1:
            raise NotImplementedError("spyre: data parallelism is not supported yet; use "
                                      "data_parallel_size=1")
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER
        if vllm_config.speculative_config is not None:
            raise NotImplementedError("spyre: speculative decoding is not supported yet")
        if vllm_config.lora_config is not None:
            raise NotImplementedError("spyre: LoRA is not supported yet")

        # The device runtime's threads do not survive fork: vLLM's engine core
        # and worker processes start with spawn.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

        # The worker samples a step's tokens before the next step is
        # scheduled: no overlapped (async) scheduling.
        vllm_config.scheduler_config.async_scheduling = False

        # The model runner runs the model itself (transformers' model,
        # compiled through the spyre backend unless enforce_eager); vLLM's
        # own compilation and CUDA graphs do not apply.
        compilation = vllm_config.compilation_config
        compilation.mode = CompilationMode.NONE
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []

        cache = vllm_config.cache_config
        if cache is not None:
            if not cache.user_specified_block_size:
                cache.block_size = DEFAULT_BLOCK_SIZE
            if cache.cache_dtype not in ("auto", None):
                raise NotImplementedError(
                    f"spyre: kv_cache_dtype={cache.cache_dtype!r} is not supported yet; the "
                    "KV cache is kept in the model's dtype (kv_cache_dtype='auto')")

        model = vllm_config.model_config
        if model is not None:
            if model.quantization is not None:
                raise NotImplementedError(
                    f"spyre: quantization {model.quantization!r} is not supported yet")
            cls.check_if_supports_dtype(model.dtype)
            from .sampler import LOGPROBS_MODES

            if model.logprobs_mode not in LOGPROBS_MODES:
                raise NotImplementedError(
                    f"spyre: logprobs_mode={model.logprobs_mode!r} is not supported yet; "
                    f"use one of {', '.join(LOGPROBS_MODES)} (logprobs of the model's raw "
                    "logits)")

    @classmethod
    def validate_request(cls, processed_inputs, params) -> None:
        """Refuses, per request, the sampling features the sampler does not
        implement (it does all of vLLM's but scoring chosen tokens of the
        prompt, which vLLM itself does only in its V2 model runner:
        sampler.py)."""
        from vllm.sampling_params import SamplingParams

        if not isinstance(params, SamplingParams):
            raise UnsupportedRequest("spyre: only text generation is supported (no pooling)")
        unsupported = []
        if getattr(params, "prompt_logprob_token_ids", None) is not None:
            unsupported.append("prompt_logprob_token_ids")
        if unsupported:
            raise UnsupportedRequest("spyre: not supported yet by the vLLM spyre platform: "
                                     + ", ".join(unsupported),
                                     parameter=unsupported[0].split()[0])
