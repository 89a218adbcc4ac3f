"""torch.compile on spyre: what the device lowering cannot take is a counted
host fallback (never a compile failure or a wrong answer); reductions over
rows longer than a scratchpad block are split; dynamic shapes recompile."""

import pytest
import torch

from compile_util import REDUCTION_TOL, to_spyre
from torch_spyre._inductor import host_kernel, runtime, scheduling

h = torch.float16


def compile_run(fn, *args, **kwargs):
    torch._dynamo.reset()
    scheduling.compiled_kernels.clear()
    runtime.reset_stats()
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(fn, **kwargs)(*to_spyre(args))
    torch.spyre.synchronize()
    return out, [k.get("kind", "device") for k in scheduling.compiled_kernels.values()]


@pytest.mark.parametrize("name,fn", [
    ("reshape_of_transpose", lambda a: a.t().reshape(4, 15) * 2.0),
    ("flip", lambda a: a.flip(0) + 1.0),
    ("roll", lambda a: torch.roll(a, 3, 1) * 2.0),
])
def test_non_affine_index_is_a_counted_host_fallback(name, fn):
    x = torch.randn(6, 10, dtype=h)
    before = host_kernel.host_kernel_counts()
    out, kinds = compile_run(fn, x)
    torch.testing.assert_close(out.cpu().float(), fn(x.float()), atol=2e-3, rtol=2e-3)
    assert "host" in kinds
    host = [k for k in scheduling.compiled_kernels.values() if k.get("kind") == "host"]
    assert all(k["reason"] for k in host)  # reported with the lowering's reason
    assert sum(host_kernel.host_kernel_counts().values()) == sum(before.values()) + len(host)
    assert runtime.stats()["host_kernels"] == len(host)


@pytest.mark.parametrize("name,fn", [
    ("flatten_of_transpose", lambda a: a.t().reshape(-1) * 2.0),
    ("modular_view", lambda a: a.t().reshape(5, 12).exp()),
])
def test_digit_split_stores_of_part_of_a_stick_are_device_programs(name, fn):
    # the flat col var splits into digits (col = 6 q + r): each q's block
    # stores 6 elements from inside a stick, under a write mask
    x = torch.randn(6, 10, dtype=h)
    out, kinds = compile_run(fn, x)
    assert kinds == ["device"]
    torch.testing.assert_close(out.cpu().float(), fn(x.float()), atol=2e-3, rtol=2e-3)


def test_host_fallback_evaluates_min_and_max_of_index_expressions():
    # arange arithmetic folds into the index expression Min(0, col - row):
    # its host evaluation takes the index variables as tensors (T5-family
    # decoders' relative positions, with the adapters switched off)
    from torch_spyre._inductor import config

    def f(n):
        rel = torch.arange(n, device="spyre")[None, :] - torch.arange(n, device="spyre")[:, None]
        zero = torch.zeros_like(rel)
        return -torch.min(rel, zero) + 3 * torch.max(rel, zero)
    rel = torch.arange(8)[None, :] - torch.arange(8)[:, None]
    with config.patch(adapters=False):
        out, kinds = compile_run(f, 8)
    assert torch.equal(out.cpu(), -rel.clamp(max=0) + 3 * rel.clamp(min=0))
    assert "host" in kinds


def test_host_fallback_next_to_device_programs():
    # the affine part of the graph stays device programs
    def f(a):
        return torch.softmax(a, -1), a.flip(0) * 2.0
    x = torch.randn(6, 10, dtype=h)
    (soft, flat), kinds = compile_run(f, x)
    assert "device" in kinds and "host" in kinds
    torch.testing.assert_close(soft.cpu().float(), torch.softmax(x.float(), -1), atol=1e-2,
                               rtol=1e-2)
    torch.testing.assert_close(flat.cpu().float(), x.float().flip(0) * 2, atol=2e-3,
                               rtol=2e-3)


def test_an_assertion_raises_as_on_cpu_and_only_it_leaves_the_device():
    # torch._assert_async (MoE routers in dbrx, longcat_flash): the check is
    # a host kernel of its own, the work around it stays device programs, a
    # failing check raises with its message
    def f(x, idx):
        torch._assert_async((idx < 4).all(), "an index out of range")
        return x * 2 + idx
    x, idx = torch.randn(4), torch.tensor([1.0, 2.0, 3.0, 0.0])
    out, kinds = compile_run(f, x, idx)
    torch.testing.assert_close(out.cpu(), x * 2 + idx)
    host = [k for k in scheduling.compiled_kernels.values() if k.get("kind") == "host"]
    assert len(host) == 1 and "device_assert_async" in host[0]["reason"]
    assert "device" in kinds
    compiled = torch.compile(f)
    with pytest.raises(RuntimeError, match="an index out of range"):
        compiled(*to_spyre((x, idx + 10)))
        torch.spyre.synchronize()


def test_softmax_backward_fma_is_a_device_program():
    # Inductor's softmax backward is fma(-y, sum(g * y), g * y): on the
    # device a multiply then an add, in fp32
    def f(x, w):
        return (torch.softmax(x, -1) * w).sum()
    x, w = torch.randn(6, 40), torch.randn(6, 40)
    torch._dynamo.reset()
    scheduling.compiled_kernels.clear()
    on_device = x.to("spyre").requires_grad_()
    torch.compile(f)(on_device, w.to("spyre")).backward()
    reference = x.clone().requires_grad_()
    f(reference, w).backward()
    torch.testing.assert_close(on_device.grad.cpu(), reference.grad, atol=1e-6, rtol=1e-5)
    assert [k.get("kind", "device") for k in scheduling.compiled_kernels.values()] == \
        ["device"] * len(scheduling.compiled_kernels)


@pytest.mark.parametrize("op,shape", [("sum", (4, 300000)), ("amax", (3, 200000)),
                                      ("mean", (2, 131072)), ("var", (2, 131072)),
                                      ("sum_all", (300000,))])
def test_reduction_over_rows_longer_than_a_block(op, shape):
    fns = {"sum": lambda a: a.sum(-1), "amax": lambda a: a.amax(-1),
           "mean": lambda a: a.mean(-1), "var": lambda a: a.var(-1),
           "sum_all": lambda a: a.sum()}
    x = torch.randn(*shape, dtype=h)
    out, kinds = compile_run(fns[op], x)
    assert set(kinds) == {"device"}
    ref = fns[op](x.float())
    # an fp16 sum of 300k O(1) terms is O(500): one rounding there is 0.25
    torch.testing.assert_close(out.cpu().float(), ref, atol=0.5, rtol=REDUCTION_TOL["rtol"])


def test_dynamic_true_matmul_and_linear_recompile_per_shape():
    torch._dynamo.reset()
    f = torch.compile(lambda a, w, b: torch.relu(torch.nn.functional.linear(a, w, b)),
                      dynamic=True)
    w, b = torch.randn(32, 64, dtype=h) / 8, torch.randn(32, dtype=h)
    with torch.no_grad():
        for shape in ((2, 16, 64), (3, 20, 64), (40, 64)):
            x = torch.randn(*shape, dtype=h)
            out = f(*to_spyre([x, w, b]))
            ref = torch.relu(torch.nn.functional.linear(x.float(), w.float(), b.float()))
            torch.testing.assert_close(out.cpu().float(), ref, atol=1e-2, rtol=1e-2)


def test_matmul_with_a_k_far_beyond_the_scratchpad_is_tiled():
    # K = 200k (400 KB per row of A): the builder walks K in tiles
    a, b = torch.randn(8, 200000, dtype=h) / 400, torch.randn(200000, 8, dtype=h)
    out, kinds = compile_run(lambda x, y: x @ y, a, b)
    assert kinds == ["matmul"]
    torch.testing.assert_close(out.cpu().float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)


def test_cache_key_follows_the_native_library(monkeypatch):
    # A compiled module embeds programs the C++ builders made, serialised in
    # the runtime's format: a rebuilt library must not reuse it from
    # Inductor's cache (it failed to load after a format change).
    from torch_spyre._inductor import decompositions
    before = decompositions.SpyrePostGradPass().uuid()
    monkeypatch.setattr(decompositions, "_native_library_digest", lambda: b"rebuilt")
    assert decompositions.SpyrePostGradPass().uuid() != before
