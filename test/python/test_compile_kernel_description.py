"""torch.compile on spyre: a loop kernel reaches the kernel library as a
description of plain data (lowering.describe_kernel). It survives JSON and
rebuilds the same program byte for byte; what the builder cannot lower it
reports as the errors the scheduler acts on."""

import json

import pytest
import torch
import torch.nn.functional as F

from compile_util import NORM_TOL, REDUCTION_TOL, compile_and_compare
from torch_spyre import _C
from torch_spyre._inductor import lowering

h = torch.float16


@pytest.fixture
def descriptions(monkeypatch):
    """The descriptions of every loop kernel compiled in the test."""
    seen = []
    describe = lowering.describe_kernel

    def record(plan):
        description = describe(plan)
        seen.append(description)
        return description
    monkeypatch.setattr(lowering, "describe_kernel", record)
    with torch._inductor.config.patch(force_disable_caches=True):
        yield seen


def _program(description, device=0):
    program, info = _C.build_loop_kernel(description, device)
    return program.serialize(), info


def test_descriptions_rebuild_the_same_program_from_json(descriptions):
    # pointwise with broadcasts, fused reductions (softmax, welford), a full
    # reduction over the ring, rows long enough to be split
    w = torch.randn(300, dtype=h)
    compile_and_compare(lambda a, b: F.layer_norm(a, (300,)) * b + torch.softmax(a, -1),
                        torch.randn(40, 300, dtype=h), w, tol=NORM_TOL)
    compile_and_compare(lambda a: a.sum(), torch.randn(64, 500, dtype=h), tol=REDUCTION_TOL)
    compile_and_compare(lambda a: torch.sigmoid(a) * 2.0, torch.randn(3, 20000, dtype=h))
    assert len(descriptions) >= 3
    kinds = {op["op"] for d in descriptions for op in d["ops"]}
    assert {"load", "reduction", "binary", "unary"} <= kinds
    for description in descriptions:
        restored = json.loads(json.dumps(description))
        assert restored == description
        assert _program(restored) == _program(description)


def test_builder_errors_are_the_compilers(descriptions):
    compile_and_compare(lambda a: torch.exp(a) + 1.0, torch.randn(8, 64, dtype=h))
    (description,) = descriptions
    # an op the device has no instruction for (lower_kernel raises
    # SpyreLoweringError: the scheduler runs the kernel on the host)
    bad = json.loads(json.dumps(description))
    unary = next(op for op in bad["ops"] if op["op"] == "unary")
    unary["name"] = "lgamma"
    with pytest.raises(_C.KernelBuildError, match="lgamma"):
        _program(bad)
    # rows too long for any block (lower_kernel raises SpyreKernelTooLarge)
    huge = json.loads(json.dumps(description))
    huge["cols"] = 1 << 22
    with pytest.raises(_C.LoopKernelTooLarge, match="scratchpad"):
        _program(huge)
