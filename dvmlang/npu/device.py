"""The simulated device: runs a validated bytecode over its grid and accounts the cycles.

Programs are executed in batches (many programs per virtual instruction) sized so the working set
stays cache-sized; a branch whose condition differs between programs splits the batch, and each part
runs on alone, down to one program at a time, with the same numerics either way. Each program's pipes
are timed with their events (``timing.advance``); programs are then placed on the cores (program p runs
on core p mod cores, in waves), consecutive programs on a core overlapping as far as pipe availability
and UB double buffering allow (``timing._compose``). HBM bandwidth is shared by the active cores, and
every launch pays a fixed overhead. This module also holds the launch records and the default device.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import MISSING, dataclass, field, fields, replace

import numpy as np

from ..errors import (DvmError, InvalidBytecodeError, LaunchError, ResourceError, WatchdogTimeout, render_span,
                      warn_user)
from ..vm import isa
from .l2 import L2Cache
from .launch import Launch, LaunchBase
from .machine import Machine
from .profile import Profile, get_profile
from .state import Batch, held_bytes, programs
from .timing import _compose, _total, advance, roofline

N_PIPES = isa.N_PIPES
PROBE = 64  # programs in the first batch of a large launch, which measures what one holds on the host
DEFAULT_WATCHDOG = 1 << 18  # instructions per kernel launch: a runaway scalar loop ends within a few seconds
PIPE_LABELS = [isa.PIPE_NAMES[isa.Pipe(q)] for q in range(N_PIPES)]
_MTE2, _MTE3 = int(isa.Pipe.MTE2), int(isa.Pipe.MTE3)


@dataclass
class LaunchRecord:
    """What a kernel launch did on the device. ``cycles`` is simulated; ``wall_s`` is host time."""

    name: str
    grid: tuple
    cycles: int
    bytes_read: int
    bytes_written: int
    trace: object = None
    time_us: float = 0.0
    cores: int = 0
    waves: int = 0
    kind: str = "vector"
    double_buffer: bool = False
    launch_overhead: int = 0
    pipe_busy: dict = field(default_factory=dict)
    wall_s: float = 0.0
    encode_s: float = 0.0
    profile: Profile | None = None
    prints: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    group: str | None = None
    bytecode: object = None
    instructions: int = 0
    hbm_stretch: float = 1.0
    start: float = 0.0
    members: list = field(default_factory=list)  # the kernels' records of a stacked or summed launch
    stages: list = field(default_factory=list)
    launches: int = 1
    hbm_bytes: float = 0.0  # bytes that crossed HBM (the rest of the traffic hit L2)
    l2_hit_bytes: float = 0.0
    writeback_bytes: float = 0.0  # dirty L2 lines of earlier launches this one evicted to HBM
    dispatched: int = 0  # programs that paid profile.program_dispatch_cycles (beyond their core's first)
    unaligned_cycles: float = 0.0  # DMA cycles lost to bursts off their alignment boundary, all programs

    @classmethod
    def combined(cls, name: str, parts: list, cycles: int, kind: str, launch_overhead: int, profile: Profile,
                 launches: int = 1) -> "LaunchRecord":
        """One record for several kernels' records: bytes, instructions and pipe time summed, ``cycles`` as
        the caller composed them (side by side, in sequence, or in separate launches)."""
        total = cls(name=name, grid=(), cycles=cycles, bytes_read=sum(r.bytes_read for r in parts),
                    bytes_written=sum(r.bytes_written for r in parts), time_us=cycles / profile.clock_hz * 1e6,
                    cores=max((r.cores for r in parts), default=0), kind=kind, launch_overhead=launch_overhead,
                    profile=profile, group=name, instructions=sum(r.instructions for r in parts),
                    launches=launches, hbm_bytes=sum(r.hbm_bytes for r in parts),
                    l2_hit_bytes=sum(r.l2_hit_bytes for r in parts),
                    writeback_bytes=sum(r.writeback_bytes for r in parts),
                    dispatched=sum(r.dispatched for r in parts),
                    unaligned_cycles=sum(r.unaligned_cycles for r in parts))
        for r in parts:
            for q, v in r.pipe_busy.items():
                total.pipe_busy[q] = total.pipe_busy.get(q, 0.0) + v
        return total

    def __repr__(self) -> str:
        return (f"<Launch {self.name} grid={self.grid} cycles={self.cycles} ({self.time_us:.2f} us) "
                f"read={self.bytes_read} written={self.bytes_written}>")

    @classmethod
    def of(cls, base: dict, values: dict) -> "LaunchRecord":
        """The record with the fields of ``base`` (a dict from ``LaunchRecord.base``, shared, not copied) and
        ``values`` (taken as the record's own dict), without the generated ``__init__``'s work per field: a
        launch makes one record per kernel, and a 31-field ``__init__`` is a few us. A field ``values`` does
        not hold is read from ``base``, or made when first read (``__getattr__``): the fields of ``_RAW`` from
        the tuple ``values["_raw"]`` (all of them at the first read of one; a launch seldom reads any),
        ``time_us`` from the cycles, ``pipe_busy`` from ``_busy`` (each pipe's busy cycles, in pipe order),
        and ``prints``, ``diagnostics``, ``members`` and ``stages`` empty lists."""
        values["_shared"] = base
        rec = cls.__new__(cls)
        rec.__dict__ = values
        return rec

    def __getattr__(self, name):
        # only for what the record's own dict lacks (the class keeps no field defaults: see below the class)
        d = self.__dict__
        raw = d.get("_raw")
        if raw is not None:  # a launch's figures as Device._finish left them, made fields (one set earlier stays)
            del d["_raw"]
            for field_name, v in zip(_RAW, raw):
                if field_name not in d:
                    d[field_name] = v
            if name in d:
                return d[name]
        shared = d.get("_shared")
        if shared is not None:
            if name in shared:
                return shared[name]
            later = _LATER.get(name)
            if later is not None:
                value = d[name] = later(self)
                return value
        raise AttributeError(f"'LaunchRecord' object has no attribute {name!r}")

    @staticmethod
    def base(**values) -> dict:
        """The defaults with ``values`` (fields that do not default to a new object), for ``LaunchRecord.of``:
        what every launch of one kernel with the same options records alike."""
        assert not any(name in values for name in _LATER), "a shared base cannot hold a new or derived value"
        d = dict(_RECORD_DEFAULTS)
        d.update(values)
        return d


# What Device._finish leaves in a record's "_raw" tuple, in order ("_busy": pipe_busy's source).
_RAW = ("bytes_read", "bytes_written", "_busy", "bytecode", "instructions", "hbm_stretch", "hbm_bytes", "l2_hit_bytes",
        "writeback_bytes", "unaligned_cycles")
# A record made by LaunchRecord.of reads a field its own dict lacks from its base, or makes it (_LATER) when first
# read: for that, the class keeps no default of a field (a dataclass's __init__ keeps its own).
_RECORD_DEFAULTS = {f.name: f.default for f in fields(LaunchRecord) if f.default is not MISSING}
_LATER = {
    "time_us": lambda r: r.cycles / r.profile.clock_hz * 1e6 if r.profile is not None else 0.0,
    "pipe_busy": lambda r: _pipe_busy(r.__dict__["_busy"]) if "_busy" in r.__dict__ else {},  # (after _raw)
    "prints": lambda r: [], "diagnostics": lambda r: [], "members": lambda r: [], "stages": lambda r: [],
}
assert {f.name for f in fields(LaunchRecord) if f.default_factory is not MISSING} < _LATER.keys()
del _RECORD_DEFAULTS["time_us"]
for _name in _RECORD_DEFAULTS:
    delattr(LaunchRecord, _name)
delattr(LaunchRecord, "time_us")
# a pipe's busy cycles, per pipe in pipe order (a list or an array) -> the record's pipe_busy dict
_pipe_busy = eval(  # noqa: S307 - from the pipe labels
    "lambda b: {" + ", ".join(f"{name!r}: b[{q}]" for q, name in enumerate(PIPE_LABELS)) + "}")


class Device:
    """A simulated NPU. ``Device(profile="910B3")`` or ``Device(profile=Profile(...))``.

    Options: ``debug`` (poison reads of unwritten on-chip memory are reported; ``"raise"`` makes them
    errors), ``race_detection`` (report programs writing the same GM bytes without atomics),
    ``watchdog`` (instructions a kernel's launch may execute, all its programs together; an instruction run
    for a batch of programs counts once: the budget bounds the host's work), ``batch_bytes`` (host working
    set per batch), ``sequential`` (run one program at a time: the reference path)."""

    def __init__(self, profile=None, *, debug=False, race_detection=False, watchdog: int = DEFAULT_WATCHDOG,
                 batch_bytes: int = 64 << 20, sequential: bool = False):
        self.profile = get_profile(profile)
        self.debug = debug
        self.race_detection = race_detection
        if not isinstance(watchdog, int) or watchdog < 1:
            raise DvmError(f"watchdog must be a positive instruction count, got {watchdog!r}")
        self.watchdog = watchdog
        self.batch_bytes = batch_bytes
        self.sequential = sequential
        self.l2 = L2Cache(self.profile.l2_bytes)
        self.simulated_cycles = 0  # every launch's cycles and simulated microseconds, summed (for counters
        self.simulated_us = 0.0  # such as dvmlang.torch.stats(), which take differences)

    def __repr__(self) -> str:
        return f"<dvmlang.npu.Device {self.profile.name}>"

    def __enter__(self):
        _stack().append(self)
        _ENTERED.append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        _ENTERED.remove(self)
        return False

    # ---- running ----------------------------------------------------------------------------------------
    def machine(self, bc, k: int = 0) -> Machine:
        """Kernel ``k`` of ``bc`` decoded into steps for this device's profile. An in-process build keeps its
        machines with its decoded code (``DecodedKernels.machines``): every instance of the build shares them,
        and they go when the build does. A loaded bytecode gets its own."""
        cache = getattr(bc.decoded, "machines", None) if bc.template_key is not None else None
        if cache is None:
            return Machine(bc, k, self.profile)
        key = (k, id(self.profile))
        m = cache.get(key)
        if m is None or m.profile is not self.profile:
            m = cache[key] = Machine(bc, k, self.profile)
        return m

    def run(self, bc, arrays: dict[int, np.ndarray], *, trace=None, name: str | None = None,
            alias_groups=None) -> LaunchRecord:
        """Execute every kernel of ``bc`` (validated) on ``arrays`` (param index -> flat array)."""
        t0 = time.perf_counter()
        # a relaunch of a one-program, one-kernel instance with the same profile, name and options: its launch
        # base, found once (``_run_kernel``), is taken straight to ``_one``
        one = bc.__dict__.get("_one") if trace is None else None
        if one is not None and one[0] is self.profile and one[1] == name and \
                one[2] == (self.debug, self.watchdog, self.race_detection):
            total = self._one(one[3], bc, arrays, alias_groups or {q: q for q in arrays})
        else:
            self._ready(bc)
            total = self._run_kernel(bc, 0, arrays, trace, name, alias_groups)
            for k in range(1, len(bc.kernels)):
                rec = self._run_kernel(bc, k, arrays, trace, name, alias_groups)
                total.cycles += rec.cycles
                total.bytes_read += rec.bytes_read
                total.bytes_written += rec.bytes_written
        total.wall_s = time.perf_counter() - t0
        self.simulated_cycles += total.cycles
        self.simulated_us += total.cycles / self.profile.clock_hz * 1e6
        return total

    def run_stack(self, stages, *, name: str, trace=None) -> LaunchRecord:
        """One launch of several kernels (stacking fusion): the stages run one after another; the kernels of
        one stage run side by side on disjoint cores (cores split by their programs). ``stages`` is a list of
        lists of ``(bytecode, arrays, name, alias_groups)``. The launch overhead is paid once."""
        t0 = time.perf_counter()
        prof = self.profile
        overhead = prof.launch_overhead_cycles
        clock = 0.0
        members = []
        for stage in stages:
            for bc, _, _, _ in stage:
                self._ready(bc)
            shares = _split_cores(stage, prof)
            longest = 0.0
            for (bc, arrays, kname, alias), cores in zip(stage, shares):
                # side by side, the kernels share HBM: each gets the part of it its cores are of the stage's
                rec = self._run_kernel(bc, 0, arrays, trace, kname, alias, cores=cores, overhead=0,
                                       start=clock, group=kname, hbm_share=cores / sum(shares))
                members.append(rec)
                longest = max(longest, rec.cycles)
            clock += longest
        total = LaunchRecord.combined(name, members, int(round(overhead + clock)), "stack", overhead, prof)
        total.members = members
        total.stages = [len(s) for s in stages]
        total.wall_s = time.perf_counter() - t0
        self.simulated_cycles += total.cycles
        self.simulated_us += total.cycles / self.profile.clock_hz * 1e6
        return total

    def _ready(self, bc):
        """Validate ``bc`` and check that it fits this device: once per instance and profile (a relaunch of a
        cached instance has been through both)."""
        fields = bc.__dict__
        if fields.get("_fits") is not self.profile or bc.decoded is None:
            bc.validate()
            self._check_fits(bc)
            fields["_fits"] = self.profile

    def _check_fits(self, bc):
        p = self.profile
        caps = p.capacities
        for k in bc.kernels:
            for space, need in k.footprint.items():
                bank = need * (2 if k.double_buffer and space == "ub" else 1)
                if bank > caps[space]:
                    raise ResourceError(f"kernel `{k.name}` needs {bank / 1024:.1f} KiB of {space.upper()} but "
                                        f"device {p.name} has {caps[space] / 1024:.0f} KiB; re-encode it for this "
                                        "device")
            g = k.grid[0] * k.grid[1] * k.grid[2]
            if g > p.max_programs:
                raise LaunchError(f"grid {k.grid} has {g} programs; {p.name} runs at most {p.max_programs} per "
                                  "launch. Use a larger BLOCK, or loop inside the kernel over several tiles")

    def _run_kernel(self, bc, k, arrays, trace, name, alias_groups, cores=None, overhead=None, start=0.0,
                    group=None, hbm_share=1.0) -> LaunchRecord:
        base = self._bases(bc, k, name, cores, overhead, group, start, hbm_share)
        alias = alias_groups or {q: q for q in arrays}
        if base.programs == 1 and trace is None:
            if len(bc.kernels) == 1 and cores is None and overhead is None and group is None and not start and \
                    hbm_share == 1.0:  # what Device.run takes straight to _one next time (as _bases keys it)
                bc.__dict__["_one"] = (self.profile, name, base.options, base)
            return self._one(base, bc, arrays, alias)
        L = base.launch(bc, arrays, alias)
        m = base.machine
        P, cores = base.programs, base.cores
        rec = trace.begin(bc, m, P) if trace is not None else None
        body, busy, bytes_r, bytes_w, instrs, offsets, shift, T = self._run_batches(m, base.kern, L, cores, P, rec)
        record, stretch = self._finish(base, L, body, busy, bytes_r, bytes_w, instrs)
        if rec is not None:
            if stretch != 1.0:
                offsets = offsets * stretch
            record.trace = rec.finish((offsets + shift * stretch) + start, cores, record, T * stretch, stretch)
            record.trace.notes = L.rates.notes()
        base.release(L)
        return record

    def _one(self, base, bc, arrays, alias) -> LaunchRecord:
        """One program, no trace: the batch's own pipe clock (Python floats) gives what ``_run_batches`` computes
        for a grid of one: no dispatch, one wave, the core busy until its program ends or its GM port's
        transfers do."""
        L = base.launch(bc, arrays, alias)
        m = base.machine
        dispatch = self.profile.scalar_dispatch
        state, k = base.after_prefix, m.prefix
        if state is not None and L.watchdog > k:  # where an earlier launch's prefix ended (_run_prefix)
            L.executed = k
            b = L.parked  # (the batch of the launch L was before, if any: Batch.resume)
            b = b.resume(state) if b is not None else Batch.resumed(state)
        else:
            b, k = _run_prefix(base, m, L, dispatch)
        b = _run_alone(m.steps, b, L, dispatch, k)
        if L.races is not None:
            L.races.check(L)
        busy = b.pipe_busy
        end = max(max(b.pipe_free), b.t_issue, b.done)
        port = busy[_MTE2] + busy[_MTE3]
        record = self._finish(base, L, end if end >= port else port, busy, _total(b.bytes_read, 1),
                              _total(b.bytes_written, 1), b.count)[0]
        b.park()
        L.parked = b
        base.release(L)
        return record

    def _finish(self, base, L, body, busy, bytes_r, bytes_w, instrs) -> tuple[LaunchRecord, float]:
        """The record of launch ``L`` (the kernel's programs took ``body`` cycles on their cores), and the factor
        the HBM roofline stretched them by: what its transfers left in L2 (``L2Cache.settle``), its device
        prints shown and its diagnostics warned."""
        prof = self.profile
        rates = L.rates
        hbm, hits, writeback = self.l2.settle(L.arrays, L.alias, rates)
        body, stretch = roofline(body, hbm, prof, base.share)
        cycles = int(round(base.overhead + body))
        values = {"cycles": cycles, "_raw": (int(bytes_r), int(bytes_w), busy, L.bc, instrs, stretch, hbm, hits,
                                             writeback, rates.unaligned_cycles)}  # (_RAW's order)
        if L.prints_seen:
            values["prints"] = prints = L.print_lines()
            for line in prints:
                print(line)
        diagnostics = L.diagnostics
        if diagnostics:
            values["diagnostics"] = diagnostics
            for msg in diagnostics[:8]:
                warn_user(f"{base.record['name']}: {msg}")
        return LaunchRecord.of(base.record, values), stretch

    def _bases(self, bc, k, name, cores, overhead, group, start, share) -> LaunchBase:
        """What every launch of kernel ``k`` of ``bc`` with these options has alike (``LaunchBase``, with the
        kernel's machine), made once per instance, options and device settings and kept with the instance
        (``cores`` and ``overhead`` None: the device's)."""
        key = (k, name, cores, overhead, group, start, share)
        fields = bc.__dict__
        known = fields.get("_bases")
        if known is None:
            known = fields["_bases"] = {}
        base = known.get(key)
        prof = self.profile
        options = (self.debug, self.watchdog, self.race_detection)
        if base is None or base.profile is not prof or base.options != options:
            if len(known) >= 64:
                known.clear()
            kern = bc.kernels[k]
            m = self.machine(bc, k)
            if cores is None:
                cores = prof.cube_cores if kern.mix else prof.vector_cores
            if overhead is None:
                overhead = prof.launch_overhead_cycles
            grid = kern.grid
            P = grid[0] * grid[1] * grid[2]
            active = min(P, cores)
            launch = Launch.base(kern, prof, debug=self.debug, watchdog=self.watchdog,
                                 kernel_name=name or kern.name, active_cores=active, loc_of_pc=m.loc_of_pc,
                                 race_detection=self.race_detection, share=share)
            record = LaunchRecord.base(
                name=name or kern.name, grid=grid, cores=active, waves=-(-P // cores),
                kind="mix" if kern.mix else "vector", double_buffer=kern.double_buffer, launch_overhead=overhead,
                profile=prof, group=group, start=start,
                dispatched=max(0, P - cores) if prof.program_dispatch_cycles else 0)
            base = known[key] = LaunchBase(kern, m, prof, options, launch, record, P, cores, overhead, share)
        return base

    def _run_batches(self, m, kern, L, cores, P, rec):
        """Every program, in batches (the first a probe, see ``_resized``); their pipe clocks placed on
        ``cores``. Returns (body, busy per pipe, bytes read, bytes written, instructions, each program's offset,
        dispatch shift and length)."""
        prof = self.profile
        T = np.zeros(P)
        first = np.full((N_PIPES, P), np.inf)
        last = np.zeros((N_PIPES, P))
        busy = np.zeros((N_PIPES, P))
        issue_end = np.zeros(P)
        bytes_r = 0.0
        bytes_w = 0.0
        instrs = 0
        dispatch = prof.scalar_dispatch
        steps = m.steps
        per_prog = kern.footprint.get("ub", 0) + kern.footprint.get("l0c", 0) + 4096
        size = 1 if self.sequential else max(1, min(P, self.batch_bytes // per_prog, 16384))
        # a first batch of PROBE programs measures what a program holds on the host (_resized)
        probe = L.races is None and not m.atomics and size > PROBE and P > size
        lo = 0
        with np.errstate(all="ignore"):
            while lo < P:
                if self.sequential:
                    L.executed = 0  # one program at a time: each gets the budget; a runaway one ends the launch
                pids, coords = programs(lo, min(P, lo + (PROBE if probe and lo == 0 else size)), kern.grid[0],
                                        kern.grid[1])
                batch = Batch(pids, kern.grid, m.zero_regs, uniform=True, coords=coords)
                held = 0
                for b in _execute(steps, batch, L, dispatch, rec):
                    idx = slice(lo, lo + b.n) if b is batch else b.pids  # (the batch whole: its programs in a row)
                    free, b_first, b_busy, t_issue, done = b.clock()
                    end = np.maximum(np.maximum(free.max(axis=0), t_issue), done)
                    T[idx] = end
                    first[:, idx] = b_first
                    last[:, idx] = free
                    busy[:, idx] = b_busy
                    issue_end[idx] = t_issue
                    bytes_r += _total(b.bytes_read, 1)
                    bytes_w += _total(b.bytes_written, 1)
                    instrs += b.count
                    if probe:
                        held += held_bytes(b)
                if probe and lo == 0:
                    size = self._resized(P, size, per_prog, held, len(pids))
                lo += len(pids)
        if L.races is not None:
            L.races.check(L)
        # the scalar unit issues for the whole program: it is busy from 0 to the issue end
        first[0] = 0.0
        last[0] = np.maximum(last[0], issue_end)
        shift = _dispatch(T, first, last, cores, prof.program_dispatch_cycles)
        port = busy[int(isa.Pipe.MTE2)] + busy[int(isa.Pipe.MTE3)]
        offsets, core_end = _compose(T, first, last, cores, kern.double_buffer and prof.double_buffer, port)
        body = float(core_end.max()) if len(core_end) else 0.0
        return body, busy.sum(axis=1).tolist(), bytes_r, bytes_w, instrs, offsets, shift, T

    def _resized(self, P: int, size: int, per_prog: int, held: int, n: int) -> int:
        """The batch size after a first batch of ``n`` programs held ``held`` bytes of host memory at its end. A
        batch holds at most ``batch_bytes``, counting each program at its on-chip footprint (``per_prog``);
        what a program really holds is often far less (tiles that view GM, or that were computed straight
        into it, hold nothing), so the later batches count it at what the first one held, but at no less
        than a quarter of its footprint. The size changes the host's work, never a result or a cycle: a batch
        is programs in lockstep, each with its own state and clock (programs that wait on each other's atomics
        are the exception, they spin as often as the programs run together make them: those keep the fixed
        size)."""
        per_prog = max(per_prog // 4, -(-held // n), 1)
        return max(size, min(P, self.batch_bytes // per_prog, 16384))


def _dispatch(T, first, last, cores: int, cycles: int):
    """Charge ``cycles`` to starting every program after its core's first (``program_dispatch_cycles``): the
    scalar unit is busy dispatching it, and its pipes start that much later. Returns each program's shift (for
    the trace: its rows start after the dispatch)."""
    shift = np.zeros(len(T))
    if cycles and len(T) > cores:
        shift[cores:] = cycles
        T[cores:] += cycles
        first[1:, cores:] += cycles
        last[:, cores:] += cycles
    return shift


def _split_cores(stage, prof) -> list[int]:
    """Cores for each kernel of a stage: every kernel gets at least one, the rest go by program count."""
    if len(stage) == 1:
        bc = stage[0][0]
        return [prof.cube_cores if bc.kernels[0].mix else prof.vector_cores]
    out = []
    progs = [bc.kernels[0].grid[0] * bc.kernels[0].grid[1] * bc.kernels[0].grid[2] for bc, _, _, _ in stage]
    for (bc, _, _, _), p in zip(stage, progs):
        mix = bc.kernels[0].mix
        pool = prof.cube_cores if mix else prof.vector_cores
        same = sum(q for (b2, _, _, _), q in zip(stage, progs) if b2.kernels[0].mix == mix)
        n_same = sum(1 for b2, _, _, _ in stage if b2.kernels[0].mix == mix)
        share = max(1, int(pool * p / max(1, same)))
        out.append(min(share, max(1, pool - (n_same - 1))))
    return out


def _watchdog_timeout(L: Launch, s, b: Batch) -> WatchdogTimeout:
    """The error ending a launch that used up its instruction budget: kernel, programs, pc and source line
    (as the bytecode embeds it)."""
    loc = L.loc_of_pc(s.pc)
    where = ""
    if loc is not None:
        span = render_span(loc, L.bc.debug.line_text(loc.file, loc.line))
        where = f"\n  at {loc}" + (f"\n{span}" if span else "")
    return WatchdogTimeout(
        f"kernel `{L.name}`: the launch executed more than {L.watchdog} instructions (a runaway loop?) — program(s) "
        f"{b.pids[:4].tolist()} stopped at pc {s.pc} ({s.ins.name})" + where +
        "\nhint: check the loop condition, or raise the limit with dvmlang.npu.Device(watchdog=N)")


def _quiet_state():
    """(numpy's floating-point error state, its value while every error is ignored): since numpy 2 the state is a
    context variable, so a launch ignores errors by setting it to a value made once (``np.errstate`` makes a new
    one at each entry). None when that does not hold (numpy 1.x, or a numpy that changed it): then launches
    use ``np.errstate``."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar as state
    except ImportError:
        return None
    with np.errstate(all="ignore"):
        quiet = state.get()
    token = state.set(quiet)
    try:
        ok = all(v == "ignore" for v in np.geterr().values())
    finally:
        state.reset(token)
    return (state, quiet) if ok else None


_QUIET = _quiet_state()


def _run_prefix(base, m, L: Launch, dispatch: int) -> tuple[Batch, int]:
    """(program 0 alone, the step it goes on from): ``Batch.first`` after the steps of ``m.prefix``, run now,
    their end state kept in ``base.after_prefix`` for the launches after this one, which start from it. Those
    steps only set registers from immediates and the instance's fixed facts, so from one start they always
    end in one state: registers, clock and instruction count. When the watchdog's budget would end within
    them, they are left to ``_execute``, which stops the launch where it always did."""
    b = Batch.first(m.zero_regs)
    k = m.prefix
    if k == 0 or L.watchdog <= k:
        return b, 0
    steps = m.__dict__.get("_prefix_run")
    if steps is None:  # the prefix and a stop, once per machine (a new instance of a build shares its machine)
        stop = replace(m.steps[k - 1], fn=_nothing, kind="end", cost=0)
        stop.advance_one = _no_time
        steps = m._prefix_run = m.steps[:k] + [stop]
    _run_alone(steps, b, L, dispatch)
    b.count -= 1  # (the stop)
    L.executed -= 1
    base.after_prefix = b.state()
    return b, k


def _nothing(b, L):
    return None


def _no_time(b, cost, dispatch):
    return 0.0, 0.0


def _run_alone(steps, batch: Batch, L: Launch, dispatch: int, start: int = 0) -> Batch:
    """Run a batch of one program (which never splits) to its end from step ``start``, untraced, floating-point
    errors ignored (as every launch runs); returns it."""
    if _QUIET is None:
        with np.errstate(all="ignore"):
            [b] = _execute(steps, batch, L, dispatch, None, start)  # (the one part a one-program batch ends as)
        return b
    state, quiet = _QUIET
    token = state.set(quiet)
    try:
        [b] = _execute(steps, batch, L, dispatch, None, start)
    finally:
        state.reset(token)
    return b


def _execute(steps, batch: Batch, L: Launch, dispatch: int, rec, start: int = 0):
    """Run one batch to completion from step ``start``, splitting where programs diverge; yields finished
    parts."""
    work = [(start, batch)]
    limit = L.watchdog
    left = limit - L.executed  # the budget is the launch's: every batch draws on it
    while work:
        i, b = work.pop()
        one = b.scalar
        while True:
            s = steps[i]
            b.count += 1
            left -= 1
            if left < 0:
                raise _watchdog_timeout(L, s, b)
            try:
                r = s.fn(b, L)
            except DvmError:
                raise
            except (ValueError, IndexError, TypeError, OverflowError, MemoryError, FloatingPointError,
                    ZeroDivisionError, KeyError) as e:
                raise InvalidBytecodeError(f"{s.ins.name} at pc {s.pc} cannot execute: {e}", section="code",
                                           offset=s.pc * 8) from None
            kind = s.kind
            cost = s.cost  # (a branch's is its row's; a transfer's is what it returned for the batch)
            if cost is None:
                cost = r if r is not None else 1
                if one and cost.__class__ is np.ndarray and cost.size > 1:  # one clock for several programs
                    c = cost.flat[0]
                    if (cost == c).all():
                        cost = c
                    else:  # their costs differ: a clock each from here on
                        b.spread()
                        one = False
            start, cost = s.advance_one(b, cost, dispatch) if one else advance(s, b, cost, dispatch)
            if rec is not None:
                rec.add(s, b, start, cost)
            if kind == "op" or kind == "set" or kind == "wait" or kind == "barrier":
                i += 1
            elif kind == "end":
                L.executed = limit - left
                yield b
                break
            elif kind == "jmp":
                i = s.target
            else:
                c = r
                if np.ndim(c) == 0:
                    take = bool(c) == (kind == "br_nz")
                    i = s.target if take else i + 1
                else:
                    cb = np.asarray(c).astype(bool)
                    if kind == "br_z":
                        cb = ~cb
                    if cb.all():
                        i = s.target
                    elif not cb.any():
                        i += 1
                    else:
                        taken = b.subset(cb)
                        rest = b.subset(~cb)
                        one = False  # (the parts of a split have a clock each)
                        parts = [(s.target, taken), (i + 1, rest)]
                        parts.sort(key=lambda x: -int(x[1].pids[0]))  # lowest program id runs first
                        work.append(parts[0])
                        i, b = parts[1]


_local = threading.local()


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


_DEFAULT: Device | None = None
_ENTERED: list = []  # the devices entered as context managers in any thread (appended and removed whole: atomic)


def default_device() -> Device:
    if _ENTERED:  # (none entered anywhere: the usual case, without the thread's own stack)
        s = _stack()
        if s:
            return s[-1]
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Device()
    return _DEFAULT


def set_default_device(device: Device) -> None:
    global _DEFAULT
    _DEFAULT = device


@contextlib.contextmanager
def use(device: Device):
    with device:
        yield device


