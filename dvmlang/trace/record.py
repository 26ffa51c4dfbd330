"""Trace records: one row per executed virtual instruction per program, kept as numpy columns.

``dvmlang.trace()`` opens a ``Session``; every launch inside it is recorded (a ``LaunchTrace`` per
launch, reachable as ``launch.trace``). Limits keep huge grids in bounds: ``max_events`` stops
recording rows (the summary stays exact), ``sample`` keeps every n-th program, ``summary_only``
records no rows at all.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ..vm import isa


@dataclass
class StepInfo:
    """Static facts about one instruction of the traced kernel."""

    pc: int
    name: str
    pipe: int
    line: int | None
    file: str | None
    ub: tuple | None
    set: tuple | None
    wait: tuple | None


@dataclass
class LaunchTrace:
    """The recorded instructions of one launch (columns of equal length) plus exact per-pipe totals."""

    name: str
    grid: tuple
    cycles: int
    steps: list[StepInfo]
    pid: np.ndarray
    core: np.ndarray
    step: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    nbytes: np.ndarray
    cores: int
    launch: object = None
    truncated: bool = False
    sampled: int = 1
    program_start: np.ndarray | None = None
    program_time: np.ndarray | None = None
    source: dict = field(default_factory=dict)  # file -> (first line, list of lines)
    group: str | None = None

    @property
    def pipe(self) -> np.ndarray:
        table = np.array([s.pipe for s in self.steps], dtype=np.int8)
        return table[self.step] if len(self.step) else np.zeros(0, dtype=np.int8)

    @property
    def pc(self) -> np.ndarray:
        table = np.array([s.pc for s in self.steps], dtype=np.int64)
        return table[self.step] if len(self.step) else np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.step)

    def rows(self):
        """Iterate rows as dicts (convenient in tests and small traces)."""
        for i in range(len(self.step)):
            s = self.steps[int(self.step[i])]
            yield {"pid": int(self.pid[i]), "core": int(self.core[i]), "pipe": isa.PIPE_NAMES[isa.Pipe(s.pipe)],
                   "pc": s.pc, "opcode": s.name, "start": float(self.start[i]), "dur": float(self.dur[i]),
                   "bytes": int(self.nbytes[i]), "line": s.line, "ub": s.ub}


class Recorder:
    """Collects rows for one kernel launch while the device runs it."""

    def __init__(self, session: "Session", bc, k: int, machine, programs: int):
        self.session = session
        self.chunks: list = []
        self.events = 0
        self.truncated = False
        self.sample = max(1, session.sample)
        self.summary_only = session.summary_only
        self.limit = session.max_events - session.events if session.max_events else None
        from ..npu.machine import loc_lookup
        find = loc_lookup(bc)
        self.steps = []
        files = set()
        for st in machine.steps:
            loc = find(st.pc)
            ub = None
            d = bc.decoded[k][st.index]
            for f in d.ins.fields:
                if f.kind == "tile" and f.name in ("dst", "src", "a") and d.vals.get(f.name):
                    from ..vm.decode import tile_parts
                    addr, li = tile_parts(d.vals[f.name])
                    if li < len(bc.layouts):
                        dd, shape = bc.layouts[li]
                        n = 1
                        for s_ in shape:
                            n *= s_
                        ub = (addr, addr + n * dd.itemsize)
                    break
            self.steps.append(StepInfo(st.pc, st.ins.name, st.pipe, loc.line if loc else None,
                                       loc.file if loc else None, ub, st.set, st.wait))
            if loc is not None:
                files.add(loc.file)
        self.source = {}
        for fi, (first, text) in bc.debug.sources.items():
            self.source[bc.debug.files[fi]] = (first, text.splitlines())
        for f in files:
            if f not in self.source:
                import linecache
                lines = linecache.getlines(f)
                if lines:
                    self.source[f] = (1, [x.rstrip("\n") for x in lines])

    def add(self, step, b, start, cost):
        if self.summary_only or self.truncated:
            return
        pids = b.pids
        n = len(pids)
        if self.sample > 1:
            keep = (pids % self.sample) == 0
            if not keep.any():
                return
        else:
            keep = None
        if self.limit is not None and self.events + n > self.limit:
            self.truncated = True
            return
        start = np.broadcast_to(start, (n,)).copy()
        dur = np.broadcast_to(np.asarray(cost, dtype=float), (n,)).copy()
        nb = np.broadcast_to(np.asarray(b.last_bytes, dtype=float), (n,)).copy() if b.last_bytes is not None else 0
        b.last_bytes = 0
        if keep is not None:
            pids, start, dur, nb = pids[keep], start[keep], dur[keep], nb[keep]
        self.chunks.append((step.index, pids, start, dur, nb))
        self.events += len(pids)

    def finish(self, offsets, cores, record, T) -> LaunchTrace:
        if self.chunks:
            step = np.concatenate([np.full(len(c[1]), c[0], dtype=np.int32) for c in self.chunks])
            pid = np.concatenate([c[1] for c in self.chunks])
            start = np.concatenate([c[2] for c in self.chunks]) + offsets[pid]
            dur = np.concatenate([c[3] for c in self.chunks])
            nb = np.concatenate([c[4] for c in self.chunks]).astype(np.int64)
            order = np.lexsort((start, pid))
            step, pid, start, dur, nb = step[order], pid[order], start[order], dur[order], nb[order]
        else:
            step = np.zeros(0, dtype=np.int32)
            pid = np.zeros(0, dtype=np.int64)
            start = dur = np.zeros(0)
            nb = np.zeros(0, dtype=np.int64)
        tr = LaunchTrace(record.name, record.grid, record.cycles, self.steps, pid, pid % cores, step, start, dur, nb,
                         cores, record, self.truncated, self.sample, offsets, T, self.source, record.group)
        self.session.events += len(step)
        self.session.launches.append(record)
        return tr


class Session:
    """``with dvmlang.trace() as t:`` — records every launch made inside the block."""

    def __init__(self, max_events: int | None = 2_000_000, sample: int = 1, summary_only: bool = False):
        self.max_events = max_events
        self.sample = sample
        self.summary_only = summary_only
        self.launches: list = []
        self.events = 0

    def begin(self, bc, k, machine, programs) -> Recorder:
        return Recorder(self, bc, k, machine, programs)

    def __enter__(self):
        _sessions().append(self)
        return self

    def __exit__(self, *exc):
        _sessions().remove(self)
        return False

    def print(self, view: str = "summary", console=None, **kw):
        from .views import render
        render(self.launches, view, console=console, **kw)

    def save_chrome(self, path):
        from .chrome import save_chrome
        return save_chrome(self.launches, path)

    def __repr__(self) -> str:
        return f"<dvmlang trace: {len(self.launches)} launches, {self.events} events>"


_local = threading.local()


def _sessions() -> list:
    s = getattr(_local, "sessions", None)
    if s is None:
        s = _local.sessions = []
    return s


def active_session() -> Session | None:
    s = _sessions()
    return s[-1] if s else None
