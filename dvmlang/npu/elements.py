"""Element-wise global-memory writes: scalar stores of a batch's programs (``STG``) and atomic read-modify-writes
(``ATOMIC``), in program order where programs touch the same element."""

from __future__ import annotations

import numpy as np

from ..vm.semantics import atomic_update


def store_scalars(g: np.ndarray, idx, val, n: int) -> None:
    """One scalar store by each of ``n`` programs (in program order) at ``idx`` (one offset, or one per
    program). Where several programs store to one element, the last program's value stays: the result of
    running them one after another, as the sequential device does."""
    if not np.ndim(idx):
        g[idx] = val[-1] if np.ndim(val) else val
        return
    last = n - 1 - np.unique(idx[::-1], return_index=True)[1]  # each element's last storing program
    g[idx[last]] = np.broadcast_to(np.asarray(val), (n,))[last]


def atomic(g, op, off, m, src, cmp, want):
    idx = off[m]
    vals = src[m]
    old_full = None
    uniq = len(np.unique(idx)) == len(idx)
    if want:
        old_full = np.zeros(off.shape, dtype=g.dtype)
    if uniq:
        old = g[idx].copy()
        new = atomic_update(op, old, vals, cmp[m] if cmp is not None else None)
        g[idx] = new.astype(g.dtype, copy=False)
        if want:
            old_full[m] = old
        return old_full
    if not want and op in ("add", "max", "min", "and", "or", "xor"):
        uf = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor}[op]
        uf.at(g, idx, vals.astype(g.dtype, copy=False))
        return None
    # duplicates with old values wanted (or xchg/cas): element by element, in program order
    olds = np.empty(len(idx), dtype=g.dtype)
    cm = cmp[m] if cmp is not None else None
    for j, (i, v) in enumerate(zip(idx.tolist(), vals)):
        o = g[i]
        olds[j] = o
        g[i] = atomic_update(op, o, v, cm[j] if cm is not None else None)
    if want:
        old_full[m] = olds
    return old_full
