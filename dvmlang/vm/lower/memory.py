"""Instruction selection for memory and the cube: DMA loads/stores, gathers, scatters, atomics, and dot
(GM/UB -> L1 -> L0A/L0B -> MMAD into L0C -> FixPipe to UB)."""

from __future__ import annotations

import math

from ... import dtypes as dt
from ...errors import CompilationError
from ...ir.core import Value
from .. import isa

BY_NAME = isa.BY_NAME


def _const_int(v: Value) -> int | None:
    """The value of an integer constant operand, None for anything else."""
    if v.op is not None and v.op.kind == "const" and isinstance(v.op.attrs["value"], (int, bool)):
        return int(v.op.attrs["value"])
    return None


def _descriptor(op, rank):
    """The dims of a DMA op's descriptor, outermost first: (extent, stride, lo, hi), each a Value (the IR's
    operands) or an int (an immediate the folding made)."""
    ops = op.operands
    shape = op.attrs["shape"]
    return [(shape[d], ops[1 + d], ops[1 + rank + d], ops[1 + 2 * rank + d]) for d in range(rank)]


def _fold(op, dims, what):
    """A descriptor of more dims than a DMA row takes (``isa.MAX_DMA_RANK``), folded: unit dims whose box holds
    index 0 are dropped, and a dim merges into the one inside it when its stride is that dim's stride times its
    extent (compile-time constants) and the inner box is whole. Raises a ``CompilationError`` when that still
    leaves too many dims."""
    def c(v):
        return v if isinstance(v, int) else _const_int(v)

    kept = [x for x in dims if not (x[0] == 1 and c(x[2]) is not None and c(x[3]) is not None and
                                    c(x[2]) <= 0 < c(x[3]))]
    out = []
    for n, st, lo, hi in reversed(kept):
        if out:
            n_in, st_in, lo_in, hi_in = out[-1]
            s_out, s_in = c(st), c(st_in)
            whole = c(lo_in) == 0 and c(hi_in) is not None and c(hi_in) >= n_in
            if s_out is not None and s_in is not None and s_out == s_in * n_in and whole and \
                    c(lo) is not None and c(hi) is not None:
                lo_c, hi_c = (min(max(c(x), 0), n) * n_in for x in (lo, hi))
                out[-1] = (n * n_in, st_in, lo_c, hi_c)
                continue
        out.append((n, st, lo, hi))
    out.reverse()
    if not out:
        out = [(1, 0, 0, 1)]
    if len(out) > isa.MAX_DMA_RANK:
        raise CompilationError(
            f"{what} of rank-{len(dims)} tiles need a DMA descriptor of {len(out)} dims; the DMA takes at most "
            f"{isa.MAX_DMA_RANK}", op.loc,
            "dims fold together where the strides are compile-time constants that make them contiguous and the "
            "mask leaves the inner dim whole; reshape the tile to at most 5 dims around the access otherwise")
    return out


def _dims_fields(ctx, ins, base, dims, loc):
    """The base and per-dim descriptor fields of DMA row ``ins``, in its scalar-operand kinds."""
    vals = {"base": ctx.sop(base)}
    for d, (_, st, lo, hi) in enumerate(dims):
        for name, v in ((f"stride{d}", st), (f"lo{d}", lo), (f"hi{d}", hi)):
            kind = ins.kinds[name]
            if isinstance(v, int):
                _, reg_bit, lo_imm, hi_imm = isa.SOP_FORMS[kind]
                if not lo_imm <= v <= hi_imm:
                    raise CompilationError(f"the folded DMA descriptor's {name} = {v} does not fit an immediate "
                                           f"of {ins.name}", loc, "load or store the tile in smaller pieces")
                vals[name] = v & (reg_bit - 1)
            else:
                vals[name] = ctx.sop(v, kind)
    return vals


def _dma_dims(ctx, op, value: Value, what):
    """(descriptor dims, tile ref) of a DMA op: its own, or folded to at most ``isa.MAX_DMA_RANK`` dims with
    the tile named by the folded shape (the same bytes)."""
    rank = op.attrs["rank"]
    dims = _descriptor(op, rank)
    if rank <= isa.MAX_DMA_RANK:
        return dims, ctx.tile(value)
    dims = _fold(op, dims, what)
    p = ctx.place(value)
    return dims, ctx.tile_ref(p.buf.addr, p.dtype, tuple(n for n, *_ in dims))


def _pad_sop(ctx, other: Value | None) -> int:
    """The padding value of a load: a small integral constant inline, anything else its register."""
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
    return isa.SOP_REG_BIT | ctx.reg(other)


def _dma_load(ctx, op):
    rank = op.attrs["rank"]
    r = op.result
    other = op.operands[1 + 3 * rank] if op.attrs["has_other"] else None
    dims, ref = _dma_dims(ctx, op, r, "loads")
    place = ctx.place(r)
    rows = isa.DMA_LOAD_L1 if place.space == "l1" else isa.DMA_LOAD
    ins = rows.get(len(dims))
    if ins is None:
        raise CompilationError(f"internal: no {place.space.upper()} DMA load of rank {len(dims)}", op.loc)
    vals = _dims_fields(ctx, ins, op.operands[0], dims, op.loc)
    into = op.attrs.get("into", False)  # the tile completes `into` (same buffer): only its box is written
    vals.update({"dst": ref, "gm": 0, "pad": _pad_sop(ctx, other), "tensor": op.attrs["tensor"],
                 "pad_undef": int(other is None and not into), "keep": int(into)})
    reads = [("gm", op.attrs["tensor"], 0)] + ([ctx.rng(op.operands[-1])] if into else [])
    e = ctx.emit(ins, vals, r.dtype, op.loc, reads=reads, writes=[ctx.rng(r)])
    e.reloc_param = op.attrs["tensor"]


def _dma_store(ctx, op):
    rank = op.attrs["rank"]
    value = op.operands[1 + 3 * rank]
    dims, ref = _dma_dims(ctx, op, value, "stores")
    ins = isa.FIX_STORE[len(dims)] if ctx.place(value).space == "l0c" else isa.DMA_STORE[len(dims)]
    vals = _dims_fields(ctx, ins, op.operands[0], dims, op.loc)
    vals.update({"src": ref, "gm": 0, "tensor": op.attrs["tensor"]})
    e = ctx.emit(ins, vals, value.dtype, op.loc, reads=[ctx.rng(value), ("gm", op.attrs["tensor"], 0)])
    e.writes.append(("gm", op.attrs["tensor"], 0))
    e.reloc_param = op.attrs["tensor"]


def _mem_operands(op, is_store):
    ops = list(op.operands)
    offsets = ops[0]
    value = ops[1] if is_store else None
    rest = ops[2:] if is_store else ops[1:]
    mask = rest[0] if op.attrs.get("has_mask") else None
    other = None
    if not is_store and op.attrs.get("has_other"):
        other = rest[1] if mask is not None else rest[0]
    return offsets, value, mask, other


def _gather(ctx, op):
    offsets, _, mask, other = _mem_operands(op, False)
    r = op.result
    t = op.attrs["tensor"]
    if not r.is_tile:  # scalar load through the scalar unit
        e = ctx.emit(BY_NAME["LDG"], {"rd": ctx.reg(r), "tensor": t, "gm": 0, "offset": ctx.sop(offsets)}, r.dtype,
                     op.loc, reads=[("gm", t, 0)])
        e.reloc_param = t
        if mask is not None:
            # scalar masked load: select between the loaded value and `other`
            raise CompilationError("masked scalar loads are not supported", op.loc,
                                   "load a one-element tile with a mask instead")
        return
    tile_other = other is not None and other.is_tile and not (other.op is not None and other.op.kind == "full")
    pad = 0 if tile_other else _pad_sop(ctx, other)
    reads = [ctx.rng(offsets), ("gm", t, 0)]
    vals = {"masked": int(mask is not None), "tensor": t, "dst": ctx.tile(r), "offsets": ctx.tile(offsets), "gm": 0,
            "mask": ctx.tile(mask) if mask is not None else 0, "pad": pad}
    if mask is not None:
        reads.append(ctx.rng(mask))
    e = ctx.emit(BY_NAME["GATHER"], vals, r.dtype, op.loc, reads=reads, writes=[ctx.rng(r)])
    e.reloc_param = t
    if tile_other:
        refs = {"c": ctx.tile(mask), "a": ctx.tile(r), "b": ctx.tile(other)}
        ctx.emit(BY_NAME["VSEL"], {"dst": ctx.tile(r), **refs}, r.dtype, op.loc,
                 reads=[ctx.rng(mask), ctx.rng(r), ctx.rng(other)], writes=[ctx.rng(r)])


def _scatter(ctx, op):
    offsets, value, mask, _ = _mem_operands(op, True)
    t = op.attrs["tensor"]
    if not value.is_tile:
        if mask is not None:
            raise CompilationError("masked scalar stores are not supported", op.loc, "guard the store with `if`")
        e = ctx.emit(BY_NAME["STG"], {"rs": ctx.reg(value), "tensor": t, "gm": 0, "offset": ctx.sop(offsets)},
                     value.dtype, op.loc, writes=[("gm", t, 0)])
        e.reloc_param = t
        return
    reads = [ctx.rng(offsets), ctx.rng(value)]
    vals = {"masked": int(mask is not None), "tensor": t, "src": ctx.tile(value), "offsets": ctx.tile(offsets),
            "gm": 0, "mask": ctx.tile(mask) if mask is not None else 0}
    if mask is not None:
        reads.append(ctx.rng(mask))
    e = ctx.emit(BY_NAME["SCATTER"], vals, value.dtype, op.loc, reads=reads, writes=[("gm", t, 0)])
    e.reloc_param = t


def _atomic(ctx, op):
    ops = list(op.operands)
    offsets, value = ops[0], ops[1]
    rest = ops[2:]
    mask = rest.pop(0) if op.attrs["has_mask"] else None
    cmp = rest.pop(0) if op.attrs["has_cmp"] else None
    r = op.result
    t = op.attrs["tensor"]
    if not r.is_tile:
        raise CompilationError("scalar atomics are not supported; use a one-element tile", op.loc)
    want_old = bool(ctx.plan.users.get(r.id))
    reads = [ctx.rng(offsets), ctx.rng(value), ("gm", t, 0)]
    if mask is not None:
        reads.append(ctx.rng(mask))
    if cmp is not None:
        reads.append(ctx.rng(cmp))
    vals = {"op": isa.ATOMIC_OPS.index(op.attrs["op"]), "masked": int(mask is not None), "tensor": t,
            "has_cmp": int(cmp is not None), "want_old": int(want_old), "dst": ctx.tile(r),
            "src": ctx.tile(value), "offsets": ctx.tile(offsets),
            "mask": ctx.tile(mask) if mask is not None else 0, "gm": 0,
            "cmp": ctx.tile(cmp) if cmp is not None else 0}
    e = ctx.emit(BY_NAME["ATOMIC"], vals, r.dtype, op.loc, reads=reads, writes=[ctx.rng(r), ("gm", t, 0)])
    e.reloc_param = t


def _staged(ctx, space, dtype, shape):
    """A cube staging buffer's tile ref and range."""
    b = ctx.staging.cube(space, dtype, shape, ctx.alt_active)
    return ctx.tile_ref(b.addr, dtype, shape), (space, b.addr, b.addr + b.nbytes)


def _part(ctx, ref_rng, dtype, shape, j):
    """Part ``j`` of a batch split into parts of ``shape`` (the batch its leading dim): a tile ref and range
    into the buffer of ``ref_rng`` (a (ref, range) pair). With one part, ``ref_rng`` itself."""
    if j is None:
        return ref_rng
    space, start, _ = ref_rng[1]
    nb = math.prod(shape) * dtype.itemsize
    addr = start + j * nb
    return ctx.tile_ref(addr, dtype, shape), (space, addr, addr + nb)


def _batch_part(ctx, op, cdt, in_l0c: bool) -> int:
    """How many of the batch of a 3-D dot one MMAD takes: all of it when its staging buffers fit L0A, L0B and
    L0C, else the largest divisor of the batch that fits and keeps every part of every tile 32-byte aligned
    (one MMAD per part). With none, the smallest aligned part: staging it fails with an error that names it."""
    a, b = op.operands[0], op.operands[1]
    B, M, K = a.shape
    N = b.shape[-1]
    st, alt = ctx.staging, ctx.alt_active

    def fits(c):
        return st.cube_fits("l0a", a.dtype, (c, M, K), alt) and st.cube_fits("l0b", b.dtype, (c, K, N), alt) and \
            (in_l0c or st.cube_fits("l0c", cdt, (c, M, N), alt))

    if fits(B):
        return B
    sizes = [M * K * a.dtype.itemsize, K * N * b.dtype.itemsize, M * N * cdt.itemsize] + \
        [M * N * v.dtype.itemsize for v in [op.result] + op.operands[2:]]
    aligned = [c for c in range(B - 1, 0, -1) if B % c == 0 and all(c * n % isa.TILE_ADDR_UNIT == 0 for n in sizes)]
    return next((c for c in aligned if fits(c)), aligned[-1] if aligned else B)


def _dot(ctx, op):
    """GM/UB -> L1 -> L0A/L0B -> MMAD into L0C -> FixPipe to UB. Operands loaded from GM arrive in L1
    directly; a loop-carried accumulator lives in L0C and MMAD accumulates into it in place. A 3-D dot is a
    batch (B, M, K) @ (B, K, N): its MMAD takes 3-D tiles, or parts of the batch when L0 cannot hold all of it
    (``_batch_part``)."""
    ctx.code.uses_cube = True
    a, b = op.operands[0], op.operands[1]
    acc = op.operands[2] if len(op.operands) > 2 else None
    r = op.result
    cdt = dt.float32 if r.dtype.is_float else dt.int32
    rp = ctx.place(r)
    in_l0c = rp.space == "l0c"
    B = a.shape[0] if len(a.shape) == 3 else None
    part = _batch_part(ctx, op, cdt, in_l0c) if B is not None else None
    n_parts = 1 if part is None else B // part

    def shape_of(v):
        return v.shape if n_parts == 1 else (part,) + v.shape[1:]

    l1 = []
    for src in (a, b):
        if ctx.place(src).space == "l1":
            l1.append((ctx.tile(src), ctx.rng(src)))
        else:
            l1.append(_staged(ctx, "l1", src.dtype, src.shape))
    for j in range(n_parts):
        jj = None if n_parts == 1 else j
        l0 = []
        for src, (ref1, rng1), space, mv in ((a, l1[0], "l0a", "L1_TO_L0A"), (b, l1[1], "l0b", "L1_TO_L0B")):
            if j == 0 and ctx.place(src).space != "l1":
                ctx.emit(BY_NAME["UB_TO_L1"], {"dst": ref1, "src": ctx.tile(src)}, src.dtype, op.loc,
                         reads=[ctx.rng(src)], writes=[rng1])
            ref1, rng1 = _part(ctx, (ref1, rng1), src.dtype, shape_of(src), jj)
            ref0, rng0 = _staged(ctx, space, src.dtype, shape_of(src))
            ctx.emit(BY_NAME[mv], {"dst": ref0, "src": ref1}, src.dtype, op.loc, reads=[rng1], writes=[rng0])
            l0.append((ref0, rng0))
        (aref, arng), (bref, brng) = l0
        if in_l0c:
            # accumulate in place into the loop's L0C accumulator
            c_whole = (ctx.tile(r), ctx.rng(r))
            init = acc is None
            if j == 0 and acc is not None and ctx.place(acc).buf is not rp.buf:
                ctx.emit(BY_NAME["UB_TO_L0C"], {"dst": c_whole[0], "src": ctx.tile(acc)}, cdt, op.loc,
                         reads=[ctx.rng(acc)], writes=[c_whole[1]])
            cref, crng = _part(ctx, c_whole, rp.dtype, shape_of(r), jj)
            ctx.emit(BY_NAME["MMAD"], {"init": int(init), "dst": cref, "a": aref, "b": bref}, a.dtype, op.loc,
                     reads=[arng, brng] + ([crng] if not init else []), writes=[crng])
            continue
        cref, crng = _staged(ctx, "l0c", cdt, shape_of(r))
        if acc is not None:
            aref_, arng_ = _part(ctx, (ctx.tile(acc), ctx.rng(acc)), acc.dtype, shape_of(acc), jj)
            ctx.emit(BY_NAME["UB_TO_L0C"], {"dst": cref, "src": aref_}, cdt, op.loc, reads=[arng_], writes=[crng])
        ctx.emit(BY_NAME["MMAD"], {"init": int(acc is None), "dst": cref, "a": aref, "b": bref}, a.dtype, op.loc,
                 reads=[arng, brng], writes=[crng])
        rref, rrng = _part(ctx, (ctx.tile(r), ctx.rng(r)), r.dtype, shape_of(r), jj)
        ctx.emit(BY_NAME["FIX_L0C_TO_UB"], {"dst": rref, "src": cref}, r.dtype, op.loc, reads=[crng], writes=[rrng])


EMITTERS = {
    "dma_load": _dma_load, "dma_store": _dma_store, "gather": _gather, "scatter": _scatter, "atomic": _atomic,
    "dot": _dot,
}
