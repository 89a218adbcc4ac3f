"""Sampling on the host from the logits of the step's last tokens.

Greedy (temperature 0) is ``argmax``, as transformers' greedy ``generate``.
Otherwise the logits are divided by the temperature, cut to top-k and top-p,
and one token is drawn with ``torch.multinomial``: from the request's own
generator when it has a seed (so a seeded request draws the same tokens
whatever else is in the batch), else from torch's default CPU generator.
The other sampling parameters are refused per request by
``SpyrePlatform.validate_request``.
"""

import torch

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
