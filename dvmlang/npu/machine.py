"""The device decoder: validated bytecode -> virtual instructions (``Step``s), once per kernel template.

Each bytecode instruction is decoded once into a step: a closure that performs the instruction's semantics
on a ``Batch`` of programs at once (numpy arrays with a leading program axis; values that are the same for
every program keep a leading axis of 1), its cost from ``timing`` (or, for transfers, the cost the closure
returns per batch), its pipe and events, and ``Facts`` for readers outside execution (the trace). The
builder of each ISA family lives with its unit in ``units/``; the ``Machine`` gives builders their operand
readers and writers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import SourceLoc
from ..vm import isa
from ..vm.decode import Decoded, sop_parts, tile_parts
from . import timing
from .state import MAX_PENDING_DEPTH, Slot, place_among, prod, read_overlapping, rows_of
from .units import BUILDERS


class Tile(NamedTuple):
    """An operand tile of an instruction: its field, memory space, byte address, size and shape."""

    field: str
    space: str
    addr: int
    nbytes: int
    shape: tuple


@dataclass(frozen=True, slots=True)
class Facts:
    """What the decoder knows of one instruction, for readers outside execution (the trace).

    ``tiles``: the instruction's tile fields in row order (a mask tile only when the row is masked);
    ``repeats``: vector repeats of its largest tile per execution (VECTOR pipe); ``macs``: multiply-accumulates
    per execution (CUBE)."""

    tiles: tuple = ()
    repeats: int = 0
    macs: int = 0

    @property
    def ub(self) -> tuple | None:
        """(lo, hi): the UB byte range the instruction writes, else the first UB range it reads."""
        ub = None
        for t in self.tiles:
            if t.space == "ub" and (ub is None or t.field == "dst"):
                ub = (t.addr, t.addr + t.nbytes)
        return ub


@dataclass(slots=True, eq=False)
class Step:
    """One decoded instruction: ``fn(batch, launch)`` runs it (returning the branch condition, or a
    transfer's cycles); ``cost`` its cycles (None: what ``fn`` returns); ``kind`` how the interpreter moves on
    (op, end, jmp, br_z, br_nz, set, wait, barrier); ``set``/``wait`` its events; ``target`` the step index a
    branch goes to; ``drain`` the pipes a barrier drains; ``latency`` cycles after the pipe is free until the
    result is visible; ``port`` whether it uses the core's GM port. ``set_key``/``wait_key``: the keys of its
    events in a batch's flags, (from pipe, to pipe, event), worked out once; ``advance_one`` its pipe clock for
    a batch whose programs share one clock (``timing.advance_one``). ``pure``: it only sets a register from
    registers, immediates, the program's coordinates and the instance's fixed facts (see ``Machine.prefix``)."""

    fn: object
    ins: isa.Instr
    pc: int
    index: int
    pipe: int
    cost: object
    kind: str
    set: tuple | None
    wait: tuple | None
    target: int | None
    drain: list | None
    latency: int
    port: bool
    facts: Facts
    set_key: tuple | None = None
    wait_key: tuple | None = None
    advance_one: object = None
    pure: bool = False

    def __post_init__(self):
        self.set_key = (self.pipe, self.set[0], self.set[1]) if self.set is not None else None
        self.wait_key = (self.wait[0], self.pipe, self.wait[1]) if self.wait is not None else None
        self.advance_one = timing.advance_one(self)  # its pipe clock for a batch with one clock


class Machine:
    """Decodes one kernel of a validated bytecode into steps (cached per template)."""

    def __init__(self, bc, kernel_index: int, profile):
        self.kernel = bc.kernels[kernel_index]
        self.decoded: list[Decoded] = bc.decoded[kernel_index]
        self.zero_regs = tuple(np.zeros((), dtype=t.np) for t in self.kernel.reg_types)  # every batch starts here
        self.profile = profile
        self.layouts = bc.layouts
        self.index_of_pc: dict[int, int] = {d.pc: i for i, d in enumerate(self.decoded)}
        self.read_again = self._read_again()
        self.alone = self._alone()
        self.loc_of_pc = loc_lookup(bc)
        # programs may wait on each other's atomics (a lock): how many times they spin depends on which run together
        self.atomics = any(d.ins.family == "atomic" for d in self.decoded)
        self.steps: list[Step] = [BUILDERS[d.ins.family](self, d) for d in self.decoded]
        # the steps every program runs first, in order, that only set registers (pure, no event): from one
        # start they end in one state, which a one-program launch keeps (``Device._one``)
        self.prefix = next((i for i, s in enumerate(self.steps)
                            if not (s.pure and s.kind == "op" and s.set is None and s.wait is None)), len(self.steps))

    def _ranges(self) -> tuple[dict, dict]:
        """(space -> the (address, bytes) of every tile field, space -> the ends of the ranges written), worked out
        once (every writer's ``starts`` asks)."""
        got = self.__dict__.get("_tile_ranges")
        if got is not None:
            return got
        ranges: dict = {}
        ends: dict = {}
        for d in self.decoded:
            for f, space, addr, n, _ in self.tile_fields(d):
                ranges.setdefault(space, set()).add((addr, n))
                if f.writes:
                    ends.setdefault(space, set()).add(addr + n)
        self._tile_ranges = ranges, ends
        return ranges, ends

    def tile_fields(self, d: Decoded):
        """(field, space, address, bytes, element bytes) of each tile field of ``d`` whose layout the kernel
        has."""
        for f in d.ins.fields:
            if f.kind != "tile":
                continue
            addr, li = tile_parts(d.vals[f.name])
            if li < len(self.layouts):
                dtp, shape = self.layouts[li]
                yield f, d.ins.spaces[f.name], addr, prod(shape) * dtp.itemsize, dtp.itemsize

    def _alone(self) -> frozenset:
        """(space, address, bytes) of the tile ranges no other tile range of the kernel overlaps: a slot stored
        at such a range replaces the one there (of the same range) and cuts away nothing else (``state.place``
        without its scan)."""
        ranges, _ = self._ranges()
        out = set()
        for space, rs in ranges.items():
            rs = sorted(rs)
            for i, (a, n) in enumerate(rs):
                lo, hi = a, a + max(n, 1)
                if all(not (x < hi and lo < x + max(m, 1)) for j, (x, m) in enumerate(rs) if j != i):
                    out.add((space, a, n))
        return frozenset(out)

    def starts(self, space: str, addr: int, nbytes: int) -> tuple:
        """The addresses a slot overlapping ``[addr, addr + nbytes)`` of ``space`` can start at: every slot lies
        inside a tile range of the kernel and starts at a tile range's start or at the end of a range written
        over it (what ``state._trim`` leaves), so these are the starts and written ends inside the tile ranges
        that overlap it (``state.place_among``)."""
        key = (space, addr, nbytes)
        known = self.__dict__.setdefault("_starts", {})
        out = known.get(key)
        if out is None:
            ranges, ends = self._ranges()
            rs = ranges.get(space, set())
            sorted_marks = self.__dict__.setdefault("_marks", {})
            marks = sorted_marks.get(space)
            if marks is None:
                marks = sorted_marks[space] = sorted({a for a, _ in rs} | ends.get(space, set()))
            hi = addr + max(nbytes, 1)
            found = set()
            for a, n in rs:
                e = a + max(n, 1)
                if a < hi and addr < e:  # (a range it overlaps: the marks inside it)
                    found.update(marks[bisect.bisect_left(marks, a):bisect.bisect_left(marks, e)])
            out = known[key] = tuple(sorted(found))
        return out

    def _read_again(self) -> set[int]:
        """pcs whose UB result is read by two or more later instructions before it is overwritten (a host-speed
        hint: such results are kept when first computed instead of being recomputed per reader)."""
        ranges = []
        for d in self.decoded:
            reads, write = [], None
            for f, _, addr, n, item in self.tile_fields(d):
                r = (addr, addr + max(n, item))  # (an empty tile still names its first element)
                if f.name == "dst":
                    write = r
                else:
                    reads.append(r)
            ranges.append((reads, write))
        out = set()
        for i, (_, write) in enumerate(ranges):
            if write is None:
                continue
            count = 0
            for reads, w2 in ranges[i + 1:]:
                count += sum(1 for r in reads if r[0] < write[1] and write[0] < r[1])
                if count >= 2 or (w2 is not None and w2[0] < write[1] and write[0] < w2[1]):
                    break
            if count >= 2:
                out.add(self.decoded[i].pc)
        return out

    # ---- making steps -------------------------------------------------------------------------------------
    def step(self, d: Decoded, fn, cost, kind: str = "op", *, pipe=None, sync=None, target=None, drain=None,
             macs: int = 0, pure: bool = False) -> Step:
        """The step of ``d``: ``pipe`` and ``sync`` ((set, wait)) override the head word's (SET and WAIT name
        them in their fields), ``target`` is a branch's target pc, ``macs`` the multiply-accumulates of one
        execution."""
        c = d.ins.cost
        if cost is not None and cost.__class__ is not int and cost.__class__ is not float:
            cost = cost.item()  # a Python number, as timing.advance_one takes a fixed cost
        set_, wait = (d.set, d.wait) if sync is None else sync
        return Step(fn, d.ins, d.pc, self.index_of_pc[d.pc], int(d.ins.pipe) if pipe is None else pipe, cost, kind,
                    set_, wait, None if target is None else self.index_of_pc[target], drain,
                    timing.latency(self.profile, c), timing.uses_port(c, self.profile), self._facts(d, macs),
                    pure=pure)

    def formula(self, d: Decoded):
        """``d``'s cost formula (``timing.COSTS``) bound to the profile: call it with the step's sizes."""
        return timing.formula(self.profile, d.ins.cost)

    def _facts(self, d: Decoded, macs: int) -> Facts:
        spaces = d.ins.spaces
        tiles = []
        for f in d.ins.fields:
            if f.kind != "tile" or (f.name == "mask" and not d.vals.get("masked", 1)):
                continue
            addr, li = tile_parts(d.vals[f.name])
            if li >= len(self.layouts):
                continue
            dtp, shape = self.layouts[li]
            tiles.append(Tile(f.name, spaces[f.name], addr, prod(shape) * dtp.itemsize, tuple(shape)))
        largest = max((t.nbytes for t in tiles), default=0)
        vector = d.ins.pipe == isa.Pipe.VECTOR and largest
        return Facts(tuple(tiles), timing.repeats(self.profile, largest) if vector else 0, macs)

    # ---- operands -----------------------------------------------------------------------------------------
    def layout(self, ref: int):
        """(byte address, dtype, shape) of a tile field."""
        addr, li = tile_parts(ref)
        d, shape = self.layouts[li]
        return addr, d, shape

    def tile_bytes(self, ref: int) -> int:
        _, d, shape = self.layout(ref)
        return prod(shape) * d.itemsize

    def reader(self, ref: int, space: str = "ub", rank: int | None = None):
        """A function (batch, launch) -> array (rows, *shape) padded to ``rank`` dims after the program axis;
        its ``source`` returns a pending computation still pending, as (slot, shape), with the slot's GM
        alias groups."""
        addr, d, shape = self.layout(ref)
        nbytes = prod(shape) * d.itemsize
        npdt = d.np
        full = shape if rank is None or rank <= len(shape) else (1,) * (rank - len(shape)) + tuple(shape)

        def read(b, L):
            slot = b.mem[space].get(addr)
            if slot is not None and slot.nbytes == nbytes and slot.dtype == npdt:
                arr = slot.arr
                if arr.shape[1:] != full:
                    arr = arr.reshape((arr.shape[0],) + full)
                return arr
            return read_overlapping(b, L, space, addr, nbytes, npdt, full)

        def source(b, L):
            slot = b.mem[space].get(addr)
            if slot is not None and slot.nbytes == nbytes and slot.dtype == npdt:
                if slot.lazy is not None:
                    return (slot, full), slot.gm
                arr = slot.arr
                if arr.shape[1:] != full:
                    arr = arr.reshape((arr.shape[0],) + full)
                return arr, slot.gm
            return read_overlapping(b, L, space, addr, nbytes, npdt, full), None

        read.source = source
        return read

    def writer(self, ref: int, space: str = "ub"):
        """A function (batch, array, gm=None) storing a tile (``gm``: the alias group the array views); its
        ``lazy`` records an elementwise computation as the tile's value instead."""
        addr, d, shape = self.layout(ref)
        nbytes = prod(shape) * d.itemsize
        npdt = d.np
        shape = tuple(shape)
        if (space, addr, nbytes) in self.alone:
            put = _replace
        else:
            starts = self.starts(space, addr, nbytes)

            def put(d, addr, nbytes, slot):
                place_among(d, addr, nbytes, slot, starts)

        def finish(arr):
            if arr.dtype != npdt:
                arr = arr.astype(npdt)
            if arr.shape[1:] != shape:
                arr = np.broadcast_to(arr, (arr.shape[0],) + shape) if arr.ndim - 1 == len(shape) else \
                    arr.reshape((arr.shape[0],) + shape)
            return arr

        def write(b, arr: np.ndarray, gm=None):
            put(b.mem[space], addr, nbytes, Slot(finish(arr), nbytes, frozenset((gm,)) if gm is not None else None))

        def write_lazy(b, fn, sources, keep=False):
            """Record ``fn(*args)`` as the tile's value, evaluated when first read (or straight into GM)."""
            args = []
            deps = None
            rows = 1
            depth = 0
            for a, g in sources:
                args.append(a)
                rows = max(rows, rows_of(a))
                if isinstance(a, tuple) and a[0].lazy is not None:
                    depth = max(depth, a[0].depth + 1)
                if g:
                    deps = g if deps is None else deps | g
            slot = Slot(None, nbytes, deps, (fn, args, finish), np.dtype(npdt), rows, shape, keep, depth)
            if depth >= MAX_PENDING_DEPTH:
                slot.arr  # evaluate now: long chains would otherwise recurse deeply when finally read
            put(b.mem[space], addr, nbytes, slot)

        def write_slot(b, slot):
            """Put another space's tile here as it is (pending or not): one value, evaluated at most once."""
            put(b.mem[space], addr, nbytes, slot)

        write.lazy = write_lazy
        write.slot = write_slot
        write.finish = finish  # (the compiled path stores finished values itself: npu/compiled.py)
        return write

    @staticmethod
    def sop(v: int, kind: str = "sop"):
        """A scalar-operand field (of ``kind``: ``sop`` or ``sop16``) as a function batch -> value (a register,
        or the immediate)."""
        is_reg, x = sop_parts(v, kind)
        if is_reg:
            return lambda b: b.regs[x]
        return lambda b: x


def _replace(d: dict, addr: int, nbytes: int, slot) -> None:
    """``state.place`` for a range no other tile range overlaps (``Machine.alone``)."""
    d[addr] = slot


def loc_lookup(bc):
    """pc -> SourceLoc from the debug line table (the entry at or before pc)."""
    lines = bc.debug.lines
    files = bc.debug.files
    pcs = [x[0] for x in lines]
    name = bc.name  # (not the bytecode: a machine kept with its build must not keep the instance it was made of)

    def find(pc):
        i = bisect.bisect_right(pcs, pc) - 1
        if i < 0:
            return None
        _, fi, line, col = lines[i]
        return SourceLoc(files[fi], line, col, func=name)
    return find
