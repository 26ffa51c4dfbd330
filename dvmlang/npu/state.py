"""The state of programs on a core: batches of programs in lockstep, the tiles in their on-chip memory, and
the lazy evaluation of elementwise results.

On-chip memory is a map from address to ``Slot`` per memory space. A slot's array has a leading program
axis (one row when every program holds the same value); it may be a view of global memory (a load that
nobody has modified yet), or an elementwise computation not yet evaluated. Reads of bytes that nothing
wrote yield poison (NaN for floats, all-ones for integers).
"""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from ..errors import UninitializedRead
from ..vm import isa
from . import host

MAX_PENDING_DEPTH = 64  # longer chains of pending elementwise computations are evaluated eagerly
CHUNK_BYTES = 512 << 10  # pending computations are evaluated in row chunks of about this size (cache-sized)


class Slot:
    """A tile in on-chip memory: an array (rows, *shape), or an elementwise computation not yet evaluated.

    Evaluation is deferred so that a chain of elementwise instructions is computed in cache-sized chunks
    of programs, and a result that is only stored is computed straight into global memory (numerically
    identical either way: the same numpy operations on the same values). ``gm`` names the alias groups of
    tensors the array views (or the pending computation reads), which must be materialised before those
    tensors change."""

    __slots__ = ("_arr", "nbytes", "gm", "lazy", "dtype", "rows", "shape", "keep", "filled", "depth")

    def __init__(self, arr, nbytes, gm=None, lazy=None, dtype=None, rows=1, shape=None, keep=False, depth=0):
        self.keep = keep  # read again later: keep the value computed during the first chunked evaluation
        self.filled = 0
        self.depth = depth  # longest chain of pending computations below this one
        self._arr = arr
        self.nbytes = nbytes
        self.gm = gm
        self.lazy = lazy  # (fn, args, finish) with args arrays or (Slot, shape) pairs
        self.dtype = arr.dtype if arr is not None else dtype
        self.rows = arr.shape[0] if arr is not None else rows
        self.shape = arr.shape[1:] if arr is not None else shape

    @property
    def arr(self) -> np.ndarray:
        if self.lazy is not None:
            self._arr = evaluate(self)
            self.lazy = None
        return self._arr

    @arr.setter
    def arr(self, value):
        self._arr = value
        self.lazy = None


def arg_value(a):
    """An argument of a pending computation (an array, or a (Slot, shape) pair) as an array."""
    if isinstance(a, tuple):
        s, shape = a
        v = s.arr
        return v if v.shape[1:] == shape else v.reshape((v.shape[0],) + shape)
    return a


def rows_of(a) -> int:
    return a[0].rows if isinstance(a, tuple) else a.shape[0]


def eval_rows(node, r0: int, r1: int, memo: dict):
    """The rows [r0, r1) of a pending computation (arrays with one row broadcast to every program)."""
    if isinstance(node, tuple):
        s, shape = node
        v = eval_rows(s, r0, r1, memo)
        return v if v.shape[1:] == shape else v.reshape((v.shape[0],) + shape)
    if isinstance(node, np.ndarray):
        return node if node.shape[0] == 1 else node[r0:r1]
    if node.lazy is None:
        v = node._arr
        return v if v.shape[0] == 1 else v[r0:r1]
    key = id(node)
    v = memo.get(key)
    if v is None:
        fn, args, finish = node.lazy
        vals = [eval_rows(a, r0, r1, memo) for a in args]
        if node.keep and node.rows > 1:
            # write the chunk through to a full array, so later readers do not recompute it
            if node._arr is None:
                node._arr = np.empty((node.rows,) + tuple(node.shape), dtype=node.dtype)
                node.filled = 0
            dst = node._arr[r0:r1]
            if _fits_out(fn, vals, dst):
                v = fn(*vals, out=dst)
            else:
                v = finish(fn(*vals))
                dst[...] = v
            memo[key] = v
            if r0 == node.filled:
                node.filled = r1
                if r1 == node.rows:
                    node.lazy = None
        else:
            v = finish(fn(*vals))
            memo[key] = v
    return v


def _fits_out(fn, vals, dst: np.ndarray) -> bool:
    """Whether ufunc ``fn`` on ``vals`` produces exactly ``dst``'s dtype and shape (so it may write there)."""
    if not isinstance(fn, np.ufunc) or fn.nout != 1 or len(vals) != fn.nin:
        return False
    try:
        dts = fn.resolve_dtypes(tuple(v.dtype for v in vals) + (None,))
        return dts[-1] == dst.dtype and np.broadcast_shapes(*(v.shape for v in vals)) == dst.shape
    except (TypeError, ValueError):
        return False


def chunks(slot: Slot):
    """Row ranges that keep one chunk of the computation cache-sized (one range when there is no pending
    intermediate to keep in cache)."""
    n = slot.rows
    if not any(isinstance(a, tuple) and a[0].lazy is not None for a in slot.lazy[1]):
        return [(0, n)]
    row_bytes = max(1, slot.nbytes)
    step = max(1, CHUNK_BYTES // row_bytes)
    return [(r, min(n, r + step)) for r in range(0, n, step)]


def evaluate(slot: Slot) -> np.ndarray:
    """Evaluate a pending computation, chunk by chunk when it has pending inputs to keep in cache."""
    fn, args, finish = slot.lazy
    parts = chunks(slot)
    nbytes = slot.rows * slot.nbytes
    if len(parts) == 1 and (fn.__class__ is not np.ufunc or not host.worth(slot.rows, nbytes)):
        # (one call: a gather of windows is one copy; cut into ranges it would be one per range)
        return finish(fn(*[eval_rows(a, 0, slot.rows, {}) for a in args]))
    out = np.empty((slot.rows,) + tuple(slot.shape), dtype=slot.dtype)

    def part(r0, r1):
        out[r0:r1] = finish(fn(*[eval_rows(a, r0, r1, {}) for a in args]))
    each_rows(slot, part, parts, nbytes)
    return out


def each_rows(slot: Slot, fn, parts: list, nbytes: int) -> None:
    """``host.each_range(fn, parts, nbytes)`` for ranges of rows of the pending computation ``slot``: the
    results it keeps (``Slot.keep``) get their full arrays first, so ranges running side by side write into one
    array, and once every row is written they are no longer pending."""
    if not host.worth(slot.rows, nbytes):  # (on this thread, range by range: what host.each_range does then)
        for r0, r1 in parts:
            fn(r0, r1)
        return
    kept = _kept(slot, [])
    for k in kept:
        if k._arr is None:
            k._arr = np.empty((k.rows,) + tuple(k.shape), dtype=k.dtype)
            k.filled = 0
    host.each_range(fn, parts, nbytes)
    for k in kept:
        k.filled = k.rows
        k.lazy = None


def _kept(slot: Slot, out: list) -> list:
    """The pending results below ``slot`` kept once computed (``keep``, one row per program), each once."""
    for a in slot.lazy[1]:
        if a.__class__ is tuple:
            s = a[0]
            if s.lazy is not None and all(s is not k for k in out):
                if s.keep and s.rows > 1:
                    out.append(s)
                _kept(s, out)
    return out


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


_N_PIPES = isa.N_PIPES
FIRST_PID = _read_only(np.zeros(1, np.int64))  # the batch of program 0 alone (a grid of one), shared
_FIRST_COORDS = tuple(_read_only(np.zeros(1, np.int32)) for _ in range(3))


class Batch:
    """The state of a group of programs executing in lockstep: registers, on-chip memory, and each
    program's pipe clock (issue time, when each pipe frees, events set) and GM traffic."""

    __slots__ = ("pids", "coords", "regs", "mem", "n", "count", "t_issue", "pipe_free", "pipe_first", "pipe_busy",
                 "flags", "print_seq", "bytes_read", "bytes_written", "last_bytes", "done", "port_free", "scalar",
                 "count_off")

    def __init__(self, pids: np.ndarray, grid, zero_regs: tuple, uniform: bool = False, coords=None):
        self.pids = pids
        self.n = n = len(pids)
        self.regs = list(zero_regs)  # steps replace a register's value, never write into it: zeros can be shared
        self.mem = defaultdict(dict)  # space -> addr -> Slot; a space's dict is made when first used
        self.count = 0  # instructions each program ran (the most any of them ran, with count_off)
        self.count_off = None  # after parts with different counts merged: each program's count - count (<= 0)
        self.flags: dict = {}
        self.print_seq = 0  # each program's device prints so far: one number while they all printed alike
        self.last_bytes = 0
        g0, g1 = grid[0], grid[1]
        # a batch of one program keeps its pipe clock, GM byte counts (what its DMA steps count in), latest
        # transfer's completion and GM port's availability in Python numbers (timing.advance_one: the same
        # arithmetic); a larger batch in arrays, one entry per program. ``uniform``: a larger batch keeps one
        # pipe clock in Python numbers for all its programs (``scalar``) while their steps cost alike (its
        # programs start together and run the same steps in lockstep: their clocks are equal), and spreads
        # it into arrays (``spread``) at the first step whose cost differs between them, or at a split
        self.scalar = n == 1 or uniform
        if n == 1:
            p = int(pids[0])
            self.coords = _FIRST_COORDS if p == 0 else (  # (program 0's shared, read-only)
                np.array([p % g0], np.int32), np.array([(p // g0) % g1], np.int32),
                np.array([p // (g0 * g1)], np.int32))
            self.bytes_read = self.bytes_written = 0.0
        else:
            self.coords = coords if coords is not None else _grid_coords(pids, g0, g1)
            self.bytes_read = np.zeros(n)
            self.bytes_written = np.zeros(n)
        if self.scalar:
            _one_clock(self)
        else:
            self.t_issue = np.zeros(n)
            self.pipe_free = np.zeros((_N_PIPES, n))
            self.pipe_first = np.full((_N_PIPES, n), np.inf)
            self.pipe_busy = np.zeros((_N_PIPES, n))
            self.done = np.zeros(n)  # completion of the latest transfer (results land after the pipe frees)
            self.port_free = np.zeros(n)  # when the core's GM port can take the next transfer

    @classmethod
    def first(cls, zero_regs: tuple) -> "Batch":
        """``Batch(FIRST_PID, grid, zero_regs)``: program 0 alone (a grid of one), made field by field."""
        return cls.resumed((zero_regs, 0, 0, 0, 0.0, 0.0) + _START_CLOCK)

    def state(self) -> tuple:
        """A one-program batch's registers, counts and pipe clock, for ``Batch.resumed`` (its on-chip memory
        and events untouched: what ``Machine.prefix``'s steps leave)."""
        assert self.n == 1 and not self.mem and not self.flags
        return (tuple(self.regs), self.count, self.print_seq, self.last_bytes, self.bytes_read, self.bytes_written,
                self.t_issue, self.done, self.port_free, tuple(self.pipe_free), tuple(self.pipe_first),
                tuple(self.pipe_busy))

    @classmethod
    def resumed(cls, state: tuple) -> "Batch":
        """Program 0 alone in ``state`` (``Batch.state``: of one that ran before, or ``first``'s start)."""
        b = cls.__new__(cls)
        b.pids, b.n, b.scalar, b.coords, b.count_off = FIRST_PID, 1, True, _FIRST_COORDS, None
        b.mem = defaultdict(dict)
        b.flags = {}
        b.regs, b.pipe_free, b.pipe_first = [], [], []
        return b.resume(state)

    def resume(self, state: tuple) -> "Batch":
        """This batch, of program 0 alone (made by ``resumed``, or parked after a launch: ``park``), put in
        ``state`` in place, its lists filled but for ``pipe_busy``, a new one (a finished launch's record holds
        the old one: ``Device._one``)."""
        regs, self.count, self.print_seq, self.last_bytes, self.bytes_read, self.bytes_written, self.t_issue, \
            self.done, self.port_free, free, first, busy = state
        self.regs[:] = regs
        self.pipe_free[:] = free
        self.pipe_first[:] = first
        self.pipe_busy = list(busy)
        return self

    def park(self) -> None:
        """Drop a finished one-program batch's on-chip memory and events, to keep it for ``resume``."""
        self.mem.clear()
        self.flags.clear()

    def spread(self) -> None:
        """A larger batch's one pipe clock (``uniform``) as one per program, in arrays: its programs' steps are
        about to cost differently, or the batch to split."""
        assert self.scalar and self.n > 1
        n = self.n
        col = [np.repeat(np.array(x, dtype=np.float64).reshape(_N_PIPES, 1), n, axis=1) for x in
               (self.pipe_free, self.pipe_first, self.pipe_busy)]
        self.pipe_free, self.pipe_first, self.pipe_busy = col
        self.t_issue, self.done, self.port_free = np.full(n, self.t_issue), np.full(n, self.done), \
            np.full(n, self.port_free)
        self.flags = {k: np.full(n, v) for k, v in self.flags.items()}
        self.scalar = False

    def clock(self):
        """(pipe_free, pipe_first, pipe_busy) as (pipes, n) arrays and (t_issue, done) as (n,) arrays (one
        column and one element for a batch's one clock, ``scalar``)."""
        if not self.scalar:
            return self.pipe_free, self.pipe_first, self.pipe_busy, self.t_issue, self.done
        col = [np.array(x, dtype=np.float64).reshape(_N_PIPES, 1) for x in
               (self.pipe_free, self.pipe_first, self.pipe_busy)]
        return col[0], col[1], col[2], np.array([self.t_issue]), np.array([self.done])

    def subset(self, mask: np.ndarray) -> "Batch":
        assert self.n > 1, "a one-program batch does not split"
        if self.scalar:
            self.spread()
        b = Batch.__new__(Batch)
        b.scalar = False
        b.pids = self.pids[mask]
        b.n = len(b.pids)
        b.coords = tuple(c[mask] for c in self.coords)
        b.regs = [r[mask] if np.ndim(r) else r for r in self.regs]
        b.mem = defaultdict(dict)
        for sp, d in self.mem.items():
            nd = {}
            for a, s in d.items():
                arr = s.arr[mask] if s.arr.shape[0] == self.n and self.n != 1 else s.arr
                nd[a] = Slot(arr, s.nbytes, s.gm)
            b.mem[sp] = nd
        b.count, b.count_off = self.count, None
        if self.count_off is not None:
            off = self.count_off[mask]
            top = int(off.max())
            b.count += top
            if (off != top).any():
                b.count_off = off - top
        b.t_issue = self.t_issue[mask]
        b.pipe_free = self.pipe_free[:, mask]
        b.pipe_first = self.pipe_first[:, mask]
        b.pipe_busy = self.pipe_busy[:, mask]
        b.flags = {k: (v[mask] if np.ndim(v) else v) for k, v in self.flags.items()}
        b.print_seq = self.print_seq[mask] if np.ndim(self.print_seq) else self.print_seq
        b.bytes_read = self.bytes_read[mask]
        b.bytes_written = self.bytes_written[mask]
        b.last_bytes = 0
        b.done = self.done[mask]
        b.port_free = self.port_free[mask]
        return b

    @staticmethod
    def merged(a: "Batch", b: "Batch") -> "Batch | None":
        """Parts ``a`` and ``b`` of a split batch, now at the same step, as one batch (their programs in id
        order), or None when they do not hold the same tiles and events (then they run on as they are). Every
        program keeps its own registers, tiles, clock and counts: what each computes is what it would have
        computed alone."""
        if a.mem.keys() != b.mem.keys() or a.flags.keys() != b.flags.keys():
            return None
        na, nb = a.n, b.n
        tiles = []
        for sp, da in a.mem.items():
            db = b.mem[sp]
            if da.keys() != db.keys():
                return None
            for k, sa in da.items():
                sb = db[k]
                if sa.nbytes != sb.nbytes:
                    return None
                xa, xb = sa.arr, sb.arr
                if xa.dtype != xb.dtype or xa.shape[1:] != xb.shape[1:] or xa.shape[0] not in (1, na) or \
                        xb.shape[0] not in (1, nb):
                    return None
                tiles.append((sp, k, sa, xa, xb))
        pids = np.concatenate((a.pids, b.pids))
        order = None if a.pids[-1] < b.pids[0] else np.argsort(pids, kind="stable")

        def join(x, y):
            """Per-program values of both parts (one value, or one row each of their programs, or one row for all
            of a part's programs), in program order."""
            x = np.broadcast_to(x, (na,) + np.shape(x)[1:]) if np.ndim(x) else np.full(na, x)
            y = np.broadcast_to(y, (nb,) + np.shape(y)[1:]) if np.ndim(y) else np.full(nb, y)
            v = np.concatenate((x, y))
            return v if order is None else v[order]

        m = Batch.__new__(Batch)
        m.scalar = False
        m.pids = pids if order is None else pids[order]
        m.n = na + nb
        m.coords = tuple(join(x, y) for x, y in zip(a.coords, b.coords))
        regs = []
        for x, y in zip(a.regs, b.regs):
            if np.ndim(x) == 0 and np.ndim(y) == 0 and (x is y or (np.asarray(x).dtype == np.asarray(y).dtype and
                                                                  np.asarray(x).tobytes() == np.asarray(y).tobytes())):
                regs.append(x)  # (the same value for every program of both)
            else:
                regs.append(join(np.asarray(x), np.asarray(y)))
        m.regs = regs
        m.mem = defaultdict(dict)
        for sp, k, sa, xa, xb in tiles:
            if xa is xb and xa.shape[0] == 1:
                m.mem[sp][k] = Slot(xa, sa.nbytes, sa.gm)  # (one tile both parts share)
            else:
                m.mem[sp][k] = Slot(join(xa, xb), sa.nbytes)
        count = max(a.count, b.count)
        offs = [np.full(p.n, p.count - count) if p.count_off is None else p.count_off + (p.count - count)
                for p in (a, b)]
        m.count = count
        off = join(offs[0], offs[1])
        m.count_off = off if (off != 0).any() else None
        m.t_issue, m.done, m.port_free = (join(getattr(a, f), getattr(b, f)) for f in ("t_issue", "done",
                                                                                         "port_free"))
        m.pipe_free, m.pipe_first, m.pipe_busy = (join(getattr(a, f).T, getattr(b, f).T).T.copy()
                                                  for f in ("pipe_free", "pipe_first", "pipe_busy"))
        m.flags = {k: join(a.flags[k], b.flags[k]) for k in a.flags}
        m.print_seq = a.print_seq if np.ndim(a.print_seq) == 0 and np.ndim(b.print_seq) == 0 and \
            a.print_seq == b.print_seq else join(a.print_seq, b.print_seq)
        m.bytes_read = join(a.bytes_read, b.bytes_read)
        m.bytes_written = join(a.bytes_written, b.bytes_written)
        m.last_bytes = 0
        return m


# a pipe clock at its start: t_issue, done, port_free, and per pipe when it frees, first starts, is busy
_START_CLOCK = (0.0, 0.0, 0.0, (0.0,) * _N_PIPES, (np.inf,) * _N_PIPES, (0.0,) * _N_PIPES)


@functools.lru_cache(maxsize=16)
def programs(lo: int, hi: int, g0: int, g1: int) -> tuple:
    """(the program ids lo..hi-1, their grid coordinates for a grid (g0, g1, ...)) as read-only arrays, made once
    for the batches of every launch that runs these programs (steps replace a register's value, never write into
    it, as ``FIRST_PID`` is shared)."""
    pids = np.arange(lo, hi, dtype=np.int64)
    coords = _grid_coords(pids, g0, g1)
    for a in (pids,) + coords:
        a.flags.writeable = False
    return pids, coords


def _grid_coords(pids: np.ndarray, g0: int, g1: int) -> tuple:
    """The grid coordinates (int32, one array per axis) of programs ``pids`` in a grid (g0, g1, ...)."""
    return (pids % g0).astype(np.int32), ((pids // g0) % g1).astype(np.int32), (pids // (g0 * g1)).astype(np.int32)


def _one_clock(b: Batch) -> None:
    """Batch ``b``'s pipe clock at its start, in Python numbers: one clock for all its programs (``scalar``)."""
    b.t_issue, b.done, b.port_free, free, first, busy = _START_CLOCK
    b.pipe_free, b.pipe_first, b.pipe_busy = list(free), list(first), list(busy)


def prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def poison_value(npdt):
    """The value poisoned memory reads as: all-ones bytes (NaN for floats, -1 for signed integers)."""
    if npdt == np.bool_:
        return True
    return np.frombuffer(b"\xff" * np.dtype(npdt).itemsize, dtype=npdt)[0]


def as_bytes(arr: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(arr)
    return a.reshape(a.shape[0], -1).view(np.uint8) if a.dtype != np.bool_ else a.reshape(a.shape[0], -1).view(np.uint8)


def read_overlapping(b: Batch, L, space: str, addr: int, nbytes: int, npdt, shape) -> np.ndarray:
    """A tile read that does not match the slot at its address: its bytes gathered from every slot they
    overlap, poison where nothing wrote them (reported in debug mode)."""
    d = b.mem[space]
    rows = 1
    parts = []
    for a, s in d.items():
        if a < addr + nbytes and addr < a + s.nbytes:
            parts.append((a, s))
            rows = max(rows, s.arr.shape[0])
    out = np.full((rows, nbytes), 0xFF, dtype=np.uint8)
    covered = np.zeros(nbytes, dtype=bool)
    for a, s in parts:
        raw = as_bytes(s.arr)
        lo = max(a, addr)
        hi = min(a + s.nbytes, addr + nbytes)
        out[:, lo - addr:hi - addr] = raw[:, lo - a:hi - a]
        covered[lo - addr:hi - addr] = True
    if not covered.all():
        if L.debug:
            L.diagnostics.append(f"read of uninitialised {space.upper()} bytes [{addr}, {addr + nbytes}) "
                                 f"by programs {b.pids[:4].tolist()}")
            if L.debug == "raise":
                raise UninitializedRead(f"uninitialised {space.upper()} read at [{addr}, {addr + nbytes})")
    if npdt == np.bool_:
        arr = out != 0
    else:
        arr = out.view(npdt)
    return arr.reshape((rows,) + tuple(shape))


def place(d: dict, addr: int, nbytes: int, slot: Slot) -> None:
    """Put ``slot`` at ``addr`` of memory space ``d``, cutting away what it overwrites of other slots. (The slots
    of a space never overlap, so one of the same place and size overlaps no other.)"""
    if d:
        old = d.get(addr)
        if old is None or old.nbytes != nbytes:
            end = addr + nbytes
            stale = [a for a, s in d.items() if a < end and addr < a + s.nbytes and
                     not (a == addr and s.nbytes == nbytes)]
            for a in stale:
                _trim(d, a, addr, end)
    d[addr] = slot


def place_among(d: dict, addr: int, nbytes: int, slot: Slot, starts: tuple) -> None:
    """``place`` where every slot that can overlap ``[addr, addr + nbytes)`` starts at one of ``starts``
    (``Machine.starts``: what the kernel's tile ranges allow), scanning them instead of every slot when they are
    fewer."""
    if d:
        old = d.get(addr)
        if old is None or old.nbytes != nbytes:
            end = addr + nbytes
            if len(d) <= len(starts):  # (scan whichever is shorter: the slots, or the starts they may be at)
                stale = [a for a, s in d.items() if a < end and addr < a + s.nbytes and
                         not (a == addr and s.nbytes == nbytes)]
            else:
                stale = [a for a in starts if a in d and a < end and addr < a + d[a].nbytes and
                         not (a == addr and d[a].nbytes == nbytes)]
            for a in stale:
                _trim(d, a, addr, end)
    d[addr] = slot


def _trim(d: dict, a: int, lo: int, hi: int) -> None:
    """Remove the part [lo, hi) of the slot at ``a``, keeping what lies outside as raw bytes."""
    s = d.pop(a)
    end = a + s.nbytes
    if a >= lo and end <= hi:
        return
    # the surviving bytes are cut out only if something reads them (valid programs never do)
    if a < lo:
        d[a] = Slot(None, lo - a, s.gm, (_piece(s, 0, lo - a), (), _same), np.dtype(np.uint8))
    if end > hi:
        d[hi] = Slot(None, end - hi, s.gm, (_piece(s, hi - a, end - a), (), _same), np.dtype(np.uint8))


def _piece(s: Slot, lo: int, hi: int):
    def cut():
        return as_bytes(s.arr)[:, lo:hi].copy()
    return cut


def _same(x):
    return x


def held_bytes(b: Batch) -> int:
    """Host bytes a batch's on-chip memory holds: the arrays of its tiles that own their memory (not views of
    GM or of another tile, not pending)."""
    total = 0
    for d in b.mem.values():
        for s in d.values():
            a = s._arr
            if a is not None and s.lazy is None and a.base is None:
                total += a.nbytes
    return total


def owns(v: np.ndarray) -> bool:
    """Whether an array owns its memory (a fresh result, not a view of something else)."""
    return v.base is None and v.flags.writeable


def materialise_views(b: Batch, L, t: int) -> None:
    """Copy every tile that is still a view of tensor ``t`` (or an alias of it) before ``t`` changes."""
    group = L.alias[t]
    for d in b.mem.values():
        for a, s in d.items():
            if s.gm is not None and group in s.gm:
                if s.lazy is not None:
                    v = s.arr  # evaluate now, while the inputs still hold their values
                    s.arr = v if owns(v) else v.copy()
                else:
                    s.arr = s.arr.copy()
                s.gm = None
