"""The device's L2 across launches: an LRU model of which GM tensors have bytes in L2 (``Device.l2``), what
they give a later launch (hits) and what evicting them costs (dirty bytes written back to HBM)."""

from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np


class L2Cache:
    """The device's L2 across launches: which GM tensors have bytes in it, least recently used first, how many
    bytes (what launches read or wrote of them, at most the tensor) and how many of those are dirty (written,
    not yet back in HBM). A tensor is known by its host array (the root of its views), held weakly: a new array
    is a new GM buffer and starts cold. A tensor larger than L2 streams through it and evicts everything. A
    later launch's reads of a tensor hit up to the bytes it has in L2 (the model does not track which bytes)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lines: OrderedDict = OrderedDict()  # key -> [weakref to the root array, bytes, dirty bytes]
        self.used = 0
        self._of_ref: dict = {}  # id(weakref to a root) -> the keys of its lines (what _gone drops)
        self._keys: dict = {}  # id(array) -> (weakref to it, its key, weakref to its root): known arrays of a relaunch

    def _key(self, a: np.ndarray):
        """((id of the root array, byte offset, bytes), root) of a tensor's array."""
        seen = self._keys.get(id(a))
        if seen is not None and seen[0]() is a:
            return seen[1], seen[2]()  # a holds its root: the root is alive while a is
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        off = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        key = (id(root), off, a.nbytes)
        if len(self._keys) >= 4096:
            self._keys = {k: v for k, v in self._keys.items() if v[0]() is not None}
            if len(self._keys) >= 2048:
                self._keys.clear()
        self._keys[id(a)] = (weakref.ref(a), key, weakref.ref(root))
        return key, root

    def _line(self, key):
        line = self.lines.get(key)
        if line is not None and line[0]() is None:  # the array is gone; its id may be reused by a new one
            self._drop(key)
            return None
        return line

    def _gone(self, ref) -> None:
        for key in self._of_ref.pop(id(ref), ()):
            line = self.lines.get(key)
            if line is not None and line[0] is ref:
                self._drop(key)

    def _drop(self, key) -> float:
        ref, nbytes, dirty = self.lines.pop(key)
        keys = self._of_ref.get(id(ref))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._of_ref[id(ref)]
        self.used -= nbytes
        return dirty

    def flush(self) -> None:
        """Empty L2 (a benchmark's cache flush: what was dirty is not charged to any launch)."""
        self.lines.clear()
        self._of_ref.clear()
        self.used = 0

    def settle(self, arrays: dict, alias: dict, rates) -> tuple[float, float, float]:
        """After a launch on ``arrays`` (param -> array; ``alias``: param -> alias group) whose transfers ``rates``
        counted: (bytes that crossed HBM, bytes read that hit L2, dirty bytes of earlier launches evicted to make
        room, which this launch wrote back to HBM and which the first figure includes). The launch's hits are
        what its groups had in L2 before it (``rates.resident``, for the trace's notes too); then what it read
        and wrote is most recently used (writes dirty)."""
        rates.resident, keyed = self.resident(arrays, alias)
        hbm, hits = rates.traffic()
        back = self.update(keyed, alias, rates)
        return hbm + back, hits, back

    def resident(self, arrays: dict, alias: dict) -> tuple[dict, list]:
        """(alias group -> bytes of it in L2 now, for the groups of ``arrays`` that have any; each array's
        (param, array, key, root), which ``update`` takes after the launch)."""
        out = {}
        keyed = []
        known, lines = self._keys, self.lines
        for q, a in arrays.items():
            seen = known.get(id(a))
            if seen is not None and seen[0]() is a:
                key, root = seen[1], seen[2]()  # a holds its root: the root is alive while a is
            else:
                key, root = self._key(a)
            keyed.append((q, a, key, root))
            line = lines.get(key)
            if line is not None:
                if line[0]() is None:  # the array is gone; its id may be reused by a new one
                    self._drop(key)
                    continue
                g = alias[q]
                if out.get(g, 0) < line[1]:
                    out[g] = line[1]
        return out, keyed

    def update(self, keyed: list, alias: dict, rates) -> float:
        """After a launch (``keyed`` as ``resident`` gave it): what it read and wrote is most recently used
        (writes dirty); returns the dirty bytes evicted to make room, which this launch writes back to HBM."""
        back = 0.0
        done = set()
        lines = self.lines
        group_reads, group_writes = rates.group_reads, rates.group_writes
        for q, a, key, root in keyed:
            g = alias[q]
            reads, writes = group_reads.get(g, 0.0), group_writes.get(g, 0.0)
            if not (reads or writes) or g in done:
                continue
            done.add(g)
            size = a.nbytes
            if size > self.capacity:
                back += sum(self._drop(k) for k in list(lines))
                continue
            nbytes = reads + writes
            if nbytes > size:
                nbytes = size
            if writes > size:
                writes = size
            old = self._line(key)
            if old is not None:  # known: most recently used now, with what this launch added
                if nbytes < old[1]:
                    nbytes = old[1]
                dirty = writes + old[2]
                self.used += nbytes - old[1]
                old[1], old[2] = nbytes, (nbytes if dirty > nbytes else dirty)
                lines.move_to_end(key)
                continue
            ref = weakref.ref(root, self._gone)
            self._of_ref.setdefault(id(ref), set()).add(key)
            lines[key] = [ref, nbytes, writes]
            self.used += nbytes
        while self.used > self.capacity and lines:
            back += self._drop(next(iter(lines)))
        return back
