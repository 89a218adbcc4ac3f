"""The eager launch path (csrc/ops/launch.h), exercised through add/sub:
program cache, launch stats, stream ordering, views with storage offsets
(read and written), materialization of views no kernel can address, and the
CPU fallback for dtypes the device cannot compute."""

import pytest
import torch

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int64]


def rand(shape, dtype, gen=None):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=gen, dtype=dtype)


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    yield


def no_fallbacks():
    assert torch.spyre.fallback_stats() == {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000,), (7, 130), (3, 5, 67), (2, 3, 4, 33)])
def test_add_sub_match_cpu_exactly(dtype, shape):
    a, b = rand(shape, dtype), rand(shape, dtype)
    x, y = a.to("spyre"), b.to("spyre")
    assert torch.equal((x + y).cpu(), a + b)
    assert torch.equal((x - y).cpu(), a - b)
    no_fallbacks()
    assert torch.spyre.op_stats()["host_materializations"] == 0


def test_program_cache_builds_once_per_key():
    a, b = rand((9, 70), torch.float16), rand((9, 70), torch.float16)
    x, y = a.to("spyre"), b.to("spyre")
    x + y
    first = torch.spyre.op_stats()
    for _ in range(3):
        x + y
    after = torch.spyre.op_stats()
    assert after["program_misses"] == first["program_misses"] == 1
    assert after["program_hits"] == first["program_hits"] + 3
    assert after["launches"] == first["launches"] + 3
    # Another shape is another program.
    x[:5] + y[:5]
    assert torch.spyre.op_stats()["program_misses"] == 2


def test_repeated_launches_tell_layouts_offsets_and_aliases_apart():
    # A repeated launch skips describing its kernel (the launch memo keyed by
    # every operand's dtype, sizes, strides, offset and device layout); it
    # must still tell apart operands that differ only in one of those.
    import torch_spyre

    a, b = rand((6, 130), torch.float16), rand((6, 130), torch.float16)
    x, y = a.to("spyre"), b.to("spyre")

    def launches():
        assert torch.equal((x + y).cpu(), a + b)
        stick0 = torch_spyre.to_device(a, stick_dim=0)  # same strides
        assert torch.equal((stick0 + y).cpu(), a + b)
        assert torch.equal((x[1:] + y[:-1]).cpu(), a[1:] + b[:-1])
        assert torch.equal((x[:-1] + y[1:]).cpu(), a[:-1] + b[1:])
        z, c = x.clone(), a.clone()  # an input aliasing out, another view
        torch.add(z[:3], z[3:], out=z[3:])
        torch.add(c[:3], c[3:], out=c[3:])
        assert torch.equal(z.cpu(), c)
        z.add_(y)  # the same view: read in place
        c.add_(b)
        assert torch.equal(z.cpu(), c)

    launches()
    first = torch.spyre.op_stats()
    launches()
    again = torch.spyre.op_stats()
    assert again["program_misses"] == first["program_misses"]
    assert again["program_hits"] - first["program_hits"] == first["launches"]
    assert again["launches"] == 2 * first["launches"]
    no_fallbacks()


def test_last_launch_stats_reports_the_add():
    x = torch.randn(64, 256, dtype=torch.float16, device="spyre")
    torch.spyre.synchronize()
    x + x
    torch.spyre.synchronize()
    stats = torch.spyre.last_launch_stats()
    assert stats["cycles"] > 0 and stats["time_ns"] > 0
    # Two 32 KiB inputs read and one 32 KiB output written, whole sticks.
    assert stats["dma_bytes"] == 3 * 64 * 256 * 2
    assert stats["vector_utilization"] > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_views_with_storage_offsets_read(dtype):
    a, b = rand((11, 200), dtype), rand((11, 200), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    cases = [
        (lambda t: t[3:9, 5:150], lambda t: t[1:7, 17:162]),  # unaligned columns
        (lambda t: t[2], lambda t: t[9]),  # a row of a 2-D tensor
        (lambda t: t[1::2, 64:128], lambda t: t[::2, 0:64][:5]),  # strided rows
        (lambda t: t[4:5, 199:], lambda t: t[0:1, 0:1]),  # one element each
        (lambda t: t.view(-1)[1234:1300], lambda t: t[6, 3:69]),  # flat view
    ]
    for va, vb in cases:
        assert torch.equal((va(x) + vb(y)).cpu(), va(a) + vb(b))
    no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_views_with_storage_offsets_written(dtype):
    a, b = rand((6, 150), dtype), rand((6, 150), dtype)
    x, y = a.to("spyre"), b.to("spyre")
    # In place on a view: its neighbours in shared sticks must survive.
    x[1:4, 3:100].add_(y[2:5, 40:137])
    a[1:4, 3:100].add_(b[2:5, 40:137])
    assert torch.equal(x.cpu(), a)
    # out= a view with an offset.
    torch.sub(y[0:2, 0:70], y[3:5, 80:150], out=x[4:6, 77:147])
    torch.sub(b[0:2, 0:70], b[3:5, 80:150], out=a[4:6, 77:147])
    assert torch.equal(x.cpu(), a)
    # In place on the whole tensor, the other operand broadcast.
    x.add_(y[5])
    a.add_(b[5])
    assert torch.equal(x.cpu(), a)
    no_fallbacks()
    assert torch.spyre.op_stats()["host_materializations"] == 0


def test_permuted_operands_follow_the_output_memory_order():
    a, b = rand((5, 130), torch.float16), rand((5, 130), torch.float16)
    x, y = a.to("spyre"), b.to("spyre")
    got = x.t() - y.t()
    assert got.stride() == (a.t() - b.t()).stride()
    assert torch.equal(got.cpu(), a.t() - b.t())
    assert torch.spyre.op_stats()["host_materializations"] == 0


def test_unaddressable_views_are_materialized_and_counted():
    a, b = rand((40, 70), torch.float32), rand((70, 40), torch.float32)
    x, y = a.to("spyre"), b.to("spyre")
    torch.spyre.reset_op_stats()
    got = x + y.t()  # y.t() runs across sticks in out's order: re-laid out
    assert torch.equal(got.cpu(), a + b.t())
    stats = torch.spyre.op_stats()
    assert stats["device_materializations"] >= 1
    assert stats["host_materializations"] == 0
    # Every other element of a row: no stick transfer reads that, so it is
    # copied through the host (counted).
    got = x[:, ::2] + 1
    assert torch.equal(got.cpu(), a[:, ::2] + 1)
    assert torch.spyre.op_stats()["host_materializations"] >= 1
    no_fallbacks()


@pytest.mark.parametrize("width", [1, 3])
def test_column_views_copied_into_a_row_of_sticks(width):
    # A [rows, width] column view materialized for a [rows, width] output
    # of fewer elements than a stick: the device copy cannot read it over
    # the output's iteration, so it goes through the host (this recursed
    # until the stack overflowed: torch.diff and F.pad(mode="circular")).
    a = rand((5, width + 1), torch.float32)
    x = a.to("spyre")
    assert torch.equal((x[:, 1:] - x[:, :-1]).cpu(), a[:, 1:] - a[:, :-1])
    assert torch.equal(torch.diff(x).cpu(), torch.diff(a))
    b = rand((1, 2, 6, 7), torch.float32)
    pad = torch.nn.functional.pad
    got = pad(b.to("spyre"), (1, 2, 2, 1), mode="circular")
    assert torch.equal(got.cpu(), pad(b, (1, 2, 2, 1), mode="circular"))


@pytest.mark.parametrize("shapes", [((5, 1), (5, 130)), ((130,), (4, 130)),
                                    ((3, 1, 67), (1, 4, 67)), ((), (9, 9)),
                                    ((7, 1, 1), (7, 3, 65))])
def test_broadcasting(shapes):
    sa, sb = shapes
    a, b = rand(sa, torch.float16), rand(sb, torch.float16)
    assert torch.equal((a.to("spyre") + b.to("spyre")).cpu(), a + b)
    assert torch.equal((b.to("spyre") - a.to("spyre")).cpu(), b - a)
    no_fallbacks()


def test_scalars_alpha_and_type_promotion():
    a = rand((9, 67), torch.float16)
    b = rand((9, 67), torch.float32)
    i = rand((9, 67), torch.int32)
    x, y, n = a.to("spyre"), b.to("spyre"), i.to("spyre")
    assert torch.equal((x + 3).cpu(), a + 3)
    assert torch.equal((x + y).cpu(), a + b)  # -> float32
    assert torch.equal((n + 2).cpu(), i + 2)  # stays int32
    got = (n + 0.5).cpu()
    assert got.dtype == torch.float32 and torch.equal(got, i + 0.5)
    assert torch.equal(torch.add(y, y, alpha=3).cpu(), torch.add(b, b, alpha=3))
    assert torch.equal(torch.sub(n, n[0], alpha=-7).cpu(), torch.sub(i, i[0], alpha=-7))
    # fp16 with alpha: the device rounds a + alpha * b once (fp32 inside);
    # PyTorch's CPU kernel does so in its vectorised loop but rounds
    # alpha * b first in its scalar tail, so allow one fp16 ulp.
    got = torch.add(x, x, alpha=2.5).cpu().float()
    want = (a.float() + 2.5 * a.float()).half().float()
    assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match="alpha"):
        torch.add(n, n, alpha=0.5)
    no_fallbacks()


def test_out_with_a_wider_dtype_rounds_to_the_common_dtype_first():
    a, b = rand((3, 77), torch.float16), rand((3, 77), torch.float16)
    out = torch.empty(3, 77, dtype=torch.float32, device="spyre")
    torch.add(a.to("spyre"), b.to("spyre"), out=out)
    assert torch.equal(out.cpu(), (a + b).float())
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(out, out, out=torch.empty(3, 77, dtype=torch.int32, device="spyre"))


def test_out_is_resized_and_in_place_shape_is_checked():
    x = torch.randn(4, 70, device="spyre")
    out = torch.empty(0, device="spyre")
    torch.add(x, x[0], out=out)
    assert out.shape == (4, 70) and torch.equal(out.cpu(), x.cpu() + x.cpu()[0])
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x[0].add_(x.clone())


def test_overlapping_operands():
    a = rand((4, 100), torch.float32)
    x = a.to("spyre")
    with pytest.raises(RuntimeError, match="single memory location"):
        x[0].add_(x)  # as on the CPU: contiguous partial overlap is an error
    # Overlap PyTorch cannot prove (strided views): inputs are read before
    # anything is written, as if they had been cloned.
    torch.add(x[:, :50], x[:, 10:60], out=x[:, 5:55])
    want = a.clone()
    want[:, 5:55] = a[:, :50] + a[:, 10:60]
    assert torch.equal(x.cpu(), want)
    x = a.to("spyre")
    x.add_(x)
    assert torch.equal(x.cpu(), a + a)
    # Disjoint views of one storage sharing sticks: read before any write.
    y = a.to("spyre")
    torch.add(y[:, 0:30], y[:, 30:60], out=y[:, 60:90])
    a[:, 60:90] = a[:, 0:30] + a[:, 30:60]
    assert torch.equal(y.cpu(), a)


def test_zero_size_and_dim0():
    x = torch.empty(0, 5, device="spyre", dtype=torch.float16)
    assert (x + x).shape == (0, 5)
    s = torch.tensor(2.5).to("spyre")
    assert (s + s).item() == 5.0
    no_fallbacks()


def test_launches_are_ordered_on_the_current_stream():
    a = rand((256, 300), torch.float32)
    x = a.to("spyre")
    side = torch.spyre.Stream()
    side.wait_stream(torch.spyre.current_stream())
    with torch.spyre.stream(side):
        y = x + x
        z = y + x
    torch.spyre.current_stream().wait_stream(side)
    assert torch.equal(z.cpu(), a + a + a)


def test_second_device_launches_there():
    if torch.spyre.device_count() < 2:
        pytest.skip("needs SPYRE_SIM_DEVICES>=2")
    a = rand((3, 90), torch.float16)
    x = a.to("spyre:1")
    got = x + x
    assert got.device == torch.device("spyre:1")
    assert torch.equal(got.cpu(), a + a)
    with pytest.raises((RuntimeError, ValueError), match="device"):
        x + a.to("spyre:0")


def test_dtypes_without_device_compute_fall_back_counted():
    a = torch.randn(3, 5, dtype=torch.float64)
    got = a.to("spyre") + a.to("spyre")
    assert torch.equal(got.cpu(), a + a)
    assert torch.spyre.fallback_stats() == {"aten::add.Tensor": 1}
    with torch.spyre.strict():
        with pytest.raises(RuntimeError, match="strict"):
            a.to("spyre") - a.to("spyre")


def test_program_cache_is_bounded_lru_and_counts_evictions():
    previous = torch.spyre.program_cache_capacity()
    x = torch.randn(3, 70).to("spyre")
    try:
        torch.spyre.set_program_cache_capacity(4)
        assert torch.spyre.program_cache_capacity() == 4
        scalars = [0.25 + i for i in range(10)]  # a program per baked scalar
        for s in scalars[:4]:  # the device's cache now holds exactly these
            x * s
        held = torch.spyre.op_stats()["cached_programs"]  # all devices
        torch.spyre.reset_op_stats()
        for s in scalars[4:]:
            assert torch.equal((x * s).cpu(), x.cpu() * s)
        stats = torch.spyre.op_stats()
        assert stats["program_misses"] == 6
        assert stats["program_evictions"] == 6
        assert stats["cached_programs"] == held
        # The four most recent stay cached; the oldest was evicted and is
        # built again.
        x * scalars[-1]
        assert torch.spyre.op_stats()["program_misses"] == 6
        x * scalars[0]
        assert torch.spyre.op_stats()["program_misses"] == 7
        assert torch.spyre.op_stats()["program_evictions"] == 7
        # A hit makes an entry most recent: scalars[7], the oldest now,
        # survives the next miss.
        x * scalars[7]
        x * 100.5
        x * scalars[7]
        assert torch.spyre.op_stats()["program_misses"] == 8
    finally:
        torch.spyre.set_program_cache_capacity(previous)


def test_shape_keyed_programs_share_the_bounded_cache():
    # matmul, softmax and reductions are keyed by shapes: a long-running
    # process with many shapes must not keep every program loaded.
    previous = torch.spyre.program_cache_capacity()
    try:
        torch.spyre.set_program_cache_capacity(2)
        warm = torch.randn(3, 70).to("spyre")
        warm * 0.5, warm * 1.5  # device 0's cache is full: a miss evicts one
        torch.spyre.reset_op_stats()
        for n in (5, 6, 7, 8):
            a, b = torch.randn(n, 33), torch.randn(33, 9)
            got = (a.to("spyre") @ b.to("spyre")).cpu()
            torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)
            x = torch.randn(n, 70)
            torch.testing.assert_close(x.to("spyre").softmax(-1).cpu(),
                                       x.softmax(-1), rtol=1e-5, atol=1e-6)
        stats = torch.spyre.op_stats()
        assert stats["program_misses"] >= 8  # a matmul and a softmax per shape
        assert stats["program_evictions"] == stats["program_misses"]
    finally:
        torch.spyre.set_program_cache_capacity(previous)


def test_evicted_programs_finish_their_queued_launches():
    previous = torch.spyre.program_cache_capacity()
    a = torch.randn(64, 300)
    x = a.to("spyre")
    try:
        torch.spyre.set_program_cache_capacity(1)
        # Each launch evicts the previous program while it may still be
        # queued; the queue keeps it alive until it ran.
        outs = [x * (i + 0.5) for i in range(8)]
        torch.spyre.synchronize()
        for i, out in enumerate(outs):
            assert torch.equal(out.cpu(), a * (i + 0.5))
    finally:
        torch.spyre.set_program_cache_capacity(previous)


def test_program_cache_capacity_rejects_zero():
    with pytest.raises(ValueError, match="at least 1"):
        torch.spyre.set_program_cache_capacity(0)


def test_program_cache_capacity_from_the_environment():
    import os
    import subprocess
    import sys
    code = "import torch; print(torch.spyre.program_cache_capacity())"
    env = dict(os.environ, SPYRE_PROGRAM_CACHE_SIZE="17")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "17"
