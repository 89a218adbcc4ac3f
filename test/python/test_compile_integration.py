"""torch.compile on spyre: registration, backend name, launch accounting,
dynamic shapes, the scratchpad limit, the on-disk cache."""

import textwrap

import pytest
import torch

from compile_util import REDUCTION_TOL, compile_and_compare
from torch_spyre._inductor import runtime

h = torch.float16


def test_default_inductor_backend_runs_device_programs():
    runtime.reset_stats()
    x = torch.randn(64, 64, dtype=h)
    compile_and_compare(lambda a: a * a + 1.0, x, expect_kernels=1)
    assert runtime.stats()["kernels_loaded"] >= 1


def test_backend_name_spyre():
    compile_and_compare(lambda a: torch.softmax(a, -1), torch.randn(32, 80, dtype=h),
                        tol=REDUCTION_TOL, backend="spyre", expect_kernels=1)


def test_programs_are_loaded_once_and_launched_per_call():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: a.exp() + 1.0)
    x = torch.randn(40, 64, dtype=h).to("spyre")
    compiled(x)
    runtime.reset_stats()
    for _ in range(3):
        out = compiled(x)
    assert runtime.stats() == {"kernels_loaded": 0, "launches": 3, "relayouts": 0,
                               "host_kernels": 0}
    stats = torch.spyre.last_launch_stats()
    assert stats["instructions"] > 0 and stats["dma_bytes"] > 0
    torch.testing.assert_close(out.cpu().float(), x.cpu().float().exp() + 1.0,
                               atol=5e-3, rtol=2e-3)


def test_dynamic_true_recompiles_per_shape():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: torch.softmax(a * 2.0, -1), dynamic=True)
    for rows in (8, 16, 24):
        x = torch.randn(rows, 100, dtype=h)
        out = compiled(x.to("spyre"))
        torch.testing.assert_close(out.cpu().float(), torch.softmax(x.float() * 2.0, -1),
                                   atol=1e-3, rtol=1e-2)


def test_kernel_too_large_for_the_scratchpad_is_a_clear_error():
    torch._dynamo.reset()
    # one row of 600k elements: the smallest block needs several MiB
    x = torch.randn(1, 600_000, dtype=h).to("spyre")
    compiled = torch.compile(lambda a: torch.softmax(a, -1))
    with pytest.raises(Exception, match="scratchpad"):
        compiled(x)


def test_second_process_compiles_nothing(tmp_path, fresh_python):
    code = textwrap.dedent("""
        import torch, json
        from torch_spyre._inductor import runtime, scheduling
        f = torch.compile(lambda a: torch.softmax(a, -1) * 3.0)
        x = torch.randn(64, 128, dtype=torch.float16)
        out = f(x.to("spyre")).cpu().float()
        ok = torch.allclose(out, torch.softmax(x.float(), -1) * 3.0, atol=1e-2)
        print(json.dumps({"lowered": len(scheduling.compiled_kernels), "ok": ok,
                          "launches": runtime.stats()["launches"]}))
    """)
    env = dict(TORCHINDUCTOR_CACHE_DIR=str(tmp_path), TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    import json
    first = fresh_python(code, **env)
    assert first.returncode == 0, first.stderr[-2000:]
    second = fresh_python(code, **env)
    assert second.returncode == 0, second.stderr[-2000:]
    a = json.loads(first.stdout.strip().splitlines()[-1])
    b = json.loads(second.stdout.strip().splitlines()[-1])
    assert a == {"lowered": 1, "ok": True, "launches": 1}
    assert b == {"lowered": 0, "ok": True, "launches": 1}


def test_backend_name_resolves_in_a_fresh_process(fresh_python):
    # "spyre" is found through the torch_dynamo_backends entry point; nothing
    # of Dynamo or Inductor is imported by `import torch` for it.
    result = fresh_python("""
        import sys, torch
        assert "torch._inductor.codegen.common" not in sys.modules
        f = torch.compile(lambda a: a * 2.0, backend="spyre")
        x = torch.randn(8, 64, dtype=torch.float16)
        assert torch.equal(f(x.to("spyre")).cpu(), x * 2.0)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")


def test_in_place_update_of_an_input():
    torch._dynamo.reset()

    def f(x, y):
        x.mul_(2.0)
        return x + y
    x, y = torch.randn(33, 70, dtype=h), torch.randn(70, dtype=h)
    xd = x.to("spyre")
    out = torch.compile(f)(xd, y.to("spyre"))
    torch.testing.assert_close(xd.cpu().float(), x.float() * 2)
    torch.testing.assert_close(out.cpu().float(), x.float() * 2 + y.float(), atol=1e-2,
                               rtol=2e-3)


def test_views_of_a_larger_storage_are_relaid_out():
    torch._dynamo.reset()
    big = torch.randn(66, 70, dtype=h)
    dev = big.to("spyre")
    compiled = torch.compile(lambda a: a * 3.0)
    runtime.reset_stats()
    for part in (slice(0, 33), slice(33, 66)):
        out = compiled(dev[part])
        torch.testing.assert_close(out.cpu().float(), big[part].float() * 3, atol=1e-2,
                                   rtol=2e-3)
    assert runtime.stats()["relayouts"] == 2


def test_views_at_other_offsets_of_one_stick_are_their_own_values():
    # vLLM's runner packs a step's token ids and positions in one device
    # tensor: views of the same sticks at offsets 0 and 2. The program binds
    # whole storages; the view further in was read as the first (Dynamo does
    # not guard on storage offsets).
    torch._dynamo.reset()
    flat = torch.tensor([100.0, 200.0, 4.0, 13.0, 1.0, 0.0, 3.0])
    dev = flat.to("spyre")
    compiled = torch.compile(lambda a: a * 2.0 + 1.0, backend="spyre")
    for start in (2, 0, 2, 4):
        got = compiled(dev[start:start + 2].view(1, 2))
        assert torch.equal(got.cpu(), flat[start:start + 2].view(1, 2) * 2 + 1), start


def test_in_place_update_of_a_view_sharing_its_sticks_leaves_the_rest():
    # The program writes whole sticks: an updated input that shares its
    # sticks with other elements is updated through a copy (masked writes).
    torch._dynamo.reset()

    def f(a):
        a.add_(1.0)
        return a * 3.0
    flat = torch.tensor([100.0, 200.0, 4.0, 13.0, 1.0, 0.0, 3.0])
    dev = flat.to("spyre")
    compiled = torch.compile(f, backend="spyre")
    want = flat.clone()
    for start in (0, 2):
        got = compiled(dev[start:start + 2])
        want[start:start + 2] += 1
        assert torch.equal(got.cpu(), want[start:start + 2] * 3), start
        assert torch.equal(dev.cpu(), want), start


LAYOUT_CODE = """
    import json, torch
    from torch_spyre._inductor import runtime, scheduling
    from torch._dynamo.utils import counters
    f = torch.compile(lambda x, w: torch.softmax(x * 2.0, -1) @ w, backend="spyre")
    torch.manual_seed(0)
    base, w = torch.randn(2, 16, 64, dtype=torch.float16), torch.randn(16, 32, dtype=torch.float16)
    ref = torch.softmax(base.view(2, 16, 4, 16).float() * 2.0, -1) @ w.float()
    inputs = {
        # storage [2, 16, 4, 16]: sticks of 16 elements
        "own": base.view(2, 16, 4, 16).contiguous().to("spyre"),
        # storage [2, 16, 64] seen as [2, 16, 4, 16]: sticks of 64 elements
        "merged": base.to("spyre").view(2, 16, 4, 16),
    }
    result = {}
    for name, x in inputs.items():
        lowered = len(scheduling.compiled_kernels)
        runtime.reset_stats()
        out = f(x, w.to("spyre")).cpu().float()
        result[name] = dict(lowered=len(scheduling.compiled_kernels) - lowered,
                            relayouts=runtime.stats()["relayouts"],
                            ok=bool(torch.allclose(out, ref, atol=2e-2, rtol=2e-2)))
    result["misses"] = counters["inductor"]["fxgraph_cache_miss"]
    result["hits"] = counters["inductor"]["fxgraph_cache_hit"]
    print(json.dumps(result))
"""


def test_input_device_layout_is_part_of_the_key(tmp_path, fresh_python):
    # backend="spyre": the same graph with inputs in two device layouts is
    # two compiled variants under two cache keys; each reads its input's
    # storage as it is (no conversion at launch); a second process loads
    # both from the cache and compiles nothing
    import json
    env = dict(TORCHINDUCTOR_CACHE_DIR=str(tmp_path), TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    first = fresh_python(LAYOUT_CODE, **env)
    assert first.returncode == 0, first.stderr[-3000:]
    second = fresh_python(LAYOUT_CODE, **env)
    assert second.returncode == 0, second.stderr[-3000:]
    a = json.loads(first.stdout.strip().splitlines()[-1])
    b = json.loads(second.stdout.strip().splitlines()[-1])
    for run in (a, b):
        for name in ("own", "merged"):
            assert run[name]["ok"] and run[name]["relayouts"] == 0
    assert a["misses"] == 2 and a["hits"] == 0  # two layouts: two keys
    assert a["own"]["lowered"] > 0 and a["merged"]["lowered"] > 0
    assert b["misses"] == 0 and b["hits"] == 2
    assert b["own"]["lowered"] == 0 and b["merged"]["lowered"] == 0


def test_default_backend_converts_an_input_in_another_layout_at_launch():
    # backend="inductor" sees no device layouts (Dynamo guards on sizes and
    # strides only): programs assume the default layout of each input's shape
    # and a launch converts an input stored otherwise (counted)
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 3.0)
    base = torch.randn(2, 16, 64, dtype=h)
    x = base.to("spyre").view(2, 16, 4, 16)
    runtime.reset_stats()
    out = f(x)
    assert runtime.stats()["relayouts"] == 1
    torch.testing.assert_close(out.cpu().float(), base.view(2, 16, 4, 16).float() * 3,
                               atol=1e-2, rtol=2e-3)
