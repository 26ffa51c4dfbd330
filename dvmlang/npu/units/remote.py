"""Step builders for communication between devices: REMOTE_STORE (MTE3, into a peer's symmetric tensor), SIGNAL
(MTE3, a peer's flag, after the program's earlier remote stores) and WAIT_SIGNAL (the scalar unit, until this
device's flag holds).

The data moves on the host at once, in program order (the peer's thread sees it when it looks); the time is the
system's: a signal carries the simulated time it reaches the peer (``npu.shmem``), and a wait lasts until that
time. A wait blocks this rank's thread until a peer's thread has sent the signal (``System.block``)."""

from __future__ import annotations

import numpy as np

from ...errors import LaunchError
from ...vm import isa
from ...vm.decode import sop_parts
from ..shmem import context
from ..state import materialise_views
from ..timing import _total
from .memory import _elements, _moved
from .registry import builds

_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}


def _sop(m, d, name):
    is_reg, x = sop_parts(d.vals[name], d.ins.kinds[name])
    return (lambda b: b.regs[x]) if is_reg else (lambda b: x)


def _start(b, step, dispatch: int):
    """When ``step`` will start: its pipe free, the scalar unit's issue, the event it waits for, as
    ``timing.advance`` works it out (a remote step's time depends on it: it ends when the link or the signal
    allows)."""
    s = np.maximum(b.t_issue + dispatch, b.pipe_free[step.pipe])
    if step.port:
        s = np.maximum(s, b.port_free)
    if step.wait_key is not None:
        f = b.flags.get(step.wait_key)
        if f is not None:
            s = np.maximum(s, f)
    return s


def _step(m, d, make):
    """The step of ``d`` whose function ``make(step)`` returns (the function reads its own step's timing)."""
    holder = []
    step = m.step(d, lambda b, L: holder[0](b, L), None)
    holder.append(make(step))
    return step


def _by_peer(peers: np.ndarray):
    """(peer, the batch rows that address it) for every peer the batch's programs name, lowest first."""
    for peer in np.unique(peers):
        yield int(peer), np.nonzero(peers == peer)[0]


def _per_program(x, n: int) -> np.ndarray:
    a = np.asarray(x)
    return np.broadcast_to(a.reshape(-1) if a.ndim else a, (n,)).astype(np.int64)


@builds("remote_store")
def remote_store(m, d):
    _, dd, shape = m.layout(d.vals["src"])
    rs = m.reader(d.vals["src"])
    elements = _elements(m, d, shape)
    peer_of = _sop(m, d, "peer")
    t = d.vals["tensor"]
    cost = m.formula(d)

    def make(step):
        return lambda b, L: fn(b, L, step)

    def fn(b, L, step):
        ctx = context()
        g, off, msk = elements(b, L)
        src = np.broadcast_to(rs(b, L), off.shape)
        peers = _per_program(peer_of(b), b.n)
        _, nbytes = _moved(b, g, msk)
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (b.n,))
        start = np.broadcast_to(_start(b, step, L.profile.scalar_dispatch), (b.n,))
        cycles = np.zeros(b.n)
        sym = None
        for peer, rows in _by_peer(peers):
            sym = sym or ctx.peer_array(g, peer, "dl.remote_store")
            if not 0 <= peer < len(sym):
                ctx.peer_array(g, peer, "dl.remote_store")  # (raises: no such rank)
            target = sym.arrays[peer].reshape(-1)
            if peer == ctx.rank:
                materialise_views(b, L, t)
            for i in rows:  # program order
                keep = msk[i]
                target[off[i][keep]] = src[i][keep]
            if peer == ctx.rank:  # into this device's own memory
                rate = L.rates.write(t, _total(nbytes[rows], len(rows)))
            else:  # the core pushes the tile out at its DMA rate (at most the link's); the link carries it
                rate = min(L.profile.mte_bytes_per_cycle, ctx.link(peer)[1] / ctx.clock_hz * 1e6)
                ctx.land(peer, b.pids[rows] if b.n > 1 else b.pids, ctx.send(peer, start[rows], nbytes[rows]))
            cycles[rows] = cost(nbytes=nbytes[rows], rate=rate, latency=0.0)
        b.bytes_written += nbytes if b.n > 1 else float(nbytes[0])
        first = cycles[0]
        return float(first) if (cycles == first).all() else cycles
    return _step(m, d, make)


@builds("signal")
def signal(m, d):
    t = d.vals["tensor"]
    op = isa.SIGNAL_OPS[d.vals["op"]]
    off_of, peer_of, val_of = (_sop(m, d, n) for n in ("offset", "peer", "value"))
    pc = d.pc

    def make(step):
        return lambda b, L: fn(b, L, step)

    def fn(b, L, step):
        ctx = context()
        g = L.arrays[t]
        offs, peers, vals = (_per_program(f(b), b.n) for f in (off_of, peer_of, val_of))
        if ((offs < 0) | (offs >= g.size)).any():
            bad = int(offs[(offs < 0) | (offs >= g.size)][0])
            raise LaunchError(f"kernel `{L.name}`: dl.signal flag {bad} is outside the {g.size} flags of its "
                              f"tensor{L.where(pc)}")
        start = np.broadcast_to(_start(b, step, L.profile.scalar_dispatch), (b.n,))
        done = start + 1.0
        arrive = np.empty(b.n)
        sym = ctx.peer_array(g, int(peers[0]), "dl.signal")
        for peer, rows in _by_peer(peers):
            if not 0 <= peer < len(sym):
                ctx.peer_array(g, peer, "dl.signal")  # (raises: no such rank)
            # a flag is a few bytes: it goes between the packets of bulk transfers, not behind them (it follows
            # this program's own stores, which its pipe has finished)
            arrive[rows] = ctx.us(done[rows] + L.profile.dma_latency)
            if peer != ctx.rank:  # after the program's earlier stores to the peer have landed
                landed = ctx.landed(peer, b.pids[rows] if b.n > 1 else b.pids)
                arrive[rows] = np.maximum(arrive[rows], ctx.us(landed)) + ctx.link(peer)[2]
                ctx.sent[peer] = ctx.sent.get(peer, 0.0) + g.itemsize * len(rows)
        for i in range(b.n):  # program order: every program's flag, as the programs would set them
            p, o = int(peers[i]), int(offs[i])
            flags = sym.arrays[p].reshape(-1)
            flags[o] = vals[i] if op == "set" else flags[o] + vals[i]
            sym.times[p][o] = max(sym.times[p][o], float(arrive[i]))
        ctx.system._changed()
        cycles = done - start
        first = cycles[0]
        return float(first) if (cycles == first).all() else cycles
    return _step(m, d, make)


@builds("wait_signal")
def wait_signal(m, d):
    t = d.vals["tensor"]
    cmp = _CMP[isa.CC_NAMES[d.vals["cc"]]]
    off_of, val_of = _sop(m, d, "offset"), _sop(m, d, "value")
    pc = d.pc

    def make(step):
        return lambda b, L: fn(b, L, step)

    def fn(b, L, step):
        ctx = context()
        if ctx.programs > ctx.cores:
            raise LaunchError(f"kernel `{L.name}` waits for signals, so all its programs must run at once, but its "
                              f"grid has {ctx.programs} programs for {ctx.cores} cores (the later ones could not "
                              f"start while the first wait){L.where(pc)}\nhint: launch at most {ctx.cores} programs "
                              "and loop inside the kernel over the work")
        g = L.arrays[t]
        sym = ctx.peer_array(g, ctx.rank, "dl.wait")
        offs, vals = _per_program(off_of(b), b.n), _per_program(val_of(b), b.n)
        if ((offs < 0) | (offs >= g.size)).any():
            raise LaunchError(f"kernel `{L.name}`: dl.wait flag outside the {g.size} flags of its tensor{L.where(pc)}")
        flags = sym.arrays[ctx.rank].reshape(-1)
        what = (f"kernel `{L.name}` on rank {ctx.rank}: dl.wait for flag(s) {sorted(set(offs.tolist()))[:8]} of "
                f"`{sym.name}` to be {isa.CC_NAMES[d.vals['cc']]} {sorted(set(vals.tolist()))[:4]}")
        others = [r for r in range(len(sym)) if r != ctx.rank]
        ctx.system.block(ctx.rank, lambda: bool(cmp(flags[offs], vals).all()), what, others, finished=False)
        start = _start(b, step, L.profile.scalar_dispatch)
        arrived = ctx.cycles(sym.times[ctx.rank][offs])
        cycles = np.maximum(arrived - start, 0.0) + 1.0
        first = cycles[0]
        return float(first) if (cycles == first).all() else cycles
    return _step(m, d, make)
