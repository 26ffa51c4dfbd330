"""What each instruction does: the numerics of every instruction family, in one place.

``vm.families`` holds each family's typing rule (what the validator checks); this module holds what an
instruction computes once it is valid, written over numpy values that every executor can give it:

* a register is a numpy scalar (or a 0-d array) of its dtype, or, for a batch of programs whose values differ,
  a 1-d array with one value per program;
* a tile is an array ``(rows, *shape)``: one row per program, or one row when every program holds the same
  value (numpy broadcasting keeps that sharing through the arithmetic). One program is one row.

So the functions are the one-program reference semantics and, unchanged, the semantics of a batch of programs:
the device's step builders (``npu/units``) call them for their numerics, around them the NPU's memory model, its
costs and its host-speed machinery (lazy tiles evaluated in chunks, results computed straight into global
memory); the device's compiled path (``npu/compiled``) calls them from the code it generates, and turns the
scalar families into Python statements (``scalar_expr``) that give the same values; a second backend would
decode the same bytecode and call them too. What the memory families read and write (DMA boxes, gathers,
scatters, atomics) is global memory's, in ``npu/dma`` and ``npu/elements``; the cube's product is ``mmad``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from . import isa

# ---- conversions ------------------------------------------------------------------------------------------


def cast(a: np.ndarray, npdt) -> np.ndarray:
    """``a`` converted to ``npdt``: float -> integer truncates and saturates (NaN -> 0); -> bool is ``!= 0``."""
    if npdt == np.bool_:
        return a != 0
    src = a.dtype
    if np.issubdtype(npdt, np.integer) and (np.issubdtype(src, np.floating) or src.kind == "V"):
        info = np.iinfo(npdt)
        x = np.asarray(a, dtype=np.float64)
        x = np.where(np.isnan(x), 0, np.trunc(x))
        # compare with the bounds as floats: 2**63 - 1 is 2**63 in float64, and converting that would wrap
        big, small = x >= float(info.max), x <= float(info.min)
        inside = np.where(big | small, 0, x).astype(npdt)
        top, bottom = np.dtype(npdt).type(info.max), np.dtype(npdt).type(info.min)
        return np.where(big, top, np.where(small, bottom, inside))
    return a.astype(npdt)


def cast_rtz(a: np.ndarray, npdt) -> np.ndarray:
    """A float converted to a narrower float, rounded toward zero: the nearest value, moved one step toward
    zero wherever rounding went away from zero (so a finite overflow gives the largest finite value)."""
    r = np.asarray(a.astype(npdt))
    wide = np.asarray(a, dtype=np.float64)
    away = (np.abs(r.astype(np.float64)) > np.abs(wide)) | (np.isnan(r.astype(np.float64)) & ~np.isnan(wide))
    if not away.any():
        return r
    bits = r.view(np.dtype(f"u{r.dtype.itemsize}"))
    return np.where(away, bits - 1, bits).astype(bits.dtype).view(npdt)


def lift(v, rank: int, npdt) -> np.ndarray:
    """A register value as an array (rows, 1, ..., 1) of dtype ``npdt`` (a tile operand)."""
    a = np.asarray(v)
    if a.dtype != npdt:
        a = a.astype(npdt)
    if a.ndim == 0:
        return a.reshape((1,) * (rank + 1))
    return a.reshape((a.shape[0],) + (1,) * rank)


def converted(a, npdt, bitcast: bool, rtz: bool):
    """SCAST and VCAST: ``a`` as ``npdt`` (``bitcast``: the same bits; ``rtz``: a narrowing float conversion
    rounded toward zero)."""
    if bitcast:
        return np.ascontiguousarray(a).view(npdt)
    return (cast_rtz if rtz else cast)(a, npdt)


# ---- scalar unit --------------------------------------------------------------------------------------------


def sbin(fn, npdt, a, b):
    """SADD, SMUL, ...: the row's numpy function of two registers, in the row's dtype."""
    return np.asarray(fn(np.asarray(a), np.asarray(b))).astype(npdt, copy=False)


def sun(fn, npdt, a):
    return np.asarray(fn(np.asarray(a))).astype(npdt, copy=False)


def ssel(c, a, b):
    return np.where(c, a, b)


def scast(a, npdt, bitcast: bool, rtz: bool):
    v = np.asarray(a)
    return v.view(npdt) if bitcast else (cast_rtz if rtz else cast)(v, npdt)


def tdim(shape, strides, dim: int, stride: bool):
    """TDIM: a tensor parameter's size (or stride, in elements) along ``dim``, as an int32 register."""
    return np.array(strides[dim] if stride else shape[dim]).astype(np.int32)[()]


# ---- vector unit --------------------------------------------------------------------------------------------


def vfma(a, b, c, npdt):
    """VFMA: a * b + c rounded once (computed in float64)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(npdt)


def viota(start: int, n: int) -> np.ndarray:
    """VIOTA: start, start + 1, ... (int32), one row for every program."""
    return np.arange(start, start + n, dtype=np.int32)[None]


# (the ufuncs' own reductions: what np.sum, np.prod, np.max and np.min call, the same dtypes and values, without
# their wrappers' microseconds)
REDUCE = {"sum": np.add.reduce, "max": np.fmax.reduce, "min": np.fmin.reduce, "prod": np.multiply.reduce,
          "max_nan": np.maximum.reduce, "min_nan": np.minimum.reduce}
_ORDERED = ("sum", "prod")  # reductions whose rounding depends on the order numpy takes the elements in
WIDE_REDUCE = (dt.float16, dt.bfloat16, dt.float8e4nv, dt.float8e5)  # reduced in float32, rounded once


def reducer(op: str, axis: int, acc, npdt, dshape):
    """VREDUCE: the function reducing a tile (rows, *shape) along ``axis`` (of the rows' array: the tile's
    axis + 1) to (rows, *dshape). ``acc``: the dtype fp16/bf16/fp8 accumulate in (float32), or None. max and
    min ignore NaN, as Triton's (maxnum/minnum; all NaN gives NaN); max_nan and min_nan propagate it, as
    numpy's; argmax/argmin give the first index of the NaN-ignoring extreme (0 when every value is NaN)."""
    dshape = tuple(dshape)

    def reduce(a):
        if op in ("argmax", "argmin"):
            best = (np.fmax if op == "argmax" else np.fmin).reduce(a, axis=axis, keepdims=True)
            r = np.argmax(a == best, axis=axis).astype(np.int32)
        elif op == "xor_sum":
            r = np.bitwise_xor.reduce(a, axis=axis)
        elif op == "or":
            r = np.bitwise_or.reduce(a, axis=axis)
        else:
            x = a.astype(acc) if acc is not None else a
            if op in _ORDERED and not x.flags.c_contiguous:
                # numpy's order of summing depends on the layout: a batch of programs' tiles that are strided
                # views (programs side by side in memory) would be summed element by element along the axis,
                # one program's tile pairwise. In C order every batch sums as one program does.
                x = np.ascontiguousarray(x)
            r = REDUCE[op](x, axis=axis)
            r = r.astype(npdt, copy=False)
        return r.reshape((r.shape[0],) + dshape)
    return reduce


SCAN = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate, "min": np.minimum.accumulate}


def vscan(a, op: str, axis: int, reverse: bool, acc, npdt):
    """VSCAN: an inclusive scan along ``axis`` of the rows' array (fp16/bf16 accumulate in ``acc``)."""
    x = a.astype(acc) if acc is not None else a
    if reverse:
        x = np.flip(x, axis=axis)
    r = SCAN[op](x, axis=axis)
    if reverse:
        r = np.flip(r, axis=axis)
    return np.ascontiguousarray(r).astype(npdt, copy=False)


def vsort(a, axis: int, descending: bool, npdt):
    """VSORT: sorted along ``axis`` (bf16/fp8 sort as float32, exactly; NaN last)."""
    exact = np.float32 if np.dtype(npdt).kind == "V" else None
    r = np.sort(a.astype(exact) if exact is not None else a, axis=axis)
    if descending:
        r = np.flip(r, axis=axis)
    return np.ascontiguousarray(r).astype(npdt, copy=False)


def vtake(a, idx, axis: int, dshape):
    """VTAKE: elements of ``a`` at ``idx`` along ``axis`` (the indices checked by the caller)."""
    rows = max(a.shape[0], idx.shape[0])
    a = np.broadcast_to(a, (rows,) + a.shape[1:])
    idx = np.broadcast_to(idx.astype(np.intp, copy=False), (rows,) + tuple(dshape))
    return np.take_along_axis(a, idx, axis=axis)


def vhist(a, keep, bins: int):
    """VHIST: per program, how many of its elements kept by ``keep`` fall in each of ``bins`` (int32)."""
    rows = keep.shape[0]
    a = np.broadcast_to(a, keep.shape)
    slot = np.arange(rows, dtype=np.int64)[:, None] * bins + np.where(keep, a, 0).astype(np.int64)
    return np.bincount(slot[keep], minlength=rows * bins).reshape(rows, bins).astype(np.int32)


def vcat(x, y, axis: int):
    rows = max(x.shape[0], y.shape[0])
    x = np.broadcast_to(x, (rows,) + x.shape[1:])
    y = np.broadcast_to(y, (rows,) + y.shape[1:])
    return np.concatenate([x, y], axis=axis)


def vperm_axes(perm: int, rank: int, bits: int) -> tuple:
    """VPERM's permutation of the rows' array (the program axis first) from the field ``perm``."""
    return (0,) + tuple(((perm >> (bits * i)) & ((1 << bits) - 1)) + 1 for i in range(rank))


# ---- memory and cube ----------------------------------------------------------------------------------------


def box_elements(base: int, strides, lo, hi) -> np.ndarray:
    """DMA_LOAD and DMA_STORE of one program: the tensor elements of its box, ``base + sum(i_d * stride_d)`` for
    ``lo_d <= i_d < hi_d`` (the box already clipped to the tile), in the box's row-major order; the rest of the
    tile is the padding (a load) or untouched (a store)."""
    idx = np.full((1,) * len(strides), base, dtype=np.int64)
    for d, (s_, l, h) in enumerate(zip(strides, lo, hi)):
        ax = np.arange(l, h, dtype=np.int64).reshape((1,) * d + (h - l,) + (1,) * (len(strides) - d - 1))
        idx = idx + ax * s_
    return idx.reshape(-1)


def gathered(g: np.ndarray, off: np.ndarray, mask: np.ndarray, pad, npdt) -> np.ndarray:
    """GATHER: the elements of tensor ``g`` at ``off`` where ``mask``, ``pad`` elsewhere (masked-off offsets are
    never read), in the tile's dtype."""
    return np.where(mask, g[np.where(mask, off, 0)], pad).astype(npdt, copy=False)


def scattered(g: np.ndarray, off: np.ndarray, mask: np.ndarray, src: np.ndarray) -> None:
    """SCATTER: ``src`` stored at ``off`` where ``mask``, in element order (a later element's value stays where two
    share an offset)."""
    g[off[mask]] = src[mask]


def signal_update(op: str, old, val):
    """SIGNAL: what a peer's flag holds after the signal ``op`` (``isa.SIGNAL_OPS``): ``val`` (set) or
    ``old + val`` (add). (REMOTE_STORE is ``scattered`` into the peer's symmetric tensor, program by program;
    WAIT_SIGNAL ends when ``isa.COMPARE[cc](flag, value)`` holds for the flags it waits on.)"""
    return val if op == "set" else old + val


def atomic_update(op: str, old, val, cmp=None):
    """ATOMIC: what an element holds after the read-modify-write ``op`` (``isa.ATOMIC_OPS``) of ``old`` with
    ``val`` (cas: ``val`` where ``old == cmp``, else ``old``); the instruction's result, when wanted, is ``old``."""
    if op == "add":
        return old + val
    if op == "max":
        return np.maximum(old, val)
    if op == "min":
        return np.minimum(old, val)
    if op == "xchg":
        return val
    if op == "and":
        return old & val
    if op == "or":
        return old | val
    if op == "xor":
        return old ^ val
    return np.where(old == cmp, val, old)  # cas


def accumulate(prod: np.ndarray, c: np.ndarray) -> np.ndarray:
    """MMAD accumulating: ``prod + c`` (into ``prod`` when ``c`` has its shape or broadcasts to it; each operand
    order as it always was, for the NaN payloads too)."""
    if c.shape == prod.shape:
        return np.add(prod, c, out=prod)
    if np.broadcast_shapes(c.shape, prod.shape) == prod.shape:
        return np.add(c, prod, out=prod)
    return c + prod


def mmad(a: np.ndarray, b: np.ndarray, c, acc) -> np.ndarray:
    """MMAD: ``a @ b`` in the accumulator's dtype ``acc`` (fp32 for fp16/bf16 inputs, int32 for integers), plus
    the accumulator ``c`` (None: the first product, ``init``); 3-D tiles are a batch of products."""
    prod = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
    return prod if c is None else accumulate(prod, c)


# ---- the table ------------------------------------------------------------------------------------------------

# Every instruction family -> the function above (or opdefs' row function, ``Instr.fn``) that gives its values, for
# every reader of the ISA (``tests/test_npu_rooms.py`` checks that the table covers the ISA's families). None:
# the family computes no value (control flow, events, prints, traps: their meaning is the executor's).
SEMANTICS = {
    "nop": None, "end": None, "jmp": None, "br": None, "set": None, "wait": None, "barrier": None, "print": None,
    "trap": None,
    "movi": "the immediate's bits read as the row's dtype", "mov": "rd = rs", "pid": "the program's grid coordinate",
    "nprog": "the grid's size", "tdim": tdim, "sbin": sbin, "sun": sun, "scmp": "isa.COMPARE[cc](ra, rb)",
    "ssel": ssel, "scast": scast, "movts": "element 0 of the tile", "ldg": "g[offset]", "stg": "g[offset] = rs",
    "vbin": "Instr.fn(a, b)", "vbins": "Instr.fn(a, lift(rs)) (rev: swapped)", "vun": "Instr.fn(a)",
    "vcmp": "isa.COMPARE[cc](a, b)", "vcmps": "isa.COMPARE[cc](a, lift(rs)) (rev: swapped)", "vsel": "np.where",
    "vfma": vfma, "vcast": converted, "vdup": lift, "viota": viota, "vcopy": "a broadcast to the tile",
    "vreduce": reducer, "vscan": vscan, "vperm": vperm_axes, "vslice": "a[s0:s0 + n0, ...]", "vtake": vtake,
    "vsort": vsort, "vhist": vhist, "vcat": vcat,
    "dma_load": box_elements, "dma_store": box_elements, "fix_store": box_elements, "gather": gathered,
    "scatter": scattered, "atomic": atomic_update, "copy_space": "the tile as it is, in the destination's dtype",
    "l0c_fill": lift, "mmad": mmad,
    "remote_store": scattered, "signal": signal_update,
    "wait_signal": "until isa.COMPARE[cc](flag, value) holds for every flag waited on",
}


# ---- the scalar families as Python statements (the compiled path) -------------------------------------------

# binary scalar ops whose Python operator on numpy values of one dtype is the row's numpy function, bit for bit
_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^"}
_BITWISE = frozenset(("and", "or", "xor"))
_CC = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _plain(npdt) -> bool:
    """Whether numpy's own scalar operators compute ``npdt`` as its ufunc loops do (integers, bool, float32
    and float64; not float16 or the ml_dtypes types)."""
    d = np.dtype(npdt)
    return d.kind in "iub" or d in (np.dtype(np.float32), np.dtype(np.float64))


def _wrapper(npdt):
    """A function making a Python integer a numpy scalar of integer dtype ``npdt``, wrapped as numpy's integer
    arithmetic wraps (two's complement)."""
    d = np.dtype(npdt)
    t, bits = d.type, 8 * d.itemsize
    if d.kind == "u":
        mask = (1 << bits) - 1
        return lambda v: t(v & mask)
    half, mod = 1 << (bits - 1), 1 << bits
    return lambda v: t((v + half) % mod - half)


def int_scalar_op(name: str, npdt):
    """The row's integer op ``name`` (div, mod, floordiv, shl, shr) on one value each, in Python integers: the
    value the row's numpy function (``opdefs``) gives on those values, as a numpy scalar of ``npdt``. None for
    any other op or dtype. (numpy's way costs a dozen calls on 0-d arrays: most of a kernel's index arithmetic.)"""
    d = np.dtype(npdt)
    if d.kind not in "iu":
        return None
    wrap = _wrapper(d)
    bits = 8 * d.itemsize
    if name == "div":  # C's: toward zero; x div 0 is 0
        def op(a, b):
            x, y = int(a), int(b)
            if y == 0:
                return wrap(0)
            q = abs(x) // abs(y)
            return wrap(-q if (x < 0) != (y < 0) else q)
    elif name == "mod":  # C's: the dividend's sign; x mod 0 is 0
        def op(a, b):
            x, y = int(a), int(b)
            if y == 0:
                return wrap(0)
            r = abs(x) % abs(y)
            return wrap(-r if x < 0 else r)
    elif name == "floordiv":  # toward minus infinity; x // 0 is 0
        def op(a, b):
            x, y = int(a), int(b)
            return wrap(0 if y == 0 else x // y)
    elif name == "shl":  # a shift by a negative count or by the width or more gives 0
        def op(a, b):
            x, y = int(a), int(b)
            return wrap(x << y if 0 <= y < bits else 0)
    elif name == "shr":  # arithmetic for signed dtypes; the count clipped to [0, width)
        def op(a, b):
            x, y = int(a), int(b)
            return wrap(x >> (0 if y < 0 else bits - 1 if y >= bits else y))
    else:
        return None
    return op


def int_array_op(name: str, fn, npdt):
    """The row's integer op ``name`` (div, mod, floordiv) of per-program values by one divisor: numpy's own
    ``//`` and ``%`` where they give what the row's function does (C division and remainder agree with floor
    division and Python's remainder for a dividend >= 0 and a divisor > 0; floor division by a divisor != 0 is
    numpy's ``//``), else the row's function. None for any other op or dtype."""
    d = np.dtype(npdt)
    if d.kind not in "iu" or name not in ("div", "mod", "floordiv"):
        return None
    t = d.type
    floor = name != "mod"

    def op(a, b):
        if b.__class__ is np.ndarray and b.ndim:
            return sbin(fn, npdt, a, b)
        y = int(b)
        if y > 0 and (name == "floordiv" or d.kind == "u" or not (a < 0).any()):
            return (a // t(y)) if floor else (a % t(y))
        if y < 0 and name == "floordiv":
            return a // t(y)
        return sbin(fn, npdt, a, b)
    return op


def _one(x: str) -> str:
    """A test that register value ``x`` is one value (not one per program)."""
    return f"({x}.__class__ is not np.ndarray or not {x}.ndim)"


def scalar_expr(d) -> tuple[str, dict] | None:
    """(a Python statement over the registers ``R``, the batch ``b`` and the launch ``L``; the names it uses) that
    does what decoded scalar instruction ``d`` does to a batch's registers (the same values as the family's
    function above), or None when the family has none (the device's step is called)."""
    fam = d.ins.family
    v = d.vals
    if fam == "mov":
        return f"R[{v['rd']}] = R[{v['rs']}]", {}
    if fam == "movi":
        t = f"T{d.pc}"
        return f"R[{v['rd']}] = L.imm({d.pc + 1}, {t})", {t: d.dtype.np}
    if fam == "pid":
        a = v["axis"]
        return f"R[{v['rd']}] = b.coords[{a}] if b.n > 1 else np.int32(b.coords[{a}][0])", {}
    if fam == "nprog":
        return f"R[{v['rd']}] = np.int32(L.kernel.grid[{v['axis']}])", {}
    if fam == "sbin":
        name = d.ins.name[1:].lower()
        op = _OPERATORS.get(name)
        npdt = d.dtype.np
        if op is not None and _plain(npdt) and (np.dtype(npdt).kind != "b" or name in _BITWISE):
            return f"R[{v['rd']}] = R[{v['ra']}] {op} R[{v['rb']}]", {}
        f, t = f"F{d.pc}", f"T{d.pc}"
        names = {f: d.ins.fn, t: npdt, "sbin": sbin}
        generic = f"sbin({f}, {t}, x_, y_)"
        ints = int_scalar_op(name, npdt)
        if ints is not None:  # one value each (not one per program): in Python integers
            names[f"I{d.pc}"] = ints
            arrays = int_array_op(name, d.ins.fn, npdt)
            if arrays is not None:  # one value per program, one divisor
                names[f"V{d.pc}"] = arrays
                generic = f"V{d.pc}(x_, y_) if {_one('y_')} else {generic}"
            return (f"x_ = R[{v['ra']}]; y_ = R[{v['rb']}]; R[{v['rd']}] = I{d.pc}(x_, y_) if {_one('x_')} and "
                    f"{_one('y_')} else {generic}", names)
        return f"x_ = R[{v['ra']}]; y_ = R[{v['rb']}]; R[{v['rd']}] = {generic}", names
    if fam == "scmp":
        if _plain(d.dtype.np):
            return f"R[{v['rd']}] = R[{v['ra']}] {_CC[isa.CC_NAMES[v['cc']]]} R[{v['rb']}]", {}
        f = f"F{d.pc}"
        return f"R[{v['rd']}] = {f}(R[{v['ra']}], R[{v['rb']}])", {f: isa.COMPARE[isa.CC_NAMES[v['cc']]]}
    if fam == "ssel":
        return (f"q_ = R[{v['rc']}]; R[{v['rd']}] = np.where(q_, R[{v['ra']}], R[{v['rb']}]) "
                f"if not {_one('q_')} else (R[{v['ra']}] if q_ else R[{v['rb']}])"), {}
    return None
