"""Seeing a system of simulated NPUs: the Perfetto export (a process per device, a thread per link, flows from each
send to its receive) and the comm view (collectives, links with their utilisation, ranks)."""

import json

import numpy as np
from rich.console import Console

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import System
from dvmlang.trace.system_chrome import save_system_chrome, system_trace


@dvmlang.kernel
def _twice(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def _system():
    s = System(4)
    xs = [np.full(4096, r, np.float32) for r in range(4)]
    outs = [np.zeros_like(x) for x in xs]
    s.spmd(lambda r: _twice[(4,)](xs[r], outs[r], 4096, BLOCK=1024))
    s.all_reduce(outs)
    s.send(xs[0], 0, 3)
    return s


def test_perfetto_export_has_a_process_per_device_link_tracks_and_flows(tmp_path):
    s = _system()
    path = save_system_chrome(s, tmp_path / "sys.json")
    tr = json.loads(path.read_text())
    ev = tr["traceEvents"]
    procs = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert {"NPU 0 (910B2-like)", "NPU 3 (910B2-like)", "links"} <= procs
    threads = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert {"compute", "collectives", "kernel traffic", "HCCS 0->3", "HCCS 3->0"} <= threads
    launches = [e for e in ev if e["ph"] == "X" and e["cat"] == "launch"]
    assert len(launches) == 4 and all(e["name"] == "_twice" for e in launches)
    colls = [e for e in ev if e["ph"] == "X" and e["cat"] == "collective"]
    assert {e["name"] for e in colls} == {"all_reduce", "send"}
    # the all-reduce starts where the launches end: the clocks met
    assert min(e["ts"] for e in colls if e["name"] == "all_reduce") >= max(e["ts"] + e["dur"] for e in launches) - 1e-6
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    send = [i for i, e in starts.items() if e["pid"] == 10 and ends[i]["pid"] == 13 and e["ts"] > 8]
    assert send, "a flow from NPU 0 to NPU 3 for the send"
    assert all(ends[i]["ts"] >= starts[i]["ts"] for i in starts)
    assert tr["otherData"]["topology"] == "910B"


def test_a_trace_session_records_the_collectives_and_shows_the_comm_view():
    with dvmlang.trace() as t:
        s = _system()
    assert [r.op for r in t.comm] == ["all_reduce", "send"] and len(t.launches) == 4
    assert {launch.rank for launch in t.launches} == {0, 1, 2, 3}
    c = Console(record=True, width=120, color_system=None)
    t.print("comm", console=c)
    text = c.export_text()
    assert "communication: 2 record(s)" in text and "all_reduce" in text and "mesh one-shot" in text
    assert "HCCS 0 -> 3" in text and "utilisation" in text and "in collectives us" in text
    tr = system_trace(s)
    assert len([e for e in tr["traceEvents"] if e["ph"] == "X" and e["cat"] == "transfer"]) == 12 + 1
