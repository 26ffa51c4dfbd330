"""Many simulated NPUs: ``System(n)`` is ``n`` devices of one profile joined by a topology (``npu.topology``).

Each device (``SystemDevice``, a ``Device``) has its own HBM capacity and resident buffers, its own clock (the
compute stream: every launch starts when the one before it ended) and its own communication stream (the DMA
engines collectives run on, so a collective issued without waiting overlaps the compute that follows). A
collective starts when every member has issued it and its stream is free, which is where the members' clocks
meet; its time comes from the algorithm HCCL would run (``npu.collectives``).

One process drives all devices (``system.all_reduce([x0, x1, ...])``), or each rank runs on a thread of its own
(``system.spmd(fn)``): then kernels that communicate (``dl.remote_store``/``dl.signal``/``dl.wait``, see
``npu.shmem``) run side by side, and a rank that waits for one that never comes gets a clear error.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..errors import CollectiveTimeout, DeviceError, DvmError, OutOfMemory, PeerError
from . import collectives as coll
from . import shmem
from .device import Device
from .profile import get_profile
from .topology import get_topology

DEFAULT_TIMEOUT_S = 60.0


def _mib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


class SystemDevice(Device):
    """One NPU of a ``System``: a ``Device`` with HBM residency, a clock and a communication stream.

    ``clock_us``: where its compute stream is (launches run one after another from it). ``comm_free_us``: when its
    communication stream is free. ``events``: every launch and collective with its start and end, in order."""

    def __init__(self, system, rank: int, profile, hbm_bytes: int, **options):
        super().__init__(profile, **options)
        self.system = system
        self.rank = rank
        self.hbm_capacity = int(hbm_bytes)
        self.resident: dict[str, tuple[int, object]] = {}  # name -> (bytes, array or None)
        self._resident_bytes = 0
        self.clock_us = 0.0
        self.comm_free_us = 0.0
        self.comm_us = 0.0  # time of the collectives this rank took part in
        self.comm_bytes = 0.0  # bytes this rank sent in them
        self.events: list = []  # ("launch", record, start_us, end_us) or ("comm", CommRecord)
        self._pending: list = []  # (lo, hi, record): host memory a collective still running writes

    def __repr__(self) -> str:
        return f"<dvmlang.npu.SystemDevice rank {self.rank} of {len(self.system)} {self.profile.name}>"

    # ---- memory ----------------------------------------------------------------------------------------------
    def alloc(self, shape, dtype="float32", *, name: str | None = None, fill=0) -> np.ndarray:
        """A buffer resident in this device's HBM until ``free``: an array (``name`` in error messages)."""
        arr = np.full(shape, fill, dtype=np.dtype(dtype)) if fill is not None else np.empty(shape, np.dtype(dtype))
        self.place(arr, name=name)
        return arr

    def place(self, value, *, name: str | None = None) -> None:
        """Count ``value`` (an array, or a byte count) as resident in HBM under ``name``."""
        nbytes = int(value) if isinstance(value, (int, np.integer)) else int(np.asarray(value).nbytes)
        if name is None:
            name = f"buffer{len(self.resident)}"
        if name in self.resident:
            raise DvmError(f"device {self.rank} already holds a buffer named {name!r}; free it first or pick another name")
        self._fits(nbytes, f"placing `{name}` ({_mib(nbytes)})")
        self.resident[name] = (nbytes, None if isinstance(value, (int, np.integer)) else value)
        self._resident_bytes += nbytes

    def free(self, buffer) -> None:
        """Release a resident buffer, by name or by the array ``alloc`` returned."""
        name = buffer if isinstance(buffer, str) else next((k for k, (_, a) in self.resident.items() if a is buffer),
                                                             None)
        if name not in self.resident:
            raise DvmError(f"device {self.rank} holds no buffer {buffer if isinstance(buffer, str) else 'like that'}; "
                           f"it holds {sorted(self.resident) or 'none'}")
        self._resident_bytes -= self.resident.pop(name)[0]

    @property
    def memory_used(self) -> int:
        return self._resident_bytes

    def _fits(self, extra: int, what: str, transient=()) -> None:
        need = self._resident_bytes + extra
        if need <= self.hbm_capacity:
            return
        held = sorted(((n, k) for k, (n, _) in self.resident.items()), reverse=True)
        held += sorted(transient, reverse=True)
        top = ", ".join(f"`{k}` {_mib(n)}" for n, k in held[:5])
        more = f" and {len(held) - 5} more" if len(held) > 5 else ""
        raise OutOfMemory(f"device {self.rank} ({self.profile.name}): {what} needs {_mib(need)} of its "
                          f"{_mib(self.hbm_capacity)} HBM; the largest buffers: {top or 'none'}{more}\n"
                          "hint: free resident buffers (device.free(name)), shard the tensors over more devices, or "
                          "give the system more memory (System(..., hbm_bytes=N))")

    def _launch_fits(self, name: str, arrays) -> None:
        """The launch's arrays that are not resident must fit beside the resident ones."""
        total = sum(a.nbytes for a in arrays.values())
        if self._resident_bytes + total <= self.hbm_capacity:
            return
        ids = {id(a) for _, a in self.resident.values() if a is not None}
        bases = set()
        extra, items = 0, []
        for q, a in arrays.items():
            b = a.base if a.base is not None else a
            if id(a) in ids or id(b) in ids or id(b) in bases:
                continue
            bases.add(id(b))
            extra += a.nbytes
            items.append((a.nbytes, f"argument {q} of {name}"))
        self._fits(extra, f"launching `{name}`", items)

    # ---- the compute stream ----------------------------------------------------------------------------------
    def _dependencies(self, arrays) -> None:
        """A launch that touches memory a collective issued without waiting still writes waits for it (the stream
        event a real program would record)."""
        if not self._pending:
            return
        for a in arrays:
            lo = a.__array_interface__["data"][0]
            hi = lo + a.nbytes
            for plo, phi, rec in self._pending:
                if lo < phi and plo < hi:
                    self.wait(rec)
        self._pending = [p for p in self._pending if p[2].end_us > self.clock_us]

    def pending_outputs(self, record, arrays) -> None:
        """``arrays`` are written by ``record``, issued without waiting: launches reading them wait for it."""
        if record.end_us <= self.clock_us:
            return
        for a in arrays:
            lo = a.__array_interface__["data"][0]
            self._pending.append((lo, lo + a.nbytes, record))

    def pending_done(self, record) -> None:
        self._pending = [p for p in self._pending if p[2] is not record]

    def run(self, bc, arrays, *, trace=None, name=None, alias_groups=None):
        self._launch_fits(name or bc.kernels[0].name, arrays)
        self._dependencies(arrays.values())
        start = self.clock_us
        with shmem.launching(self, bc) as ctx:
            rec = super().run(bc, arrays, trace=trace, name=name, alias_groups=alias_groups)
        self._ran(rec, start)
        if ctx.sent:
            self._sent(ctx, rec, start)
        return rec

    def _sent(self, ctx, rec, start: float) -> None:
        """What a launch stored into and signalled on its peers, as a record of the links it used."""
        transfers = []
        for peer, nb in sorted(ctx.sent.items()):
            lo, hi = ctx.window.get(peer, (start, self.clock_us))  # (flags alone: over the whole launch)
            transfers.append(coll.Transfer(self.rank, peer, nb, self.system.topology.fabric(self.rank, peer).name,
                                           lo, hi, 0))
        r = coll.CommRecord("remote", rec.name, (self.rank, *sorted(ctx.sent)), int(sum(ctx.sent.values())), start,
                            self.clock_us, 0.0, [(f"kernel {rec.name}", start, self.clock_us)], transfers,
                            seq=len(self.system.records) + 1, tag="kernel", topology=self.system.topology)
        self.comm_bytes += r.nbytes
        self.events.append(("comm", r))
        self.system.records.append(r)
        note_comm(r)

    def run_stack(self, stages, *, name, trace=None):
        for stage in stages:
            for bc, arrays, kname, _ in stage:
                self._launch_fits(kname, arrays)
                self._dependencies(arrays.values())
        start = self.clock_us
        with shmem.launching(self, stages[0][0][0]) as ctx:
            rec = super().run_stack(stages, name=name, trace=trace)
        self._ran(rec, start)
        if ctx.sent:
            self._sent(ctx, rec, start)
        return rec

    def _ran(self, rec, start: float) -> None:
        rec.rank, rec.start_us = self.rank, start  # (where and when it ran: the system trace reads them)
        self.clock_us = start + rec.time_us
        self.events.append(("launch", rec, start, self.clock_us))

    # ---- the communication stream ----------------------------------------------------------------------------
    def ready_us(self) -> float:
        """When this rank can start a collective issued now: its compute clock, and its stream free."""
        return max(self.clock_us, self.comm_free_us)

    def joined(self, record: coll.CommRecord, wait: bool = True) -> None:
        """Account ``record`` (which this rank took part in) to this device: its stream is busy until the end,
        and its clock waits for it unless the collective was issued without waiting (``wait`` later)."""
        self.comm_free_us = max(self.comm_free_us, record.end_us)
        self.comm_us += record.time_us
        self.comm_bytes += sum(t.nbytes for t in record.transfers if t.src == self.rank)
        self.events.append(("comm", record))
        if wait:
            self.wait(record)

    def wait(self, record) -> None:
        """The compute stream waits for ``record`` (a collective issued without waiting) to end."""
        self.clock_us = max(self.clock_us, record.end_us)
        if self._pending:
            self.pending_done(record)

    def comm_summary(self) -> dict:
        return {"comm_us": self.comm_us, "comm_bytes": self.comm_bytes, "clock_us": self.clock_us}


class System:
    """``n`` simulated NPUs of ``profile`` on ``topology`` (``"910B"``: servers of 8 joined by HCCS inside and
    RoCE between; ``"A3"``). ``hbm_bytes``: each device's HBM (default: the profile's). Other keywords are
    ``Device`` options (debug, race_detection, watchdog, ...). ``timeout_s``: how long a rank waits for a peer
    (``spmd`` and the torch backend's thread mode) before ``CollectiveTimeout``."""

    def __init__(self, n: int = 8, profile=None, topology=None, *, hbm_bytes: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, **device_options):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise DvmError(f"a system needs a positive number of devices, got {n!r}")
        self.profile = get_profile(profile)
        self.topology = get_topology(topology)
        self.timeout_s = float(timeout_s)
        cap = self.profile.hbm_bytes if hbm_bytes is None else int(hbm_bytes)
        self.devices = [SystemDevice(self, r, self.profile, cap, **device_options) for r in range(int(n))]
        self.records: list[coll.CommRecord] = []
        self.gamma_us = coll.gamma_us_per_byte(self.profile)
        self._seq = 0
        # ranks running as threads (spmd): one runs at a time (`_cond`'s lock); a blocked rank waits on `_cond`
        self._cond = threading.Condition(threading.Lock())
        self._epoch = 0
        self._running: set = set()
        self._waiting: dict = {}
        self._failed: dict = {}
        self._finished: set = set()
        self._slots: dict = {}
        self._symmetric: dict = {}  # data address -> (symmetric buffer, rank)
        self.link_free: dict = {}  # link -> when (us) the kernels' remote transfers queued on it are done

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, rank: int) -> SystemDevice:
        return self.devices[rank]

    def __iter__(self):
        return iter(self.devices)

    def __repr__(self) -> str:
        return f"<dvmlang.npu.System {len(self)} x {self.profile.name} on {self.topology.name}>"

    # ---- collectives, one process driving every device -------------------------------------------------------
    def _ranks(self, ranks, count):
        ranks = list(range(len(self))) if ranks is None else [int(r) for r in ranks]
        if len(set(ranks)) != len(ranks) or not all(0 <= r < len(self) for r in ranks):
            raise DvmError(f"ranks must be distinct ranks of 0..{len(self) - 1}, got {ranks}")
        if count is not None and count != len(ranks):
            raise DvmError(f"expected one array per rank of {ranks} ({len(ranks)}), got {count}")
        return ranks

    def schedule(self, plan, ranks, *, wait: bool = True, tag: str = "") -> coll.CommRecord:
        """Time ``plan`` among ``ranks`` from where their clocks and streams are, and account it to them."""
        ready = [self.devices[r].ready_us() for r in ranks]
        self._seq += 1
        rec = coll.CommRecord.timed(plan, self.topology, max(ready, default=0.0), self.gamma_us, seq=self._seq,
                                    tag=tag)
        for r in set(ranks) | {t.src for t in rec.transfers} | {t.dst for t in rec.transfers}:
            self.devices[r].joined(rec, wait)
        self.records.append(rec)
        note_comm(rec)
        return rec

    @staticmethod
    def _check_same(xs, what):
        first = xs[0]
        for i, x in enumerate(xs[1:], 1):
            if x.shape != first.shape or x.dtype != first.dtype:
                raise DvmError(f"{what}: every rank's array must have one shape and dtype; rank position 0 has "
                               f"{first.shape} {first.dtype}, position {i} has {x.shape} {x.dtype}")

    def all_reduce(self, xs, op: str = "sum", *, ranks=None, wait: bool = True) -> list:
        """Every rank's array reduced element-wise (``op``: sum, prod, min, max, band, bor, bxor, avg); each rank
        gets its own copy of the result."""
        xs = [np.asarray(x) for x in xs]
        ranks = self._ranks(ranks, len(xs))
        self._check_same(xs, "all_reduce")
        out = coll.reduce(xs, op)
        self.schedule(coll.plan("all_reduce", ranks, self.topology, xs[0].nbytes), ranks, wait=wait)
        return [out.copy() for _ in ranks]

    def reduce_scatter(self, xs, op: str = "sum", *, ranks=None, wait: bool = True) -> list:
        """Rank i gets block i (along axis 0, which the rank count must divide) of the reduction."""
        xs = [np.asarray(x) for x in xs]
        ranks = self._ranks(ranks, len(xs))
        self._check_same(xs, "reduce_scatter")
        p = len(ranks)
        if xs[0].ndim == 0 or xs[0].shape[0] % p:
            raise DvmError(f"reduce_scatter: axis 0 of {xs[0].shape} must divide into {p} equal blocks")
        out = coll.reduce(xs, op)
        self.schedule(coll.plan("reduce_scatter", ranks, self.topology, xs[0].nbytes), ranks, wait=wait)
        return [b.copy() for b in np.split(out, p)]

    def all_gather(self, xs, *, ranks=None, wait: bool = True) -> list:
        """Every rank gets the ranks' arrays concatenated along axis 0."""
        xs = [np.asarray(x) for x in xs]
        ranks = self._ranks(ranks, len(xs))
        self._check_same(xs, "all_gather")
        out = np.concatenate(xs) if xs[0].ndim else np.stack(xs)
        self.schedule(coll.plan("all_gather", ranks, self.topology, out.nbytes), ranks, wait=wait)
        return [out.copy() for _ in ranks]

    def broadcast(self, xs, root: int = 0, *, ranks=None, wait: bool = True) -> list:
        """Every rank gets a copy of ``root``'s array (``xs``: one array per rank, or the root's alone)."""
        ranks = self._ranks(ranks, None)
        if root not in ranks:
            raise DvmError(f"broadcast root {root} is not one of the ranks {ranks}")
        src = np.asarray(xs[ranks.index(root)] if isinstance(xs, (list, tuple)) else xs)
        self.schedule(coll.plan("broadcast", ranks, self.topology, src.nbytes, root=root), ranks, wait=wait)
        return [src.copy() for _ in ranks]

    def all_to_all(self, xs, *, splits=None, ranks=None, wait: bool = True) -> list:
        """Rank i sends block j of its array (along axis 0) to rank j and gets the blocks the others sent it,
        concatenated in rank order. ``splits[i][j]``: the rows rank i sends to rank j (uneven blocks allowed;
        default: equal blocks)."""
        xs = [np.asarray(x) for x in xs]
        ranks = self._ranks(ranks, len(xs))
        p = len(ranks)
        if splits is None:
            for x in xs:
                if x.ndim == 0 or x.shape[0] % p:
                    raise DvmError(f"all_to_all: axis 0 of {x.shape} must divide into {p} blocks, or pass splits")
            splits = [[x.shape[0] // p] * p for x in xs]
        splits = [[int(v) for v in row] for row in splits]
        if len(splits) != p or any(len(row) != p for row in splits):
            raise DvmError(f"all_to_all: splits must be {p} rows of {p} counts, got {splits}")
        for i, (x, row) in enumerate(zip(xs, splits)):
            if any(v < 0 for v in row) or sum(row) != (x.shape[0] if x.ndim else 0):
                raise DvmError(f"all_to_all: rank position {i} sends {row} rows, which must be >= 0 and sum to its "
                               f"{x.shape[0] if x.ndim else 0} rows")
        blocks = [np.split(x, np.cumsum(row)[:-1]) for x, row in zip(xs, splits)]
        out = [np.concatenate([blocks[i][j] for i in range(p)]) for j in range(p)]
        row_bytes = [x.nbytes // max(1, x.shape[0]) for x in xs]
        matrix = [[splits[i][j] * row_bytes[i] for j in range(p)] for i in range(p)]
        self.schedule(coll.plan("all_to_all", ranks, self.topology, matrix=matrix), ranks, wait=wait)
        return out

    def send(self, x, src: int, dst: int, *, wait: bool = True) -> np.ndarray:
        """``x`` from rank ``src`` to rank ``dst`` (returns dst's copy); both ranks' clocks meet at the send."""
        x = np.asarray(x)
        self._ranks([src, dst], None)
        self.schedule(coll.plan("send", [src, dst], self.topology, x.nbytes, src=src, dst=dst), [src, dst], wait=wait)
        return x.copy()

    def barrier(self, *, ranks=None) -> None:
        ranks = self._ranks(ranks, None)
        self.schedule(coll.plan("barrier", ranks, self.topology), ranks)

    def symmetric(self, shape, dtype="float32", *, name: str | None = None, fill=0) -> "shmem.Symmetric":
        """A buffer on every device (resident in each one's HBM): ``buf[rank]`` is rank's array. Kernels that
        communicate (``dl.remote_store``, ``dl.signal``, ``dl.wait``) take their rank's array of such buffers."""
        sym = shmem.Symmetric(self, shape, dtype, name or f"symmetric{len(self._symmetric) // max(1, len(self))}",
                              fill)
        shmem.register(self, sym)
        return sym

    def time_collective(self, op: str, nbytes: int, *, ranks=None, **kw) -> coll.CommRecord:
        """The record of ``op`` of ``nbytes`` among ``ranks`` started at time 0, without data or clocks: what the
        calibration compares with published figures (``nbytes`` as ``collectives.plan`` defines it)."""
        ranks = self._ranks(ranks, None)
        return coll.CommRecord.timed(coll.plan(op, ranks, self.topology, nbytes, **kw), self.topology, 0.0,
                                     self.gamma_us)

    def sync(self) -> float:
        """Bring every device's clock to the latest (the host waits for all of them); returns it."""
        t = max(max(d.clock_us, d.comm_free_us) for d in self.devices)
        for d in self.devices:
            d.clock_us = t
        return t

    @property
    def now_us(self) -> float:
        return max(max(d.clock_us, d.comm_free_us) for d in self.devices)

    # ---- ranks as threads --------------------------------------------------------------------------------------
    def spmd(self, fn, ranks=None):
        """Run ``fn(rank)`` for every rank on a thread of its own, each with its device as the default, and return
        the results in rank order. One rank runs at a time; a rank blocked on a peer (a collective, a kernel's
        ``dl.wait``) lets the others run. The first failure is raised once every rank has stopped; a rank that
        waits for a failed one gets a ``PeerError`` naming it."""
        ranks = self._ranks(ranks, None)
        results, errors = {}, {}
        with self._cond:
            self._running = set(ranks)
            self._failed, self._finished, self._waiting, self._slots = {}, set(), {}, {}
        contexts = thread_contexts()

        def body(rank):
            with self._cond:
                try:
                    with self.devices[rank], entered(contexts):
                        results[rank] = fn(rank)
                except BaseException as e:  # noqa: BLE001 - reported to the peers, then raised below
                    errors[rank] = e
                    self._failed[rank] = e
                finally:
                    self._running.discard(rank)
                    self._finished.add(rank)
                    self._changed()

        threads = [threading.Thread(target=body, args=(r,), name=f"dvmlang-rank{r}", daemon=True) for r in ranks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            first = min(errors, key=lambda r: (isinstance(errors[r], PeerError), r))
            raise errors[first]
        return [results[r] for r in ranks]

    def _changed(self) -> None:
        """Something a blocked rank may wait for happened (a rank thread calls it with ``_cond`` held; off the
        ranks' threads nobody waits)."""
        self._epoch += 1
        if self._cond._is_owned():
            self._cond.notify_all()

    def block(self, rank: int, ready, what: str, peers, timeout_s: float | None = None, finished: bool = True):
        """Wait (``_cond`` held, on a rank's thread) until ``ready()`` is true. Raises ``PeerError`` when a peer it
        waits for failed (or, with ``finished``, ended), a ``DeviceError`` when every running rank waits (a
        deadlock) or the caller is no rank of ``spmd`` (nothing else can run while it waits), and
        ``CollectiveTimeout`` after ``timeout_s``."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if ready():
                self._waiting.pop(rank, None)
                return
            if rank not in self._running or not self._cond._is_owned():
                raise DeviceError(f"rank {rank}: {what}, but nothing else runs while it waits\nhint: run the ranks "
                                  "side by side with system.spmd(fn) (or dvmlang.torch.distributed.run)")
            for p in peers:
                if p in self._failed and p != rank:
                    raise PeerError(f"rank {rank}: {what} cannot complete: rank {p} failed: "
                                    f"{type(self._failed[p]).__name__}: {str(self._failed[p]).splitlines()[0]}")
                if finished and p in self._finished and p != rank:
                    raise PeerError(f"rank {rank}: {what} cannot complete: rank {p} finished without taking part")
            self._waiting[rank] = (self._epoch, what)
            if self._running and all(self._waiting.get(r, (None,))[0] == self._epoch for r in self._running):
                if self._running == {rank} and self._finished:
                    raise PeerError(f"rank {rank}: {what} cannot complete: every other rank has ended "
                                    f"({', '.join(f'rank {r}' for r in sorted(self._finished))})")
                waits = "; ".join(f"rank {r} waits for {self._waiting[r][1]}" for r in sorted(self._running))
                raise DeviceError(f"deadlock: every running rank is waiting and none can go on: {waits}\n"
                                  "hint: a kernel that waits for a signal needs the rank that sends it running "
                                  "beside it (launch both in system.spmd); collectives need every rank of the "
                                  "group to call them in the same order")
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [p for p in peers if p != rank and p not in self._running] or \
                          [p for p in peers if p != rank]
                raise CollectiveTimeout(f"rank {rank}: {what} timed out after {self.timeout_s:g} s waiting for "
                                        f"rank(s) {missing}")
            self._cond.wait(min(left, 1.0))

    def exchange(self, key, rank: int, members, item, what: str):
        """Every member of a group hands in ``item`` under ``key`` and gets every member's, in member order (a rank
        thread's rendezvous; ``_cond`` held)."""
        slot = self._slots.setdefault(key, {"items": {}, "taken": 0})
        slot["items"][rank] = item
        self._changed()
        self.block(rank, lambda: len(slot["items"]) == len(members), what,
                   [m for m in members if m not in slot["items"]])
        out = [slot["items"][m] for m in members]
        slot["taken"] += 1
        if slot["taken"] == len(members):
            del self._slots[key]
        return out

    # ---- what happened -----------------------------------------------------------------------------------------
    def summary(self) -> dict:
        """Per device: compute and communication time, bytes sent; per link: bytes and utilisation."""
        from .commstats import summarize
        return summarize(self)


# Hooks for the rooms above (the trace sessions register theirs): every collective's record is told to each of
# COMM_LISTENERS; each of THREAD_CONTEXTS is called on the thread that starts ranks and gives a context manager
# entered on every rank's thread (so a trace session open there records the ranks' launches too).
COMM_LISTENERS: list = []
THREAD_CONTEXTS: list = []


def note_comm(rec) -> None:
    for fn in list(COMM_LISTENERS):
        fn(rec)


def thread_contexts() -> list:
    """The context managers to enter on a rank thread, made on the calling thread."""
    return [make() for make in THREAD_CONTEXTS]


class entered:
    """Enter ``contexts`` (from ``thread_contexts``) on a rank's thread."""

    def __init__(self, contexts):
        self.contexts = contexts

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.contexts):
            c.__exit__(*exc)
        return False
