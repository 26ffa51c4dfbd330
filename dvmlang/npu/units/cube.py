"""Cube-unit step builder: MMAD, L0C (+)= L0A @ L0B, accumulating in L0C's dtype; 3-D tiles are a batch of
matrix products (B, M, K) @ (B, K, N) -> (B, M, N)."""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
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
        prod = np.matmul(ra(b, L).astype(acc, copy=False), rb(b, L).astype(acc, copy=False))
        if not init:
            c = rd(b, L)
            if c.shape == prod.shape:
                np.add(prod, c, out=prod)
            else:
                prod = c + prod
        w(b, prod.astype(acc, copy=False))
    return m.step(d, fn, cost, macs=B * M * K * N)
