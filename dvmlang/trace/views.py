"""Terminal views of traced launches, built with ``rich``.

Bytecode and user text are always rendered as ``rich.text.Text`` (never markup), so ``ub[0:4096]``
keeps its brackets.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..errors import DvmError
from ..vm import isa

PIPE_ORDER = [isa.Pipe.SCALAR, isa.Pipe.MTE2, isa.Pipe.VECTOR, isa.Pipe.CUBE, isa.Pipe.MTE1, isa.Pipe.FIXPIPE,
              isa.Pipe.MTE3]


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def analyse(launch) -> dict:
    """The numbers the summary shows (also used by tests and the comparison view)."""
    p = launch.profile
    cycles = max(1, launch.cycles)
    body = max(1, cycles - launch.launch_overhead)
    cores = max(1, launch.cores)
    moved = launch.bytes_read + launch.bytes_written
    seconds = cycles / p.clock_hz
    bw = moved / seconds
    util = {name: busy / (cores * body) for name, busy in launch.pipe_busy.items()}
    mem_floor = moved / p.hbm_bytes_per_cycle
    vec_busy = launch.pipe_busy.get("VECTOR", 0.0) / cores
    cube_busy = launch.pipe_busy.get("CUBE", 0.0) / cores
    scalar_busy = launch.pipe_busy.get("SCALAR", 0.0) / cores
    dma_busy = max(launch.pipe_busy.get("MTE2", 0.0), launch.pipe_busy.get("MTE3", 0.0)) / cores
    candidates = {
        "memory (HBM / DMA)": max(mem_floor, dma_busy),
        "vector": vec_busy,
        "cube": cube_busy,
        "scalar decoding": scalar_busy,
        "launch overhead": float(launch.launch_overhead),
    }
    bound = max(candidates, key=candidates.get)
    return {"cycles": launch.cycles, "time_us": launch.time_us, "bytes": moved, "bandwidth": bw,
            "roofline_fraction": bw / p.hbm_bytes_per_s, "utilisation": util, "bound": bound,
            "waves": launch.waves, "cores": launch.cores, "memory_floor_cycles": mem_floor}


def summary_table(launch) -> Table:
    a = analyse(launch)
    p = launch.profile
    t = Table(title=Text(f"{launch.name}  grid={launch.grid}  on {p.name}"), show_header=False, box=None,
              pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("cycles", Text(f"{launch.cycles:,}  ({a['time_us']:.2f} us at {p.clock_hz / 1e9:.1f} GHz, "
                             f"launch overhead {launch.launch_overhead:,})"))
    t.add_row("programs", Text(f"{int(np.prod(launch.grid))} on {launch.cores} {launch.kind} cores in "
                               f"{launch.waves} wave(s); UB double buffering {'on' if launch.double_buffer else 'off'}"))
    t.add_row("bytes moved", Text(f"{_fmt_bytes(launch.bytes_read)} read, {_fmt_bytes(launch.bytes_written)} written"))
    t.add_row("bandwidth", Text(f"{a['bandwidth'] / 1e9:.1f} GB/s = {100 * a['roofline_fraction']:.1f}% of the "
                                f"{p.hbm_bytes_per_s / 1e12:.2f} TB/s HBM roofline"))
    util = "  ".join(f"{k} {100 * v:.0f}%" for k, v in a["utilisation"].items() if v > 0)
    t.add_row("pipe busy", Text(util or "-"))
    t.add_row("bound by", Text(a["bound"]))
    return t


def instruction_table(launch, max_rows: int = 60) -> Table:
    """Per-instruction totals over all programs, in program order, with source lines."""
    tr = launch.trace
    t = Table(title=Text(f"{launch.name}: instructions"), show_lines=False)
    for col, just in (("line", "right"), ("pc", "right"), ("pipe", "left"), ("opcode", "left"), ("count", "right"),
                      ("cycles", "right"), ("share", "right"), ("bytes", "right"), ("source", "left")):
        t.add_column(col, justify=just, no_wrap=col != "source")
    if tr is None or len(tr.step) == 0:
        t.add_row("", "", "", Text("(no rows recorded)"), "", "", "", "", "")
        return t
    n_steps = len(tr.steps)
    counts = np.bincount(tr.step, minlength=n_steps)
    cycles = np.bincount(tr.step, weights=tr.dur, minlength=n_steps)
    nbytes = np.bincount(tr.step, weights=tr.nbytes, minlength=n_steps)
    total = cycles.sum() or 1.0
    shown = 0
    for i, s in enumerate(tr.steps):
        if counts[i] == 0:
            continue
        if shown >= max_rows:
            t.add_row("", "", "", Text(f"... {int((counts > 0).sum()) - shown} more"), "", "", "", "", "")
            break
        src = _source_line(tr, s.file, s.line)
        t.add_row(str(s.line or ""), str(s.pc), isa.PIPE_NAMES[isa.Pipe(s.pipe)], Text(s.name), f"{counts[i]:,}",
                  f"{cycles[i]:,.0f}", f"{100 * cycles[i] / total:.1f}%",
                  _fmt_bytes(nbytes[i]) if nbytes[i] else "", Text(src.strip()))
        shown += 1
    return t


def _source_line(tr, file, line) -> str:
    if file is None or line is None:
        return ""
    src = tr.source.get(file)
    if src is None:
        return ""
    first, lines = src
    i = line - first
    return lines[i] if 0 <= i < len(lines) else ""


VIEWS = ("summary", "table")


def render(launches, view: str = "summary", console: Console | None = None, **kw) -> None:
    console = console or Console()
    launches = list(launches)
    if view not in VIEWS + ("all",):
        raise DvmError(f"unknown trace view {view!r}; choose one of {', '.join(VIEWS + ('all',))}")
    if not launches:
        console.print(Text("(no launches recorded)"))
        return
    for launch in launches:
        parts = []
        if view in ("summary", "all"):
            parts.append(summary_table(launch))
        if view in ("table", "all"):
            parts.append(instruction_table(launch, **kw))
        console.print(Group(*parts))
