"""Cube-unit step builder: MMAD, L0C (+)= L0A @ L0B, accumulating in L0C's dtype; 3-D tiles are a batch of
matrix products (B, M, K) @ (B, K, N) -> (B, M, N)."""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ..dma import shared_windows
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

    def fn(b, L):
        a, bt = ra(b, L), rb(b, L)
        prod = _grid_product(a, bt, acc)
        if prod is None:
            prod = np.matmul(_widened(a, acc), _widened(bt, acc))
        if not init:
            c = rd(b, L)
            if c.shape == prod.shape:
                np.add(prod, c, out=prod)
            else:
                prod = c + prod
        w(b, prod.astype(acc, copy=False))
    return m.step(d, fn, cost, macs=B * M * K * N)


def _widened(x: np.ndarray, acc) -> np.ndarray:
    """An operand in the accumulator's dtype. A tile the programs' DMA gathered from a few shared windows
    (the A tiles of a row of programs, the B tiles of a column) is converted window by window and gathered
    again: the same array, without converting each window once per program."""
    if x.dtype == acc:
        return x
    s = shared_windows(x)
    if s is not None:
        windows, inverse = s
        return windows.astype(acc)[inverse]
    return x.astype(acc)


def _grid_product(a: np.ndarray, bt: np.ndarray, acc):
    """The programs' products when the A tiles come from ``na`` windows and the B tiles from ``nb``, one
    program per (A window, B window) pair in grid order (program ``p`` takes A ``p % na`` and B ``p // na``,
    or A ``p // nb`` and B ``p % nb``): numpy's matmul broadcast over the two window axes, which multiplies
    each pair of matrices exactly as the stacked product does, without gathering and widening one copy of
    each window per program. None for any other layout."""
    if a.dtype == acc and bt.dtype == acc or a.ndim != 3 or bt.ndim != 3:
        return None
    sa, sb = shared_windows(a), shared_windows(bt)
    if sa is None or sb is None:
        return None
    (wa, ia), (wb, ib) = sa, sb
    na, nb, n = len(wa), len(wb), len(ia)
    if na * nb != n or len(ib) != n:
        return None
    p = np.arange(n)
    if np.array_equal(ia, p % na) and np.array_equal(ib, p // na):
        out = np.matmul(wa.astype(acc, copy=False)[None], wb.astype(acc, copy=False)[:, None])  # (nb, na, M, N)
    elif np.array_equal(ia, p // nb) and np.array_equal(ib, p % nb):
        out = np.matmul(wa.astype(acc, copy=False)[:, None], wb.astype(acc, copy=False)[None])  # (na, nb, M, N)
    else:
        return None
    return out.reshape((n,) + out.shape[2:])
