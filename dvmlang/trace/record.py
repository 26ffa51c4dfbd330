"""Trace records: one row per executed virtual instruction per program, kept as numpy columns.

``dvmlang.trace()`` opens a ``Session``; every launch inside it is recorded (a ``LaunchTrace`` per
launch, reachable as ``launch.trace``). The device calls ``Recorder.add`` once per executed instruction
for a whole batch of programs, so recording costs a few numpy operations per instruction and batch, and
nothing at all when no session is open.

Two kinds of data are kept:

* exact per-instruction totals (executions, cycles, bytes) over *every* program, always — the summary,
  source and table views never depend on how many rows were kept;
* rows (program, instruction, start, duration, bytes) and the set -> wait pairs between them, for the
  timeline and the Chrome export. Limits keep huge grids in bounds: ``max_events`` caps the rows of the
  whole session (recording stops at the cap; ``truncated`` says so), ``sample=n`` keeps the rows of every
  n-th program only, ``summary_only`` keeps no rows at all.
"""

from __future__ import annotations

import contextlib
import linecache
import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..errors import DvmError
from ..npu import system as _npu_system
from ..vm import isa

ROW_BYTES = 4 + 4 + 8 + 8 + 4  # step, pid, start, dur, nbytes: what one recorded row costs in memory


@dataclass
class StepInfo:
    """Static facts about one instruction of the traced kernel (shared by every program that runs it)."""

    index: int
    pc: int
    name: str
    pipe: int
    line: int | None
    file: str | None
    ub: tuple | None  # (lo, hi) UB byte range the instruction writes, else the first UB range it reads
    set: tuple | None  # (dst pipe, event): signals dst when it retires
    wait: tuple | None  # (src pipe, event): starts only after src's latest matching set
    work: float = 0.0  # per execution: vector repeats (VECTOR) or multiply-accumulates (CUBE)
    latency: float = 0.0  # cycles after the pipe is free until the result is visible (DMA first-byte latency)

    @property
    def pipe_name(self) -> str:
        return isa.PIPE_NAMES[isa.Pipe(self.pipe)]

    @property
    def where(self) -> str:
        if self.line is None:
            return ""
        short = self.file.rsplit("/", 1)[-1] if self.file else "?"
        return f"{short}:{self.line}"


@dataclass
class LaunchTrace:
    """The recorded instructions of one launch.

    Row columns (``pid``, ``step``, ``start``, ``dur``, ``nbytes``) have equal length and are ordered by
    program, then by the order the program dispatched them. ``start`` is in cycles from the moment the
    first program starts (the launch overhead comes before it); ``core`` is ``pid % cores``.
    ``flow_src``/``flow_dst`` are row indices of set -> wait pairs. ``step_count``/``step_cycles``/
    ``step_bytes`` are exact totals per instruction over every program, whatever was recorded.
    """

    name: str
    grid: tuple
    cycles: int
    steps: list[StepInfo]
    pid: np.ndarray
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
    step_count: np.ndarray | None = None
    step_cycles: np.ndarray | None = None
    step_bytes: np.ndarray | None = None
    flow_src: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    flow_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    summary_only: bool = False
    programs: int = 0
    overhead: int = 0
    notes: dict = field(default_factory=dict)  # pc -> what the device says about it (L2 or HBM, alignment)

    @cached_property
    def core(self) -> np.ndarray:
        return (self.pid % max(1, self.cores)).astype(np.int32)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @property
    def pipe(self) -> np.ndarray:
        table = np.array([s.pipe for s in self.steps], dtype=np.int8)
        return table[self.step] if len(self.step) else np.zeros(0, dtype=np.int8)

    @property
    def pc(self) -> np.ndarray:
        table = np.array([s.pc for s in self.steps], dtype=np.int64)
        return table[self.step] if len(self.step) else np.zeros(0, dtype=np.int64)

    @property
    def makespan(self) -> float:
        """Cycles from the first program's start to the last program's end (the launch minus overhead)."""
        return float(max(0, self.cycles - self.overhead))

    @property
    def recorded_programs(self) -> int:
        return int(len(np.unique(self.pid))) if len(self.pid) else 0

    def __len__(self) -> int:
        return len(self.step)

    def source_line(self, file: str | None, line: int | None) -> str:
        """The text of ``file:line`` as the recorded source has it (see ``Recorder``), else ""."""
        if file is None or line is None:
            return ""
        src = self.source.get(file)
        if src is not None:
            first, lines = src
            i = line - first
            if 0 <= i < len(lines):
                return lines[i]
        return ""

    def rows(self):
        """Iterate rows as dicts (convenient in tests and small traces)."""
        core = self.core
        for i in range(len(self.step)):
            s = self.steps[int(self.step[i])]
            yield {"pid": int(self.pid[i]), "core": int(core[i]), "pipe": s.pipe_name, "kernel": self.name,
                   "pc": s.pc, "opcode": s.name, "start": float(self.start[i]), "dur": float(self.dur[i]),
                   "bytes": int(self.nbytes[i]), "line": s.line, "file": s.file, "ub": s.ub, "group": self.group}

    def syncs(self):
        """Iterate the recorded set -> wait pairs as dicts: ``src``/``dst`` are row indices, ``set_end`` when
        the setter left its pipe, ``signal`` when its result (and the flag) became visible, ``wait_start``
        when the waiter started."""
        for a, b in zip(self.flow_src.tolist(), self.flow_dst.tolist()):
            s = self.steps[int(self.step[a])]
            w = self.steps[int(self.step[b])]
            yield {"src": a, "dst": b, "pid": int(self.pid[a]), "from": s.pipe_name, "to": w.pipe_name,
                   "event": s.set[1] if s.set else None, "set_end": float(self.start[a] + self.dur[a]),
                   "signal": float(self.start[a] + self.dur[a] + s.latency), "wait_start": float(self.start[b])}


class Recorder:
    """Collects one kernel launch while the device runs it (``Session.begin`` makes one)."""

    def __init__(self, session: "Session", bc, machine, programs: int):
        self.session = session
        self.programs = programs
        self.chunks: list = []
        self.events = 0
        self.truncated = False
        self.sample = session.sample
        self.rows_on = not session.summary_only
        self.limit = None if session.max_events is None else max(0, session.max_events - session.events)
        if self.limit == 0 and self.rows_on:
            self.rows_on = False
            self.truncated = True
        from ..npu.machine import loc_lookup
        find = loc_lookup(bc)
        self.steps: list[StepInfo] = []
        files = set()
        for st in machine.steps:
            loc = find(st.pc)
            facts = st.facts
            self.steps.append(StepInfo(st.index, st.pc, st.ins.name, st.pipe, loc.line if loc else None,
                                       loc.file if loc else None, facts.ub, st.set, st.wait,
                                       float(facts.repeats or facts.macs), float(st.latency)))
            if loc is not None:
                files.add(loc.file)
        n = len(self.steps)
        self.count = [0] * n
        self.cycles = [0.0] * n
        self.bytes = [0.0] * n
        self.last_set: dict = {}  # (src pipe, dst pipe, event) -> per-program index of the latest set row
        self.flows: list = []
        self.source = {}
        for fi, (first, text) in bc.debug.sources.items():
            self.source[bc.debug.files[fi]] = (first, text.splitlines())
        for f in files if bc.template_key is not None else ():  # in-process: the whole file; never a loaded one's
            if f not in self.source:
                lines = linecache.getlines(f)
                if lines:
                    self.source[f] = (1, [x.rstrip("\n") for x in lines])
        self.progress = session._progress_for(programs) if session.progress else None

    def add(self, step, b, start, cost):
        """One instruction executed by every program of batch ``b``: ``start`` and ``cost`` in cycles.

        Kept lean (it runs once per instruction and batch): totals go to Python lists, scalar costs and
        byte counts stay scalars until ``finish`` expands them."""
        n = b.n
        i = step.index
        nb = b.last_bytes
        b.last_bytes = 0
        self.count[i] += n
        cost_array = type(cost) is np.ndarray and cost.ndim > 0
        self.cycles[i] += float(cost.sum()) if cost_array else float(cost) * n
        nb_array = type(nb) is np.ndarray and nb.ndim > 0
        if nb_array:
            self.bytes[i] += float(nb.sum())
        elif nb:
            self.bytes[i] += float(nb) * n
        if self.progress is not None:
            self.progress.update(int(b.pids[-1]) + 1)
        if not self.rows_on:
            return
        pids = b.pids
        keep = None
        if self.sample > 1:
            keep = (pids % self.sample) == 0
            if not keep.any():
                return
            pids = pids[keep]
        m = len(pids)
        if self.limit is not None and self.events + m > self.limit:
            # the cap falls inside this batch: keep the first rows that fit, then stop recording rows
            cut = self.limit - self.events
            self.truncated = True
            self.rows_on = False
            if cut <= 0:
                return
            chosen = np.flatnonzero(keep) if keep is not None else np.arange(n)
            keep = np.zeros(n, dtype=bool)
            keep[chosen[:cut]] = True
            pids = b.pids[keep]
            m = cut
        if type(start) is not np.ndarray or start.shape != (n,):
            start = np.broadcast_to(np.asarray(start, dtype=np.float64), (n,))
        if keep is not None:
            start = start[keep]
            cost = cost[keep] if cost_array else cost
            nb = nb[keep] if nb_array else nb
        elif step.kind == "barrier":
            start = start.copy()  # the device keeps using this array as its issue time
        rows = np.arange(self.events, self.events + m, dtype=np.int64)
        if step.wait_key is not None:
            last = self.last_set.get(step.wait_key)
            if last is not None:
                src = last[pids]
                ok = src >= 0
                if ok.any():
                    self.flows.append((src[ok], rows[ok]))
        if step.set_key is not None:
            key = step.set_key
            last = self.last_set.get(key)
            if last is None:
                last = self.last_set[key] = np.full(self.programs, -1, dtype=np.int64)
            last[pids] = rows
        self.chunks.append((i, pids, start, cost, nb if nb_array else (nb or 0)))
        self.events += m

    def _columns(self):
        """Concatenate the chunks into row columns (scalar costs and byte counts expanded in bulk)."""
        chunks = self.chunks
        lengths = np.fromiter((len(c[1]) for c in chunks), dtype=np.int64, count=len(chunks))
        step = np.repeat(np.fromiter((c[0] for c in chunks), dtype=np.int32, count=len(chunks)), lengths)
        pid = np.concatenate([c[1] for c in chunks]).astype(np.int32)
        start = np.concatenate([c[2] for c in chunks]).astype(np.float64, copy=False)
        ends = np.cumsum(lengths)

        def expand(k, dtype):
            scalar = [0 if type(c[k]) is np.ndarray else c[k] for c in chunks]
            out = np.repeat(np.asarray(scalar, dtype=np.float64), lengths)
            for j, c in enumerate(chunks):
                if type(c[k]) is np.ndarray:
                    out[ends[j] - lengths[j]:ends[j]] = c[k]
            return out.astype(dtype, copy=False)

        return step, pid, start, expand(3, np.float64), expand(4, np.int32)

    def finish(self, offsets, cores, record, T, stretch: float = 1.0) -> LaunchTrace:
        """Place the rows on the cores (``offsets`` per program, from the device's composition); ``stretch``
        slows every row down uniformly when the launch is held back by the HBM roofline."""
        if self.progress is not None:
            self.progress.close()
        if self.chunks:
            step, pid, start, dur, nb = self._columns()
            if stretch != 1.0:
                start = start * stretch
                dur = dur * stretch
            start = start + np.asarray(offsets)[pid]
            order = np.argsort(pid, kind="stable")  # per program, dispatch order is kept
            step, pid, start, dur, nb = step[order], pid[order], start[order], dur[order], nb[order]
            inverse = np.empty_like(order)
            inverse[order] = np.arange(len(order))
        else:
            step = np.zeros(0, dtype=np.int32)
            pid = np.zeros(0, dtype=np.int32)
            start = np.zeros(0)
            dur = np.zeros(0)
            nb = np.zeros(0, dtype=np.int32)
            inverse = np.zeros(0, dtype=np.int64)
        self.chunks = []
        if self.flows:
            fs = inverse[np.concatenate([f[0] for f in self.flows])]
            fd = inverse[np.concatenate([f[1] for f in self.flows])]
        else:
            fs = fd = np.zeros(0, dtype=np.int64)
        tr = LaunchTrace(record.name, record.grid, record.cycles, self.steps, pid, step, start, dur, nb, cores,
                         record, self.truncated, self.sample, np.asarray(offsets), T, self.source, record.group,
                         np.asarray(self.count, dtype=np.int64), np.asarray(self.cycles, dtype=np.float64),
                         np.asarray(self.bytes, dtype=np.float64), fs, fd, self.session.summary_only,
                         self.programs, record.launch_overhead)
        self.session.events += len(step)
        self.session.launches.append(record)
        return tr


class Session:
    """``with dvmlang.trace() as t:`` — records every launch made inside the block.

    ``max_events`` caps the rows of the whole session (``None``: no cap), ``sample=n`` records the rows of
    every n-th program, ``summary_only`` records totals only. ``progress=True`` shows a progress bar on
    stderr for launches that run longer than about a second (only on a terminal).
    """

    def __init__(self, max_events: int | None = 2_000_000, sample: int = 1, summary_only: bool = False,
                 progress: bool = False):
        if max_events is not None and (not isinstance(max_events, (int, np.integer)) or max_events < 0):
            raise DvmError(f"max_events must be a non-negative row count or None, got {max_events!r}")
        if not isinstance(sample, (int, np.integer)) or sample < 1:
            raise DvmError(f"sample must be a positive integer (record every n-th program), got {sample!r}")
        self.max_events = max_events
        self.sample = int(sample)
        self.summary_only = bool(summary_only)
        self.progress = progress
        self.launches: list = []
        self.comm: list = []  # the collectives of simulated systems while the session was open (npu.system)
        self.events = 0

    def begin(self, bc, machine, programs) -> Recorder:
        return Recorder(self, bc, machine, programs)

    def _progress_for(self, programs: int):
        from .progress import LazyProgress
        bar = LazyProgress("tracing", programs, "programs")
        return bar if bar.enabled else None

    def __enter__(self):
        _sessions().append(self)
        _OPEN.append(self)
        return self

    def __exit__(self, *exc):
        _sessions().remove(self)
        _OPEN.remove(self)
        return False

    @property
    def truncated(self) -> bool:
        return any(launch.trace is not None and launch.trace.truncated for launch in self.launches)

    def print(self, view: str = "summary", console=None, **options):
        """Render the recorded launches: ``view`` is summary, source, timeline, disasm, table, compare or
        all. Options: ``cycles=(lo, hi)``, ``cores=4`` or ``cores=[0, 5]``, ``width=100``, ``kernel=NAME``,
        ``top=8`` (hot spots), ``labels=("A", "B")`` (compare)."""
        from .views import render
        if view == "comm":
            options.setdefault("records", self.comm)
        render(self.launches, view, console=console, **options)

    def save_chrome(self, path):
        """Write every recorded launch as a Chrome trace JSON that Perfetto opens; returns the path. A session
        that recorded collectives of simulated systems writes those instead: a process per device and the links
        (``trace.system_chrome``)."""
        if self.comm:
            from .system_chrome import save_records_chrome
            return save_records_chrome(self.comm, self.launches, path)
        from .chrome import save_chrome
        return save_chrome(self.launches, path)

    def __repr__(self) -> str:
        return f"<dvmlang trace: {len(self.launches)} launches, {self.events} events>"


_local = threading.local()
_OPEN: list = []  # the sessions open in any thread (appended and removed whole: atomic), to skip the lookup


def _sessions() -> list:
    s = getattr(_local, "sessions", None)
    if s is None:
        s = _local.sessions = []
    return s


def active_session() -> Session | None:
    if not _OPEN:  # (no session open anywhere: a launch's usual case)
        return None
    s = _sessions()
    return s[-1] if s else None


def _comm_to_sessions(rec) -> None:
    """A system's collective, recorded by every open session."""
    for s in {id(x): x for x in list(_OPEN)}.values():  # (a session entered on several rank threads: once)
        s.comm.append(rec)


def _session_here():
    """The session open on this thread, to be entered on the rank threads a system starts (or a no-op)."""
    return active_session() or contextlib.nullcontext()


_npu_system.COMM_LISTENERS.append(_comm_to_sessions)
_npu_system.THREAD_CONTEXTS.append(_session_here)
