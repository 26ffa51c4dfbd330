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
import os
import threading
import time

import numpy as np

from ..errors import DvmError, LaunchError, ResourceError, warn_user
from ..vm import isa
from . import replay as _replay
from . import steady as _steady
from .steady import split_cores as _split_cores
from .compiled import compiled as compiled_blocks
from .execute import PathRecorder, execute, quietly, run_alone, run_prefix
from .l2 import L2Cache
from .launch import Launch, LaunchBase
from .machine import Machine
from .profile import get_profile
from .record import PIPE_LABELS, LaunchRecord  # noqa: F401 - (device.LaunchRecord and its labels, as before)
from .state import Batch, held_bytes, programs
from .timing import _compose, _total, roofline
from .timing_cache import fixed as timing_fixed

N_PIPES = isa.N_PIPES
PROBE = 64  # programs in the first batch of a large launch, which measures what one holds on the host
DEFAULT_WATCHDOG = 1 << 26  # instructions per program (DVMLANG_WATCHDOG=N sets another default): see _watchdog
_MTE2, _MTE3 = int(isa.Pipe.MTE2), int(isa.Pipe.MTE3)



class Device:
    """A simulated NPU. ``Device(profile="910B3")`` or ``Device(profile=Profile(...))``.

    Options: ``debug`` (poison reads of unwritten on-chip memory are reported; ``"raise"`` makes them
    errors), ``race_detection`` (report programs writing the same GM bytes without atomics),
    ``watchdog`` (instructions each program may execute, default 2**26 or ``DVMLANG_WATCHDOG``),
    ``batch_bytes`` (host working set per batch), ``sequential`` (run one program at a time: the reference
    path), ``compiled`` (run straight-line regions as generated host code once they have run once, the
    default; ``"always"`` from their first run; False: every instruction step by step), ``timing_cache``
    (time an instance's launches once when its timing cannot depend on the data, then run the numerics alone:
    ``timing_cache``; ``"check"`` times every launch and compares; False times every launch), ``replay``
    (a launch whose timing is kept runs its instance's recorded path as one function, ``npu/replay.py``;
    False: never)."""

    def __init__(self, profile=None, *, debug=False, race_detection=False, watchdog: int | None = None,
                 batch_bytes: int = 64 << 20, sequential: bool = False, compiled: bool | str = True,
                 timing_cache: bool | str = True, replay: bool = True):
        self.profile = get_profile(profile)
        self.debug = debug
        self.race_detection = race_detection
        if watchdog is None:
            watchdog = _watchdog()
        if not isinstance(watchdog, int) or isinstance(watchdog, bool) or watchdog < 1:
            raise DvmError(f"watchdog must be a positive instruction count per program, got {watchdog!r}")
        self.watchdog = watchdog
        self.batch_bytes = batch_bytes
        self.sequential = sequential
        if compiled not in (True, False, "always"):
            raise DvmError(f"compiled must be True, False or 'always', got {compiled!r}")
        self.compiled = compiled
        if timing_cache not in (True, False, "check"):
            raise DvmError(f"timing_cache must be True, False or 'check', got {timing_cache!r}")
        self.timing_cache = timing_cache
        if replay not in (True, False):
            raise DvmError(f"replay must be True or False, got {replay!r}")
        self.replay = replay
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
            m.shared = True  # (by the build's instances: see _records_as_timed)
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
        # a member whose timing is kept and whose path is replayed takes the steady way (npu/steady.py)
        if trace is None and self.replay and not self.sequential and self.timing_cache is True and \
                not self.debug and not self.race_detection:
            members, clock = _steady.members(self, stages)
        else:
            members, clock = [], 0.0
            for stage in stages:
                for bc, _, _, _ in stage:
                    self._ready(bc)
                shares = _split_cores(stage, prof)
                longest = 0.0
                for (bc, arrays, kname, alias), cores in zip(stage, shares):
                    # side by side, the kernels share HBM: each gets the part of it its cores are of the stage's
                    rec = self._run_kernel(bc, 0, arrays, trace, kname, alias, cores=cores, overhead=0, start=clock,
                                           group=kname, hbm_share=cores / sum(shares))
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
        cached instance has been through both). A new instance of an encoder whose instances have been through
        both on this profile shares their verdicts (its code differs only in the values patched in, which the
        validator's verdict holds for; its buffers are the build's): only its grid is checked."""
        fields = bc.__dict__
        p = self.profile
        if fields.get("_fits") is p and bc.decoded is not None:
            return
        enc = fields.get("_encoder")
        if enc is not None and enc.fits is p and fields.get("decoded") is enc.decoded is not None:
            g = fields["_grid"]
            if g[0] * g[1] * g[2] <= p.max_programs:
                fields["_fits"] = p
                return
        bc._decode(trust=True)
        self._check_fits(bc)
        fields["_fits"] = p
        if enc is not None and bc.decoded is enc.decoded:
            enc.fits = p

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
        kept, key = base.timed(L, self.timing_cache if rec is None else False)
        if L.untimed:  # the instance's timing is known: the numerics alone
            if not (self.replay and self._replay_batch(base, m, L, P)):
                self._run_batches(m, base.kern, L, cores, P, None)
            kept.restore(L.rates)
            record = self._finish(base, L, *kept.figures())[0]
            record.timing_kept = True
            base.release(L)
            return record
        into = base if key is not None and rec is None and self._records_as_timed(base, m) else None
        body, busy, bytes_r, bytes_w, instrs, offsets, shift, T = self._run_batches(m, base.kern, L, cores, P, rec,
                                                                                    into)
        if key is not None:
            base.keep(L, key, (body, busy, bytes_r, bytes_w, instrs))
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
        kept, key = base.timed(L, self.timing_cache)
        state, k = base.after_prefix, m.prefix
        if state is not None and L.watchdog > k:  # where an earlier launch's prefix ended (_run_prefix)
            L.executed = k
            b = L.parked  # (the batch of the launch L was before, if any: Batch.resume)
            b = b.resume(state) if b is not None else Batch.resumed(state)
        else:
            b, k = run_prefix(base, m, L, dispatch)
        rp = base.replay if L.untimed and self.replay and not self.sequential else False
        if rp is None:  # the first launch whose timing is kept: its path recorded, and replayed from the next
            b = self._record(base, m, b, L, k, dispatch)
        elif rp and b.count + rp.n <= L.watchdog:
            quietly(_replay.run, rp, b, L)
        elif key is not None and not L.untimed and self._records_as_timed(base, m):
            path = PathRecorder(b, _replay.MAX_STEPS)
            b = run_alone(m.steps, b, L, dispatch, k, None, path)
            if path.trace() is not None:
                rp = quietly(_replay.generate, m, path.trace(), 1)
                base.replay = rp if rp is not None else False
        else:
            b = run_alone(m.steps, b, L, dispatch, k, self._blocks(m))
        if L.races is not None:
            L.races.check(L)
        if L.untimed:
            kept.restore(L.rates)
            figures = kept.figures()
        else:
            busy = b.pipe_busy
            end = max(max(b.pipe_free), b.t_issue, b.done)
            port = busy[_MTE2] + busy[_MTE3]
            figures = (end if end >= port else port, busy, _total(b.bytes_read, 1), _total(b.bytes_written, 1),
                       b.count)
            if key is not None:
                base.keep(L, key, figures)
        record = self._finish(base, L, *figures)[0]
        if L.untimed:
            record.timing_kept = True
        b.park()
        L.parked = b
        base.release(L)
        return record

    def _records_as_timed(self, base, m) -> bool:
        """Whether a timed launch of ``base`` whose timing is kept from now on records its path as it runs (then
        the next launch replays it; otherwise the next launch, the first untimed one, records it): for the first
        instance of a build timed on this machine, whose steps run one by one anyway (its blocks are compiled as
        they run again). A new instance of a build timed before runs its compiled blocks instead, and may never be
        launched again (a new length). Not on a device asked for compiled blocks from the first run
        (``compiled="always"``), which runs them. Asking marks the machine timed."""
        if base.replay is not None or not self.replay or self.sequential or self.compiled == "always" or \
                not _replay.eligible(m) or not m.__dict__.get("shared"):
            return False
        first = "_timed" not in m.__dict__
        m._timed = True
        return first

    def _record(self, base, m, b, L, k, dispatch):
        """Run one program of untimed launch ``L`` from step ``k``, recording its path (``replay.record``) for
        the base's replay; returns the batch at its end."""
        if not _replay.eligible(m):
            base.replay = False
            return run_alone(m.steps, b, L, dispatch, k, self._blocks(m))
        trace, at = quietly(_replay.record, m, b, L, k)
        if trace is None:
            base.replay = False
            return run_alone(m.steps, b, L, dispatch, at, self._blocks(m))
        rp = _replay.generate(m, trace, 1)
        base.replay = rp if rp is not None else False
        return b

    def _replay_batch(self, base, m, L, P) -> bool:
        """Run the numerics of untimed launch ``L`` of ``P`` programs as one batch through the base's replay
        (recording it at the first such launch); False when the launch runs in several batches or its kernel
        is not replayed (then ``_run_batches`` runs it).

        Programs whose paths part at a branch (``replay.divergence``: the last trip of a persistent loop, which
        only some programs take) are recorded in groups, one launch at a time: the launch that finds a branch
        where a group parts runs that group on step by step from there, and the next records each part on a batch
        of its own (``replay.Pending``), until every group has its path (``replay.Parts``). A group whose path
        tests a value from memory is not replayed (``generate``): then nothing of the launch is."""
        rp = base.replay
        if rp is False or self.sequential:
            return False
        kern = base.kern
        if self._batch_size(kern, P)[1] < P:  # (_run_batches's batches: several)
            return False
        pending = rp.__class__ is _replay.Pending
        if rp is not None and not pending:
            if rp.n > L.watchdog:
                return False
            if rp.__class__ is _replay.Parts:
                quietly(_replay.run, rp, None, L)
            else:
                pids, coords = programs(0, P, kern.grid[0], kern.grid[1])
                quietly(_replay.run, rp, Batch(pids, kern.grid, m.zero_regs, uniform=True, coords=coords), L)
            return True
        if not _replay.eligible(m):
            base.replay = False
            return False
        parts = rp.parts if pending else [programs(0, P, kern.grid[0], kern.grid[1]) + (None,)]
        base.replay = quietly(_replay.record_groups, m, L, parts, kern.grid, lambda b, at: self._on_from(m, b, L, at))
        return True

    def _on_from(self, m, b, L, at: int) -> None:
        """Run batch ``b`` of untimed launch ``L`` on from step ``at``, step by step."""
        for _ in execute(m.steps, b, L, self.profile.scalar_dispatch, None, at, self._blocks(m), not m.atomics):
            pass

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
            base.fixed = not self.debug and not self.race_detection and timing_fixed(m)
        return base

    def _run_batches(self, m, kern, L, cores, P, rec, record=None):
        """Every program, in batches (the first a probe, see ``_resized``); their pipe clocks placed on
        ``cores``. Returns (body, busy per pipe, bytes read, bytes written, instructions, each program's offset,
        dispatch shift and length); with ``L.untimed``, runs the numerics alone and returns None. ``record``: a
        launch base whose replay the launch's path gives when its programs run as one batch that never splits
        (``execute.PathRecorder``; otherwise the next launch records it, ``_replay_batch``)."""
        prof = self.profile
        untimed = L.untimed
        if not untimed:
            T = np.zeros(P)
            first = np.full((N_PIPES, P), np.inf)
            last = np.zeros((N_PIPES, P))
            busy = np.zeros((N_PIPES, P))
            issue_end = np.zeros(P)
        bytes_r = 0.0
        bytes_w = 0.0
        dispatch = prof.scalar_dispatch
        steps = m.steps
        blocks = self._blocks(m) if rec is None else None
        per_prog, size = self._batch_size(kern, P)
        # a first batch of PROBE programs measures what a program holds on the host (_resized)
        probe = L.races is None and not m.atomics and size > PROBE and P > size
        if record is not None and size < P:
            record = None
        path = None
        lo = 0
        with np.errstate(all="ignore"):
            while lo < P:
                pids, coords = programs(lo, min(P, lo + (PROBE if probe and lo == 0 else size)), kern.grid[0],
                                        kern.grid[1])
                batch = Batch(pids, kern.grid, m.zero_regs, uniform=True, coords=coords)
                held = 0
                if record is not None:
                    path = PathRecorder(batch, _replay.MAX_STEPS)
                # (a traced launch runs its parts as the trace has always shown them: each to its end)
                for b in execute(steps, batch, L, dispatch, rec, 0, blocks, not m.atomics and rec is None, path):
                    if untimed:  # (the numerics alone: the timing is the instance's)
                        if probe:
                            held += held_bytes(b)
                        continue
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
                    if probe:
                        held += held_bytes(b)
                if probe and lo == 0:
                    size = self._resized(P, size, per_prog, held, len(pids))
                lo += len(pids)
        instrs = L.executed
        if L.races is not None:
            L.races.check(L)
        if path is not None and path.trace() is not None:
            rp = quietly(_replay.generate, m, path.trace(), P)
            record.replay = rp if rp is not None else False
        if untimed:
            return None
        # the scalar unit issues for the whole program: it is busy from 0 to the issue end
        first[0] = 0.0
        last[0] = np.maximum(last[0], issue_end)
        shift = _dispatch(T, first, last, cores, prof.program_dispatch_cycles)
        port = busy[int(isa.Pipe.MTE2)] + busy[int(isa.Pipe.MTE3)]
        offsets, core_end = _compose(T, first, last, cores, kern.double_buffer and prof.double_buffer, port)
        body = float(core_end.max()) if len(core_end) else 0.0
        return body, busy.sum(axis=1).tolist(), bytes_r, bytes_w, instrs, offsets, shift, T

    def _batch_size(self, kern, P: int) -> tuple[int, int]:
        """(the host bytes a program is counted at, the first batch's size) of a launch of ``P`` programs: a batch
        holds at most ``batch_bytes`` of programs at their on-chip footprint (``_resized`` sizes the later ones)."""
        per_prog = kern.footprint.get("ub", 0) + kern.footprint.get("l0c", 0) + 4096
        return per_prog, 1 if self.sequential else max(1, min(P, self.batch_bytes // per_prog, 16384))

    def _blocks(self, m):
        """The compiled blocks of machine ``m`` this device runs (None: every step one by one)."""
        if not self.compiled:
            return None
        return compiled_blocks(m, self.compiled == "always")

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


def _watchdog() -> int:
    """The default instruction budget per program: ``DVMLANG_WATCHDOG`` (a positive integer, or a power of two
    written ``2**N``) when set, else ``DEFAULT_WATCHDOG``."""
    raw = os.environ.get("DVMLANG_WATCHDOG")
    if not raw:
        return DEFAULT_WATCHDOG
    text = raw.strip().replace("_", "")
    try:
        n = 2 ** int(text[3:]) if text.startswith("2**") else int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise DvmError(f"DVMLANG_WATCHDOG must be a positive instruction count per program (or 2**N), got {raw!r}")
    return n


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
