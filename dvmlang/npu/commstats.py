"""What a system's communication amounted to: per device, compute and communication time and the bytes it sent;
per link (a directed HCCS link, or a port's direction), the bytes it carried, how long it was busy and its
utilisation of the line rate over the run (``System.summary()``, the ``comm`` trace view)."""

from __future__ import annotations


def link_key(t, topology) -> tuple:
    """The link a transfer uses: ``(fabric, src, dst)`` for a mesh link, ``(fabric, src, "out")`` for a port."""
    fab = topology.fabric(t.src, t.dst)
    return (fab.name, t.src, t.dst) if fab.kind == "mesh" else (fab.name, t.src, "out")


def link_table(records, topology) -> dict:
    """link -> {"bytes", "busy_us", "line_bytes_per_s"} over ``records``."""
    out: dict = {}
    for rec in records:
        for t in rec.transfers:
            k = link_key(t, topology)
            fab = topology.fabric(t.src, t.dst)
            e = out.setdefault(k, {"bytes": 0.0, "busy_us": 0.0, "line_bytes_per_s": fab.line_bytes_per_s})
            e["bytes"] += t.nbytes
            e["busy_us"] += t.end_us - t.start_us
    return out


def summarize(system) -> dict:
    """``{"devices": [...], "links": {...}, "collectives": n, "span_us": ...}`` of a ``System``."""
    span = system.now_us
    devices = []
    for d in system.devices:
        compute = sum(e[3] - e[2] for e in d.events if e[0] == "launch")
        devices.append({"rank": d.rank, "compute_us": compute, "comm_us": d.comm_us, "comm_bytes": d.comm_bytes,
                        "clock_us": d.clock_us, "launches": sum(1 for e in d.events if e[0] == "launch"),
                        "collectives": sum(1 for e in d.events if e[0] == "comm"),
                        "memory_bytes": d.memory_used})
    links = link_table(system.records, system.topology)
    for e in links.values():
        e["utilisation"] = e["bytes"] / (e["line_bytes_per_s"] * span * 1e-6) if span > 0 else 0.0
    return {"devices": devices, "links": links, "collectives": len(system.records), "span_us": span}
