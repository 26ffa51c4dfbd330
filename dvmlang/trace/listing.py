"""Instruction-level views: the disassembly (the disassembler's columns plus what each instruction cost)
and the per-instruction table."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from .source import PIPE_STYLE
from .stats import fmt_bytes, fmt_count


def _costs(tr):
    """pc -> (executions, cycles) from the exact per-instruction totals."""
    if tr is None or tr.step_count is None:
        return {}, 0.0
    total = float(tr.step_cycles.sum()) or 1.0
    return {s.pc: (int(tr.step_count[s.index]), float(tr.step_cycles[s.index])) for s in tr.steps}, total


DIS_HEADS = ("count", "cycles", "share", "line", "offset", "pipe", "OPNAME")


def disasm_view(launch, width: int = 100) -> Group:
    """The launch's bytecode as ``dvmlang disasm`` prints it (line | offset | pipe | OPNAME | operands |
    ; comment), source lines interleaved, with executions, cycles and share per instruction. Operands wrap
    with a hanging indent; when fewer than 40 columns are left for them they go on lines of their own."""
    from ..vm.disasm import disassemble
    title = Text(f"{launch.name}: disassembly", style="bold")
    bc = getattr(launch, "bytecode", None)
    if bc is None:
        return Group(title, Text("(no bytecode recorded for this launch)"))
    dis = disassemble(bc, source=False)
    tr = launch.trace
    costs, total = _costs(tr)
    pcs = sorted(costs)
    lo, hi = (pcs[0], pcs[-1]) if pcs else (None, None)
    heads = [ln[2:] for ln in dis.text.splitlines() if ln.startswith("; kernel")]
    out = [title]
    for h in heads if len(heads) == 1 else []:
        out.append(Text(h, style="dim"))
    source_of = {s.pc: (s.file, s.line) for s in tr.steps} if tr is not None else {}
    notes = _notes(tr)
    rows = []
    for line, offset, pipe, name, operands, comment in dis.rows:
        if lo is not None and not lo <= offset <= hi:
            continue  # another kernel of the same bytecode
        if offset in notes:
            comment = f"{comment}; {notes[offset]}" if comment else notes[offset]
        n, c = costs.get(offset, (0, 0.0))
        cells = (fmt_count(n) if costs else "", fmt_count(c) if costs else "",
                 f"{100 * c / total:.1f}%" if costs else "", str(line), str(offset), pipe, name)
        rows.append((offset, cells, operands + (f"  ; {comment}" if comment else "")))
    widths = [max([len(h)] + [len(r[1][i]) for r in rows]) for i, h in enumerate(DIS_HEADS)]
    right = {"count", "cycles", "share", "line", "offset"}

    def cells_text(values, bold=False) -> Text:
        t = Text()
        for i, (h, v) in enumerate(zip(DIS_HEADS, values)):
            if i:
                t.append("  ")
            style = "bold" if bold or h == "OPNAME" else PIPE_STYLE.get(v, "") if h == "pipe" else ""
            t.append(v.rjust(widths[i]) if h in right else v.ljust(widths[i]), style=style)
        return t

    indent = sum(widths) + 2 * len(widths)
    room = width - indent
    inline = room >= 40
    head = cells_text(DIS_HEADS, bold=True)
    head.append("  operands ; comment", style="bold")
    head.truncate(width, overflow="ellipsis")
    out.append(head)
    out.append(Text("─" * width, style="dim"))
    last_line = None
    for offset, values, ops in rows:
        loc = source_of.get(offset)
        if loc is not None and loc[1] is not None and loc != last_line:
            src = Text(" " * (indent if inline else 2) + f"; {loc[1]}: {tr.source_line(*loc).strip()}",
                       style="dim italic")
            src.truncate(width, overflow="ellipsis")
            out.append(src)
            last_line = loc
        line = cells_text(values)
        if inline:
            parts = _wrap(ops, room)
            line.append("  " + parts[0] if parts else "")
            out.append(line)
            out.extend(Text(" " * indent + p) for p in parts[1:])
        else:
            out.append(line)
            out.extend(Text("      " + p) for p in _wrap(ops, width - 6))
    return Group(*out)


def _notes(tr) -> dict:
    """pc -> the device's note on a step: where a DMA's bytes came from or went (L2 or HBM) and its unaligned
    bursts, or a cube <-> vector handoff through GM and its flag."""
    if tr is None:
        return {}
    from ..vm import isa
    out = dict(getattr(tr, "notes", {}) or {})
    for s in tr.steps:
        if isa.BY_NAME[s.name].cost.kind == "handoff" and s.latency:
            out[s.pc] = f"handoff through a GM workspace; the other core sees it {s.latency:,.0f} cycles later (flag)"
    return out


def _wrap(text: str, width: int) -> list[str]:
    """Break an operand list after its commas (never inside ``ub[...]`` unless it alone is too long)."""
    import textwrap
    return textwrap.wrap(text, width=max(10, width), break_on_hyphens=False) if text else []


def _columns(tr, max_rows: int):
    counts = tr.step_count
    cycles = tr.step_cycles
    total = float(cycles.sum()) or 1.0
    rows = []
    for s in tr.steps:
        if counts[s.index] == 0:
            continue
        rows.append((s, [str(s.line) if s.line is not None else "", str(s.pc), s.pipe_name, s.name,
                         fmt_count(counts[s.index]), fmt_count(cycles[s.index]),
                         f"{100 * cycles[s.index] / total:.1f}%",
                         fmt_bytes(tr.step_bytes[s.index]) if tr.step_bytes[s.index] else ""]))
    more = max(0, len(rows) - max_rows)
    return rows[:max_rows], more


HEADS = ("line", "pc", "pipe", "opcode", "count", "cycles", "share", "bytes")
RIGHT = {"line", "pc", "count", "cycles", "share", "bytes"}


def instruction_table(launch, max_rows: int = 60, width: int = 100) -> Group:
    """Every executed instruction with its totals over all programs, in program order. The source text goes
    in a last column cut with an ellipsis when it has room (at least 30 characters), else on a row of its
    own above the instructions of each line — it never wraps."""
    tr = launch.trace
    title = Text(f"{launch.name}: instructions", style="bold")
    if tr is None or tr.step_count is None:
        return Group(title, Text("(launch was not traced)"))
    rows, more = _columns(tr, max_rows)
    widths = [max([len(h)] + [len(r[1][i]) for r in rows]) for i, h in enumerate(HEADS)]
    fixed = sum(widths) + 2 * (len(widths) - 1)
    room = width - fixed - 2
    inline = room >= 30

    def cells(values, style_of=None) -> Text:
        out = Text()
        for i, (h, v) in enumerate(zip(HEADS, values)):
            if i:
                out.append("  ")
            cell = v.rjust(widths[i]) if h in RIGHT else v.ljust(widths[i])
            out.append(cell, style=(style_of or {}).get(h, ""))
        return out

    def src_text(s, room) -> Text:
        text = Text(tr.source_line(s.file, s.line).strip() or ("(prologue)" if s.line is None else ""))
        text.truncate(room, overflow="ellipsis")
        return text

    out = [title]
    head = cells(HEADS, {h: "bold" for h in HEADS})
    if inline:
        head.append("  ")
        head.append("source", style="bold")
    out.append(head)
    out.append(Text("─" * min(width, fixed + (room + 2 if inline else 0)), style="dim"))
    prev = object()
    for s, values in rows:
        key = (s.file, s.line)
        line = cells(values, {"pipe": PIPE_STYLE.get(s.pipe_name, "")})
        if inline:
            if key != prev:
                line.append("  ")
                line.append_text(src_text(s, room))
        elif key != prev:
            label = Text(f"{s.line}: " if s.line is not None else "", style="bold")
            label.append_text(src_text(s, width - len(label) - 1))
            label.stylize("italic")
            out.append(label)
        prev = key
        out.append(line)
    if more:
        out.append(Text(f"... {more} more instructions (max_rows={max_rows})", style="dim"))
    return Group(*out)
