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


def field_masks(ins: isa.Instr) -> tuple[int, tuple[int, ...]]:
    """The bits an instruction's row defines: (head word mask without the set/wait event fields, one mask
    per operand word). Every other bit is reserved and must be zero."""
    head = _HEAD_FIXED
    ops = [0] * (ins.words - 1)
    for f, (w, shift) in zip(ins.fields, ins.layout):
        m = ((1 << f.bits) - 1) << shift
        if f.head:
            head |= m
        else:
            ops[w - 1] |= m
    return head, tuple(ops)


MASKS = {ins.opcode: field_masks(ins) for ins in isa.TABLE}


def decode_one(code, pc: int, end: int) -> Decoded:
    """Decode the instruction at ``pc``; ``end`` bounds the kernel's code (exclusive)."""
    head = code[pc]
    opcode = head & 0xFFFF
    ins = isa.BY_OPCODE.get(opcode)
    if ins is None:
        raise MalformedBytecodeError("unknown opcode", section="code", offset=pc * 8,
                                     expected="an opcode from the ISA table", found=f"{opcode:#06x}")
    length = ((head >> isa.LEN_SHIFT) & 7) + 1
    if length != ins.words:
        raise MalformedBytecodeError(f"wrong length for {ins.name}", section="code", offset=pc * 8,
                                     expected=f"{ins.words} words", found=f"{length}")
    pipe = (head >> isa.PIPE_SHIFT) & 7
    if pipe != int(ins.pipe):
        raise MalformedBytecodeError(f"wrong pipe for {ins.name}", section="code", offset=pc * 8,
                                     expected=isa.PIPE_NAMES[ins.pipe], found=str(pipe))
    if pc + length > end:
        raise MalformedBytecodeError(f"{ins.name} is truncated by the end of the kernel's code", section="code",
                                     offset=pc * 8, expected=f"{length} words", found=f"{end - pc}")
    head_mask, op_masks = MASKS[opcode]
    if head >> isa.SET_FLAG_SHIFT & 1:
        head_mask |= _SET_BITS
    if head >> isa.WAIT_FLAG_SHIFT & 1:
        head_mask |= _WAIT_BITS
    if head & ~head_mask:
        raise MalformedBytecodeError(f"reserved bits set in the head word of {ins.name}", section="code",
                                     offset=pc * 8, expected="0", found=f"{head & ~head_mask:#x}")
    for i, m in enumerate(op_masks, 1):
        if code[pc + i] & ~m:
            raise MalformedBytecodeError(f"reserved bits set in operand word {i} of {ins.name}", section="code",
                                         offset=(pc + i) * 8, expected="0", found=f"{code[pc + i] & ~m:#x}")
    vals = {}
    for f, (w, shift) in zip(ins.fields, ins.layout):
        word = head if f.head else code[pc + w]
        vals[f.name] = (word >> shift) & ((1 << f.bits) - 1)
    code_dt = (head >> isa.DTYPE_SHIFT) & 0xF
    dtype = dt.BY_CODE.get(code_dt)
    if dtype is None:
        raise MalformedBytecodeError("unknown dtype code in instruction", section="code", offset=pc * 8,
                                     expected="0-14", found=str(code_dt))
    st = wt = None
    if head >> isa.SET_FLAG_SHIFT & 1:
        st = ((head >> isa.SET_PIPE_SHIFT) & 7, (head >> isa.SET_EVENT_SHIFT) & 7)
    if head >> isa.WAIT_FLAG_SHIFT & 1:
        wt = ((head >> isa.WAIT_PIPE_SHIFT) & 7, (head >> isa.WAIT_EVENT_SHIFT) & 7)
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


def sop_parts(v: int) -> tuple[bool, int]:
    """(is_register, register index or signed immediate) of a scalar-operand field."""
    if v & isa.SOP_REG_BIT:
        return True, v & 0xFF
    if v & (1 << 30):
        return False, v - (1 << 31)
    return False, v


def tile_parts(v: int) -> tuple[int, int]:
    """(byte address, layout index) of a tile field."""
    return (v & 0xFFFF) * isa.TILE_ADDR_UNIT, v >> 16
