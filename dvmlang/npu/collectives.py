"""Collectives between simulated NPUs: their results, computed exactly, and their time, from the algorithm HCCL
runs on the topology at that size.

``plan(op, ranks, topology, ...)`` picks the algorithm as HCCL's selector does (``docs/distributed.md``) and
returns its phases: the transfers each makes (source rank, destination rank, bytes), how many latency steps it
takes and how many bytes the busiest rank reduces. ``CommRecord.timed`` times the phases with HCCL's own
alpha-beta-gamma model on the topology's fabrics: transfers on different links run at once, steps on the same link
or port add up. Nothing here moves data: ``reduce`` and friends compute results from numpy arrays, and
``npu.system`` and the torch backend put the two together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import DvmError
from .topology import Topology

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send", "barrier", "gather",
       "scatter", "reduce")
REDUCE_OPS = ("sum", "prod", "min", "max", "band", "bor", "bxor", "avg")


@dataclass
class Phase:
    """Steps of an algorithm whose transfers (``(src, dst, bytes)``) run at once on different links; the ones that
    share a link or a port run one after another."""

    name: str
    transfers: list
    steps: int
    reduce_bytes: float = 0.0


@dataclass
class Plan:
    op: str
    algorithm: str
    ranks: tuple
    nbytes: int  # the collective's data size on one NPU (HCCL Test's data_size)
    phases: list
    loops: int = 1


@dataclass
class Transfer:
    src: int
    dst: int
    nbytes: float
    fabric: str
    start_us: float
    end_us: float
    phase: int


@dataclass
class CommRecord:
    """One collective (or send/recv) as the system ran it: when, which algorithm, every phase and transfer."""

    op: str
    algorithm: str
    ranks: tuple
    nbytes: int
    start_us: float
    end_us: float
    bound_us: float  # what the bytes on the busiest link take at its line rate: no algorithm is faster
    phases: list = field(default_factory=list)  # (name, start_us, end_us)
    transfers: list = field(default_factory=list)
    seq: int = 0
    tag: str = ""
    topology: object = None  # the topology it ran on (what its links are)

    @property
    def time_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def bytes_moved(self) -> float:
        return float(sum(t.nbytes for t in self.transfers))

    @property
    def alg_bandwidth(self) -> float:
        """HCCL Test's alg_bandwidth, bytes/s: the data size over the time."""
        return self.nbytes / (self.time_us * 1e-6) if self.time_us > 0 else float("inf")

    def __repr__(self) -> str:
        return (f"<{self.op} {self.algorithm} ranks={list(self.ranks)} {self.nbytes} B "
                f"{self.start_us:.2f}->{self.end_us:.2f} us>")

    @classmethod
    def timed(cls, plan: Plan, topology: Topology, start_us: float, gamma_us_per_byte: float, *, seq: int = 0,
              tag: str = "") -> "CommRecord":
        """``plan`` run from ``start_us``: its phases one after another, each taking its steps' latency, its
        busiest link's (or port's) bytes at the sustained rate, and its reduction; a collective larger than the
        topology's buffer repeats its steps once per loop. The launch of the task comes first."""
        t = start_us + topology.launch_us
        rec = cls(plan.op, plan.algorithm, plan.ranks, plan.nbytes, start_us, t, 0.0, seq=seq, tag=tag,
                  topology=topology)
        bound = 0.0
        for i, ph in enumerate(plan.phases):
            move, line, fabrics = _busiest(ph.transfers, topology)
            alpha = max((f.latency_us for f in fabrics), default=topology.intra.latency_us)
            dur = ph.steps * alpha * plan.loops + move + ph.reduce_bytes * gamma_us_per_byte
            rec.phases.append((ph.name, t, t + dur))
            for src, dst, nb in ph.transfers:
                fab = topology.fabric(src, dst)
                rec.transfers.append(Transfer(src, dst, nb, fab.name, t, t + dur, i))
            bound += line
            t += dur
        rec.end_us = t
        rec.bound_us = bound
        return rec


def _busiest(transfers, topology: Topology):
    """(us at the sustained rates, us at the line rates, fabrics used) of the link or port that carries the most
    bytes: a mesh link carries what one rank sends to one other; a port, everything its rank sends (or
    receives)."""
    links: dict = {}
    for src, dst, nb in transfers:
        fab = topology.fabric(src, dst)
        if fab.kind == "mesh":
            keys = ((fab, "link", src, dst),)
        else:
            keys = ((fab, "out", src), (fab, "in", dst))
        for k in keys:
            links[k] = links.get(k, 0.0) + nb
    move = line = 0.0
    for k, nb in links.items():
        fab = k[0]
        move = max(move, nb / fab.bytes_per_s * 1e6)
        line = max(line, nb / fab.line_bytes_per_s * 1e6)
    return move, line, {k[0] for k in links}


# ---- algorithms --------------------------------------------------------------------------------------------------

def _servers(ranks, topology):
    """The group's ranks by server, in order; None when the servers hold different numbers of the group's ranks
    (then HCCL flattens the communicator into one ring)."""
    by: dict = {}
    for r in ranks:
        by.setdefault(topology.server(r), []).append(r)
    groups = list(by.values())
    if len({len(g) for g in groups}) != 1:
        return None
    return groups


def _pairs(ranks, nbytes):
    return [(a, b, nbytes) for a in ranks for b in ranks if a != b]


def _ring(ranks, nbytes_per_step, steps):
    p = len(ranks)
    return [(ranks[i], ranks[(i + 1) % p], nbytes_per_step * steps) for i in range(p)]


def _intra(kind, ranks, n, topology):
    """Phases of a reduce-scatter (``kind="rs"``, n: each rank's input) or an all-gather (``"ag"``, n: each rank's
    output) among ranks of one server."""
    p = len(ranks)
    if p == 1:
        return []
    red = (p - 1) / p * n if kind == "rs" else 0.0
    label = "reduce-scatter" if kind == "rs" else "all-gather"
    fab = topology.intra.name
    if topology.intra_algorithm == "mesh":
        return [Phase(f"{label} ({fab} mesh)", _pairs(ranks, n / p), 1, red)]
    return [Phase(f"{label} ({fab} ring)", _ring(ranks, n / p, p - 1), p - 1, red)]


def _inter(kind, ranks, n):
    """Phases of a reduce-scatter or all-gather among one rank per server (over RoCE): recursive halving or
    doubling when the servers are a power of two, else a ring (HCCL_ALGO level1 H-D_R / ring)."""
    k = len(ranks)
    if k == 1:
        return [], ""
    red = (k - 1) / k * n if kind == "rs" else 0.0
    label = "reduce-scatter" if kind == "rs" else "all-gather"
    if k & (k - 1) == 0:
        steps = int(math.log2(k))
        transfers = []
        for s in range(steps):  # partner at distance 2^s, n / 2^(s+1) bytes (halving; doubling is its mirror)
            d = 1 << s
            nb = n / (1 << (steps - s)) if kind == "ag" else n / (1 << (s + 1))
            transfers += [(ranks[i], ranks[i ^ d], nb) for i in range(k)]
        return [Phase(f"{label} (RoCE RHD)", transfers, steps, red)], "RHD"
    return [Phase(f"{label} (RoCE ring)", _ring(ranks, n / k, k - 1), k - 1, red)], "ring"


def plan(op: str, ranks, topology: Topology, nbytes: int = 0, *, root: int | None = None,
         matrix=None, src: int | None = None, dst: int | None = None) -> Plan:
    """The algorithm HCCL would run for ``op`` among ``ranks`` (global ranks, in group order) on ``topology``.
    ``nbytes``: all_reduce and broadcast, each rank's buffer; reduce_scatter, each rank's input; all_gather,
    each rank's output. all_to_all takes ``matrix[i][j]``, the bytes group rank i sends to group rank j; send
    takes ``src`` and ``dst``; broadcast its ``root`` (a global rank)."""
    ranks = tuple(ranks)
    p = len(ranks)
    n = float(nbytes)
    loops = max(1, math.ceil(nbytes / topology.buffer_bytes)) if nbytes else 1
    if op == "send":
        return Plan(op, "p2p", (src, dst), nbytes, [Phase("send", [(src, dst, n)], 1)])
    if p == 1:
        return Plan(op, "local", ranks, nbytes, [])
    if op == "barrier":
        return Plan(op, "one-shot", ranks, 0, [Phase("barrier", _pairs(ranks, 4.0), 1)])
    if op == "all_to_all":
        return _all_to_all(ranks, topology, matrix)
    groups = _servers(ranks, topology)
    if groups is None:  # uneven servers: HCCL flattens the communicator; a ring over all ranks
        return _flat_ring(op, ranks, n, nbytes, loops, root)
    if len(groups) == 1:
        mesh = topology.intra_algorithm == "mesh"
        if op == "all_reduce":
            if mesh and nbytes <= topology.small_bytes:
                return Plan(op, "mesh one-shot", ranks, nbytes,
                            [Phase(f"reduce ({topology.intra.name} mesh, every rank reads every input)",
                                   _pairs(ranks, n), 1, (p - 1) * n)])
            return Plan(op, topology.intra_algorithm, ranks, nbytes,
                        _intra("rs", ranks, n, topology) + _intra("ag", ranks, n, topology), loops)
        if op == "reduce_scatter":
            return Plan(op, topology.intra_algorithm, ranks, nbytes, _intra("rs", ranks, n, topology), loops)
        if op == "all_gather":
            return Plan(op, topology.intra_algorithm, ranks, nbytes, _intra("ag", ranks, n, topology), loops)
        if op == "broadcast":  # scatter from the root, then an all-gather
            name = topology.intra.name
            scatter = Phase(f"scatter ({name})", [(root, r, n / p) for r in ranks if r != root],
                            1 if mesh else p - 1)
            return Plan(op, topology.intra_algorithm, ranks, nbytes, [scatter] + _intra("ag", ranks, n, topology),
                        loops)
        raise DvmError(f"no algorithm for collective {op!r}")
    # several servers: intra-server, then inter-server among the ranks with the same local index, then intra
    m = len(groups[0])
    planes = [[g[i] for g in groups] for i in range(m)]
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        local_n = n / m
        phases, lvl1 = [], ""
        if op in ("all_reduce", "reduce_scatter"):
            first = [_intra("rs", g, n, topology) for g in groups] if op == "all_reduce" else []
            phases += _merge(first)
            rs = [_inter("rs", pl, local_n if op == "all_reduce" else n) for pl in planes]
            lvl1 = rs[0][1]
            phases += _merge([x[0] for x in rs])
            if op == "all_reduce":
                phases += _merge([_inter("ag", pl, local_n)[0] for pl in planes])
                phases += _merge([_intra("ag", g, n, topology) for g in groups])
            else:
                phases += _merge([_intra("rs", g, n / len(groups), topology) for g in groups])
        else:
            phases += _merge([_intra("ag", g, n / len(groups), topology) for g in groups])
            ag = [_inter("ag", pl, n) for pl in planes]
            lvl1 = ag[0][1]
            phases += _merge([x[0] for x in ag])
        return Plan(op, f"{topology.intra_algorithm} + {lvl1}", ranks, nbytes, phases, loops)
    if op == "broadcast":
        home = [g for g in groups if root in g][0]
        phases = [Phase(f"scatter ({topology.intra.name})", [(root, r, n / m) for r in home if r != root], 1)]
        bc = []
        for i, pl in enumerate(planes):  # each local rank broadcasts its n/m over its plane
            origin = home[i]
            bc += [(origin, r, n / m) for r in pl if r != origin]
        phases.append(Phase("broadcast (RoCE)", bc, 1))
        phases += _merge([_intra("ag", g, n, topology) for g in groups])
        return Plan(op, "hierarchical", ranks, nbytes, phases, loops)
    raise DvmError(f"no algorithm for collective {op!r}")


def _merge(per_group: list) -> list:
    """Phases that run at once in several groups (servers, or planes of same-index ranks) as one list: the i-th
    phase of every group together."""
    out = []
    for phases in zip(*[g for g in per_group if g]):
        out.append(Phase(phases[0].name, [t for ph in phases for t in ph.transfers], phases[0].steps,
                         max(ph.reduce_bytes for ph in phases)))
    return out


def _flat_ring(op, ranks, n, nbytes, loops, root):
    p = len(ranks)
    if op == "all_reduce":
        phases = [Phase("reduce-scatter (ring)", _ring(ranks, n / p, p - 1), p - 1, (p - 1) / p * n),
                  Phase("all-gather (ring)", _ring(ranks, n / p, p - 1), p - 1)]
    elif op == "reduce_scatter":
        phases = [Phase("reduce-scatter (ring)", _ring(ranks, n / p, p - 1), p - 1, (p - 1) / p * n)]
    elif op == "all_gather":
        phases = [Phase("all-gather (ring)", _ring(ranks, n / p, p - 1), p - 1)]
    elif op == "broadcast":
        order = ranks[ranks.index(root):] + ranks[:ranks.index(root)]
        phases = [Phase("broadcast (chain)", [(order[i], order[i + 1], n) for i in range(p - 1)], p - 1)]
    else:
        raise DvmError(f"no algorithm for collective {op!r}")
    return Plan(op, "ring", tuple(ranks), nbytes, phases, loops)


def _all_to_all(ranks, topology, matrix):
    """Inside one mesh server every pair has its own link: one step. Otherwise HCCL's Pairwise: in step k rank i
    sends to rank i+k (and receives from i-k), p-1 steps, each as long as its largest transfer."""
    p = len(ranks)
    total = int(max(sum(row) - row[i] for i, row in enumerate(matrix)))
    groups = _servers(ranks, topology)
    if groups is not None and len(groups) == 1 and topology.intra_algorithm == "mesh":
        tr = [(ranks[i], ranks[j], float(matrix[i][j])) for i in range(p) for j in range(p) if i != j and matrix[i][j]]
        return Plan("all_to_all", "mesh", ranks, total, [Phase(f"all-to-all ({topology.intra.name} mesh)", tr, 1)])
    phases = []
    for k in range(1, p):
        tr = [(ranks[i], ranks[(i + k) % p], float(matrix[i][(i + k) % p])) for i in range(p)]
        phases.append(Phase(f"pairwise step {k}", [t for t in tr if t[2]] or tr[:1], 1))
    return Plan("all_to_all", "pairwise", ranks, total, phases)


# ---- numerics ----------------------------------------------------------------------------------------------------

_NP = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum, "band": np.bitwise_and,
       "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def reduce(arrays, op: str = "sum") -> np.ndarray:
    """The element-wise reduction of ``arrays`` (one per rank, in rank order), in their dtype, accumulated in
    rank order: every rank gets these same bits. ``avg`` is the sum divided by the count."""
    if op not in REDUCE_OPS:
        raise DvmError(f"unknown reduction {op!r}; choose one of {', '.join(REDUCE_OPS)}")
    first = np.asarray(arrays[0])
    if op in ("band", "bor", "bxor") and first.dtype.kind not in "biu":
        raise DvmError(f"reduction {op} needs integers or booleans, got {first.dtype}")
    if op == "avg" and first.dtype.kind not in "fc":
        raise DvmError(f"reduction avg needs floating-point tensors, got {first.dtype}")
    fn = _NP["sum" if op == "avg" else op]
    out = first.copy()
    for a in arrays[1:]:
        out = fn(out, np.asarray(a), dtype=out.dtype) if out.dtype.kind != "b" else fn(out, np.asarray(a))
    if op == "avg":
        out = (out / np.asarray(len(arrays), dtype=out.dtype)).astype(out.dtype)
    return out


def gamma_us_per_byte(profile) -> float:
    """HCCL's gamma on this device: reducing a byte reads two operands and writes one at the sustained HBM rate."""
    return 3.0 / (profile.hbm_bytes_per_s * profile.hbm_efficiency) * 1e6
