"""Calibration as tests: every workload of the calibration note with a published Ascend 910B measurement stays
within 20% of the published range (the figures, sources and kernels live in benchmarks/calibration.py, which
prints the same table), and every model behind the calibration has its knob on the profile."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device
from dvmlang.npu.profile import PROFILES

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "calibration.py"
_spec = importlib.util.spec_from_file_location("dvmlang_calibration", _PATH)
cal = importlib.util.module_from_spec(_spec)
sys.modules["dvmlang_calibration"] = cal
_spec.loader.exec_module(cal)

B2 = PROFILES["910B2"]


@pytest.mark.parametrize("w", [w for w in cal.WORKLOADS if w.test], ids=lambda w: w.name)
def test_workload_within_band_of_published(w):
    """The simulated figure lies within 20% of the published range (w.source says where it comes from)."""
    lo, hi = w.band()
    sim = w.run()
    assert lo <= sim <= hi, f"{w.name}: simulated {sim:.3g} {w.unit}, published {w.low:g}-{w.high:g} ({w.source})"


def test_physics_no_workload_beats_a_roofline():
    """Streaming beyond L2 stays under the nominal HBM rate; a GEMM under the cube peak."""
    assert cal.copy_tbs(256) < B2.hbm_bytes_per_s / 1e12
    peak = B2.cube_cores * B2.cube_macs_per_cycle * 2 * B2.clock_hz / 1e12
    assert cal.gemm_tflops(1024) < peak


@dvmlang.kernel
def _rows(x_ptr, y_ptr, stride, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    m = cols < n_cols
    dl.store(y_ptr + row * stride + cols, dl.load(x_ptr + row * stride + cols, mask=m) * 2.0, mask=m)


def _run_rows(profile, rows=512, cols=512, stride=None, x=None):
    stride = stride or cols
    x = np.ones((rows, stride), np.float32) if x is None else x
    y = np.zeros_like(x)
    with Device(profile):
        launch = _rows[(rows,)](x, y, stride, cols, BLOCK=dl.next_power_of_2(cols))
    np.testing.assert_array_equal(y[:, :cols], x[:, :cols] * 2.0)
    return launch


def test_program_dispatch_is_charged_beyond_the_cores_and_has_a_knob():
    on = _run_rows(B2)
    off = _run_rows(B2.with_(program_dispatch_cycles=0))
    assert on.dispatched == 512 - B2.vector_cores and off.dispatched == 0
    waves = -(-512 // B2.vector_cores)
    assert on.cycles - off.cycles >= 0.8 * (waves - 1) * B2.program_dispatch_cycles
    few = _run_rows(B2, rows=B2.vector_cores)
    assert few.dispatched == 0


def test_unaligned_rows_are_slower_and_have_a_knob():
    """Rows of 500 floats (2,000 B apart) start off the 512 B boundary; rows of 512 floats do not."""
    aligned = _run_rows(B2, rows=48, cols=500, stride=512)
    unaligned = _run_rows(B2, rows=48, cols=500, stride=500)
    assert aligned.unaligned_cycles == 0 and unaligned.unaligned_cycles > 0
    assert unaligned.cycles > aligned.cycles
    ignore = _run_rows(B2.with_(unaligned_efficiency=1.0), rows=48, cols=500, stride=500)
    assert ignore.unaligned_cycles == 0 and ignore.cycles < unaligned.cycles


def test_l2_keeps_a_tensor_for_the_next_launch_and_has_a_knob():
    x = np.ones((1024, 1024), np.float32)
    with Device(B2):
        y = np.zeros_like(x)
        first = _rows[(48,)](x, y, 1024, 1024, BLOCK=1024)
        second = _rows[(48,)](x, y, 1024, 1024, BLOCK=1024)
    assert first.hbm_bytes == 48 * 1024 * 4  # x's rows read cold; y's stay in L2 (written back when evicted)
    assert second.hbm_bytes == 0 and second.l2_hit_bytes >= 48 * 1024 * 4
    with Device(B2.with_(l2_across_launches=False)):
        cold = [_rows[(48,)](x, y, 1024, 1024, BLOCK=1024) for _ in range(2)]
    assert cold[0].cycles == cold[1].cycles and cold[1].hbm_bytes == 2 * 48 * 1024 * 4


def test_l2_writes_back_dirty_lines_it_evicts():
    p = B2.with_(l2_bytes=600 << 10)  # a small L2: the second pair of tensors evicts the first pair
    a = np.ones((64, 1024), np.float32)
    b = np.ones((64, 1024), np.float32)
    with Device(p):
        ya, yb = np.zeros_like(a), np.zeros_like(b)
        first = _rows[(64,)](a, ya, 1024, 1024, BLOCK=1024)
        second = _rows[(64,)](b, yb, 1024, 1024, BLOCK=1024)
    assert first.writeback_bytes == 0
    assert second.writeback_bytes == ya.nbytes  # ya was dirty; a, evicted first, was clean
    assert second.hbm_bytes == b.nbytes + ya.nbytes


def test_hbm_efficiency_and_per_core_rate():
    n = 64 * 2**20 // 4
    x = np.ones(n, np.float32)
    y = np.empty_like(x)
    with Device(B2.with_(l2_bytes=1 << 20)):  # beyond L2: every byte crosses HBM
        eight = cal.copy_loop[(8,)](x, y, n, BLOCK=16384)
    per_core = 2 * x.nbytes / 8 / (eight.cycles - eight.launch_overhead)
    assert per_core <= B2.mte_bytes_per_cycle
    with Device(B2.with_(l2_bytes=1 << 20, hbm_efficiency=1.0)):
        nominal = cal.copy_loop[(48,)](x, y, n, BLOCK=16384)
    with Device(B2.with_(l2_bytes=1 << 20)):
        sustained = cal.copy_loop[(48,)](x, y, n, BLOCK=16384)
    assert sustained.cycles > nominal.cycles


@dvmlang.kernel
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, EXPLICIT: dl.constexpr, BM: dl.constexpr, BN: dl.constexpr,
        BK: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rn = dl.program_id(1) * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        a = dl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = dl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        if EXPLICIT:
            acc = dl.dot(a, b, acc)
        else:
            acc += dl.dot(a, b)
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("out", [np.float32, np.float16])
def test_acc_plus_dot_accumulates_in_l0c_and_leaves_through_fixpipe(rng, out):
    """`acc += dot(a, b)` in a K loop is the same as `dot(a, b, acc)`: bit for bit, and in the instructions (the
    accumulator stays in L0C, no handoff per K step, one FixPipe store, converting to the output dtype)."""
    M, N, K = 100, 72, 200
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    outs, names = [], []
    for explicit in (False, True):
        c = np.empty((M, N), out)
        launch = _mm[(2, 1)](a, b, c, M, N, K, EXPLICIT=explicit, BM=64, BN=128, BK=64)
        outs.append(c)
        names.append([i.ins.name for i in launch.bytecode.decoded[0]])
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(out)
    np.testing.assert_allclose(outs[0].astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)
    assert names[0] == names[1]
    assert "FIX_L0C_TO_UB" not in names[0] and "UB_TO_L0C" not in names[0] and "VADD" not in names[0]
    assert any(n.startswith("FIX_STORE") for n in names[0]) and "L0C_FILL" in names[0]


def test_handoff_goes_through_gm_unless_the_part_has_the_path():
    slow = cal.c2v_bytes_per_cycle(R=4)
    direct = B2.with_(l0c_to_ub=True)
    a = np.ones((128, 16), np.float16)
    b = np.ones((16, 128), np.float16)
    out = np.empty((24, 128, 128), np.float32)
    with Device(direct):
        launch = cal.c2v_stream[(24,)](a, b, out, 4, BM=128, BN=128, BK=16)
    fast = 4 * 128 * 128 * 4 / (launch.cycles - launch.launch_overhead)
    assert slow < B2.handoff_bytes_per_cycle < fast
    assert np.all(out == 16.0)


def test_summary_names_the_new_costs():
    from dvmlang.trace.stats import analyse
    with dvmlang.trace(summary_only=True):
        launch = _run_rows(B2, rows=512, cols=500, stride=500)
    bounds = {b.name: b.cycles for b in analyse(launch).bounds}
    assert bounds["program dispatch"] > 0 and bounds["unaligned GM bursts"] > 0
    with dvmlang.trace(summary_only=True):
        with Device(B2):
            out = np.empty((24, 128, 128), np.float32)
            c2v = cal.c2v_stream[(24,)](np.ones((128, 16), np.float16), np.ones((16, 128), np.float16), out, 2,
                                        BM=128, BN=128, BK=16)
    assert {b.name: b.cycles for b in analyse(c2v).bounds}["cube <-> vector handoff"] > 0


def test_disassembly_notes_say_where_bytes_went_and_the_handoff():
    import io

    from rich.console import Console

    from dvmlang.trace import render
    out = np.empty((24, 128, 128), np.float32)
    with Device(B2), dvmlang.trace():
        launch = cal.c2v_stream[(24,)](np.ones((128, 16), np.float16), np.ones((16, 128), np.float16), out, 2,
                                       BM=128, BN=128, BK=16)
    c = Console(file=io.StringIO(), width=300, color_system=None)
    render(launch, view="disasm", console=c)
    text = c.file.getvalue()
    assert "handoff through a GM workspace" in text
    assert "HBM once, then L2" in text and "L2 (kept; written back when evicted)" in text


@dvmlang.kernel
def _mm_strided(a_ptr, b_ptr, c_ptr, sbk, sbn, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr):
    rm = dl.arange(0, M)
    rn = dl.arange(0, N)
    rk = dl.arange(0, K)
    a = dl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = dl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn)
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], dl.dot(a, b))


def test_a_transposed_cube_operand_is_read_along_its_stored_rows(rng):
    """A weight stored (N, K) and used as its transpose (a Linear layer) is read row by row into L1 and
    transposed by MTE1 on the way to L0B, as LoadData does: not element by element."""
    M = N = K = 128
    a = rng.standard_normal((M, K)).astype(np.float16)
    w = rng.standard_normal((N, K)).astype(np.float16)  # stored (N, K)
    wt = np.ascontiguousarray(w.T)  # the same matrix stored (K, N)
    out = [np.empty((M, N), np.float32) for _ in range(2)]
    with Device(B2):
        t = _mm_strided[(1,)](a, w, out[0], 1, K, M=M, N=N, K=K)
        c = _mm_strided[(1,)](a, wt, out[1], N, 1, M=M, N=N, K=K)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[0], a.astype(np.float32) @ w.T.astype(np.float32), rtol=2e-3, atol=2e-2)
    assert t.cycles <= 1.1 * c.cycles


def test_l2_forgets_a_dead_array_at_once_and_only_its_lines():
    """A freed array's lines leave L2 when it dies (found by its weak reference, not by scanning every line), and
    a line updated by a later launch is still dropped with its array."""
    from dvmlang.npu.l2 import L2Cache
    from dvmlang.npu.timing import Rates

    l2 = L2Cache(1 << 20)
    keep, gone = np.ones(1024, np.float32), np.ones(2048, np.float32)
    arrays = {0: keep, 1: gone, 2: gone[:512]}
    alias = {0: 0, 1: 1, 2: 2}
    rates = Rates(dvmlang.npu.get_profile(None), arrays, alias, 1)
    rates.group_reads.update({0: 4096.0, 1: 8192.0, 2: 2048.0})
    for i in range(2):  # the second launch updates the lines it finds
        hbm, hits, back = l2.settle(arrays, alias, rates)
        assert back == 0 and hits == (0 if i == 0 else 4096 + 8192 + 2048)
    assert l2.used == 4096 + 8192 + 2048 and len(l2.lines) == 3
    del arrays, gone
    import gc
    gc.collect()
    assert len(l2.lines) == 1 and l2.used == 4096
    rates = Rates(dvmlang.npu.get_profile(None), {0: keep}, {0: 0}, 1)
    rates.group_reads[0] = 4096.0
    assert l2.settle({0: keep}, {0: 0}, rates)[1] == 4096 and rates.resident == {0: 4096}
