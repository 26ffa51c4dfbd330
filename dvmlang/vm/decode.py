"""Decode instruction words back into fields, using the ISA table (shared by the validator, the
device decoder and the disassembler)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from ..errors import MalformedBytecodeError
from . import isa


@dataclass(slots=True)
class Decoded:
    pc: int
    ins: isa.Instr
    vals: dict
    dtype: dt.DType | None
    set: tuple | None  # (target pipe, event)
    wait: tuple | None  # (source pipe, event)
    head: int


_HEAD_FIXED = ((1 << isa.SET_FLAG_SHIFT) - 1) | (1 << isa.SET_FLAG_SHIFT) | (1 << isa.WAIT_FLAG_SHIFT) | \
    (0xF << isa.DTYPE_SHIFT)
_SET_BITS = (7 << isa.SET_PIPE_SHIFT) | (7 << isa.SET_EVENT_SHIFT)
_WAIT_BITS = (7 << isa.WAIT_PIPE_SHIFT) | (7 << isa.WAIT_EVENT_SHIFT)


class _Row:
    """What decoding needs of one ISA row, computed once from its packing (``Instr.packing``: name, word,
    shift and mask of every field; word 0 is the head)."""

    __slots__ = ("ins", "words", "pipe", "head_fields", "op_fields", "head_mask", "op_masks")

    def __init__(self, ins: isa.Instr):
        self.ins = ins
        self.words = ins.words
        self.pipe = int(ins.pipe)
        self.head_fields = tuple((name, shift, mask) for name, w, shift, mask in ins.packing if not w)
        self.op_fields = tuple(f for f in ins.packing if f[1])
        # the bits the row defines; every other bit is reserved and must be zero (the set/wait event
        # fields count only when their flag is set)
        head = _HEAD_FIXED
        ops = [0] * (ins.words - 1)
        for _, w, shift, mask in ins.packing:
            if w:
                ops[w - 1] |= mask << shift
            else:
                head |= mask << shift
        self.head_mask, self.op_masks = head, tuple(ops)


ROWS = {ins.opcode: _Row(ins) for ins in isa.TABLE}
_DTYPES = tuple(dt.BY_CODE.get(c) for c in range(16))


def decode_one(code, pc: int, end: int) -> Decoded:
    """Decode the instruction at ``pc``; ``end`` bounds the kernel's code (exclusive)."""
    head = code[pc]
    opcode = head & 0xFFFF
    row = ROWS.get(opcode)
    if row is None:
        raise MalformedBytecodeError("unknown opcode", section="code", offset=pc * 8,
                                     expected="an opcode from the ISA table", found=f"{opcode:#06x}")
    ins = row.ins
    length = ((head >> isa.LEN_SHIFT) & 7) + 1
    if length != row.words:
        raise MalformedBytecodeError(f"wrong length for {ins.name}", section="code", offset=pc * 8,
                                     expected=f"{row.words} words", found=f"{length}")
    pipe = (head >> isa.PIPE_SHIFT) & 7
    if pipe != row.pipe:
        raise MalformedBytecodeError(f"wrong pipe for {ins.name}", section="code", offset=pc * 8,
                                     expected=isa.PIPE_NAMES[ins.pipe], found=str(pipe))
    if pc + length > end:
        raise MalformedBytecodeError(f"{ins.name} is truncated by the end of the kernel's code", section="code",
                                     offset=pc * 8, expected=f"{length} words", found=f"{end - pc}")
    head_mask = row.head_mask
    st = wt = None
    if head >> isa.SET_FLAG_SHIFT & 1:
        head_mask |= _SET_BITS
        st = ((head >> isa.SET_PIPE_SHIFT) & 7, (head >> isa.SET_EVENT_SHIFT) & 7)
    if head >> isa.WAIT_FLAG_SHIFT & 1:
        head_mask |= _WAIT_BITS
        wt = ((head >> isa.WAIT_PIPE_SHIFT) & 7, (head >> isa.WAIT_EVENT_SHIFT) & 7)
    if head & ~head_mask:
        raise MalformedBytecodeError(f"reserved bits set in the head word of {ins.name}", section="code",
                                     offset=pc * 8, expected="0", found=f"{head & ~head_mask:#x}")
    for i, m in enumerate(row.op_masks, 1):
        if code[pc + i] & ~m:
            raise MalformedBytecodeError(f"reserved bits set in operand word {i} of {ins.name}", section="code",
                                         offset=(pc + i) * 8, expected="0", found=f"{code[pc + i] & ~m:#x}")
    vals = {name: (head >> shift) & mask for name, shift, mask in row.head_fields}
    for name, w, shift, mask in row.op_fields:
        vals[name] = (code[pc + w] >> shift) & mask
    code_dt = (head >> isa.DTYPE_SHIFT) & 0xF
    dtype = _DTYPES[code_dt]
    if dtype is None:
        raise MalformedBytecodeError("unknown dtype code in instruction", section="code", offset=pc * 8,
                                     expected="0-14", found=str(code_dt))
    return Decoded(pc, ins, vals, dtype, st, wt, head)


def decode_kernel(code, start: int, nwords: int) -> list[Decoded]:
    out = []
    pc = start
    end = start + nwords
    while pc < end:
        d = decode_one(code, pc, end)
        out.append(d)
        pc += d.ins.words
    return out


def decode_kernels(code, kernels, assembled: list | None = None) -> list[list[Decoded]]:
    """Per kernel, its decoded instructions: read from ``code``, or, for a one-kernel template the assembler
    recorded as it packed it (``Template.decoded``), that record (the same fields, but for the words an instance
    patches: the device reads those from the instance's words)."""
    if assembled is not None and len(kernels) == 1:
        return [assembled]
    return [decode_kernel(code, k.code_start, k.code_words) for k in kernels]


def sop_parts(v: int, kind: str = "sop") -> tuple[bool, int]:
    """(is_register, register index or signed immediate) of a scalar-operand field of ``kind`` (``sop``, or
    the 16-bit ``sop16``)."""
    bits, reg_bit, _, _ = isa.SOP_FORMS[kind]
    if v & reg_bit:
        return True, v & 0xFF
    if v & (reg_bit >> 1):
        return False, v - reg_bit
    return False, v


def tile_parts(v: int) -> tuple[int, int]:
    """(byte address, layout index) of a tile field."""
    return (v & 0xFFFF) * isa.TILE_ADDR_UNIT, v >> 16
