"""Pass 6: assembly. Labels get their pcs, every instruction is packed into 64-bit words (``encode_into``,
shared with the tests), and the relocation slots (tensor addresses), scalar-parameter slots and the debug
line table are recorded: the ``Template`` every launch instance of the build shares. Each instruction's
decoded form (the fields ``decode.decode_one`` would read back from its words) is recorded as it is packed:
the device's decoding of a template it trusts (``Bytecode._decode``) is that list, not a second pass over the
words."""

from __future__ import annotations

from array import array

from ... import dtypes as dt
from .. import isa
from ..decode import Decoded
from .program import Code, Label, Template


def assemble(kernel: str, code: Code, reg_types: list, footprint: dict[str, int], buffers: list) -> Template:
    pc = 0
    instrs = []
    for item in code.out:
        if isinstance(item, Label):
            item.pc = pc
        else:
            item.pc = pc
            pc += item.ins.words
            instrs.append(item)
    words = array("Q", bytes(8 * pc))
    relocs, slots, debug, decoded = [], [], [], []
    last_loc = None
    by_code = dt.BY_CODE
    for e in instrs:
        if e.target is not None:
            e.vals["target"] = e.target.pc
        head, vals = encode_into(words, e.pc, e.ins, e.vals, e.dtype, e.set, e.wait)
        decoded.append(Decoded(e.pc, e.ins, vals, by_code.get(0 if e.dtype is None else e.dtype.code),
                               None if e.set is None else (int(e.set[0]), e.set[1]),
                               None if e.wait is None else (int(e.wait[0]), e.wait[1]), head))
        if e.reloc_param is not None:
            relocs.append((e.pc + _field_word(e.ins, "gm"), 0, e.reloc_param))
        if e.scalar_param is not None:
            slots.append((e.pc + _field_word(e.ins, "imm"), e.scalar_param, e.dtype))
        if e.loc is not None and (last_loc is None or (e.loc.line, e.loc.col) != (last_loc.line, last_loc.col)):
            debug.append((e.pc, e.loc))
            last_loc = e.loc
    kind = "mix" if code.uses_cube else "vector"
    return Template(kernel, words, list(code.layout_list), list(reg_types), footprint,
                    [b for b in buffers if b.nbytes > 0], relocs, slots, debug, list(code.strings), kind,
                    decoded=decoded)


def _field_word(ins: isa.Instr, name: str) -> int:
    for f, (w, _) in zip(ins.fields, ins.layout):
        if f.name == name:
            return 0 if f.head else w
    raise KeyError(name)


def encode_into(words: array, pc: int, ins: isa.Instr, vals: dict, dtype, set_, wait) -> tuple[int, dict]:
    """Pack one instruction into ``words`` at ``pc`` (the assembler and the tests share this). Returns its head
    word and its fields as packed (each masked to its width: what decoding reads back)."""
    head = 0
    if set_ is not None:
        head = (1 << isa.SET_FLAG_SHIFT) | (int(set_[0]) << isa.SET_PIPE_SHIFT) | (set_[1] << isa.SET_EVENT_SHIFT)
    if wait is not None:
        head |= (1 << isa.WAIT_FLAG_SHIFT) | (int(wait[0]) << isa.WAIT_PIPE_SHIFT) | (wait[1] << isa.WAIT_EVENT_SHIFT)
    if dtype is not None:
        head |= dtype.code << isa.DTYPE_SHIFT
    pack = _PACKERS.get(id(ins))
    if pack is None:
        pack = _packer(ins)
    return pack(words, pc, vals, head)


_PACKERS: dict = {}  # id(ISA row) -> its packer (the rows live as long as the process)
WRITE_AFTER = 200  # instructions of one ISA row packed by the loop before its packer is written out


def _packer(ins: isa.Instr):
    """The function packing ``ins``'s fields (its ``packing``: name, word, shift, mask) into its words: a loop over
    the fields for the row's first ``WRITE_AFTER`` instructions, then the packer written out (``_written``: the
    words as expressions of the fields, 1.6 us an instruction faster than the loop; writing one costs 0.3 ms,
    what the loop loses over about two hundred: a process's first kernels, which meet most rows a few dozen
    times, do not pay for it, and a row packed more pays at most twice what the better choice would have)."""
    base = ins.opcode | (int(ins.pipe) << isa.PIPE_SHIFT) | ((ins.words - 1) << isa.LEN_SHIFT)
    packing, n_words = ins.packing, ins.words
    left = [WRITE_AFTER]

    def pack(words, pc, vals, head):
        left[0] -= 1
        if left[0] <= 0:
            _PACKERS[id(ins)] = _written(ins)
        get = vals.get
        out = [0] * n_words
        got = {}
        for name, w, shift, mask in packing:
            v = got[name] = int(get(name, 0)) & mask
            out[w] |= v << shift
        head |= base | out[0]
        words[pc] = head
        for w in range(1, n_words):
            words[pc + w] = out[w]
        return head, got
    _PACKERS[id(ins)] = pack
    return pack


def _written(ins: isa.Instr):
    """``_packer``'s loop written out for ``ins``: the words as expressions of the fields."""
    base = ins.opcode | (int(ins.pipe) << isa.PIPE_SHIFT) | ((ins.words - 1) << isa.LEN_SHIFT)
    lines = ["def pack(words, pc, vals, head):", "    get = vals.get"]
    parts: dict = {w: [] for w in range(ins.words)}
    names = []
    for k, (name, w, shift, mask) in enumerate(ins.packing):
        lines.append(f"    v{k} = int(get({name!r}, 0)) & {mask}")
        parts[w].append(f"(v{k} << {shift})" if shift else f"v{k}")
        names.append(f"{name!r}: v{k}")
    lines.append("    head |= " + " | ".join([str(base)] + parts[0]))
    lines.append("    words[pc] = head")
    for w in range(1, ins.words):
        lines.append(f"    words[pc + {w}] = " + (" | ".join(parts[w]) or "0"))
    lines.append("    return head, {" + ", ".join(names) + "}")
    ns: dict = {}
    exec(compile("\n".join(lines) + "\n", f"<dvmlang pack {ins.name}>", "exec"), ns)  # noqa: S102 - from the ISA table
    return ns["pack"]
