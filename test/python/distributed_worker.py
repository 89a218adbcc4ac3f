"""One rank of test_distributed.py, started by torchrun with a mode.

`collectives`: every spyreccl collective on spyre tensors against the same
collective on CPU tensors with gloo in the same process group
("cpu:gloo,spyre:spyreccl"). `plain`: init_process_group() with no backend.
`exits` / `silent`: rank 1 leaves an all_reduce; rank 0 must fail in time.
Each rank writes one verdict per check ("ok" or the failure) to
$SPYRECCL_RESULTS_DIR/rank<r>.json, which the pytest side asserts on.
"""

import datetime
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import torch_spyre  # noqa: F401  (registers spyre and spyreccl)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DTYPES = {"float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64}
results = {}


def check(name, fn):
    try:
        fn()
        results[name] = "ok"
    except Exception:  # noqa: BLE001  (reported to pytest, which fails on it)
        results[name] = traceback.format_exc()


def assert_same(spyre, cpu):
    assert spyre.device.type == "spyre", spyre.device
    torch.testing.assert_close(spyre.cpu(), cpu, rtol=0, atol=0)


def sample(shape, dtype, salt=0):
    """Small integers (exact in every dtype, sums and products included)
    that differ between ranks."""
    g = torch.Generator().manual_seed(1000 * salt + 17 * RANK + 1)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def both(shape, dtype, salt=0):
    cpu = sample(shape, dtype, salt)
    return cpu.to("spyre"), cpu.clone()


# ---- collectives, one function per collective, each spyre vs CPU gloo -------

def all_reduce(dtype, op):
    spyre, cpu = both((5, 7), dtype)
    if op == dist.ReduceOp.AVG:  # gloo has no AVG on the CPU: SUM then divide
        dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
        cpu /= WORLD
    else:
        dist.all_reduce(cpu, op=op)
    dist.all_reduce(spyre, op=op)
    assert_same(spyre, cpu)


def broadcast(dtype):
    spyre, cpu = both((3, 130), dtype)
    dist.broadcast(cpu, src=1)
    dist.broadcast(spyre, src=1)
    assert_same(spyre, cpu)


def reduce(dtype):
    spyre, cpu = both((6, 4), dtype)
    before = cpu.clone()
    dist.reduce(cpu, dst=0, op=dist.ReduceOp.SUM)
    dist.reduce(spyre, dst=0, op=dist.ReduceOp.SUM)
    # The root receives the sum; the other ranks keep their input.
    assert_same(spyre, cpu if RANK == 0 else before)


def all_gather(dtype):
    spyre, cpu = both((4, 3), dtype)
    cpu_out = [torch.empty_like(cpu) for _ in range(WORLD)]
    spyre_out = [torch.empty_like(spyre) for _ in range(WORLD)]
    dist.all_gather(cpu_out, cpu)
    dist.all_gather(spyre_out, spyre)
    for s, c in zip(spyre_out, cpu_out):
        assert_same(s, c)


def all_gather_into_tensor(dtype):
    spyre, cpu = both((4, 3), dtype)
    cpu_out = torch.empty((4 * WORLD, 3), dtype=dtype)
    spyre_out = torch.empty((4 * WORLD, 3), dtype=dtype, device="spyre")
    dist.all_gather_into_tensor(cpu_out, cpu)
    dist.all_gather_into_tensor(spyre_out, spyre)
    assert_same(spyre_out, cpu_out)


def reduce_scatter(dtype):
    pairs = [both((3, 5), dtype, salt=i) for i in range(WORLD)]
    cpu_out = torch.empty((3, 5), dtype=dtype)
    spyre_out = torch.empty((3, 5), dtype=dtype, device="spyre")
    dist.reduce_scatter(cpu_out, [c for _, c in pairs])
    dist.reduce_scatter(spyre_out, [s for s, _ in pairs])
    assert_same(spyre_out, cpu_out)


def reduce_scatter_tensor(dtype):
    spyre, cpu = both((3 * WORLD, 5), dtype)
    cpu_out = torch.empty((3, 5), dtype=dtype)
    spyre_out = torch.empty((3, 5), dtype=dtype, device="spyre")
    dist.reduce_scatter_tensor(cpu_out, cpu)
    dist.reduce_scatter_tensor(spyre_out, spyre)
    assert_same(spyre_out, cpu_out)


def gather(dtype):
    spyre, cpu = both((2, 9), dtype)
    cpu_out = [torch.empty_like(cpu) for _ in range(WORLD)] if RANK == 0 else None
    spyre_out = [torch.empty_like(spyre) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(cpu, cpu_out, dst=0)
    dist.gather(spyre, spyre_out, dst=0)
    if RANK == 0:
        for s, c in zip(spyre_out, cpu_out):
            assert_same(s, c)


def scatter(dtype):
    pairs = [both((2, 9), dtype, salt=i) for i in range(WORLD)]
    cpu_out = torch.empty((2, 9), dtype=dtype)
    spyre_out = torch.empty((2, 9), dtype=dtype, device="spyre")
    dist.scatter(cpu_out, [c for _, c in pairs] if RANK == 0 else None, src=0)
    dist.scatter(spyre_out, [s for s, _ in pairs] if RANK == 0 else None, src=0)
    assert_same(spyre_out, cpu_out)


def all_to_all_single(dtype):
    spyre, cpu = both((4 * WORLD, 3), dtype)
    cpu_out, spyre_out = torch.empty_like(cpu), torch.empty_like(spyre)
    dist.all_to_all_single(cpu_out, cpu)
    dist.all_to_all_single(spyre_out, spyre)
    assert_same(spyre_out, cpu_out)


def all_to_all_single_uneven(dtype):
    # Rank r sends r + 1 + j rows to rank j.
    send = [RANK + 1 + j for j in range(WORLD)]
    recv = [r + 1 + RANK for r in range(WORLD)]
    spyre, cpu = both((sum(send), 2), dtype)
    cpu_out = torch.empty((sum(recv), 2), dtype=dtype)
    spyre_out = torch.empty((sum(recv), 2), dtype=dtype, device="spyre")
    dist.all_to_all_single(cpu_out, cpu, recv, send)
    dist.all_to_all_single(spyre_out, spyre, recv, send)
    assert_same(spyre_out, cpu_out)


def send_recv(dtype):
    spyre, cpu = both((3, 4), dtype)
    if RANK == 0:
        dist.send(cpu, dst=1)
        dist.send(spyre, dst=1)
    else:
        dist.recv(cpu, src=0)
        dist.recv(spyre, src=0)
        assert_same(spyre, cpu)


def isend_irecv(dtype):
    spyre, cpu = both((3, 4), dtype)
    peer = 1 - RANK
    received = torch.empty_like(spyre)
    reqs = [dist.isend(spyre, dst=peer), dist.irecv(received, src=peer)]
    for req in reqs:
        req.wait()
    expected = torch.empty_like(cpu)
    reqs = [dist.isend(cpu, dst=peer), dist.irecv(expected, src=peer)]
    for req in reqs:
        req.wait()
    assert_same(received, expected)


def all_to_all(dtype):
    """The list form (gloo's reference needs pieces of one shape)."""
    cpu_in = [sample((2, 3), dtype, salt=r) for r in range(WORLD)]
    cpu_out = [torch.empty(2, 3, dtype=dtype) for _ in range(WORLD)]
    spyre_in = [t.to("spyre") for t in cpu_in]
    spyre_out = [t.to("spyre") for t in cpu_out]
    dist.all_to_all(spyre_out, spyre_in)
    dist.all_to_all(cpu_out, cpu_in)
    for s, c in zip(spyre_out, cpu_out):
        assert_same(s, c)


def all_to_all_pieces_of_other_shapes():
    """Pieces of another shape per peer, which gloo's CPU list form refuses:
    checked against what each rank sent (10 * sender + receiver)."""
    sent = [torch.full((2 + r, 3), 10.0 * RANK + r, device="spyre") for r in range(WORLD)]
    out = [torch.empty(2 + RANK, 3, device="spyre") for _ in range(WORLD)]
    dist.all_to_all(out, sent)
    for r, piece in enumerate(out):
        assert_same(piece, torch.full((2 + RANK, 3), 10.0 * r + RANK))


COLLECTIVES = [broadcast, reduce, all_gather, all_gather_into_tensor,
               reduce_scatter, reduce_scatter_tensor, gather, scatter,
               all_to_all_single, all_to_all_single_uneven, all_to_all,
               send_recv, isend_irecv]
REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG,
              "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
              "product": dist.ReduceOp.PRODUCT}


# ---- views, async work, barrier ---------------------------------------------

def all_reduce_into_strided_view():
    base_cpu = sample((6, 8), torch.float32)
    base_spyre = base_cpu.to("spyre")
    # Gloo reads a strided CPU view as if it were dense (a wrong reference),
    # so the reference reduces a contiguous copy and writes it back.
    columns = base_cpu[:, 1::2].contiguous()
    dist.all_reduce(columns)
    base_cpu[:, 1::2] = columns
    dist.all_reduce(base_spyre[:, 1::2])
    assert not base_spyre[:, 1::2].is_contiguous()
    assert_same(base_spyre, base_cpu)  # the other columns are untouched


def all_reduce_into_transposed_view():
    base_cpu = sample((4, 6), torch.float16)
    base_spyre = base_cpu.to("spyre")
    dist.all_reduce(base_cpu.t(), op=dist.ReduceOp.MAX)
    dist.all_reduce(base_spyre.t(), op=dist.ReduceOp.MAX)
    assert_same(base_spyre, base_cpu)


def broadcast_into_row_slice():
    base_cpu = sample((5, 3), torch.int64)
    base_spyre = base_cpu.to("spyre")
    dist.broadcast(base_cpu[1:4], src=0)
    dist.broadcast(base_spyre[1:4], src=0)
    assert_same(base_spyre, base_cpu)


def all_gather_into_views():
    spyre, cpu = both((3,), torch.float32)
    cpu_out = torch.zeros((3, 2 * WORLD))
    spyre_out = cpu_out.to("spyre")
    dist.all_gather([cpu_out[:, 2 * r] for r in range(WORLD)], cpu)
    dist.all_gather([spyre_out[:, 2 * r] for r in range(WORLD)], spyre)
    assert_same(spyre_out, cpu_out)


def all_reduce_of_device_computed_tensor():
    # The input is produced by device work queued on the stream; staging
    # must wait for it.
    cpu = sample((64, 64), torch.float32)
    spyre = cpu.to("spyre")
    spyre = spyre @ spyre + 1
    cpu = cpu @ cpu + 1
    dist.all_reduce(spyre)
    dist.all_reduce(cpu)
    assert_same(spyre, cpu)


def async_all_reduce_wait():
    spyre, cpu = both((64, 64), torch.float32)
    pinned_before = torch_spyre._C.pinned_bytes_in_use()
    work = dist.all_reduce(spyre, async_op=True)
    # The collective in flight holds its staging buffer in pinned host memory.
    assert torch_spyre._C.pinned_bytes_in_use() >= pinned_before + spyre.nbytes
    dist.all_reduce(cpu)
    work.wait()
    assert work.is_completed()
    assert_same(spyre, cpu)
    del work
    # the transport (gloo) drops its reference to the staging buffer from
    # its own thread once the work is done: released soon, not at once
    deadline = time.monotonic() + 10
    while torch_spyre._C.pinned_bytes_in_use() != pinned_before and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    assert torch_spyre._C.pinned_bytes_in_use() == pinned_before


def barrier():
    dist.barrier(device_ids=None)
    dist.barrier(group=spyre_only_group)


# ---- errors -----------------------------------------------------------------

def expect_error(fn, *fragments):
    try:
        fn()
    except RuntimeError as error:
        message = str(error)
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
        return
    raise AssertionError("no error raised")


def error_cpu_tensor():
    backend = dist.group.WORLD._get_backend(torch.device("spyre"))
    expect_error(lambda: backend.allreduce([torch.ones(3)]).wait(),
                 "spyreccl all_reduce", "expected a spyre tensor")


def error_shape_mismatch():
    x = torch.ones(4 + RANK, device="spyre")
    expect_error(lambda: dist.all_reduce(x), "spyreccl all_reduce", "rank 1's tensor is",
                 "[5]", "same dtype and shape")


def error_dtype_mismatch():
    x = torch.ones(4, dtype=torch.float32 if RANK == 0 else torch.float16, device="spyre")
    expect_error(lambda: dist.broadcast(x, src=0), "spyreccl broadcast",
                 "rank 1's tensor is Half [4]")


def error_gather_shape_mismatch():
    x = torch.ones(2, 3 + RANK, device="spyre")
    out = [torch.empty(2, 3, device="spyre") for _ in range(WORLD)] if RANK == 0 else None
    expect_error(lambda: dist.gather(x, out, dst=0), "spyreccl gather",
                 "rank 1's tensor is Float [2, 4]")


def error_avg_of_integers():
    x = torch.ones(4, dtype=torch.int64, device="spyre")
    expect_error(lambda: dist.all_reduce(x, op=dist.ReduceOp.AVG), "ReduceOp.AVG",
                 "floating-point")


def error_all_to_all_list_length():
    x = [torch.ones(2, device="spyre")]
    y = [torch.empty(2, device="spyre") for _ in range(WORLD)]
    expect_error(lambda: dist.all_to_all(y, x), "spyreccl all_to_all",
                 "one input and one output per rank")


# ---- where the work runs and what it costs ------------------------------------

def reductions_run_on_the_device():
    """The transport only moves bytes: every reducing collective combines
    the ranks' contributions with device programs, none on the CPU."""
    for op in REDUCE_OPS.values():
        spyre, cpu = both((4, 33), torch.float16, salt=5)
        before = torch.spyre.op_stats()["launches"]
        with torch.spyre.strict():
            dist.all_reduce(spyre, op=op)
            out = torch.empty(4, 33, dtype=torch.float16, device="spyre")
            dist.reduce_scatter_tensor(out, torch.cat([spyre, spyre]), op=op)
            base = torch.zeros(6, 40, dtype=torch.float16, device="spyre")
            dist.all_reduce(base[1:5, 2:35], op=op)  # into a view
        torch.spyre.synchronize()
        assert torch.spyre.op_stats()["launches"] > before, op


def link_time_models_the_card_link():
    """A collective's modelled time is its traffic on the card-to-card link
    (the staging copies through the host model none), in the link totals."""
    props = torch.spyre.get_device_properties()
    x = torch.ones(1024, 256, device="spyre")  # 1 MiB
    torch.spyre.synchronize()
    torch.spyre.reset_device_time_stats()
    dist.broadcast(x, src=0)
    torch.spyre.synchronize()
    stats = torch.spyre.device_time_stats()
    # Two ranks: the root sends the tensor once, the other receives it once.
    expected = props.card_link_latency_ns + x.nbytes / props.card_link_gb_per_s
    assert stats["link_transfers"] == 1, stats
    assert stats["link_bytes"] == x.nbytes, stats
    assert abs(stats["link_ns"] - expected) < 1e-6 * expected, (stats, expected)
    assert stats["copies"] == 0 and stats["copy_ns"] == 0, stats


def profiler_shows_link_time():
    """The card-link time of a collective is device time in the profiler,
    under its own range."""
    x = torch.ones(512, 256, device="spyre")
    torch.spyre.synchronize()
    torch.spyre.reset_device_time_stats()
    with torch.autograd.profiler.profile(use_device="spyre", use_kineto=False) as prof:
        dist.all_reduce(x)
        torch.spyre.synchronize()
    stats = torch.spyre.device_time_stats()
    rows = {e.key: e for e in prof.key_averages()}
    assert "spyre::card_link" in rows, sorted(rows)
    # The profiler keeps whole microseconds.
    assert abs(rows["spyre::card_link"].device_time_total - stats["link_ns"] / 1000) <= 1


# ---- tensor-parallel MLP and attention ---------------------------------------

def tensor_parallel_mlp():
    g = torch.Generator().manual_seed(7)  # the same weights on every rank
    x = torch.randn(4, 16, generator=g)
    w1 = torch.randn(32, 16, generator=g) / 4
    b1 = torch.randn(32, generator=g) / 4
    w2 = torch.randn(16, 32, generator=g) / 4
    b2 = torch.randn(16, generator=g) / 4

    def mlp(x, w1, b1, w2):
        return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1, b1)), w2)

    full = (mlp(x.to("spyre"), w1.to("spyre"), b1.to("spyre"), w2.to("spyre"))
            + b2.to("spyre"))
    # Column-parallel first layer (rows of w1), row-parallel second layer
    # (columns of w2), then the partial sums are all-reduced.
    rows = slice(RANK * 32 // WORLD, (RANK + 1) * 32 // WORLD)
    partial = mlp(x.to("spyre"), w1[rows].to("spyre"), b1[rows].to("spyre"),
                  w2[:, rows].to("spyre"))
    dist.all_reduce(partial)
    split = partial + b2.to("spyre")
    assert split.device.type == "spyre"
    torch.testing.assert_close(split.cpu(), full.cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(split.cpu(), mlp(x, w1, b1, w2) + b2, rtol=1e-4, atol=1e-4)


def tensor_parallel_attention():
    """Megatron-style: each rank holds half of the heads (columns of the
    q/k/v projections, rows of the output projection); the partial outputs
    are all-reduced. Equal to the whole block on one card and on the CPU."""
    g = torch.Generator().manual_seed(11)  # the same weights on every rank
    batch, seq, heads, head_dim = 2, 6, 4, 8
    hidden = heads * head_dim
    x = torch.randn(batch, seq, hidden, generator=g)
    wq, wk, wv, wo = (torch.randn(hidden, hidden, generator=g) / hidden ** 0.5
                      for _ in range(4))

    def attention(x, wq, wk, wv, wo, n_heads):
        def split(t):
            return t.view(batch, seq, n_heads, head_dim).transpose(1, 2)
        q, k, v = (split(torch.nn.functional.linear(x, w)) for w in (wq, wk, wv))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.nn.functional.linear(o.transpose(1, 2).reshape(batch, seq, -1), wo)

    def on(device, *tensors):
        return [t.to(device) for t in tensors]

    whole = attention(*on("spyre", x, wq, wk, wv, wo), heads)
    mine = slice(RANK * hidden // WORLD, (RANK + 1) * hidden // WORLD)
    partial = attention(*on("spyre", x, wq[mine], wk[mine], wv[mine], wo[:, mine]),
                        heads // WORLD)
    dist.all_reduce(partial)
    assert partial.device.type == "spyre"
    torch.testing.assert_close(partial.cpu(), whole.cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(partial.cpu(), attention(x, wq, wk, wv, wo, heads),
                               rtol=1e-4, atol=1e-4)


def plain_init_process_group():
    # With no backend named, torch picks the accelerator's default backend,
    # which registering spyreccl for "spyre" made spyreccl (and, as with
    # NCCL, that group has no CPU backend).
    dist.init_process_group(timeout=datetime.timedelta(seconds=60))
    assert dist.group.WORLD._get_backend(torch.device("spyre")).name() == "spyreccl"
    x = torch.full((3, 2), float(RANK + 1), device="spyre")
    dist.all_reduce(x)
    assert_same(x, torch.full((3, 2), float(sum(range(1, WORLD + 1)))))
    dist.destroy_process_group()


def spyre_backend_name():
    name = dist.group.WORLD._get_backend(torch.device("spyre")).name()
    assert name == "spyreccl", name


def run_collectives():
    global spyre_only_group
    dist.init_process_group("cpu:gloo,spyre:spyreccl",
                            timeout=datetime.timedelta(seconds=60))
    spyre_only_group = dist.new_group(backend="spyre:spyreccl")
    check("backend_name", spyre_backend_name)
    for dtype_name, dtype in DTYPES.items():
        for op_name, op in REDUCE_OPS.items():
            if op_name == "avg" and not dtype.is_floating_point:
                continue
            check(f"all_reduce[{op_name}-{dtype_name}]", lambda: all_reduce(dtype, op))
        for collective in COLLECTIVES:
            check(f"{collective.__name__}[{dtype_name}]", lambda: collective(dtype))
    for fn in [all_reduce_into_strided_view, all_reduce_into_transposed_view,
               broadcast_into_row_slice, all_gather_into_views,
               all_reduce_of_device_computed_tensor, async_all_reduce_wait, barrier,
               error_cpu_tensor, error_shape_mismatch, error_dtype_mismatch,
               error_avg_of_integers, error_gather_shape_mismatch,
               error_all_to_all_list_length,
               all_to_all_pieces_of_other_shapes,
               reductions_run_on_the_device, link_time_models_the_card_link,
               profiler_shows_link_time, tensor_parallel_mlp,
               tensor_parallel_attention]:
        check(fn.__name__, fn)
    dist.barrier()
    dist.destroy_process_group()


# ---- a peer that fails ------------------------------------------------------

FAILURE_TIMEOUT_S = 5


def rank0_all_reduce_fails_in_time():
    x = torch.ones(16, device="spyre")
    start = time.monotonic()
    expect_error(lambda: dist.all_reduce(x), "spyreccl", "on rank 0",
                 "the host transport (gloo) failed")
    elapsed = time.monotonic() - start
    assert elapsed < FAILURE_TIMEOUT_S + 10, f"took {elapsed:.1f} s"


def run_with_failing_peer(how):
    """Rank 1 exits (`exits`) or never joins (`silent`) an all_reduce; rank 0
    must get a clear error within the group's timeout, not hang."""
    dist.init_process_group("spyre:spyreccl",
                            timeout=datetime.timedelta(seconds=FAILURE_TIMEOUT_S))
    x = torch.ones(16, device="spyre")
    dist.all_reduce(x)  # both ranks connected
    if RANK == 1:
        if how == "silent":
            time.sleep(FAILURE_TIMEOUT_S + 3)
        write_results()
        os._exit(0)  # a plain exit: torchrun must not stop rank 0 first
    check(f"peer_{how}", rank0_all_reduce_fails_in_time)


def all_reduce_link_time_in_shards():
    """Each card sends and receives (P-1)/P of the tensor twice."""
    props = torch.spyre.get_device_properties()
    x = torch.ones(1000, 64, device="spyre")
    torch.spyre.synchronize()
    torch.spyre.reset_device_time_stats()
    dist.all_reduce(x)
    torch.spyre.synchronize()
    stats = torch.spyre.device_time_stats()
    shard_bytes = -(-x.numel() // WORLD) * x.element_size()
    bytes_each = (WORLD - 1) * shard_bytes
    assert stats["link_transfers"] == 2, stats
    assert stats["link_bytes"] == 2 * bytes_each, stats
    expected = 2 * (props.card_link_latency_ns + bytes_each / props.card_link_gb_per_s)
    assert abs(stats["link_ns"] - expected) < 1e-6 * expected, (stats, expected)
    assert_same(x, torch.full((1000, 64), float(WORLD)))


def run_four_ranks():
    dist.init_process_group("cpu:gloo,spyre:spyreccl",
                            timeout=datetime.timedelta(seconds=60))
    for dtype_name in ["float32", "float16", "int64"]:
        dtype = DTYPES[dtype_name]
        for op_name, op in REDUCE_OPS.items():
            if op_name == "avg" and not dtype.is_floating_point:
                continue
            check(f"all_reduce[{op_name}-{dtype_name}]", lambda: all_reduce(dtype, op))
    check("all_reduce_into_strided_view", all_reduce_into_strided_view)
    check("all_reduce_link_time_in_shards", all_reduce_link_time_in_shards)
    dist.barrier()
    dist.destroy_process_group()


def write_results():
    path = os.path.join(os.environ["SPYRECCL_RESULTS_DIR"], f"rank{RANK}.json")
    with open(path, "w") as out:
        json.dump(results, out, indent=1)


def main(mode):
    torch.spyre.set_device(int(os.environ["LOCAL_RANK"]) % torch.spyre.device_count())
    if mode == "collectives":
        run_collectives()
    elif mode == "four_ranks":
        run_four_ranks()
    elif mode == "plain":
        check("plain_init_process_group", plain_init_process_group)
    else:
        run_with_failing_peer(mode)
    write_results()
    if mode in ("exits", "silent"):
        os._exit(0)  # the broken group cannot be torn down collectively
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
