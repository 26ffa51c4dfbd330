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

_MTE3 = int(isa.Pipe.MTE3)
_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}


def _sop(m, d, name):
    is_reg, x = sop_parts(d.vals[name], d.ins.kinds[name])
    return (lambda b: b.regs[x]) if is_reg else (lambda b: x)


def _start(b, pipe: int, dispatch: int, port: bool):
    """When a step on ``pipe`` would start (before events it waits for): what ``timing.advance`` works out."""
    s = np.maximum(b.t_issue + dispatch, b.pipe_free[pipe])
    return np.maximum(s, b.port_free) if port else s


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
    item = dd.itemsize

    def fn(b, L):
        ctx = context()
        g, off, msk = elements(b, L)
        src = np.broadcast_to(rs(b, L), off.shape)
        peers = _per_program(peer_of(b), b.n)
        sym = None
        cycles = np.zeros(b.n)
        cnt, nbytes = _moved(b, g, msk)
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (b.n,))
        for peer in np.unique(peers):
            peer = int(peer)
            sym = sym or ctx.peer_array(g, peer, "dl.remote_store")
            rows = np.nonzero(peers == peer)[0]
            target = sym.arrays[peer].reshape(-1)
            if peer == ctx.rank:
                materialise_views(b, L, t)
            for i in rows:
                keep = msk[i]
                target[off[i][keep]] = src[i][keep]
            sent = float(nbytes[rows].sum())
            if peer != ctx.rank:
                ctx.sent[peer] = ctx.sent.get(peer, 0.0) + sent
                rate, _ = ctx.link(peer)
                cycles[rows] = cost(nbytes=nbytes[rows], rate=rate, latency=0.0)
            else:
                cycles[rows] = cost(nbytes=nbytes[rows], rate=L.rates.write(t, _total(nbytes[rows], len(rows))),
                                    latency=0.0)
        b.bytes_written += nbytes if b.n > 1 else float(nbytes[0])
        first = cycles[0]
        return first if (cycles == first).all() else cycles
    return m.step(d, fn, None)


@builds("signal")
def signal(m, d):
    t = d.vals["tensor"]
    op = isa.SIGNAL_OPS[d.vals["op"]]
    off_of, peer_of, val_of = (_sop(m, d, n) for n in ("offset", "peer", "value"))
    cost = m.formula(d)
    pc = d.pc

    def fn(b, L):
        ctx = context()
        g = L.arrays[t]
        offs, peers, vals = (_per_program(f(b), b.n) for f in (off_of, peer_of, val_of))
        if ((offs < 0) | (offs >= g.size)).any():
            bad = int(offs[(offs < 0) | (offs >= g.size)][0])
            raise LaunchError(f"kernel `{L.name}`: dl.signal flag {bad} is outside the {g.size} flags of its "
                              f"tensor{L.where(pc)}")
        rates = [ctx.link(int(p)) if int(p) != ctx.rank else (1e9, 0.0) for p in peers]
        busy = cost(nbytes=g.itemsize, rate=min(r for r, _ in rates), latency=0.0)
        start = _start(b, _MTE3, L.profile.scalar_dispatch, True)
        arrive = ctx.us(np.broadcast_to(start, (b.n,)) + busy + L.profile.dma_latency +
                        np.array([lat for _, lat in rates]))
        sym = ctx.peer_array(g, int(peers[0]), "dl.signal")
        for i in range(b.n):  # program order: every program's flag, as the programs would
            p, o = int(peers[i]), int(offs[i])
            if not 0 <= p < len(sym):
                ctx.peer_array(g, p, "dl.signal")  # (raises: no such rank)
            flags = sym.arrays[p].reshape(-1)
            flags[o] = vals[i] if op == "set" else flags[o] + vals[i]
            sym.times[p][o] = max(sym.times[p][o], float(arrive[i]))
            if p != ctx.rank:
                ctx.sent[p] = ctx.sent.get(p, 0.0) + g.itemsize
        ctx.system._changed()
        return busy
    return m.step(d, fn, None)


@builds("wait_signal")
def wait_signal(m, d):
    t = d.vals["tensor"]
    cmp = _CMP[isa.CC_NAMES[d.vals["cc"]]]
    off_of, val_of = _sop(m, d, "offset"), _sop(m, d, "value")
    pc = d.pc

    def fn(b, L):
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
        start = _start(b, 0, L.profile.scalar_dispatch, False)
        arrived = ctx.cycles(sym.times[ctx.rank][offs])
        cycles = np.maximum(arrived - start, 0.0) + 1.0
        first = cycles[0]
        return float(first) if (cycles == first).all() else cycles
    return m.step(d, fn, None)
