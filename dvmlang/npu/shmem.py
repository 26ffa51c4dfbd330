"""Memory that kernels on different NPUs of a system share: symmetric buffers, and the context of a launch that
stores into, signals and waits on them (``dl.remote_store``, ``dl.signal``, ``dl.wait``).

``system.symmetric(shape, dtype)`` allocates one buffer per device (resident in each device's HBM). A rank's
kernel takes its own array; an instruction that names a peer finds the peer's array of the same buffer through
the system (by the array's address). While a ``SystemDevice`` runs a launch, ``context()`` on that thread is the
launch's ``Launching``: its rank, when it started (to turn the programs' cycles into the system's time), the
links it may use, and the bytes it sent.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import DeviceError, DvmError, LaunchError

_HERE = threading.local()


class Symmetric:
    """One buffer on every device of a system: ``arrays[rank]`` (and ``buf[rank]``), plus, per element, the
    simulated time (us) it was last signalled, for flags."""

    def __init__(self, system, shape, dtype, name: str, fill=0):
        self.system = system
        self.name = name
        self.arrays = [d.alloc(shape, dtype, name=name, fill=fill) for d in system.devices]
        self.times = [np.zeros(a.size) for a in self.arrays]

    def __getitem__(self, rank: int) -> np.ndarray:
        return self.arrays[rank]

    def __len__(self) -> int:
        return len(self.arrays)

    def reset(self, fill=0) -> None:
        """Every rank's array set to ``fill`` and its signal times cleared (a flag buffer between launches)."""
        for a, t in zip(self.arrays, self.times):
            a[...] = fill
            t[...] = 0.0

    def __repr__(self) -> str:
        a = self.arrays[0]
        return f"<Symmetric {self.name} {a.shape} {a.dtype} on {len(self)} devices>"


def register(system, sym: Symmetric) -> None:
    for rank, a in enumerate(sym.arrays):
        system._symmetric[a.__array_interface__["data"][0]] = (sym, rank)


def find(system, arr: np.ndarray):
    """(symmetric buffer, rank) whose array ``arr`` is (or views from its first element), or None."""
    return system._symmetric.get(arr.__array_interface__["data"][0])


class Launching:
    """A launch running on a ``SystemDevice`` (``context()`` on its thread)."""

    def __init__(self, device, bc):
        self.device = device
        self.system = device.system
        self.rank = device.rank
        prof = device.profile
        self.clock_hz = prof.clock_hz
        self.start_us = device.clock_us
        self.overhead = prof.launch_overhead_cycles
        k = bc.kernels[0]
        programs = k.grid[0] * k.grid[1] * k.grid[2]
        self.cores = prof.cube_cores if k.mix else prof.vector_cores
        self.programs = programs
        self.active = max(1, min(programs, self.cores))
        self.sent: dict = {}  # peer -> bytes
        self.window: dict = {}  # peer -> (first, last) us the link carried this launch's transfers
        self._landed: dict = {}  # peer -> program id -> cycle its latest remote store there is carried by
        self.name = k.name

    def us(self, cycles):
        """The system time (us) of a program's cycle count (programs of the first wave start after the launch
        overhead)."""
        return self.start_us + (self.overhead + np.asarray(cycles, dtype=np.float64)) / self.clock_hz * 1e6

    def cycles(self, us):
        return (np.asarray(us, dtype=np.float64) - self.start_us) * self.clock_hz * 1e-6 - self.overhead

    def peer_array(self, local: np.ndarray, peer: int, what: str):
        found = find(self.system, local)
        if found is None:
            raise DvmError(f"kernel `{self.name}` on rank {self.rank}: {what} names a tensor that is not a symmetric "
                           "buffer\nhint: allocate it with system.symmetric(shape, dtype) and pass each rank its "
                           "own array (buf[rank])")
        sym, owner = found
        if owner != self.rank:
            raise DvmError(f"kernel `{self.name}` on rank {self.rank}: {what} names rank {owner}'s array of "
                           f"symmetric buffer `{sym.name}`; pass this rank's own (buf[{self.rank}])")
        if not 0 <= peer < len(sym):
            raise DeviceError(f"kernel `{self.name}` on rank {self.rank}: {what} to rank {peer}, but the system has "
                              f"{len(sym)} devices (ranks 0-{len(sym) - 1})")
        return sym

    def link(self, peer: int):
        """(the link a transfer to ``peer`` queues on, its sustained rate in bytes per us, its latency in us): a mesh
        gives each peer its own link, a port is one per device for everything it sends."""
        fab = self.system.topology.fabric(self.rank, peer)
        key = (fab.name, self.rank, peer) if fab.kind == "mesh" else (fab.name, self.rank, "out")
        return key, fab.bytes_per_s * 1e-6, fab.latency_us

    def send(self, peer: int, start_cycles, nbytes):
        """Queue transfers to ``peer`` (one per program: when each starts, in the program's cycles, and its bytes)
        on the link, first come first served, each at the link's sustained rate: when each is carried, in cycles.
        The link is the system's, so the launches of every rank that use it share it. (The core does not wait for
        the link: what it has pushed out waits in the fabric; a signal after it waits for it to land.)"""
        key, rate, _ = self.link(peer)
        start = np.asarray(start_cycles, dtype=np.float64).reshape(-1)
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64).reshape(-1), start.shape)
        t = self.us(start)
        done = np.empty_like(t)
        free = self.system.link_free.get(key, 0.0)
        first = np.inf
        for i in np.argsort(t, kind="stable"):
            s = max(t[i], free)
            first = min(first, s)
            free = done[i] = s + nb[i] / rate
        self.system.link_free[key] = free
        lo, hi = self.window.get(peer, (np.inf, 0.0))
        self.window[peer] = (float(min(lo, first)), float(max(hi, free)))
        self.sent[peer] = self.sent.get(peer, 0.0) + float(nb.sum())
        return self.cycles(done)

    def land(self, peer: int, pids, done) -> None:
        """Programs ``pids``' stores to ``peer`` are carried by ``done`` (cycles, one each)."""
        seen = self._landed.setdefault(peer, {})
        for p, t in zip(np.asarray(pids).reshape(-1).tolist(), np.broadcast_to(done, (len(np.atleast_1d(pids)),))):
            seen[p] = max(seen.get(p, 0.0), float(t))

    def landed(self, peer: int, pids) -> np.ndarray:
        """When programs ``pids``' stores to ``peer`` so far are carried (cycles; 0 for none)."""
        seen = self._landed.get(peer, {})
        return np.array([seen.get(p, 0.0) for p in np.asarray(pids).reshape(-1).tolist()])


def context() -> Launching:
    ctx = getattr(_HERE, "ctx", None)
    if ctx is None:
        raise LaunchError("a kernel that uses dl.remote_store, dl.signal or dl.wait must run on a device of a "
                          "dvmlang.npu.System (kernel[grid](..., device=system[rank]), or inside system.spmd)")
    return ctx


class launching:
    """The context of a launch of ``bc`` on ``device`` while it runs (on this thread)."""

    def __init__(self, device, bc):
        self.ctx = Launching(device, bc)

    def __enter__(self):
        self.prev = getattr(_HERE, "ctx", None)
        _HERE.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc):
        _HERE.ctx = self.prev
        return False
