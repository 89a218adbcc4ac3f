"""Sampling from the logits of the step's last tokens.

The penalties and the logprobs are tensor math on the device (``spyre``):

* presence, frequency and repetition penalties as vLLM 0.32.0 applies them
  (``vllm/model_executor/layers/utils.py::apply_penalties``): the repetition
  penalty divides the positive logits (multiplies the negative ones) of every
  token seen in the prompt or the output; the frequency penalty subtracts
  ``penalty * count`` and the presence penalty ``penalty * (count > 0)`` over
  the output tokens only. The counts are a bincount on the device
  (``index_add_`` of ones at ``row * (vocab + 1) + token``, the pad token
  ``vocab`` falling in a column that is cut off), as vLLM's ``scatter_add_``
  (which has no spyre kernel).
* logprobs as vLLM's ``Sampler`` returns them with its default
  ``logprobs_mode="raw_logprobs"``: ``log_softmax`` of the model's own logits
  (before penalties and temperature), the top-k (``topk``) after the chosen
  token's own logprob (``gather``) and its rank (the count of tokens with a
  logprob at least as large). ``raw_logits`` returns the logits themselves.

The token is then chosen on the host from the penalized logits:
greedy (temperature 0) is ``argmax``, as transformers' greedy ``generate``.
Otherwise the logits are divided by the temperature, cut to top-k and top-p,
and one token is drawn with ``torch.multinomial``: from the request's own
generator when it has a seed (so a seeded request draws the same tokens
whatever else is in the batch), else from torch's default CPU generator.
The other sampling parameters are refused per request by
``SpyrePlatform.validate_request``.
"""

import torch

# The logprobs_mode values this sampler returns (vLLM's default first).
LOGPROBS_MODES = ("raw_logprobs", "raw_logits")

_GREEDY_EPS = 1e-5


def make_generator(params) -> torch.Generator | None:
    if params is None or params.seed is None or params.temperature < _GREEDY_EPS:
        return None
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed)
    return generator


def sample(logits: torch.Tensor, params, generator: torch.Generator | None) -> int:
    """One token from ``logits [vocab]`` (float32, on the CPU)."""
    if params is None or params.temperature < _GREEDY_EPS:
        return int(torch.argmax(logits))
    logits = logits / params.temperature
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
