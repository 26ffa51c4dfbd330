"""Generate ``docs/isa.md`` from the ISA table, and the generated blocks of ``docs/bytecode.md`` (opcode
table, head word, field kinds, dtype codes, sections, limits, an annotated example file).

    python -m dvmlang.vm.docgen            # rewrite docs/isa.md and the generated blocks of docs/bytecode.md
    python -m dvmlang.vm.docgen --check    # exit 1 if either is out of date

``docs/bytecode.md`` is prose written by hand around blocks fenced by ``<!-- generated: NAME -->`` and
``<!-- end generated -->``; only the blocks are rewritten. ``docs/isa.md`` is generated whole.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from .. import dtypes as dt
from . import container as C
from . import isa
from .families import FAMILIES

DOCS = Path(__file__).resolve().parents[2] / "docs"

DTYPE_RULES = {
    "any": "any dtype",
    "none": "no dtype: the field is not used (writers put 0; any valid code is accepted)",
    "float": "floating-point dtypes only",
    "int": "integer dtypes only",
    "intbool": "integer dtypes and int1",
    "num": "any dtype except int1 (the compare rows SCMP, VCMP, VCMPS also accept int1)",
}

LIMIT_TEXT = {
    "max_file_bytes": "bytes in a whole container",
    "max_sections": "sections, custom sections included",
    "max_code_words": "64-bit words in the code section, and in all kernels' code ranges together (each range is "
                      "validated, so kernels sharing code cannot multiply the work)",
    "max_strings": "entries in the symbol table (and files in the debug section)",
    "max_string_bytes": "bytes in one symbol or custom-section name",
    "max_source_bytes": "bytes of one embedded source file",
    "max_params": "parameters (an instruction names one in 8 bits)",
    "max_layouts": "tile layouts (a tile operand names one in 16 bits)",
    "max_rank": "dimensions of a tensor parameter or a layout",
    "max_layout_bytes": "bytes of one tile layout",
    "max_kernels": "kernels in one container",
    "max_registers": "scalar registers of a kernel (an operand names one in 8 bits)",
    "max_relocs": "relocation entries",
    "max_debug_entries": "line-table entries",
    "max_dim": "elements along one dimension of a tensor parameter",
    "max_grid": "programs of one kernel (grid product; the device runs at most 2**24 per launch)",
}

SECTION_TEXT = {
    "custom": "anywhere before the checksum, any number: a name, then bytes readers skip (and keep)",
    "target": "required: the device profile the bytecode was encoded for",
    "symbols": "required: every string the file uses, once each",
    "params": "required: the kernel signature with this instance's shapes and strides",
    "layouts": "required: tile layouts (dtype and shape) that tile operands name",
    "kernels": "required: name, grid, code range, register types, on-chip footprints, flags",
    "code": "required: the instruction words",
    "relocs": "required (may be empty): words patched with tensor addresses and scalar values",
    "debug": "optional: line table pc -> file:line:col, and embedded source text",
    "checksum": "present exactly when header flag bit 0 is set; always last: CRC-32 of everything before it",
}


# ---- helpers ----------------------------------------------------------------------------------------------


def _table(head: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
    return out


def _bits(lo: int, n: int) -> str:
    return f"{lo}" if n == 1 else f"{lo}-{lo + n - 1}"


def head_word_rows() -> list[list]:
    return [
        [_bits(0, isa.OPCODE_BITS), "opcode", "the row's opcode (below)"],
        [_bits(isa.PIPE_SHIFT, 3), "pipe", "the row's pipe: " + ", ".join(f"{int(p)} {isa.PIPE_NAMES[p]}"
                                                                        for p in isa.Pipe)],
        [_bits(isa.LEN_SHIFT, 3), "length - 1", f"the row's length in words (1-{isa.MAX_WORDS}) minus one"],
        [_bits(isa.SET_FLAG_SHIFT, 1), "set flag", "1: signal an event when this instruction completes"],
        [_bits(isa.SET_PIPE_SHIFT, 3), "set: target pipe", "the pipe the event is for (0 unless the set flag)"],
        [_bits(isa.SET_EVENT_SHIFT, 3), "set: event id", f"0-{isa.N_EVENTS - 1} (0 unless the set flag)"],
        [_bits(isa.WAIT_FLAG_SHIFT, 1), "wait flag", "1: wait for an event before this instruction starts"],
        [_bits(isa.WAIT_PIPE_SHIFT, 3), "wait: source pipe", "the pipe that sets the event (0 unless the wait flag)"],
        [_bits(isa.WAIT_EVENT_SHIFT, 3), "wait: event id", f"0-{isa.N_EVENTS - 1} (0 unless the wait flag)"],
        [_bits(isa.DTYPE_SHIFT, 4), "dtype code", "the instruction's dtype (table below); 0 where the row has none"],
        [_bits(isa.PAYLOAD_SHIFT, isa.PAYLOAD_BITS), "payload", "the row's head fields, packed from bit 40 up"],
    ]


def field_kind_rows() -> list[list]:
    return [[f"`{k}`", bits, desc] for k, (bits, desc) in isa.FIELD_KINDS.items()]


def dtype_rows() -> list[list]:
    return [[d.code, f"`{d.name}`", d.itemsize, d.np.name if d.np.name != "void" else str(d.np)] for d in dt.ALL]


def section_rows() -> list[list]:
    return [[sid, f"`{name}`", SECTION_TEXT[name]] for name, sid in C.SECTION_IDS.items()]


def limit_rows() -> list[list]:
    rows = []
    for f in fields(C.Limits):
        if f.name not in LIMIT_TEXT:
            raise KeyError(f"docgen: describe the new limit `{f.name}` in LIMIT_TEXT")
        v = f.default
        shown = f"{v:,}" if v < 1 << 20 else f"2^{v.bit_length() - 1}" if v & (v - 1) == 0 else f"{v:,}"
        rows.append([f"`{f.name}`", shown, LIMIT_TEXT[f.name]])
    return rows


def _layout_text(ins: isa.Instr) -> list[list]:
    rows = []
    for f, (w, shift) in zip(ins.fields, ins.layout):
        bits = ("bit " if f.bits == 1 else "bits ") + _bits(shift, f.bits)
        where = f"head {bits}" if f.head else f"word {w} {bits}"
        rows.append([f"`{f.name}`", f"`{f.kind}`", f.bits, where])
    return rows


def _extra_text(ins: isa.Instr) -> str:
    e = ins.extra
    parts = []
    if "op" in e:
        parts.append(f"operation `{e['op']}`")
    if "rank" in e:
        parts.append(f"rank {e['rank']}")
    if ins.family == "dma_load" and ins.spaces["dst"] != "ub":
        parts.append(f"memory space {ins.spaces['dst'].upper()}")
    if ins.family == "copy_space":
        parts.append(f"{ins.spaces['src'].upper()} -> {ins.spaces['dst'].upper()}")
    if "when" in e:
        parts.append("jumps when rc is " + ("not zero" if e["when"] else "zero"))
    for k, v in e.items():
        if k not in ("op", "rank", "when"):
            parts.append(f"{k} = {v}")
    return "; ".join(parts)


# ---- docs/isa.md ---------------------------------------------------------------------------------------------


def render_isa() -> str:
    out = [
        "# The dvmlang instruction set",
        "",
        "Generated by `python -m dvmlang.vm.docgen` from the ISA table in `dvmlang/vm/isa.py` — the single",
        "source the encoder, validator, device decoder, disassembler and cost model are derived from. Do not",
        "edit by hand. The container these instructions live in is specified in `docs/bytecode.md`.",
        "",
        f"{len(isa.TABLE)} instructions. Every instruction is a head word followed by 0-{isa.MAX_WORDS - 1} "
        "operand words, all little-endian 64-bit.",
        "",
        "## Head word",
        "",
        *_table(["bits", "field", "meaning"], head_word_rows()),
        "",
        "Head fields of a row are packed into the payload in declaration order, from bit 40 up. Operand fields",
        "are packed in declaration order into the operand words, low bits first; a field never straddles two",
        "words (it starts a new word instead) and 64-bit fields take a whole word. Every bit no field defines",
        "is reserved and must be 0 (a set bit is a malformed instruction).",
        "",
        "## Field kinds",
        "",
        *_table(["kind", "bits", "encoding"], field_kind_rows()),
        "",
        "## Dtype codes",
        "",
        *_table(["code", "dtype", "bytes", "numpy"], dtype_rows()),
        "",
        "## Dtype rules",
        "",
        *_table(["rule", "the row's dtype may be"], [[f"`{k}`", v] for k, v in DTYPE_RULES.items()]),
        "",
        "## Cost formulas",
        "",
        "Evaluated by the device with its profile (`docs/device.md` lists every constant).",
        "",
        *_table(["kind", "cycles"], [[f"`{k}`", isa.Cost(k, 1).describe().replace("1 cycle(s)", "k cycle(s)")
                                      .replace("+ 1 x", "+ k x").replace("1 cycles", "k cycles")]
                                     for k in sorted({ins.cost.kind for ins in isa.TABLE})]),
        "",
        "## Summary",
        "",
        *_table(["opcode", "name", "pipe", "words", "family"],
                [[f"`{ins.opcode:#06x}`", f"[{ins.name}](#{ins.name.lower()})", isa.PIPE_NAMES[ins.pipe],
                  ins.words, ins.family] for ins in isa.TABLE]),
        "",
        "## Instructions",
        "",
    ]
    for ins in isa.TABLE:
        out.append(f"### {ins.name}")
        out.append("")
        out.append(ins.doc)
        out.append("")
        out.append(f"* opcode `{ins.opcode:#06x}`, pipe {isa.PIPE_NAMES[ins.pipe]} ({int(ins.pipe)}), "
                   f"{ins.words} word{'s' if ins.words > 1 else ''}")
        out.append(f"* dtype rule `{ins.dtypes}`: {DTYPE_RULES[ins.dtypes]}")
        cost = ins.cost.describe()
        out.append(f"* cost: {cost}")
        extra = _extra_text(ins)
        if extra:
            out.append(f"* {extra}")
        out.append(f"* validator ({ins.family}): {FAMILIES[ins.family].checks}")
        out.append("")
        if ins.fields:
            out.extend(_table(["field", "kind", "bits", "where"], _layout_text(ins)))
            out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---- docs/bytecode.md blocks ----------------------------------------------------------------------------------


def example_container() -> bytes:
    """The smallest valid container: one kernel whose only instruction is END."""
    target = C.TargetInfo("910B2-like", 48, 24, 192 << 10, 512 << 10, 64 << 10, 64 << 10, 128 << 10)
    strings = ["k"]
    sid = {"k": 0}
    kernel = C.KernelInfo("k", (1, 1, 1), 0, 1, [], {s: 0 for s in C.SPACES})
    end = isa.BY_NAME["END"]
    head = end.opcode | (int(end.pipe) << isa.PIPE_SHIFT) | ((end.words - 1) << isa.LEN_SHIFT)
    body = b"".join([C.header(C.FLAG_CHECKSUM), C.section("target", C.encode_target(target)),
                     C.section("symbols", C.encode_symbols(strings)), C.section("params", C.encode_params([], sid)),
                     C.section("layouts", C.encode_layouts([])), C.section("kernels", C.encode_kernels([kernel], sid)),
                     C.section("code", head.to_bytes(8, "little")), C.section("relocs", C.encode_relocs([]))])
    return body + C.checksum_section(body)


def _hex(b: bytes) -> str:
    return " ".join(f"{x:02x}" for x in b)


def example_dump() -> list[str]:
    data = example_container()
    rows = [(0, 4, "magic `\\0dvm`"), (4, 1, f"major version {data[4]}"), (5, 1, f"minor version {data[5]}"),
            (6, 2, "flags: bit 0 (checksum)"), (8, 4, "CRC-32 of bytes 0-7")]
    pos = C.HEADER_SIZE
    while pos < len(data):
        sid = data[pos]
        r = C.Reader(data, pos + 1, len(data), "?")
        size = r.uleb(32)
        name = C.SECTION_NAMES[sid]
        rows.append((pos, r.pos - pos, f"section `{name}` (id {sid}), payload {size} bytes"))
        notes = {
            "target": "name \"910B2-like\" (length 10), then 7 LEB128 numbers: 48 vector cores, 24 cube cores, "
                      "UB, L1, L0A, L0B, L0C bytes",
            "symbols": "1 string: \"k\"",
            "params": "0 parameters",
            "layouts": "0 layouts",
            "kernels": "1 kernel: name = symbol 0, grid 1 1 1, code from word 0, 1 word, 0 registers, 5 footprints "
                       "of 0 bytes, flags 0",
            "code": "one word: END (opcode 0x0001, SCALAR, length 1)",
            "relocs": "0 relocations",
            "checksum": "CRC-32 of bytes 0 up to this section's id byte",
        }
        if size:
            rows.append((r.pos, size, notes[name]))
        else:
            rows[-1] = (pos, r.pos - pos, rows[-1][2] + "; " + notes[name])
        pos = r.pos + size
    out = [f"The smallest valid file, {len(data)} bytes (written by this dvmlang; `Bytecode.from_bytes` accepts "
           "it):", "", "```"]
    for off, n, note in rows:
        chunk = data[off:off + n]
        text = _hex(chunk)
        if len(text) > 47:
            text = _hex(chunk[:15]) + " .."
        out.append(f"{off:04x}  {text:<50} {note}".rstrip())
    out.append("```")
    return out


BLOCKS = {
    "sections": lambda: _table(["id", "section", "role"], section_rows()),
    "head-word": lambda: _table(["bits", "field", "meaning"], head_word_rows()),
    "field-kinds": lambda: _table(["kind", "bits", "encoding"], field_kind_rows()),
    "dtypes": lambda: _table(["code", "dtype", "bytes", "numpy"], dtype_rows()),
    "opcodes": lambda: _table(["opcode", "name", "pipe", "words", "head fields", "operand fields"],
                              [[f"`{ins.opcode:#06x}`", ins.name, isa.PIPE_NAMES[ins.pipe], ins.words,
                                ", ".join(f.name for f in ins.fields if f.head) or "-",
                                ", ".join(f.name for f in ins.fields if not f.head) or "-"]
                               for ins in isa.TABLE]),
    "limits": lambda: _table(["limit", "default", "what"], limit_rows()),
    "example": example_dump,
    "version": lambda: [f"This dvmlang writes version **{C.VERSION_MAJOR}.{C.VERSION_MINOR}** and reads "
                        f"{C.VERSION_MAJOR}.0 to {C.VERSION_MAJOR}.{C.VERSION_MINOR} (and newer "
                        f"{C.VERSION_MAJOR}.x files that use nothing it does not know)."],
}

BEGIN = "<!-- generated: {} -->"
END = "<!-- end generated -->"


def fill_blocks(text: str) -> str:
    """Rewrite every generated block of ``text``; unknown block names are an error."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.startswith("<!-- generated: ") and line.endswith(" -->"):
            name = line[len("<!-- generated: "):-len(" -->")]
            if name not in BLOCKS:
                raise KeyError(f"docgen: unknown generated block `{name}`")
            j = i + 1
            while j < len(lines) and lines[j] != END:
                j += 1
            if j == len(lines):
                raise ValueError(f"docgen: block `{name}` has no `{END}`")
            out.extend(BLOCKS[name]())
            out.append(END)
            i = j + 1
            continue
        i += 1
    return "\n".join(out)


def outputs(docs: Path = DOCS) -> dict[Path, str]:
    """Every generated file and its up-to-date contents."""
    bytecode = docs / "bytecode.md"
    return {docs / "isa.md": render_isa(), bytecode: fill_blocks(bytecode.read_text())}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for path, text in outputs().items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path)
            if not check:
                path.write_text(text)
    if check and stale:
        for p in stale:
            print(f"{p} is out of date: run python -m dvmlang.vm.docgen", file=sys.stderr)
        return 1
    if not check:
        for p in stale:
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
