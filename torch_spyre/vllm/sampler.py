"""Sampling from the logits of the step's last tokens, in vLLM 0.32.0's order
(``vllm/v1/sample/sampler.py``), on the device (``spyre``) but for the draw:

1. logprobs, as vLLM's ``Sampler`` returns them with its default
   ``logprobs_mode="raw_logprobs"``: ``log_softmax`` of the model's own logits
   (before anything below), the top-k (``topk``) after the chosen token's own
   logprob (``gather``) and its rank (the count of tokens with a logprob at
   least as large), or, for a request naming ``logprob_token_ids``, those
   tokens' logprobs after the chosen token's. ``raw_logits`` returns the
   logits themselves.
2. the structured-output grammar's bitmask and ``allowed_token_ids``: one
   mask of the tokens each row may not take, set to ``-inf``.
3. ``bad_words`` (vLLM's own ``apply_bad_words``: a word's last token is
   banned when the output ends with the rest of the word).
4. vLLM's logits processors that can change the greedy choice: its built-in
   ``min_tokens`` (stop tokens banned until the output is long enough) and
   ``logit_bias``, and any custom ones the model config names
   (``LLM(logits_processors=[...])``), each told of the batch through vLLM's
   ``BatchUpdate`` as vLLM's input batch tells them.
5. presence, frequency and repetition penalties as vLLM applies them
   (``vllm/model_executor/layers/utils.py::apply_penalties``): the
   repetition penalty divides the positive logits (multiplies the negative
   ones) of every token seen in the prompt or the output; the frequency
   penalty subtracts ``penalty * count`` and the presence penalty
   ``penalty * (count > 0)`` over the output tokens only. The counts are a
   bincount on the device (``index_add_`` of ones at ``row * (vocab + 1) +
   token``, the pad token ``vocab`` falling in a column that is cut off), as
   vLLM's ``scatter_add_`` (which has no spyre kernel).
6. greedy rows (temperature 0) take the ``argmax`` (as transformers' greedy
   ``generate``); the others are divided by their temperature and pass the
   processors that cannot change the greedy choice (vLLM's ``min_p``, custom
   ones), then, on the host, are cut to top-k and top-p and one token is
   drawn with ``torch.multinomial``: from the request's own generator when
   it has a seed (so a seeded request draws the same tokens whatever else is
   in the batch), else from torch's default CPU generator.

The sampling parameters still refused are in ``SpyrePlatform.validate_request``.
"""

import numpy as np
import torch

# The logprobs_mode values this sampler returns (vLLM's default first).
LOGPROBS_MODES = ("raw_logprobs", "raw_logits")

_GREEDY_EPS = 1e-5


def is_greedy(params) -> bool:
    return params is None or params.temperature < _GREEDY_EPS


def make_generator(params) -> torch.Generator | None:
    if params is None or params.seed is None or is_greedy(params):
        return None
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed)
    return generator


def draw(logits: torch.Tensor, params, generator: torch.Generator | None) -> int:
    """One token from ``logits [vocab]`` (float32, on the CPU) already divided
    by the temperature: top-k, top-p, then a draw."""
    top_k = params.top_k if params.top_k and params.top_k > 0 else 0
    if top_k and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens before it already reach top_p.
        drop = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= params.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(0, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


class SampledRow:
    """What the sampler needs of one request: its parameters, generator and
    tokens (``output_token_ids`` the request's own live list, which vLLM's
    logits processors keep a reference to)."""

    __slots__ = ("req_id", "params", "generator", "prompt_token_ids", "output_token_ids")

    def __init__(self, req_id, params, generator, prompt_token_ids, output_token_ids):
        self.req_id = req_id
        self.params = params
        self.generator = generator
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids = output_token_ids


class Sampler:
    """Steps 2 to 6 above for the rows of one step; the logits processors
    keep their state across steps, row ``i`` of the step being their batch
    index ``i``."""

    def __init__(self, vllm_config, device: torch.device):
        from vllm.v1.sample.logits_processor import build_logitsprocs

        self.device = device
        self.processors = build_logitsprocs(
            vllm_config, device, is_pin_memory=False, is_pooling_model=False,
            custom_logitsprocs=vllm_config.model_config.logits_processors or ())
        self._batch: list[str] = []  # the request at each batch index last step

    def _update_processors(self, rows: list[SampledRow]):
        """Tells the processors which request is at each index now (vLLM's
        ``BatchUpdate``: a request added at an index replaces the one there;
        removed are the indices past the batch)."""
        from vllm.v1.sample.logits_processor import BatchUpdate

        ids = [row.req_id for row in rows]
        changed = [i for i, req_id in enumerate(ids)
                   if i >= len(self._batch) or self._batch[i] != req_id]
        gone = list(range(len(ids), len(self._batch)))
        if not changed and not gone and len(ids) == len(self._batch):
            update = None
        else:
            update = BatchUpdate(
                batch_size=len(ids), removed=gone, moved=[],
                added=[(i, rows[i].params, rows[i].prompt_token_ids,
                        rows[i].output_token_ids) for i in changed])
        for processor in self.processors.all:
            processor.update_state(update)
        self._batch = ids

    def process(self, logits: torch.Tensor, rows: list[SampledRow],
                banned: torch.Tensor | None = None) -> torch.Tensor:
        """Steps 2 to 5 on ``logits [rows, vocab]`` (float32, on the device):
        ``banned`` the host mask of step 2 (or None). Returns new logits."""
        from vllm.v1.sample.ops.bad_words import apply_bad_words

        self._update_processors(rows)
        logits = logits.clone()
        if banned is not None:
            logits.masked_fill_(banned.to(self.device), float("-inf"))
        bad_words = {i: row.params.bad_words_token_ids for i, row in enumerate(rows)
                     if row.params is not None and row.params.bad_words_token_ids}
        if bad_words:
            apply_bad_words(logits, bad_words, [row.output_token_ids for row in rows])
        for processor in self.processors.non_argmax_invariant:
            logits = processor.apply(logits)
        use = [has_penalties(row.params) for row in rows]
        if any(use):
            logits = apply_penalties(
                logits, [row.params if u else None for row, u in zip(rows, use)],
                [row.prompt_token_ids if u else [] for row, u in zip(rows, use)],
                [row.output_token_ids if u else [] for row, u in zip(rows, use)])
        return logits

    def choose(self, logits: torch.Tensor, rows: list[SampledRow]) -> list[int]:
        """Step 6: one token per row of the processed ``logits``."""
        greedy = [is_greedy(row.params) for row in rows]
        host = logits.to("cpu")
        if not all(greedy):
            temperature = torch.tensor(
                [1.0 if g else row.params.temperature for g, row in zip(greedy, rows)],
                dtype=torch.float32).view(-1, 1).to(self.device)
            scaled = logits / temperature
            for processor in self.processors.argmax_invariant:
                scaled = processor.apply(scaled)
            scaled = scaled.to("cpu")
        return [int(torch.argmax(host[i])) if g else draw(scaled[i], row.params, row.generator)
                for i, (g, row) in enumerate(zip(greedy, rows))]


def allowed_token_mask(rows: list[SampledRow], vocab: int) -> np.ndarray | None:
    """``[rows, vocab]`` True where ``allowed_token_ids`` bans a token (None
    when no row restricts)."""
    restricted = [i for i, row in enumerate(rows)
                  if row.params is not None and row.params.allowed_token_ids]
    if not restricted:
        return None
    banned = np.zeros((len(rows), vocab), dtype=bool)
    for i in restricted:
        banned[i] = True
        banned[i, rows[i].params.allowed_token_ids] = False
    return banned


def grammar_mask(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    """The tokens a structured-output bitmask bans (``[n, ceil(vocab/32)]``
    int32, bit ``j`` of word ``w`` allowing token ``32 w + j``, as xgrammar
    packs it) as ``[n, vocab]`` booleans."""
    bits = np.unpackbits(np.ascontiguousarray(bitmask).view(np.uint8), axis=-1,
                         bitorder="little")
    return bits[:, :vocab] == 0


# --- penalties (device) ---------------------------------------------------------


def has_penalties(params) -> bool:
    return params is not None and (params.presence_penalty != 0.0
                                   or params.frequency_penalty != 0.0
                                   or params.repetition_penalty != 1.0)


def token_counts(token_lists: list[list[int]], vocab: int, device) -> torch.Tensor:
    """``[rows, vocab]`` float32 counts of each row's tokens, counted on the
    device: ``index_add_`` of ones into ``rows * (vocab + 1)`` bins."""
    rows = len(token_lists)
    flat = [r * (vocab + 1) + t for r, tokens in enumerate(token_lists) for t in tokens]
    if not flat:
        return torch.zeros((rows, vocab), dtype=torch.float32, device=device)
    index = torch.tensor(flat, dtype=torch.int64).to(device)
    bins = torch.zeros(rows * (vocab + 1), dtype=torch.float32, device=device)
    bins.index_add_(0, index, torch.ones(len(flat), dtype=torch.float32, device=device))
    return bins.view(rows, vocab + 1)[:, :vocab]


def apply_penalties(logits: torch.Tensor, params_list, prompt_lists: list[list[int]],
                    output_lists: list[list[int]]) -> torch.Tensor:
    """vLLM's ``apply_penalties`` on ``logits [rows, vocab]`` (float32, on the
    device), row ``i`` with ``params_list[i]``, its prompt and output tokens.
    Returns the penalized logits (a new tensor)."""
    rows, vocab = logits.shape
    device = logits.device

    def column(values):
        return torch.tensor(values, dtype=torch.float32).view(rows, 1).to(device)

    repetition = [p.repetition_penalty if p is not None else 1.0 for p in params_list]
    frequency = [p.frequency_penalty if p is not None else 0.0 for p in params_list]
    presence = [p.presence_penalty if p is not None else 0.0 for p in params_list]
    output_counts = token_counts(output_lists, vocab, device)
    output_mask = output_counts > 0
    if any(r != 1.0 for r in repetition):
        prompt_mask = token_counts(prompt_lists, vocab, device) > 0
        penalties = torch.where(prompt_mask | output_mask, column(repetition), 1.0)
        scaling = torch.where(logits > 0, 1.0 / penalties, penalties)
        logits = logits * scaling
    if any(f != 0.0 for f in frequency):
        logits = logits - column(frequency) * output_counts
    if any(p != 0.0 for p in presence):
        logits = logits - column(presence) * output_mask.to(torch.float32)
    return logits


# --- logprobs (device) ----------------------------------------------------------


def num_logprobs(requested: int, vocab: int) -> int:
    """vLLM's count of top logprobs for a request's ``logprobs`` or
    ``prompt_logprobs`` (-1: the whole vocabulary)."""
    return vocab if requested == -1 else requested


def compute_logprobs(logits: torch.Tensor, mode: str = "raw_logprobs") -> torch.Tensor:
    """What vLLM returns as logprobs of ``logits`` (the raw model logits)."""
    if mode == "raw_logits":
        return logits.to(torch.float32)
    return logits.log_softmax(dim=-1, dtype=torch.float32)


def gather_chosen_logprobs(logprobs: torch.Tensor, columns: np.ndarray,
                           sampled: torch.Tensor):
    """vLLM's ``Sampler.gather_specific_token_logprobs`` (``logprob_token_ids``)
    on the device: per row, the sampled token, then the ids a request chose
    (``columns [rows, m]``, -1 padding), their logprobs, -inf where padded.
    Returns ``(ids [rows, m+1] int32, logprobs [rows, m+1] float32)``."""
    padded = torch.from_numpy(columns < 0)
    ids = torch.from_numpy(np.maximum(columns, 0)).to(logprobs.device)
    ids = torch.cat((sampled.view(-1, 1), ids), dim=1)
    values = logprobs.gather(-1, ids)
    pad = torch.cat((torch.zeros(len(columns), 1, dtype=torch.bool), padded), dim=1)
    values = values.masked_fill(pad.to(logprobs.device), float("-inf"))
    return ids.to(torch.int32), values


def gather_logprobs(logprobs: torch.Tensor, k: int, token_ids: torch.Tensor):
    """vLLM's ``Sampler.gather_logprobs`` on the device: for each row, the
    token's own id, logprob and rank, then the top ``k``. Returns ``(ids
    [rows, k+1] int32, logprobs [rows, k+1] float32, ranks [rows] int64)``."""
    token_ids = token_ids.view(-1, 1)
    token_logprobs = logprobs.gather(-1, token_ids)
    ranks = (logprobs >= token_logprobs).sum(-1)
    if k > 0:
        top_logprobs, top_ids = torch.topk(logprobs, k, dim=-1)
        ids = torch.cat((token_ids, top_ids), dim=1)
        values = torch.cat((token_logprobs, top_logprobs), dim=1)
    else:
        ids, values = token_ids, token_logprobs
    return ids.to(torch.int32), values, ranks
