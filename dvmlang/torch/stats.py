"""What the torch front door has done since the last ``reset_stats()``: kernel builds and encodes, launches,
simulated cycles, host time, and every fallback by op name (``dvmlang.torch.stats()``)."""

from __future__ import annotations

import weakref
from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass
class Stats:
    graphs: int = 0  # FX graphs compiled (forward, backward, inference)
    reused: int = 0  # of those, graphs run by an earlier compiled graph (reuse.py: the same graph at other sizes)
    plans: int = 0  # dvmlang programs planned (one per region; fusion is never re-planned for a new shape)
    calls: int = 0  # calls of compiled graphs
    launches: int = 0
    cycles: int = 0
    sim_us: float = 0.0
    host_s: float = 0.0  # host time inside dvmlang programs (binding, encoding, simulation)
    eager_s: float = 0.0  # host time torch eager took for the fallback ops (their work is not in sim_us)
    runtime_fallbacks: int = 0  # region calls that ran eagerly because dvmlang refused these sizes
    fallback_ops: Counter = field(default_factory=Counter)  # op name -> eager executions
    runtime_reasons: dict = field(default_factory=dict)


STATS = Stats()
# The dvmlang programs the backend made, for their kernels' builds and encodes: held weakly (id -> a callable giving
# the program), so a program nothing uses any more (its graph dropped by Dynamo) is freed with its kernels, their
# bytecode and the simulator's decoded steps; its kernels' counts at its end are kept in RETIRED.
_PROGRAMS: dict = {}
RETIRED = {"builds": 0, "encodes": 0}


def track(prog, keep: bool = False) -> None:
    """Count ``prog``'s kernels (``prog.kernels``: a dict of objects with ``cache_info()``) in ``stats()`` while it
    lives and after; ``keep``: hold it (an object nothing else holds)."""
    k = id(prog)
    if k in _PROGRAMS:
        return
    if keep:
        _PROGRAMS[k] = lambda: prog
    else:
        _PROGRAMS[k] = weakref.ref(prog)
        weakref.finalize(prog, _retire, k, prog.kernels)


def tracked(prog) -> bool:
    """Whether ``prog`` is counted already (``track``)."""
    ref = _PROGRAMS.get(id(prog))
    return ref is not None and ref() is prog


def _retire(k, kernels) -> None:
    _PROGRAMS.pop(k, None)
    b, e = _counts(kernels)
    RETIRED["builds"] += b
    RETIRED["encodes"] += e


def programs() -> list:
    """The programs ``track``ed that are still alive."""
    return [p for ref in list(_PROGRAMS.values()) if (p := ref()) is not None]


def _counts(kernels) -> tuple[int, int]:
    """(builds, encodes) of ``kernels`` (a dict; plans share kernels, counted once)."""
    b = e = 0
    for kernel in {id(kt): kt for kt in list(kernels.values())}.values():
        info = kernel.cache_info()
        b += info.builds
        e += info.encodes
    return b, e


# The launch records of the latest region calls (examples return them). Few: a record held past a few calls is
# promoted by the cycle collector to its oldest generation, and a model's call leaves about a hundred such objects
# (a stack's record and its members'); holding thousands of calls' worth made collections run every few calls
# and full ones (which walk torch's own half a million objects, ~0.3 s) every ~1,400 calls of a small model.
# Holding 256, a call frees what it allocates once the window is full, and the collector stays idle.
KEEP_LAUNCHES = 256
LAST_LAUNCHES: deque = deque(maxlen=KEEP_LAUNCHES)
_base = {"builds": 0, "encodes": 0}
_comm_base: dict = {}  # id(device) -> (comm_us, comm_bytes) at the last reset


def _comm() -> tuple:
    """(simulated us in collectives, bytes sent) of this rank's device since the last reset (zero off a system)."""
    from ..npu import default_device
    d = default_device()
    now = (getattr(d, "comm_us", 0.0), getattr(d, "comm_bytes", 0.0))
    base = _comm_base.get(id(d), (0.0, 0.0))
    return now[0] - base[0], now[1] - base[1]


def _kernel_totals() -> dict:
    b, e = RETIRED["builds"], RETIRED["encodes"]
    for prog in programs():
        # (a snapshot, taken at once: the build-ahead worker adds the split plan's kernels while calls run)
        pb, pe = _counts(prog.kernels)
        b += pb
        e += pe
    return {"builds": b, "encodes": e}


def stats() -> dict:
    """builds, encodes, launches, fallback_ops (op name -> count), cycles and simulated_us since the last reset,
    eager_fallback_us (the host time of the ops that ran in torch eager instead: not in simulated_us), plus
    graphs, plans, calls, host_s, runtime_fallbacks (and their reasons); on a rank of a ``"dvmlang"`` process
    group, comm_us (simulated time in its collectives) and comm_bytes (bytes it sent)."""
    k = _kernel_totals()
    comm_us, comm_bytes = _comm()
    return {
        "builds": k["builds"] - _base["builds"],
        "encodes": k["encodes"] - _base["encodes"],
        "launches": STATS.launches,
        "fallback_ops": dict(STATS.fallback_ops),
        "cycles": STATS.cycles,
        "simulated_us": STATS.sim_us,
        # the fallbacks' torch eager time on this host, beside the simulated time: a model with fallbacks has a
        # partial simulated figure (their work is not in it)
        "eager_fallback_us": STATS.eager_s * 1e6,
        "graphs": STATS.graphs,
        "reused_graphs": STATS.reused,
        "plans": STATS.plans,
        "calls": STATS.calls,
        "host_s": STATS.host_s,
        "runtime_fallbacks": STATS.runtime_fallbacks,
        "runtime_reasons": dict(STATS.runtime_reasons),
        "comm_us": comm_us,
        "comm_bytes": comm_bytes,
    }


def launches() -> list:
    """The launch records of the latest calls through torch (one per region call: a stacked launch's record, its
    kernels' records in its ``members``), oldest first, since the last reset: at most ``KEEP_LAUNCHES`` (256)."""
    return list(LAST_LAUNCHES)


def reset_stats() -> None:
    from ..npu import default_device
    d = default_device()
    _comm_base[id(d)] = (getattr(d, "comm_us", 0.0), getattr(d, "comm_bytes", 0.0))
    _base.update(_kernel_totals())
    fresh = Stats()
    for f in fresh.__dataclass_fields__:
        setattr(STATS, f, getattr(fresh, f))
    LAST_LAUNCHES.clear()
