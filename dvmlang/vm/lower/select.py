"""Pass 4: instruction selection from the ISA table.

One emitter per IR op kind, ``emitter(ctx, op)``, listed in ``EMITTERS``: the scalar and vector ops here,
the memory and cube ops from ``memory``, structured control flow from ``control``. The prologue loads the
constants and the scalar parameters into their registers.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import CompilationError
from ...ir.core import Function, Value
from .. import isa
from . import control, memory, shmem
from .emit import Context
from .program import Label

BY_NAME = isa.BY_NAME


def emit_prologue(ctx: Context, fn: Function):
    """Constants and scalar parameters into registers (a parameter's value is patched in per instance)."""
    movi = BY_NAME["MOVI"]
    regs = ctx.regs
    for key, vals in regs.consts.items():
        reg = regs.of_key[("const",) + key]
        v = vals[0]
        bits = _raw_bits(v.op.attrs["value"], v.type.dtype)
        ctx.emit(movi, {"rd": reg, "imm": bits}, v.type.dtype, None)
    for idx, p in enumerate(fn.params):
        if p.kind != "scalar":
            continue
        reg = regs.of_value.get(p.value.id)
        if reg is None:
            continue
        e = ctx.emit(movi, {"rd": reg, "imm": 0}, p.dtype, fn.loc)
        e.scalar_param = idx


def _raw_bits(value, dtype: dt.DType) -> int:
    arr = np.array([value]).astype(dtype.np) if not dtype.is_bool else np.array([bool(value)])
    raw = arr.view(np.uint8)
    return int.from_bytes(raw.tobytes().ljust(8, b"\0"), "little")


def _const(ctx, op):
    """Constants are loaded into registers by the prologue."""


def _program_id(ctx, op):
    ctx.emit(BY_NAME["PID"], {"rd": ctx.reg(op.result), "axis": op.attrs["axis"]}, dt.int32, op.loc)


def _num_programs(ctx, op):
    ctx.emit(BY_NAME["NPROG"], {"rd": ctx.reg(op.result), "axis": op.attrs["axis"]}, dt.int32, op.loc)


def _tensor_dim(ctx, op, stride=False):
    ctx.emit(BY_NAME["TDIM"], {"rd": ctx.reg(op.result), "tensor": op.attrs["tensor"], "dim": op.attrs["dim"],
                               "stride": int(stride)}, dt.int32, op.loc)


def _tensor_stride(ctx, op):
    _tensor_dim(ctx, op, stride=True)


def _arange(ctx, op):
    r = op.result
    ctx.emit(BY_NAME["VIOTA"], {"dst": ctx.tile(r), "start": op.attrs["start"] & 0x7FFFFFFF}, dt.int32, op.loc,
             writes=[ctx.rng(r)])


def _dup(ctx, scalar: Value, dst_ref, dst_rng, loc, dtype):
    ctx.emit(BY_NAME["VDUP"], {"rs": ctx.reg(scalar), "dst": dst_ref}, dtype, loc, writes=[dst_rng])


def _full(ctx, op):
    r = op.result
    if r.id in ctx.plan.l0c_fills:
        return  # the loops fill their L0C accumulators with the scalar (L0C_FILL); no UB tile is needed
    _dup(ctx, op.operands[0], ctx.tile(r), ctx.rng(r), op.loc, r.dtype)


def _temp_tile(ctx, scalar: Value, rank: int, loc) -> tuple[int, tuple]:
    """A (1, ..., 1) tile holding a scalar, for instructions that only take tiles."""
    shape = (1,) * rank
    buf = ctx.staging.scratch()
    ref = ctx.tile_ref(buf.addr, scalar.dtype, shape)
    rng = ("ub", buf.addr, buf.addr + 32)
    _dup(ctx, scalar, ref, rng, loc, scalar.dtype)
    return ref, rng


def _tile_or_temp(ctx, v: Value, rank: int, loc):
    if v.is_tile:
        return ctx.tile(v), ctx.rng(v)
    return _temp_tile(ctx, v, rank, loc)


def _binary(ctx, op):
    a, b = op.operands
    r = op.result
    name = op.attrs["op"]
    if not r.is_tile:
        ctx.emit(isa.SCALAR_BINARY[name], {"rd": ctx.reg(r), "ra": ctx.reg(a), "rb": ctx.reg(b)}, r.dtype, op.loc)
        return
    if a.is_tile and b.is_tile:
        ctx.emit(isa.VECTOR_BINARY[name], {"dst": ctx.tile(r), "a": ctx.tile(a), "b": ctx.tile(b)}, r.dtype, op.loc,
                 reads=[ctx.rng(a), ctx.rng(b)], writes=[ctx.rng(r)])
        return
    tile_v, scal, rev = (a, b, 0) if a.is_tile else (b, a, 1)
    if tile_v.shape != r.shape:
        src_ref, src_rng = ctx.tile(tile_v), ctx.rng(tile_v)
        ctx.emit(BY_NAME["VCOPY"], {"dst": ctx.tile(r), "a": src_ref}, r.dtype, op.loc,
                 reads=[src_rng], writes=[ctx.rng(r)])
        tile_v = r
    ctx.emit(isa.VECTOR_BINARY_S[name], {"rs": ctx.reg(scal), "rev": rev, "dst": ctx.tile(r), "a": ctx.tile(tile_v)},
             r.dtype, op.loc, reads=[ctx.rng(tile_v)], writes=[ctx.rng(r)])


def _compare(ctx, op):
    a, b = op.operands
    r = op.result
    cc = isa.CC_NAMES.index(op.attrs["op"])
    if not r.is_tile:
        ctx.emit(BY_NAME["SCMP"], {"rd": ctx.reg(r), "ra": ctx.reg(a), "rb": ctx.reg(b), "cc": cc}, a.dtype, op.loc)
        return
    if a.is_tile and b.is_tile:
        ctx.emit(BY_NAME["VCMP"], {"cc": cc, "dst": ctx.tile(r), "a": ctx.tile(a), "b": ctx.tile(b)}, a.dtype,
                 op.loc, reads=[ctx.rng(a), ctx.rng(b)], writes=[ctx.rng(r)])
        return
    tile_v, scal, rev = (a, b, 0) if a.is_tile else (b, a, 1)
    if tile_v.shape != r.shape:
        ref, rng = _temp_tile(ctx, scal, len(r.shape), op.loc)
        refs = {"a": ctx.tile(a), "b": ref} if a.is_tile else {"a": ref, "b": ctx.tile(b)}
        ctx.emit(BY_NAME["VCMP"], {"cc": cc, "dst": ctx.tile(r), **refs}, a.dtype, op.loc,
                 reads=[ctx.rng(tile_v), rng], writes=[ctx.rng(r)])
        return
    ctx.emit(BY_NAME["VCMPS"], {"cc": cc, "rs": ctx.reg(scal), "rev": rev, "dst": ctx.tile(r),
                                "a": ctx.tile(tile_v)}, a.dtype, op.loc, reads=[ctx.rng(tile_v)], writes=[ctx.rng(r)])


def _unary(ctx, op):
    x = op.operands[0]
    r = op.result
    name = op.attrs["op"]
    if not r.is_tile:
        ctx.emit(isa.SCALAR_UNARY[name], {"rd": ctx.reg(r), "ra": ctx.reg(x)}, r.dtype, op.loc)
        return
    ctx.emit(isa.VECTOR_UNARY[name], {"dst": ctx.tile(r), "a": ctx.tile(x)}, r.dtype, op.loc,
             reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _tiles_of(ctx, names, values, rank, loc):
    """The tile refs and ranges of ``values`` (scalars splatted into temporary tiles)."""
    refs, rngs = {}, []
    for name, v in zip(names, values):
        ref, rng = _tile_or_temp(ctx, v, rank, loc)
        refs[name] = ref
        rngs.append(rng)
    return refs, rngs


def _select(ctx, op):
    c, a, b = op.operands
    r = op.result
    if not r.is_tile:
        ctx.emit(BY_NAME["SSEL"], {"rd": ctx.reg(r), "rc": ctx.reg(c), "ra": ctx.reg(a), "rb": ctx.reg(b)},
                 r.dtype, op.loc)
        return
    refs, rngs = _tiles_of(ctx, ("c", "a", "b"), (c, a, b), len(r.shape), op.loc)
    ctx.emit(BY_NAME["VSEL"], {"dst": ctx.tile(r), **refs}, r.dtype, op.loc, reads=rngs, writes=[ctx.rng(r)])


def _fma(ctx, op):
    r = op.result
    refs, rngs = _tiles_of(ctx, ("a", "b", "c"), op.operands, len(r.shape), op.loc)
    ctx.emit(BY_NAME["VFMA"], {"dst": ctx.tile(r), **refs}, r.dtype, op.loc, reads=rngs, writes=[ctx.rng(r)])


def _cast(ctx, op):
    x = op.operands[0]
    r = op.result
    if r.is_tile and ctx.place(r).space == "l0c":
        return  # FixPipe converts the accumulator as it stores it (placement.stored_from_l0c)
    bitcast = int(op.attrs["bitcast"])
    rtz = int(op.attrs.get("rounding") == "rtz")
    if not r.is_tile:
        ctx.emit(BY_NAME["SCAST"], {"rd": ctx.reg(r), "ra": ctx.reg(x), "bitcast": bitcast, "rtz": rtz}, r.dtype,
                 op.loc)
        return
    ctx.emit(BY_NAME["VCAST"], {"bitcast": bitcast, "rtz": rtz, "dst": ctx.tile(r), "a": ctx.tile(x)}, r.dtype,
             op.loc, reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _broadcast(ctx, op):
    r = op.result
    src = op.operands[0]
    if ctx.place(r).buf is ctx.place(src).buf and ctx.place(r).shape == src.shape:
        return  # consumed by elementwise ops directly (numpy broadcasting)
    ctx.emit(BY_NAME["VCOPY"], {"dst": ctx.tile(r), "a": ctx.tile(src)}, r.dtype, op.loc,
             reads=[ctx.rng(src)], writes=[ctx.rng(r)])


def _reshape(ctx, op):
    r = op.result
    src = op.operands[0]
    if ctx.place(r).buf is not ctx.place(src).buf:
        ctx.emit(BY_NAME["VCOPY"], {"dst": ctx.tile_ref(ctx.place(r).buf.addr, src.dtype, src.shape),
                                    "a": ctx.tile(src)}, r.dtype, op.loc, reads=[ctx.rng(src)], writes=[ctx.rng(r)])


def _permute(ctx, op):
    r = op.result
    perm = op.attrs["perm"]
    ins = BY_NAME["VPERM"] if len(perm) <= 4 else BY_NAME["VPERM5"]
    if len(perm) > 5:
        raise CompilationError(f"permutes of rank-{len(perm)} tiles are not supported (at most 5 dims)", op.loc,
                               "reshape to at most 5 dims first, merging dims that stay next to each other")
    bits = ins.extra["perm_bits"]
    code = 0
    for i, p in enumerate(perm):
        code |= p << (bits * i)
    ctx.emit(ins, {"perm": code, "dst": ctx.tile(r), "a": ctx.tile(op.operands[0])}, r.dtype, op.loc,
             reads=[ctx.rng(op.operands[0])], writes=[ctx.rng(r)])


def _cat(ctx, op):
    r = op.result
    a, b = op.operands
    ctx.emit(BY_NAME["VCAT"], {"axis": op.attrs["axis"], "dst": ctx.tile(r), "a": ctx.tile(a), "b": ctx.tile(b)},
             r.dtype, op.loc, reads=[ctx.rng(a), ctx.rng(b)], writes=[ctx.rng(r)])


def _slice(ctx, op):
    r = op.result
    x = op.operands[0]
    rank = len(op.attrs["starts"])
    ins = BY_NAME["VSLICE"] if rank <= 4 else BY_NAME["VSLICE5"]
    n = ins.extra["starts"]
    starts = list(op.attrs["starts"]) + [0] * (n - rank)
    if rank > n or any(s >= 1 << 16 for s in starts):
        raise CompilationError("tile slices support rank <= 5 and offsets below 65536", op.loc)
    ctx.emit(ins, {"dst": ctx.tile(r), "a": ctx.tile(x), **{f"s{i}": s for i, s in enumerate(starts)}}, r.dtype,
             op.loc, reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _take(ctx, op):
    r = op.result
    x, idx = op.operands
    ctx.emit(BY_NAME["VTAKE"], {"axis": op.attrs["axis"], "dst": ctx.tile(r), "a": ctx.tile(x),
                                "index": ctx.tile(idx)}, r.dtype, op.loc,
             reads=[ctx.rng(x), ctx.rng(idx)], writes=[ctx.rng(r)])


def _sort(ctx, op):
    r, x = op.result, op.operands[0]
    ctx.emit(BY_NAME["VSORT"], {"axis": op.attrs["axis"], "descending": int(op.attrs["descending"]),
                                "dst": ctx.tile(r), "a": ctx.tile(x)}, r.dtype, op.loc,
             reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _histogram(ctx, op):
    r, x = op.result, op.operands[0]
    mask = op.operands[1] if op.attrs["has_mask"] else None
    reads = [ctx.rng(x)] + ([ctx.rng(mask)] if mask is not None else [])
    ctx.emit(BY_NAME["VHIST"], {"masked": int(mask is not None), "dst": ctx.tile(r), "a": ctx.tile(x),
                                "mask": ctx.tile(mask) if mask is not None else 0}, r.dtype, op.loc,
             reads=reads, writes=[ctx.rng(r)])


def _to_scalar(ctx, op):
    x = op.operands[0]
    ctx.emit(BY_NAME["MOVTS"], {"rd": ctx.reg(op.result), "src": ctx.tile(x)}, op.result.dtype, op.loc,
             reads=[ctx.rng(x)])


def _reduce(ctx, op):
    r = op.result
    x = op.operands[0]
    ctx.emit(BY_NAME["VREDUCE"], {"op": isa.REDUCE_OPS.index(op.attrs["op"]), "axis": op.attrs["axis"],
                                  "dst": ctx.tile(r), "a": ctx.tile(x)}, r.dtype, op.loc,
             reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _scan(ctx, op):
    r = op.result
    x = op.operands[0]
    ctx.emit(BY_NAME["VSCAN"], {"op": isa.SCAN_OPS.index(op.attrs["op"]), "axis": op.attrs["axis"],
                                "reverse": int(op.attrs["reverse"]), "dst": ctx.tile(r), "a": ctx.tile(x)},
             r.dtype, op.loc, reads=[ctx.rng(x)], writes=[ctx.rng(r)])


def _assert(ctx, op):
    """A failed device assertion traps: the launch stops with the message and the program's source line."""
    ok = Label("assert_ok")
    e = ctx.emit(BY_NAME["BRNZ"], {"rc": ctx.reg(op.operands[0]), "target": 0}, None, op.loc)
    e.target = ok
    ctx.emit(BY_NAME["TRAP"], {"string": ctx.code.string(op.attrs["message"])}, None, op.loc)
    ctx.code.out.append(ok)


def _print(ctx, op):
    sid = ctx.code.string(op.attrs["prefix"])
    if not op.operands:
        ctx.emit(BY_NAME["PRINT"], {"string": sid, "hex": int(op.attrs["hex"]), "value": 0, "reg": 0, "kind": 0},
                 None, op.loc)
        return
    for i, v in enumerate(op.operands):
        s = sid if i == 0 else ctx.code.string("")
        if v.is_tile:
            ctx.emit(BY_NAME["PRINT"], {"string": s, "hex": int(op.attrs["hex"]), "value": ctx.tile(v), "reg": 0,
                                        "kind": 2}, v.dtype, op.loc, reads=[ctx.rng(v)])
        else:
            ctx.emit(BY_NAME["PRINT"], {"string": s, "hex": int(op.attrs["hex"]), "value": 0, "reg": ctx.reg(v),
                                        "kind": 1}, v.dtype, op.loc)


EMITTERS = {
    "const": _const, "program_id": _program_id, "num_programs": _num_programs, "tensor_dim": _tensor_dim,
    "tensor_stride": _tensor_stride, "arange": _arange, "full": _full, "binary": _binary, "compare": _compare,
    "unary": _unary, "select": _select, "fma": _fma, "cast": _cast, "broadcast": _broadcast, "reshape": _reshape,
    "permute": _permute, "cat": _cat, "slice": _slice, "take": _take, "sort": _sort, "histogram": _histogram,
    "to_scalar": _to_scalar, "reduce": _reduce, "scan": _scan, "assert": _assert, "print": _print,
    **memory.EMITTERS,
    **shmem.EMITTERS,
    **control.EMITTERS,
}
