"""The device's L2 across launches: an LRU model of which GM tensors have bytes in L2 (``Device.l2``), what
they give a later launch (hits) and what evicting them costs (dirty bytes written back to HBM)."""

from __future__ import annotations

import ctypes
import weakref

import numpy as np


class _Line:
    """What L2 holds of one tensor: ``bytes`` (at most the tensor), of which ``dirty`` (written, not yet back in
    HBM), when it was last used (``stamp``: a launch's order), under ``key`` (see ``L2Cache._entry``).
    ``ref``, a weak reference to the tensor's root array, is None once the line has left L2 (and ``bytes`` -1)."""

    __slots__ = ("ref", "key", "bytes", "dirty", "stamp")

    def __init__(self, ref, key, nbytes, dirty, stamp):
        self.ref, self.key, self.bytes, self.dirty, self.stamp = ref, key, nbytes, dirty, stamp


class _Set:
    """The arrays of a launch that found every one of them in L2 with at least the bytes the launch moves of it
    (``L2Cache._steady``): with the same alias groups (``alias``, the same dict) and none of its lines dropped from
    L2 since (checked line by line when any line left L2 after ``version``; a line in L2 only grows, up to its
    whole tensor), a launch on the same arrays finds them so again when each line holds its whole tensor, or (a
    ``partial`` set: a launch that touches part of a tensor, as a kernel reading one head of a projection's
    output) at least what that launch reads and writes of it, which ``_steady`` checks. The arrays keep their
    sizes (numpy refuses to resize in place an array that has weak references). ``lines``: (line, group, the
    array's bytes) per array in order; ``resident``: group -> bytes in L2 (for the trace's notes; of a partial
    set, made at each launch); ``refs``: weak references to the arrays, whose callbacks forget the set when one
    of them is freed (its id may then name another array)."""

    __slots__ = ("alias", "version", "limit", "lines", "resident", "refs", "partial")


class L2Cache:
    """The device's L2 across launches: which GM tensors have bytes in it, least recently used first, how many
    bytes (what launches read or wrote of them, at most the tensor) and how many of those are dirty (written,
    not yet back in HBM). A tensor is known by its host array (the root of its views), held weakly: a new array
    is a new GM buffer and starts cold. A tensor larger than L2 streams through it and evicts everything. A
    later launch's reads of a tensor hit up to the bytes it has in L2 (the model does not track which bytes).

    A relaunch on arrays it has seen finds each one's line through one lookup by the array's identity (the
    line itself is remembered with the array), and a line used again takes a new stamp instead of moving in an
    ordered dict: eviction takes the lines in stamp order, which is the order they were last used in. A relaunch
    on the same arrays as an earlier launch that found them all whole finds that launch's lines through one
    lookup of the arrays' identities (``_Set``)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lines: dict = {}  # key -> _Line, in L2 now
        self.used = 0
        self._clock = 0  # the next stamp
        self._of_ref: dict = {}  # id(weakref to a root) -> the keys of its lines (what _gone drops)
        self._known: dict = {}  # id(array) -> [weakref to it, its key, weakref to its root, its line when last seen]
        self._roots: dict = {}  # id(root array of a view) -> (weakref to it, the address of its first byte)
        self._sets: dict = {}  # the ids of a launch's arrays, in order -> _Set
        self._version = 0  # counts the lines that left L2 (what makes a _Set stale: lines only grow otherwise)

    def _entry(self, a: np.ndarray) -> list:
        """The known-array entry of a tensor's array: [weakref to it, (id of its root array, byte offset, bytes),
        weakref to the root, its line or None]. A view's root is remembered with its address (``_roots``: a
        steady call makes new views of the same pooled buffers at every call), so a new view costs the address of
        its own first byte alone."""
        ref = weakref.ref(a)
        base = a.base
        if isinstance(base, np.ndarray):
            root = base
            while isinstance(root.base, np.ndarray):
                root = root.base
            roots = self._roots
            r = roots.get(id(root))
            if r is None or r[0]() is not root:  # (an id may name a new array once the old one is freed)
                if len(roots) >= 1024:
                    roots = self._roots = {k: v for k, v in roots.items() if v[0]() is not None}
                    if len(roots) >= 512:
                        roots.clear()
                r = roots[id(root)] = (weakref.ref(root), _address(root))
            key = (id(root), _address(a) - r[1], a.nbytes)
            root_ref = r[0]
        else:
            key = (id(a), 0, a.nbytes)
            root_ref = ref
        known = self._known
        if len(known) >= 4096:
            known = self._known = {k: v for k, v in known.items() if v[0]() is not None}
            if len(known) >= 2048:
                known.clear()
        e = known[id(a)] = [ref, key, root_ref, self._line(key)]
        return e

    def _line(self, key) -> _Line | None:
        line = self.lines.get(key)
        if line is not None and line.ref() is None:  # the array is gone; its id may be reused by a new one
            self._drop(line)
            return None
        return line

    def _gone(self, ref) -> None:
        for key in self._of_ref.pop(id(ref), ()):
            line = self.lines.get(key)
            if line is not None and line.ref is ref:
                self._drop(line)

    def _drop(self, line: _Line) -> float:
        self._version += 1
        del self.lines[line.key]
        keys = self._of_ref.get(id(line.ref))
        if keys is not None:
            keys.discard(line.key)
            if not keys:
                del self._of_ref[id(line.ref)]
        line.ref = None
        self.used -= line.bytes
        line.bytes = -1  # (what L2Cache._steady tests)
        return line.dirty

    def flush(self) -> None:
        """Empty L2 (a benchmark's cache flush: what was dirty is not charged to any launch)."""
        for line in self.lines.values():
            line.ref = None
            line.bytes = -1
        self.lines.clear()
        self._of_ref.clear()
        self.used = 0
        self._version += 1

    def _steady(self, arrays: dict, alias: dict, rates, ids: tuple):
        """``settle`` when every array (their ids ``ids``) is one alias group, known, fits L2 and has its whole
        tensor in L2 already, as a ``_Set`` kept for them says (``settle`` keeps one when its first pass finds them
        so): then every read hits, writes stay in L2 and no line grows (so none is evicted); what changes is which
        lines are most recently used and how many of their bytes are dirty. None (nothing changed) otherwise."""
        s = self._sets.get(ids)
        if s is None or s.alias is not alias or s.limit != rates.l2_bytes:
            return None
        if s.version != self._version:  # a line left L2 since: the set holds if none of its own did
            for line, _, _ in s.lines:
                if line.bytes < 0:
                    return None
            s.version = self._version
        group_reads, group_writes = rates.group_reads, rates.group_writes
        resident = s.resident
        if s.partial:  # each line must hold what this launch moves of its tensor (then no line grows, all reads hit)
            resident = {}
            for line, g, size in s.lines:
                n = line.bytes
                moved = group_reads.get(g, 0.0) + group_writes.get(g, 0.0)
                if n < (moved if moved < size else size):
                    return None
                resident[g] = n
        hits = 0.0
        clock = self._clock
        for line, g, _ in s.lines:  # in the order settle updates them in
            reads = group_reads.get(g, 0.0)
            writes = group_writes.get(g, 0.0)
            if reads or writes:
                hits += reads
                if writes:
                    dirty = (writes if writes < line.bytes else line.bytes) + line.dirty
                    line.dirty = line.bytes if dirty > line.bytes else dirty
                line.stamp = clock
                clock += 1
        self._clock = clock
        rates.resident = resident
        return 0.0, hits, 0.0

    def _whole(self, arrays: dict, alias: dict, rates, ids: tuple) -> _Set | None:
        """The ``_Set`` of ``arrays`` (their ids ``ids``) when every one is known, fits L2 and has in it at least
        what this launch (``rates``) moves of it (kept for the launches on them after), else None."""
        known = self._known
        limit = rates.l2_bytes
        group_reads, group_writes = rates.group_reads, rates.group_writes
        lines = []
        resident = {}
        partial = False
        for q, a in arrays.items():
            e = known.get(id(a))
            if e is None or e[0]() is not a:
                return None
            line = e[3]
            if line is None:
                return None
            n = line.bytes  # (-1 once the line has left L2)
            size = a.nbytes
            if size > limit:
                return None
            g = alias[q]
            if n != size:
                moved = group_reads.get(g, 0.0) + group_writes.get(g, 0.0)
                if n < 0 or n < (moved if moved < size else size):
                    return None
                partial = True
            resident[g] = n
            lines.append((line, g, size))
        sets = self._sets
        if len(sets) >= 64:
            sets.clear()
        s = sets[ids] = _Set()
        s.alias, s.version, s.limit, s.lines, s.resident, s.partial = alias, self._version, limit, lines, resident, \
            partial

        def forget(_, sets=sets, ids=ids):  # an array is freed: its id may name a new one (holds no _Set: no cycle)
            sets.pop(ids, None)
        s.refs = [weakref.ref(a, forget) for a in arrays.values()]
        return s

    def settle(self, arrays: dict, alias: dict, rates) -> tuple[float, float, float]:
        """After a launch on ``arrays`` (param -> array; ``alias``: param -> alias group) whose transfers ``rates``
        counted: (bytes that crossed HBM, bytes read that hit L2, dirty bytes of earlier launches evicted to make
        room, which this launch wrote back to HBM and which the first figure includes).

        Crossing HBM: a group (its largest array) that fits L2 is read from HBM once, less what it had in L2
        before the launch (``rates.resident``, for the trace's notes too), the rest of its reads hit; one that
        does not fit is read from HBM every time. Writes stay in L2 when the profile keeps L2 across launches
        (``rates.keep_writes``) and the group fits, else they cross HBM. When it keeps L2, what the launch read
        and wrote is then the most recently used (writes dirty), in the order of ``arrays``, a group once."""
        sizes = rates.group_bytes
        whole = len(sizes) == len(arrays) and rates.keep_writes  # every group one array: perhaps a relaunch on
        if whole:  # tensors L2 holds whole
            ids = (*map(id, arrays.values()),)
            steady = self._steady(arrays, alias, rates, ids)
            if steady is not None:
                return steady
        limit = rates.l2_bytes
        group_reads, group_writes = rates.group_reads, rates.group_writes
        hbm = hits = back = 0.0
        if not rates.keep_writes:
            rates.resident = {}
            for g, reads in group_reads.items():
                size = sizes[g]
                if size > limit:
                    hbm += reads
                else:
                    cold = reads if reads < size else size
                    hbm += cold
                    hits += reads - cold
            for written in group_writes.values():
                hbm += written
            return hbm, hits, 0.0
        known = self._known
        resident = rates.resident = {}
        todo = []
        for q, a in arrays.items():  # what each group had in L2 before the launch (two groups may share a line)
            e = known.get(id(a))
            if e is None or e[0]() is not a:
                e = self._entry(a)
                whole = False  # (a new array: the same ones again are unlikely, a _Set of them not worth keeping)
            line = e[3]
            if line is None or line.ref is None:
                line = e[3] = self._line(e[1])
            g = alias[q]
            todo.append((g, a, e))
            if line is not None and resident.get(g, 0) < line.bytes:
                resident[g] = line.bytes
            if line is None:
                whole = False
        if whole and self._whole(arrays, alias, rates, ids) is not None:  # (the short way, from now on)
            return self._steady(arrays, alias, rates, ids)
        done = None if len(sizes) == len(todo) else set()  # a group of several arrays is updated once
        lines = self.lines
        capacity = self.capacity
        used, clock = self.used, self._clock
        for g, a, e in todo:
            if done is not None:
                if g in done:
                    continue
                done.add(g)
            reads = group_reads.get(g, 0.0)
            writes = group_writes.get(g, 0.0)
            if not (reads or writes):
                continue
            gsize = sizes[g]
            if gsize > limit:
                hbm += reads + writes
            elif reads:
                cold = (reads if reads < gsize else gsize) - resident.get(g, 0)
                if cold > 0:
                    hbm += cold
                    hits += reads - cold
                else:
                    hits += reads
            size = a.nbytes
            if size > capacity:  # streams through L2 and evicts everything
                self.used = used
                for old in list(lines.values()):
                    back += self._drop(old)
                used = self.used
                continue
            nbytes = reads + writes
            if nbytes > size:
                nbytes = size
            if writes > size:
                writes = size
            line = e[3]
            if line is None or line.ref is None:  # new, or another array's update made or dropped it
                line = e[3] = self._line(e[1])
            if line is not None:  # known: most recently used now, with what this launch added
                old = line.bytes
                if nbytes < old:
                    nbytes = old
                dirty = writes + line.dirty
                used += nbytes - old
                line.bytes = nbytes
                line.dirty = nbytes if dirty > nbytes else dirty
                line.stamp = clock
            else:
                ref = weakref.ref(e[2](), self._gone)
                self._of_ref.setdefault(id(ref), set()).add(e[1])
                e[3] = lines[e[1]] = _Line(ref, e[1], nbytes, writes, clock)
                used += nbytes
            clock += 1
        self.used, self._clock = used, clock
        if used > capacity and lines:
            for line in sorted(lines.values(), key=_stamp):  # least recently used first
                back += self._drop(line)
                if self.used <= capacity:
                    break
        return hbm + back, hits, back


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s first byte: through the buffer protocol for a writable contiguous array (a few times
    faster than building ``__array_interface__``), else from ``__array_interface__``."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _stamp(line: _Line) -> int:
    return line.stamp
