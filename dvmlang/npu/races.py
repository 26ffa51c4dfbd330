"""Race detection (``Device(race_detection=True)``): which programs wrote which GM elements without atomics,
and the error when two programs wrote the same one."""

from __future__ import annotations

import numpy as np

from ..errors import RaceDetected


class RaceLog:
    """Debug aid: which programs wrote which GM elements without atomics."""

    def __init__(self):
        self.writes: dict[int, list] = {}

    def record_dma(self, b, t, desc):
        n = b.n
        base = np.broadcast_to(desc.base, (n,))
        sts = [np.broadcast_to(s, (n,)) for s in desc.strides]
        los = [np.broadcast_to(x, (n,)) for x in desc.lo]
        his = [np.broadcast_to(x, (n,)) for x in desc.hi]
        for i in range(n):
            idx = np.array([int(base[i])], dtype=np.int64)
            for s, lo, hi in zip(sts, los, his):
                r = np.arange(int(lo[i]), int(hi[i]), dtype=np.int64) * int(s[i])
                idx = (idx[:, None] + r[None, :]).reshape(-1)
            self.writes.setdefault(t, []).append((int(b.pids[i]), idx))

    def record_elements(self, b, t, off, m):
        for i in range(b.n):
            self.writes.setdefault(t, []).append((int(b.pids[i]), off[i][m[i]].reshape(-1)))

    def check(self, L):
        for t, items in self.writes.items():
            owner: dict[int, int] = {}
            for pid, idx in items:
                for e in np.unique(idx).tolist():
                    o = owner.get(e)
                    if o is not None and o != pid:
                        name = L.bc.params[t].name
                        raise RaceDetected(f"kernel `{L.name}`: programs {o} and {pid} both wrote element {e} of "
                                           f"`{name}` without atomics; the result depends on their order. Use "
                                           "dl.atomic_* or give each program its own elements")
                    owner[e] = pid
