"""The ``comm`` view: what simulated NPUs said to each other. One row per collective (and per kernel's remote
traffic: op ``remote``, the kernel as its algorithm) with its algorithm, ranks, bytes, time, algorithm bandwidth
(HCCL Test's: the data size over the time) and the bound of its busiest link at line rate; then one row
per link (HCCS pair, or a port's direction) with the bytes it carried, how long it was busy and its utilisation of
the line rate over the span of the records; then, per rank, its time and bytes in communication.

``comm_view(records, topology)`` reads ``npu.collectives.CommRecord``s (``Session.comm``, ``System.records``)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..npu.commstats import link_table


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def _ranks(ranks) -> str:
    r = list(ranks)
    if len(r) > 2 and r == list(range(r[0], r[0] + len(r))):
        return f"{r[0]}-{r[-1]}"
    return ",".join(str(x) for x in r)


def comm_view(records, topology=None, max_rows: int = 40):
    """The renderable: collectives, links and ranks of ``records``."""
    records = list(records)
    if not records:
        return Text("(no communication recorded)")
    if topology is None:
        from ..npu.topology import get_topology
        topology = next((r.topology for r in records if r.topology is not None), None) or get_topology(None)
    t0 = min(r.start_us for r in records)
    span = max(r.end_us for r in records) - t0
    ops = Table(title=Text(f"communication: {len(records)} record(s) over {span:,.1f} us"), show_edge=False)
    for col, just in (("#", "right"), ("op", "left"), ("algorithm", "left"), ("ranks", "left"),
                      ("bytes", "right"), ("start us", "right"), ("us", "right"), ("GB/s", "right"),
                      ("bound us", "right")):
        ops.add_column(col, justify=just, no_wrap=col not in ("algorithm", "ranks"))
    for i, r in enumerate(records[:max_rows]):
        bw = f"{r.alg_bandwidth / 1e9:,.1f}" if r.time_us > 0 and r.op != "remote" else "-"
        ops.add_row(str(i), Text(r.op), Text(r.algorithm), _ranks(r.ranks), _bytes(r.nbytes),
                    f"{r.start_us - t0:,.2f}", f"{r.time_us:,.2f}", bw, f"{r.bound_us:,.2f}" if r.bound_us else "-")
    if len(records) > max_rows:
        ops.add_row("", Text(f"... {len(records) - max_rows} more"), "", "", "", "", "", "", "")
    links = Table(title=Text("links"), show_edge=False)
    for col, just in (("link", "left"), ("bytes", "right"), ("busy us", "right"), ("utilisation", "right")):
        links.add_column(col, justify=just, no_wrap=True)
    table = link_table(records, topology)
    for key in sorted(table, key=lambda k: (k[0], k[1], str(k[2]))):
        e = table[key]
        name = f"{key[0]} {key[1]} -> {key[2]}" if key[2] != "out" else f"{key[0]} {key[1]} out"
        util = e["bytes"] / (e["line_bytes_per_s"] * span * 1e-6) if span > 0 else 0.0
        links.add_row(Text(name), _bytes(e["bytes"]), f"{e['busy_us']:,.2f}", f"{100 * util:.1f}%")
    per_rank: dict = {}
    for r in records:
        for rank in r.ranks:
            e = per_rank.setdefault(rank, [0.0, 0.0])
            e[0] += r.time_us if r.op != "remote" else 0.0
        for t in r.transfers:
            per_rank.setdefault(t.src, [0.0, 0.0])[1] += t.nbytes
    ranks = Table(title=Text("ranks"), show_edge=False)
    for col in ("rank", "in collectives us", "sent"):
        ranks.add_column(col, justify="right", no_wrap=True)
    for rank in sorted(per_rank):
        ranks.add_row(str(rank), f"{per_rank[rank][0]:,.2f}", _bytes(per_rank[rank][1]))
    return Group(ops, Text(""), links, Text(""), ranks)
