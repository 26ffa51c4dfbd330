"""Two launches side by side (for example the same kernel with BLOCK=512 and BLOCK=1024): the summary
figures, per-pipe utilisation, and — when both run the same source — each line's cycles."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .source import one_line
from .stats import PIPE_NAMES, analyse, fmt_bytes, fmt_count, line_stats


def _label(launch) -> str:
    return f"{launch.name} grid={tuple(launch.grid)}"


def _ratio(a: float, b: float) -> str:
    if a == 0 and b == 0:
        return ""
    if a == 0:
        return "new"
    return f"x{b / a:.2f}"


def compare_view(a, b, labels=None, top: int = 8) -> Group:
    """``a`` and ``b`` are ``LaunchRecord``s; ``labels`` names the two columns (default: name and grid)."""
    la, lb = labels or (_label(a), _label(b))
    if la == lb:
        la, lb = f"A: {la}", f"B: {lb}"
    A, B = analyse(a), analyse(b)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1),
              title=Text(f"compare: {la}  vs  {lb}", style="bold"), title_justify="left")
    t.add_column("", no_wrap=True, style="bold")
    t.add_column(Text(la), justify="right", overflow="fold")
    t.add_column(Text(lb), justify="right", overflow="fold")
    t.add_column("B / A", justify="right", no_wrap=True)

    def row(name, x, y, fx, ratio=True):
        t.add_row(name, Text(fx(x)), Text(fx(y)), _ratio(x, y) if ratio else "")

    row("cycles", A.cycles, B.cycles, lambda v: f"{v:,}")
    row("time (us)", A.time_us, B.time_us, lambda v: f"{v:,.2f}")
    row("programs", A.programs, B.programs, lambda v: f"{v:,}")
    row("waves", A.waves, B.waves, lambda v: f"{v:,}")
    row("instructions", A.instructions, B.instructions, lambda v: f"{v:,}")
    row("bytes moved", A.bytes_read + A.bytes_written, B.bytes_read + B.bytes_written, fmt_bytes)
    row("bandwidth (GB/s)", A.bandwidth / 1e9, B.bandwidth / 1e9, lambda v: f"{v:,.1f}")
    row("HBM roofline", A.roofline_fraction, B.roofline_fraction, lambda v: f"{100 * v:.1f}%")
    row("vector peak", A.vector_peak_fraction, B.vector_peak_fraction, lambda v: f"{100 * v:.1f}%")
    if A.cube_macs or B.cube_macs:
        row("cube peak", A.cube_peak_fraction, B.cube_peak_fraction, lambda v: f"{100 * v:.1f}%")
    for name in PIPE_NAMES:
        if A.busy[name] or B.busy[name]:
            row(f"{name} busy", A.utilisation[name], B.utilisation[name], lambda v: f"{100 * v:.1f}%")
    t.add_row("bound by", Text(A.bound), Text(B.bound), "")
    parts = [t]
    lines = _line_table(a, b, la, lb, top)
    if lines is not None:
        parts.append(lines)
    return Group(*parts)


def _line_table(a, b, la, lb, top):
    ta, tb = a.trace, b.trace
    if ta is None or tb is None or ta.step_count is None or tb.step_count is None:
        return None
    sa, total_a = line_stats(ta)
    sb, total_b = line_stats(tb)
    ka = {(s.file, s.line): s for s in sa if s.line is not None}
    kb = {(s.file, s.line): s for s in sb if s.line is not None}
    common = set(ka) & set(kb)
    if not common:
        return None
    ranked = sorted(common, key=lambda k: (-(ka[k].cycles + kb[k].cycles), k[1]))[:top]
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), title_justify="left",
              title=Text(f"cycles per source line (the {len(ranked)} busiest of {len(common)} shared lines)"))
    t.add_column("line", justify="right", no_wrap=True)
    t.add_column("A cycles", justify="right", no_wrap=True)
    t.add_column("B cycles", justify="right", no_wrap=True)
    t.add_column("B / A", justify="right", no_wrap=True)
    t.add_column("source", overflow="ellipsis", min_width=10)
    for k in sorted(ranked, key=lambda k: k[1]):
        x, y = ka[k].cycles, kb[k].cycles
        t.add_row(str(k[1]), fmt_count(x), fmt_count(y), _ratio(x, y), one_line(ka[k].text.strip()))
    return t
