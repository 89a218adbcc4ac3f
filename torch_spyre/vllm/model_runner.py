"""The spyre model runner: request state, the KV cache in device memory and
one forward pass per scheduler step.

The model is the Hugging Face (transformers) model of the checkpoint,
loaded on the host and moved to the spyre device, with the ``spyre_paged``
attention (``attention.py``), compiled by ``torch.compile`` through the spyre
backend (eager with vLLM's ``enforce_eager``): the attention stays outside
the graphs (it depends on the step's requests), the layers around it compile
into device programs, one set per power-of-two step size (the step's tokens
padded to it), each compiled on first use. Each step packs the scheduled
tokens of all requests into one sequence (``input_ids``/``position_ids``
``[1, tokens]``), writes their keys and values into their slots and attends
over each request's blocks; the logits of the requests whose known tokens
are all computed (a finished prompt or a decode step) are penalized on the
device, their logprobs computed on the device, and the token chosen on the
host (``sampler.py``). Requests with ``prompt_logprobs`` also keep the logits
of their prompt positions, as vLLM's GPU model runner does. What vLLM's scheduler decides (which
requests, how many tokens each: whole prompts, chunks of prompts, decode
steps; which blocks, shared prefix blocks included) is followed as given,
so chunked prefill and prefix caching work as the scheduler plans them.

With ``model_impl="transformers"`` (vLLM's Transformers modeling backend) or
``"vllm"`` (vLLM's own model class) the model is vLLM's instead, built from
vLLM's layers (the spyre ones of ``layers.py``) and loaded by vLLM's model
loader on the device; the same steps run it, inside vLLM's forward context
whose attention metadata is the step, each of vLLM's ``Attention`` layers
attending through ``backend.SpyreAttentionImpl`` over the KV cache bound to
it.
"""

import time
from dataclasses import dataclass

import numpy as np
import torch
from vllm.logger import init_logger

from . import attention, sampler

# Under "vllm", where vLLM configures its log output.
logger = init_logger("vllm.spyre." + __name__.rsplit(".", 1)[-1])

def runs_vllms_model(model_config) -> bool:
    """Whether ``model_impl`` asks for vLLM's own model classes
    ("transformers": its Transformers modeling backend; "vllm")."""
    return str(model_config.model_impl) in ("transformers", "vllm")


@dataclass
class RequestState:
    req_id: str
    prompt_token_ids: list[int]
    # The tokens sampled so far: this list itself, for the logits
    # processors keep a reference to it (sampler.SampledRow).
    output_token_ids: list[int]
    block_ids: list[int]
    num_computed_tokens: int
    sampling_params: object
    generator: torch.Generator | None
    # prompt_logprobs: still to compute (the prompt not yet all computed), and
    # the rows computed so far (vLLM's LogprobsTensors, on the host).
    prompt_logprobs_pending: bool = False
    prompt_logprobs_cpu: object = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def tokens(self, start: int, end: int) -> list[int]:
        """The known tokens ``start .. end`` (prompt, then output)."""
        return (self.prompt_token_ids + self.output_token_ids)[start:end]

    def sampled_row(self):
        return sampler.SampledRow(self.req_id, self.sampling_params, self.generator,
                                  self.prompt_token_ids, self.output_token_ids)


@dataclass
class PendingStep:
    """A step whose model has run and whose tokens are still to sample
    (``execute_model``, then ``sample_tokens`` with the grammar's bitmask)."""
    req_ids: list[str]
    logits: torch.Tensor  # [sampled + prompt logprob rows, vocab], on the device
    sampled_reqs: list[str]
    prompt_plan: list
    started: float


class SpyreModelRunner:

    def __init__(self, vllm_config, device: torch.device):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.cache_config = vllm_config.cache_config
        self.parallel_config = vllm_config.parallel_config
        self.device = device
        self.dtype = self.model_config.dtype
        self.block_size = self.cache_config.block_size
        self.num_layers = self.model_config.get_num_layers(self.parallel_config)
        self.num_kv_heads = self.model_config.get_num_kv_heads(self.parallel_config)
        self.head_size = self.model_config.get_head_size()
        self.layer_names = [f"model.layers.{i}.self_attn" for i in range(self.num_layers)]
        # model_impl "transformers" (vLLM's Transformers modeling backend) or
        # "vllm" (vLLM's own model): vLLM builds and loads the model from its
        # layers, its Attention layers attend through backend.SpyreAttentionImpl.
        # "auto" (the default): the Hugging Face model with spyre_paged attention.
        self.vllm_model = runs_vllms_model(self.model_config)
        self.attn_layers = []
        self.model = None
        # The model compiled through the spyre backend (None: eager).
        self.compiled_forward = None
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.num_blocks = 0
        self.requests: dict[str, RequestState] = {}
        self.sampler = sampler.Sampler(vllm_config, device)
        self.pending: PendingStep | None = None
        # steps run, tokens computed, host seconds in the model, prompt chunks
        # that left the prompt unfinished (chunked prefill), prompt tokens found
        # in the prefix cache (not computed).
        # compiled_sizes: the padded token counts the compiled model has run
        # (each compiled on first use, compile_seconds in all).
        self.stats = {"steps": 0, "tokens": 0, "model_seconds": 0.0, "prefill_chunks": 0,
                      "prefix_cached_tokens": 0, "compiled": False, "compiled_sizes": [],
                      "compile_seconds": 0.0}

    # --- the model ------------------------------------------------------------

    def load_model(self):
        if self.vllm_model:
            return self._load_vllm_model()
        from transformers import AutoModelForCausalLM
        from vllm.config import set_current_vllm_config

        attention.register()
        cfg = self.model_config
        # Under the vLLM config: a Transformers model class that vLLM's
        # Transformers modeling backend decorated for its compilation (when a
        # model_impl="transformers" engine ran in this process) asks for it.
        with set_current_vllm_config(self.vllm_config):
            model = AutoModelForCausalLM.from_pretrained(
                cfg.model, revision=cfg.revision, dtype=self.dtype,
                trust_remote_code=cfg.trust_remote_code, attn_implementation=attention.NAME)
        self._check_supported(model.config)
        tp = self.parallel_config.tensor_parallel_size
        if tp > 1:
            from vllm.distributed import get_tensor_model_parallel_rank, get_tp_group

            from .tensor_parallel import shard

            shard(model, get_tensor_model_parallel_rank(), tp, get_tp_group().device_group)
        self.model = model.to(self.device).eval()
        if not self.model_config.enforce_eager:
            self.compiled_forward = torch.compile(self._forward, backend="spyre",
                                                  dynamic=False)
            self.stats["compiled"] = True
        logger.info("spyre: loaded %s (%s) on %s in %s, %.1f MiB of device memory",
                    cfg.model, type(model).__name__, self.device, self.dtype,
                    torch.spyre.memory_allocated(self.device) / 2**20)

    def _load_vllm_model(self):
        """vLLM's model of the checkpoint (``model_impl``), built on the device
        from vLLM's layers (the spyre ones where ``layers.py`` registers them)
        and loaded by vLLM's model loader; its attention layers in layer order."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.layers.attention import Attention
        from vllm.model_executor.model_loader import get_model
        from vllm.model_executor.models.utils import extract_layer_index

        cfg = self.model_config
        if str(cfg.model_impl) == "transformers":
            # Defines the backend's own RMSNorm subclasses (TPAwareRMSNorm):
            # registered as spyre layers before the model is built.
            import vllm.model_executor.models.transformers.fusers  # noqa: F401
        from . import layers

        layers.register()
        with set_current_vllm_config(self.vllm_config):
            model = get_model(vllm_config=self.vllm_config)
        context = self.vllm_config.compilation_config.static_forward_context
        found = {name: layer for name, layer in context.items()
                 if isinstance(layer, Attention)}
        if len(found) != self.num_layers:
            raise NotImplementedError(
                f"spyre: {len(found)} attention layers in vLLM's model, "
                f"{self.num_layers} expected: only decoders of full or sliding-window "
                "attention layers are supported")
        self.layer_names = sorted(found, key=extract_layer_index)
        self.attn_layers = [found[name] for name in self.layer_names]
        self.model = model.eval()
        if not cfg.enforce_eager:
            self.compiled_forward = torch.compile(self._forward, backend="spyre",
                                                  dynamic=False)
            self.stats["compiled"] = True
        logger.info("spyre: loaded %s through vLLM (model_impl=%r: %s) on %s in %s, "
                    "%.1f MiB of device memory", cfg.model, cfg.model_impl,
                    type(model).__name__, self.device, self.dtype,
                    torch.spyre.memory_allocated(self.device) / 2**20)

    def _vllm_step(self, batch):
        """vLLM's forward context of a step: each attention layer gets the
        step as its metadata (its KV cache is bound to it)."""
        from vllm.forward_context import set_forward_context

        metadata = dict.fromkeys(self.layer_names, batch)
        return set_forward_context(metadata, self.vllm_config, num_tokens=batch.num_tokens,
                                   slot_mapping={})

    def _forward(self, input_ids, position_ids, logits_to_keep):
        """The logits of the tokens ``logits_to_keep`` says (transformers'
        meaning: 0 all, n the last n, a tensor those rows)."""
        if self.vllm_model:
            hidden = self.model(input_ids=input_ids[0], positions=position_ids[0])
            if isinstance(logits_to_keep, torch.Tensor):
                hidden = hidden.index_select(0, logits_to_keep)
            elif logits_to_keep:
                hidden = hidden[-logits_to_keep:]
            return self.model.compute_logits(hidden)
        return self.model(input_ids=input_ids, position_ids=position_ids,
                          logits_to_keep=logits_to_keep, use_cache=False).logits[0]

    def padded_tokens(self, n: int) -> int:
        """The token count the model runs for a step of ``n`` tokens: ``n``
        eagerly; compiled, the next power of two (a graph per power, so
        about log2(max_num_batched_tokens) graphs at most)."""
        return n if self.compiled_forward is None else 1 << (n - 1).bit_length()

    def _logits(self, input_ids, position_ids, logit_rows):
        """The logits of the step's ``logit_rows`` (on the device): eagerly,
        the model's LM head on those rows only; compiled, on every token
        (the graph cannot depend on which), then those rows."""
        if self.compiled_forward is None:
            return self._forward(input_ids, position_ids,
                                 logit_rows if logit_rows.numel() else 1)
        # One graph per padded token count, and the resumed pieces around
        # each attention layer: more than Dynamo's default of 8.
        size = input_ids.shape[1]
        first = size not in self.stats["compiled_sizes"]
        if first:
            logger.info("spyre: compiling the model for steps of %d tokens", size)
            started = time.perf_counter()
        with torch._dynamo.config.patch(recompile_limit=64):
            logits = self.compiled_forward(input_ids, position_ids, 0)
        if first:
            self.stats["compiled_sizes"].append(size)
            self.stats["compile_seconds"] += time.perf_counter() - started
            logger.info("spyre: compiled for %d tokens in %.1f s", size,
                        time.perf_counter() - started)
        return logits.index_select(0, logit_rows)

    def _check_supported(self, config):
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        layers = self.model_config.get_num_layers(self.parallel_config)
        if getattr(text, "num_hidden_layers", layers) != layers:
            raise NotImplementedError("spyre: the model's layer count disagrees with vLLM's")

    def get_kv_cache_spec(self):
        from vllm.v1.kv_cache_interface import FullAttentionSpec

        spec = FullAttentionSpec(block_size=self.block_size, num_kv_heads=self.num_kv_heads,
                                 head_size=self.head_size, dtype=self.dtype)
        return {name: spec for name in self.layer_names}

    def kv_bytes_per_block(self) -> int:
        """Device bytes of one block of all layers' keys and values, as the
        device stores them: each token's rows padded to whole 128-byte sticks."""
        stick = torch.spyre.get_device_properties(self.device).stick_bytes
        row = self.head_size * self.dtype.itemsize
        row = -(-row // stick) * stick
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * row

    def initialize_kv_cache(self, kv_cache_config):
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1 or sorted(groups[0].layer_names) != sorted(self.layer_names):
            raise NotImplementedError("spyre: one KV cache group of full attention layers is "
                                      f"supported, got {[g.layer_names for g in groups]}")
        self.num_blocks = kv_cache_config.num_blocks
        rows = self.num_blocks * self.block_size
        shape = (rows, self.num_kv_heads, self.head_size)
        # Zeros: a batched decode reads whole padded blocks (masked out) and
        # must not meet NaNs of uninitialized memory.
        self.kv_caches = [
            (torch.zeros(shape, dtype=self.dtype, device=self.device),
             torch.zeros(shape, dtype=self.dtype, device=self.device))
            for _ in range(self.num_layers)
        ]
        # vLLM's attention layers read their KV cache off the layer
        # (vllm.model_executor.layers.attention.attention.get_attention_context).
        for layer, cache in zip(self.attn_layers, self.kv_caches):
            layer.kv_cache = cache
        logger.info("spyre: KV cache of %d blocks of %d tokens, %d layers, on %s",
                    self.num_blocks, self.block_size, self.num_layers, self.device)

    # --- the requests -----------------------------------------------------------

    def _update_requests(self, out):
        for req_id in out.finished_req_ids:
            self.requests.pop(req_id, None)
        for new in out.scheduled_new_reqs:
            if new.prompt_token_ids is None:
                raise NotImplementedError("spyre: prompts as embeddings are not supported")
            if len(new.block_ids) != 1:
                raise NotImplementedError("spyre: one KV cache group is supported")
            self.requests[new.req_id] = RequestState(
                req_id=new.req_id, prompt_token_ids=list(new.prompt_token_ids),
                output_token_ids=[], block_ids=list(new.block_ids[0]),
                num_computed_tokens=new.num_computed_tokens,
                sampling_params=new.sampling_params,
                generator=sampler.make_generator(new.sampling_params),
                prompt_logprobs_pending=(new.sampling_params is not None
                                         and new.sampling_params.prompt_logprobs is not None))
            self.stats["prefix_cached_tokens"] += new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self.requests[req_id]
            state.num_computed_tokens = cached.num_computed_tokens[i]
            # Tokens the scheduler dropped (e.g. a failed KV load) are dropped here too.
            del state.output_token_ids[cached.num_output_tokens[i]:]
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                state.block_ids = list(new_blocks[0])
            elif new_blocks is not None:
                state.block_ids.extend(new_blocks[0])
        for copy in out.kv_cache_block_copies or ():
            self._copy_block(copy.src_block_id, copy.dst_block_id)

    def _copy_block(self, src: int, dst: int):
        bs = self.block_size
        for caches in self.kv_caches:
            for cache in caches:
                cache[dst * bs:(dst + 1) * bs].copy_(cache[src * bs:(src + 1) * bs])

    # --- one step ---------------------------------------------------------------

    def _prepare(self, out):
        """The step's packed inputs on the device and which requests sample."""
        ids, positions, steps, sample_rows, sampled_reqs = [], [], [], [], []
        # (req_id, first prompt position, rows, index of its first row among
        # prompt_rows, last chunk) of the requests computing prompt logprobs.
        prompt_rows, prompt_plan = [], []
        for req_id, n in out.num_scheduled_tokens.items():
            if out.scheduled_spec_decode_tokens.get(req_id):
                raise NotImplementedError("spyre: speculative decoding is not supported")
            state = self.requests[req_id]
            start = state.num_computed_tokens
            end = start + n
            if end > state.num_tokens:
                raise RuntimeError(f"spyre: request {req_id} scheduled up to token {end} but "
                                   f"only {state.num_tokens} are known")
            if state.prompt_logprobs_pending:
                # As vLLM's GPU model runner: the logits at positions start..
                # give the logprobs of the prompt tokens start+1..; the last
                # chunk has one logit fewer (the last prompt position samples).
                remaining = state.num_prompt_tokens - (start + 1)
                num_logits = n if n <= remaining else remaining
                first = len(ids)
                prompt_plan.append((req_id, start, max(num_logits, 0), len(prompt_rows),
                                    n > remaining))
                prompt_rows.extend(range(first, first + max(num_logits, 0)))
            ids.extend(state.tokens(start, end))
            positions.extend(range(start, end))
            steps.append((n, end, state.block_ids))
            if end == state.num_tokens:
                sample_rows.append(len(ids) - 1)
                sampled_reqs.append(req_id)
            elif end < state.num_prompt_tokens:
                self.stats["prefill_chunks"] += 1
        padding = [0] * (self.padded_tokens(len(ids)) - len(ids))
        # Each a tensor of its own: a compiled program binds whole storages
        # (a view further into one would be copied first).
        input_ids, position_ids = (torch.tensor([values + padding]).to(self.device)
                                   for values in (ids, positions))
        batch, logit_rows = attention.make_step(steps, self.block_size, self.kv_caches,
                                                self.device, host_ints=sample_rows + prompt_rows)
        return input_ids, position_ids, logit_rows, batch, sampled_reqs, prompt_plan

    @torch.no_grad()
    def execute_model(self, out):
        """Runs the model on the step's tokens and returns None: the tokens
        are sampled by ``sample_tokens`` (vLLM's engine calls it next, with
        the structured-output bitmask of the step)."""
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT

        self._update_requests(out)
        self.pending = None
        if out.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        started = time.perf_counter()
        input_ids, position_ids, logit_rows, batch, sampled_reqs, prompt_plan = \
            self._prepare(out)
        with self._vllm_step(batch) if self.vllm_model else attention.step(batch):
            logits = self._logits(input_ids, position_ids, logit_rows)
        self.pending = PendingStep(req_ids=list(out.num_scheduled_tokens),
                                   logits=logits, sampled_reqs=sampled_reqs,
                                   prompt_plan=prompt_plan, started=started)
        self.stats["steps"] += 1
        self.stats["tokens"] += out.total_num_scheduled_tokens
        return None

    @torch.no_grad()
    def sample_tokens(self, grammar_output):
        """The tokens of the step ``execute_model`` ran, ``grammar_output``
        (vLLM's GrammarOutput, or None) constraining the requests with
        structured outputs."""
        from vllm.v1.outputs import ModelRunnerOutput

        step, self.pending = self.pending, None
        if step is None:
            raise RuntimeError("spyre: sample_tokens without a step run by execute_model")
        req_id_to_index = {r: i for i, r in enumerate(step.req_ids)}
        sampled, logprobs = {}, None
        if step.sampled_reqs:
            sampled, logprobs = self._sample(step.logits[:len(step.sampled_reqs)],
                                             step.sampled_reqs, req_id_to_index, grammar_output)
        prompt_logprobs = self._prompt_logprobs(step.logits, len(step.sampled_reqs),
                                                step.prompt_plan)
        self.stats["model_seconds"] += time.perf_counter() - step.started
        return ModelRunnerOutput(req_ids=step.req_ids, req_id_to_index=req_id_to_index,
                                 sampled_token_ids=[sampled.get(r, []) for r in step.req_ids],
                                 logprobs=logprobs, prompt_logprobs_dict=prompt_logprobs)

    def _banned_tokens(self, rows, vocab, grammar_output):
        """Step 2 of the sampler: the tokens the grammar or ``allowed_token_ids``
        ban, ``[rows, vocab]`` booleans on the host (None: none)."""
        banned = sampler.allowed_token_mask(rows, vocab)
        if grammar_output is None:
            return banned
        if banned is None:
            banned = np.zeros((len(rows), vocab), dtype=bool)
        index = {row.req_id: i for i, row in enumerate(rows)}
        grammar = sampler.grammar_mask(grammar_output.grammar_bitmask, vocab)
        for k, req_id in enumerate(grammar_output.structured_output_request_ids):
            if req_id in index:
                banned[index[req_id]] |= grammar[k]
        return banned

    def _sample(self, logits, sampled_reqs, req_id_to_index, grammar_output):
        """One token per request from its row of ``logits`` (on the device),
        as ``sampler.py`` describes. Returns ``({req_id: [token]},
        LogprobsLists or None)``."""
        from vllm.v1.outputs import LogprobsLists

        rows = [self.requests[r].sampled_row() for r in sampled_reqs]
        logits = logits.to(torch.float32)
        vocab = logits.shape[-1]
        want = [r.params for r in rows
                if r.params is not None and r.params.num_logprobs is not None]
        raw = (sampler.compute_logprobs(logits, self.model_config.logprobs_mode)
               if want else None)
        banned = self._banned_tokens(rows, vocab, grammar_output)
        logits = self.sampler.process(
            logits, rows, None if banned is None else torch.from_numpy(banned))
        tokens = self.sampler.choose(logits, rows)
        for row, token in zip(rows, tokens):
            row.output_token_ids.append(token)
        sampled = {r: [t] for r, t in zip(sampled_reqs, tokens)}
        if not want:
            return sampled, None
        # Per row: the sampled token, then the top k (``logprobs``) or the
        # ids the request chose (``logprob_token_ids``), padded to one width
        # (vLLM keeps as many as the request's num_logprobs).
        chosen = [p.logprob_token_ids for p in want if p.logprob_token_ids]
        k = max((sampler.num_logprobs(p.logprobs, vocab) for p in want
                 if not p.logprob_token_ids), default=0)
        width = max([k] + [len(c) for c in chosen]) + 1
        token_ids = torch.tensor(tokens, dtype=torch.int64).to(logits.device)
        ids, values, ranks = sampler.gather_logprobs(raw, k, token_ids)
        ids, values, ranks = ids.cpu().numpy(), values.cpu().numpy(), ranks.cpu().numpy()
        if chosen:
            columns = np.full((len(rows), width - 1), -1, dtype=np.int64)
            for row, r in enumerate(rows):
                if r.params is not None and r.params.logprob_token_ids:
                    columns[row, :len(r.params.logprob_token_ids)] = r.params.logprob_token_ids
            chosen_ids, chosen_values = sampler.gather_chosen_logprobs(raw, columns, token_ids)
            chosen_ids, chosen_values = chosen_ids.cpu().numpy(), chosen_values.cpu().numpy()
        # One row per scheduled request (vLLM slices them by request index).
        num_reqs = len(req_id_to_index)
        all_ids = np.zeros((num_reqs, width), dtype=np.int32)
        all_values = np.full((num_reqs, width), -np.inf, dtype=np.float32)
        all_ranks = np.zeros(num_reqs, dtype=np.int64)
        for row, (req_id, r) in enumerate(zip(sampled_reqs, rows)):
            i = req_id_to_index[req_id]
            if r.params is not None and r.params.logprob_token_ids:
                all_ids[i], all_values[i] = chosen_ids[row], chosen_values[row]
            else:
                all_ids[i, :k + 1], all_values[i, :k + 1] = ids[row], values[row]
            all_ranks[i] = ranks[row]
        return sampled, LogprobsLists(all_ids, all_values, all_ranks)

    def _prompt_logprobs(self, logits, first_row, prompt_plan):
        """vLLM's prompt logprobs, computed on the device chunk by chunk and
        returned (as LogprobsTensors on the host) when the prompt is done."""
        from vllm.v1.outputs import LogprobsTensors

        done = {}
        for req_id, start, num_logits, offset, last in prompt_plan:
            state = self.requests[req_id]
            vocab = logits.shape[-1]
            k = sampler.num_logprobs(state.sampling_params.prompt_logprobs, vocab)
            if state.prompt_logprobs_cpu is None:
                state.prompt_logprobs_cpu = LogprobsTensors.empty_cpu(
                    state.num_prompt_tokens - 1, k + 1)
            if num_logits > 0:
                row = first_row + offset
                scores = sampler.compute_logprobs(logits[row:row + num_logits],
                                                  self.model_config.logprobs_mode)
                targets = torch.tensor(state.tokens(start + 1, start + 1 + num_logits),
                                       dtype=torch.int64).to(logits.device)
                ids, values, ranks = sampler.gather_logprobs(scores, k, targets)
                cpu = state.prompt_logprobs_cpu
                cpu.logprob_token_ids[start:start + num_logits].copy_(ids.cpu())
                cpu.logprobs[start:start + num_logits].copy_(values.cpu())
                cpu.selected_token_ranks[start:start + num_logits].copy_(ranks.cpu())
            if last:
                done[req_id] = state.prompt_logprobs_cpu
                state.prompt_logprobs_cpu = None
                state.prompt_logprobs_pending = False
        return done
