"""Chrome trace JSON (the Trace Event Format) that Perfetto and chrome://tracing open.

Layout:

* process "device" (pid 1): a "launches" thread with one slice per launch (its launch overhead, then the
  kernel), and counters — HBM bandwidth (GB/s) and per-pipe utilisation (%) over time; numbers only.
* one process per core (``core 3 (AIV)``), one thread per pipe (named, in the fixed order SCALAR, MTE2,
  VECTOR, CUBE, MTE1, FIXP, MTE3), a complete (``X``) event per executed instruction with its program,
  pc, source line, bytes and UB range in ``args``.
* flow arrows (``s`` -> ``f``, one id each) from every instruction that sets an event to the instruction
  that waited for it.

Launches are laid end to end. Timestamps are microseconds with nanosecond resolution, written as exact
decimals; the clock is in ``otherData`` so cycles can be recovered (``cycles = us * clock_hz / 1e6``).
Slices on one thread never overlap: a pipe executes in order, and where two programs on one core would
still overlap on a pipe the later slice goes to a numbered overflow thread ("VECTOR #2"), chosen
greedily in (start, program, dispatch order) order, so the output is deterministic.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from ..errors import DvmError
from .progress import LazyProgress
from .stats import PIPE_ORDER, PIPE_NAMES, busy_per_bin

DEVICE_PID = 1
COUNTER_BINS = 200
CLAMP_CYCLES = 1e-6  # start-before-previous-end by less than this is float rounding, not an overlap
_PIPE_POS = {int(p): i for i, p in enumerate(PIPE_ORDER)}


def _us(ns: int) -> str:
    """Exact decimal microseconds of an integer nanosecond count."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _core_pid(kind: str, core: int) -> int:
    return (2000 if kind == "mix" else 1000) + core


def _tid(pos: int, lane: int) -> int:
    return (pos + 1) * 100 + lane


def _lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by ``key`` then ``start``: clamp rounding-size overlaps, put real overlaps on extra lanes.
    Returns (adjusted start, lane per row)."""
    n = len(start)
    lane = np.zeros(n, dtype=np.int64)
    if n < 2:
        return start, lane
    start = start.copy()
    span = float(max(end.max(), start.max())) + 1.0
    shifted_end = end + key * span  # running max stays inside each group because groups are ascending
    run = np.maximum.accumulate(shifted_end)
    prev = np.empty(n)
    prev[0] = -np.inf
    prev[1:] = run[:-1] - key[1:] * span
    same = np.zeros(n, dtype=bool)
    same[1:] = key[1:] == key[:-1]
    tiny = same & (start < prev) & (prev - start <= CLAMP_CYCLES)
    start[tiny] = np.minimum(prev[tiny], end[tiny])
    clash = same & (start < prev) & ~tiny
    if not clash.any():
        return start, lane
    for k in np.unique(key[clash]).tolist():
        idx = np.flatnonzero(key == k)
        ends: list[float] = []
        for i in idx.tolist():
            for j, e in enumerate(ends):
                if e <= start[i]:
                    lane[i] = j
                    ends[j] = end[i]
                    break
            else:
                lane[i] = len(ends)
                ends.append(end[i])
    return start, lane


class _Writer:
    def __init__(self, out):
        self.out = out
        self.first = True

    def raw(self, text: str) -> None:
        self.out.write(("\n" if self.first else ",\n") + text)
        self.first = False

    def event(self, ev: dict) -> None:
        self.raw(json.dumps(ev, separators=(",", ":"), sort_keys=False))


def _meta(w: _Writer, pid: int, tid: int | None, name: str, value) -> None:
    ev = {"name": name, "ph": "M", "pid": pid, "args": {"name" if "name" in name else "sort_index": value}}
    if tid is not None:
        ev["tid"] = tid
    w.event(ev)


def write_chrome(launches, out) -> dict:
    """Write the trace of ``launches`` (``LaunchRecord``s) to the text stream ``out``; returns counts."""
    launches = [launch for launch in launches if launch is not None]
    if not launches:
        raise DvmError("nothing to export: no launches were recorded")
    first = launches[0].profile
    out.write('{"traceEvents":[')
    w = _Writer(out)
    stats = {"slices": 0, "flows": 0, "counters": 0, "overflow_lanes": 0}
    _meta(w, DEVICE_PID, None, "process_name", f"device ({first.name})")
    _meta(w, DEVICE_PID, None, "process_sort_index", 0)
    _meta(w, DEVICE_PID, 1, "thread_name", "launches")
    _meta(w, DEVICE_PID, 1, "thread_sort_index", 0)
    named_pids: set = set()
    named_tids: set = set()
    base_ns = 0
    flow_id = 0
    total_rows = sum(len(launch.trace) for launch in launches if launch.trace is not None)
    bar = LazyProgress("writing Chrome trace", total_rows, "rows")
    done = 0
    try:
        for n, launch in enumerate(launches):
            p = launch.profile
            ns_per_cycle = 1e9 / p.clock_hz
            overhead = int(launch.launch_overhead)
            over_ns = int(round(overhead * ns_per_cycle))
            end_ns = int(round(launch.cycles * ns_per_cycle))
            args = {"launch": n, "grid": list(launch.grid), "cycles": int(launch.cycles), "clock_hz": p.clock_hz,
                    "bytes_read": int(launch.bytes_read), "bytes_written": int(launch.bytes_written)}
            if launch.group:
                args["fusion_group"] = launch.group
            _exact_slice(w, f"{launch.name} launch overhead", "launch", base_ns, over_ns, DEVICE_PID, 1,
                         {"launch": n, "cycles": overhead})
            _exact_slice(w, launch.name, "launch", base_ns + over_ns, end_ns - over_ns, DEVICE_PID, 1, args)
            stats["slices"] += 2
            tr = launch.trace
            if tr is None or len(tr) == 0:
                base_ns += end_ns
                continue
            flow_id, done = _launch_rows(w, launch, tr, n, base_ns + over_ns, ns_per_cycle, named_pids, named_tids,
                                         stats, flow_id, bar, done)
            _counters(w, launch, tr, base_ns + over_ns, ns_per_cycle, stats)
            base_ns += end_ns
    finally:
        bar.close()
    out.write("\n],\n")
    other = {"clock_hz": first.clock_hz, "cycles_per_us": first.clock_hz / 1e6, "profile": first.name,
             "time_unit": "ts and dur in microseconds; cycles = us * clock_hz / 1e6",
             "launches": len(launches), "generator": "dvmlang trace"}
    out.write('"displayTimeUnit":"ns",\n"otherData":' + json.dumps(other) + "\n}\n")
    return stats


def _exact_slice(w: _Writer, name: str, cat: str, ts_ns: int, dur_ns: int, pid: int, tid: int, args: dict) -> None:
    w.raw(f'{{"name":{json.dumps(name)},"cat":{json.dumps(cat)},"ph":"X","ts":{_us(ts_ns)},'
          f'"dur":{_us(max(0, dur_ns))},"pid":{pid},"tid":{tid},"args":{json.dumps(args, separators=(",", ":"))}}}')


def _launch_rows(w, launch, tr, n, origin_ns, ns_per_cycle, named_pids, named_tids, stats, flow_id, bar, done):
    kind = launch.kind
    pos = np.array([_PIPE_POS[s.pipe] for s in tr.steps], dtype=np.int64)[tr.step]
    core = tr.core.astype(np.int64)
    seq = np.arange(len(tr), dtype=np.int64)
    order = np.lexsort((seq, tr.pid, tr.start, pos, core))
    key = core[order] * len(PIPE_ORDER) + pos[order]
    start, lane = _lanes(key, tr.start[order], tr.end[order])
    end = tr.end[order]
    ts = np.rint(start * ns_per_cycle).astype(np.int64) + origin_ns
    te = np.rint(end * ns_per_cycle).astype(np.int64) + origin_ns
    te = np.maximum(te, ts)
    stats["overflow_lanes"] += int((lane > 0).sum())
    # static JSON fragments per instruction
    frag = []
    for s in tr.steps:
        extra = {"kernel": launch.name, "pc": s.pc}
        if s.line is not None:
            extra["line"] = s.where
            extra["source"] = tr.source_line(s.file, s.line).strip()[:160]
        if s.ub is not None:
            extra["ub"] = f"[{s.ub[0]:#x}, {s.ub[1]:#x})"
        if launch.group:
            extra["fusion_group"] = launch.group
        frag.append((json.dumps(s.name), PIPE_NAMES[_PIPE_POS[s.pipe]],
                     json.dumps(extra, separators=(",", ":"))[1:-1]))
    pids = core[order] + 0
    tids = np.array([_tid(int(a), int(b)) for a, b in zip(pos[order].tolist(), lane.tolist())], dtype=np.int64) \
        if stats["overflow_lanes"] else (pos[order] + 1) * 100
    for c, t in set(zip(pids.tolist(), tids.tolist())):
        pid = _core_pid(kind, c)
        if pid not in named_pids:
            named_pids.add(pid)
            _meta(w, pid, None, "process_name", f"core {c} ({'AIC' if kind == 'mix' else 'AIV'})")
            _meta(w, pid, None, "process_sort_index", pid)
        if (pid, t) not in named_tids:
            named_tids.add((pid, t))
            pipe, lane_no = PIPE_NAMES[t // 100 - 1], t % 100
            _meta(w, pid, t, "thread_name", pipe if lane_no == 0 else f"{pipe} #{lane_no + 1}")
            _meta(w, pid, t, "thread_sort_index", t)
    step_o = tr.step[order].tolist()
    prog_o = tr.pid[order].tolist()
    nb_o = tr.nbytes[order].tolist()
    dur_o = tr.dur[order].tolist()
    cyc_o = start.tolist()
    # whole nanoseconds / 1000 is a correctly rounded float whose shortest repr has at most three decimals
    ts_l, dur_l = (ts / 1000).tolist(), ((te - ts) / 1000).tolist()
    pid_l = [_core_pid(kind, c) for c in pids.tolist()]
    tid_l = tids.tolist()
    head = [f'{{"name":{name},"cat":"{cat}","ph":"X","ts":' for name, cat, _ in frag]
    tail = [f',"launch":{n},{extra}}}}}' for _, _, extra in frag]
    write = w.out.write
    for lo in range(0, len(step_o), 65536):
        hi = min(len(step_o), lo + 65536)
        write("".join(
            f',\n{head[k]}{ts_l[i]!r},"dur":{dur_l[i]!r},"pid":{pid_l[i]},"tid":{tid_l[i]},"args":{{"program":'
            f'{prog_o[i]},"start_cycle":{cyc_o[i]:.3f},"cycles":{dur_o[i]:.3f},"bytes":{nb_o[i]}{tail[k]}'
            for i, k in zip(range(lo, hi), step_o[lo:hi])))
        bar.update(done + hi)
    stats["slices"] += len(step_o)
    done += len(step_o)
    bar.update(done)
    # flows: set -> wait, bound to the middle of each slice (strictly inside it when it lasts 2 ns or more)
    if len(tr.flow_src):
        where = np.empty(len(order), dtype=np.int64)
        where[order] = np.arange(len(order))
        a, b = where[tr.flow_src], where[tr.flow_dst]
        mid = ts + (te - ts) // 2
        for x, y in zip(a.tolist(), b.tolist()):
            s_step = tr.steps[step_o[x]]
            label = f"{PIPE_NAMES[_PIPE_POS[s_step.pipe]]}->{_pipe_label(s_step.set[0])} e{s_step.set[1]}"
            flow_id += 1
            w.raw(f'{{"name":"{label}","cat":"sync","ph":"s","id":{flow_id},"ts":{_us(int(mid[x]))},'
                  f'"pid":{pid_l[x]},"tid":{tid_l[x]}}}')
            w.raw(f'{{"name":"{label}","cat":"sync","ph":"f","bp":"e","id":{flow_id},"ts":{_us(int(mid[y]))},'
                  f'"pid":{pid_l[y]},"tid":{tid_l[y]}}}')
        stats["flows"] += len(a)
    return flow_id, done


def _pipe_label(p: int) -> str:
    return PIPE_NAMES[_PIPE_POS[int(p)]]


def _counters(w, launch, tr, origin_ns, ns_per_cycle, stats) -> None:
    """HBM bandwidth and per-pipe utilisation over the launch, in ``COUNTER_BINS`` steps (numbers only)."""
    span = max(tr.makespan, float(tr.end.max()), 1.0)
    bins = COUNTER_BINS if span >= COUNTER_BINS else max(1, int(span))
    edges = np.linspace(0.0, span, bins + 1)
    width = edges[1] - edges[0]
    scale = tr.sampled  # a sampled trace holds 1/sample of the programs
    pipe = tr.pipe
    dma = np.isin(pipe, [int(PIPE_ORDER[1]), int(PIPE_ORDER[-1])]) & (tr.dur > 0) & (tr.nbytes > 0)
    moved = busy_per_bin(tr.start[dma], tr.end[dma], edges, tr.nbytes[dma] / tr.dur[dma]) * scale
    gbps = moved / (width / launch.profile.clock_hz) / 1e9
    used = [p for p in PIPE_ORDER if launch.pipe_busy.get(PIPE_NAMES[_PIPE_POS[int(p)]], 0.0) > 0]
    util = {}
    cores = max(1, int(launch.cores))
    for p in used:
        sel = pipe == int(p)
        util[PIPE_NAMES[_PIPE_POS[int(p)]]] = busy_per_bin(tr.start[sel], tr.end[sel], edges) * scale / (cores * width)
    for j in range(bins + 1):
        ts = origin_ns + int(round(edges[j] * ns_per_cycle))
        last = j == bins
        w.raw(f'{{"name":"HBM bandwidth","ph":"C","ts":{_us(ts)},"pid":{DEVICE_PID},'
              f'"args":{{"GB/s":{0.0 if last else round(float(gbps[j]), 3)}}}}}')
        vals = ",".join(f'"{k} %":{0.0 if last else round(100 * float(v[j]), 3)}' for k, v in util.items())
        w.raw(f'{{"name":"pipe utilisation","ph":"C","ts":{_us(ts)},"pid":{DEVICE_PID},"args":{{{vals}}}}}')
        stats["counters"] += 2


def chrome_trace(launches) -> dict:
    """The Chrome trace of ``launches`` as a dict (what ``save_chrome`` writes; for small traces and tests)."""
    buf = io.StringIO()
    write_chrome(list(launches), buf)
    return json.loads(buf.getvalue())


def save_chrome(launches, path) -> Path:
    """Write the Chrome/Perfetto trace JSON of ``launches`` to ``path``; returns the path."""
    path = Path(path)
    launches = list(launches)
    try:
        with open(path, "w", encoding="utf-8") as f:
            write_chrome(launches, f)
    except OSError as e:
        raise DvmError(f"cannot write the Chrome trace to {path}: {e.strerror or e}") from None
    return path
