"""The spyre worker: what vLLM's executor calls, one worker per device."""

import os

import torch
from vllm.logger import init_logger
from vllm.v1.worker.worker_base import CompilationTimes, WorkerBase

from .model_runner import SpyreModelRunner, runs_vllms_model

# Under "vllm", where vLLM configures its log output.
logger = init_logger("vllm.spyre." + __name__.rsplit(".", 1)[-1])

# Without kv_cache_memory_bytes the KV cache takes this much device memory at
# most (the emulated device reserves 128 GiB virtually; a cache that large
# is of no use to the tiny models this first version serves).
DEFAULT_KV_CACHE_BYTES = 256 * 2**20


class SpyreWorker(WorkerBase):

    def init_device(self):
        if not torch.spyre.is_available():
            raise RuntimeError("spyre: no spyre device is available (torch.spyre.is_available() "
                               "is False)")
        self.device = torch.device("spyre", self.local_rank)
        torch.spyre.set_device(self.device)
        # vLLM's extension points get the spyre pieces in this process too.
        from .platform import SpyrePlatform

        SpyrePlatform.register_extensions()
        vllm_model = runs_vllms_model(self.model_config)
        if self.parallel_config.world_size > 1 or vllm_model:
            # The ranks' process groups: gloo for host tensors, spyreccl for
            # the all-reduces of the tensor-parallel layers. (vLLM's models
            # ask for their tensor and pipeline parallel groups even alone.)
            from vllm.platforms import current_platform
            from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

            init_worker_distributed_environment(self.vllm_config, self.rank,
                                                self.distributed_init_method, self.local_rank,
                                                current_platform.dist_backend)
        from vllm.utils.torch_utils import set_random_seed

        set_random_seed(self.model_config.seed)
        self.model_runner = SpyreModelRunner(self.vllm_config, self.device)

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise NotImplementedError("spyre: dummy weights are not supported")
        self.model_runner.load_model()

    def get_model(self):
        return self.model_runner.model

    def get_kv_cache_spec(self):
        return self.model_runner.get_kv_cache_spec()

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache, in vLLM's accounting (unpadded rows): the
        device's free memory times gpu_memory_utilization, at most
        kv_cache_memory_bytes (default 256 MiB, ``SPYRE_VLLM_KV_CACHE_BYTES``),
        scaled down by the stick padding of the cache's rows."""
        free, total = torch.spyre.mem_get_info(self.device)
        budget = int(free * self.cache_config.gpu_memory_utilization)
        cap = self.cache_config.kv_cache_memory_bytes
        if cap is None:
            cap = int(os.environ.get("SPYRE_VLLM_KV_CACHE_BYTES", DEFAULT_KV_CACHE_BYTES))
        budget = min(budget, cap)
        runner = self.model_runner
        spec = next(iter(runner.get_kv_cache_spec().values()))
        logical = spec.page_size_bytes * runner.num_layers
        stored = runner.kv_bytes_per_block()
        available = budget * logical // stored
        logger.info("spyre: %.1f MiB of device memory for the KV cache (%.1f MiB stored, "
                    "rows padded to sticks); device free %.1f of %.1f GiB",
                    available / 2**20, budget / 2**20, free / 2**30, total / 2**30)
        return available

    def initialize_from_config(self, kv_cache_config) -> None:
        self.model_runner.initialize_kv_cache(kv_cache_config)

    def initialize_cache(self, num_gpu_blocks: int, num_cpu_blocks: int) -> None:
        self.cache_config.num_gpu_blocks = num_gpu_blocks
        self.cache_config.num_cpu_blocks = num_cpu_blocks

    def compile_or_warm_up_model(self) -> CompilationTimes:
        from vllm.utils.torch_utils import set_random_seed

        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def execute_model(self, scheduler_output):
        return self.model_runner.execute_model(scheduler_output)

    def sample_tokens(self, grammar_output):
        return self.model_runner.sample_tokens(grammar_output)

    def take_draft_token_ids(self):
        return None

    def get_supported_tasks(self):
        return ("generate",)

    def get_cache_block_size_bytes(self) -> int:
        return self.model_runner.kv_bytes_per_block()

    def synchronize_device(self) -> None:
        torch.spyre.synchronize(self.device)

    def spyre_stats(self) -> dict:
        """The model runner's counters (``llm.collective_rpc("spyre_stats")``)."""
        return dict(self.model_runner.stats)

    def spyre_kv_cache_devices(self) -> tuple[str, str]:
        """Where the first layer's keys and values live."""
        keys, values = self.model_runner.kv_caches[0]
        return str(keys.device), str(values.device)

    def add_lora(self, lora_request) -> bool:
        raise NotImplementedError("spyre: LoRA is not supported yet")

    def remove_lora(self, lora_id: int) -> bool:
        raise NotImplementedError("spyre: LoRA is not supported yet")

    def pin_lora(self, lora_id: int) -> bool:
        raise NotImplementedError("spyre: LoRA is not supported yet")

    def list_loras(self) -> set[int]:
        return set()

    def check_health(self) -> None:
        return

    def shutdown(self) -> None:
        self.model_runner = None
