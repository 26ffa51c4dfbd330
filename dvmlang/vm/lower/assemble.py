"""Pass 6: assembly. Labels get their pcs, every instruction is packed into 64-bit words (``encode_into``,
shared with the tests), and the relocation slots (tensor addresses), scalar-parameter slots and the debug
line table are recorded: the ``Template`` every launch instance of the build shares."""

from __future__ import annotations

from array import array

from .. import isa
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
    relocs, slots, debug = [], [], []
    last_loc = None
    for e in instrs:
        if e.target is not None:
            e.vals["target"] = e.target.pc
        encode_into(words, e.pc, e.ins, e.vals, e.dtype, e.set, e.wait)
        if e.reloc_param is not None:
            relocs.append((e.pc + _field_word(e.ins, "gm"), 0, e.reloc_param))
        if e.scalar_param is not None:
            slots.append((e.pc + _field_word(e.ins, "imm"), e.scalar_param, e.dtype))
        if e.loc is not None and (last_loc is None or (e.loc.line, e.loc.col) != (last_loc.line, last_loc.col)):
            debug.append((e.pc, e.loc))
            last_loc = e.loc
    kind = "mix" if code.uses_cube else "vector"
    return Template(kernel, words, list(code.layout_list), list(reg_types), footprint,
                    [b for b in buffers if b.nbytes > 0], relocs, slots, debug, list(code.strings), kind)


def _field_word(ins: isa.Instr, name: str) -> int:
    for f, (w, _) in zip(ins.fields, ins.layout):
        if f.name == name:
            return 0 if f.head else w
    raise KeyError(name)


def encode_into(words: array, pc: int, ins: isa.Instr, vals: dict, dtype, set_, wait) -> None:
    """Pack one instruction into ``words`` at ``pc`` (the assembler and the tests share this)."""
    head = ins.opcode | (int(ins.pipe) << isa.PIPE_SHIFT) | ((ins.words - 1) << isa.LEN_SHIFT)
    if set_ is not None:
        head |= (1 << isa.SET_FLAG_SHIFT) | (int(set_[0]) << isa.SET_PIPE_SHIFT) | (set_[1] << isa.SET_EVENT_SHIFT)
    if wait is not None:
        head |= (1 << isa.WAIT_FLAG_SHIFT) | (int(wait[0]) << isa.WAIT_PIPE_SHIFT) | (wait[1] << isa.WAIT_EVENT_SHIFT)
    if dtype is not None:
        head |= dtype.code << isa.DTYPE_SHIFT
    ops = [0] * (ins.words - 1)
    for name, w, shift, mask in ins.packing:
        v = (int(vals.get(name, 0)) & mask) << shift
        if w:
            ops[w - 1] |= v
        else:
            head |= v
    words[pc] = head
    for i, o in enumerate(ops):
        words[pc + 1 + i] = o
