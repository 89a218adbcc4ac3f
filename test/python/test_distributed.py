"""spyreccl, the torch.distributed backend for spyre tensors, under torchrun.

One `torchrun --nproc-per-node 2` run (loopback, bounded in time) executes
distributed_worker.py; each rank checks every collective on spyre tensors
against the same collective on CPU tensors with gloo in the same process
group and writes one verdict per check. Each test here asserts that both ranks
ran its check and passed it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("distributed_worker.py")
RANKS = 2
TIMEOUT_S = 120
DTYPES = ["float32", "float16", "bfloat16", "int64"]
REDUCE_OPS = ["sum", "avg", "max", "min", "product"]
COLLECTIVES = ["broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter",
               "all_to_all_single", "all_to_all_single_uneven", "all_to_all",
               "send_recv", "isend_irecv"]
SINGLE_CHECKS = ["backend_name", "all_reduce_into_strided_view",
                 "all_reduce_into_transposed_view", "broadcast_into_row_slice",
                 "all_gather_into_views", "all_reduce_of_device_computed_tensor",
                 "async_all_reduce_wait", "barrier", "error_cpu_tensor",
                 "error_shape_mismatch", "error_dtype_mismatch", "error_avg_of_integers",
                 "error_gather_shape_mismatch", "error_all_to_all_list_length", "all_to_all_pieces_of_other_shapes", "reductions_run_on_the_device",
                 "link_time_models_the_card_link", "profiler_shows_link_time",
                 "tensor_parallel_mlp", "tensor_parallel_attention"]


def all_check_names():
    names = [f"all_reduce[{op}-{dtype}]" for dtype in DTYPES for op in REDUCE_OPS
             if not (op == "avg" and dtype == "int64")]
    names += [f"{c}[{dtype}]" for dtype in DTYPES for c in COLLECTIVES]
    return names + SINGLE_CHECKS


def source_root():
    """The folder holding the torch_spyre package under test."""
    import torch_spyre
    return str(Path(torch_spyre.__file__).resolve().parent.parent)


def run_worker(mode, results, ranks=RANKS):
    """Runs distributed_worker.py under torchrun; returns each rank's verdicts."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch was built without distributed/gloo")
    env = dict(os.environ)
    env.update({
        "SPYRECCL_RESULTS_DIR": str(results),
        "GLOO_SOCKET_IFNAME": "lo",
        "SPYRE_SIM_DEVICES": str(ranks),
        "PYTHONPATH": os.pathsep.join(filter(None, [source_root(), env.get("PYTHONPATH")])),
    })
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", str(WORKER), mode]
    run = subprocess.run(command, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    assert run.returncode == 0, f"torchrun failed:\n{run.stdout}\n{run.stderr[-6000:]}"
    per_rank = []
    for rank in range(ranks):
        with open(results / f"rank{rank}.json") as f:
            per_rank.append(json.load(f))
    return per_rank


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return run_worker("collectives", tmp_path_factory.mktemp("spyreccl"))


def test_the_worker_ran_exactly_the_expected_checks(verdicts):
    for rank_verdicts in verdicts:
        assert sorted(rank_verdicts) == sorted(all_check_names())


@pytest.mark.parametrize("name", all_check_names())
def test_collective_on_spyre_matches_gloo_on_cpu(verdicts, name):
    for rank, rank_verdicts in enumerate(verdicts):
        assert rank_verdicts[name] == "ok", f"rank {rank}:\n{rank_verdicts[name]}"


def test_plain_init_process_group_picks_spyreccl(tmp_path):
    for rank, rank_verdicts in enumerate(run_worker("plain", tmp_path)):
        assert rank_verdicts == {"plain_init_process_group": "ok"}, f"rank {rank}"


@pytest.mark.parametrize("how", ["exits", "silent"])
def test_a_failing_peer_makes_rank0_raise_within_the_timeout(tmp_path, how):
    rank0, rank1 = run_worker(how, tmp_path)
    assert rank0 == {f"peer_{how}": "ok"}, rank0.get(f"peer_{how}")
    assert rank1 == {}


FOUR_RANK_CHECKS = [f"all_reduce[{op}-{dtype}]" for dtype in ["float32", "float16", "int64"]
                    for op in REDUCE_OPS if not (op == "avg" and dtype == "int64")]
FOUR_RANK_CHECKS += ["all_reduce_into_strided_view", "all_reduce_link_time_in_shards"]


def test_four_ranks_all_reduce_in_shards_matches_gloo(tmp_path):
    """More than two ranks take the sharded all_reduce (a reduce-scatter and
    an all-gather, a ring's traffic)."""
    per_rank = run_worker("four_ranks", tmp_path, ranks=4)
    for rank, rank_verdicts in enumerate(per_rank):
        assert sorted(rank_verdicts) == sorted(FOUR_RANK_CHECKS), rank
        for name, verdict in rank_verdicts.items():
            assert verdict == "ok", f"rank {rank} {name}:\n{verdict}"
