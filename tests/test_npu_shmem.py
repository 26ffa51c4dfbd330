"""Kernels that communicate (dl.remote_store, dl.signal, dl.wait): their results against numpy, their timing
(a wait lasts until the signal's simulated arrival), the bytecode they make, and every misuse's error."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.errors import DeviceError, DvmError, KernelTypeError, LaunchError, PeerError
from dvmlang.npu import System
from dvmlang.vm.disasm import disassemble
from multi_npu_examples import load as load_example



@dvmlang.kernel
def ring(x_ptr, buf_ptr, sig_ptr, out_ptr, rank, world, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    peer = (rank + 1) % world
    dl.remote_store(buf_ptr + offs, dl.load(x_ptr + offs), peer)
    dl.signal(sig_ptr + 0, peer, 1)
    dl.wait(sig_ptr + 0, 1)
    dl.store(out_ptr + offs, dl.load(buf_ptr + offs) * 2.0)


def _ring(n=4, block=64, grid=1, system=None):
    s = system or System(n)
    buf = s.symmetric((block,), "float32", name="buf")
    sig = s.symmetric((1,), "int32", name="sig")
    xs = [np.arange(block, dtype=np.float32) + 100 * r for r in range(n)]
    outs = [np.zeros(block, np.float32) for _ in range(n)]
    recs = s.spmd(lambda r: ring[(grid,)](xs[r], buf[r], sig[r], outs[r], r, n, BLOCK=block))
    return s, xs, outs, recs


def test_a_ring_of_remote_stores_and_signals_delivers_every_rank_s_data():
    s, xs, outs, recs = _ring()
    for r in range(4):
        np.testing.assert_array_equal(outs[r], 2 * xs[(r - 1) % 4])
    # each rank sent its 256 bytes and a 4-byte flag over one HCCS link, recorded as the kernel's traffic
    remote = [rec for rec in s.records if rec.op == "remote"]
    assert len(remote) == 4 and all(rec.nbytes == 260 for rec in remote)
    assert {(t.src, t.dst) for rec in remote for t in rec.transfers} == {(0, 1), (1, 2), (2, 3), (3, 0)}
    # the wait lasted until the signal arrived: the HCCS step latency (1 us) at least
    lat = s.topology.intra.latency_us * s.profile.clock_hz * 1e-6
    assert recs[0].cycles > s.profile.launch_overhead_cycles + lat


def test_a_rank_that_signals_itself_needs_no_link():
    @dvmlang.kernel
    def self_signal(buf_ptr, sig_ptr, out_ptr, rank, BLOCK: dl.constexpr):
        offs = dl.arange(0, BLOCK)
        dl.remote_store(buf_ptr + offs, offs.to(dl.float32), rank)
        dl.signal(sig_ptr + 0, rank, 3, op="add")
        dl.wait(sig_ptr + 0, 3, cmp="eq")
        dl.store(out_ptr + offs, dl.load(buf_ptr + offs))

    s = System(1)
    buf, sig = s.symmetric((32,), "float32"), s.symmetric((1,), "int32")
    out = np.zeros(32, np.float32)
    self_signal[(1,)](buf[0], sig[0], out, 0, BLOCK=32, device=s[0])  # no peer to wait for: no spmd needed
    np.testing.assert_array_equal(out, np.arange(32))
    assert sig[0][0] == 3 and not [r for r in s.records if r.op == "remote"]


def test_the_bytecode_has_the_new_instructions():
    _, _, _, recs = _ring(n=2)
    text = str(disassemble(recs[0].bytecode))
    for name in ("REMOTE_STORE", "SIGNAL", "WAIT_SIGNAL"):
        assert name in text


def test_misuse_gets_clear_errors():
    s = System(2)
    sig = s.symmetric((1,), "int32")
    plain = np.zeros(64, np.float32)
    xs = np.zeros(64, np.float32)
    # a buffer that is not symmetric
    with pytest.raises(DvmError, match="not a symmetric buffer"):
        ring[(1,)](xs, plain, sig[0], np.zeros(64, np.float32), 0, 2, BLOCK=64, device=s[0])
    # another rank's array
    buf = s.symmetric((64,), "float32")
    with pytest.raises(DvmError, match=r"pass this rank's own \(buf\[0\]\)"):
        ring[(1,)](xs, buf[1], sig[0], np.zeros(64, np.float32), 0, 2, BLOCK=64, device=s[0])
    # a peer that does not exist
    with pytest.raises(DeviceError, match="to rank 5, but the system has 2 devices"):
        ring[(1,)](xs, buf[0], sig[0], np.zeros(64, np.float32), 4, 6, BLOCK=64, device=s[0])
    # waiting with nobody beside to signal
    sig.reset()
    with pytest.raises(DeviceError, match="nothing else runs while it waits"):
        ring[(1,)](xs, buf[0], sig[0], np.zeros(64, np.float32), 0, 2, BLOCK=64, device=s[0])
    # off a system's device
    with pytest.raises(LaunchError, match="must run on a device of a dvmlang.npu.System"):
        ring[(1,)](xs, buf[0], sig[0], np.zeros(64, np.float32), 0, 2, BLOCK=64)


def test_a_kernel_that_waits_must_fit_its_grid_on_the_cores():
    s = System(2)
    with pytest.raises(LaunchError, match="grid has 60 programs for 48 cores"):
        _ring(n=2, grid=60, system=s)


def test_a_rank_waiting_for_a_failed_peer_gets_its_error():
    s = System(2, timeout_s=30)
    buf, sig = s.symmetric((64,), "float32"), s.symmetric((1,), "int32")
    seen = {}

    def fn(rank):
        if rank == 1:
            raise RuntimeError("rank 1 never signals")
        try:
            ring[(1,)](np.zeros(64, np.float32), buf[0], sig[0], np.zeros(64, np.float32), 0, 2, BLOCK=64)
        except PeerError as e:
            seen["error"] = str(e)
            raise

    with pytest.raises(RuntimeError, match="never signals"):
        s.spmd(fn)
    assert "rank 1 failed: RuntimeError: rank 1 never signals" in seen["error"] and "dl.wait" in seen["error"]


def test_language_errors_name_the_misuse():
    @dvmlang.kernel
    def tile_flag(sig_ptr, BLOCK: dl.constexpr):
        dl.signal(sig_ptr + dl.arange(0, BLOCK), 0)

    @dvmlang.kernel
    def float_flag(sig_ptr):
        dl.wait(sig_ptr + 0, 1)

    @dvmlang.kernel
    def bad_cmp(sig_ptr):
        dl.wait(sig_ptr + 0, 1, cmp="gte")

    s = System(1)
    with pytest.raises(KernelTypeError, match="one flag"):
        tile_flag[(1,)](np.zeros(8, np.int32), BLOCK=8, device=s[0])
    with pytest.raises(KernelTypeError, match="signal flags are integers"):
        float_flag[(1,)](np.zeros(8, np.float32), device=s[0])
    with pytest.raises(KernelTypeError, match="cmp must be one of"):
        bad_cmp[(1,)](np.zeros(8, np.int32), device=s[0])


def test_the_fused_matmul_reduce_scatter_beats_the_separate_kernel_and_collective():
    ex = load_example("matmul_reduce_scatter")
    t_sep, t_fused = ex.run()  # each checked against numpy inside
    assert t_fused < 0.8 * t_sep
