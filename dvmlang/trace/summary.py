"""The summary view: cycles and time, waves, bytes and bandwidth against the HBM roofline, compute against
the vector and cube peaks, per-pipe utilisation, and what bounds the kernel."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .stats import PIPE_NAMES, analyse, fmt_bytes

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def hbar(fraction: float, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``fraction`` (eighth-cell resolution)."""
    f = min(max(fraction, 0.0), 1.0) * width
    full = int(f)
    rest = int(round((f - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    s = "█" * full + (_EIGHTHS[rest] if rest and full < width else "")
    return s.ljust(width)


def trace_note(launch) -> str:
    """What was recorded: every row, a sample, a truncated prefix, or totals only."""
    tr = launch.trace
    if tr is None:
        return "not traced"
    if tr.summary_only:
        return "summary only (exact totals, no rows)"
    parts = [f"{len(tr):,} rows from {tr.recorded_programs:,} of {tr.programs:,} programs"]
    if tr.sampled > 1:
        parts.append(f"sampled every {tr.sampled}th program")
    if tr.truncated:
        parts.append("truncated at max_events")
    parts.append(f"{len(tr.flow_src):,} set->wait pairs")
    return "; ".join(parts)


def summary_view(launch) -> Group:
    a = analyse(launch)
    p = launch.profile
    title = Text(f"{launch.name}  grid={tuple(launch.grid)}  on {p.name}", style="bold")
    if getattr(launch, "group", None):
        title.append(f"  fusion group {launch.group}")
    kv = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    kv.add_column(style="bold", no_wrap=True)
    kv.add_column()
    kv.add_row("cycles", Text(f"{a.cycles:,} = {a.time_us:.2f} us at {p.clock_hz / 1e9:.1f} GHz "
                              f"(launch overhead {a.overhead:,}, programs {a.body:,.0f})"))
    kv.add_row("programs", Text(f"{a.programs:,} on {a.cores} {a.core_kind} cores in {a.waves} wave(s)"
                                + (f", the last with {a.last_wave}" if a.waves > 1 else "")
                                + f"; UB double buffering {'on' if launch.double_buffer else 'off'}"))
    kv.add_row("instructions", Text(f"{a.instructions:,} executed"))
    kv.add_row("bytes moved", Text(f"{fmt_bytes(a.bytes_read)} read, {fmt_bytes(a.bytes_written)} written"))
    kv.add_row("HBM and L2", Text(f"{fmt_bytes(a.hbm_bytes)} crossed HBM"
                                  + (f" (with {fmt_bytes(a.writeback_bytes)} of earlier launches' dirty L2 lines "
                                     "written back)" if a.writeback_bytes else "")
                                  + f"; L2 hits {fmt_bytes(a.l2_hit_bytes)}"))
    kv.add_row("bandwidth", Text(f"{a.bandwidth / 1e9:,.1f} GB/s over the launch ({a.body_bandwidth / 1e9:,.1f} GB/s "
                                 f"while programs run) = {100 * a.roofline_fraction:.1f}% of the "
                                 f"{p.hbm_bytes_per_s / 1e12:.2f} TB/s nominal HBM rate "
                                 f"({p.hbm_bytes_per_cycle * p.clock_hz / 1e12:.2f} TB/s sustained)"))
    if launch.trace is not None and launch.trace.step_count is not None:
        kv.add_row("vector", Text(f"{a.vector_work:,.0f} repeats of {p.vector_bytes_per_cycle} B = "
                                  f"{100 * a.vector_peak_fraction:.1f}% of peak ({a.cores} cores x "
                                  f"{p.vector_bytes_per_cycle} B/cycle)"))
        kv.add_row("cube", Text(f"{a.cube_macs:,.0f} MACs = {100 * a.cube_peak_fraction:.1f}% of the fp16 peak "
                                f"({a.cores} cores x {p.cube_macs_per_cycle:,} MAC/cycle)" if a.cube_macs else
                                "not used"))
    stretch = float(getattr(launch, "hbm_stretch", 1.0) or 1.0)
    if stretch > 1.0:
        kv.add_row("HBM limit", Text(f"together the cores asked for more than HBM delivers: the device slowed every "
                                     f"program down x{stretch:.2f} (the timeline and Chrome rows show it)"))
    top = a.bounds[0]
    kv.add_row("bound by", Text(f"{top.name}: {top.why}"))
    kv.add_row("trace", Text(trace_note(launch)))

    pipes = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=None, show_edge=False)
    pipes.add_column("pipe", no_wrap=True)
    pipes.add_column("busy cycles", justify="right", no_wrap=True)
    pipes.add_column("utilisation", justify="right", no_wrap=True)
    pipes.add_column("", no_wrap=True)
    for name in PIPE_NAMES:
        busy = a.busy[name]
        if busy <= 0:
            continue
        u = a.utilisation[name]
        pipes.add_row(Text(name), f"{busy:,.0f}", f"{100 * u:.1f}%", Text(hbar(u, 20), style="cyan"))

    bounds = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    bounds.add_column("what limits the kernel", no_wrap=True)
    bounds.add_column("cycles", justify="right", no_wrap=True)
    bounds.add_column("of total", justify="right", no_wrap=True)
    bounds.add_column("from")
    for b in a.bounds:
        if b.cycles <= 0:
            continue
        bounds.add_row(Text(b.name), f"{b.cycles:,.0f}", f"{100 * b.cycles / max(1, a.cycles):.0f}%", Text(b.why))
    return Group(title, kv, Text(""), pipes, bounds)
