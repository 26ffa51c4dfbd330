"""A Perfetto (Chrome trace JSON) picture of a system of simulated NPUs.

* one process per device (``NPU 3``): a ``compute`` thread with a slice per launch (its stream: one after another),
  a ``collectives`` thread with a slice per collective it took part in and, inside it, one per phase of the
  algorithm, and a ``kernel traffic`` thread with what its kernels stored into and signalled on peers (and what
  peers' kernels stored into it);
* a ``links`` process with a thread per link (``HCCS 0->1``, ``RoCE 3 out``) and a slice per transfer on it;
* flow arrows from each transfer's sender to its receiver.

Timestamps are the system's simulated microseconds. ``save_system_chrome(system, path)`` writes a ``System``'s;
``save_records_chrome(records, launches, path)`` what a trace session saw (``Session.save_chrome``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DvmError
from ..npu.commstats import link_key

LINKS_PID = 5
_COMPUTE, _COLL, _KERNEL = 1, 2, 3
_EPS = 1e-4  # us: flow ends inside their slices


def _pid(rank: int) -> int:
    return 10 + int(rank)


def _meta(events, pid, tid, name, value):
    e = {"ph": "M", "pid": pid, "name": name, "args": {"name" if "name" in name else "sort_index": value}}
    if tid is not None:
        e["tid"] = tid
    events.append(e)


def _slice(events, name, cat, pid, tid, start, end, args=None):
    events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": round(start, 6),
                   "dur": round(max(end - start, 0.0), 6), "args": args or {}})


def trace_events(launches: list, records: list, topology, ranks=None, profile_name: str = "") -> dict:
    """The trace of ``launches`` (``(rank, name, start_us, end_us, args)``) and ``records`` (``CommRecord``s)."""
    events: list = []
    seen = set(ranks or [])
    seen |= {x[0] for x in launches}
    for r in records:
        seen |= set(r.ranks) | {t.src for t in r.transfers} | {t.dst for t in r.transfers}
    for rank in sorted(seen):
        pid = _pid(rank)
        _meta(events, pid, None, "process_name", f"NPU {rank}" + (f" ({profile_name})" if profile_name else ""))
        _meta(events, pid, None, "process_sort_index", rank)
        for tid, name in ((_COMPUTE, "compute"), (_COLL, "collectives"), (_KERNEL, "kernel traffic")):
            _meta(events, pid, tid, "thread_name", name)
            _meta(events, pid, tid, "thread_sort_index", tid)
    for rank, name, start, end, args in launches:
        _slice(events, name, "launch", _pid(rank), _COMPUTE, start, end, args)
    _meta(events, LINKS_PID, None, "process_name", "links")
    _meta(events, LINKS_PID, None, "process_sort_index", 10_000)
    lanes: dict = {}  # link -> [end of each lane]
    tids: dict = {}
    flow = 0
    for r in records:
        args = {"algorithm": r.algorithm, "ranks": list(r.ranks), "bytes": r.nbytes, "seq": r.seq,
                "link_bound_us": round(r.bound_us, 3)}
        if r.op == "remote":
            senders = {t.src for t in r.transfers}
            for rank in senders:
                _slice(events, f"remote stores of {r.algorithm}", "remote", _pid(rank), _KERNEL, r.start_us,
                       r.end_us, args)
        else:
            for rank in r.ranks:
                _slice(events, r.op, "collective", _pid(rank), _COLL, r.start_us, r.end_us, args)
                for name, s, e in r.phases:
                    _slice(events, name, "phase", _pid(rank), _COLL, s, e)
        for t in r.transfers:
            key = link_key(t, topology)
            ends = lanes.setdefault(key, [])
            lane = next((i for i, e in enumerate(ends) if e <= t.start_us + 1e-9), len(ends))
            if lane == len(ends):
                ends.append(t.end_us)
            else:
                ends[lane] = t.end_us
            label = f"{key[0]} {key[1]}->{key[2]}" if key[2] != "out" else f"{key[0]} {key[1]} out"
            tkey = (key, lane)
            if tkey not in tids:
                tids[tkey] = len(tids) + 1
                _meta(events, LINKS_PID, tids[tkey], "thread_name", label + (f" #{lane + 1}" if lane else ""))
                _meta(events, LINKS_PID, tids[tkey], "thread_sort_index", tids[tkey])
            _slice(events, f"{r.op} #{r.seq}", "transfer", LINKS_PID, tids[tkey], t.start_us, t.end_us,
                   {"bytes": t.nbytes, "from": t.src, "to": t.dst})
            if t.src == t.dst or t.end_us <= t.start_us:
                continue
            tid = _KERNEL if r.op == "remote" else _COLL
            if r.op == "remote":  # the receiver's side of a kernel's traffic
                _slice(events, f"remote stores from NPU {t.src}", "remote", _pid(t.dst), _KERNEL, t.start_us,
                       t.end_us, {"bytes": t.nbytes})
            flow += 1
            mid = min(t.start_us + _EPS, t.end_us)
            events.append({"ph": "s", "id": flow, "name": "send", "cat": "flow", "pid": _pid(t.src), "tid": tid,
                           "ts": round(mid, 6)})
            events.append({"ph": "f", "bp": "e", "id": flow, "name": "send", "cat": "flow", "pid": _pid(t.dst),
                           "tid": tid, "ts": round(max(t.end_us - _EPS, mid), 6)})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"dvmlang": "system", "topology": topology.name, "profile": profile_name}}


def _launch_rows(device) -> list:
    return [(device.rank, e[1].name, e[2], e[3], {"cycles": int(e[1].cycles), "grid": list(e[1].grid)})
            for e in device.events if e[0] == "launch"]


def system_trace(system) -> dict:
    launches = [row for d in system.devices for row in _launch_rows(d)]
    return trace_events(launches, system.records, system.topology, range(len(system)), system.profile.name)


def _write(trace: dict, path) -> Path:
    path = Path(path)
    try:
        path.write_text(json.dumps(trace))
    except OSError as e:
        raise DvmError(f"cannot write the trace to {path}: {e.strerror or e}") from None
    return path


def save_system_chrome(system, path) -> Path:
    """Write ``system``'s devices, collectives and links as a Perfetto trace; returns the path."""
    return _write(system_trace(system), path)


def save_records_chrome(records, launches, path) -> Path:
    """Write what a trace session saw: its systems' collectives, and its launches that ran on a system's device."""
    from ..npu.topology import get_topology
    rows = [(r.rank, r.name, r.start_us, r.start_us + r.time_us, {"cycles": int(r.cycles)})
            for r in launches if getattr(r, "rank", None) is not None and getattr(r, "start_us", None) is not None]
    topology = next((r.topology for r in records if r.topology is not None), None) or get_topology(None)
    return _write(trace_events(rows, list(records), topology), path)
