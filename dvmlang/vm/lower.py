"""Lower tile IR to an instruction template (the build phase's last step).

1. Number the ops in program order and compute live intervals; values used inside a loop but defined
   outside it stay live for the whole loop.
2. Give every tile a place: UB by default; dot operands go GM/UB -> L1 -> L0A/L0B and accumulate in L0C.
   Views (reshape) share their source's buffer; loop-carried values and branch results get a *home*,
   and a value that only feeds a home is computed directly into it (phi coalescing).
3. Allocate each memory space with a linear scan (32-byte aligned); failure is a ``ResourceError`` with
   the live buffers at the peak. Scalars get typed registers the same way.
4. Select instructions from the ISA table, then insert set/wait events for every dependency between
   pipes (twice over loop bodies, for hazards across iterations), then assemble words.

The result, a ``Template``, is what every launch instance of this build shares; encoding an instance
only patches scalar immediates and tensor addresses into it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..errors import BufferOverflowError, CompilationError, ResourceError, SourceLoc
from ..ir.builder import broadcast_shapes
from ..ir.core import Block, Function, Op, ScalarType, TileType, Value, ends_in_exit
from . import isa

ELEMENTWISE = frozenset({"binary", "compare", "select", "fma"})
ADDR_LIMIT = (1 << 16) * isa.TILE_ADDR_UNIT
MAX_REGS = 256


class Label:
    __slots__ = ("pc", "name")

    def __init__(self, name=""):
        self.pc = None
        self.name = name


@dataclass
class Emitted:
    ins: isa.Instr
    vals: dict
    dtype: dt.DType | None
    loc: SourceLoc | None
    reads: list = field(default_factory=list)   # (space, start, end)
    writes: list = field(default_factory=list)
    set: tuple | None = None   # (dst pipe, event)
    wait: tuple | None = None  # (src pipe, event)
    pc: int = 0
    extra_waits: list = field(default_factory=list)
    extra_sets: list = field(default_factory=list)
    target: "Label | None" = None  # branches and jumps
    reloc_param: int | None = None  # the tensor parameter whose address goes in the `gm` field
    scalar_param: int | None = None  # the scalar parameter whose value goes in the `imm` field


@dataclass
class Place:
    """Where a tile lives: a memory space, a byte address and a layout (dtype, shape)."""

    space: str
    buf: "Buffer"
    shape: tuple[int, ...]
    dtype: dt.DType


@dataclass
class Buffer:
    space: str
    nbytes: int
    start: int
    end: int
    name: str
    loc: SourceLoc | None
    addr: int = -1


@dataclass
class Template:
    """A built kernel, ready to be encoded for any launch instance."""

    name: str
    words: array
    layouts: list[tuple[dt.DType, tuple[int, ...]]]
    reg_types: list[dt.DType]
    footprint: dict[str, int]
    buffers: list[Buffer]
    relocs: list[tuple[int, int, int]]  # (word index, kind 0=gm address, param index)
    scalar_slots: list[tuple[int, int, dt.DType]]  # (word index of the imm64, param index, dtype)
    debug: list[tuple[int, SourceLoc]]
    strings: list[str]
    kind: str
    instrs: list[Emitted]
    double_buffer: bool = False


class _Scope:
    """A loop or scope being lowered: where exits jump and which homes they fill."""

    def __init__(self, op: Op, exit_label: Label, cont_label: Label | None, homes: list):
        self.op = op
        self.exit_label = exit_label
        self.cont_label = cont_label
        self.homes = homes


def _nbytes(shape, dtype: dt.DType) -> int:
    n = 1
    for s in shape:
        n *= s
    nb = max(1, n) * dtype.itemsize
    return (nb + 31) // 32 * 32


class Lowering:
    def __init__(self, fn: Function, profile):
        self.fn = fn
        self.profile = profile
        self.out: list = []  # Emitted or Label
        self.layouts: dict = {}
        self.layout_list: list = []
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}
        self.pos: dict[int, int] = {}       # op id -> linear position
        self.op_end: dict[int, int] = {}    # op id -> position after its regions
        self.first_use: dict[int, int] = {}
        self.last_use: dict[int, int] = {}
        self.places: dict[int, Place] = {}  # value id -> place
        self.regs: dict[int, int] = {}      # value id -> register
        self.reg_types: list[dt.DType] = []
        self.buffers: list[Buffer] = []
        self.value_buf: dict[int, Buffer] = {}
        self.scopes: list[_Scope] = []
        self.scalar_slots = []
        self.relocs = []
        self.uses_cube = False
        self.const_regs: dict = {}
        self.end_label = Label("end")
        self.home_of: dict = {}  # value id -> home key of a loop-carried or branch-result scalar
        self.def_pos: dict[int, int] = {}
        self._loop_homes: dict = {}
        self._reg_home_span: dict = {}
        self._pending_init: dict = {}
        self.alt: dict = {}  # id(buffer) -> its alternate in the second copy of an unrolled loop body
        self.alt_active = False
        self.unrolled: set = set()  # ids of loops emitted twice per trip (double-buffered)
        self.l0c_shadow: dict = {}  # loop id -> [(L0C home, UB copy, result)] made at the loop exit
        self._scratch_n = 0  # splat slots handed out (4 rotating 32-byte slots above the allocation)
        self._scratch_top = 0
        self._cube: dict = {}  # cube staging buffers by (space, layout, ping-pong copy)
        self._cube_top: dict = {}
        self._swap_used = 0  # bytes of temporaries for loop-carried swaps

    # ---- entry ---------------------------------------------------------------------------------------
    def run(self) -> Template:
        self._number(self.fn.body)
        self._plan_places()
        self._allocate_memory()
        self._allocate_registers()
        self._emit_prologue()
        self._emit_block(self.fn.body)
        self.out.append(self.end_label)
        self._emit(isa.BY_NAME["END"], {}, None, None)
        _insert_sync(self.out)
        return self._assemble()

    # ---- numbering and liveness ----------------------------------------------------------------------
    def _number(self, block: Block):
        """Number ops in program order; record where each value is defined and last used."""
        for op in block.ops:
            self.pos[id(op)] = p = len(self.pos) * 2
            for v in op.operands:
                self.last_use[v.id] = max(self.last_use.get(v.id, -1), p)
            for r in op.regions:
                for a in r.args:
                    self.def_pos.setdefault(a.id, p)
                self._number(r)
            self.op_end[id(op)] = len(self.pos) * 2 + 1
            self.pos[("end", id(op))] = self.op_end[id(op)]
            for r in op.results:
                self.def_pos.setdefault(r.id, p)

    def _extend_loop_uses(self, block: Block, loops: list):
        """A value defined outside a loop and used inside it stays live until the loop ends."""
        for op in block.ops:
            if op.kind == "for":
                # the bound and the step are read again at every iteration
                for v in op.operands[1:3]:
                    self.last_use[v.id] = max(self.last_use[v.id], self.op_end[id(op)])
            for v in op.operands:
                dpos = self.def_pos.get(v.id, -1)
                for lp in loops:
                    if dpos < self.pos[id(lp)]:
                        self.last_use[v.id] = max(self.last_use[v.id], self.op_end[id(lp)])
                        break
            for r in op.regions:
                self._extend_loop_uses(r, loops + [op] if op.kind in ("for", "while") else loops)

    # ---- places ---------------------------------------------------------------------------------------
    def _plan_places(self):
        self._extend_loop_uses(self.fn.body, [])
        self._users: dict[int, list[Op]] = {}
        for op in self.fn.walk():
            for v in op.operands:
                self._users.setdefault(v.id, []).append(op)
        self._plan_block(self.fn.body)

    def _new_buffer(self, space, nbytes, start, end, name, loc) -> Buffer:
        b = Buffer(space, nbytes, start, end, name, loc)
        self.buffers.append(b)
        return b

    def _interval(self, v: Value) -> tuple[int, int]:
        d = self.def_pos.get(v.id, 0)
        return d, max(self.last_use.get(v.id, d), d)

    def _place(self, v: Value, space="ub", buf: Buffer | None = None, name=""):
        if buf is None:
            s, e = self._interval(v)
            op = v.op
            buf = self._new_buffer(space, _nbytes(v.shape, v.dtype), s, e, name or _value_name(v),
                                   op.loc if op is not None else None)
        else:
            s, e = self._interval(v)
            buf.start = min(buf.start, s)
            buf.end = max(buf.end, e)
        self.places[v.id] = Place(buf.space, buf, v.shape, v.dtype)
        return buf

    def _plan_block(self, block: Block):
        for op in block.ops:
            k = op.kind
            if k in ("for", "while"):
                self._plan_loop(op)
            elif k in ("if", "scope"):
                self._plan_branches(op)
            else:
                for r in op.regions:
                    self._plan_block(r)
            for r in op.results:
                if not isinstance(r.type, TileType) or r.id in self.places:
                    continue
                if k == "reshape":
                    src = op.operands[0]
                    buf = self.places[src.id].buf
                    self._place(r, buf=buf)
                elif k == "dma_load" and self._only_dot_operand(r):
                    self._place(r, "l1")
                elif k == "broadcast" and self._all_elementwise_users(r):
                    src = op.operands[0]
                    buf = self.places[src.id].buf
                    self.places[r.id] = Place(buf.space, buf, src.shape, src.dtype)
                    s, e = self._interval(r)
                    buf.end = max(buf.end, e)
                else:
                    self._place(r)

    def _only_dot_operand(self, v: Value) -> bool:
        """A loaded tile used only as a matrix operand is loaded straight into L1 (no UB round trip)."""
        users = self._users.get(v.id, [])
        return len(v.shape) == 2 and bool(users) and all(
            u.kind == "dot" and v in u.operands[:2] and (len(u.operands) < 3 or u.operands[2] is not v)
            for u in users)

    def _l0c_accumulator(self, op: Op, i: int, args: list) -> bool:
        """A carried tile that only feeds the accumulator of one dot whose result is yielded back stays in L0C
        for the whole loop (MMAD accumulates in place; no copies per iteration)."""
        if op.kind != "for" or len(op.regions) != 1:
            return False
        body = op.regions[0]
        arg = args[i]
        term = body.terminator
        if term is None or term.kind != "yield" or arg.dtype not in (dt.float32, dt.int32):
            return False
        users = self._users.get(arg.id, [])
        if len(users) != 1 or users[0].kind != "dot" or users[0].parent is not body:
            return False
        d = users[0]
        if len(d.operands) < 3 or d.operands[2] is not arg or d.operands[0] is arg or d.operands[1] is arg:
            return False
        y = term.operands[i]
        return y is d.result and self._users.get(y.id) == [term]

    def _all_elementwise_users(self, v: Value) -> bool:
        """Whether a broadcast may stay unmaterialised: every user is elementwise and still gets its result's shape
        from numpy broadcasting when every broadcast among its operands is left at its source's shape (a tile
        next to a scalar, or two broadcasts that only meet in the result, need the copy)."""
        users = self._users.get(v.id, [])
        if not users:
            return False
        for u in users:
            if u.kind not in ELEMENTWISE or not isinstance(u.results[0].type, TileType):
                return False
            shape = ()
            for x in u.operands:
                if isinstance(x.type, TileType):
                    src = x.op.operands[0] if x.op is not None and x.op.kind == "broadcast" else x
                    shape = broadcast_shapes(shape, src.shape)
            if shape != u.results[0].shape:
                return False
        return True

    def _home_for(self, values: list[Value], loc) -> list:
        homes = []
        for v in values:
            if isinstance(v.type, TileType):
                homes.append(self._new_buffer("ub", _nbytes(v.shape, v.dtype), 0, 0, "carried", loc))
            else:
                homes.append(("reg", v.type.dtype))
        return homes

    def _attach(self, v: Value, home, start, end):
        if isinstance(home, Buffer):
            home.start = min(home.start or start, start) if home.end else start
            home.end = max(home.end, end)
            self.places[v.id] = Place(home.space, home, v.shape, v.dtype)
        else:
            self.home_of[v.id] = home

    def _plan_loop(self, op: Op):
        body_blocks = op.regions
        if op.kind == "for":
            carried_args = [r.args[1:] for r in body_blocks]
            inits = op.operands[3:]
        else:
            carried_args = [r.args for r in body_blocks]
            inits = op.operands
        start = self.pos[id(op)]
        end = self.op_end[id(op)]
        homes = self._home_for(list(op.results), op.loc)
        self._loop_homes[id(op)] = homes
        for i, h in enumerate(homes):
            res = op.results[i]
            rs, re_ = self._interval(res)
            lo, hi = start, max(end, re_)
            # the init may be computed directly in the home when the loop is its only user
            init = inits[i]
            if isinstance(h, Buffer) and self._l0c_accumulator(op, i, carried_args[0]):
                h.space = "l0c"
                h.name = "accumulator (L0C)"
                h.start, h.end = lo, end
                for args in carried_args:
                    self._attach(args[i], h, lo, end)
                self.places[res.id] = Place("l0c", h, res.shape, res.dtype)
                if self._users.get(res.id):
                    # results are read after the loop through a UB copy made once, at the loop exit
                    shadow = self._new_buffer("ub", _nbytes(res.shape, res.dtype), end, max(end, re_),
                                              "accumulator result", op.loc)
                    self.l0c_shadow.setdefault(id(op), []).append((h, shadow, res))
                    self.places[res.id] = Place("ub", shadow, res.shape, res.dtype)
                continue
            if isinstance(h, Buffer):
                h.start, h.end = lo, hi
                for args in carried_args:
                    self._attach(args[i], h, lo, hi)
                self._attach(res, h, lo, hi)
            else:
                key = ("home", id(op), i)
                self.home_of[key] = h
                for args in carried_args:
                    self.home_of[args[i].id] = key
                self.home_of[res.id] = key
                self._reg_home_span[key] = (lo, hi, h[1])
            if isinstance(h, Buffer) and init.op is not None and self._users.get(init.id) == [op] and \
                    _coalescible_def(init.op):
                self._pending_init[init.id] = h
        first_body_buffer = len(self.buffers)
        for r in body_blocks:
            self._plan_block(r)
            self._coalesce_yield(r, homes, carried_args[body_blocks.index(r)] if op.kind == "for" else r.args,
                                 op)
        if self._double_buffer_loop(op):
            # the body is emitted twice per trip; the second copy uses alternate buffers so the loads of one
            # iteration overlap the compute of the previous one (ping-pong)
            for b in self.buffers[first_body_buffer:]:
                if b.nbytes > 0 and id(b) not in self.alt and b.name != "carried":
                    alt = Buffer(b.space, b.nbytes, b.start, b.end, b.name + " (ping-pong)", b.loc)
                    self.alt[id(b)] = alt
                    self.buffers.append(alt)
            self.unrolled.add(id(op))

    def _double_buffer_loop(self, op: Op) -> bool:
        if op.kind != "for" or not self.profile.double_buffer:
            return False
        body = op.regions[0]
        has_load = False
        for o in body.ops:
            for inner in o.walk():
                if inner.kind in ("for", "while"):
                    return False
                if inner.kind in ("dma_load", "gather"):
                    has_load = True
        return has_load

    def _coalesce_yield(self, block: Block, homes, args, op):
        term = block.terminator
        if term is None or term.kind != "yield":
            return
        if op.kind == "while" and block is op.regions[0]:
            return
        for i, v in enumerate(term.operands):
            h = homes[i]
            if not isinstance(h, Buffer) or v.op is None or v.op.parent is not block:
                continue
            place = self.places.get(v.id)
            if place is None or place.buf is h or not _coalescible_def(v.op):
                continue
            if self._users.get(v.id) != [term]:
                continue
            if place.buf.name == "carried":
                continue
            # every use of the block argument must come no later than v's definition
            arg = args[i]
            vpos = self.pos[id(v.op)]
            arg_uses = [u for u in self._users.get(arg.id, [])]
            ok = True
            for u in arg_uses:
                up = self.pos[id(u)]
                if up > vpos or (up == vpos and not self._inplace_ok(v.op, arg)):
                    ok = False
                    break
            if not ok or any(self.places.get(x.id) is not None and self.places[x.id].buf is place.buf
                             for x in v.op.operands if x is not v):
                continue
            if self._buffer_shared(place.buf, v):
                continue
            place.buf.end = place.buf.start  # the temporary buffer is no longer needed
            place.buf.nbytes = 0
            self.places[v.id] = Place(h.space, h, v.shape, v.dtype)

    def _buffer_shared(self, buf: Buffer, v: Value) -> bool:
        return any(p.buf is buf for vid, p in self.places.items() if vid != v.id)

    def _inplace_ok(self, op: Op, arg: Value) -> bool:
        """An elementwise op may overwrite an operand that has the result's exact shape; a dot accumulates
        into its accumulator."""
        if op.kind == "dot":
            return len(op.operands) == 3 and op.operands[2] is arg and arg not in op.operands[:2]
        if op.kind not in ELEMENTWISE and op.kind not in ("unary", "cast"):
            return False
        if op.kind == "cast" and op.operands[0].dtype.itemsize != op.results[0].dtype.itemsize:
            return False
        return all(x is not arg or x.shape == op.results[0].shape for x in op.operands)

    def _plan_branches(self, op: Op):
        start = self.pos[id(op)]
        end = self.op_end[id(op)]
        homes = self._home_for(list(op.results), op.loc)
        self._loop_homes[id(op)] = homes
        for i, h in enumerate(homes):
            res = op.results[i]
            rs, re_ = self._interval(res)
            if isinstance(h, Buffer):
                h.start, h.end = start, max(end, re_)
                self._attach(res, h, start, h.end)
            else:
                key = ("home", id(op), i)
                self.home_of[key] = h
                self.home_of[res.id] = key
                self._reg_home_span[key] = (start, max(end, re_), h[1])
        for r in op.regions:
            self._plan_block(r)

    # ---- memory allocation -------------------------------------------------------------------------
    def _allocate_memory(self):
        for vid, home in self._pending_init.items():
            p = self.places.get(vid)
            if home.space != "ub":
                continue
            if p is not None and p.buf is not home and not self._buffer_shared_id(p.buf, vid):
                p.buf.nbytes = 0
                self.places[vid] = Place(home.space, home, p.shape, p.dtype)
                home.start = min(home.start, p.buf.start)
        spaces = {"ub": self.profile.ub_bytes, "l1": self.profile.l1_bytes, "l0a": self.profile.l0a_bytes,
                  "l0b": self.profile.l0b_bytes, "l0c": self.profile.l0c_bytes}
        try:
            self.footprint = self._scan_all(spaces)
        except ResourceError:
            if not self.alt:
                raise
            # ping-pong buffers do not fit: fall back to single buffering
            alts = {id(a) for a in self.alt.values()}
            self.buffers = [b for b in self.buffers if id(b) not in alts]
            self.alt.clear()
            self.unrolled.clear()
            self.footprint = self._scan_all(spaces)
        for b in self.buffers:
            if b.nbytes == 0:
                b.addr = 0

    def _scan_all(self, spaces) -> dict:
        fp = {}
        for space, cap in spaces.items():
            bufs = [b for b in self.buffers if b.space == space and b.nbytes > 0]
            fp[space] = _linear_scan(bufs, cap, space, self.fn.name, self.profile)
        return fp

    def _buffer_shared_id(self, buf, vid) -> bool:
        return any(p.buf is buf for k, p in self.places.items() if k != vid)

    # ---- registers ---------------------------------------------------------------------------------------
    def _allocate_registers(self):
        """Linear scan over scalar values; registers are typed (one dtype each)."""
        items = []  # (start, end, key, dtype)
        for op in self.fn.walk():
            if op.kind == "const":
                continue
            for r in op.results:
                if isinstance(r.type, ScalarType) and r.id not in self.home_of:
                    s, e = self._interval(r)
                    items.append((s, e, r.id, r.type.dtype))
        for p in self.fn.params:
            if p.kind == "scalar":
                s, e = 0, max(self.last_use.get(p.value.id, 0), 0)
                items.append((-1, e, p.value.id, p.dtype))
        for key, (s, e, d) in self._reg_home_span.items():
            items.append((s, e, key, d))
        for op in self.fn.walk():
            if op.kind == "for":
                iv = op.regions[0].args[0]
                items.append((self.pos[id(op)], self.op_end[id(op)], iv.id, iv.type.dtype))
        # constants that need registers live for the whole kernel
        self._const_values = {}
        for op in self.fn.walk():
            if op.kind == "const":
                key = (op.result.dtype.code, op.attrs["value"], type(op.attrs["value"]).__name__)
                self._const_values.setdefault(key, []).append(op.result)
        for key, vals in self._const_values.items():
            items.append((-2, 1 << 60, ("const",) + key, vals[0].type.dtype))
        items.sort(key=lambda t: (t[0], t[1]))
        active: list = []
        free: dict = {}
        self.reg_of_key: dict = {}
        for s, e, key, d in items:
            still = []
            for (ae, reg, ad) in active:
                if ae < s:
                    free.setdefault(ad.code, []).append(reg)
                else:
                    still.append((ae, reg, ad))
            active = still
            pool = free.get(d.code)
            if pool:
                reg = pool.pop()
            else:
                reg = len(self.reg_types)
                if reg >= MAX_REGS:
                    raise ResourceError(f"kernel `{self.fn.name}` needs more than {MAX_REGS} scalar registers; "
                                        "simplify the scalar arithmetic or split the kernel")
                self.reg_types.append(d)
            self.reg_of_key[key] = reg
            active.append((e, reg, d))
        for key, vals in self._const_values.items():
            for v in vals:
                self.regs[v.id] = self.reg_of_key[("const",) + key]
        for vid_or_key, reg in self.reg_of_key.items():
            if isinstance(vid_or_key, int):
                self.regs[vid_or_key] = reg
        for vid, key in self.home_of.items():
            if isinstance(vid, int) and isinstance(key, tuple) and key and key[0] == "home":
                self.regs[vid] = self.reg_of_key[key]

    # ---- emission helpers ---------------------------------------------------------------------------
    def _emit(self, ins: isa.Instr, vals: dict, dtype, loc, reads=(), writes=()) -> Emitted:
        e = Emitted(ins, vals, dtype, loc, list(reads), list(writes))
        self.out.append(e)
        return e

    def layout(self, dtype: dt.DType, shape) -> int:
        key = (dtype.code, tuple(shape))
        idx = self.layouts.get(key)
        if idx is None:
            idx = len(self.layout_list)
            if idx >= 1 << 16:
                raise ResourceError("too many distinct tile layouts in one kernel")
            self.layouts[key] = idx
            self.layout_list.append((dtype, tuple(shape)))
        return idx

    def place(self, v: Value) -> Place:
        """Where ``v`` lives in the code being emitted (the second copy of an unrolled loop body uses the
        alternate buffers)."""
        p = self.places[v.id]
        if self.alt_active:
            alt = self.alt.get(id(p.buf))
            if alt is not None:
                return Place(alt.space, alt, p.shape, p.dtype)
        return p

    def tile(self, v: Value) -> int:
        p = self.place(v)
        return self._tile_ref(p.buf.addr, p.dtype, p.shape)

    def _tile_ref(self, addr, dtype, shape) -> int:
        return (addr // isa.TILE_ADDR_UNIT) | (self.layout(dtype, shape) << 16)

    def rng(self, v: Value):
        p = self.place(v)
        return (p.space, p.buf.addr, p.buf.addr + max(p.buf.nbytes, 1))

    def reg(self, v: Value) -> int:
        r = self.regs.get(v.id)
        if r is None:
            raise CompilationError(f"internal: scalar {v!r} has no register", v.op.loc if v.op else None)
        return r

    def sop(self, v: Value) -> int:
        if v.op is not None and v.op.kind == "const":
            c = v.op.attrs["value"]
            if isinstance(c, (int, bool)) and isa.SOP_IMM_MIN <= int(c) <= isa.SOP_IMM_MAX:
                return int(c) & 0x7FFFFFFF
        return isa.SOP_REG_BIT | self.reg(v)

    def string(self, s: str) -> int:
        idx = self.string_ids.get(s)
        if idx is None:
            idx = self.string_ids[s] = len(self.strings)
            self.strings.append(s)
        return idx

    # ---- prologue: constants and scalar parameters into registers ---------------------------------------
    def _emit_prologue(self):
        movi = isa.BY_NAME["MOVI"]
        for key, vals in self._const_values.items():
            reg = self.reg_of_key[("const",) + key]
            v = vals[0]
            bits = _raw_bits(v.op.attrs["value"], v.type.dtype)
            self._emit(movi, {"rd": reg, "imm": bits}, v.type.dtype, None)
        for idx, p in enumerate(self.fn.params):
            if p.kind != "scalar":
                continue
            reg = self.regs.get(p.value.id)
            if reg is None:
                continue
            e = self._emit(movi, {"rd": reg, "imm": 0}, p.dtype, self.fn.loc)
            e.scalar_param = idx

    # ---- blocks and ops ---------------------------------------------------------------------------------------
    def _emit_block(self, block: Block):
        for op in block.ops:
            handler = getattr(self, "_op_" + op.kind, None)
            if handler is None:
                raise CompilationError(f"internal: no lowering for IR op `{op.kind}`", op.loc)
            handler(op)

    def _op_const(self, op):
        """Constants are loaded into registers by the prologue."""

    def _op_program_id(self, op):
        self._emit(isa.BY_NAME["PID"], {"rd": self.reg(op.result), "axis": op.attrs["axis"]}, dt.int32, op.loc)

    def _op_num_programs(self, op):
        self._emit(isa.BY_NAME["NPROG"], {"rd": self.reg(op.result), "axis": op.attrs["axis"]}, dt.int32, op.loc)

    def _op_tensor_dim(self, op, stride=False):
        self._emit(isa.BY_NAME["TDIM"], {"rd": self.reg(op.result), "tensor": op.attrs["tensor"],
                                         "dim": op.attrs["dim"], "stride": int(stride)}, dt.int32, op.loc)

    def _op_tensor_stride(self, op):
        self._op_tensor_dim(op, stride=True)

    def _op_arange(self, op):
        r = op.result
        self._emit(isa.BY_NAME["VIOTA"], {"dst": self.tile(r), "start": op.attrs["start"] & 0x7FFFFFFF}, dt.int32,
                   op.loc, writes=[self.rng(r)])

    def _dup(self, scalar: Value, dst_ref, dst_rng, loc, dtype):
        self._emit(isa.BY_NAME["VDUP"], {"rs": self.reg(scalar), "dst": dst_ref}, dtype, loc, writes=[dst_rng])

    def _op_full(self, op):
        r = op.result
        self._dup(op.operands[0], self.tile(r), self.rng(r), op.loc, r.dtype)

    def _temp_tile(self, scalar: Value, rank: int, loc) -> tuple[int, tuple]:
        """A (1, ..., 1) tile holding a scalar, for instructions that only take tiles."""
        shape = (1,) * rank
        buf = self._scratch(scalar.dtype, shape)
        ref = self._tile_ref(buf.addr, scalar.dtype, shape)
        rng = ("ub", buf.addr, buf.addr + 32)
        self._dup(scalar, ref, rng, loc, scalar.dtype)
        return ref, rng

    def _scratch(self, dtype, shape) -> Buffer:
        """A small UB buffer above every allocated one, reserved for scalar splats."""
        addr = self.footprint["ub"] + 32 * (self._scratch_n % 4)
        self._scratch_n += 1
        self._scratch_top = max(self._scratch_top, 32 * min(self._scratch_n, 4))
        b = Buffer("ub", 32, 0, 0, "splat", None, addr)
        return b

    def _op_binary(self, op):
        a, b = op.operands
        r = op.result
        name = op.attrs["op"]
        if not r.is_tile:
            self._emit(isa.SCALAR_BINARY[name], {"rd": self.reg(r), "ra": self.reg(a), "rb": self.reg(b)}, r.dtype,
                       op.loc)
            return
        if a.is_tile and b.is_tile:
            self._emit(isa.VECTOR_BINARY[name], {"dst": self.tile(r), "a": self.tile(a), "b": self.tile(b)}, r.dtype,
                       op.loc, reads=[self.rng(a), self.rng(b)], writes=[self.rng(r)])
            return
        tile_v, scal, rev = (a, b, 0) if a.is_tile else (b, a, 1)
        if tile_v.shape != r.shape:
            src_ref, src_rng = self.tile(tile_v), self.rng(tile_v)
            self._emit(isa.BY_NAME["VCOPY"], {"dst": self.tile(r), "a": src_ref}, r.dtype, op.loc,
                       reads=[src_rng], writes=[self.rng(r)])
            tile_v = r
        self._emit(isa.VECTOR_BINARY_S[name], {"rs": self.reg(scal), "rev": rev, "dst": self.tile(r),
                                               "a": self.tile(tile_v)}, r.dtype, op.loc,
                   reads=[self.rng(tile_v)], writes=[self.rng(r)])

    def _op_compare(self, op):
        a, b = op.operands
        r = op.result
        cc = isa.CC_NAMES.index(op.attrs["op"])
        if not r.is_tile:
            self._emit(isa.BY_NAME["SCMP"], {"rd": self.reg(r), "ra": self.reg(a), "rb": self.reg(b), "cc": cc},
                       a.dtype, op.loc)
            return
        if a.is_tile and b.is_tile:
            self._emit(isa.BY_NAME["VCMP"], {"cc": cc, "dst": self.tile(r), "a": self.tile(a), "b": self.tile(b)},
                       a.dtype, op.loc, reads=[self.rng(a), self.rng(b)], writes=[self.rng(r)])
            return
        tile_v, scal, rev = (a, b, 0) if a.is_tile else (b, a, 1)
        if tile_v.shape != r.shape:
            ref, rng = self._temp_tile(scal, len(r.shape), op.loc)
            refs = {"a": self.tile(a), "b": ref} if a.is_tile else {"a": ref, "b": self.tile(b)}
            self._emit(isa.BY_NAME["VCMP"], {"cc": cc, "dst": self.tile(r), **refs}, a.dtype, op.loc,
                       reads=[self.rng(tile_v), rng], writes=[self.rng(r)])
            return
        self._emit(isa.BY_NAME["VCMPS"], {"cc": cc, "rs": self.reg(scal), "rev": rev, "dst": self.tile(r),
                                          "a": self.tile(tile_v)}, a.dtype, op.loc,
                   reads=[self.rng(tile_v)], writes=[self.rng(r)])

    def _op_unary(self, op):
        x = op.operands[0]
        r = op.result
        name = op.attrs["op"]
        if not r.is_tile:
            self._emit(isa.SCALAR_UNARY[name], {"rd": self.reg(r), "ra": self.reg(x)}, r.dtype, op.loc)
            return
        self._emit(isa.VECTOR_UNARY[name], {"dst": self.tile(r), "a": self.tile(x)}, r.dtype, op.loc,
                   reads=[self.rng(x)], writes=[self.rng(r)])

    def _tile_or_temp(self, v: Value, rank: int, loc):
        if v.is_tile:
            return self.tile(v), self.rng(v)
        return self._temp_tile(v, rank, loc)

    def _op_select(self, op):
        c, a, b = op.operands
        r = op.result
        if not r.is_tile:
            self._emit(isa.BY_NAME["SSEL"], {"rd": self.reg(r), "rc": self.reg(c), "ra": self.reg(a),
                                             "rb": self.reg(b)}, r.dtype, op.loc)
            return
        rank = len(r.shape)
        refs, rngs = {}, []
        for name, v in (("c", c), ("a", a), ("b", b)):
            ref, rng = self._tile_or_temp(v, rank, op.loc)
            refs[name] = ref
            rngs.append(rng)
        self._emit(isa.BY_NAME["VSEL"], {"dst": self.tile(r), **refs}, r.dtype, op.loc, reads=rngs,
                   writes=[self.rng(r)])

    def _op_fma(self, op):
        r = op.result
        rank = len(r.shape)
        refs, rngs = {}, []
        for name, v in zip(("a", "b", "c"), op.operands):
            ref, rng = self._tile_or_temp(v, rank, op.loc)
            refs[name] = ref
            rngs.append(rng)
        self._emit(isa.BY_NAME["VFMA"], {"dst": self.tile(r), **refs}, r.dtype, op.loc, reads=rngs,
                   writes=[self.rng(r)])

    def _op_cast(self, op):
        x = op.operands[0]
        r = op.result
        bitcast = int(op.attrs["bitcast"])
        rtz = int(op.attrs.get("rounding") == "rtz")
        if not r.is_tile:
            self._emit(isa.BY_NAME["SCAST"], {"rd": self.reg(r), "ra": self.reg(x), "bitcast": bitcast, "rtz": rtz},
                       r.dtype, op.loc)
            return
        self._emit(isa.BY_NAME["VCAST"], {"bitcast": bitcast, "rtz": rtz, "dst": self.tile(r), "a": self.tile(x)},
                   r.dtype, op.loc, reads=[self.rng(x)], writes=[self.rng(r)])

    def _op_broadcast(self, op):
        r = op.result
        src = op.operands[0]
        if self.place(r).buf is self.place(src).buf and self.place(r).shape == src.shape:
            return  # consumed by elementwise ops directly (numpy broadcasting)
        self._emit(isa.BY_NAME["VCOPY"], {"dst": self.tile(r), "a": self.tile(src)}, r.dtype, op.loc,
                   reads=[self.rng(src)], writes=[self.rng(r)])

    def _op_reshape(self, op):
        r = op.result
        src = op.operands[0]
        if self.place(r).buf is not self.place(src).buf:
            self._emit(isa.BY_NAME["VCOPY"], {"dst": self._tile_ref(self.place(r).buf.addr, src.dtype, src.shape),
                                              "a": self.tile(src)}, r.dtype, op.loc,
                       reads=[self.rng(src)], writes=[self.rng(r)])

    def _op_permute(self, op):
        r = op.result
        perm = op.attrs["perm"]
        if len(perm) > 4:
            raise CompilationError("permute supports tiles of rank <= 4", op.loc)
        code = 0
        for i, p in enumerate(perm):
            code |= p << (2 * i)
        self._emit(isa.BY_NAME["VPERM"], {"perm": code, "dst": self.tile(r), "a": self.tile(op.operands[0])},
                   r.dtype, op.loc, reads=[self.rng(op.operands[0])], writes=[self.rng(r)])

    def _op_cat(self, op):
        r = op.result
        a, b = op.operands
        self._emit(isa.BY_NAME["VCAT"], {"axis": op.attrs["axis"], "dst": self.tile(r), "a": self.tile(a),
                                         "b": self.tile(b)}, r.dtype, op.loc, reads=[self.rng(a), self.rng(b)],
                   writes=[self.rng(r)])

    def _op_slice(self, op):
        r = op.result
        x = op.operands[0]
        starts = list(op.attrs["starts"]) + [0] * (4 - len(op.attrs["starts"]))
        if len(op.attrs["starts"]) > 4 or any(s >= 1 << 16 for s in starts):
            raise CompilationError("tile slices support rank <= 4 and offsets below 65536", op.loc)
        self._emit(isa.BY_NAME["VSLICE"], {"dst": self.tile(r), "a": self.tile(x), "s0": starts[0], "s1": starts[1],
                                           "s2": starts[2], "s3": starts[3]}, r.dtype, op.loc,
                   reads=[self.rng(x)], writes=[self.rng(r)])

    def _op_take(self, op):
        r = op.result
        x, idx = op.operands
        self._emit(isa.BY_NAME["VTAKE"], {"axis": op.attrs["axis"], "dst": self.tile(r), "a": self.tile(x),
                                          "index": self.tile(idx)}, r.dtype, op.loc,
                   reads=[self.rng(x), self.rng(idx)], writes=[self.rng(r)])

    def _op_sort(self, op):
        r, x = op.result, op.operands[0]
        self._emit(isa.BY_NAME["VSORT"], {"axis": op.attrs["axis"], "descending": int(op.attrs["descending"]),
                                          "dst": self.tile(r), "a": self.tile(x)}, r.dtype, op.loc,
                   reads=[self.rng(x)], writes=[self.rng(r)])

    def _op_histogram(self, op):
        r, x = op.result, op.operands[0]
        mask = op.operands[1] if op.attrs["has_mask"] else None
        reads = [self.rng(x)] + ([self.rng(mask)] if mask is not None else [])
        self._emit(isa.BY_NAME["VHIST"], {"masked": int(mask is not None), "dst": self.tile(r), "a": self.tile(x),
                                          "mask": self.tile(mask) if mask is not None else 0}, r.dtype, op.loc,
                   reads=reads, writes=[self.rng(r)])

    def _op_to_scalar(self, op):
        x = op.operands[0]
        self._emit(isa.BY_NAME["MOVTS"], {"rd": self.reg(op.result), "src": self.tile(x)}, op.result.dtype, op.loc,
                   reads=[self.rng(x)])

    def _op_reduce(self, op):
        r = op.result
        x = op.operands[0]
        self._emit(isa.BY_NAME["VREDUCE"], {"op": isa.REDUCE_OPS.index(op.attrs["op"]), "axis": op.attrs["axis"],
                                            "dst": self.tile(r), "a": self.tile(x)}, r.dtype, op.loc,
                   reads=[self.rng(x)], writes=[self.rng(r)])

    def _op_scan(self, op):
        r = op.result
        x = op.operands[0]
        self._emit(isa.BY_NAME["VSCAN"], {"op": isa.SCAN_OPS.index(op.attrs["op"]), "axis": op.attrs["axis"],
                                          "reverse": int(op.attrs["reverse"]), "dst": self.tile(r),
                                          "a": self.tile(x)}, r.dtype, op.loc, reads=[self.rng(x)],
                   writes=[self.rng(r)])

    # ---- memory -------------------------------------------------------------------------------------------
    def _gm(self, tensor: int, e: Emitted):
        e.reloc_param = tensor

    def _dims_fields(self, operands, rank):
        base = operands[0]
        strides = operands[1:1 + rank]
        los = operands[1 + rank:1 + 2 * rank]
        his = operands[1 + 2 * rank:1 + 3 * rank]
        vals = {"base": self.sop(base)}
        for d in range(rank):
            vals[f"stride{d}"] = self.sop(strides[d])
            vals[f"lo{d}"] = self.sop(los[d])
            vals[f"hi{d}"] = self.sop(his[d])
        return vals

    def _pad_sop(self, other: Value | None, dtype) -> int:
        if other is None:
            return 0
        if other.op is not None and other.op.kind == "full":
            other = other.op.operands[0]
        if other.op is not None and other.op.kind == "const":
            c = other.op.attrs["value"]
            if (isinstance(c, (int, bool)) or (isinstance(c, float) and c.is_integer() and abs(c) < 1 << 30)) and \
                    isa.SOP_IMM_MIN <= int(c) <= isa.SOP_IMM_MAX and not (isinstance(c, float) and c == 0.0 and
                                                                          str(c).startswith("-")):
                return int(c) & 0x7FFFFFFF
        return isa.SOP_REG_BIT | self.reg(other)

    def _op_dma_load(self, op):
        rank = op.attrs["rank"]
        r = op.result
        if rank > 3:
            raise CompilationError(f"loads of rank-{rank} tiles are not supported (at most 3 dims)", op.loc)
        other = op.operands[1 + 3 * rank] if op.attrs["has_other"] else None
        vals = self._dims_fields(op.operands, rank)
        vals.update({"dst": self.tile(r), "gm": 0, "pad": self._pad_sop(other, r.dtype),
                     "tensor": op.attrs["tensor"], "pad_undef": int(other is None)})
        place = self.place(r)
        ins = isa.DMA_LOAD_L1[rank] if place.space == "l1" else isa.DMA_LOAD[rank]
        e = self._emit(ins, vals, r.dtype, op.loc, reads=[("gm", op.attrs["tensor"], 0)], writes=[self.rng(r)])
        e.reloc_param = op.attrs["tensor"]

    def _op_dma_store(self, op):
        rank = op.attrs["rank"]
        if rank > 3:
            raise CompilationError(f"stores of rank-{rank} tiles are not supported (at most 3 dims)", op.loc)
        value = op.operands[1 + 3 * rank]
        vals = self._dims_fields(op.operands, rank)
        vals.update({"src": self.tile(value), "gm": 0, "tensor": op.attrs["tensor"]})
        e = self._emit(isa.DMA_STORE[rank], vals, value.dtype, op.loc, reads=[self.rng(value),
                                                                          ("gm", op.attrs["tensor"], 0)])
        e.writes.append(("gm", op.attrs["tensor"], 0))
        e.reloc_param = op.attrs["tensor"]

    def _mem_operands(self, op, is_store):
        ops = list(op.operands)
        offsets = ops[0]
        value = ops[1] if is_store else None
        rest = ops[2:] if is_store else ops[1:]
        mask = rest[0] if op.attrs.get("has_mask") else None
        other = None
        if not is_store and op.attrs.get("has_other"):
            other = rest[1] if mask is not None else rest[0]
        return offsets, value, mask, other

    def _op_gather(self, op):
        offsets, _, mask, other = self._mem_operands(op, False)
        r = op.result
        t = op.attrs["tensor"]
        if not r.is_tile:  # scalar load through the scalar unit
            e = self._emit(isa.BY_NAME["LDG"], {"rd": self.reg(r), "tensor": t, "gm": 0, "offset": self.sop(offsets)},
                           r.dtype, op.loc, reads=[("gm", t, 0)])
            e.reloc_param = t
            if mask is not None:
                # scalar masked load: select between the loaded value and `other`
                raise CompilationError("masked scalar loads are not supported", op.loc,
                                       "load a one-element tile with a mask instead")
            return
        tile_other = other is not None and other.is_tile and not (other.op is not None and other.op.kind == "full")
        pad = 0 if tile_other else self._pad_sop(other, r.dtype)
        reads = [self.rng(offsets), ("gm", t, 0)]
        vals = {"masked": int(mask is not None), "tensor": t, "dst": self.tile(r), "offsets": self.tile(offsets),
                "gm": 0, "mask": self.tile(mask) if mask is not None else 0, "pad": pad}
        if mask is not None:
            reads.append(self.rng(mask))
        e = self._emit(isa.BY_NAME["GATHER"], vals, r.dtype, op.loc, reads=reads, writes=[self.rng(r)])
        e.reloc_param = t
        if tile_other:
            refs = {"c": self.tile(mask), "a": self.tile(r), "b": self.tile(other)}
            self._emit(isa.BY_NAME["VSEL"], {"dst": self.tile(r), **refs}, r.dtype, op.loc,
                       reads=[self.rng(mask), self.rng(r), self.rng(other)], writes=[self.rng(r)])

    def _op_scatter(self, op):
        offsets, value, mask, _ = self._mem_operands(op, True)
        t = op.attrs["tensor"]
        if not value.is_tile:
            if mask is not None:
                raise CompilationError("masked scalar stores are not supported", op.loc,
                                       "guard the store with `if`")
            e = self._emit(isa.BY_NAME["STG"], {"rs": self.reg(value), "tensor": t, "gm": 0,
                                                "offset": self.sop(offsets)}, value.dtype, op.loc,
                           writes=[("gm", t, 0)])
            e.reloc_param = t
            return
        reads = [self.rng(offsets), self.rng(value)]
        vals = {"masked": int(mask is not None), "tensor": t, "src": self.tile(value), "offsets": self.tile(offsets),
                "gm": 0, "mask": self.tile(mask) if mask is not None else 0}
        if mask is not None:
            reads.append(self.rng(mask))
        e = self._emit(isa.BY_NAME["SCATTER"], vals, value.dtype, op.loc, reads=reads, writes=[("gm", t, 0)])
        e.reloc_param = t

    def _op_atomic(self, op):
        ops = list(op.operands)
        offsets, value = ops[0], ops[1]
        rest = ops[2:]
        mask = rest.pop(0) if op.attrs["has_mask"] else None
        cmp = rest.pop(0) if op.attrs["has_cmp"] else None
        r = op.result
        t = op.attrs["tensor"]
        if not r.is_tile:
            raise CompilationError("scalar atomics are not supported; use a one-element tile", op.loc)
        want_old = bool(self._users.get(r.id))
        reads = [self.rng(offsets), self.rng(value), ("gm", t, 0)]
        if mask is not None:
            reads.append(self.rng(mask))
        if cmp is not None:
            reads.append(self.rng(cmp))
        vals = {"op": isa.ATOMIC_OPS.index(op.attrs["op"]), "masked": int(mask is not None), "tensor": t,
                "has_cmp": int(cmp is not None), "want_old": int(want_old), "dst": self.tile(r),
                "src": self.tile(value), "offsets": self.tile(offsets),
                "mask": self.tile(mask) if mask is not None else 0, "gm": 0,
                "cmp": self.tile(cmp) if cmp is not None else 0}
        e = self._emit(isa.BY_NAME["ATOMIC"], vals, r.dtype, op.loc, reads=reads,
                       writes=[self.rng(r), ("gm", t, 0)])
        e.reloc_param = t

    # ---- cube ------------------------------------------------------------------------------------------------
    def _op_dot(self, op):
        """GM/UB -> L1 -> L0A/L0B -> MMAD into L0C -> FixPipe to UB. Operands loaded from GM arrive in L1
        directly; a loop-carried accumulator lives in L0C and MMAD accumulates into it in place."""
        self.uses_cube = True
        a, b = op.operands[0], op.operands[1]
        acc = op.operands[2] if len(op.operands) > 2 else None
        r = op.result
        M, K = a.shape
        N = b.shape[1]
        cdt = dt.float32 if r.dtype.is_float else dt.int32
        l0_refs = []
        for src, space, mv in ((a, "l0a", "L1_TO_L0A"), (b, "l0b", "L1_TO_L0B")):
            p = self.place(src)
            if p.space == "l1":
                ref1, rng1 = self.tile(src), self.rng(src)
            else:
                l1 = self._cube_buf("l1", src.dtype, src.shape)
                ref1 = self._tile_ref(l1.addr, src.dtype, src.shape)
                rng1 = ("l1", l1.addr, l1.addr + l1.nbytes)
                self._emit(isa.BY_NAME["UB_TO_L1"], {"dst": ref1, "src": self.tile(src)}, src.dtype, op.loc,
                           reads=[self.rng(src)], writes=[rng1])
            l0 = self._cube_buf(space, src.dtype, src.shape)
            ref0 = self._tile_ref(l0.addr, src.dtype, src.shape)
            rng0 = (space, l0.addr, l0.addr + l0.nbytes)
            self._emit(isa.BY_NAME[mv], {"dst": ref0, "src": ref1}, src.dtype, op.loc, reads=[rng1], writes=[rng0])
            l0_refs.append((ref0, rng0))
        (aref, arng), (bref, brng) = l0_refs
        rp = self.place(r)
        if rp.space == "l0c":
            # accumulate in place into the loop's L0C accumulator
            cref, crng = self.tile(r), self.rng(r)
            init = acc is None
            if acc is not None and self.place(acc).buf is not rp.buf:
                self._emit(isa.BY_NAME["UB_TO_L0C"], {"dst": cref, "src": self.tile(acc)}, cdt, op.loc,
                           reads=[self.rng(acc)], writes=[crng])
            self._emit(isa.BY_NAME["MMAD"], {"init": int(init), "dst": cref, "a": aref, "b": bref}, a.dtype, op.loc,
                       reads=[arng, brng] + ([crng] if not init else []), writes=[crng])
            return
        l0c = self._cube_buf("l0c", cdt, (M, N))
        cref = self._tile_ref(l0c.addr, cdt, (M, N))
        crng = ("l0c", l0c.addr, l0c.addr + l0c.nbytes)
        if acc is not None:
            self._emit(isa.BY_NAME["UB_TO_L0C"], {"dst": cref, "src": self.tile(acc)}, cdt, op.loc,
                       reads=[self.rng(acc)], writes=[crng])
        self._emit(isa.BY_NAME["MMAD"], {"init": int(acc is None), "dst": cref, "a": aref, "b": bref}, a.dtype,
                   op.loc, reads=[arng, brng], writes=[crng])
        self._emit(isa.BY_NAME["FIX_L0C_TO_UB"], {"dst": self.tile(r), "src": cref}, r.dtype, op.loc,
                   reads=[crng], writes=[self.rng(r)])

    def _cube_buf(self, space, dtype, shape) -> Buffer:
        """Cube staging buffers: one per (space, layout), allocated above the space's live data."""
        key = (space, dtype.code, tuple(shape), self.alt_active)
        b = self._cube.get(key)
        if b is None:
            top = self._cube_top
            base = self.footprint.get(space, 0) + top.get(space, 0)
            nb = _nbytes(shape, dtype)
            align = 512 if space in ("l0a", "l0b") else 64 if space == "l0c" else 32
            base = (base + align - 1) // align * align
            cap = getattr(self.profile, f"{space}_bytes")
            if base + nb > cap and self.alt_active:
                # no room for a ping-pong copy: the second body copy shares the staging buffer
                self.alt_active = False
                try:
                    b = self._cube_buf(space, dtype, shape)
                finally:
                    self.alt_active = True
                self._cube[key] = b
                return b
            if base + nb > cap:
                raise ResourceError(f"kernel `{self.fn.name}`: the dot operand tile {tuple(shape)} {dtype} needs "
                                    f"{nb} bytes of {space.upper()} at offset {base}, but {space.upper()} has "
                                    f"{cap} bytes; use smaller BLOCK sizes for dl.dot")
            b = Buffer(space, nb, 0, 0, f"dot {space}", None, base)
            top[space] = base + nb - self.footprint.get(space, 0)
            self._cube[key] = b
        return b

    # ---- debug --------------------------------------------------------------------------------------------
    def _op_assert(self, op):
        """A failed device assertion traps: the launch stops with the message and the program's source line."""
        ok = Label("assert_ok")
        e = self._emit(isa.BY_NAME["BRNZ"], {"rc": self.reg(op.operands[0]), "target": 0}, None, op.loc)
        e.target = ok
        self._emit(isa.BY_NAME["TRAP"], {"string": self.string(op.attrs["message"])}, None, op.loc)
        self.out.append(ok)

    def _op_print(self, op):
        sid = self.string(op.attrs["prefix"])
        if not op.operands:
            self._emit(isa.BY_NAME["PRINT"], {"string": sid, "hex": int(op.attrs["hex"]), "value": 0, "reg": 0,
                                              "kind": 0}, None, op.loc)
            return
        for i, v in enumerate(op.operands):
            s = sid if i == 0 else self.string("")
            if v.is_tile:
                self._emit(isa.BY_NAME["PRINT"], {"string": s, "hex": int(op.attrs["hex"]), "value": self.tile(v),
                                                  "reg": 0, "kind": 2}, v.dtype, op.loc, reads=[self.rng(v)])
            else:
                self._emit(isa.BY_NAME["PRINT"], {"string": s, "hex": int(op.attrs["hex"]), "value": 0,
                                                  "reg": self.reg(v), "kind": 1}, v.dtype, op.loc)

    # ---- control flow -----------------------------------------------------------------------------------------
    def _move(self, dst_home, src: Value, loc):
        """Copy ``src`` into a home (register or buffer) unless it already lives there."""
        if isinstance(dst_home, Buffer):
            p = self.place(src)
            if p.buf is dst_home:
                return
            ref_dst = self._tile_ref(dst_home.addr, src.dtype, src.shape)
            dst_rng = (dst_home.space, dst_home.addr, dst_home.addr + dst_home.nbytes)
            if dst_home.space == "l0c":
                self._emit(isa.BY_NAME["UB_TO_L0C"], {"dst": ref_dst, "src": self.tile(src)}, src.dtype, loc,
                           reads=[self.rng(src)], writes=[dst_rng])
                return
            self._emit(isa.BY_NAME["VCOPY"], {"dst": ref_dst, "a": self.tile(src)}, src.dtype, loc,
                       reads=[self.rng(src)], writes=[dst_rng])
        else:
            rd = dst_home
            rs = self.reg(src)
            if rd != rs:
                self._emit(isa.BY_NAME["MOV"], {"rd": rd, "rs": rs}, src.dtype, loc)

    def _home_targets(self, op: Op) -> list:
        homes = self._loop_homes[id(op)]
        out = []
        for i, h in enumerate(homes):
            if isinstance(h, Buffer):
                out.append(h)
            else:
                out.append(self.reg_of_key[("home", id(op), i)])
        return out

    def _parallel_move(self, homes, values, loc):
        """Move values into homes as if all at once (a value may itself sit in another home)."""
        pending = [(h, v) for h, v in zip(homes, values) if not self._already(h, v)]
        if not pending:
            return
        # Values that live in a home which is overwritten earlier must be saved first.
        dests = [h for h, _ in pending]
        safe = []
        for i, (h, v) in enumerate(pending):
            src_home = self._home_of_value(v)
            clobbered = any(src_home is d or (isinstance(d, int) and d == src_home) for d in dests[:i])
            if clobbered:
                v = self._save_temp(v, loc)
            safe.append((h, v))
        for h, v in safe:
            self._move(h, v, loc)

    def _already(self, h, v) -> bool:
        if isinstance(h, Buffer):
            return self.place(v).buf is h
        return self.reg(v) == h

    def _home_of_value(self, v: Value):
        if v.is_tile:
            return self.place(v).buf
        return self.reg(v)

    def _save_temp(self, v: Value, loc) -> Value:
        """Copy a value whose place a parallel move overwrites (``a, b = b, a`` in a loop) to a temporary."""
        tmp = Value(v.type)
        if v.is_tile:
            nb = _nbytes(v.shape, v.dtype)
            buf = Buffer("ub", nb, 0, 0, "swap", loc, self._swap_addr(nb))
            self.places[tmp.id] = Place("ub", buf, v.shape, v.dtype)
            self._move(buf, v, loc)
        else:
            r = self._extra_reg(v.dtype)
            self.regs[tmp.id] = r
            self._emit(isa.BY_NAME["MOV"], {"rd": r, "rs": self.reg(v)}, v.dtype, loc)
        return tmp

    def _swap_addr(self, nbytes: int) -> int:
        """A UB range above the allocated buffers and the splat slots, for the temporaries of one move."""
        addr = self.footprint["ub"] + 128 + self._swap_used
        self._swap_used += nbytes
        if addr + nbytes > self.profile.ub_bytes:
            raise ResourceError(f"kernel `{self.fn.name}`: no UB left for the temporary of a loop-carried swap "
                                f"({nbytes} bytes)")
        return addr

    def _op_for(self, op):
        lb, ub, step = op.operands[:3]
        inits = op.operands[3:]
        body = op.regions[0]
        homes = self._home_targets(op)
        iv = body.args[0]
        iv_reg = self.reg(iv)
        self._parallel_move(homes, inits, op.loc)
        self._emit(isa.BY_NAME["MOV"], {"rd": iv_reg, "rs": self.reg(lb)}, iv.dtype, op.loc)
        head, exit_ = Label("head"), Label("exit")
        cond = self._loop_cond_reg(op)
        copies = 2 if id(op) in self.unrolled else 1
        self.out.append(head)
        for copy in range(copies):
            latch = Label("latch")
            # cond = step > 0 ? iv < ub : iv > ub
            self._range_cond(cond, iv_reg, self.reg(ub), step, op.loc, iv.dtype)
            e = self._emit(isa.BY_NAME["BRZ"], {"rc": cond, "target": 0}, None, op.loc)
            e.target = exit_
            self.scopes.append(_Scope(op, exit_, latch, homes))
            saved = self.alt_active
            self.alt_active = saved or copy == 1
            try:
                self._emit_block(body)
            finally:
                self.alt_active = saved
                self.scopes.pop()
            self.out.append(latch)
            self._emit(isa.SCALAR_BINARY["add"], {"rd": iv_reg, "ra": iv_reg, "rb": self.reg(step)}, iv.dtype,
                       op.loc)
        e = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
        e.target = head
        self.out.append(exit_)
        for home, shadow, res in self.l0c_shadow.get(id(op), []):
            self._emit(isa.BY_NAME["FIX_L0C_TO_UB"],
                       {"dst": self._tile_ref(shadow.addr, res.dtype, res.shape),
                        "src": self._tile_ref(home.addr, res.dtype, res.shape)}, res.dtype, op.loc,
                       reads=[("l0c", home.addr, home.addr + home.nbytes)],
                       writes=[("ub", shadow.addr, shadow.addr + shadow.nbytes)])

    def _loop_cond_reg(self, op) -> int:
        key = ("cond", id(op))
        r = self.reg_of_key.get(key)
        if r is None:
            r = self._extra_reg(dt.bool_)
            self.reg_of_key[key] = r
        return r

    def _extra_reg(self, d: dt.DType) -> int:
        r = len(self.reg_types)
        if r >= MAX_REGS:
            raise ResourceError(f"kernel `{self.fn.name}` needs more than {MAX_REGS} scalar registers")
        self.reg_types.append(d)
        return r

    def _range_cond(self, cond, iv_reg, ub_reg, step: Value, loc, idt):
        scmp = isa.BY_NAME["SCMP"]
        if step.op is not None and step.op.kind == "const":
            cc = "lt" if step.op.attrs["value"] > 0 else "gt"
            self._emit(scmp, {"rd": cond, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index(cc)}, idt, loc)
            return
        # runtime step: (step > 0 and iv < ub) or (step < 0 and iv > ub)
        t1, t2, t3 = self._extra_reg(dt.bool_), self._extra_reg(dt.bool_), self._extra_reg(dt.bool_)
        zero = self._extra_reg(idt)
        self._emit(isa.BY_NAME["MOVI"], {"rd": zero, "imm": 0}, idt, loc)
        self._emit(scmp, {"rd": t1, "ra": self.reg(step), "rb": zero, "cc": isa.CC_NAMES.index("gt")}, idt, loc)
        self._emit(scmp, {"rd": t2, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index("lt")}, idt, loc)
        self._emit(scmp, {"rd": t3, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index("gt")}, idt, loc)
        self._emit(isa.BY_NAME["SSEL"], {"rd": cond, "rc": t1, "ra": t2, "rb": t3}, dt.bool_, loc)

    def _op_while(self, op):
        inits = op.operands
        cond_block, body = op.regions
        homes = self._home_targets(op)
        self._parallel_move(homes, inits, op.loc)
        head, exit_ = Label("head"), Label("exit")
        self.out.append(head)
        term = cond_block.terminator
        self._emit_block(_without_terminator(cond_block))
        c = term.operands[0]
        e = self._emit(isa.BY_NAME["BRZ"], {"rc": self.reg(c), "target": 0}, None, op.loc)
        e.target = exit_
        self.scopes.append(_Scope(op, exit_, head, homes))
        self._emit_block(body)
        self.scopes.pop()
        self.out.append(exit_)

    def _op_if(self, op):
        cond = op.operands[0]
        then_b, else_b = op.regions
        homes = self._home_targets(op) if op.results else []
        else_l, end_l = Label("else"), Label("endif")
        e = self._emit(isa.BY_NAME["BRZ"], {"rc": self.reg(cond), "target": 0}, None, op.loc)
        e.target = else_l
        self.scopes.append(_Scope(op, end_l, None, homes))
        self._emit_block(then_b)
        if not ends_in_exit(then_b):
            j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
            j.target = end_l
        self.out.append(else_l)
        self._emit_block(else_b)
        self.scopes.pop()
        self.out.append(end_l)

    def _op_scope(self, op):
        homes = self._home_targets(op) if op.results else []
        end_l = Label("endscope")
        self.scopes.append(_Scope(op, end_l, None, homes))
        self._emit_block(op.regions[0])
        self.scopes.pop()
        self.out.append(end_l)

    def _op_yield(self, op):
        parent = op.parent.parent
        sc = self._scope_for(parent)
        if parent.kind == "while" and op.parent is parent.regions[0]:
            return  # the condition block's yield is consumed by the branch in _op_while
        self._parallel_move(sc.homes, op.operands, op.loc)
        if parent.kind in ("for", "while"):
            if parent.kind == "while":
                j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
                j.target = sc.cont_label
            # for: fall through to the latch

    def _scope_for(self, op: Op) -> _Scope:
        for sc in reversed(self.scopes):
            if sc.op is op:
                return sc
        raise CompilationError("internal: exit target not found", op.loc)

    def _op_break(self, op):
        sc = self._scope_for(op.attrs["target"])
        self._parallel_move(sc.homes, op.operands, op.loc)
        j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
        j.target = sc.exit_label

    def _op_continue(self, op):
        sc = self._scope_for(op.attrs["target"])
        self._parallel_move(sc.homes, op.operands, op.loc)
        j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
        j.target = sc.cont_label

    def _op_return(self, op):
        target = op.attrs.get("target")
        if target is None:
            j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
            j.target = self.end_label
            return
        sc = self._scope_for(target)
        self._parallel_move(sc.homes, op.operands, op.loc)
        j = self._emit(isa.BY_NAME["JMP"], {"target": 0}, None, op.loc)
        j.target = sc.exit_label

    # ---- assembly -------------------------------------------------------------------------------------------
    def _assemble(self) -> Template:
        pc = 0
        instrs = []
        for item in self.out:
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
        footprint = dict(self.footprint)
        footprint["ub"] += max(self._scratch_top, 128 if self._swap_used else 0) + self._swap_used
        for space, top in self._cube_top.items():
            footprint[space] = footprint.get(space, 0) + top
        kind = "mix" if self.uses_cube else "vector"
        return Template(self.fn.name, words, list(self.layout_list), list(self.reg_types), footprint,
                        [b for b in self.buffers if b.nbytes > 0], relocs, slots, debug, list(self.strings), kind,
                        instrs)


def _without_terminator(block: Block) -> Block:
    """A view of a block without its final yield (the while condition)."""
    view = Block()
    view.ops = block.ops[:-1] if block.terminator is not None else list(block.ops)
    return view


def _coalescible_def(op: Op) -> bool:
    return op.kind not in ("reshape", "broadcast", "for", "while", "if", "scope") and not op.regions


def _value_name(v: Value) -> str:
    op = v.op
    if op is None:
        return "value"
    k = op.kind
    if k in ("binary", "unary", "compare", "reduce", "scan"):
        return f"{k} {op.attrs.get('op', '')}".strip()
    return k


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


def _raw_bits(value, dtype: dt.DType) -> int:
    arr = np.array([value]).astype(dtype.np) if not dtype.is_bool else np.array([bool(value)])
    raw = arr.view(np.uint8)
    return int.from_bytes(raw.tobytes().ljust(8, b"\0"), "little")


def _linear_scan(bufs: list[Buffer], capacity: int, space: str, kernel: str, profile) -> int:
    """First-fit allocation by start position; returns the high-water mark."""
    bufs = sorted(bufs, key=lambda b: (b.start, -b.nbytes))
    active: list[Buffer] = []
    top = 0
    for b in bufs:
        active = [a for a in active if a.end >= b.start]
        occupied = sorted((a.addr, a.addr + a.nbytes) for a in active)
        addr = 0
        for s, e in occupied:
            if addr + b.nbytes <= s:
                break
            addr = max(addr, e)
        addr = (addr + 31) // 32 * 32
        if addr + b.nbytes > capacity or addr + b.nbytes > ADDR_LIMIT:
            live = active + [b]
            total = sum(x.nbytes for x in live)
            lines = [f"  {x.name:<24} {x.nbytes / 1024:8.1f} KiB   {x.loc if x.loc else ''}"
                     for x in sorted(live, key=lambda x: -x.nbytes)]
            biggest = max((x for x in live if x.loc is not None), key=lambda x: x.nbytes, default=None)
            raise BufferOverflowError(
                f"kernel `{kernel}` does not fit {space.upper()}: {total / 1024:.1f} KiB live at once, "
                f"{capacity / 1024:.0f} KiB available on {profile.name}\n" + "\n".join(lines),
                biggest.loc if biggest is not None else None,
                "use smaller BLOCK sizes, or loop over the data in chunks")
        b.addr = addr
        active.append(b)
        top = max(top, addr + b.nbytes)
    return top


# ---- synchronisation -------------------------------------------------------------------------------------


def _span(rng) -> tuple:
    """(bucket, lo, hi) of an access range: on-chip ranges overlap by address within their space; a tensor in
    GM is a bucket of its own whose accesses all overlap."""
    if rng[0] == "gm":
        return rng, 0, 1
    return rng[0], rng[1], rng[2]


def _insert_sync(items: list) -> None:
    """Give every cross-pipe dependency a set on its producer and a wait on its consumer."""
    instrs = [x for x in items if isinstance(x, Emitted)]
    # loop bodies: [head label position, back-edge jump position] in instruction indices
    loops = []
    label_pos = {}
    pos = 0
    for x in items:
        if isinstance(x, Label):
            label_pos[id(x)] = pos
        else:
            pos += 1
    for i, e in enumerate(instrs):
        t = e.target
        if t is not None and label_pos.get(id(t), i + 1) <= i:
            loops.append((label_pos[id(t)], i))
    deps: dict[int, dict[int, int]] = {}  # consumer index -> {producer pipe: producer index}

    back_edges = {end: start for start, end in loops}

    def scan(order, state, nested=True):
        for i in order:
            visit(i, state)
            if nested and i in back_edges:
                # at a back edge, go over the body once more with the state the edge carries: this finds the
                # hazards between one iteration and the next
                scan(range(back_edges[i], i + 1), state, nested=False)

    pipes = [e.ins.pipe for e in instrs]
    reads = [[_span(r) for r in e.reads] for e in instrs]
    writes = [[_span(r) for r in e.writes] for e in instrs]

    def visit(i, state):
        # state: bucket -> [(lo, hi, writer index or None, reader indices)], in the order they were recorded
        p = pipes[i]
        need = deps.setdefault(i, {})
        for key, lo, hi in reads[i]:
            for (a, b, widx, readers) in state.get(key, ()):
                if widx is not None and a < hi and lo < b:
                    q = pipes[widx]
                    if q != p:
                        need[q] = _later(need.get(q), widx, i)
        for key, lo, hi in writes[i]:
            for (a, b, widx, readers) in state.get(key, ()):
                if a < hi and lo < b:
                    if widx is not None and pipes[widx] != p:
                        q = pipes[widx]
                        need[q] = _later(need.get(q), widx, i)
                    for ridx in readers:
                        q = pipes[ridx]
                        if q != p:
                            need[q] = _later(need.get(q), ridx, i)
        for key, lo, hi in reads[i]:
            entries = state.setdefault(key, [])
            for entry in entries:
                if entry[0] < hi and lo < entry[1]:
                    entry[3].append(i)
                    break
            else:
                entries.append((lo, hi, None, [i]))
        for key, lo, hi in writes[i]:
            entries = state.setdefault(key, [])
            entries[:] = [s for s in entries if not (s[0] < hi and lo < s[1])]
            entries.append((lo, hi, i, []))

    scan(range(len(instrs)), {})
    counters: dict = {}
    set_by: dict = {}
    block_starts = set(label_pos.values())
    synced: dict = {}  # (consumer pipe, producer pipe) -> rank of the producer already waited for
    for i in range(len(instrs)):
        if i in block_starts:
            synced.clear()
        if i not in deps:
            continue
        e = instrs[i]
        for q, widx in sorted(deps[i].items()):
            rank = widx if widx < i else widx - 1_000_000
            key_sync = (int(e.ins.pipe), int(q))
            if key_sync in synced and synced[key_sync] >= rank:
                continue  # the pipes run in order: an earlier wait already covers this producer
            synced[key_sync] = rank
            prod = instrs[widx]
            key = (widx, int(e.ins.pipe))
            ev = set_by.get(key)
            if ev is None:
                pair = (int(q), int(e.ins.pipe))
                ev = counters.get(pair, 0)
                counters[pair] = (ev + 1) % isa.N_EVENTS
                set_by[key] = ev
                if prod.set is None:
                    prod.set = (e.ins.pipe, ev)
                else:
                    prod.extra_sets.append((e.ins.pipe, ev))
            w = (q, ev)
            if e.wait is None:
                e.wait = w
            elif e.wait != w:
                e.extra_waits.append(w)
    # materialise extra sets/waits as standalone instructions on the right pipes
    out = []
    for x in items:
        if isinstance(x, Emitted) and x.extra_waits:
            for (q, ev) in x.extra_waits:
                out.append(Emitted(isa.BY_NAME["WAIT"], {"src": int(q), "dst": int(x.ins.pipe), "event": ev}, None,
                                   x.loc))
        out.append(x)
        if isinstance(x, Emitted) and x.extra_sets:
            for (dst, ev) in x.extra_sets:
                s = Emitted(isa.BY_NAME["SET"], {"src": int(x.ins.pipe), "dst": int(dst), "event": ev}, None, x.loc)
                out.append(s)
    items[:] = out


def _later(cur, cand, consumer):
    """Of two producers on one pipe, the one issued last before the consumer (pipes run in order)."""
    if cur is None:
        return cand
    # producers before the consumer in program order are later when their index is larger; producers
    # after it (previous iteration) are later still
    def rank(x):
        return x if x < consumer else x - 1_000_000
    return cand if rank(cand) > rank(cur) else cur


def lower(fn: Function, profile) -> Template:
    return Lowering(fn, profile).run()
