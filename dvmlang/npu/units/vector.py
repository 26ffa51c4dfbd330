"""Vector-unit step builders: elementwise arithmetic and comparisons (recorded lazily where a chain can be
evaluated in chunks), select, fma, casts, fills, copies, reductions, scans, permutes, slices, gathers within
a tile, sorts, histograms and concatenation."""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DeviceError
from ...vm import isa
from ...vm import semantics as sem
from ...vm.decode import sop_parts
from ...vm.semantics import lift
from .. import host
from ..state import Slot, arg_value, chunks, each_rows, eval_rows
from .registry import builds


def _cost(m, d, refs, **sizes):
    """The row's vector (or reduce) formula over the largest of the tiles ``refs``."""
    nbytes = max(m.tile_bytes(d.vals[r]) for r in refs)
    return m.formula(d)(nbytes=nbytes, mix=m.kernel.mix, **sizes)


def _axis_len(m, d) -> int:
    return m.layout(d.vals["a"])[2][d.vals["axis"]]


@builds("vbin")
def vbin(m, d):
    rank = len(m.layout(d.vals["dst"])[2])
    sa, sb = m.reader(d.vals["a"], rank=rank).source, m.reader(d.vals["b"], rank=rank).source
    lazy = m.writer(d.vals["dst"]).lazy
    f = d.ins.fn
    keep = d.pc in m.read_again

    def fn(b, L):
        lazy(b, f, (sa(b, L), sb(b, L)), keep)
    return m.step(d, fn, _cost(m, d, ("dst", "a", "b")))


@builds("vbins")
def vbins(m, d):
    sa = m.reader(d.vals["a"]).source
    lazy = m.writer(d.vals["dst"]).lazy
    f = d.ins.fn
    rs, rev = d.vals["rs"], d.vals["rev"]
    _, adt, ashape = m.layout(d.vals["a"])
    rank, npdt = len(ashape), adt.np
    keep = d.pc in m.read_again

    def fn(b, L):
        s = (lift(b.regs[rs], rank, npdt), None)
        a = sa(b, L)
        lazy(b, f, (s, a) if rev else (a, s), keep)
    return m.step(d, fn, _cost(m, d, ("dst", "a")))


@builds("vcmp")
def vcmp(m, d):
    rank = len(m.layout(d.vals["dst"])[2])
    ra, rb = m.reader(d.vals["a"], rank=rank), m.reader(d.vals["b"], rank=rank)
    w = m.writer(d.vals["dst"])
    f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]

    def fn(b, L):
        w(b, f(ra(b, L), rb(b, L)))
    return m.step(d, fn, _cost(m, d, ("a", "b")))


@builds("vcmps")
def vcmps(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]
    rs, rev = d.vals["rs"], d.vals["rev"]
    _, adt, ashape = m.layout(d.vals["a"])
    rank, npdt = len(ashape), adt.np

    def fn(b, L):
        s = lift(b.regs[rs], rank, npdt)
        a = ra(b, L)
        w(b, f(s, a) if rev else f(a, s))
    return m.step(d, fn, _cost(m, d, ("a",)))


@builds("vun")
def vun(m, d):
    sa = m.reader(d.vals["a"]).source
    lazy = m.writer(d.vals["dst"]).lazy
    f = d.ins.fn
    keep = d.pc in m.read_again

    def fn(b, L):
        lazy(b, f, (sa(b, L),), keep)
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vsel")
def vsel(m, d):
    _, ddt, dshape = m.layout(d.vals["dst"])
    rank, npdt, nbytes, dshape = len(dshape), ddt.np, m.tile_bytes(d.vals["dst"]), tuple(dshape)
    sc, sa, sb = (m.reader(d.vals[k], rank=rank).source for k in ("c", "a", "b"))
    w = m.writer(d.vals["dst"])
    lazy = w.lazy
    keep = d.pc in m.read_again

    def fn(b, L):  # pending like the elementwise ops: a chain through a select is evaluated in row chunks
        c, x, y = sc(b, L), sa(b, L), sb(b, L)
        cv = c[0]
        if cv.__class__ is np.ndarray and cv.shape[0] == 1:  # one condition for every program
            pick = x if cv.all() else y if not cv.any() else None
            if pick is not None and _as_is(b, w, pick, npdt, dshape, nbytes, keep):
                return
        lazy(b, np.where, (c, x, y), keep)
    return m.step(d, fn, _cost(m, d, ("dst",)))


def _as_is(b, w, source, npdt, shape, nbytes, keep) -> bool:
    """Put the operand ``source`` (a reader's ``source`` pair) into the destination tile as it is when it has
    the tile's dtype and shape, so it is what the select gives (a condition true, or false, everywhere):
    ``np.where`` would return the same elements at the cost of a pass over them. False when it does not.
    A pending operand stays pending, one value in both tiles (kept once computed if the select's result is
    read again)."""
    v, gm = source
    if v.__class__ is tuple:
        slot, full = v
        if slot.dtype != npdt or tuple(slot.shape) != shape or tuple(full) != shape:
            return False
        slot.keep = slot.keep or keep
    else:
        if v.dtype != npdt or v.shape[1:] != shape:
            return False
        slot = Slot(v, nbytes, gm)
    w.slot(b, slot)
    return True


@builds("vfma")
def vfma(m, d):
    rank = len(m.layout(d.vals["dst"])[2])
    r = [m.reader(d.vals[k], rank=rank) for k in ("a", "b", "c")]
    w = m.writer(d.vals["dst"])
    npdt = d.dtype.np

    def fn(b, L):
        w(b, sem.vfma(r[0](b, L), r[1](b, L), r[2](b, L), npdt))
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vcast")
def vcast(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    npdt = d.dtype.np
    bitcast, rtz = d.vals["bitcast"], d.vals["rtz"]

    def fn(b, L):
        w(b, sem.converted(ra(b, L), npdt, bitcast, rtz))
    return m.step(d, fn, _cost(m, d, ("dst", "a")))


def fill(m, d, space: str = "ub"):
    """The step function writing scalar register ``rs`` to every element of tile ``dst`` in ``space`` (VDUP;
    L0C_FILL in the cube unit)."""
    rs = d.vals["rs"]
    _, dd, shape = m.layout(d.vals["dst"])
    w = m.writer(d.vals["dst"], space)
    npdt = dd.np
    rank = len(shape)

    def fn(b, L):
        s = lift(b.regs[rs], rank, npdt)
        w(b, np.broadcast_to(s, (s.shape[0],) + tuple(shape)))
    return fn


@builds("vdup")
def vdup(m, d):
    return m.step(d, fill(m, d), _cost(m, d, ("dst",)))


@builds("viota")
def viota(m, d):
    _, _, shape = m.layout(d.vals["dst"])
    _, start = sop_parts(d.vals["start"])
    w = m.writer(d.vals["dst"])
    value = sem.viota(start, shape[0])
    value.setflags(write=False)

    def fn(b, L):
        w(b, value)
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vcopy")
def vcopy(m, d):
    _, _, shape = m.layout(d.vals["dst"])
    ra = m.reader(d.vals["a"], rank=len(shape))
    w = m.writer(d.vals["dst"])

    def fn(b, L):
        a = ra(b, L)
        w(b, np.broadcast_to(a, (a.shape[0],) + tuple(shape)))
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vreduce")
def vreduce(m, d):
    source = m.reader(d.vals["a"]).source
    w = m.writer(d.vals["dst"])
    _, ad, ashape = m.layout(d.vals["a"])
    _, dd, dshape = m.layout(d.vals["dst"])
    reduce = sem.reducer(isa.REDUCE_OPS[d.vals["op"]], d.vals["axis"] + 1,
                         np.float32 if ad in sem.WIDE_REDUCE else None, dd.np, dshape)
    npdt = dd.np
    dshape = tuple(dshape)

    def fn(b, L):
        a, _ = source(b, L)
        pending = a.__class__ is tuple
        rows = a[0].rows if pending else a.shape[0]
        if rows > 1:
            parts = chunks(a[0]) if pending else [(0, rows)]
            nbytes = rows * a[0].nbytes if pending else a.nbytes
            if len(parts) > 1 or host.worth(rows, nbytes):
                # reduce chunk by chunk (a pending computation without materialising it), side by side if large
                out = np.empty((rows,) + dshape, dtype=npdt)

                def part(r0, r1):
                    out[r0:r1] = reduce(eval_rows(a, r0, r1, {}))
                if pending:
                    each_rows(a[0], part, parts, nbytes)
                else:
                    host.each_range(part, parts, nbytes)
                w(b, out)
                return
        w(b, reduce(arg_value(a)))
    n = ashape[d.vals["axis"]] if d.vals["axis"] < len(ashape) else 1
    return m.step(d, fn, _cost(m, d, ("a",), n=n))


@builds("vscan")
def vscan(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    op = isa.SCAN_OPS[d.vals["op"]]
    axis = d.vals["axis"] + 1
    rev = d.vals["reverse"]
    _, ad, _ = m.layout(d.vals["a"])
    acc = np.float32 if ad in (dt.float16, dt.bfloat16) else None
    npdt = ad.np

    def fn(b, L):
        w(b, sem.vscan(ra(b, L), op, axis, rev, acc, npdt))
    return m.step(d, fn, _cost(m, d, ("a",), n=_axis_len(m, d)))


@builds("vperm")
def vperm(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    perm = sem.vperm_axes(d.vals["perm"], len(m.layout(d.vals["a"])[2]), d.ins.extra["perm_bits"])

    def fn(b, L):
        w(b, np.ascontiguousarray(np.transpose(ra(b, L), perm)))
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vslice")
def vslice(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    _, _, dshape = m.layout(d.vals["dst"])
    sl = (slice(None),) + tuple(slice(d.vals[f"s{i}"], d.vals[f"s{i}"] + n) for i, n in enumerate(dshape))

    def fn(b, L):
        w(b, ra(b, L)[sl])
    return m.step(d, fn, _cost(m, d, ("dst",)))


@builds("vtake")
def vtake(m, d):
    ra, ri = m.reader(d.vals["a"]), m.reader(d.vals["index"])
    w = m.writer(d.vals["dst"])
    axis = d.vals["axis"] + 1
    _, _, dshape = m.layout(d.vals["dst"])
    n = _axis_len(m, d)
    pc = d.pc

    def fn(b, L):
        a, idx = ra(b, L), ri(b, L)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            rows = bad.reshape(bad.shape[0], -1).any(axis=1)
            pids = b.pids[rows] if rows.shape[0] == b.n else b.pids
            raise DeviceError(f"kernel `{L.name}`: gather index {idx[bad].flat[0]} is outside [0, {n}) in "
                              f"programs {pids[:8].tolist()}" + L.where(pc))
        w(b, sem.vtake(a, idx, axis, dshape))
    return m.step(d, fn, _cost(m, d, ("dst", "a")))


@builds("vsort")
def vsort(m, d):
    ra = m.reader(d.vals["a"])
    w = m.writer(d.vals["dst"])
    axis = d.vals["axis"] + 1
    desc = d.vals["descending"]
    npdt = m.layout(d.vals["a"])[1].np

    def fn(b, L):
        w(b, sem.vsort(ra(b, L), axis, desc, npdt))
    return m.step(d, fn, _cost(m, d, ("a",), n=_axis_len(m, d)))


@builds("vhist")
def vhist(m, d):
    ra = m.reader(d.vals["a"])
    rm = m.reader(d.vals["mask"]) if d.vals["masked"] else None
    w = m.writer(d.vals["dst"])
    _, _, (bins,) = m.layout(d.vals["dst"])

    def fn(b, L):
        a = ra(b, L)
        keep = (a >= 0) & (a < bins)
        if rm is not None:
            keep = keep & rm(b, L)
        w(b, sem.vhist(a, keep, bins))
    return m.step(d, fn, _cost(m, d, ("a",)))


@builds("vcat")
def vcat(m, d):
    ra, rb = m.reader(d.vals["a"]), m.reader(d.vals["b"])
    w = m.writer(d.vals["dst"])
    axis = d.vals["axis"] + 1

    def fn(b, L):
        w(b, sem.vcat(ra(b, L), rb(b, L), axis))
    return m.step(d, fn, _cost(m, d, ("dst",)))
