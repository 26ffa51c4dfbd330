"""The kernel being composed (``KernelContext``): what the fragments (``fragments``) and skeletons (``emit``) of a
fused group's kernel write with. It holds the composer (``vm.compose``), the group's parameters as registers, the
current logical program's coordinates and its index tiles and masks, and the operations every fragment shares:
elementwise ops by operand role (tile and tile, tile and scalar, two scalars folded when constant), selects,
casts, broadcasts, DMA loads and stores of a program's box, the device assert of a gather and the memory reads
``gather`` and ``cat``."""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import opdefs
from ..vm import isa
from ..vm.compose import Composer, Reg, Tile
from .fusion import Group
from .graph import Graph, Node
from .signature import Layout, Signature

def _raw_bits(value, dtype: dt.DType) -> int:
    arr = np.array([value]).astype(dtype.np) if not dtype.is_bool else np.array([bool(value)])
    return int.from_bytes(arr.view(np.uint8).tobytes().ljust(8, b"\0"), "little")


def _origin(g: Graph, d) -> str:
    """A size as a message names it: a number, or where the symbol comes from (``w.shape[0]``)."""
    d = g.syms.find(d)
    return str(d) if isinstance(d, int) else d.origin.replace('"', "'")


def _broadcast_shape(*shapes) -> tuple:
    out = (1, 1)
    for s in shapes:
        out = tuple(b if a == 1 else a for a, b in zip(out, s))
    return out


class KernelContext:
    """One group's kernel being composed: the composer, the group's parameters as registers, the current logical
    program's coordinates, and the per-program index tiles and masks (made when a fragment first asks)."""

    def __init__(self, g: Graph, grp: Group, sig: Signature, name: str, tiles: tuple):
        self.g = g
        self.grp = grp
        self.sig = sig
        self.c = Composer(name)
        self.tiles = tiles
        self.br, self.bc = tiles[0], tiles[1]
        self.const_values: dict[int, object] = {}  # id(reg) -> the constant it holds (for folding)
        self.values: dict[int, object] = {}  # node id -> its value in the program being emitted
        self.tensor: dict[str, int] = {}  # parameter name -> tensor index
        self.scalar: dict[str, Reg] = {}  # parameter name -> register
        self.acc: dict[int, Tile] = {}  # loop mode: reduction / scan node id -> its carried tile
        self.per_program: dict = {}  # index tiles and masks of the current program (cols, cmask, ...)
        self.hoisted: dict[int, object] = {}  # free scalar node id -> its value, computed before the program loop
        self.fallback_loc = None
        self.double = True  # the loads' loop is emitted twice (ping-pong) where it has loads

    # ---- plumbing --------------------------------------------------------------------------------------------
    def declare(self, loc) -> None:
        sig = self.sig
        for p in sig.params:
            if sig.is_tensor(p):
                self.tensor[p] = self.c.param("tensor", p, self._tensor_node(p).dtype, 1)
            else:
                self.scalar[p] = self.c.param("scalar", p, sig.scalar_dtype(p), loc=loc)
        self.const_param = {n.id: self.scalar[f"c{k}"] for k, n in enumerate(sig.consts)}

    def _tensor_node(self, p: str) -> Node:
        sig = self.sig
        if p == "A":
            return sig.inputs[0]
        if p == "B":
            return sig.inputs[1]
        if p.startswith("in"):
            k = int(p[2:])
            return sig.inputs[k + (2 if sig.mode == "matmul" else 0)]
        return sig.outputs[int(p[3:])]

    def locate(self, loc) -> None:
        """The source lines instructions map to: each operation's own call site; a load its first user's; the
        skeleton (the program loop, coordinates, masks) ``loc`` or the group's first operation's."""
        self.first_user: dict[int, Node] = {}
        for n in self.grp.body():
            for i in n.inputs:
                self.first_user.setdefault(i.id, n)
        self.fallback_loc = loc or next((n.loc for n in self.grp.body() if n.loc is not None), None)

    def loc(self, n: Node | None):
        loc = getattr(n, "loc", None) if n is not None else None
        return loc if loc is not None else self.fallback_loc

    def tile(self, shape, dtype, name="", loc=None, space="ub") -> Tile:
        return self.c.slot(space, shape, dtype, name, loc)

    def constant(self, value, dtype: dt.DType) -> Reg:
        if isinstance(value, np.generic):
            value = value.item()
        r = self.c.const(_raw_bits(value, dtype), dtype)
        self.const_values[id(r)] = value
        return r

    def _const_of(self, v):
        return self.const_values.get(id(v), _NOT) if v.__class__ is Reg else _NOT

    def sreg(self, dtype) -> Reg:
        return self.c.reg(dtype)

    def s_op(self, name: str, a: Reg, b: Reg, dtype=dt.int32, loc=None) -> Reg:
        """A scalar instruction ``S<NAME>`` into a new register."""
        rd = self.sreg(dtype)
        self.c.emit(isa.SCALAR_BINARY[name].name, {"rd": rd, "ra": a, "rb": b}, dtype, loc)
        return rd

    def splat(self, v: Reg, dtype, loc) -> Tile:
        """A (1, 1) tile holding a scalar (for instructions that take only tiles)."""
        t = self.tile((1, 1), dtype, "splat", loc)
        self.c.emit("VDUP", {"rs": v, "dst": self.c.ref(t)}, dtype, loc, writes=[t])
        return t

    def as_tile(self, v, dtype, loc) -> Tile:
        return v if v.__class__ is Tile else self.splat(v, dtype, loc)

    # ---- values ----------------------------------------------------------------------------------------------
    def binary(self, op: str, a, b, n: Node):
        d, loc = n.dtype, self.loc(n)
        if d.is_bool and op not in ("and", "or"):
            op = _BOOL_ARITH.get(op, op)
            if op not in ("and", "or"):  # the rest of the arithmetic on truth values: in uint8, wrapped to a bit
                u8 = dt.uint8
                r = self.binary(op, self.cast(a, u8, loc), self.cast(b, u8, loc), _Typed(u8, getattr(n, "loc", None)))
                return self.cast(self.binary("and", r, self.constant(1, u8), _Typed(u8, None)), d, loc)
        ta, tb = a.__class__ is Tile, b.__class__ is Tile
        if not ta and not tb:
            ca, cb = self._const_of(a), self._const_of(b)
            if ca is not _NOT and cb is not _NOT:
                return self.constant(_fold(op, (ca, cb), a.dtype, d), d)
            return self.s_op(op, a, b, d, loc)
        if ta and tb:
            out = self.tile(_broadcast_shape(a.shape, b.shape), d, op, loc)
            self.c.emit(isa.VECTOR_BINARY[op].name, {"dst": self.c.ref(out), "a": self.c.ref(a), "b": self.c.ref(b)},
                        d, loc, reads=[a, b], writes=[out])
            return out
        t, s, rev = (a, b, 0) if ta else (b, a, 1)
        out = self.tile(t.shape, d, op, loc)
        self.c.emit(isa.VECTOR_BINARY_S[op].name, {"rs": s, "rev": rev, "dst": self.c.ref(out), "a": self.c.ref(t)},
                    d, loc, reads=[t], writes=[out])
        return out

    def unary(self, op: str, a, n: Node):
        d, loc = n.dtype, self.loc(n)
        if d.is_bool and op in ("neg", "abs"):
            return a  # a truth value is its own negation and magnitude (a 1-bit unsigned integer, as Triton says)
        if a.__class__ is not Tile:
            ca = self._const_of(a)
            if ca is not _NOT:
                return self.constant(_fold(op, (ca,), a.dtype, d), d)
            rd = self.sreg(d)
            self.c.emit(isa.SCALAR_UNARY[op].name, {"rd": rd, "ra": a}, d, loc)
            return rd
        out = self.tile(a.shape, d, op, loc)
        self.c.emit(isa.VECTOR_UNARY[op].name, {"dst": self.c.ref(out), "a": self.c.ref(a)}, d, loc, reads=[a],
                    writes=[out])
        return out

    def compare(self, op: str, a, b, n: Node | None, loc=None):
        loc = loc if n is None else self.loc(n)
        cc = isa.CC_NAMES.index(op)
        ta, tb = a.__class__ is Tile, b.__class__ is Tile
        if not ta and not tb:
            ca, cb = self._const_of(a), self._const_of(b)
            if ca is not _NOT and cb is not _NOT:
                return self.constant(_fold(op, (ca, cb), a.dtype, dt.bool_), dt.bool_)
            rd = self.sreg(dt.bool_)
            self.c.emit("SCMP", {"rd": rd, "ra": a, "rb": b, "cc": cc}, a.dtype, loc)
            return rd
        if ta and tb:
            out = self.tile(_broadcast_shape(a.shape, b.shape), dt.bool_, op, loc)
            self.c.emit("VCMP", {"cc": cc, "dst": self.c.ref(out), "a": self.c.ref(a), "b": self.c.ref(b)}, a.dtype,
                        loc, reads=[a, b], writes=[out])
            return out
        t, s, rev = (a, b, 0) if ta else (b, a, 1)
        out = self.tile(t.shape, dt.bool_, op, loc)
        self.c.emit("VCMPS", {"cc": cc, "rs": s, "rev": rev, "dst": self.c.ref(out), "a": self.c.ref(t)}, t.dtype,
                    loc, reads=[t], writes=[out])
        return out

    def select(self, c, a, b, dtype, loc):
        if c.__class__ is not Tile and a.__class__ is not Tile and b.__class__ is not Tile:
            cc = self._const_of(c)
            if cc is not _NOT:
                return a if cc else b
            rd = self.sreg(dtype)
            self.c.emit("SSEL", {"rd": rd, "rc": c, "ra": a, "rb": b}, dtype, loc)
            return rd
        tc, ta, tb = self.as_tile(c, dt.bool_, loc), self.as_tile(a, dtype, loc), self.as_tile(b, dtype, loc)
        out = self.tile(_broadcast_shape(tc.shape, ta.shape, tb.shape), dtype, "where", loc)
        self.c.emit("VSEL", {"dst": self.c.ref(out), "c": self.c.ref(tc), "a": self.c.ref(ta), "b": self.c.ref(tb)},
                    dtype, loc, reads=[tc, ta, tb], writes=[out])
        return out

    def cast(self, v, dtype, loc):
        if v.dtype is dtype:
            return v
        if v.__class__ is not Tile:
            cv = self._const_of(v)
            if cv is not _NOT:
                return self.constant(np.array(cv).astype(v.dtype.np).astype(dtype.np).item(), dtype)
            rd = self.sreg(dtype)
            self.c.emit("SCAST", {"rd": rd, "ra": v, "bitcast": 0, "rtz": 0}, dtype, loc)
            return rd
        out = self.tile(v.shape, dtype, "cast", loc)
        self.c.emit("VCAST", {"bitcast": 0, "rtz": 0, "dst": self.c.ref(out), "a": self.c.ref(v)}, dtype, loc,
                    reads=[v], writes=[out])
        return out

    def broadcast(self, v, shape, dtype, loc) -> Tile:
        """``v`` materialised as a tile of ``shape`` (a store's box, a scan's operand)."""
        v = self.cast(v, dtype, loc)
        if v.__class__ is Tile and v.shape == tuple(shape):
            return v
        out = self.tile(shape, dtype, "broadcast", loc)
        if v.__class__ is Tile:
            self.c.emit("VCOPY", {"dst": self.c.ref(out), "a": self.c.ref(v)}, dtype, loc, reads=[v], writes=[out])
        else:
            self.c.emit("VDUP", {"rs": v, "dst": self.c.ref(out)}, dtype, loc, writes=[out])
        return out

    def graph_constant(self, n: Node) -> Reg:
        """A constant of the graph: a runtime scalar parameter (its value is bound per launch)."""
        return self.const_param[n.id]

    def dim_value(self, n: Node) -> Reg:
        return self.scalar[f"dim{n.attrs['sym'].id}"]

    def iota(self, n: Node):
        """The index along ``axis`` of each element of the current program's box: the column or row index tile,
        or an outer coordinate (a scalar), in the node's dtype. Along a dim of size 1 (broadcast over the box) it
        is 0."""
        rank, ax = len(n.shape), n.attrs["axis"]
        loc = self.loc(n)
        along = self.g.syms.find(n.shape[ax])
        if isinstance(along, int) and along == 1:
            return self.constant(0, n.dtype)
        if ax == rank - 1:
            v = self.index_tile("cols")
        elif ax == rank - 2:
            v = self.index_tile("rows")
        else:
            v = self.per_program[f"o{self.space_axis(n, ax)}"]
        return self.cast(v, n.dtype, loc)

    def accumulator(self, n: Node):
        return self.acc.get(n.id)

    # ---- per-program index tiles ---------------------------------------------------------------------------
    def _memo(self, key, make):
        v = self.per_program.get(key)
        if v is None:
            v = self.per_program[key] = make()
        return v

    def index_tile(self, axis: str) -> Tile:
        """``cols`` (1, BC) or ``rows`` (BR, 1) of the current program: an iota plus its block's offset."""
        def make():
            n = self.bc if axis == "cols" else self.br
            loc = self.fallback_loc
            io = self.tile((n,), dt.int32, f"{axis} iota", loc)
            self.c.emit("VIOTA", {"dst": self.c.ref(io), "start": 0}, dt.int32, loc, writes=[io])
            shape = (1, n) if axis == "cols" else (n, 1)
            start = self.per_program["col0" if axis == "cols" else "row0"]
            if start is None:
                return Tile(io.slot, shape, dt.int32)
            out = self.tile(shape, dt.int32, axis, loc)
            self.c.emit("VADDS", {"rs": start, "rev": 1, "dst": self.c.ref(out, (n,)), "a": self.c.ref(io)},
                        dt.int32, loc, reads=[io], writes=[out])
            return out
        return self._memo(axis, make)

    def cmask(self) -> Tile:
        """``cols < C`` (a split group's: ``cols <`` its chunk's end): the valid columns of the current block."""
        bound = self.per_program.get("cbound") or self.scalar["C"]
        return self._memo("cmask", lambda: self.compare("lt", self.index_tile("cols"), bound, None,
                                                         self.fallback_loc))

    def rmask(self) -> Tile:
        """``rows < R`` (BR, 1)."""
        return self._memo("rmask", lambda: self.compare("lt", self.index_tile("rows"), self.scalar["R"], None,
                                                         self.fallback_loc))

    # ---- loads and stores ----------------------------------------------------------------------------------
    def load(self, kind: str, k: int, x: Node, repl: dict | None = None, bounds: dict | None = None,
             space="ub", loc=None) -> Tile:
        """A DMA of input ``x`` (parameter ``{kind}{k}``) over the current program's box. ``repl``: space dim ->
        (scalar offset added to that dim's index); ``bounds``: tile dim (0 rows, 1 cols) -> (lo, hi) overriding
        the default box."""
        return self._dma(True, kind, k, x, None, repl or {}, bounds or {}, space, loc)

    def store(self, k: int, n: Node, value, loc=None, at=None) -> None:
        """Store output ``k`` over the current program's box; ``at``: one element, at this column (a split
        reduction's partial)."""
        if at is None:
            self._dma(False, "out", k, n, value, {}, {}, "ub", loc)
            return
        pp = self.per_program
        saved = (pp.get("col0"), pp["cols_left"], self.bc)
        pp["col0"], pp["cols_left"], self.bc = at, 1, 1
        try:
            self._dma(False, "out", k, n, value, {}, {}, "ub", loc)
        finally:
            pp["col0"], pp["cols_left"], self.bc = saved

    def _dma(self, is_load, kind, k, x, value, repl, bounds, space, loc):
        c, g = self.c, self.g
        space_dims = self.sig.space
        r = len(space_dims)
        lay = Layout(g, x.shape, space_dims)
        if not is_load and self.sig.mode == "matmul":
            lay.present[r - 2] = lay.present[r - 1] = True  # a matmul's output tile is (BM, BN), a 1 included
        name = f"{kind}{k}"
        strides = {d: self.scalar[f"{name}_s{d}"] for d in range(r) if lay.present[d]}
        pp = self.per_program
        terms = []
        for d in range(r - 2):
            if lay.present[d]:
                terms.append((pp[f"o{d}"], strides[d]))
        rows_p = r >= 2 and lay.present[r - 2]
        cols_p = r >= 1 and lay.present[r - 1]
        row0, col0 = pp["row0"], pp.get("col0")
        if rows_p and row0 is not None:
            terms.append((row0, strides[r - 2]))
        if cols_p and col0 is not None:
            terms.append((col0, strides[r - 1]))
        for d, off in repl.items():  # a shifted index (cat's parts)
            if lay.present[d] and off is not None:
                terms.append((off, strides[d]))
        base = 0
        for a, s in terms:
            t = self.s_op("mul", a, s, dt.int32, loc)
            base = t if base == 0 else self.s_op("add", base, t, dt.int32, loc)
        shape = (self.br if rows_p else 1, self.bc if cols_p else 1)
        dims = []
        for td, present, d in ((0, rows_p, r - 2), (1, cols_p, r - 1)):
            if not present:
                dims.append((0, 0, 1))
                continue
            lo, hi = bounds.get(td, (0, pp["rows_left"] if td == 0 else pp["cols_left"]))
            dims.append((strides[d], lo, hi))
        op = ("DMA_LOAD" if space == "ub" else "DMA_LOAD_L1_") if is_load else "DMA_STORE"
        ins = isa.BY_NAME[f"{op}2"]
        vals = {"base": c.sop(base, ins.kinds["base"]), "gm": 0, "tensor": self.tensor[name]}
        for d, (st, lo, hi) in enumerate(dims):
            vals[f"stride{d}"] = c.sop(st, ins.kinds[f"stride{d}"])
            vals[f"lo{d}"] = c.sop(lo, ins.kinds[f"lo{d}"])
            vals[f"hi{d}"] = c.sop(hi, ins.kinds[f"hi{d}"])
        gm = ("gm", self.tensor[name], 0)
        if is_load:
            t = self.tile(shape, x.dtype, name, loc, space)
            vals.update({"dst": c.ref(t), "pad": 0, "pad_undef": 0, "keep": 0})
            e = c.emit(ins.name, vals, x.dtype, loc, reads=[gm], writes=[t])
            e.reloc_param = self.tensor[name]
            return t
        if value.__class__ is Tile and value.slot.space == "l0c":  # FixPipe stores the accumulator straight out
            ins = isa.FIX_STORE[2]
            vals["src"] = c.ref(value)
            e = c.emit(ins.name, vals, x.dtype, loc, reads=[value, gm], writes=[gm])
        else:
            v = self.broadcast(value, shape, x.dtype, loc)
            vals["src"] = c.ref(v)
            e = c.emit(ins.name, vals, x.dtype, loc, reads=[v, gm], writes=[gm])
        e.reloc_param = self.tensor[name]

    # ---- memory reads of the vector fragments --------------------------------------------------------------
    def size(self, d) -> object:
        d = self.g.syms.find(d)
        return int(d) if isinstance(d, int) else self.scalar[f"idim{d.id}"]

    def _sreg_of(self, v) -> Reg:
        return v if v.__class__ is Reg else self.constant(int(v), dt.int32)

    def mask_of(self, shape):
        """The valid lanes of a (rows, cols) tile of the current program: rmask and/or cmask, or None."""
        rows, cols = shape[0] != 1, shape[1] != 1
        m = None
        if rows:
            m = self.rmask()
        if cols:
            m = self.cmask() if m is None else self._and(m, self.cmask())
        return m

    def _and(self, a: Tile, b: Tile) -> Tile:
        loc = self.fallback_loc
        out = self.tile(_broadcast_shape(a.shape, b.shape), dt.bool_, "and", loc)
        self.c.emit("VAND", {"dst": self.c.ref(out), "a": self.c.ref(a), "b": self.c.ref(b)}, dt.bool_, loc,
                    reads=[a, b], writes=[out])
        return out

    def device_assert(self, cond, message: str, mask, loc) -> None:
        """Trap with ``message`` unless ``cond`` holds on every valid lane (``mask``)."""
        c = self.c
        if mask is not None:
            nm = self.tile(mask.shape, dt.bool_, "not", loc)
            c.emit("VNOT", {"dst": c.ref(nm), "a": c.ref(mask)}, dt.bool_, loc, reads=[mask], writes=[nm])
            ok = self.tile(_broadcast_shape(cond.shape, nm.shape), dt.bool_, "or", loc)
            c.emit("VOR", {"dst": c.ref(ok), "a": c.ref(cond), "b": c.ref(nm)}, dt.bool_, loc, reads=[cond, nm],
                   writes=[ok])
            cond = ok
        asint = self.tile(cond.shape, dt.int32, "assert", loc)
        c.emit("VCAST", {"bitcast": 0, "rtz": 0, "dst": c.ref(asint), "a": c.ref(cond)}, dt.int32, loc, reads=[cond],
               writes=[asint])
        low = self.tile((), dt.int32, "assert", loc)
        c.emit("VREDUCE", {"op": isa.REDUCE_OPS.index("min"), "axis": 0, "dst": c.ref(low),
                           "a": c.ref(asint, (asint.shape[0] * asint.shape[1],))}, dt.int32, loc,
               reads=[asint], writes=[low])
        v = self.sreg(dt.int32)
        c.emit("MOVTS", {"rd": v, "src": c.ref(low)}, dt.int32, loc, reads=[low])
        nz = self.sreg(dt.bool_)
        c.emit("SCMP", {"rd": nz, "ra": v, "rb": self.constant(0, dt.int32), "cc": isa.CC_NAMES.index("ne")},
               dt.int32, loc)
        fine = c.label("assert_ok")
        c.branch("BRNZ", fine, loc, rc=nz)
        c.emit("TRAP", {"string": c.string(message)}, None, loc)
        c.place(fine)

    def gather(self, n: Node, idx) -> Tile:
        """``table[..., idx, ...]`` along the gather's axis: the indices checked against the table's size, then a
        GATHER by an offsets tile (the index along the axis, the program's own positions along the others)."""
        g, c = self.g, self.c
        loc = self.loc(n)
        ax = self.space_axis(n, n.attrs["axis"])
        table = n.inputs[0]
        k = [i.id for i in self.sig.inputs].index(table.id)
        space_dims = self.sig.space
        r = len(space_dims)
        shape = self.tile_shape(n)
        mask = self.mask_of(shape)
        bound = self._sreg_of(self.size(table.shape[n.attrs["axis"]]))
        zero = self.constant(0, dt.int32)
        idx = self.cast(idx, dt.int32, loc)
        if idx.__class__ is not Tile:
            idx = self.splat(idx, dt.int32, loc)
        ge = self.compare("ge", idx, zero, None, loc)
        lt = self.compare("lt", idx, bound, None, loc)
        cond = self._and(ge, lt)
        self.device_assert(cond, f"dvmlang.ops gather (%{n.id} of graph `{g.name}`): an index is outside [0, "
                                 f"{_origin(g, table.shape[n.attrs['axis']])})", mask, loc)
        lay = Layout(g, table.shape, space_dims)
        offs = None
        for d in range(r):
            if not lay.present[d]:
                continue
            s = self.scalar[f"in{k}_s{d}"]
            if d == ax:
                term = self.binary_s("mul", idx, s, loc)
            elif d == r - 1:
                term = self.binary_s("mul", self.index_tile("cols"), s, loc)
            elif d == r - 2:
                term = self.binary_s("mul", self.index_tile("rows"), s, loc)
            else:
                term = self.s_op("mul", self.per_program[f"o{d}"], s, dt.int32, loc)
            offs = term if offs is None else self.binary_int("add", offs, term, loc)
        offs = self.broadcast(offs if offs is not None else self.constant(0, dt.int32), shape, dt.int32, loc)
        out = self.tile(shape, n.dtype, "gather", loc)
        vals = {"masked": int(mask is not None), "tensor": self.tensor[f"in{k}"], "dst": c.ref(out),
                "offsets": c.ref(offs), "gm": 0, "mask": c.ref(mask) if mask is not None else 0, "pad": 0}
        reads = [offs, ("gm", self.tensor[f"in{k}"], 0)] + ([mask] if mask is not None else [])
        e = c.emit("GATHER", vals, n.dtype, loc, reads=reads, writes=[out])
        e.reloc_param = self.tensor[f"in{k}"]
        return out

    def binary_s(self, op, t: Tile, s: Reg, loc) -> Tile:
        out = self.tile(t.shape, dt.int32, op, loc)
        self.c.emit(isa.VECTOR_BINARY_S[op].name, {"rs": s, "rev": 0, "dst": self.c.ref(out), "a": self.c.ref(t)},
                    dt.int32, loc, reads=[t], writes=[out])
        return out

    def binary_int(self, op, a, b, loc):
        if a.__class__ is Reg and b.__class__ is Reg:
            return self.s_op(op, a, b, dt.int32, loc)
        if a.__class__ is Tile and b.__class__ is Tile:
            out = self.tile(_broadcast_shape(a.shape, b.shape), dt.int32, op, loc)
            self.c.emit(isa.VECTOR_BINARY[op].name, {"dst": self.c.ref(out), "a": self.c.ref(a), "b": self.c.ref(b)},
                        dt.int32, loc, reads=[a, b], writes=[out])
            return out
        t, s = (a, b) if a.__class__ is Tile else (b, a)
        return self.binary_s(op, t, s, loc)

    def space_axis(self, n: Node, axis: int) -> int:
        """A node's axis as a dim of the group's iteration space (shapes line up on the right)."""
        return axis + len(self.sig.space) - len(n.shape)

    def cat(self, n: Node, values: list) -> Tile:
        """``cat`` of the group's inputs along an axis: each part is one DMA whose box along the axis is the part's
        range shifted to the tile (the other lanes keep the padding), chosen lane by lane where parts meet. Along
        an outer axis the program's coordinate lies in one part: the others load an empty box. A part computed in
        the kernel (``values``, not None: a number broadcast) is its value where it lies."""
        loc = self.loc(n)
        ax = self.space_axis(n, n.attrs["axis"])
        r = len(self.sig.space)
        pp = self.per_program
        zero = self.constant(0, dt.int32)
        if ax == r - 1:
            td, start, left = 1, pp.get("col0"), pp["cols_left"]
        elif ax == r - 2:
            td, start, left = 0, pp["row0"], pp["rows_left"]
        else:
            td, start, left = None, pp[f"o{ax}"], None
        acc = None
        parts = list(zip(n.inputs, n.attrs["offsets"]))
        for j, (part, off) in enumerate(parts):
            computed = values[j]
            k = None if computed is not None else [i.id for i in self.sig.inputs].index(part.id)
            o = self._sreg_of(self.size(off))
            last = j == len(parts) - 1
            end = None if last and td is not None else \
                self.s_op("add", o, self._sreg_of(self.size(part.shape[n.attrs["axis"]])), dt.int32, loc)
            if td is None:
                hit = self.s_op("and", self.compare("ge", start, o, None, loc), self.compare("lt", start, end, None, loc),
                                dt.bool_, loc)
                p = computed if k is None else self._outer_part(n, ax, k, part, hit, start, o, loc)
                m = hit
            else:
                # the tile's lanes along the axis are start + i; this part covers [o, end): lo = o - start and
                # hi = min(end, the axis' size) - start; the DMA's base moves by -o along the axis
                base0 = start if start is not None else zero
                lo = self.s_op("sub", o, base0, dt.int32, loc) if j else 0
                hi = left if last else self.s_op("minimum", self.s_op("sub", end, base0, dt.int32, loc), left,
                                                 dt.int32, loc)
                shift = self.s_op("sub", zero, o, dt.int32, loc) if j else None
                p = computed if k is None else self.load("in", k, part, {ax: shift}, {td: (lo, hi)}, loc=loc)
                m = self.compare("ge", self.index_tile("cols" if td == 1 else "rows"), o, None, loc) if j else None
            acc = p if acc is None else self.select(m, p, acc, n.dtype, loc)
        return acc

    def _outer_part(self, n: Node, ax: int, k: int, part: Node, hit, start, o, loc) -> Tile:
        """A cat's part along an outer axis, loaded: the DMA's base holds start * stride; the part's index is
        start - o (0 where the program's coordinate misses the part, whose box is then empty)."""
        pp, zero = self.per_program, self.constant(0, dt.int32)
        index = self.select(hit, self.s_op("sub", start, o, dt.int32, loc), zero, dt.int32, loc)
        bounds = {}
        if self.tile_shape(n)[0] != 1:
            bounds[0] = (0, self.select(hit, pp["rows_left"], zero, dt.int32, loc))
        if self.tile_shape(n)[1] != 1:
            bounds[1] = (0, self.select(hit, pp["cols_left"], zero, dt.int32, loc))
        return self.load("in", k, part, {ax: self.s_op("sub", index, start, dt.int32, loc)}, bounds, loc=loc)

    def tile_shape(self, n: Node) -> tuple:
        """The (rows, cols) tile of a node's value over the group's iteration space."""
        r = len(self.sig.space)
        lay = Layout(self.g, n.shape, self.sig.space)
        return (self.br if r >= 2 and lay.present[r - 2] else 1, self.bc if r >= 1 and lay.present[r - 1] else 1)


# arithmetic on truth values as numpy and torch define it
_BOOL_ARITH = {"add": "or", "mul": "and", "maximum": "or", "minimum": "and"}


class _Typed:
    """Stands in for a node where an emitter needs only a dtype and a source location."""

    __slots__ = ("dtype", "loc")

    def __init__(self, dtype, loc):
        self.dtype = dtype
        self.loc = loc


class _NotConst:
    pass


_NOT = _NotConst()


def _fold(op: str, args, arg_dtype: dt.DType, out: dt.DType):
    """An op on constants, as the device computes it (the op vocabulary's numpy semantics in the dtypes)."""
    vals = [np.array(a).astype(arg_dtype.np if not arg_dtype.is_bool else np.bool_) for a in args]
    with np.errstate(all="ignore"):
        r = opdefs.ELEMENTWISE[op].ref(*vals)
    return np.asarray(r).astype(out.np if not out.is_bool else np.bool_).item()
