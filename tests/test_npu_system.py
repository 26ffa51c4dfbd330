"""Many simulated NPUs (npu.system, npu.collectives, npu.topology): collectives equal numpy, their algorithms are the
ones HCCL picks, their times respect the links' bounds and the published HCCL figures, clocks meet at collectives,
HBM fills up with a clear error, and ranks on threads fail loudly instead of hanging."""

import ml_dtypes
import numpy as np
import pytest

import dvmlang
from dvmlang.errors import CollectiveTimeout, DeviceError, DvmError, OutOfMemory, PeerError
from dvmlang.npu import System, collectives, topology
from dvmlang.npu.topology import SOURCES, TOPOLOGIES

MiB, GiB = 1 << 20, 1 << 30


# ---- numerics ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_all_reduce_equals_numpy_in_rank_order(rng, dtype, op):
    s = System(4)
    xs = [(rng.standard_normal((5, 7)) * 3).astype(dtype) for _ in range(4)]
    fn = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
    want = xs[0].copy()
    for x in xs[1:]:
        want = fn(want, x).astype(dtype)
    outs = s.all_reduce(xs, op)
    for o in outs:
        assert o.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(o.astype(np.float64), want.astype(np.float64))  # bit for bit, every rank
    assert outs[0] is not outs[1]


def test_all_reduce_avg_and_bitwise(rng):
    s = System(3)
    xs = [rng.standard_normal(6).astype(np.float32) for _ in range(3)]
    np.testing.assert_allclose(s.all_reduce(xs, "avg")[1], (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)
    ints = [np.array([1, 2, 4, 8], np.int32) << r for r in range(3)]
    np.testing.assert_array_equal(s.all_reduce(ints, "bor")[0], ints[0] | ints[1] | ints[2])
    with pytest.raises(DvmError, match="avg needs floating-point"):
        s.all_reduce(ints, "avg")
    with pytest.raises(DvmError, match="unknown reduction"):
        s.all_reduce(xs, "mean")


def test_reduce_scatter_all_gather_broadcast_send(rng):
    s = System(4)
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(4)]
    total = xs[0] + xs[1] + xs[2] + xs[3]
    for r, out in enumerate(s.reduce_scatter(xs)):
        np.testing.assert_allclose(out, total[2 * r:2 * r + 2], rtol=1e-6)
    for out in s.all_gather(xs):
        np.testing.assert_array_equal(out, np.concatenate(xs))
    for out in s.broadcast(xs, root=2):
        np.testing.assert_array_equal(out, xs[2])
    np.testing.assert_array_equal(s.send(xs[1], 1, 3), xs[1])
    with pytest.raises(DvmError, match="equal blocks"):
        s.reduce_scatter([x[:7] for x in xs])
    with pytest.raises(DvmError, match="one shape and dtype"):
        s.all_reduce([xs[0], xs[1][:4], xs[2], xs[3]])


def test_all_to_all_with_uneven_splits(rng):
    s = System(3)
    splits = [[1, 0, 2], [3, 1, 1], [0, 2, 2]]
    xs = [rng.standard_normal((sum(row), 2)).astype(np.float32) for row in splits]
    outs = s.all_to_all(xs, splits=splits)
    for j in range(3):
        parts = []
        for i in range(3):
            off = sum(splits[i][:j])
            parts.append(xs[i][off:off + splits[i][j]])
        np.testing.assert_array_equal(outs[j], np.concatenate(parts))
    rec = s.records[-1]
    sent = {(t.src, t.dst): t.nbytes for t in rec.transfers}
    assert sent[(1, 0)] == 3 * 8 and (0, 1) not in sent  # rank 0 sends rank 1 nothing
    with pytest.raises(DvmError, match="sum to its"):
        s.all_to_all(xs, splits=[[2, 1, 1], [3, 1, 1], [0, 2, 2]])


# ---- algorithms and time -------------------------------------------------------------------------------------------

def test_the_algorithm_is_hccl_s_for_the_size_and_topology():
    s8, s16, s24 = System(8), System(16), System(24)
    assert s8.time_collective("all_reduce", 256 * 1024).algorithm == "mesh one-shot"
    assert s8.time_collective("all_reduce", 256 * 1024 + 4).algorithm == "mesh"
    assert s16.time_collective("all_reduce", 64 * MiB).algorithm == "mesh + RHD"  # two servers: a power of 2
    assert s24.time_collective("all_reduce", 64 * MiB).algorithm == "mesh + ring"  # three servers
    assert System(16, topology="A3").time_collective("all_reduce", MiB).algorithm == "ring"
    assert s8.time_collective("all_reduce", MiB, ranks=[0, 1, 2, 3]).algorithm == "mesh"
    s12 = System(12)
    assert s12.time_collective("all_reduce", MiB).algorithm == "ring"  # 8 + 4: HCCL flattens the communicator
    a2a = collectives.plan("all_to_all", range(16), s16.topology, matrix=[[64] * 16] * 16)
    assert a2a.algorithm == "pairwise" and len(a2a.phases) == 15


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
@pytest.mark.parametrize("n", [2, 8, 16, 24])
@pytest.mark.parametrize("nbytes", [4096, 3 * MiB, 256 * MiB])
def test_no_collective_beats_its_links(op, n, nbytes):
    s = System(n)
    rec = s.time_collective(op, nbytes, **({"root": 0} if op == "broadcast" else {}))
    assert rec.bound_us > 0
    assert rec.time_us >= rec.bound_us  # the busiest link at its line rate is a floor
    assert rec.time_us >= s.topology.launch_us


# Published HCCL all-reduce bandwidths on 910B servers (alg bandwidth = data size / time): torch_npu + HCCL, fp32,
# the best of a 0.1 MB-8 GB sweep (gameofdimension/limulidae README: 2, 4, 8 x 910B -> 18, 30, 72 GB/s).
PUBLISHED_ALLREDUCE_GBPS = {2: 18.0, 4: 30.0, 8: 72.0}


@pytest.mark.parametrize("n,nbytes", [(8, 64 * MiB), (8, GiB), (4, GiB), (2, GiB)])
def test_all_reduce_time_is_within_25_percent_of_the_published_figures(n, nbytes):
    rec = System(n).time_collective("all_reduce", nbytes)
    ratio = rec.alg_bandwidth / 1e9 / PUBLISHED_ALLREDUCE_GBPS[n]
    assert 0.75 <= ratio <= 1.25, f"{n} ranks, {nbytes} B: {rec.alg_bandwidth / 1e9:.1f} GB/s"


def test_every_figure_has_a_source_and_topologies_check_their_fields():
    for key in ("HCCS line rate", "HCCS sustained rate", "HCCS latency", "RoCE line rate", "small_bytes",
                "buffer_bytes", "launch_us", "reduction", "algorithms"):
        kind, text = SOURCES[key]
        assert kind and len(text) > 20
    t = TOPOLOGIES["910B"].with_(intra_bytes_per_s=10e9, npus_per_server=4)
    assert t.intra.bytes_per_s == 10e9 and t.npus_per_server == 4
    with pytest.raises(DvmError, match="sustained rate"):
        TOPOLOGIES["910B"].with_(intra_bytes_per_s=99e9)  # faster than the line
    with pytest.raises(DvmError, match="unknown topology field"):
        TOPOLOGIES["910B"].with_(hccs=1)
    with pytest.raises(DvmError, match="unknown topology"):
        topology.get_topology("H100")


# ---- clocks --------------------------------------------------------------------------------------------------------

def test_clocks_meet_at_a_collective_and_an_async_one_overlaps_compute():
    import dvmlang.language as dl

    @dvmlang.kernel
    def scale(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        m = offs < n
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    s = System(2)
    x = np.ones(1 << 16, np.float32)
    out = np.zeros_like(x)
    rec = scale[(16,)](x, out, x.size, BLOCK=4096, device=s[0])
    assert s[0].clock_us == pytest.approx(rec.time_us) and s[1].clock_us == 0.0
    s.all_reduce([x, x])
    ar = s.records[-1]
    assert ar.start_us == pytest.approx(rec.time_us)  # rank 1 waited for rank 0: the clocks met
    assert s[0].clock_us == s[1].clock_us == ar.end_us
    y = np.ones(1 << 20, np.float32)
    outs = s.all_reduce([y, y], wait=False)  # issued without waiting: compute goes on
    big = s.records[-1]
    before = s[0].clock_us
    scale[(16,)](x, out, x.size, BLOCK=4096, device=s[0])
    assert s[0].clock_us < big.end_us and s[0].clock_us > before  # the launch overlapped the collective
    s[0].wait(big)
    assert s[0].clock_us == big.end_us and outs[0][0] == 2.0
    s2 = System(2)
    s2.all_reduce([y, y])
    assert s2.records[0].start_us == 0.0


# ---- memory --------------------------------------------------------------------------------------------------------

def test_out_of_memory_names_the_largest_buffers():
    s = System(2, hbm_bytes=64 * MiB)
    d = s[1]
    w = d.alloc((8 * MiB,), np.float32, name="weights")  # 32 MiB
    d.alloc((4 * MiB,), np.float32, name="kv_cache")  # 16 MiB
    assert d.memory_used == 48 * MiB
    with pytest.raises(OutOfMemory) as e:
        d.alloc((8 * MiB,), np.float32, name="activations")
    msg = str(e.value)
    assert "device 1" in msg and "`activations`" in msg and "`weights` 32.00 MiB" in msg and "kv_cache" in msg
    assert msg.index("weights") < msg.index("kv_cache")  # largest first
    d.free(w)
    d.alloc((8 * MiB,), np.float32, name="activations")  # fits now
    with pytest.raises(DvmError, match="already holds a buffer named"):
        d.place(4, name="kv_cache")
    with pytest.raises(DvmError, match="holds no buffer"):
        d.free("nothing")


def test_a_launch_that_does_not_fit_beside_the_resident_buffers_is_refused():
    import dvmlang.language as dl

    @dvmlang.kernel
    def copy(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        m = offs < n
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m), mask=m)

    s = System(1, hbm_bytes=10 * MiB)
    held = s[0].alloc((2 * MiB,), np.float32, name="params")  # 8 MiB resident
    x = np.ones(512 * 1024, np.float32)  # 2 MiB in, 2 MiB out: does not fit beside them
    with pytest.raises(OutOfMemory, match="launching `copy`.*`params` 8.00 MiB"):
        copy[(128,)](x, np.zeros_like(x), x.size, BLOCK=4096, device=s[0])
    small = held[:1024]  # a view of a resident buffer is not counted twice
    copy[(1,)](small, held[1024:2048], 1024, BLOCK=1024, device=s[0])
    np.testing.assert_array_equal(held[1024:2048], 0)


# ---- ranks as threads ----------------------------------------------------------------------------------------------

def test_spmd_runs_ranks_and_reports_a_failing_one():
    s = System(3, timeout_s=20)

    def fn(rank):
        if rank == 1:
            raise ValueError("boom on rank 1")
        s.exchange(("k", 1), rank, [0, 1, 2], rank, "collective #1 all_reduce")
        return rank

    with pytest.raises(ValueError, match="boom on rank 1"):
        s.spmd(fn)
    assert s.spmd(lambda r: r * 10) == [0, 10, 20]


def test_a_waiting_rank_gets_the_peer_s_error_or_a_timeout_naming_it():
    s = System(2, timeout_s=20)
    seen = {}

    def fn(rank):
        if rank == 1:
            raise RuntimeError("rank 1 crashed")
        try:
            s.exchange(("k", 1), rank, [0, 1], 0, "collective #1 barrier")
        except PeerError as e:
            seen["msg"] = str(e)
            raise

    with pytest.raises(RuntimeError, match="crashed"):
        s.spmd(fn)
    assert "rank 1 failed: RuntimeError: rank 1 crashed" in seen["msg"] and "collective #1 barrier" in seen["msg"]
    # a peer that finishes without joining
    with pytest.raises(PeerError, match="rank 1 finished without taking part"):
        s.spmd(lambda r: s.exchange(("k", 2), r, [0, 1], 0, "collective #2") if r == 0 else None)
    # a peer that is alive but never comes: the timeout names it
    import threading
    gate = threading.Event()
    slow = System(2, timeout_s=0.5)

    def hang(rank):
        if rank == 1:
            slow._cond.wait(3.0)  # (holds no turn while waiting; never joins)
            return
        slow.exchange(("k", 1), 0, [0, 1], 0, "collective #1 all_reduce")

    with pytest.raises(CollectiveTimeout, match=r"timed out after 0.5 s waiting for rank\(s\) \[1\]"):
        slow.spmd(hang)
    gate.set()


def test_ranks_that_all_wait_are_a_deadlock_not_a_hang():
    s = System(2, timeout_s=60)
    with pytest.raises(DeviceError, match="deadlock: every running rank is waiting"):
        s.spmd(lambda r: s.exchange(("k", r), r, [0, 1], 0, f"collective of rank {r}"))
