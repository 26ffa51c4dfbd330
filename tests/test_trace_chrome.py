"""The Chrome/Perfetto export is structurally valid: every X has a dur, no two X overlap on one
process/thread, processes and threads are named, flows pair up inside slices, counters are numeric."""

import json
from collections import defaultdict

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.trace.chrome import _lanes, chrome_trace, save_chrome
from sample_kernels import matmul


@dvmlang.kernel
def softmax(out_ptr, in_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    x = dl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = dl.exp(x - dl.max(x, axis=0))
    dl.store(out_ptr + row * n_cols + cols, e / dl.sum(e, axis=0), mask=cols < n_cols)


@dvmlang.kernel
def row_sum(x_ptr, out_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    acc = dl.zeros((BLOCK,), dl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + dl.arange(0, BLOCK)
        acc += dl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    dl.store(out_ptr + row, dl.sum(acc, axis=0))


def _ns(us: float) -> int:
    """Perfetto's reading of a microsecond timestamp: rounded to whole nanoseconds."""
    return int(round(us * 1000))


def validate(doc: dict) -> dict:
    """Check the structure Perfetto relies on; returns counts by phase."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    assert isinstance(doc["otherData"]["clock_hz"], (int, float)) and doc["otherData"]["clock_hz"] > 0
    phases = defaultdict(int)
    procs, threads = {}, {}
    slices = defaultdict(list)
    flows = defaultdict(list)
    for ev in events:
        ph = ev["ph"]
        phases[ph] += 1
        assert isinstance(ev["pid"], int)
        if ph == "M":
            if ev["name"] == "process_name":
                procs[ev["pid"]] = ev["args"]["name"]
            elif ev["name"] == "thread_name":
                threads[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            else:
                assert ev["name"] in ("process_sort_index", "thread_sort_index")
                assert isinstance(ev["args"]["sort_index"], int)
            continue
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
        if ph == "X":
            assert "dur" in ev and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0, ev
            assert isinstance(ev["name"], str) and ev["name"]
            slices[(ev["pid"], ev["tid"])].append((_ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"]), ev))
        elif ph in "sf":
            flows[ev["id"]].append(ev)
        elif ph == "C":
            assert ev["args"] and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      for v in ev["args"].values()), ev
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    for key, items in slices.items():
        assert key[0] in procs, f"process {key[0]} has no name"
        assert key in threads, f"thread {key} has no name"
        items.sort(key=lambda x: (x[0], x[1]))
        for (s0, e0, a), (s1, e1, b) in zip(items, items[1:]):
            assert s1 >= e0, f"overlap on {key}: {a} and {b}"
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {fid} does not pair up: {pair}"
        s = next(e for e in pair if e["ph"] == "s")
        f = next(e for e in pair if e["ph"] == "f")
        assert f.get("bp") == "e" and s["name"] == f["name"]
        assert _ns(f["ts"]) >= _ns(s["ts"])
        for e in (s, f):  # each end lies inside a slice of its thread
            assert any(a <= _ns(e["ts"]) <= b for a, b, _ in slices[(e["pid"], e["tid"])]), e
    return dict(phases)


def _traced_session():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 100), dtype=np.float32)
    y = rng.random((30, 300), dtype=np.float32)
    with dvmlang.trace() as t:
        softmax[(60,)](np.empty_like(x), x, 100, BLOCK=128)
        row_sum[(30,)](y, np.zeros(30, np.float32), 300, BLOCK=64)
    return t


def test_export_is_valid_and_complete(tmp_path):
    t = _traced_session()
    path = t.save_chrome(tmp_path / "trace.json")
    doc = json.loads(path.read_text())
    counts = validate(doc)
    rows = sum(len(launch.trace) for launch in t.launches)
    assert counts["X"] == rows + 2 * len(t.launches)  # every instruction, plus overhead + kernel per launch
    assert counts["s"] == counts["f"] == sum(len(launch.trace.flow_src) for launch in t.launches) > 0
    assert counts["C"] > 0
    names = {ev["args"]["name"] for ev in doc["traceEvents"] if ev["ph"] == "M" and ev["name"] == "thread_name"}
    assert {"SCALAR", "MTE2", "VECTOR", "MTE3", "launches"} <= names
    procs = {ev["args"]["name"] for ev in doc["traceEvents"] if ev["ph"] == "M" and ev["name"] == "process_name"}
    assert "core 0 (AIV)" in procs and any(p.startswith("device") for p in procs)


def test_slices_carry_source_and_timing_that_round_trip_to_cycles():
    t = _traced_session()
    doc = chrome_trace(t.launches)
    clock = doc["otherData"]["clock_hz"]
    loads = [ev for ev in doc["traceEvents"] if ev["ph"] == "X" and ev["name"] == "DMA_LOAD1"
             and ev["args"]["kernel"] == "softmax"]
    assert len(loads) == 60
    ev = min(loads, key=lambda e: e["args"]["program"])
    assert ev["cat"] == "MTE2" and ev["args"]["line"] == "test_trace_chrome.py:20"
    assert "dl.load(in_ptr" in ev["args"]["source"] and ev["args"]["bytes"] == 400
    launch = t.launches[0]
    overhead_us = launch.launch_overhead / clock * 1e6
    assert ev["ts"] == pytest.approx(overhead_us + ev["args"]["start_cycle"] / clock * 1e6, abs=1e-3)
    assert ev["dur"] == pytest.approx(ev["args"]["cycles"] / clock * 1e6, abs=1e-3)
    # launches are laid end to end on the device's "launches" thread
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    total_us = sum(launch.cycles for launch in t.launches) / clock * 1e6
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(total_us, abs=2e-3)


def test_threads_follow_the_pipe_order():
    t = _traced_session()
    doc = chrome_trace(t.launches[:1])
    order = {}
    for ev in doc["traceEvents"]:
        if ev["ph"] == "M" and ev["name"] == "thread_sort_index" and ev["pid"] == 1000:
            order[ev["tid"]] = ev["args"]["sort_index"]
    names = {ev["tid"]: ev["args"]["name"] for ev in doc["traceEvents"]
             if ev["ph"] == "M" and ev["name"] == "thread_name" and ev["pid"] == 1000}
    ranked = [names[tid] for tid in sorted(order, key=order.get)]
    assert ranked == ["SCALAR", "MTE2", "VECTOR", "MTE3"]


def test_overlapping_rows_on_one_pipe_move_to_overflow_lanes_deterministically():
    key = np.array([0, 0, 0, 0, 1, 1])
    start = np.array([0.0, 5.0, 6.0, 20.0, 0.0, 10.0 - 1e-9])
    end = np.array([10.0, 8.0, 30.0, 25.0, 10.0, 12.0])
    s, lane = _lanes(key, start, end)
    assert lane.tolist() == [0, 1, 2, 0, 0, 0]
    assert s[5] == 10.0  # a rounding-size overlap is clamped, not moved
    # on each lane of each key nothing overlaps any more
    for k in (0, 1):
        for ln in set(lane[key == k].tolist()):
            sel = (key == k) & (lane == ln)
            o = np.argsort(s[sel])
            assert np.all(s[sel][o][1:] >= end[sel][o][:-1])


def test_overflow_lanes_are_named_threads_in_the_export():
    t = _traced_session()
    tr = t.launches[0].trace
    tr.start[1] = tr.start[0]  # force program 0's second instruction on top of its first (same pipe)
    doc = chrome_trace(t.launches[:1])
    validate(doc)
    names = [ev["args"]["name"] for ev in doc["traceEvents"] if ev["ph"] == "M" and ev["name"] == "thread_name"]
    assert "SCALAR #2" in names


def test_sampled_and_summary_only_sessions_export_too(tmp_path):
    x = np.random.default_rng(0).standard_normal((40, 100), dtype=np.float32)
    for kw in (dict(sample=4), dict(summary_only=True), dict(max_events=50)):
        with dvmlang.trace(**kw) as t:
            softmax[(40,)](np.empty_like(x), x, 100, BLOCK=128)
        counts = validate(chrome_trace(t.launches))
        assert counts["X"] == len(t.launches[0].trace) + 2


def test_nothing_to_export_and_unwritable_paths_are_dvmlang_errors(tmp_path):
    with pytest.raises(dvmlang.DvmError, match="no launches"):
        save_chrome([], tmp_path / "x.json")
    t = _traced_session()
    with pytest.raises(dvmlang.DvmError, match="cannot write"):
        t.save_chrome(tmp_path / "missing-dir" / "x.json")




def test_cube_kernels_export_their_cube_pipes():
    M, N, K = 32, 32, 64
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K)).astype(np.float16), rng.random((K, N)).astype(np.float16)
    launch = matmul[(2, 2)](a, b, np.zeros((M, N), np.float32), M, N, K, BM=16, BN=16, BK=16, trace=True)
    doc = chrome_trace([launch])
    validate(doc)
    procs = {ev["args"]["name"] for ev in doc["traceEvents"] if ev["ph"] == "M" and ev["name"] == "process_name"}
    assert "core 0 (AIC)" in procs
    cats = {ev["cat"] for ev in doc["traceEvents"] if ev["ph"] == "X"}
    assert "CUBE" in cats


def test_progress_bar_appears_only_for_long_work_on_a_terminal():
    import io

    from rich.console import Console

    from dvmlang.trace.progress import LazyProgress
    term = Console(file=io.StringIO(), force_terminal=True, width=80)
    with LazyProgress("writing", 10, "rows", console=term, delay=0.0) as bar:
        bar.update(5)
        assert bar.bar is not None
    quick = LazyProgress("writing", 10, "rows", console=Console(file=io.StringIO(), force_terminal=True), delay=60)
    quick.update(5)
    assert quick.bar is None
    piped = LazyProgress("writing", 10, "rows", console=Console(file=io.StringIO(), force_terminal=False), delay=0)
    piped.update(5)
    assert piped.bar is None and not piped.enabled
