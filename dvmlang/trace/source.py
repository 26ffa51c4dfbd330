"""The source view: the kernel's source with each line's share of the cycles, the hot spots ranked, and
under every line the virtual instructions it became."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .stats import fmt_bytes, fmt_count, line_stats, short_file
from .summary import hbar

PIPE_STYLE = {"SCALAR": "yellow", "MTE2": "blue", "VECTOR": "green", "CUBE": "red", "MTE1": "cyan",
              "FIXP": "bright_blue", "MTE3": "magenta"}


def one_line(text: str, style: str = "") -> Text:
    """User text for a table cell: literal (never markup), cut with an ellipsis instead of wrapping."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _share(c: float, total: float) -> str:
    return f"{100 * c / total:.1f}%" if total else "-"


def hot_spots(launch, top: int = 5) -> Table:
    tr = launch.trace
    lines, total = line_stats(tr)
    ranked = sorted((s for s in lines if s.cycles > 0), key=lambda s: (-s.cycles, s.line or 0))[:top]
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), title_justify="left",
              title=Text(f"hot spots (top {len(ranked)} of {sum(1 for s in lines if s.cycles > 0)} lines)"))
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("line", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    t.add_column("cycles", justify="right", no_wrap=True)
    t.add_column("mostly", no_wrap=True)
    t.add_column("source", overflow="ellipsis", min_width=10)
    for i, s in enumerate(ranked, 1):
        main = s.main_pipe
        t.add_row(str(i), str(s.line) if s.line is not None else "-", _share(s.cycles, total), fmt_count(s.cycles),
                  Text(f"{main} {100 * s.pipes[main] / s.cycles:.0f}%" if main else "", style=PIPE_STYLE.get(main, "")),
                  one_line(s.text.strip() if s.line is not None else "(prologue: no source line)"))
    return t


def source_view(launch, top: int = 5, instructions: bool = True) -> Group:
    """``top`` hot spots, then the whole kernel source; ``instructions=False`` hides the per-line rows."""
    tr = launch.trace
    title = Text(f"{launch.name}: source", style="bold")
    if tr is None or tr.step_count is None:
        return Group(title, Text("(launch was not traced)"))
    lines, total = line_stats(tr)
    title.append(f"  {total:,.0f} cycles of instructions over {tr.programs:,} programs", style="")
    note = Text("share: a line's instruction cycles, all pipes and programs, of the total", style="dim")
    by_line = {(s.file, s.line): s for s in lines}
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    t.add_column("line", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True)
    t.add_column("cycles", justify="right", no_wrap=True)
    t.add_column(Text("source, and its instructions: pipe opcode pc runs bytes", no_wrap=True,
                      overflow="ellipsis"), overflow="ellipsis", min_width=20)
    peak = max((s.cycles for s in lines), default=0.0) or 1.0

    def add_line(s, number: str, text: Text):
        if s is None or s.cycles <= 0:
            t.add_row(Text(number, style="dim"), "", "", "", text)
            return
        t.add_row(number, _share(s.cycles, total), Text(hbar(s.cycles / peak, 8), style="red"),
                  fmt_count(s.cycles), text)
        if instructions:
            for st in s.steps:
                n = int(tr.step_count[st.index])
                if n == 0:
                    continue
                c = float(tr.step_cycles[st.index])
                nb = float(tr.step_bytes[st.index])
                info = one_line("    ")
                info.append(f"{st.pipe_name:<6} ", style=PIPE_STYLE.get(st.pipe_name, ""))
                info.append(f"{st.name:<12} pc {st.pc:<4} x{n:,}")
                if nb:
                    info.append(f"  {fmt_bytes(nb)}")
                t.add_row("", Text(_share(c, total), style="dim"), "", Text(fmt_count(c), style="dim"),
                          info)

    files = []
    for s in lines:
        if s.file is not None and s.file not in files:
            files.append(s.file)
    pro = by_line.get((None, None))
    if pro is not None and pro.cycles > 0:
        add_line(pro, "-", one_line("(prologue: no source line)", style="italic"))
    for f in files:
        if len(files) > 1:
            t.add_row("", "", "", "", one_line(f"# {short_file(f)}", style="bold"))
        src = tr.source.get(f)
        traced = sorted(s.line for s in lines if s.file == f and s.line is not None)
        if src is None:
            for ln in traced:
                add_line(by_line[(f, ln)], str(ln), one_line("(source not available)", style="italic"))
            continue
        first, text = src
        lo, hi = first, first + len(text) - 1
        if first == 1:  # the whole file: show the traced lines and what lies between them
            lo, hi = traced[0], traced[-1]
        else:  # the kernel's own text (maybe with context above it): start at its decorators
            lo = _function_start(text, first, traced[0] if traced else hi)
        while lo < hi and not text[lo - first].strip():
            lo += 1
        while hi > lo and not text[hi - first].strip():
            hi -= 1
        for ln in range(lo, hi + 1):
            add_line(by_line.get((f, ln)), str(ln), one_line(text[ln - first].rstrip()))
        outside = [ln for ln in traced if not lo <= ln <= hi]  # e.g. an inlined helper kernel
        if outside:
            t.add_row("", "", "", "", Text("...", style="dim"))
            for ln in outside:
                add_line(by_line[(f, ln)], str(ln), one_line(tr.source_line(f, ln).rstrip()))
    return Group(title, note, hot_spots(launch, top), t)


def _function_start(text: list[str], first: int, limit: int) -> int:
    """The line where the kernel function begins (its first decorator), at or before line ``limit``."""
    for i in range(min(limit - first, len(text) - 1), -1, -1):
        stripped = text[i].lstrip()
        if stripped.startswith(("def ", "async def ")):
            while i > 0 and text[i - 1].lstrip().startswith("@"):
                i -= 1
            return first + i
    return first
