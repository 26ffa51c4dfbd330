"""Instruction selection for memory and the cube: DMA loads/stores, gathers, scatters, atomics, and dot
(GM/UB -> L1 -> L0A/L0B -> MMAD into L0C -> FixPipe to UB)."""

from __future__ import annotations

from ... import dtypes as dt
from ...errors import CompilationError
from ...ir.core import Value
from .. import isa

BY_NAME = isa.BY_NAME


def _dims_fields(ctx, operands, rank):
    base = operands[0]
    strides = operands[1:1 + rank]
    los = operands[1 + rank:1 + 2 * rank]
    his = operands[1 + 2 * rank:1 + 3 * rank]
    vals = {"base": ctx.sop(base)}
    for d in range(rank):
        vals[f"stride{d}"] = ctx.sop(strides[d])
        vals[f"lo{d}"] = ctx.sop(los[d])
        vals[f"hi{d}"] = ctx.sop(his[d])
    return vals


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
    if rank > 3:
        raise CompilationError(f"loads of rank-{rank} tiles are not supported (at most 3 dims)", op.loc)
    other = op.operands[1 + 3 * rank] if op.attrs["has_other"] else None
    into = op.attrs.get("into", False)  # the tile completes `into` (same buffer): only its box is written
    vals = _dims_fields(ctx, op.operands, rank)
    vals.update({"dst": ctx.tile(r), "gm": 0, "pad": _pad_sop(ctx, other), "tensor": op.attrs["tensor"],
                 "pad_undef": int(other is None and not into), "keep": int(into)})
    place = ctx.place(r)
    ins = isa.DMA_LOAD_L1[rank] if place.space == "l1" else isa.DMA_LOAD[rank]
    reads = [("gm", op.attrs["tensor"], 0)] + ([ctx.rng(op.operands[-1])] if into else [])
    e = ctx.emit(ins, vals, r.dtype, op.loc, reads=reads, writes=[ctx.rng(r)])
    e.reloc_param = op.attrs["tensor"]


def _dma_store(ctx, op):
    rank = op.attrs["rank"]
    if rank > 3:
        raise CompilationError(f"stores of rank-{rank} tiles are not supported (at most 3 dims)", op.loc)
    value = op.operands[1 + 3 * rank]
    vals = _dims_fields(ctx, op.operands, rank)
    vals.update({"src": ctx.tile(value), "gm": 0, "tensor": op.attrs["tensor"]})
    e = ctx.emit(isa.DMA_STORE[rank], vals, value.dtype, op.loc, reads=[ctx.rng(value), ("gm", op.attrs["tensor"], 0)])
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


def _dot(ctx, op):
    """GM/UB -> L1 -> L0A/L0B -> MMAD into L0C -> FixPipe to UB. Operands loaded from GM arrive in L1
    directly; a loop-carried accumulator lives in L0C and MMAD accumulates into it in place."""
    ctx.code.uses_cube = True
    a, b = op.operands[0], op.operands[1]
    acc = op.operands[2] if len(op.operands) > 2 else None
    r = op.result
    M, K = a.shape
    N = b.shape[1]
    cdt = dt.float32 if r.dtype.is_float else dt.int32
    l0_refs = []
    for src, space, mv in ((a, "l0a", "L1_TO_L0A"), (b, "l0b", "L1_TO_L0B")):
        p = ctx.place(src)
        if p.space == "l1":
            ref1, rng1 = ctx.tile(src), ctx.rng(src)
        else:
            ref1, rng1 = _staged(ctx, "l1", src.dtype, src.shape)
            ctx.emit(BY_NAME["UB_TO_L1"], {"dst": ref1, "src": ctx.tile(src)}, src.dtype, op.loc,
                     reads=[ctx.rng(src)], writes=[rng1])
        ref0, rng0 = _staged(ctx, space, src.dtype, src.shape)
        ctx.emit(BY_NAME[mv], {"dst": ref0, "src": ref1}, src.dtype, op.loc, reads=[rng1], writes=[rng0])
        l0_refs.append((ref0, rng0))
    (aref, arng), (bref, brng) = l0_refs
    rp = ctx.place(r)
    if rp.space == "l0c":
        # accumulate in place into the loop's L0C accumulator
        cref, crng = ctx.tile(r), ctx.rng(r)
        init = acc is None
        if acc is not None and ctx.place(acc).buf is not rp.buf:
            ctx.emit(BY_NAME["UB_TO_L0C"], {"dst": cref, "src": ctx.tile(acc)}, cdt, op.loc,
                     reads=[ctx.rng(acc)], writes=[crng])
        ctx.emit(BY_NAME["MMAD"], {"init": int(init), "dst": cref, "a": aref, "b": bref}, a.dtype, op.loc,
                 reads=[arng, brng] + ([crng] if not init else []), writes=[crng])
        return
    cref, crng = _staged(ctx, "l0c", cdt, (M, N))
    if acc is not None:
        ctx.emit(BY_NAME["UB_TO_L0C"], {"dst": cref, "src": ctx.tile(acc)}, cdt, op.loc,
                 reads=[ctx.rng(acc)], writes=[crng])
    ctx.emit(BY_NAME["MMAD"], {"init": int(acc is None), "dst": cref, "a": aref, "b": bref}, a.dtype, op.loc,
             reads=[arng, brng], writes=[crng])
    ctx.emit(BY_NAME["FIX_L0C_TO_UB"], {"dst": ctx.tile(r), "src": cref}, r.dtype, op.loc,
             reads=[crng], writes=[ctx.rng(r)])


EMITTERS = {
    "dma_load": _dma_load, "dma_store": _dma_store, "gather": _gather, "scatter": _scatter, "atomic": _atomic,
    "dot": _dot,
}
