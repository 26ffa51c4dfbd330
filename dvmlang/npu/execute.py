"""Running a batch of programs through a kernel's steps: the scheduler of the parts a batch splits into, the
step-by-step interpreter, the instruction budget (the watchdog) and a one-program launch's prefix.

A branch whose condition differs between the programs of a batch splits it in two parts. The parts wait at
the step they go on from; the part at the lowest step runs first, until it reaches a step another part waits
at (or passes it): parts at the same step then merge and go on as one batch (``Batch.merged``). So the two
sides of an ``if`` meet again where it ends, and the programs of a data-dependent loop run its body together
however many trips each takes: a loop's exit lies after its body, and the programs that left it wait there
until the last one leaves. Every program still computes exactly what it would alone, with its own clock. (In a
kernel with atomics the parts run one after another to their ends instead, lowest program id first: a program
spinning on a lock must not keep the one holding it from running. A traced launch runs its parts that way too,
so its rows and their set -> wait pairs come in the order the trace has always recorded them.)

Each program may run ``watchdog`` instructions (``Device(watchdog=N)``): the budget is per program, counted
as the program runs them, whatever batch it runs in.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import DvmError, InvalidBytecodeError, WatchdogTimeout, render_span
from .compiled import END, STEP_ERRORS
from .launch import Launch
from .state import Batch
from .timing import advance

_NEVER = 1 << 62  # a step index no kernel reaches


def watchdog_timeout(L: Launch, s, b: Batch, executed: int) -> WatchdogTimeout:
    """The error ending a launch in which a program used up its instruction budget: kernel, programs, pc and
    source line (as the bytecode embeds it), how much work ran, and how to raise the budget."""
    loc = L.loc_of_pc(s.pc)
    where = ""
    if loc is not None:
        span = render_span(loc, L.bc.debug.line_text(loc.file, loc.line))
        where = f"\n  at {loc}" + (f"\n{span}" if span else "")
    g = L.kernel.grid
    programs = g[0] * g[1] * g[2]
    return WatchdogTimeout(
        f"kernel `{L.name}`: program(s) {b.pids[:4].tolist()} executed more than {L.watchdog:,} instructions, the "
        f"budget of each program (a runaway loop?), and stopped at pc {s.pc} ({s.ins.name}). The launch had run "
        f"{executed:,} instructions for its {programs:,} program(s) (an instruction run by a batch of programs in "
        "step counts once)" + where +
        "\nhint: check the loop condition; a kernel meant to run this long gets a larger budget per program with "
        "dvmlang.npu.Device(watchdog=N) or the environment variable DVMLANG_WATCHDOG=N")


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


QUIET = _quiet_state()


def run_prefix(base, m, L: Launch, dispatch: int) -> tuple[Batch, int]:
    """(program 0 alone, the step it goes on from): ``Batch.first`` after the steps of ``m.prefix``, run now,
    their end state kept in ``base.after_prefix`` for the launches after this one, which start from it. Those
    steps only set registers from immediates and the instance's fixed facts, so from one start they always
    end in one state: registers, clock and instruction count. When the watchdog's budget would end within
    them, they are left to ``execute``, which stops the launch where it always did."""
    b = Batch.first(m.zero_regs)
    k = m.prefix
    if k == 0 or L.watchdog <= k:
        return b, 0
    steps = m.__dict__.get("_prefix_run")
    if steps is None:  # the prefix and a stop, once per machine (a new instance of a build shares its machine)
        stop = replace(m.steps[k - 1], fn=_nothing, kind="end", cost=0)
        stop.advance_one = _no_time
        steps = m._prefix_run = m.steps[:k] + [stop]
    untimed, L.untimed = L.untimed, False  # (the prefix is always timed: its end state is kept)
    try:
        run_alone(steps, b, L, dispatch)
    finally:
        L.untimed = untimed
    b.count -= 1  # (the stop)
    L.executed -= 1
    base.after_prefix = b.state()
    return b, k


def _nothing(b, L):
    return None


def _no_time(b, cost, dispatch):
    return 0.0, 0.0


def quietly(fn, *args):
    """``fn(*args)`` with floating-point errors ignored, as every launch runs."""
    if QUIET is None:
        with np.errstate(all="ignore"):
            return fn(*args)
    state, quiet = QUIET
    token = state.set(quiet)
    try:
        return fn(*args)
    finally:
        state.reset(token)


def run_alone(steps, batch: Batch, L: Launch, dispatch: int, start: int = 0, blocks=None, path=None) -> Batch:
    """Run a batch of one program (which never splits) to its end from step ``start``, untraced, floating-point
    errors ignored (as every launch runs); returns it. ``blocks``, ``path``: as ``execute``'s."""
    [b] = quietly(list, execute(steps, batch, L, dispatch, None, start, blocks, True, path))  # (the one part left)
    return b


class _Parts:
    """The parts of a split batch waiting to run. ``reconverge``: the part at the lowest step runs first, until
    it reaches the step another part waits at (parts at one step merge, ``Batch.merged``); otherwise (programs
    that wait on each other's atomics: a program spinning on a lock must not keep the one holding it from
    running) each part runs to its end, the part with the lowest program id first."""

    __slots__ = ("reconverge", "waiting", "stack")

    def __init__(self, reconverge: bool):
        self.reconverge = reconverge
        self.waiting: dict = {}  # step -> the parts waiting there
        self.stack: list = []  # (step, part), the next on top

    def split(self, taken_at: int, taken: Batch, rest_at: int, rest: Batch) -> None:
        if self.reconverge:
            self.wait(taken_at, taken)
            self.wait(rest_at, rest)
        elif taken.pids[0] < rest.pids[0]:
            self.stack += [(rest_at, rest), (taken_at, taken)]
        else:
            self.stack += [(taken_at, taken), (rest_at, rest)]

    def wait(self, i: int, b: Batch) -> None:
        """Part ``b`` waits at step ``i``, merged with a part already there when they hold the same tiles."""
        parts = self.waiting.get(i)
        if parts is None:
            self.waiting[i] = [b]
            return
        for j, p in enumerate(parts):
            m = Batch.merged(p, b)
            if m is not None:
                parts[j] = m
                return
        parts.append(b)

    def next(self):
        """(step, part, the step it may run to) of the part to run next, or None when none is left."""
        if self.stack:
            i, b = self.stack.pop()
            return i, b, _NEVER
        waiting = self.waiting
        if not waiting:
            return None
        i = min(waiting)
        parts = waiting[i]
        b = parts.pop(0)
        if not parts:
            del waiting[i]
        later = [k for k in waiting if k > i]
        return i, b, min(later) if later else _NEVER


class PathRecorder:
    """What ``replay.record`` records of a batch run from a step to its end, taken as each step runs (``record``, or
    ``execute`` in a timed launch, whose path is then replayed from the next launch on):
    (start registers, [(step index, registers before it or None for a branch, a jump or an event)], final
    registers, {position: a transfer's function for its recorded registers}). ``trace()`` is None when the batch
    split (its programs diverged) or the path grew past ``limit`` steps, or it did not reach its end."""

    __slots__ = ("batch", "first", "last", "path", "resolved", "limit", "ended")

    def __init__(self, batch: Batch, limit: int):
        self.batch, self.limit, self.ended = batch, limit, False
        self.first = self.last = tuple(batch.regs)
        self.path: list | None = []
        self.resolved: dict = {}

    def add(self, i: int, s, b: Batch) -> None:
        """After step ``s`` (index ``i``) ran on ``b``."""
        path = self.path
        if path is None:
            return
        if b is not self.batch or len(path) >= self.limit:
            self.path = None
            return
        kind = s.kind
        if not s.pure:
            resolve = getattr(s.fn, "resolve", None)
            if resolve is not None:  # (a transfer: its descriptor for these registers, found once)
                fast = resolve(b)
                if fast is not None:
                    self.resolved[len(path)] = fast
        path.append((i, None if kind in _NO_REGS else self.last))
        self.last = tuple(b.regs)
        if kind == "end":
            self.ended = True

    def trace(self):
        if self.path is None or not self.ended:
            return None
        return self.first, self.path, self.last, self.resolved


_NO_REGS = frozenset(("br_z", "br_nz", "set", "wait", "barrier", "jmp"))


def execute(steps, batch: Batch, L: Launch, dispatch: int, rec, start: int = 0, blocks=None, reconverge=True,
            path: PathRecorder | None = None):
    """Run one batch to completion from step ``start``, splitting where programs diverge and merging the parts
    where they meet again (see the module's docstring); yields finished parts. ``L.executed`` counts the
    instructions run, one per part and step. ``blocks``: the machine's compiled blocks (``compiled.Compiled``,
    for ``steps`` being the machine's steps), run where a block starts and fits the budget; untraced only.
    With ``L.untimed`` no step is timed (the launch's timing is known: ``timing_cache``). ``reconverge``: see
    ``_Parts``. ``path``: a ``PathRecorder`` every step is given to (the blocks are not run then)."""
    limit = L.watchdog
    untimed = L.untimed
    tables = blocks.tables if blocks is not None and rec is None and path is None else None
    parts = _Parts(reconverge)
    i, b, stop = start, batch, _NEVER
    executed = 0
    try:
        while True:
            while i < stop:
                if tables is not None:
                    mode = 2 if untimed else 0 if b.scalar else 1
                    blk = tables[mode][i]
                    if blk is not None:
                        if blk.__class__ is int:  # not compiled yet: runs step by step left before it is
                            if blk:
                                tables[mode][i] = blk - 1
                                blk = None
                            else:
                                blk = blocks.block(mode, i)
                        if blk is not None and b.count + blk.n <= limit:
                            b.count += blk.n
                            executed += blk.n
                            r = (blk.small if b.n <= blk.rows else blk.fn)(b, L)
                            if r.__class__ is int:
                                if r == END:
                                    L.executed += executed
                                    executed = 0
                                    yield b
                                    b = None
                                    break
                                if blk.start < r < blk.end:  # left the block early (its programs' clocks spread)
                                    b.count -= blk.end - r
                                    executed -= blk.end - r
                                i = r
                                continue
                            s, c = r  # a branch whose condition differs between the programs
                            cb = np.asarray(c).astype(bool)
                            if s.kind == "br_z":
                                cb = ~cb
                            if cb.all():
                                i = s.target
                            elif not cb.any():
                                i = s.index + 1
                            else:
                                parts.split(s.target, b.subset(cb), s.index + 1, b.subset(~cb))
                                b = None
                                break
                            continue
                s = steps[i]
                b.count += 1
                executed += 1
                if b.count > limit:
                    raise watchdog_timeout(L, s, b, L.executed + executed - 1)
                try:
                    r = s.fn(b, L)
                except DvmError:
                    raise
                except STEP_ERRORS as e:
                    raise InvalidBytecodeError(f"{s.ins.name} at pc {s.pc} cannot execute: {e}", section="code",
                                               offset=s.pc * 8) from None
                if path is not None:
                    path.add(i, s, b)
                kind = s.kind
                if not untimed:
                    one = b.scalar
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
                    t0, cost = s.advance_one(b, cost, dispatch) if one else advance(s, b, cost, dispatch)
                    if rec is not None:
                        rec.add(s, b, t0, cost)
                if kind == "op" or kind == "set" or kind == "wait" or kind == "barrier":
                    i += 1
                elif kind == "end":
                    L.executed += executed
                    executed = 0
                    yield b
                    b = None
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
                        else:  # the programs diverge: each part waits at its next step
                            parts.split(s.target, b.subset(cb), i + 1, b.subset(~cb))
                            b = None
                            break
            if b is not None:  # reached a step another part waits at
                parts.wait(i, b)
            nxt = parts.next()
            if nxt is None:
                return
            i, b, stop = nxt
    finally:
        L.executed += executed
