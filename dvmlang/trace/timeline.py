"""The timeline view: per core, one row per pipe, each character a slice of time drawn as a block whose
height is how busy the pipe was in it; a row above marks where each program starts on the core."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from ..errors import DvmError
from .source import PIPE_STYLE
from .stats import PIPE_ORDER, busy_per_bin, nice_step, pipe_name

LEVELS = "▁▂▃▄▅▆▇█"
IDLE = "·"
LABEL = 9  # width of the row labels ("  VECTOR ")
DEFAULT_CORES = 4


def glyphs(fraction: np.ndarray) -> str:
    """One character per cell: idle, or a block from 1/8 to full height (any busy time shows)."""
    f = np.clip(fraction, 0.0, 1.0)
    idx = np.ceil(f * 8 - 1e-9).astype(int)
    return "".join(IDLE if i <= 0 else LEVELS[min(i, 8) - 1] for i in idx)


def resolve_range(tr, cycles) -> tuple[float, float]:
    span = max(tr.makespan, float(np.max(tr.end)) if len(tr) else 0.0, 1.0)
    if cycles is None:
        return 0.0, span
    try:
        lo, hi = (float(cycles[0]), float(cycles[1]))
    except (TypeError, ValueError, IndexError):
        raise DvmError(f"cycles must be a (start, end) pair of cycle counts, got {cycles!r}") from None
    if not (0 <= lo < hi):
        raise DvmError(f"cycle range {cycles!r} is empty or negative; give (start, end) with 0 <= start < end "
                       f"(this launch runs for {span:,.0f} cycles after its launch overhead)")
    if lo >= span:
        raise DvmError(f"cycle range {cycles!r} starts after the launch ends ({span:,.0f} cycles)")
    return lo, hi


def resolve_cores(tr, cores) -> list[int]:
    present = np.unique(tr.core) if len(tr) else np.zeros(0, dtype=int)
    if cores is None:
        return [int(c) for c in present[:DEFAULT_CORES]]
    if isinstance(cores, (int, np.integer)) and not isinstance(cores, bool):
        if cores < 1:
            raise DvmError(f"cores={cores} shows no core; give a count >= 1 or a list of core ids")
        return [int(c) for c in present[:cores]]
    try:
        chosen = [int(c) for c in cores]
    except (TypeError, ValueError):
        raise DvmError(f"cores must be a count or a list of core ids, got {cores!r}") from None
    bad = [c for c in chosen if not 0 <= c < tr.cores]
    if bad:
        raise DvmError(f"core {bad[0]} does not exist: this launch ran on cores 0-{tr.cores - 1}")
    return chosen


def _axis(lo: float, hi: float, cols: int) -> Text:
    """Cycle labels at round numbers, each starting at its column."""
    line = [" "] * cols
    step = nice_step(hi - lo, max(1, cols // 12))
    t = np.ceil(lo / step) * step
    free = 0
    while t <= hi:
        col = int((t - lo) / (hi - lo) * cols)
        label = f"{t:,.0f}"
        if col >= free and col + len(label) <= cols:
            line[col:col + len(label)] = label
            free = col + len(label) + 2
        t += step
    return Text(" " * LABEL + "".join(line), style="dim")


def _program_marks(tr, core: int, lo: float, hi: float, cols: int) -> str:
    """``pN`` where program N starts on this core (``|`` where a label does not fit)."""
    line = [" "] * cols
    if tr.program_start is None:
        return "".join(line)
    pids = np.arange(core, tr.programs, tr.cores)
    starts = tr.program_start[pids] if len(pids) else np.zeros(0)
    inside = (starts >= lo) & (starts < hi)
    free = 0
    for pid, s in zip(pids[inside].tolist(), starts[inside].tolist()):
        col = min(cols - 1, int((s - lo) / (hi - lo) * cols))
        label = f"p{pid}"
        if col >= free and col + len(label) <= cols:
            line[col:col + len(label)] = label
            free = col + len(label) + 1
        elif col >= free:
            line[col] = "|"
            free = col + 1
    return "".join(line)


def timeline_view(launch, cycles=None, cores=None, width: int = 100) -> Group:
    """Cores ``cores`` (a count: the first cores with recorded rows, default 4; or a list of ids) over the
    cycle range ``cycles=(start, end)`` (default: the whole launch after its overhead)."""
    tr = launch.trace
    title = Text(f"{launch.name}: timeline", style="bold")
    if tr is None:
        return Group(title, Text("(launch was not traced)"))
    if len(tr) == 0:
        why = "summary_only" if tr.summary_only else "max_events was reached before this launch"
        return Group(title, Text(f"(no rows recorded: {why}; the summary and source views are still exact)"))
    lo, hi = resolve_range(tr, cycles)
    chosen = resolve_cores(tr, cores)
    cols = max(10, width - LABEL)
    cell = (hi - lo) / cols
    edges = lo + (hi - lo) * np.arange(cols + 1) / cols
    used = [p for p in PIPE_ORDER if launch.pipe_busy.get(pipe_name(p), 0.0) > 0]
    core_col, pipe_col = tr.core, tr.pipe
    start, end = tr.start, tr.end
    title.append(f"  cycles {lo:,.0f}-{hi:,.0f} (after {tr.overhead:,} of launch overhead), "
                 f"cores {_fmt_ids(chosen)} of {tr.cores}", style="")
    parts = [title, _axis(lo, hi, cols)]
    for c in chosen:
        on_core = (core_col == c) & (end > lo) & (start < hi)
        parts.append(Text(f"core {c}", style="bold"))
        parts.append(Text(f"{'  prog':<{LABEL}}" + _program_marks(tr, c, lo, hi, cols), style="dim"))
        for p in used:
            sel = on_core & (pipe_col == p)
            frac = busy_per_bin(start[sel], end[sel], edges) / cell if sel.any() else np.zeros(cols)
            name = pipe_name(p)
            row = Text(f"  {name:<{LABEL - 2}}")
            row.append(glyphs(frac), style=PIPE_STYLE.get(name, ""))
            parts.append(row)
    notes = [f"1 column = {cell:,.1f} cycles", f"{LEVELS[-1]} busy all column", f"{LEVELS[3]} half",
             f"{LEVELS[0]} under 1/8", f"{IDLE} idle", "pN: program N starts"]
    if tr.sampled > 1:
        notes.append(f"only every {tr.sampled}th program recorded")
    if tr.truncated:
        notes.append("rows stop at max_events")
    parts.append(Text("legend: " + "   ".join(notes), style="dim"))
    return Group(*parts)


def _fmt_ids(ids: list[int]) -> str:
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(str(i) for i in ids) or "none"
