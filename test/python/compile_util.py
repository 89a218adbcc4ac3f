"""Helpers of the torch.compile tests: run a function compiled on spyre and
eagerly on the CPU (in fp32 from the same fp16 inputs), and check that the
compiled graph ran as device programs only."""

import contextlib

import torch

from torch_spyre._inductor import runtime

# fp16 tolerances per op family (outputs are fp16: one rounding is 2^-11
# relative; transcendental and reduced values carry a few more).
POINTWISE_TOL = dict(atol=2e-3, rtol=2e-3)
REDUCTION_TOL = dict(atol=1e-2, rtol=5e-3)
NORM_TOL = dict(atol=1e-2, rtol=1e-2)


def to_spyre(args):
    return [a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args]


def cpu_reference(fn, args):
    return fn(*[a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args])


def compile_and_compare(fn, *args, tol=POINTWISE_TOL, expect_kernels=None, **compile_kwargs):
    """Compiles `fn`, runs it on spyre in strict mode (no CPU fallback may
    run), compares with the CPU and returns (outputs, launches)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, **compile_kwargs)
    dev_args = to_spyre(args)
    before = runtime.stats()["launches"]
    with torch.spyre.strict():
        out = compiled(*dev_args)
    torch.spyre.synchronize()
    launches = runtime.stats()["launches"] - before
    assert launches >= 1, "the compiled graph launched no device program"
    if expect_kernels is not None:
        assert launches == expect_kernels, f"{launches} device programs, expected {expect_kernels}"
    ref = cpu_reference(fn, args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    for o, r in zip(outs, refs):
        assert o.device.type == "spyre"
        torch.testing.assert_close(o.cpu().float(), r.float(), **tol)
    return out, launches


@contextlib.contextmanager
def no_fallback():
    with torch.spyre.strict():
        yield
