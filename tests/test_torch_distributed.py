"""torch.distributed on simulated NPUs (the "dvmlang" process-group backend): collectives equal torch's semantics,
Megatron-style tensor parallelism and DDP match the single-device model, a wrong call or a dead rank is a clear
error on every rank, and ranks in processes joined by torch's TCP rendezvous work as ranks on one machine would.

Ranks run as threads (dvmlang.torch.distributed.run) except in the process test at the end, which starts two
processes on the loopback interface, bounded in time."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import dvmlang.torch as dvt  # noqa: E402
from dvmlang.errors import CollectiveMismatch, PeerError  # noqa: E402
from dvmlang.npu import System  # noqa: E402
from multi_npu_examples import load as load_example  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
run = dvt.distributed.run


def test_collectives_follow_torch_s_semantics():
    def fn(rank):
        out = {}
        t = torch.arange(6, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(t)
        out["all_reduce"] = t
        m = torch.tensor([rank, -rank, 7], dtype=torch.int32)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        out["max"] = m
        g = [torch.zeros(2, 3) for _ in range(4)]
        dist.all_gather(g, torch.full((2, 3), float(rank)))
        out["all_gather"] = torch.stack(g)
        whole = torch.zeros(8)
        dist.all_gather_into_tensor(whole, torch.tensor([rank, rank + 0.5]))
        out["all_gather_into_tensor"] = whole
        rs = torch.zeros(3)
        dist.reduce_scatter_tensor(rs, torch.arange(12, dtype=torch.float32) + rank)
        out["reduce_scatter"] = rs
        b = torch.full((2,), float(rank), dtype=torch.bfloat16)
        dist.broadcast(b, src=3)
        out["broadcast"] = b
        ins = torch.arange(rank + 2, dtype=torch.float32) + 10 * rank
        sends = [1, 0, rank, 1] if rank < 3 else [1, 1, 0, rank]
        sends[rank] += rank + 2 - sum(sends)  # every rank sends all its rows, unevenly
        counts = [None] * 4
        dist.all_gather_object(counts, sends)
        recv = [counts[i][rank] for i in range(4)]
        got = torch.zeros(sum(recv))
        dist.all_to_all_single(got, ins, recv, sends)
        out["all_to_all"] = (got, counts)
        if rank == 0:
            dist.send(torch.tensor([1.5, 2.5]), dst=3)
        if rank == 3:
            r = torch.zeros(2)
            dist.recv(r, src=0)
            out["recv"] = r
        red = torch.full((2,), float(rank + 1))
        dist.reduce(red, dst=1)
        out["reduce"] = red
        gl = [torch.zeros(1) for _ in range(4)] if rank == 2 else None
        dist.gather(torch.tensor([float(rank)]), gl, dst=2)
        out["gather"] = gl
        sc = torch.zeros(2)
        dist.scatter(sc, [torch.full((2,), 10.0 + i) for i in range(4)] if rank == 0 else None, src=0)
        out["scatter"] = sc
        dist.barrier()
        out["stats"] = dvt.stats()
        return out

    res = run(fn, 4)
    base = torch.arange(6, dtype=torch.float32)
    for rank, out in enumerate(res):
        torch.testing.assert_close(out["all_reduce"], base * 10)
        assert out["max"].tolist() == [3, 0, 7]
        torch.testing.assert_close(out["all_gather"], torch.arange(4.0)[:, None, None].expand(4, 2, 3))
        torch.testing.assert_close(out["all_gather_into_tensor"], torch.tensor([0, .5, 1, 1.5, 2, 2.5, 3, 3.5]))
        torch.testing.assert_close(out["reduce_scatter"], 4 * torch.arange(3.0 * rank, 3.0 * rank + 3) + 6)
        assert out["broadcast"].tolist() == [3.0, 3.0]
        got, counts = out["all_to_all"]
        want = []
        for i in range(4):
            off = sum(counts[i][:rank])
            want += (torch.arange(i + 2, dtype=torch.float32) + 10 * i)[off:off + counts[i][rank]].tolist()
        assert got.tolist() == want
        assert out["stats"]["comm_us"] > 0 and out["stats"]["comm_bytes"] > 0
    torch.testing.assert_close(res[3]["recv"], torch.tensor([1.5, 2.5]))
    assert res[1]["reduce"].tolist() == [10.0, 10.0] and res[0]["reduce"].tolist() == [1.0, 1.0]
    assert [t.item() for t in res[2]["gather"]] == [0.0, 1.0, 2.0, 3.0]
    assert [out["scatter"].tolist() for out in res] == [[10.0 + r] * 2 for r in range(4)]


def test_subgroups_and_waiting_on_async_work():
    system = System(4)

    def fn(rank):
        pair = dist.new_group([0, 1])
        evens = dist.new_group([0, 2])
        t = torch.full((1 << 16,), float(rank))
        if rank in (0, 1):
            work = dist.all_reduce(t, group=pair, async_op=True)
            dev = dvt.distributed.device()
            issued = dev.clock_us
            assert dev.comm_free_us > issued  # the collective runs on the communication stream ...
            work.wait()
            assert dev.clock_us == dev.comm_free_us  # ... and the compute stream waits for it when asked
        if rank in (0, 2):
            dist.all_reduce(t, group=evens)
        return t[0].item()

    assert run(fn, 4, system=system) == [1.0 + 2.0, 1.0, 1.0 + 2.0, 3.0]
    pairs = [rec for rec in system.records if rec.op == "all_reduce"]
    assert [list(rec.ranks) for rec in pairs] == [[0, 1], [0, 2]]


def test_mismatched_collectives_are_a_clear_error_on_every_rank():
    seen = {}

    def fn(rank):
        try:
            if rank == 0:
                dist.all_reduce(torch.ones(4))
            else:
                dist.all_gather_into_tensor(torch.zeros(8), torch.ones(4))
        except CollectiveMismatch as e:
            seen[rank] = str(e)
            raise

    with pytest.raises(CollectiveMismatch):
        run(fn, 2)
    for rank in (0, 1):
        msg = seen[rank]
        assert "collective #1" in msg and "rank 0 called all_reduce(float32[4], reduce=sum)" in msg
        assert "rank 1 called all_gather(float32[4])" in msg and "same order" in msg

    def shapes(rank):
        dist.all_reduce(torch.ones(4 + rank))

    with pytest.raises(CollectiveMismatch, match=r"float32\[4\].*float32\[5\]"):
        run(shapes, 2)


def test_a_rank_that_fails_gives_every_other_rank_a_clear_error():
    seen = {}

    def fn(rank):
        if rank == 2:
            raise ValueError("rank 2 ran out of luck")
        try:
            dist.all_reduce(torch.ones(3))
        except PeerError as e:
            seen[rank] = str(e)
            raise

    with pytest.raises(ValueError, match="out of luck"):
        run(fn, 3)
    for rank in (0, 1):
        assert "rank 2 failed: ValueError: rank 2 ran out of luck" in seen[rank]


def test_dtensor_runs_on_the_backend():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        a = torch.arange(16, dtype=torch.float32).reshape(4, 4)
        da = distribute_tensor(a, mesh, [Shard(0)])
        db = distribute_tensor(torch.eye(4) * 2, mesh, [Replicate()])
        return (da @ db).full_tensor(), da.sum().full_tensor()

    for prod, total in run(fn, 2):
        torch.testing.assert_close(prod, torch.arange(16, dtype=torch.float32).reshape(4, 4) * 2)
        assert total.item() == 120.0


def test_megatron_tensor_parallel_llama_matches_the_single_device_model():
    ex = load_example("tp_llama")
    rows = ex.run(ranks=(2,))  # (4 and 8 ranks: the gallery, benchmarks/multi_npu.py, the torchrun instructions)
    for n, clock, comm_us, comm_bytes, _ in rows:
        assert clock > comm_us > 0 and comm_bytes > 0


def test_ddp_training_step_matches_the_single_device_step():
    ex = load_example("ddp_train")
    for clock, comm in ex.run():
        assert clock > comm > 0


def test_place_counts_a_model_in_the_rank_s_memory():
    def fn(rank):
        model = torch.nn.Linear(1024, 1024)
        return dvt.distributed.place(model)

    assert run(fn, 2, hbm_bytes=1 << 30) == [(1024 * 1024 + 1024) * 4] * 2
    from dvmlang.errors import OutOfMemory
    with pytest.raises(OutOfMemory, match=r"placing `bias` \(4.0 KiB\).*the largest buffers: `weight` 4.00 MiB"):
        run(fn, 2, hbm_bytes=(4 << 20) + 2048)


# ---- processes joined by torch's TCP rendezvous (loopback) ----------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(mode, world, timeout=240, extra_env=None):
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1", **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "dist_worker.py"), mode], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


def test_two_processes_over_tcp_run_tensor_parallelism_and_name_a_peer_that_hangs_then_dies():
    """Two processes joined by torch's TCP rendezvous (loopback) run the tensor-parallel model as two machines would;
    then rank 1 stays busy past rank 0's timeout and dies: one run, to start the processes once."""
    outs = _ranks("tp_then_faults", 2)
    runs = []
    for code, out, err in outs:
        runs.append([json.loads(line) for line in out.strip().splitlines() if line.startswith("{")])
    assert outs[0][0] == 0, outs[0][2][-2000:]
    tp = [r[0] for r in runs]
    assert sorted(x["rank"] for x in tp) == [0, 1]
    for x in tp:
        assert x["err"] < 1e-4 and x["comm_us"] > 0 and x["comm_bytes"] > 0
    assert tp[0]["clock_us"] == tp[1]["clock_us"]  # the ranks' clocks met at the last all-reduce
    got = runs[0][1]
    assert "timed out after 3 s waiting for rank 1" in got["timeout"] and 3 <= got["timeout_s"] < 15
    assert "rank 1 failed: RuntimeError: rank 1 broke on purpose" in got["peer"] and got["peer_s"] < 15
    assert outs[1][0] != 0 and "broke on purpose" in outs[1][2]
