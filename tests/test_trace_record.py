"""Recording: one row per executed instruction and program, exact totals whatever is kept, set -> wait
pairs, and the limits (max_events, sample, summary_only) that keep huge grids in memory."""

import tracemalloc

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu.device import default_device
from dvmlang.trace.record import Session
from dvmlang.vm import isa


@dvmlang.kernel
def scale(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    dl.store(out_ptr + offs, x * 2.0, mask=offs < n)


@dvmlang.kernel
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    acc = dl.zeros((BLOCK,), dl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + dl.arange(0, BLOCK)
        acc += dl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    dl.store(out_ptr + row, dl.sum(acc, axis=0))


def _scale_args(n):
    x = np.arange(n, dtype=np.float32)
    return x, np.zeros_like(x), n


def test_tracing_is_off_by_default():
    x, out, n = _scale_args(64)
    launch = scale[(2,)](x, out, n, BLOCK=32)
    assert launch.trace is None


def test_rows_hold_every_field_the_issue_names():
    x, out, n = _scale_args(100)
    launch = scale[(4,)](x, out, n, BLOCK=32, trace=True)
    rows = list(launch.trace.rows())
    keys = {"pid", "core", "pipe", "kernel", "pc", "opcode", "start", "dur", "bytes", "line", "file", "ub", "group"}
    assert keys <= set(rows[0])
    loads = [r for r in rows if r["opcode"] == "DMA_LOAD1"]
    assert len(loads) == 4 and all(r["pipe"] == "MTE2" and r["kernel"] == "scale" for r in loads)
    assert [r["bytes"] for r in sorted(loads, key=lambda r: r["pid"])] == [128, 128, 128, 16]  # masked tail
    assert all(r["ub"] is not None and r["ub"][1] - r["ub"][0] == 128 for r in loads)  # 32 x f32
    assert all(r["file"].endswith("test_trace_record.py") for r in loads)


def test_totals_are_exact_and_match_the_device_accounting():
    x = np.random.default_rng(0).random((7, 300), dtype=np.float32)
    out = np.zeros(7, np.float32)
    launch = row_sum[(7,)](x, out, 300, BLOCK=64, trace=True)
    tr = launch.trace
    for name, busy in launch.pipe_busy.items():
        mine = sum(tr.step_cycles[s.index] for s in tr.steps if s.pipe_name == name)
        assert mine == pytest.approx(busy)
    assert tr.step_bytes.sum() == launch.bytes_read + launch.bytes_written
    # rows and totals agree when everything was recorded
    assert len(tr) == tr.step_count.sum()
    assert np.bincount(tr.step, weights=tr.dur, minlength=len(tr.steps)) == pytest.approx(tr.step_cycles)
    # the loop body loads ceil(300 / 64) = 5 tiles per program (however the encoder splits the loop)
    loads = [s for s in tr.steps if s.name.startswith("DMA_LOAD")]
    assert sum(int(tr.step_count[s.index]) for s in loads) == 7 * 5


def test_rows_of_one_pipe_of_one_program_never_overlap():
    x = np.random.default_rng(0).random((5, 200), dtype=np.float32)
    launch = row_sum[(5,)](x, np.zeros(5, np.float32), 200, BLOCK=32, trace=True)
    tr = launch.trace
    for pid in range(5):
        for pipe in set(tr.pipe.tolist()):
            sel = (tr.pid == pid) & (tr.pipe == pipe)
            s, e = tr.start[sel], tr.end[sel]
            o = np.argsort(s, kind="stable")
            assert np.all(s[o][1:] >= e[o][:-1] - 1e-9)


def test_set_wait_pairs_join_a_setter_to_a_later_waiter_of_the_same_program():
    x, out, n = _scale_args(300)
    launch = scale[(3,)](x, out, n, BLOCK=128, trace=True)
    tr = launch.trace
    pairs = list(tr.syncs())
    assert len(pairs) == 3 * sum(1 for s in tr.steps if s.wait is not None)
    for p in pairs:
        a, b = tr.steps[tr.step[p["src"]]], tr.steps[tr.step[p["dst"]]]
        assert tr.pid[p["src"]] == tr.pid[p["dst"]]
        assert a.set is not None and b.wait is not None
        assert (a.pipe, a.set[0], a.set[1]) == (b.wait[0], b.pipe, b.wait[1])
        assert p["wait_start"] >= p["signal"] - 1e-9 >= p["set_end"] - 1e-9  # the waiter started after the flag
    assert {(p["from"], p["to"]) for p in pairs} == {("MTE2", "VECTOR"), ("VECTOR", "MTE3")}


def test_in_a_loop_each_wait_pairs_with_the_latest_set():
    x = np.random.default_rng(0).random((2, 256), dtype=np.float32)
    launch = row_sum[(2,)](x, np.zeros(2, np.float32), 256, BLOCK=64, trace=True)
    tr = launch.trace
    for p in tr.syncs():
        src, dst = p["src"], p["dst"]
        key_steps = [i for i in range(src + 1, dst) if tr.pid[i] == tr.pid[src]
                     and tr.steps[tr.step[i]].set == tr.steps[tr.step[src]].set
                     and tr.steps[tr.step[i]].pipe == tr.steps[tr.step[src]].pipe]
        assert key_steps == []  # no newer matching set between the pair (rows are in dispatch order)


def test_sampling_keeps_every_nth_program_and_exact_totals():
    x, out, n = _scale_args(32 * 40)
    full = scale[(40,)](x, out, n, BLOCK=32, trace=True)
    with dvmlang.trace(sample=8) as t:
        scale[(40,)](x, out, n, BLOCK=32)
    tr = t.launches[0].trace
    assert set(tr.pid.tolist()) == {0, 8, 16, 24, 32}
    assert tr.sampled == 8
    np.testing.assert_array_equal(tr.step_count, full.trace.step_count)
    np.testing.assert_allclose(tr.step_cycles, full.trace.step_cycles)


def test_max_events_is_a_session_wide_cap_and_says_so():
    x, out, n = _scale_args(32 * 40)
    with dvmlang.trace(max_events=100) as t:
        scale[(40,)](x, out, n, BLOCK=32)
        scale[(40,)](x, out, n, BLOCK=32)
    first, second = (launch.trace for launch in t.launches)
    assert len(first) == 100 and first.truncated
    assert len(second) == 0 and second.truncated
    assert first.step_count.sum() == second.step_count.sum() > 100  # totals stay exact
    assert t.truncated and t.events == 100


def test_summary_only_keeps_totals_and_no_rows():
    x, out, n = _scale_args(32 * 10)
    with dvmlang.trace(summary_only=True):
        launch = scale[(10,)](x, out, n, BLOCK=32)
    tr = launch.trace
    assert len(tr) == 0 and tr.summary_only and len(tr.flow_src) == 0
    assert tr.step_cycles.sum() == pytest.approx(sum(launch.pipe_busy.values()))


@pytest.mark.parametrize("bad", [dict(max_events=-1), dict(sample=0), dict(sample=1.5)])
def test_bad_limits_are_dvmlang_errors(bad):
    with pytest.raises(dvmlang.DvmError, match="max_events|sample"):
        Session(**bad)


def test_a_huge_grid_under_a_cap_records_no_more_memory_than_untraced():
    """65,535 programs (the most a launch may have): with max_events the recorder keeps the cap, and the
    peak memory stays that of an untraced run, far below recording everything."""
    n = 65535 * 8
    x, out, _ = _scale_args(n)
    scale[(65535,)](x, out, n, BLOCK=8)  # build and encode outside the measurement

    def peak(**kw):
        tracemalloc.start()
        try:
            if kw:
                with dvmlang.trace(**kw) as t:
                    scale[(65535,)](x, out, n, BLOCK=8)
            else:
                scale[(65535,)](x, out, n, BLOCK=8)
            return tracemalloc.get_traced_memory()[1], (t.launches[0].trace if kw else None)
        finally:
            tracemalloc.stop()

    dev = default_device()
    kept, dev.timing_cache = dev.timing_cache, False  # (a traced launch is timed in full: so is the baseline)
    try:
        base, _ = peak()
    finally:
        dev.timing_cache = kept
    capped, tr = peak(max_events=1000)
    summary, tr_s = peak(summary_only=True)
    assert len(tr) == 1000 and tr.truncated
    assert tr.step_count.sum() == 65535 * len(tr.steps)
    assert capped < base + 4_000_000 and summary < base + 4_000_000
    assert len(tr_s) == 0


def test_sequential_and_batched_execution_record_the_same_rows(sequential_device):
    x = np.random.default_rng(0).random((3, 130), dtype=np.float32)
    a = row_sum[(3,)](x, np.zeros(3, np.float32), 130, BLOCK=64, trace=True)
    b = row_sum[(3,)](x, np.zeros(3, np.float32), 130, BLOCK=64, trace=True, device=sequential_device)
    for col in ("pid", "step", "start", "dur", "nbytes"):
        np.testing.assert_allclose(getattr(a.trace, col), getattr(b.trace, col), err_msg=col)
    pairs = lambda tr: sorted(zip(tr.flow_src.tolist(), tr.flow_dst.tolist()))  # noqa: E731
    assert pairs(a.trace) == pairs(b.trace) and len(pairs(a.trace)) > 0


def test_timing_fields_place_programs_on_cores():
    x, out, n = _scale_args(32 * 100)
    launch = scale[(100,)](x, out, n, BLOCK=32, trace=True)
    tr = launch.trace
    cores = launch.profile.vector_cores
    np.testing.assert_array_equal(tr.core, tr.pid % cores)
    # the launch overhead comes before the programs; the last transfer's latency can end after its pipe
    assert tr.start.min() >= 0
    last = max(tr.steps, key=lambda s: s.latency).latency
    assert launch.cycles - launch.launch_overhead - last - 1 <= float(tr.end.max()) <= tr.makespan
    # a second-wave program on core 0 starts after the first program on core 0 started
    assert tr.start[tr.pid == cores].min() > tr.start[tr.pid == 0].min()
    assert set(isa.PIPE_NAMES[isa.Pipe(p)] for p in tr.pipe.tolist()) >= {"SCALAR", "MTE2", "VECTOR", "MTE3"}
