"""Cube-unit step builder: MMAD, L0C (+)= L0A @ L0B, accumulating in L0C's dtype; 3-D tiles are a batch of
matrix products (B, M, K) @ (B, K, N) -> (B, M, N)."""

from __future__ import annotations

import sys
import threading

import numpy as np

from ... import dtypes as dt
from .. import host
from ...vm import semantics as sem
from ..dma import Windows, pending_windows
from .registry import builds
from .vector import fill


@builds("l0c_fill")
def l0c_fill(m, d):
    return m.step(d, fill(m, d, "l0c"), m.formula(d)())


@builds("mmad")
def mmad(m, d):
    spaces = d.ins.spaces
    ra = m.reader(d.vals["a"], spaces["a"])
    rb = m.reader(d.vals["b"], spaces["b"])
    rd = m.reader(d.vals["dst"], spaces["dst"])
    w = m.writer(d.vals["dst"], spaces["dst"])
    init = d.vals["init"]
    _, ad, ashape = m.layout(d.vals["a"])
    _, _, bshape = m.layout(d.vals["b"])
    _, cd, _ = m.layout(d.vals["dst"])
    acc = cd.np
    M, K = ashape[-2:]
    N = bshape[-1]
    B = ashape[0] if len(ashape) == 3 else 1
    cost = m.formula(d)(M=M, N=N, K=K, wide=ad in (dt.float32, dt.float64), B=B)

    macs = B * M * K * N

    def fn(b, L):
        a, bt = _operand(ra, b, L), _operand(rb, b, L)
        c = None if init else rd(b, L)
        threads = host.blas_one_thread(b.n * macs)
        try:
            prod = _grid_product(a, bt, acc, c)
            if prod is None:  # (shared windows are widened window by window, then gathered: the same arrays)
                prod = sem.mmad(_widened(a, acc, ra, b, L), _widened(bt, acc, rb, b, L), c, acc)
        finally:
            host.blas_restore(threads)
        w(b, prod.astype(acc, copy=False))
    return m.step(d, fn, cost, macs=macs)


def _operand(read, b, L):
    """An operand tile: the ``Windows`` it is a pending gather of (a DMA read the programs' tiles from a few
    shared windows, in the tile's dtype and shape), else its array."""
    src, _ = read.source(b, L)
    if src.__class__ is not tuple:
        return src
    slot = pending_windows(src)
    return slot.lazy[0] if slot is not None else read(b, L)


def _widened(x, acc, read, b, L) -> np.ndarray:
    """An operand in the accumulator's dtype. Shared windows (the A tiles of a row of programs, the B tiles
    of a column) are converted window by window and then gathered: the same array as converting each
    program's tile."""
    if x.__class__ is Windows:
        return x.windows.astype(acc, copy=False)[x.inverse] if x.windows.dtype != acc else read(b, L)
    return x.astype(acc, copy=False)


MERGED_K = 256  # up to this depth, a column of programs' products is one matrix product (see _grid_product)


def _grid_product(a, bt, acc, c=None):
    """The programs' products (plus the accumulator ``c``, when given) when the A tiles come from ``na`` windows
    and the B tiles from ``nb``, one program per (A window, B window) pair in grid order (program ``p`` takes A
    ``p % na`` and B ``p // na``, or A ``p // nb`` and B ``p % nb``), without gathering one copy of each window per
    program: numpy's matmul broadcast over the window axes, which multiplies each pair as the stacked product
    does. None for any other operands.

    In the first order the programs of one B window are consecutive, and their products are one product, the A
    windows stacked (na * M, K) by that B window: each element is the same dot product of length K, which BLAS
    computes alike in the taller product (nb calls instead of na * nb; tests/test_npu.py checks the bits
    against the stacked product), for tiles of at least 16 by 16 and K up to ``MERGED_K`` (past it a library
    may split K differently in different shapes)."""
    if a.__class__ is not Windows or bt.__class__ is not Windows:
        return None
    wa, ia, wb, ib = a.windows, a.inverse, bt.windows, bt.inverse
    na, nb, n = len(wa), len(wb), len(ia)
    if wa.ndim != 3 or wb.ndim != 3 or na * nb != n or len(ib) != n:
        return None
    p = np.arange(n)
    wa, wb = wa.astype(acc, copy=False), wb.astype(acc, copy=False)
    M, K = wa.shape[1:]
    N = wb.shape[2]
    if np.array_equal(ia, p % na) and np.array_equal(ib, p // na):
        if M >= 16 and N >= 16 and K <= MERGED_K:  # (nb, na * M, N): program p // na, rows of p % na
            out = np.matmul(wa.reshape(1, na * M, K), wb, out=_recycled((nb, na * M, N), wa.dtype))
        else:
            out = np.matmul(wa[None], wb[:, None], out=_recycled((nb, na, M, N), wa.dtype))
    elif np.array_equal(ia, p // nb) and np.array_equal(ib, p % nb):
        out = np.matmul(wa[:, None], wb[None], out=_recycled((na, nb, M, N), wa.dtype))
    else:
        return None
    out = out.reshape((n, M, N))
    if c is not None:  # (on this thread: BLAS's own threads may still be spinning on the others)
        out = sem.accumulate(out, c)
    return out


_RECYCLED = threading.local()
_POOLED = 1 << 20, 16 << 20  # the sizes of array recycled (at most 4 per thread: 64 MiB kept at most)


def _refs(pool: list, i: int) -> int:
    return sys.getrefcount(pool[i])


def _exact_counts() -> int | None:
    """What ``_refs`` says of an array only its pool holds, when this interpreter counts references exactly
    (one more once something else holds it); else None, and nothing is recycled."""
    pool = [np.empty(0)]
    free = _refs(pool, 0)
    held = pool[0]
    ok = _refs(pool, 0) == free + 1
    del held
    return free if ok and _refs(pool, 0) == free else None


_FREE = _exact_counts()


def _recycled(shape: tuple, dtype) -> np.ndarray:
    """A new C-contiguous array of ``shape`` and ``dtype`` for a product (its values are all written): one of the
    few this thread made before, once nothing but this pool holds it (no tile, view or pending value: a view
    holds its base), else a new one. The products of a K loop take turns in two arrays instead of a fresh
    multi-megabyte array per step, whose pages the system would map anew each time (most of a matmul's
    system time)."""
    if _FREE is None:
        return np.empty(shape, dtype)
    pool = getattr(_RECYCLED, "arrays", None)
    if pool is None:
        pool = _RECYCLED.arrays = []
    for i in range(len(pool)):
        a = pool[i]
        if a.shape == shape and a.dtype == dtype:
            del a
            if _refs(pool, i) == _FREE:
                return pool[i]
    a = np.empty(shape, dtype)
    if _POOLED[0] <= a.nbytes <= _POOLED[1]:
        pool.append(a)
        if len(pool) > 4:
            del pool[0]
    return a
