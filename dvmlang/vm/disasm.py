"""A disassembler in the spirit of Python's ``dis``.

Columns: ``line | offset | pipe | OPNAME | operands | ; comment``, with the kernel's source lines
interleaved as the container embeds them (a file it names is never opened). Bad input never crashes it:
an undecodable word prints as ``<invalid 0x...>`` and disassembly goes on at the next word; a container
that cannot be parsed prints what could be read and where it stopped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..errors import BytecodeError
from . import container as C
from . import isa
from .decode import decode_one, sop_parts, tile_parts


@dataclass
class Disassembly:
    text: str
    ok: bool
    errors: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)  # (line, offset, pipe, name, operands, comment)

    def __str__(self) -> str:
        return self.text


def _fmt_tile(bc, v: int, space: str) -> str:
    addr, li = tile_parts(v)
    if li >= len(bc.layouts):
        return f"{space}[{addr:#x}] <layout {li}?>"
    d, shape = bc.layouts[li]
    n = 1
    for s in shape:
        n *= s
    dims = "x".join(str(s) for s in shape) or "scalar"
    return f"{space}[{addr:#x}:{addr + n * d.itemsize:#x}] {d.name}[{dims}]"


def _fmt_imm(bits: int, d: dt.DType | None) -> str:
    if d is None:
        return f"#{bits:#x}"
    raw = struct.pack("<Q", bits)[:d.itemsize]
    try:
        v = np.frombuffer(raw, dtype=d.np)[0] if not d.is_bool else bool(raw[0])
    except Exception:  # noqa: BLE001 - never fail while printing
        return f"#{bits:#x}"
    return f"#{v!r}" if d.is_bool else f"#{v}"


def _operands(bc, d, relocs) -> tuple[str, str]:
    ins = d.ins
    parts = []
    comments = []
    masked = d.vals.get("masked", 1)
    for f in ins.fields:
        v = d.vals[f.name]
        k = f.kind
        if f.name in ("mask",) and not masked:
            continue
        if f.name == "cmp" and not d.vals.get("has_cmp", 1):
            continue
        if f.name in ("value", "reg", "kind") and ins.family == "print":
            kind = d.vals["kind"]
            if (f.name == "value" and kind != 2) or (f.name == "reg" and kind != 1) or f.name == "kind":
                continue
        if k == "reg":
            parts.append(f"{f.name}=r{v}" if f.name not in ("rd", "ra", "rb", "rs", "rc") else f"r{v}")
        elif k == "tile":
            parts.append(f"{f.name}=" + _fmt_tile(bc, v, f.space))
        elif k in ("sop", "sop16"):
            is_reg, x = sop_parts(v, k)
            parts.append(f"{f.name}=" + (f"r{x}" if is_reg else f"#{x}"))
        elif k == "target":
            parts.append(f"-> {v}")
        elif k == "imm64":
            parts.append(_fmt_imm(v, d.dtype))
            if (d.pc + 1, 1) in relocs:
                comments.append(f"binds `{relocs[(d.pc + 1, 1)]}`")
        elif k == "gm":
            w = d.pc + next(wi for ff, (wi, _) in zip(ins.fields, ins.layout) if ff.name == "gm")
            name = relocs.get((w, 0))
            parts.append(f"gm=&{name}" if name else f"gm={v:#x}")
        elif k == "cc":
            parts.append(isa.CC_NAMES[v] if v < 6 else f"cc?{v}")
        elif k == "pipe":
            parts.append(f"{f.name}={isa.PIPE_NAMES.get(v, v) if v < 7 else v}")
        elif k == "u4" and f.name == "op":
            table = {"vreduce": isa.REDUCE_OPS, "vscan": isa.SCAN_OPS, "atomic": isa.ATOMIC_OPS}.get(ins.family)
            parts.append(table[v] if table and v < len(table) else f"op={v}")
        elif k == "u8" and f.name == "tensor":
            name = bc.params[v].name if v < len(bc.params) else f"param{v}"
            parts.append(f"tensor={name}")
        elif k == "u16" and f.name == "string":
            s = bc.strings[v] if v < len(bc.strings) else "?"
            parts.append(repr(s))
        elif k == "flag":
            if v:
                parts.append(f.name)
        else:
            parts.append(f"{f.name}={v}")
    if ins.family not in ("nop", "end", "jmp", "br", "set", "wait", "barrier", "pid", "nprog", "tdim") and d.dtype:
        comments.insert(0, d.dtype.name)
    if d.set is not None:
        comments.append(f"set {isa.PIPE_NAMES[isa.Pipe(int(ins.pipe))]}->{isa.PIPE_NAMES.get(d.set[0], d.set[0])} "
                        f"e{d.set[1]}")
    if d.wait is not None:
        comments.append(f"wait {isa.PIPE_NAMES.get(d.wait[0], d.wait[0])}->"
                        f"{isa.PIPE_NAMES[isa.Pipe(int(ins.pipe))]} e{d.wait[1]}")
    return ", ".join(parts), "; ".join(comments)


def disassemble(bc, *, source: bool = True, invalid_pc: int | None = None) -> Disassembly:
    """Disassemble a parsed ``Bytecode`` (validated or not)."""
    out: list[str] = []
    rows = []
    errors: list[str] = []
    relocs = {}
    for w, kind, p in bc.relocs:
        if p < len(bc.params):
            relocs[(w, kind)] = bc.params[p].name
    line_at = {}
    for pc, fi, line, col in bc.debug.lines:
        line_at[pc] = (fi, line)
    out.append(f"; dvmlang bytecode v{bc.major}.{bc.minor}  target {bc.target.name}  "
               f"flags {'checksum ' if bc.flags & C.FLAG_CHECKSUM else ''}{'sources' if bc.flags & C.FLAG_SOURCES else ''}")
    sig = ", ".join(f"{p.name}: {p.dtype.name}" + (f"[{'x'.join(map(str, p.shape))}]" if p.kind == "tensor" else "")
                    for p in bc.params)
    for k in bc.kernels:
        out.append(f"; kernel {k.name}({sig})  grid={k.grid}  {k.code_words} words  "
                   f"regs={len(k.reg_types)}  ub={k.footprint.get('ub', 0)}B"
                   f"{' double-buffered' if k.double_buffer else ''}{'  mix (cube+vector)' if k.mix else ''}")
        out.append(f"{'line':>5}  {'offset':>6}  {'pipe':<6} {'OPNAME':<14} operands")
        pc = k.code_start
        end = min(k.code_start + k.code_words, len(bc.code))
        cur_line = None
        while pc < end:
            loc = line_at.get(pc)
            if loc is not None and source and loc != cur_line:
                files = bc.debug.files
                text = bc.debug.line_text(files[loc[0]], loc[1]) if loc[0] < len(files) else ""
                if text:
                    out.append(f"{'':>5}  {'':>6}  ; {loc[1]}: {text.strip()}")
            if loc is not None:
                cur_line = loc
            line_txt = str(cur_line[1]) if cur_line else ""
            try:
                d = decode_one(bc.code, pc, end)
            except BytecodeError as e:
                word = bc.code[pc]
                out.append(f"{line_txt:>5}  {pc:>6}  {'?':<6} <invalid {word:#018x}>  ; {e.reason}")
                errors.append(f"pc {pc}: {e.reason}")
                rows.append((line_txt, pc, "?", "<invalid>", f"{word:#x}", e.reason))
                pc += 1
                continue
            ops, comment = _operands(bc, d, relocs)
            pipe = isa.PIPE_NAMES[isa.Pipe(int(d.ins.pipe))]
            marker = "  <-- invalid here" if invalid_pc == pc else ""
            out.append(f"{line_txt:>5}  {pc:>6}  {pipe:<6} {d.ins.name:<14} {ops}"
                       + (f"  ; {comment}" if comment else "") + marker)
            rows.append((line_txt, pc, pipe, d.ins.name, ops, comment))
            pc += d.ins.words
    return Disassembly("\n".join(out), not errors, errors, rows)
