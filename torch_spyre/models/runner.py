"""One architecture on spyre against the CPU, mode by mode.

``run_architecture`` builds the tiny seeded model once (on the CPU, then a
copy on spyre) and runs the requested modes on it; each mode gives one
result dict (see ``MODE_RESULT_FIELDS``). The sweep calls it in a child
process per architecture (``python -m torch_spyre.models run-one``); the
tests call it in-process.

Statuses: ``pass``; ``fail`` (spyre raised, or its result differs from the
CPU's); ``skip`` (the mode does not apply, or the CPU itself cannot build or
run the model, so there is nothing to compare with).
"""

from __future__ import annotations

import copy
import os
import statistics
import time
import warnings
from dataclasses import dataclass

import torch

from . import configs

MODES = ("eager", "strict", "compiled", "generate")

# Forward outputs agree when max |spyre - cpu| <= ATOL + RTOL * max |cpu|:
# float32 on both sides, but the device sums in another order (tiled
# matmuls, reductions across cores) and computes exp/erf/... its own way.
ATOL = 1e-4
RTOL = 1e-3

BATCH, SEQUENCE, DECODER_SEQUENCE = 2, 8, 5
PROMPT_LENGTHS = (7, 4)
NEW_TOKENS = 8
FIRST_ORDINARY_TOKEN = 3  # below are pad, bos and eos

# A tiny config that still builds a big model (an unshrunk table in some
# sub-module) would take the machine's memory: checked on the meta device.
MAX_PARAMETERS = 20_000_000

MODE_RESULT_FIELDS = ("status", "error", "max_error", "tolerance", "fallbacks",
                      "host_copies", "host_ratio", "spyre_ms", "cpu_ms", "device_ns",
                      "seconds", "host_kernels", "adapters")


class CpuReferenceError(Exception):
    """The CPU could not build or run the model: nothing to compare with."""


class SpyreRunError(Exception):
    """The compared run on spyre raised; keeps what it counted until then
    (e.g. the CPU fallbacks before an op that failed)."""

    def __init__(self, error, counts):
        super().__init__(_first_line(error))
        self.counts = counts


@dataclass
class ModelCase:
    """A tiny seeded model on the CPU and its inputs."""
    arch: configs.Architecture
    config: object
    cpu_model: torch.nn.Module
    inputs: dict

    def spyre_copy(self):
        """The same weights on spyre, a fresh copy per mode: a mode must not
        inherit another's state (a compiled wrapper, a generation cache)."""
        return copy.deepcopy(self.cpu_model).to("spyre")


def run_architecture(arch, modes, timed_runs=3, on_result=None):
    """Runs `modes` of one architecture; returns {mode: result dict}.

    `on_result(mode, result)` is called as each mode finishes, so that a
    crash in a later mode keeps the earlier ones. `timed_runs` is the number
    of timed repetitions behind the host-time ratio (0: not measured).
    """
    _quiet_transformers()
    results = {}
    try:
        case, build_failure = build_case(arch), None
    except CpuReferenceError as error:
        case, build_failure = None, mode_result("skip", error=_reference_message(error))
    except Exception as error:  # noqa: BLE001 - any failure is a result
        case, build_failure = None, mode_result("fail", error=_first_line(error))
    for mode in modes:
        started = time.perf_counter()
        result = dict(build_failure) if case is None else run_mode(case, mode, timed_runs)
        result["seconds"] = round(time.perf_counter() - started, 3)
        results[mode] = result
        if on_result is not None:
            on_result(mode, result)
    return results


def build_case(arch):
    """Builds the seeded tiny model on the CPU (CpuReferenceError if it cannot)."""
    import transformers
    try:
        config = configs.tiny_config(arch.name)
        model_class = getattr(transformers, arch.model_class)
        with torch.device("meta"):
            parameters = sum(p.numel() for p in model_class(config).parameters())
        if parameters > MAX_PARAMETERS:
            raise CpuReferenceError(f"tiny config still has {parameters / 1e6:.0f}M parameters")
        torch.manual_seed(0)
        cpu_model = model_class(config).to(torch.float32).eval()
        _redraw_constant_matrices(cpu_model, config)
    except CpuReferenceError:
        raise
    except Exception as error:
        raise CpuReferenceError(f"cannot build: {_first_line(error)}") from error
    return ModelCase(arch, config, cpu_model, sample_inputs(arch, config))


def _redraw_constant_matrices(model, config):
    """Draws every constant weight matrix from the seeded normal instead.

    Some models initialise their MoE router's gate to zeros (afmoe,
    ernie4_5_moe): every score then ties, and which experts `torch.topk`
    picks among equal values is left to the implementation (the CPU's
    partial sort picks e.g. experts 2 and 3 of 4, a stable sort 0 and 1).
    A comparison on such weights would test tie-breaking, not the device.
    Vectors (norm scales, biases) keep their constants: they create no ties.
    """
    generator = torch.Generator().manual_seed(2)
    std = getattr(config, "initializer_range", 0.02)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and parameter.numel() > 1 and \
                    bool((parameter == parameter.flatten()[0]).all()):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)


def sample_inputs(arch, config):
    """Seeded token ids (batch 2, sequence 8) and a full attention mask."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(FIRST_ORDINARY_TOKEN, config.vocab_size, (BATCH, SEQUENCE),
                        generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if arch.kind == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, :DECODER_SEQUENCE]
    return inputs


def run_mode(case, mode, timed_runs=3):
    """One mode of one model: a result dict, never an exception."""
    try:
        return MODE_RUNNERS[mode](case, timed_runs)
    except CpuReferenceError as error:
        return mode_result("skip", error=_reference_message(error))
    except SpyreRunError as error:
        return mode_result("fail", error=str(error), **error.counts)
    except Exception as error:  # noqa: BLE001 - any failure is a result
        return mode_result("fail", error=_first_line(error))
    finally:
        torch.spyre.set_strict(False)


def _run_eager(case, timed_runs, strict=False):
    return _run_forward(case, case.spyre_copy(), timed_runs, strict=strict)


def _run_strict(case, timed_runs):
    return _run_eager(case, timed_runs, strict=True)


def _run_compiled(case, timed_runs):
    """The model through torch.compile, after torch_spyre.adapters.adapt
    (unless the adapters are switched off, _inductor.config.adapters): the
    result's `adapters` is what adapt applied plus what the adapters' graph
    forms rewrote while compiling ({adapter: places}). Compiled without
    Inductor's caches: a graph loaded from a cache runs no pass, and its
    rewrites would go uncounted."""
    import torch._dynamo
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from .. import adapters
    from .._inductor import config
    torch._dynamo.reset()
    model = case.spyre_copy()
    applied = adapters.adapt(model) if config.adapters else {}
    before = adapters.graph_counts()
    with inductor_config.patch(fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        result = _run_forward(case, torch.compile(model), timed_runs)
    for name, count in adapters.graph_counts().items():
        if count - before.get(name, 0):
            applied[name] = applied.get(name, 0) + count - before.get(name, 0)
    result["adapters"] = applied
    return result


def _run_forward(case, spyre_model, timed_runs, strict=False):
    """Compares one forward with the CPU's, then times both."""
    reference = _reference(lambda: _forward_output(case.cpu_model, case.inputs, case.arch))
    spyre_inputs = {k: v.to("spyre") for k, v in case.inputs.items()}
    run_on_spyre = lambda: _forward_output(spyre_model, spyre_inputs, case.arch)  # noqa: E731
    got, counts = _counted_run(run_on_spyre, strict)
    max_error = _max_abs_error(got, reference)
    tolerance = ATOL + RTOL * reference.abs().max().item()
    timing = _host_timing(run_on_spyre,
                          lambda: _forward_output(case.cpu_model, case.inputs, case.arch),
                          timed_runs, strict)
    passed = max_error <= tolerance  # False for NaN
    return mode_result("pass" if passed else "fail",
                   error=None if passed else
                   f"max abs error {max_error:.3g} above tolerance {tolerance:.3g}",
                   max_error=max_error, tolerance=tolerance, **counts, **timing)


def _run_generate(case, timed_runs):
    if case.arch.kind != "decoder":
        return mode_result("skip", error=f"generate is for decoders ({case.arch.kind})")
    ids, mask = left_padded_prompts(case.config.vocab_size)
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=configs.PAD_ID)
    want = _reference(lambda: case.cpu_model.generate(ids, attention_mask=mask, **settings))
    spyre_model, spyre_ids, spyre_mask = case.spyre_copy(), ids.to("spyre"), mask.to("spyre")
    run_on_spyre = lambda: spyre_model.generate(  # noqa: E731
        spyre_ids, attention_mask=spyre_mask, **settings)
    got, counts = _counted_run(run_on_spyre, strict=False)
    got = got.cpu()
    timing = _host_timing(run_on_spyre,
                          lambda: case.cpu_model.generate(ids, attention_mask=mask, **settings),
                          timed_runs, strict=False)
    if got.shape == want.shape and torch.equal(got, want):
        return mode_result("pass", max_error=0.0, tolerance=0.0, **counts, **timing)
    return mode_result("fail", error=_token_mismatch(got, want, ids.shape[1]), **counts, **timing)


MODE_RUNNERS = {"eager": _run_eager, "strict": _run_strict,
                "compiled": _run_compiled, "generate": _run_generate}


def left_padded_prompts(vocab_size):
    """Two seeded prompts of different lengths, left-padded into one batch."""
    generator = torch.Generator().manual_seed(2)
    width = max(PROMPT_LENGTHS)
    ids = torch.full((len(PROMPT_LENGTHS), width), configs.PAD_ID)
    mask = torch.zeros(len(PROMPT_LENGTHS), width, dtype=torch.long)
    for row, length in enumerate(PROMPT_LENGTHS):
        ids[row, width - length:] = torch.randint(FIRST_ORDINARY_TOKEN, vocab_size,
                                                  (length,), generator=generator)
        mask[row, width - length:] = 1
    return ids, mask


def _token_mismatch(got, want, prompt_width):
    if got.shape != want.shape:
        return f"generated shape {tuple(got.shape)} differs from the CPU's {tuple(want.shape)}"
    differing = (got != want)[:, prompt_width:]
    first_step = differing.any(0).nonzero()[0].item()
    return (f"tokens differ from the CPU's at {differing.sum().item()} of "
            f"{differing.numel()} generated positions, first at step {first_step}")


def _forward_output(model, inputs, arch):
    """The tensor compared: logits of LMs, last_hidden_state of encoders."""
    with torch.no_grad():
        output = model(**inputs)
    if arch.kind != "encoder":
        return output.logits
    hidden = getattr(output, "last_hidden_state", None)
    return hidden if hidden is not None else output[0]


def _reference(compute):
    try:
        return compute()
    except Exception as error:
        raise CpuReferenceError(_first_line(error)) from error


def _counted_run(run_on_spyre, strict):
    """Runs once on spyre; the CPU fallbacks, host copies and modelled
    device time of that run."""
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    torch.spyre.reset_device_time_stats()
    from .._inductor import runtime
    runtime.reset_stats()
    torch.spyre.set_strict(strict)
    try:
        with torch.no_grad():
            output = run_on_spyre()
        torch.spyre.synchronize()
    except Exception as error:
        raise SpyreRunError(error, {"fallbacks": dict(torch.spyre.fallback_stats())}) from error
    finally:
        torch.spyre.set_strict(False)
    return output, {"fallbacks": dict(torch.spyre.fallback_stats()),
                    "host_copies": torch.spyre.op_stats()["host_materializations"],
                    "device_ns": torch.spyre.device_time_stats()["total_ns"],
                    # runs of compiled kernels the device lowering rejected
                    "host_kernels": runtime.stats()["host_kernels"]}


def _host_timing(run_on_spyre, run_on_cpu, timed_runs, strict):
    """Median host time of `timed_runs` runs on each device (after the warm-up
    the compared run was) and their ratio spyre/CPU."""
    if timed_runs <= 0:
        return {}
    torch.spyre.set_strict(strict)
    try:
        spyre_s = _median_seconds(run_on_spyre, timed_runs, torch.spyre.synchronize)
    finally:
        torch.spyre.set_strict(False)
    run_on_cpu()  # warm-up
    cpu_s = _median_seconds(run_on_cpu, timed_runs, lambda: None)
    return {"spyre_ms": spyre_s * 1e3, "cpu_ms": cpu_s * 1e3, "host_ratio": spyre_s / cpu_s}


def _median_seconds(run, repeats, synchronize):
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            synchronize()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _max_abs_error(got, want):
    got = got.detach().to("cpu", torch.float32)
    if got.shape != want.shape:
        raise AssertionError(f"output shape {tuple(got.shape)} differs from the CPU's "
                             f"{tuple(want.shape)}")
    return (got - want.float()).abs().max().item()


def mode_result(status, **fields):
    """A result dict with every field of MODE_RESULT_FIELDS (None if unknown)."""
    result = dict.fromkeys(MODE_RESULT_FIELDS)
    result.update(status=status, fallbacks={})
    result.update(fields)
    return result


def _reference_message(error):
    return f"cpu reference: {error}"


def _first_line(error):
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}"[:300]


def _quiet_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging
    logging.set_verbosity_error()
