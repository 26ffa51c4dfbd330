"""The emitters' shared context: the code being emitted, the value -> place and value -> register maps as
the code being emitted sees them (the second copy of an unrolled loop body uses the ping-pong buffers), tile
and scalar operand encodings, and the dispatch of IR ops to their emitters (a table from op kind to emitter,
given by ``select``)."""

from __future__ import annotations

from ...errors import CompilationError
from ...ir.core import Value
from .. import isa
from .alloc import Staging
from .program import Code, Emitted, Place, Placement, Registers


class Context:
    """What every emitter gets: ``emit`` appends to ``code``; ``scopes`` are the loops and scopes being
    emitted (innermost last); ``alt_active`` is set inside the second copy of an unrolled loop body."""

    __slots__ = ("plan", "regs", "staging", "code", "emitters", "scopes", "alt_active")

    def __init__(self, plan: Placement, regs: Registers, staging: Staging, code: Code, emitters: dict):
        self.plan = plan
        self.regs = regs
        self.staging = staging
        self.code = code
        self.emitters = emitters  # op kind -> emitter(ctx, op)
        self.scopes: list = []
        self.alt_active = False

    def emit_ops(self, ops):
        emitters = self.emitters
        for op in ops:
            handler = emitters.get(op.kind)
            if handler is None:
                raise CompilationError(f"internal: no lowering for IR op `{op.kind}`", op.loc)
            handler(self, op)

    def emit(self, ins: isa.Instr, vals: dict, dtype, loc, reads=(), writes=()) -> Emitted:
        e = Emitted(ins, vals, dtype, loc, list(reads), list(writes))
        self.code.out.append(e)
        return e

    def place(self, v: Value) -> Place:
        """Where ``v`` lives in the code being emitted (the second copy of an unrolled loop body uses the
        alternate buffers)."""
        p = self.plan.places[v.id]
        if self.alt_active:
            alt = self.plan.alt.get(id(p.buf))
            if alt is not None:
                return Place(alt.space, alt, p.shape, p.dtype)
        return p

    def tile(self, v: Value) -> int:
        p = self.place(v)
        return self.tile_ref(p.buf.addr, p.dtype, p.shape)

    def tile_ref(self, addr, dtype, shape) -> int:
        return (addr // isa.TILE_ADDR_UNIT) | (self.code.layout(dtype, shape) << 16)

    def rng(self, v: Value):
        p = self.place(v)
        return (p.space, p.buf.addr, p.buf.addr + max(p.buf.nbytes, 1))

    def reg(self, v: Value) -> int:
        r = self.regs.of_value.get(v.id)
        if r is None:
            raise CompilationError(f"internal: scalar {v!r} has no register", v.op.loc if v.op else None)
        return r

    def sop(self, v: Value, kind: str = "sop") -> int:
        """A scalar operand of ``kind`` (``sop``, or the 16-bit ``sop16``): a small integer constant inline,
        anything else its register."""
        bits, reg_bit, lo, hi = isa.SOP_FORMS[kind]
        if v.op is not None and v.op.kind == "const":
            c = v.op.attrs["value"]
            if isinstance(c, (int, bool)) and lo <= int(c) <= hi:
                return int(c) & (reg_bit - 1)
        return reg_bit | self.reg(v)
