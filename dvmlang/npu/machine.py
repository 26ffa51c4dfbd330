"""The device decoder: validated bytecode -> virtual instructions -> execution on a batch of programs.

Each bytecode instruction is decoded once into a *step*: a closure that performs the instruction's
semantics on a ``Batch`` of programs at once (numpy arrays with a leading program axis; values that
are the same for every program keep a leading axis of 1) and returns its cost in cycles. A branch whose
condition differs between programs splits the batch; each part runs on alone, down to one program at
a time, with the same numerics either way.

On-chip memory is a map from address to tile per memory space; a tile's array may be a view of global
memory (a load that nobody has modified yet), materialised before any store that could change it.
Reads of bytes that nothing wrote yield poison (NaN for floats, all-ones for integers).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes as dt
from ..errors import DeviceError, MemoryFault, SourceLoc, UninitializedRead
from ..vm import isa
from ..vm.decode import Decoded, sop_parts, tile_parts

N_PIPES = isa.N_PIPES
SPACE_OF_FIELD_DEFAULT = "ub"


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


def _arg_value(a):
    if isinstance(a, tuple):
        s, shape = a
        v = s.arr
        return v if v.shape[1:] == shape else v.reshape((v.shape[0],) + shape)
    return a


def _rows_of(a) -> int:
    return a[0].rows if isinstance(a, tuple) else a.shape[0]


def _eval_rows(node, r0: int, r1: int, memo: dict):
    """The rows [r0, r1) of a pending computation (arrays with one row broadcast to every program)."""
    if isinstance(node, tuple):
        s, shape = node
        v = _eval_rows(s, r0, r1, memo)
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
        vals = [_eval_rows(a, r0, r1, memo) for a in args]
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
    if len(parts) == 1:
        return finish(fn(*[_eval_rows(a, 0, slot.rows, {}) for a in args]))
    out = np.empty((slot.rows,) + tuple(slot.shape), dtype=slot.dtype)
    for r0, r1 in parts:
        out[r0:r1] = finish(fn(*[_eval_rows(a, r0, r1, {}) for a in args]))
    return out


class Batch:
    """The state of a group of programs executing in lockstep."""

    __slots__ = ("pids", "coords", "regs", "mem", "n", "count", "t_issue", "pipe_free", "pipe_first", "pipe_busy",
                 "flags", "print_seq", "bytes_read", "bytes_written", "last_bytes", "done", "port_free")

    def __init__(self, pids: np.ndarray, grid, nregs: int, reg_types):
        self.pids = pids
        self.n = len(pids)
        g0, g1 = grid[0], grid[1]
        x = (pids % g0).astype(np.int32)
        y = ((pids // g0) % g1).astype(np.int32)
        z = (pids // (g0 * g1)).astype(np.int32)
        self.coords = (x, y, z)
        self.regs = [np.zeros((), dtype=t.np) for t in reg_types]
        self.mem = {"ub": {}, "l1": {}, "l0a": {}, "l0b": {}, "l0c": {}}
        self.count = 0
        n = self.n
        self.t_issue = np.zeros(n)
        self.pipe_free = np.zeros((N_PIPES, n))
        self.pipe_first = np.full((N_PIPES, n), np.inf)
        self.pipe_busy = np.zeros((N_PIPES, n))
        self.flags: dict = {}
        self.print_seq = np.zeros(n, dtype=np.int64)
        self.bytes_read = np.zeros(n)
        self.bytes_written = np.zeros(n)
        self.last_bytes = 0
        self.done = np.zeros(n)  # completion time of the latest transfer (results land after the pipe frees)
        self.port_free = np.zeros(n)  # when the core's GM port can take the next transfer

    def subset(self, mask: np.ndarray) -> "Batch":
        b = Batch.__new__(Batch)
        b.pids = self.pids[mask]
        b.n = len(b.pids)
        b.coords = tuple(c[mask] for c in self.coords)
        b.regs = [r[mask] if np.ndim(r) else r for r in self.regs]
        b.mem = {}
        for sp, d in self.mem.items():
            nd = {}
            for a, s in d.items():
                arr = s.arr[mask] if s.arr.shape[0] == self.n and self.n != 1 else s.arr
                nd[a] = Slot(arr, s.nbytes, s.gm)
            b.mem[sp] = nd
        b.count = self.count
        b.t_issue = self.t_issue[mask]
        b.pipe_free = self.pipe_free[:, mask]
        b.pipe_first = self.pipe_first[:, mask]
        b.pipe_busy = self.pipe_busy[:, mask]
        b.flags = {k: (v[mask] if np.ndim(v) else v) for k, v in self.flags.items()}
        b.print_seq = self.print_seq[mask]
        b.bytes_read = self.bytes_read[mask]
        b.bytes_written = self.bytes_written[mask]
        b.last_bytes = 0
        b.done = self.done[mask]
        b.port_free = self.port_free[mask]
        return b


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _poison_value(npdt):
    """The value poisoned memory reads as: all-ones bytes (NaN for floats, -1 for signed integers)."""
    if npdt == np.bool_:
        return True
    return np.frombuffer(b"\xff" * np.dtype(npdt).itemsize, dtype=npdt)[0]


def _poison(nbytes: int, rows: int) -> np.ndarray:
    return np.full((rows, nbytes), 0xFF, dtype=np.uint8)


def _as_bytes(arr: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(arr)
    return a.reshape(a.shape[0], -1).view(np.uint8) if a.dtype != np.bool_ else a.reshape(a.shape[0], -1).view(np.uint8)


class Step:
    __slots__ = ("fn", "pipe", "cost", "wait", "set", "dispatch", "kind", "target", "pc", "index", "ins", "loc",
                 "scalar_unit", "latency", "port")

    def __init__(self, d: Decoded, fn, cost, kind="op"):
        self.fn = fn
        self.ins = d.ins
        self.pc = d.pc
        self.pipe = int(d.ins.pipe)
        self.cost = cost
        self.wait = d.wait
        self.set = d.set
        self.kind = kind
        self.target = None
        self.index = 0
        self.loc = None
        self.scalar_unit = self.pipe == 0
        self.latency = 0  # cycles after the pipe is free until the result is visible (DMA first-byte latency)
        self.port = False  # uses the core's global-memory port (shared by MTE2 and MTE3)


PRINT_LIMIT = 10_000  # the most device-print lines one launch keeps


class Launch:
    """What one run of a bytecode needs: GM tensors, scalar values, profile, options."""

    def __init__(self, bc, kernel, arrays: dict[int, np.ndarray], profile, *, watchdog: int, debug=False,
                 kernel_name="", active_cores=1, alias_groups=None, loc_of_pc=None, mix=False):
        self.bc = bc
        self.kernel = kernel
        self.arrays = arrays
        self.profile = profile
        self.debug = debug
        self.watchdog = watchdog  # the launch-wide instruction budget (Device(watchdog=N)); Device counts `executed`
        self.name = kernel_name or kernel.name
        self.alias = alias_groups or {p: p for p in arrays}
        self.loc_of_pc = loc_of_pc or (lambda pc: None)
        self.prints: list = []  # (pid, sequence, prefix, value, hex, numpy dtype): see add_prints
        self.prints_seen = 0
        self.diagnostics: list[str] = []
        cores = max(1, active_cores)
        self.dma_rate = min(profile.mte_bytes_per_cycle, profile.hbm_bytes_per_cycle / cores)
        self.l2_rate = min(profile.mte_bytes_per_cycle, profile.l2_bytes_per_cycle / cores)
        # L2 model: a tensor that fits L2 streams in at the L2 rate; the launch as a whole then cannot beat
        # the HBM roofline for the bytes that must come from HBM once (see Device._run_kernel)
        self.group_bytes: dict = {}
        self.group_reads: dict = {}
        for p, a in arrays.items():
            g = self.alias[p]
            self.group_bytes[g] = max(self.group_bytes.get(g, 0), a.size * a.itemsize)
        self.l2_bytes = profile.l2_bytes
        self.code = bc.code

    def add_prints(self, entries: list) -> None:
        """Buffer device-print lines, keeping only the first ``PRINT_LIMIT`` in output order (by program,
        then sequence), so a print inside a long loop cannot exhaust memory."""
        self.prints.extend(entries)
        self.prints_seen += len(entries)
        if len(self.prints) > 2 * PRINT_LIMIT:
            self.prints.sort(key=_print_order)
            del self.prints[PRINT_LIMIT:]

    def kept_prints(self) -> tuple[list, int]:
        """The print lines to show, in output order, and how many were dropped."""
        self.prints.sort(key=_print_order)
        del self.prints[PRINT_LIMIT:]
        return self.prints, self.prints_seen - len(self.prints)

    def read_cost(self, t: int, nbytes, n: int):
        """Cycles the GM port spends reading ``nbytes`` (per program) of tensor ``t``."""
        g = self.alias[t]
        total = float(np.sum(nbytes)) if np.ndim(nbytes) else float(nbytes) * n
        self.group_reads[g] = self.group_reads.get(g, 0.0) + total
        if self.group_bytes.get(g, 0) > self.l2_bytes:
            return nbytes / self.dma_rate
        return nbytes / self.l2_rate

    def hbm_bytes(self, written: float) -> float:
        """Bytes that must cross HBM: every tensor read once (all re-reads when it does not fit L2), plus
        every write."""
        total = written
        for g, reads in self.group_reads.items():
            size = self.group_bytes.get(g, 0)
            total += reads if size > self.l2_bytes else min(size, reads)
        return total


class Machine:
    """Decodes one kernel of a validated bytecode into steps (cached per template)."""

    def __init__(self, bc, kernel_index: int, profile):
        self.bc = bc
        self.kernel = bc.kernels[kernel_index]
        self.decoded: list[Decoded] = bc.decoded[kernel_index]
        self.profile = profile
        self.layouts = bc.layouts
        self.steps: list[Step] = []
        self.index_of_pc: dict[int, int] = {}
        for i, d in enumerate(self.decoded):
            self.index_of_pc[d.pc] = i
        self.read_again = self._read_again()
        self.loc_of_pc = loc_lookup(bc)
        for i, d in enumerate(self.decoded):
            st = self._make(d)
            st.index = i
            self.steps.append(st)
        for st in self.steps:
            if st.target is not None:
                st.target = self.index_of_pc[st.target]

    def _read_again(self) -> set[int]:
        """pcs whose UB result is read by two or more later instructions before it is overwritten (a host-speed
        hint: such results are kept when first computed instead of being recomputed per reader)."""
        ranges = []
        for d in self.decoded:
            reads, write = [], None
            for f in d.ins.fields:
                if f.kind != "tile":
                    continue
                addr, li = tile_parts(d.vals[f.name])
                if li >= len(self.layouts):
                    continue
                dtp, shape = self.layouts[li]
                r = (addr, addr + max(1, _prod(shape)) * dtp.itemsize)
                if f.name == "dst":
                    write = r
                else:
                    reads.append(r)
            ranges.append((reads, write))
        out = set()
        for i, (_, write) in enumerate(ranges):
            if write is None:
                continue
            count = 0
            for reads, w2 in ranges[i + 1:]:
                count += sum(1 for r in reads if r[0] < write[1] and write[0] < r[1])
                if count >= 2 or (w2 is not None and w2[0] < write[1] and write[0] < w2[1]):
                    break
            if count >= 2:
                out.add(self.decoded[i].pc)
        return out

    # ---- operand helpers -----------------------------------------------------------------------------------
    def _layout(self, ref: int):
        addr, li = tile_parts(ref)
        d, shape = self.layouts[li]
        return addr, d, shape

    def _reader(self, ref: int, space: str = "ub", rank: int | None = None):
        """A function batch -> array (rows, *shape) padded to ``rank`` dims after the program axis."""
        addr, d, shape = self._layout(ref)
        nbytes = _prod(shape) * d.itemsize
        npdt = d.np
        full = shape if rank is None or rank <= len(shape) else (1,) * (rank - len(shape)) + tuple(shape)
        launch_box = self

        def read(b: Batch, L: Launch):
            slot = b.mem[space].get(addr)
            if slot is not None and slot.nbytes == nbytes and slot.dtype == npdt:
                arr = slot.arr
                if arr.shape[1:] != full:
                    arr = arr.reshape((arr.shape[0],) + full)
                return arr
            return launch_box._read_slow(b, L, space, addr, nbytes, npdt, full)

        def source(b: Batch, L: Launch):
            """Like read, but a pending computation stays pending (returned as (slot, shape))."""
            slot = b.mem[space].get(addr)
            if slot is not None and slot.nbytes == nbytes and slot.dtype == npdt:
                if slot.lazy is not None:
                    return (slot, full), slot.gm
                arr = slot.arr
                if arr.shape[1:] != full:
                    arr = arr.reshape((arr.shape[0],) + full)
                return arr, slot.gm
            return launch_box._read_slow(b, L, space, addr, nbytes, npdt, full), None

        read.source = source
        return read

    def _read_slow(self, b: Batch, L, space, addr, nbytes, npdt, shape):
        d = b.mem[space]
        rows = 1
        parts = []
        for a, s in d.items():
            if a < addr + nbytes and addr < a + s.nbytes:
                parts.append((a, s))
                rows = max(rows, s.arr.shape[0])
        out = _poison(nbytes, rows)
        covered = np.zeros(nbytes, dtype=bool)
        for a, s in parts:
            raw = _as_bytes(s.arr)
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

    def _writer(self, ref: int, space: str = "ub"):
        addr, d, shape = self._layout(ref)
        nbytes = _prod(shape) * d.itemsize
        npdt = d.np
        shape = tuple(shape)

        def finish(arr):
            if arr.dtype != npdt:
                arr = arr.astype(npdt)
            if arr.shape[1:] != shape:
                arr = np.broadcast_to(arr, (arr.shape[0],) + shape) if arr.ndim - 1 == len(shape) else \
                    arr.reshape((arr.shape[0],) + shape)
            return arr

        def place(b: Batch, slot: Slot):
            d = b.mem[space]
            end = addr + nbytes
            stale = [a for a, s in d.items() if a < end and addr < a + s.nbytes and
                     not (a == addr and s.nbytes == nbytes)]
            for a in stale:
                _trim(d, a, addr, end)
            d[addr] = slot

        def write(b: Batch, arr: np.ndarray, gm=None):
            place(b, Slot(finish(arr), nbytes, frozenset((gm,)) if gm is not None else None))

        def write_lazy(b: Batch, fn, sources, keep=False):
            """Record ``fn(*args)`` as the tile's value, evaluated when first read (or straight into GM)."""
            args = []
            deps = None
            rows = 1
            depth = 0
            for a, g in sources:
                args.append(a)
                rows = max(rows, _rows_of(a))
                if isinstance(a, tuple) and a[0].lazy is not None:
                    depth = max(depth, a[0].depth + 1)
                if g:
                    deps = g if deps is None else deps | g
            slot = Slot(None, nbytes, deps, (fn, args, finish), np.dtype(npdt), rows, shape, keep, depth)
            if depth >= MAX_PENDING_DEPTH:
                slot.arr  # evaluate now: long chains would otherwise recurse deeply when finally read
            place(b, slot)

        write.lazy = write_lazy
        return write

    # ---- scalar operands --------------------------------------------------------------------------------------
    @staticmethod
    def _sop(v: int):
        is_reg, x = sop_parts(v)
        if is_reg:
            return lambda b: b.regs[x]
        return lambda b: x

    # ---- costs -------------------------------------------------------------------------------------------
    def _vec_cost(self, k, *refs):
        """vector_startup + k x repeats of 256 bytes; a mix kernel's program has its cube core's two vector
        cores, which split the repeats."""
        p = self.profile
        nb = max(_prod(self._layout(r)[2]) * self._layout(r)[1].itemsize for r in refs)
        repeats = math.ceil(nb / p.vector_bytes_per_cycle)
        if self.kernel.mix:
            repeats = math.ceil(repeats / 2)
        return p.vector_startup + k * repeats

    # ---- building steps ---------------------------------------------------------------------------------------
    def _make(self, d: Decoded) -> Step:
        fam = d.ins.family
        maker = getattr(self, "_m_" + fam)
        return maker(d)

    def _m_nop(self, d):
        return Step(d, lambda b, L: None, 1)

    def _m_end(self, d):
        return Step(d, lambda b, L: None, 1, kind="end")

    def _m_movi(self, d):
        rd = d.vals["rd"]
        npdt = d.dtype.np
        pc = d.pc

        def fn(b, L):
            b.regs[rd] = L.imm(pc + 1, npdt)
        return Step(d, fn, 1)

    def _m_mov(self, d):
        rd, rs = d.vals["rd"], d.vals["rs"]

        def fn(b, L):
            b.regs[rd] = b.regs[rs]
        return Step(d, fn, 1)

    def _m_pid(self, d):
        rd, axis = d.vals["rd"], d.vals["axis"]

        def fn(b, L):
            c = b.coords[axis]
            b.regs[rd] = c if b.n > 1 else np.int32(c[0])
        return Step(d, fn, 1)

    def _m_nprog(self, d):
        rd, axis = d.vals["rd"], d.vals["axis"]

        def fn(b, L):
            b.regs[rd] = np.int32(L.kernel.grid[axis])  # the launch's grid: decoders are shared by instances
        return Step(d, fn, 1)

    def _m_tdim(self, d):
        rd, t, dim, stride = d.vals["rd"], d.vals["tensor"], d.vals["dim"], d.vals["stride"]

        def fn(b, L):
            p = L.bc.params[t]
            v = p.strides[dim] if stride else p.shape[dim]
            b.regs[rd] = np.array(v).astype(np.int32)[()]
        return Step(d, fn, 1)

    def _m_jmp(self, d):
        st = Step(d, lambda b, L: None, d.ins.cost.k, kind="jmp")
        st.target = d.vals["target"]
        return st

    def _m_br(self, d):
        rc = d.vals["rc"]
        when = d.ins.extra["when"]

        def fn(b, L):
            return b.regs[rc]
        st = Step(d, fn, d.ins.cost.k, kind="br_nz" if when else "br_z")
        st.target = d.vals["target"]
        return st

    def _m_ssel(self, d):
        rd, rc, ra, rb = (d.vals[k] for k in ("rd", "rc", "ra", "rb"))

        def fn(b, L):
            b.regs[rd] = np.where(b.regs[rc], b.regs[ra], b.regs[rb])
        return Step(d, fn, 1)

    def _m_scast(self, d):
        rd, ra, bitcast = d.vals["rd"], d.vals["ra"], d.vals["bitcast"]
        npdt = d.dtype.np
        cast = _cast_rtz if d.vals["rtz"] else _cast

        def fn(b, L):
            v = np.asarray(b.regs[ra])
            b.regs[rd] = v.view(npdt) if bitcast else cast(v, npdt)
        return Step(d, fn, 1)

    def _m_scmp(self, d):
        rd, ra, rb = d.vals["rd"], d.vals["ra"], d.vals["rb"]
        f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]

        def fn(b, L):
            b.regs[rd] = f(b.regs[ra], b.regs[rb])
        return Step(d, fn, 1)

    def _m_sbin(self, d):
        rd, ra, rb = d.vals["rd"], d.vals["ra"], d.vals["rb"]
        f = d.ins.fn
        npdt = d.dtype.np

        def fn(b, L):
            r = f(np.asarray(b.regs[ra]), np.asarray(b.regs[rb]))
            b.regs[rd] = np.asarray(r).astype(npdt, copy=False)
        return Step(d, fn, 1)

    def _m_sun(self, d):
        rd, ra = d.vals["rd"], d.vals["ra"]
        f = d.ins.fn
        npdt = d.dtype.np

        def fn(b, L):
            r = f(np.asarray(b.regs[ra]))
            b.regs[rd] = np.asarray(r).astype(npdt, copy=False)
        return Step(d, fn, d.ins.cost.k)

    def _m_movts(self, d):
        rd = d.vals["rd"]
        read = self._reader(d.vals["src"])

        def fn(b, L):
            arr = read(b, L)
            flat = arr.reshape(arr.shape[0], -1)[:, 0]
            b.regs[rd] = flat[0] if flat.shape[0] == 1 else flat.copy()
        return Step(d, fn, self.profile.scalar_gm_latency)

    def _m_ldg(self, d):
        rd, t = d.vals["rd"], d.vals["tensor"]
        off = self._sop(d.vals["offset"])
        pc = d.pc

        def fn(b, L):
            g = L.arrays[t]
            idx = np.asarray(off(b)).astype(np.int64)
            _check_bounds(L, b, t, idx, idx, pc, np.ones(np.shape(idx), bool) if np.ndim(idx) else True)
            v = g[idx]
            b.bytes_read += g.itemsize
            b.regs[rd] = v if np.ndim(v) else v
        return Step(d, fn, self.profile.scalar_gm_latency)

    def _m_stg(self, d):
        rs, t = d.vals["rs"], d.vals["tensor"]
        off = self._sop(d.vals["offset"])
        pc = d.pc

        def fn(b, L):
            g = L.arrays[t]
            idx = np.asarray(off(b)).astype(np.int64)
            _check_bounds(L, b, t, idx, idx, pc, True)
            _materialise_views(b, L, t)
            if L.races is not None:
                L.races.record_elements(b, t, np.broadcast_to(idx, (b.n,))[:, None], np.ones((b.n, 1), bool))
            _store_scalars(g, idx, b.regs[rs], b.n)
            b.bytes_written += g.itemsize
        return Step(d, fn, self.profile.scalar_gm_latency)

    def _m_print(self, d):
        sid, kind, hexa = d.vals["string"], d.vals["kind"], d.vals["hex"]
        reg = d.vals["reg"]
        read = self._reader(d.vals["value"]) if kind == 2 else None
        npdt = d.dtype.np

        def fn(b, L):
            prefix = L.bc.strings[sid]
            if kind == 0:
                vals = [None] * b.n
            elif kind == 1:
                v = np.broadcast_to(np.asarray(b.regs[reg]), (b.n,))
                vals = list(v)
            else:
                arr = read(b, L)
                arr = np.broadcast_to(arr, (b.n,) + arr.shape[1:])
                vals = [arr[i] for i in range(b.n)]
            L.add_prints([(int(b.pids[i]), int(b.print_seq[i]), prefix, vals[i], bool(hexa), npdt)
                          for i in range(b.n)])
            b.print_seq += 1
        return Step(d, fn, 0)

    def _m_set(self, d):
        st = Step(d, lambda b, L: None, 1, kind="set")
        st.pipe = d.vals["src"]
        st.set = (d.vals["dst"], d.vals["event"])
        st.wait = None
        return st

    def _m_wait(self, d):
        st = Step(d, lambda b, L: None, 1, kind="wait")
        st.pipe = d.vals["dst"]
        st.wait = (d.vals["src"], d.vals["event"])
        st.set = None
        return st

    def _m_barrier(self, d):
        st = Step(d, lambda b, L: None, 1, kind="barrier")
        st.target = None
        st.cost = d.vals["mask"]
        return st

    def _m_trap(self, d):
        sid = d.vals["string"]
        pc = d.pc

        def fn(b, L):
            raise DeviceError(f"kernel `{L.name}` trapped in programs {b.pids[:8].tolist()}: {L.bc.strings[sid]}"
                              + _where(L, pc))
        return Step(d, fn, 1)

    # ---- vector ---------------------------------------------------------------------------------------------
    def _m_vbin(self, d):
        rank = len(self._layout(d.vals["dst"])[2])
        ra, rb = self._reader(d.vals["a"], rank=rank), self._reader(d.vals["b"], rank=rank)
        w = self._writer(d.vals["dst"])
        f = d.ins.fn

        sa, sb, lazy = ra.source, rb.source, w.lazy
        keep = d.pc in self.read_again

        def fn(b, L):
            lazy(b, f, (sa(b, L), sb(b, L)), keep)
        return Step(d, fn, self._vec_cost(d.ins.cost.k, d.vals["dst"], d.vals["a"], d.vals["b"]))

    def _m_vbins(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        f = d.ins.fn
        rs, rev = d.vals["rs"], d.vals["rev"]
        rank = len(self._layout(d.vals["a"])[2])
        npdt = self._layout(d.vals["a"])[1].np

        sa, lazy = ra.source, w.lazy
        keep = d.pc in self.read_again

        def fn(b, L):
            s = (_lift(b.regs[rs], rank, npdt), None)
            a = sa(b, L)
            lazy(b, f, (s, a) if rev else (a, s), keep)
        return Step(d, fn, self._vec_cost(d.ins.cost.k, d.vals["dst"], d.vals["a"]))

    def _m_vcmp(self, d):
        rank = len(self._layout(d.vals["dst"])[2])
        ra, rb = self._reader(d.vals["a"], rank=rank), self._reader(d.vals["b"], rank=rank)
        w = self._writer(d.vals["dst"])
        f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]

        def fn(b, L):
            w(b, f(ra(b, L), rb(b, L)))
        return Step(d, fn, self._vec_cost(1, d.vals["a"], d.vals["b"]))

    def _m_vcmps(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]
        rs, rev = d.vals["rs"], d.vals["rev"]
        rank = len(self._layout(d.vals["a"])[2])
        npdt = self._layout(d.vals["a"])[1].np

        def fn(b, L):
            s = _lift(b.regs[rs], rank, npdt)
            a = ra(b, L)
            w(b, f(s, a) if rev else f(a, s))
        return Step(d, fn, self._vec_cost(1, d.vals["a"]))

    def _m_vun(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        f = d.ins.fn

        sa, lazy = ra.source, w.lazy
        keep = d.pc in self.read_again

        def fn(b, L):
            lazy(b, f, (sa(b, L),), keep)
        return Step(d, fn, self._vec_cost(d.ins.cost.k, d.vals["dst"]))

    def _m_vsel(self, d):
        rank = len(self._layout(d.vals["dst"])[2])
        rc, ra, rb = (self._reader(d.vals[k], rank=rank) for k in ("c", "a", "b"))
        w = self._writer(d.vals["dst"])

        def fn(b, L):
            w(b, np.where(rc(b, L), ra(b, L), rb(b, L)))
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    def _m_vfma(self, d):
        rank = len(self._layout(d.vals["dst"])[2])
        r = [self._reader(d.vals[k], rank=rank) for k in ("a", "b", "c")]
        w = self._writer(d.vals["dst"])
        npdt = d.dtype.np

        def fn(b, L):
            a, x, c = (f(b, L).astype(np.float64) for f in r)
            w(b, (a * x + c).astype(npdt))
        return Step(d, fn, self._vec_cost(2, d.vals["dst"]))

    def _m_vcast(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        npdt = d.dtype.np
        bitcast = d.vals["bitcast"]
        cast = _cast_rtz if d.vals["rtz"] else _cast

        def fn(b, L):
            a = ra(b, L)
            w(b, np.ascontiguousarray(a).view(npdt) if bitcast else cast(a, npdt))
        return Step(d, fn, self._vec_cost(2, d.vals["dst"], d.vals["a"]))

    def _m_vdup(self, d):
        rs = d.vals["rs"]
        addr, dd, shape = self._layout(d.vals["dst"])
        w = self._writer(d.vals["dst"])
        npdt = dd.np
        rank = len(shape)

        def fn(b, L):
            s = _lift(b.regs[rs], rank, npdt)
            w(b, np.broadcast_to(s, (s.shape[0],) + tuple(shape)))
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    def _m_viota(self, d):
        _, _, shape = self._layout(d.vals["dst"])
        _, start = sop_parts(d.vals["start"])
        w = self._writer(d.vals["dst"])
        value = np.arange(start, start + shape[0], dtype=np.int32)[None]
        value.setflags(write=False)

        def fn(b, L):
            w(b, value)
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    def _m_vcopy(self, d):
        _, _, shape = self._layout(d.vals["dst"])
        ra = self._reader(d.vals["a"], rank=len(shape))
        w = self._writer(d.vals["dst"])

        def fn(b, L):
            a = ra(b, L)
            w(b, np.broadcast_to(a, (a.shape[0],) + tuple(shape)))
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    def _m_vreduce(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        op = isa.REDUCE_OPS[d.vals["op"]]
        axis = d.vals["axis"] + 1
        _, ad, ashape = self._layout(d.vals["a"])
        _, dd, dshape = self._layout(d.vals["dst"])
        acc = np.float32 if ad in (dt.float16, dt.bfloat16, dt.float8e4nv, dt.float8e5) else None
        npdt = dd.np
        dshape = tuple(dshape)

        def reduce(a):
            if op in ("argmax", "argmin"):
                # Triton ignores NaN: the first index of the NaN-ignoring extreme (0 when every value is NaN)
                best = (np.fmax if op == "argmax" else np.fmin).reduce(a, axis=axis, keepdims=True)
                r = np.argmax(a == best, axis=axis).astype(np.int32)
            elif op == "xor_sum":
                r = np.bitwise_xor.reduce(a, axis=axis)
            elif op == "or":
                r = np.bitwise_or.reduce(a, axis=axis)
            else:
                x = a.astype(acc) if acc is not None else a
                # max and min ignore NaN, as Triton's (maxnum/minnum; all NaN gives NaN); max_nan and min_nan
                # propagate it, as numpy's
                r = {"sum": np.sum, "max": np.fmax.reduce, "min": np.fmin.reduce, "prod": np.prod, "max_nan": np.max,
                     "min_nan": np.min}[op](x, axis=axis)
                r = r.astype(npdt, copy=False)
            return r.reshape((r.shape[0],) + dshape)

        source = ra.source

        def fn(b, L):
            a, _ = source(b, L)
            if isinstance(a, tuple) and a[0].rows > 1 and len(chunks(a[0])) > 1:
                # reduce a pending computation chunk by chunk, without materialising it
                s0 = a[0]
                out = np.empty((s0.rows,) + dshape, dtype=npdt)
                for r0, r1 in chunks(s0):
                    out[r0:r1] = reduce(_eval_rows(a, r0, r1, {}))
                w(b, out)
                return
            w(b, reduce(_arg_value(a)))
        n = ashape[d.vals["axis"]] if d.vals["axis"] < len(ashape) else 1
        cost = self._vec_cost(1, d.vals["a"]) + self.profile.reduce_tree_step * max(1, math.ceil(math.log2(max(2, n))))
        return Step(d, fn, cost)

    def _m_vscan(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        op = isa.SCAN_OPS[d.vals["op"]]
        axis = d.vals["axis"] + 1
        rev = d.vals["reverse"]
        _, ad, ashape = self._layout(d.vals["a"])
        acc = np.float32 if ad in (dt.float16, dt.bfloat16) else None
        npdt = ad.np
        f = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate, "min": np.minimum.accumulate}[op]

        def fn(b, L):
            a = ra(b, L)
            x = a.astype(acc) if acc is not None else a
            if rev:
                x = np.flip(x, axis=axis)
            r = f(x, axis=axis)
            if rev:
                r = np.flip(r, axis=axis)
            w(b, np.ascontiguousarray(r).astype(npdt, copy=False))
        n = ashape[d.vals["axis"]]
        cost = self._vec_cost(2, d.vals["a"]) + self.profile.reduce_tree_step * max(1, math.ceil(math.log2(max(2, n))))
        return Step(d, fn, cost)

    def _m_vperm(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        rank = len(self._layout(d.vals["a"])[2])
        perm = (0,) + tuple(((d.vals["perm"] >> (2 * i)) & 3) + 1 for i in range(rank))

        def fn(b, L):
            w(b, np.ascontiguousarray(np.transpose(ra(b, L), perm)))
        return Step(d, fn, self._vec_cost(2, d.vals["dst"]))

    def _m_vslice(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        _, _, dshape = self._layout(d.vals["dst"])
        sl = (slice(None),) + tuple(slice(d.vals[f"s{i}"], d.vals[f"s{i}"] + n) for i, n in enumerate(dshape))

        def fn(b, L):
            w(b, ra(b, L)[sl])
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    def _m_vtake(self, d):
        ra, ri = self._reader(d.vals["a"]), self._reader(d.vals["index"])
        w = self._writer(d.vals["dst"])
        axis = d.vals["axis"] + 1
        _, _, ashape = self._layout(d.vals["a"])
        _, _, dshape = self._layout(d.vals["dst"])
        n = ashape[d.vals["axis"]]
        pc = d.pc

        def fn(b, L):
            a, idx = ra(b, L), ri(b, L)
            bad = (idx < 0) | (idx >= n)
            if bad.any():
                rows = bad.reshape(bad.shape[0], -1).any(axis=1)
                pids = b.pids[rows] if rows.shape[0] == b.n else b.pids
                raise DeviceError(f"kernel `{L.name}`: gather index {idx[bad].flat[0]} is outside [0, {n}) in "
                                  f"programs {pids[:8].tolist()}" + _where(L, pc))
            rows = max(a.shape[0], idx.shape[0])
            a = np.broadcast_to(a, (rows,) + a.shape[1:])
            idx = np.broadcast_to(idx.astype(np.intp, copy=False), (rows,) + tuple(dshape))
            w(b, np.take_along_axis(a, idx, axis=axis))
        return Step(d, fn, self._vec_cost(d.ins.cost.k, d.vals["dst"], d.vals["a"]))

    def _m_vsort(self, d):
        ra = self._reader(d.vals["a"])
        w = self._writer(d.vals["dst"])
        axis = d.vals["axis"] + 1
        desc = d.vals["descending"]
        _, ad, ashape = self._layout(d.vals["a"])
        exact = np.float32 if ad.np.kind == "V" else None  # bf16/fp8 sort as float32 (exactly), NaN last

        def fn(b, L):
            a = ra(b, L)
            r = np.sort(a.astype(exact) if exact is not None else a, axis=axis)
            if desc:
                r = np.flip(r, axis=axis)
            w(b, np.ascontiguousarray(r).astype(ad.np, copy=False))
        n = ashape[d.vals["axis"]]
        cost = self._vec_cost(d.ins.cost.k, d.vals["a"]) + \
            self.profile.reduce_tree_step * max(1, math.ceil(math.log2(max(2, n))))
        return Step(d, fn, cost)

    def _m_vhist(self, d):
        ra = self._reader(d.vals["a"])
        rm = self._reader(d.vals["mask"]) if d.vals["masked"] else None
        w = self._writer(d.vals["dst"])
        _, _, (bins,) = self._layout(d.vals["dst"])

        def fn(b, L):
            a = ra(b, L)
            keep = (a >= 0) & (a < bins)
            if rm is not None:
                keep = keep & rm(b, L)
            rows = keep.shape[0]
            a = np.broadcast_to(a, keep.shape)
            slot = np.arange(rows, dtype=np.int64)[:, None] * bins + np.where(keep, a, 0).astype(np.int64)
            w(b, np.bincount(slot[keep], minlength=rows * bins).reshape(rows, bins).astype(np.int32))
        return Step(d, fn, self._vec_cost(d.ins.cost.k, d.vals["a"]))

    def _m_vcat(self, d):
        ra, rb = self._reader(d.vals["a"]), self._reader(d.vals["b"])
        w = self._writer(d.vals["dst"])
        axis = d.vals["axis"] + 1

        def fn(b, L):
            x, y = ra(b, L), rb(b, L)
            rows = max(x.shape[0], y.shape[0])
            x = np.broadcast_to(x, (rows,) + x.shape[1:])
            y = np.broadcast_to(y, (rows,) + y.shape[1:])
            w(b, np.concatenate([x, y], axis=axis))
        return Step(d, fn, self._vec_cost(1, d.vals["dst"]))

    # ---- memory ---------------------------------------------------------------------------------------------
    def _m_dma_load(self, d):
        rank = d.ins.extra["rank"]
        space = d.ins.extra.get("space", "ub")
        addr, dd, shape = self._layout(d.vals["dst"])
        w = self._writer(d.vals["dst"], space)
        t = d.vals["tensor"]
        base = self._sop(d.vals["base"])
        strides = [self._sop(d.vals[f"stride{i}"]) for i in range(rank)]
        los = [self._sop(d.vals[f"lo{i}"]) for i in range(rank)]
        his = [self._sop(d.vals[f"hi{i}"]) for i in range(rank)]
        pad_reg, pad_v = sop_parts(d.vals["pad"])
        npdt = dd.np
        shape = tuple(shape)
        pc = d.pc
        prof = self.profile
        undef = d.vals.get("pad_undef", 0)
        poison = _poison_value(npdt)

        def fn(b, L):
            g = L.arrays[t]
            desc = _Desc(b, base, strides, los, his, shape)
            _check_dma(L, b, t, desc, pc, g.size)
            pad = b.regs[pad_v] if pad_reg else pad_v
            if undef and L.debug:
                pad = poison  # masked-off elements the kernel gave no value for
            arr, gm_view = _dma_read(g, desc, shape, npdt, pad, b.n)
            w(b, arr, L.alias[t] if gm_view else None)
            nbytes = desc.count * g.itemsize
            b.bytes_read += nbytes
            b.last_bytes = nbytes
            return desc.bursts * prof.burst_overhead + L.read_cost(t, nbytes, b.n)
        return _dma_step(d, fn, prof)

    def _m_dma_store(self, d):
        rank = d.ins.extra["rank"]
        _, _, shape = self._layout(d.vals["src"])
        r = self._reader(d.vals["src"])
        t = d.vals["tensor"]
        base = self._sop(d.vals["base"])
        strides = [self._sop(d.vals[f"stride{i}"]) for i in range(rank)]
        los = [self._sop(d.vals[f"lo{i}"]) for i in range(rank)]
        his = [self._sop(d.vals[f"hi{i}"]) for i in range(rank)]
        shape = tuple(shape)
        pc = d.pc
        prof = self.profile

        src_addr, src_dt, _ = self._layout(d.vals["src"])
        src_bytes = _prod(shape) * src_dt.itemsize

        def fn(b, L):
            g = L.arrays[t]
            desc = _Desc(b, base, strides, los, his, shape)
            _check_dma(L, b, t, desc, pc, g.size)
            _materialise_views(b, L, t)
            slot = b.mem["ub"].get(src_addr)
            view = box = None
            if slot is not None and slot.lazy is not None and slot.nbytes == src_bytes and \
                    isinstance(slot.lazy[0], np.ufunc) and slot.dtype == g.dtype and tuple(slot.shape) == shape:
                view, box = _store_view(g, desc, shape, b.n, whole=slot.keep)
            if view is not None and _compute_into(slot, view, box):
                if box is None:  # the whole tile went to GM: later readers read it there
                    slot.arr = view
                    slot.gm = frozenset((L.alias[t],))
            else:
                _dma_write(g, desc, shape, r(b, L), b.n)
            if L.races is not None:
                L.races.record_dma(b, t, desc)
            nbytes = desc.count * g.itemsize
            b.bytes_written += nbytes
            b.last_bytes = nbytes
            return desc.bursts * prof.burst_overhead + nbytes / L.dma_rate
        return _dma_step(d, fn, prof)

    def _m_gather(self, d):
        _, dd, shape = self._layout(d.vals["dst"])
        w = self._writer(d.vals["dst"])
        ro = self._reader(d.vals["offsets"])
        rm = self._reader(d.vals["mask"]) if d.vals["masked"] else None
        t = d.vals["tensor"]
        pad_reg, pad_v = sop_parts(d.vals["pad"])
        pc = d.pc
        prof = self.profile
        npdt = dd.np

        def fn(b, L):
            g = L.arrays[t]
            off = np.broadcast_to(ro(b, L), (b.n,) + tuple(shape)).astype(np.int64)
            m = np.broadcast_to(rm(b, L), off.shape) if rm is not None else np.ones(off.shape, bool)
            _check_elements(L, b, t, off, m, pc, g.size)
            vals = g[np.where(m, off, 0)]
            pad = b.regs[pad_v] if pad_reg else pad_v
            pad = _lift(pad, len(shape), npdt)
            res = np.where(m, vals, pad).astype(npdt, copy=False)
            w(b, res)
            cnt = m.reshape(b.n, -1).sum(axis=1)
            b.bytes_read += cnt * g.itemsize
            b.last_bytes = cnt * g.itemsize
            return cnt * prof.gather_cycles_per_element + L.read_cost(t, cnt * g.itemsize, b.n)
        return _dma_step(d, fn, prof)

    def _m_scatter(self, d):
        _, _, shape = self._layout(d.vals["src"])
        rs = self._reader(d.vals["src"])
        ro = self._reader(d.vals["offsets"])
        rm = self._reader(d.vals["mask"]) if d.vals["masked"] else None
        t = d.vals["tensor"]
        pc = d.pc
        prof = self.profile

        def fn(b, L):
            g = L.arrays[t]
            off = np.broadcast_to(ro(b, L), (b.n,) + tuple(shape)).astype(np.int64)
            m = np.broadcast_to(rm(b, L), off.shape) if rm is not None else np.ones(off.shape, bool)
            _check_elements(L, b, t, off, m, pc, g.size)
            _materialise_views(b, L, t)
            src = np.broadcast_to(rs(b, L), off.shape)
            g[off[m]] = src[m]
            if L.races is not None:
                L.races.record_elements(b, t, off, m)
            cnt = m.reshape(b.n, -1).sum(axis=1)
            b.bytes_written += cnt * g.itemsize
            b.last_bytes = cnt * g.itemsize
            return cnt * prof.gather_cycles_per_element + cnt * g.itemsize / L.dma_rate
        return _dma_step(d, fn, prof)

    def _m_atomic(self, d):
        _, _, shape = self._layout(d.vals["src"])
        rs = self._reader(d.vals["src"])
        ro = self._reader(d.vals["offsets"])
        rm = self._reader(d.vals["mask"]) if d.vals["masked"] else None
        rc = self._reader(d.vals["cmp"]) if d.vals["has_cmp"] else None
        want = d.vals["want_old"]
        w = self._writer(d.vals["dst"]) if want else None
        t = d.vals["tensor"]
        op = isa.ATOMIC_OPS[d.vals["op"]]
        pc = d.pc
        prof = self.profile

        def fn(b, L):
            g = L.arrays[t]
            off = np.broadcast_to(ro(b, L), (b.n,) + tuple(shape)).astype(np.int64)
            m = np.broadcast_to(rm(b, L), off.shape) if rm is not None else np.ones(off.shape, bool)
            _check_elements(L, b, t, off, m, pc, g.size)
            _materialise_views(b, L, t)
            src = np.broadcast_to(rs(b, L), off.shape)
            cmp = np.broadcast_to(rc(b, L), off.shape) if rc is not None else None
            old = _atomic(g, op, off, m, src, cmp, want)
            if want:
                w(b, old)
            cnt = m.reshape(b.n, -1).sum(axis=1)
            b.bytes_written += cnt * g.itemsize
            b.bytes_read += cnt * g.itemsize
            b.last_bytes = cnt * g.itemsize
            return cnt * prof.atomic_cycles_per_element
        return _dma_step(d, fn, prof)

    # ---- cube -----------------------------------------------------------------------------------------------
    def _m_copy_space(self, d):
        dst_space, src_space = d.ins.extra["spaces"]
        r = self._reader(d.vals["src"], src_space)
        w = self._writer(d.vals["dst"], dst_space)
        _, dd, shape = self._layout(d.vals["dst"])
        npdt = dd.np
        nb = _prod(shape) * dd.itemsize
        p = self.profile
        kind = d.ins.cost.kind

        def fn(b, L):
            w(b, r(b, L).astype(npdt, copy=False))
            if kind == "dma":
                return nb / L.dma_rate
            return None
        if kind == "mte1":
            cost = p.mte1_startup + nb / p.mte1_bytes_per_cycle
        elif kind == "fixpipe":
            cost = p.fixpipe_startup + nb / p.fixpipe_bytes_per_cycle
        else:
            return _dma_step(d, fn, p)
        return Step(d, fn, cost)

    def _m_mmad(self, d):
        ra = self._reader(d.vals["a"], "l0a")
        rb = self._reader(d.vals["b"], "l0b")
        rd = self._reader(d.vals["dst"], "l0c")
        w = self._writer(d.vals["dst"], "l0c")
        init = d.vals["init"]
        _, ad, ashape = self._layout(d.vals["a"])
        _, bd, bshape = self._layout(d.vals["b"])
        _, cd, _ = self._layout(d.vals["dst"])
        acc = cd.np
        M, K = ashape
        N = bshape[1]
        p = self.profile
        factor = p.cube_fp32_factor if ad in (dt.float32, dt.float64) else 1
        cost = p.cube_startup + math.ceil(M / 16) * math.ceil(N / 16) * math.ceil(K / 16) * factor

        def fn(b, L):
            prod = np.matmul(ra(b, L).astype(acc, copy=False), rb(b, L).astype(acc, copy=False))
            if not init:
                c = rd(b, L)
                if c.shape == prod.shape:
                    np.add(prod, c, out=prod)
                else:
                    prod = c + prod
            w(b, prod.astype(acc, copy=False))
        return Step(d, fn, cost)


# ---- helpers ---------------------------------------------------------------------------------------------


def _dma_step(d, fn, prof) -> Step:
    """A transfer: its pipe is busy for the bursts and bytes it moves (the cost ``fn`` returns); its result is
    visible ``dma_latency`` cycles later, so back-to-back transfers overlap their latencies."""
    st = Step(d, fn, None)
    st.latency = prof.dma_latency
    st.port = True
    return st


def _cast(a: np.ndarray, npdt) -> np.ndarray:
    if npdt == np.bool_:
        return a != 0
    src = a.dtype
    if np.issubdtype(npdt, np.integer) and (np.issubdtype(src, np.floating) or src.kind == "V"):
        info = np.iinfo(npdt)
        x = np.asarray(a, dtype=np.float64)
        x = np.where(np.isnan(x), 0, np.trunc(x))
        # compare with the bounds as floats: 2**63 - 1 is 2**63 in float64, and converting that would wrap
        big, small = x >= float(info.max), x <= float(info.min)
        inside = np.where(big | small, 0, x).astype(npdt)
        top, bottom = np.dtype(npdt).type(info.max), np.dtype(npdt).type(info.min)
        return np.where(big, top, np.where(small, bottom, inside))
    return a.astype(npdt)


def _cast_rtz(a: np.ndarray, npdt) -> np.ndarray:
    """A float converted to a narrower float, rounded toward zero: the nearest value, moved one step toward
    zero wherever rounding went away from zero (so a finite overflow gives the largest finite value)."""
    r = np.asarray(a.astype(npdt))
    wide = np.asarray(a, dtype=np.float64)
    away = (np.abs(r.astype(np.float64)) > np.abs(wide)) | (np.isnan(r.astype(np.float64)) & ~np.isnan(wide))
    if not away.any():
        return r
    bits = r.view(np.dtype(f"u{r.dtype.itemsize}"))
    return np.where(away, bits - 1, bits).astype(bits.dtype).view(npdt)


def _lift(v, rank: int, npdt) -> np.ndarray:
    """A register value as an array (rows, 1, ..., 1) of dtype ``npdt``."""
    a = np.asarray(v)
    if a.dtype != npdt:
        a = a.astype(npdt)
    if a.ndim == 0:
        return a.reshape((1,) * (rank + 1))
    return a.reshape((a.shape[0],) + (1,) * rank)


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
        return _as_bytes(s.arr)[:, lo:hi].copy()
    return cut


def _same(x):
    return x


def _owns(v: np.ndarray) -> bool:
    """Whether an array owns its memory (a fresh result, not a view of something else)."""
    return v.base is None and v.flags.writeable


def _store_scalars(g: np.ndarray, idx, val, n: int) -> None:
    """One scalar store by each of ``n`` programs (in program order) at ``idx`` (one offset, or one per
    program). Where several programs store to one element, the last program's value stays: the result of
    running them one after another, as the sequential device does."""
    if not np.ndim(idx):
        g[idx] = val[-1] if np.ndim(val) else val
        return
    last = n - 1 - np.unique(idx[::-1], return_index=True)[1]  # each element's last storing program
    g[idx[last]] = np.broadcast_to(np.asarray(val), (n,))[last]


def _print_order(entry) -> tuple:
    return entry[0], entry[1]


def _materialise_views(b: Batch, L, t: int) -> None:
    """Copy every tile that is still a view of tensor ``t`` (or an alias of it) before ``t`` changes."""
    group = L.alias[t]
    for d in b.mem.values():
        for a, s in d.items():
            if s.gm is not None and group in s.gm:
                if s.lazy is not None:
                    v = s.arr  # evaluate now, while the inputs still hold their values
                    s.arr = v if _owns(v) else v.copy()
                else:
                    s.arr = s.arr.copy()
                s.gm = None


class _Desc:
    """A DMA descriptor evaluated for a batch: per-program base, strides and box."""

    __slots__ = ("base", "strides", "lo", "hi", "count", "bursts", "n", "empty")

    def __init__(self, b: Batch, base, strides, los, his, shape):
        n = b.n
        self.n = n
        self.base = np.asarray(base(b), dtype=np.int64)
        self.strides = [np.asarray(s(b), dtype=np.int64) for s in strides]
        lo = [np.clip(np.asarray(f(b), dtype=np.int64), 0, s) for f, s in zip(los, shape)]
        hi = [np.clip(np.asarray(f(b), dtype=np.int64), 0, s) for f, s in zip(his, shape)]
        hi = [np.maximum(h, l) for h, l in zip(hi, lo)]
        self.lo, self.hi = lo, hi
        ext = [h - l for h, l in zip(hi, lo)]
        count = np.ones((), dtype=np.int64)
        for e in ext:
            count = count * e
        self.count = np.broadcast_to(count, (n,)) if np.ndim(count) == 0 and n > 1 else count
        self.empty = count == 0
        if len(shape) >= 1:
            inner_contig = self.strides[-1] == 1
            rows = count // np.maximum(ext[-1], 1)
            self.bursts = np.where(inner_contig, rows, count)
        else:
            self.bursts = count


def _check_dma(L, b: Batch, t: int, desc: _Desc, pc: int, size: int) -> None:
    lo_idx = desc.base
    hi_idx = desc.base
    for s, l, h in zip(desc.strides, desc.lo, desc.hi):
        a = s * l
        z = s * np.maximum(h - 1, l)
        lo_idx = lo_idx + np.minimum(a, z)
        hi_idx = hi_idx + np.maximum(a, z)
    # int64 address arithmetic can wrap (a stride near 2**63 maps an out-of-range middle element between two
    # in-range end points): check the same extremes in float64, which cannot wrap, before anything is touched.
    flo = fhi = desc.base.astype(np.float64)
    for s, l, h in zip(desc.strides, desc.lo, desc.hi):
        fs = s.astype(np.float64)
        a = fs * l
        z = fs * np.maximum(h - 1, l)
        flo = flo + np.minimum(a, z)
        fhi = fhi + np.maximum(a, z)
    bad = ((lo_idx < 0) | (hi_idx >= size) | (flo < 0) | (fhi >= size)) & ~desc.empty
    if np.any(bad):
        i = int(np.argmax(np.broadcast_to(bad, (b.n,))))
        lo = int(np.broadcast_to(lo_idx, (b.n,))[i])
        hi = int(np.broadcast_to(hi_idx, (b.n,))[i])
        _fault(L, b, t, i, lo, hi, size, pc)


def _check_bounds(L, b, t, lo, hi, pc, active):
    size = L.arrays[t].size
    bad = ((lo < 0) | (hi >= size)) & active
    if np.any(bad):
        i = int(np.argmax(np.broadcast_to(bad, (b.n,))))
        _fault(L, b, t, i, int(np.broadcast_to(lo, (b.n,))[i]), int(np.broadcast_to(hi, (b.n,))[i]), size, pc)


def _check_elements(L, b, t, off, m, pc, size):
    bad = ((off < 0) | (off >= size)) & m
    if np.any(bad):
        flat = bad.reshape(b.n, -1)
        i = int(np.argmax(flat.any(axis=1)))
        row = off.reshape(b.n, -1)[i][flat[i]]
        _fault(L, b, t, i, int(row.min()), int(row.max()), size, pc)


def _fault(L, b, t, lane, lo, hi, size, pc):
    name = L.bc.params[t].name
    pid = int(b.pids[lane])
    grid = L.kernel.grid
    coords = (pid % grid[0], (pid // grid[0]) % grid[1], pid // (grid[0] * grid[1]))
    pid_text = str(coords[0]) if grid[1] == grid[2] == 1 else str(coords)
    loc = L.loc_of_pc(pc)
    raise MemoryFault(f"out-of-bounds access to `{name}` in kernel `{L.name}`: program {pid_text} touched "
                      f"elements [{lo}, {hi}] but `{name}` has {size} elements (valid 0..{size - 1}); mask the access "
                      "or fix the offsets", kernel=L.name, tensor=name, index_range=(lo, hi), program_id=coords,
                      loc=loc, source=L.bc.debug.line_text(loc.file, loc.line) if loc is not None else None)


def _where(L, pc) -> str:
    loc = L.loc_of_pc(pc)
    return f"\n  at {loc}" if loc is not None else ""


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


def _all_same(x):
    if np.ndim(x) == 0:
        return True, int(x)
    if (x == x[0]).all():
        return True, int(x[0])
    return False, None


class _Uniform:
    """A descriptor whose strides and box are the same for every program of the batch."""

    __slots__ = ("st", "lo", "hi", "ext", "prog")

    def __init__(self, st, lo, hi, prog):
        self.st, self.lo, self.hi, self.prog = st, lo, hi, prog
        self.ext = tuple(h - l for l, h in zip(lo, hi))

    @property
    def empty(self) -> bool:
        return any(e == 0 for e in self.ext)

    def box(self):
        return tuple(slice(l, h) for l, h in zip(self.lo, self.hi))

    def offset(self) -> int:
        return sum(s_ * l for s_, l in zip(self.st, self.lo))


def _uniform_desc(desc: _Desc, n: int) -> _Uniform | None:
    vals = [_all_same(x) for x in desc.strides + desc.lo + desc.hi]
    if not all(u for u, _ in vals):
        return None
    r = len(desc.strides)
    v = [x for _, x in vals]
    return _Uniform(v[:r], v[r:2 * r], v[2 * r:], _progression(desc.base, n))


def _per_program(desc: _Desc, n: int):
    """(program, start element, box extents, strides, box slices) of every program with a non-empty box."""
    base = np.broadcast_to(desc.base, (n,))
    sts = [np.broadcast_to(x, (n,)) for x in desc.strides]
    los = [np.broadcast_to(x, (n,)) for x in desc.lo]
    his = [np.broadcast_to(x, (n,)) for x in desc.hi]
    for i in range(n):
        lo = [int(x[i]) for x in los]
        hi = [int(x[i]) for x in his]
        ext = tuple(h - l for l, h in zip(lo, hi))
        if any(e == 0 for e in ext):
            continue
        st = tuple(int(x[i]) for x in sts)
        start = int(base[i]) + sum(s_ * l for s_, l in zip(st, lo))
        yield i, start, ext, st, tuple(slice(l, h) for l, h in zip(lo, hi))


def _dma_read(g: np.ndarray, desc: _Desc, shape, npdt, pad, n):
    """Read a box per program. Returns (array (rows, *shape), is_view_of_gm)."""
    u = _uniform_desc(desc, n)
    full = u is not None and all(l == 0 for l in u.lo) and u.ext == tuple(shape)
    if u is not None and u.prog is not None:
        first, step = u.prog
        rows = n if (step != 0 or np.ndim(desc.base)) else 1
        if u.empty:
            return _pad_array(rows, shape, npdt, pad), False
        view = _strided(g, first + u.offset(), (rows,) + u.ext, (step,) + tuple(u.st))
        if full:
            return view, True
        out = _pad_array(rows, shape, npdt, pad).copy()
        out[(slice(None),) + u.box()] = view
        return out, False
    if u is not None and n > 1:
        # programs that read the same window (e.g. the tiles of a matmul shared by a row of programs): read
        # each distinct window once
        bases, inverse = np.unique(np.broadcast_to(desc.base, (n,)), return_inverse=True)
        if len(bases) <= n // 2:
            if u.empty:
                return _pad_array(n, shape, npdt, pad), False
            windows = np.stack([_strided(g, int(b_) + u.offset(), u.ext, tuple(u.st)) for b_ in bases])
            if full:
                return windows[inverse], False
            out = _pad_array(n, shape, npdt, pad).copy()
            out[(slice(None),) + u.box()] = windows[inverse]
            return out, False
    out = _pad_array(n, shape, npdt, pad).copy()
    for i, start, ext, st, box in _per_program(desc, n):
        out[(i,) + box] = _strided(g, start, ext, st)
    return out, False


def _dma_write(g: np.ndarray, desc: _Desc, shape, src: np.ndarray, n):
    rows_src = src.shape[0]
    u = _uniform_desc(desc, n)
    if u is not None and u.prog is not None and (np.ndim(desc.base) or n == 1):
        if u.empty:
            return
        first, step = u.prog
        view = _strided(g, first + u.offset(), (n,) + u.ext, (step,) + tuple(u.st), writeable=True)
        part = src[(slice(None),) + u.box()]
        if _overlapping(step, u.st, u.ext, n):
            for i in range(n):
                view[i] = part[i if rows_src > 1 else 0]
        else:
            view[...] = part
        return
    for i, start, ext, st, box in _per_program(desc, n):
        _strided(g, start, ext, st, writeable=True)[...] = src[(i if rows_src > 1 else 0,) + box]


def _store_view(g: np.ndarray, desc: _Desc, shape, n, whole: bool):
    """(view, box): a writable view of the destination when every program stores the same box of its tile
    (``box`` None: the whole tile) at a base that steps uniformly and the programs do not overlap; a partial
    box only when ``whole`` is False. (None, None) otherwise."""
    u = _uniform_desc(desc, n)
    if u is None or u.prog is None or u.empty:
        return None, None
    full = all(l == 0 for l in u.lo) and u.ext == tuple(shape)
    if (not full and whole) or (n > 1 and np.ndim(desc.base) == 0):
        return None, None
    first, step = u.prog
    if _overlapping(step, u.st, u.ext, n):
        return None, None
    view = _strided(g, first + u.offset(), (n,) + u.ext, (step,) + tuple(u.st), writeable=True)
    return view, None if full else u.box()


def _compute_into(slot: Slot, view: np.ndarray, box) -> bool:
    """Compute a pending elementwise result straight into global memory: all of it (``box`` None) or only the
    box a masked store writes. False (nothing written) when an operand is not laid out as the tile, so it
    cannot be cut to the box (then the caller stores the whole tile)."""
    f, args, _ = slot.lazy
    shape = tuple(slot.shape)
    for i, (r0, r1) in enumerate(chunks(slot)):
        vals = [_eval_rows(a, r0, r1, {}) for a in args]
        if box is not None:
            if i == 0 and not all(_tile_shaped(v, shape) for v in vals):
                return False
            vals = [v[(slice(None),) + tuple(bx if d == s else slice(None)
                                             for bx, d, s in zip(box, v.shape[1:], shape))] for v in vals]
        f(*vals, out=view[r0:r1] if slot.rows > 1 else view)
    return True


def _tile_shaped(v: np.ndarray, shape) -> bool:
    """Whether ``v`` is (rows, *shape) with some dims of ``shape`` broadcast as 1 (so a box can be cut from it)."""
    return np.ndim(v) == len(shape) + 1 and all(d in (1, s) for d, s in zip(v.shape[1:], shape))


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


def _strided(g: np.ndarray, start: int, shape, strides, writeable=False):
    isz = g.itemsize
    # a row-major contiguous window is a plain slice (numpy's fastest path)
    expect, contiguous = 1, True
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != expect:
            contiguous = False
            break
        expect *= n
    if contiguous and 0 <= start and start + expect <= g.size:
        return g[start:start + expect].reshape(shape)
    base = g[start:] if start < g.size else g[:0]
    if base.size == 0:
        base = g
    return as_strided(base, shape=shape, strides=tuple(s * isz for s in strides), writeable=writeable)


def _pad_array(rows, shape, npdt, pad) -> np.ndarray:
    p = np.asarray(pad)
    if p.ndim == 0:
        return np.broadcast_to(np.asarray(p, dtype=npdt) if npdt != np.bool_ else p != 0,
                               (rows,) + tuple(shape))
    p = p.astype(npdt).reshape((p.shape[0],) + (1,) * len(shape))
    return np.broadcast_to(p, (p.shape[0],) + tuple(shape))


def _atomic(g, op, off, m, src, cmp, want):
    idx = off[m]
    vals = src[m]
    old_full = None
    uniq = len(np.unique(idx)) == len(idx)
    if want:
        old_full = np.zeros(off.shape, dtype=g.dtype)
    if uniq:
        old = g[idx].copy()
        if op == "add":
            new = old + vals
        elif op == "max":
            new = np.maximum(old, vals)
        elif op == "min":
            new = np.minimum(old, vals)
        elif op == "xchg":
            new = vals
        elif op == "and":
            new = old & vals
        elif op == "or":
            new = old | vals
        elif op == "xor":
            new = old ^ vals
        else:  # cas
            new = np.where(old == cmp[m], vals, old)
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
        if op == "add":
            g[i] = o + v
        elif op == "max":
            g[i] = max(o, v)
        elif op == "min":
            g[i] = min(o, v)
        elif op == "xchg":
            g[i] = v
        elif op == "and":
            g[i] = o & v
        elif op == "or":
            g[i] = o | v
        elif op == "xor":
            g[i] = o ^ v
        else:
            if o == cm[j]:
                g[i] = v
    if want:
        old_full[m] = olds
    return old_full


def loc_lookup(bc):
    """pc -> SourceLoc from the debug line table (the entry at or before pc)."""
    lines = bc.debug.lines
    files = bc.debug.files
    pcs = [x[0] for x in lines]
    import bisect

    def find(pc):
        i = bisect.bisect_right(pcs, pc) - 1
        if i < 0:
            return None
        _, fi, line, col = lines[i]
        return SourceLoc(files[fi], line, col, func=bc.name)
    return find


