"""A batch's boxes as views of a tensor: one box for every program at bases that step uniformly (``_Uniform``),
those boxes as one strided view (``_boxes``, ``_strided``), whether programs' boxes overlap, and the padding a
masked read starts from. What ``dma`` reads and writes through; nothing here reads a descriptor."""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt


def _progression(base: np.ndarray, n: int):
    """(first, step) if ``base`` (per program) is an arithmetic progression, else None."""
    if base.ndim == 0:
        return int(base), 0
    if n == 1:
        return int(base[0]), 0
    d = np.diff(base)
    if d.size and (d == d[0]).all():
        return int(base[0]), int(d[0])
    return None


class _Uniform:
    """A descriptor whose strides and box are the same for every program of the batch: strides ``st``, box
    ``lo``/``hi`` and extents ``ext``, ``prog`` the bases' (first, step) when they step uniformly, and what
    the readers and writers ask of it, worked out once: ``empty``, ``box`` (the slices), ``offset`` (the
    box's first element from the base) and ``full`` (whether the box is the whole tile of shape ``ext``
    starting at 0)."""

    __slots__ = ("st", "lo", "hi", "ext", "prog", "empty", "box", "offset", "origin", "plan")

    def __init__(self, st, lo, hi, prog):
        self.st, self.lo, self.hi, self.prog = tuple(st), lo, hi, prog
        self.plan = None  # _boxes's view of the programs' boxes: (rows, start, shape, strides, contiguous size)
        ext, box, offset, empty, origin = [], [], 0, False, True  # (one pass over the dims: a new descriptor's)
        for s_, l, h in zip(self.st, lo, hi):
            e = h - l
            ext.append(e)
            box.append(slice(l, h))
            offset += s_ * l
            empty = empty or e == 0
            origin = origin and l == 0
        self.ext, self.box, self.offset, self.empty, self.origin = tuple(ext), tuple(box), offset, empty, origin

    def full(self, shape) -> bool:
        """Whether the box is the whole tile: from 0, with the tile's extents."""
        return self.origin and self.ext == shape


def _injective(dims) -> bool:
    """Whether an affine map with these (stride, extent) dims sends no two index tuples to the same element: each
    stride, smallest first, steps past everything the smaller ones reach (a sufficient condition)."""
    reach = 0
    for s, e in sorted((abs(s), e) for s, e in dims if e > 1):
        if s <= reach:
            return False
        reach += s * (e - 1)
    return True


def _overlapping(step, st, ext, n) -> bool:
    """Whether programs of a batch write overlapping elements (then write them in program order)."""
    if n <= 1:
        return False
    span = sum(abs(s) * (e - 1) for s, e in zip(st, ext)) + 1
    if step == 0:
        return True
    if abs(step) >= span:
        return False
    dense = sorted(zip(st, ext), key=lambda x: abs(x[0]))
    run = 1
    for s, e in dense:
        if abs(s) != run:
            return True
        run *= e
    return abs(step) < run


def _boxes(g: np.ndarray, u: _Uniform, rows: int, writeable=False):
    """The boxes of ``rows`` programs of a uniform descriptor ``u`` whose bases step uniformly, as one view of
    ``g`` (``_strided``), its shape and strides worked out once per descriptor."""
    plan = u.plan
    if plan is None or plan[0] != rows:
        first, step = u.prog
        shape, strides = (rows,) + u.ext, (step,) + u.st
        plan = u.plan = (rows, first + u.offset, shape, strides, _contiguous(shape, strides))
    _, start, shape, strides, size = plan
    if size is not None and 0 <= start and start + size <= g.size:
        return g[start:start + size].reshape(shape)
    return _strided(g, start, shape, strides, writeable)


def _contiguous(shape, strides) -> int | None:
    """The elements of a view of this shape and these strides (in elements) when it is row-major contiguous,
    else None."""
    expect = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != expect:
            return None
        expect *= n
    return expect


def _strided(g: np.ndarray, start: int, shape, strides, writeable=False):
    isz = g.itemsize
    # a row-major contiguous window is a plain slice (numpy's fastest path)
    expect = _contiguous(shape, strides)
    if expect is not None and 0 <= start and start + expect <= g.size:
        return g[start:start + expect].reshape(shape)
    strides = tuple(s * isz for s in strides)
    if 0 <= start < g.size:
        try:  # (the same view as as_strided's, made by numpy's constructor: a few times faster; it checks the bounds)
            v = np.ndarray(shape, g.dtype, g, start * isz, strides)
        except (TypeError, ValueError, BufferError):
            pass
        else:
            if not writeable:
                v.flags.writeable = False
            return v
    base = g[start:] if start < g.size else g[:0]
    if base.size == 0:
        base = g
    return dt.as_strided(base, shape=shape, strides=strides, writeable=writeable)


def _padded(rows, shape, npdt, pad) -> np.ndarray:
    """``_pad_array(...).copy()``: a new array of the padding, written into (a masked read's box goes in it).
    (One value for every program: filled, without ``broadcast_to``'s few microseconds.)"""
    p = np.asarray(pad)
    if p.ndim:
        return _pad_array(rows, shape, npdt, pad).copy()
    out = np.empty((rows,) + tuple(shape), dtype=npdt)
    out[...] = _pad_value(p, npdt)
    return out


def _pad_value(p: np.ndarray, npdt):
    """One padding value (a 0-d array) in the tile's dtype: a bool tile's is whether it is non-zero."""
    return np.asarray(p, dtype=npdt) if npdt != np.bool_ else p != 0


def _pad_array(rows, shape, npdt, pad) -> np.ndarray:
    p = np.asarray(pad)
    if p.ndim == 0:
        return np.broadcast_to(_pad_value(p, npdt), (rows,) + tuple(shape))
    p = p.astype(npdt).reshape((p.shape[0],) + (1,) * len(shape))
    return np.broadcast_to(p, (p.shape[0],) + tuple(shape))
