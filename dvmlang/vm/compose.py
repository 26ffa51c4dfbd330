"""Composing a kernel from pre-selected instructions over *virtual* tiles and registers (DVM's way of building
a fused operator: no source text, no IR, no generic lowering).

A ``Composer`` is what a fragment writes to. Its tiles are ``Slot``\\ s (a memory space and a byte size, no
address yet) and its scalars ``Reg``\\ s (a dtype, no number yet); an instruction's fields may hold either, and
its access ranges name slots. Positions are *logical*: ``unrolled`` emits a loop body twice (ping-pong) with the
second copy at the same positions as the first, so a slot of the second copy lives exactly as long as its twin
and gets an address of its own, while slots within one copy share addresses as their lifetimes allow (as the
kernel path's alternate buffers do). ``finish`` then

* extends every slot and register used inside a loop but first used before it to the loop's end;
* numbers the registers by a linear scan over their lifetimes (one dtype per register, as the ISA types them);
* allocates each memory space with the kernel path's scan (``lower.alloc``: first fit, largest first when
  fragmented, a ``BufferOverflowError`` with the buffers live at the peak when it still does not fit);
* resolves the operand fields and access ranges, and calls the link (``lower.link``: events, then assembly).

The fragments themselves (which instructions each fused operation is, by operand role and dtype) belong to the
fuser (``fuser/emit``); this module knows nothing of graphs.
"""

from __future__ import annotations

import heapq

from ..errors import ResourceError
from . import isa
from .lower.alloc import ADDR_LIMIT, _linear_scan
from .lower.link import link
from .lower.program import MAX_REGS, Buffer, Code, Emitted, Label, Template, nbytes

BY_NAME = isa.BY_NAME
# alignment of a slot's size (and so of its address) per memory space: the cube's operand buffers are kept on
# 512-byte (fractal) and the accumulator on 64-byte boundaries, as the kernel path's staging does
_ALIGN = {"l0a": 512, "l0b": 512, "l0c": 64}


class Slot(Buffer):
    """A virtual tile buffer: ``program.Buffer`` whose ``start``/``end`` are logical positions of its first and
    last use and whose ``addr`` the link gives. ``-1`` start means unused so far."""

    __slots__ = ()


class Reg:
    """A virtual scalar register: its dtype and the logical positions of its first and last use; ``num`` once
    numbered. ``int(reg)`` is its number (what an instruction field holds)."""

    __slots__ = ("dtype", "start", "end", "num", "pinned")

    def __init__(self, dtype, pinned: bool = False):
        self.dtype = dtype
        self.start = -1
        self.end = -1
        self.num = -1
        self.pinned = pinned  # live for the whole kernel (constants, parameters)

    def __int__(self) -> int:
        return self.num

    __index__ = __int__

    def __repr__(self) -> str:
        return f"<reg {self.num} {self.dtype.name}>"


class TileRef:
    """A tile operand field: a slot (plus a byte offset into it) viewed with a layout; ``int()`` once the slot has
    its address."""

    __slots__ = ("slot", "offset", "layout")

    def __init__(self, slot: Slot, offset: int, layout: int):
        self.slot = slot
        self.offset = offset
        self.layout = layout

    def __int__(self) -> int:
        return ((self.slot.addr + self.offset) // isa.TILE_ADDR_UNIT) | (self.layout << 16)


class SopReg:
    """A scalar-operand field (``sop``/``sop16``) that names a register."""

    __slots__ = ("reg", "bit")

    def __init__(self, reg: Reg, bit: int):
        self.reg = reg
        self.bit = bit

    def __int__(self) -> int:
        return self.bit | self.reg.num


class Tile:
    """A tile value of a composed kernel: where it lives (a slot and a byte offset into it), its shape, dtype."""

    __slots__ = ("slot", "offset", "shape", "dtype")

    def __init__(self, slot: Slot, shape: tuple, dtype, offset: int = 0):
        self.slot = slot
        self.offset = offset
        self.shape = tuple(shape)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<tile {self.slot.space} {self.shape} {self.dtype.name}>"


class Composer:
    """The instruction stream of one kernel being composed, with its virtual slots and registers, parameters,
    constants and loops."""

    def __init__(self, name: str):
        self.name = name
        self.code = Code()
        self.pos = 0
        self.slots: list[Slot] = []
        self.regs: list[Reg] = []
        self.consts: dict = {}  # (dtype code, raw bits) -> Reg
        self.loops: list[tuple[int, int]] = []  # logical (start, end) of every loop
        self.params: list = []  # (kind, name, dtype, rank): the kernel's parameters in order
        self.param_regs: dict[int, Reg] = {}
        self._prologue: list = []  # the MOVIs of constants and scalar parameters, emitted first

    # ---- values --------------------------------------------------------------------------------------------
    def slot(self, space: str, shape, dtype, name: str = "", loc=None) -> Tile:
        """A new virtual tile of ``shape`` and ``dtype`` in ``space``."""
        nb = nbytes(shape, dtype)
        a = _ALIGN.get(space)
        if a:
            nb = (nb + a - 1) // a * a
        s = Slot(space, nb, -1, -1, name or "tile", loc)
        self.slots.append(s)
        return Tile(s, shape, dtype)

    def reg(self, dtype) -> Reg:
        r = Reg(dtype)
        self.regs.append(r)
        return r

    def const(self, bits: int, dtype) -> Reg:
        """The register holding a constant (raw ``bits`` of ``dtype``), loaded once in the prologue."""
        key = (dtype.code, bits)
        r = self.consts.get(key)
        if r is None:
            r = self.consts[key] = Reg(dtype, pinned=True)
            self.regs.append(r)
            self._prologue.append(Emitted(BY_NAME["MOVI"], {"rd": r, "imm": bits}, dtype, None))
        return r

    def param(self, kind: str, name: str, dtype, rank: int = 0, loc=None) -> int | Reg:
        """Declare the next parameter: a tensor's index, or a scalar's register (bound per instance: its MOVI's
        immediate is patched in)."""
        idx = len(self.params)
        self.params.append((kind, name, dtype, rank))
        if kind != "scalar":
            return idx
        r = Reg(dtype, pinned=True)
        self.regs.append(r)
        e = Emitted(BY_NAME["MOVI"], {"rd": r, "imm": 0}, dtype, loc)
        e.scalar_param = idx
        self._prologue.append(e)
        self.param_regs[idx] = r
        return r

    # ---- operands ------------------------------------------------------------------------------------------
    def ref(self, t: Tile, shape=None) -> TileRef:
        """The operand field of tile ``t`` (viewed with ``shape``, the same bytes, if given)."""
        self._use_slot(t.slot)
        return TileRef(t.slot, t.offset, self.code.layout(t.dtype, t.shape if shape is None else shape))

    def rng(self, t: Tile) -> tuple:
        return (t.slot.space, t.slot)

    def r(self, reg: Reg) -> Reg:
        """A register operand (marks its use here)."""
        p = self.pos
        if reg.start < 0:
            reg.start = p
        if p > reg.end:
            reg.end = p
        return reg

    def sop(self, v, kind: str = "sop"):
        """A scalar-operand field: an int inline when it fits the immediate, else the register."""
        _, reg_bit, lo, hi = isa.SOP_FORMS[kind]
        if isinstance(v, int):
            if lo <= v <= hi:
                return v & (reg_bit - 1)
            raise ResourceError(f"kernel `{self.name}`: the immediate {v} does not fit a {kind} operand")
        return SopReg(self.r(v), reg_bit)

    def _use_slot(self, s: Slot):
        p = self.pos
        if s.start < 0:
            s.start = p
        if p > s.end:
            s.end = p

    # ---- instructions --------------------------------------------------------------------------------------
    def emit(self, name: str, vals: dict, dtype, loc, reads=(), writes=()) -> Emitted:
        """Append instruction ``name``. Fields are ints, ``Reg``\\ s (use ``r``), ``TileRef``\\ s (use ``ref``) or
        ``SopReg``\\ s (use ``sop``); ``reads``/``writes`` are tiles (marking their slots used here) or GM
        ranges ``("gm", tensor, 0)``."""
        for v in vals.values():
            if v.__class__ is Reg:
                self.r(v)
        e = Emitted(BY_NAME[name], vals, dtype, loc, [self._range(x) for x in reads],
                    [self._range(x) for x in writes])
        self.code.out.append(e)
        self.pos += 1
        return e

    def _range(self, x):
        if x.__class__ is Tile:
            self._use_slot(x.slot)
            return (x.slot.space, x.slot, x.offset)
        return x

    def label(self, name: str = "") -> Label:
        return Label(name)

    def place(self, label: Label) -> None:
        self.code.out.append(label)

    def branch(self, name: str, target: Label, loc, **vals) -> Emitted:
        e = self.emit(name, {**vals, "target": 0}, None, loc)
        e.target = target
        return e

    def string(self, s: str) -> int:
        return self.code.string(s)

    # ---- loops ---------------------------------------------------------------------------------------------
    def loop_begin(self) -> int:
        start = self.pos
        self.pos += 1
        return start

    def loop_end(self, start: int) -> None:
        self.pos += 1
        self.loops.append((start, self.pos))

    def unrolled(self, body, copies: int = 2) -> None:
        """Emit ``body(copy)`` ``copies`` times at the same logical positions (the copies of a ping-pong loop
        body: each copy's tiles live as long as their twins', so each copy gets buffers of its own)."""
        start = self.pos
        end = start
        for c in range(copies):
            self.pos = start
            body(c)
            end = max(end, self.pos)
        self.pos = end

    # ---- linking -------------------------------------------------------------------------------------------
    def finish(self, profile, kind_extra: dict | None = None) -> Template:
        """Number the registers, allocate the slots and link: the composed kernel's ``Template``."""
        self.code.out.append(self.code.end_label)
        self.emit("END", {}, None, None)
        self.code.out[:0] = self._prologue
        self._extend_for_loops()
        reg_types = self._number_registers()
        footprint = {}
        for space, cap in profile.capacities.items():
            bufs = [s for s in self.slots if s.space == space and s.start >= 0]
            footprint[space] = _linear_scan(bufs, min(cap, ADDR_LIMIT), space, self.name, profile, repack=True) \
                if bufs else 0
        for s in self.slots:
            if s.start < 0:
                s.addr = 0
        for item in self.code.out:
            if item.__class__ is Emitted:
                item.reads = [_resolved(r) for r in item.reads]
                item.writes = [_resolved(r) for r in item.writes]
        return link(self.name, self.code, reg_types, footprint, [s for s in self.slots if s.start >= 0])

    def _extend_for_loops(self) -> None:
        """A slot or register first used before a loop and used inside it lives until the loop ends (it is read
        again at every iteration); pinned registers live for the whole kernel."""
        loops = sorted(self.loops)
        for x in (*self.slots, *self.regs):
            if x.start < 0:
                continue
            for ls, le in loops:
                if x.start < ls <= x.end < le:
                    x.end = le

    def _number_registers(self) -> list:
        """Linear scan over the registers' lifetimes, one dtype per register number (a heap of the live ones by
        the end of their lifetimes)."""
        end_all = self.pos + 1
        items = []
        for r in self.regs:
            if r.pinned:
                items.append((-1, end_all, r))
            elif r.start >= 0:
                items.append((r.start, r.end, r))
        items.sort(key=lambda t: (t[0], t[1]))
        types: list = []
        free: dict = {}
        active: list = []  # heap of (end, number, dtype code)
        for s, e, r in items:
            while active and active[0][0] < s:
                _, num, code = heapq.heappop(active)
                free.setdefault(code, []).append(num)
            code = r.dtype.code
            pool = free.get(code)
            if pool:
                r.num = pool.pop()
            else:
                r.num = len(types)
                if r.num >= MAX_REGS:
                    raise ResourceError(f"kernel `{self.name}` needs more than {MAX_REGS} scalar registers")
                types.append(r.dtype)
            heapq.heappush(active, (e, r.num, code))
        for r in self.regs:
            if r.num < 0:
                r.num = 0  # never used
        return types


def _resolved(rng):
    if len(rng) == 3 and rng[1].__class__ is Slot:
        s, off = rng[1], rng[2]
        return (rng[0], s.addr + off, s.addr + s.nbytes)
    return rng
