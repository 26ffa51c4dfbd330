"""The steady relaunch: a launch whose timing is the instance's (``timing_cache``) replays its numerics as one
straight-line function, generated once per instance.

When every register a kernel writes is written by a pure scalar step (``Step.pure``: from immediates, the
program's coordinates, the grid and the parameter table, never from memory), each register holds at each step
of a launch a value fixed by the instance, and so does every branch condition: every launch of the instance
runs the same steps in the same order, with the same register values. The first launch that runs the numerics
alone (its timing kept) runs its steps one by one and records them (``record``): the steps in the order they
ran and, before each step that is not pure, the registers. When the batch never split and the path is not too
long, ``generate`` writes that path as one function (``Replay``): the pure steps, branches, jumps and events
disappear (in a launch whose timing is kept they only set registers or do nothing); before each remaining
step, the registers that differ from what the path last left are set to the recorded values (so every step
sees exactly the registers the step-by-step path gives it), then the step runs as the compiled path runs it
(its own function, or, for a small batch, its vector instruction computed directly: ``compiled._Tiles``). At
the end the registers are left as the path leaves them. So the numerics, faults and on-chip state are those of
the step-by-step path: the same functions on the same values in the same order, without the scheduler, the
blocks' calls and the scalar statements. The record (cycles, bytes, instructions) is the kept timing's, as
for any launch whose timing is kept; the L2 model settles as before.

Not replayed: traced launches, devices in debug or race-detection mode (never untimed), kernels with a register
written by a step that is not pure (a scalar load, a tile element moved to a register), batches that split,
several batches, paths longer than ``MAX_STEPS``, and a watchdog budget the path would exceed: those run as
before. ``Device(replay=False)`` turns it off.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import DvmError, InvalidBytecodeError
from ..vm import semantics as sem
from .compiled import SMALL_BYTES, STEP_ERRORS, _invalid, _tile_bytes, _Tiles
from .timing_cache import _operands

_LIFT = re.compile(r"lift\(R\[(\d+)\], (\d+), (\w+)\)")

MAX_STEPS = 20000  # the longest path (steps, per program) a replay is written for


class Replay:
    """A launch path as one function: ``fn(batch, launch)`` runs its ``n`` steps (each program's count)."""

    __slots__ = ("fn", "n", "source")

    def __init__(self, fn, n: int, source: str):
        self.fn, self.n, self.source = fn, n, source


def eligible(m) -> bool:
    """Whether every register machine ``m``'s steps write is written by a pure step (worked out once)."""
    v = m.__dict__.get("_replayable")
    if v is None:
        v = True
        if m.atomics:
            v = False
        else:
            for s, d in zip(m.steps, m.decoded):
                if not s.pure and _operands(m, d)[2] is not None:
                    v = False
                    break
        m._replayable = v
    return v


class _Hand(Exception):
    """The path cannot be recorded from here (the batch splits, or the budget would end): the caller goes on."""

    def __init__(self, i: int):
        self.i = i


def record(m, b, L, start: int):
    """Run batch ``b`` of an untimed launch ``L`` from step ``start`` step by step, as ``execute`` runs it, and
    record the path: (trace, or None when it cannot be replayed, and the step to go on from when the recording
    stopped early, or None at the end). A trace is (start registers, [(step index, registers before it or None
    for a pure step, a branch, a jump or an event)], final registers, {position: the step's function for its
    recorded registers, where the step has one (``fn.resolve``: a transfer with its descriptor found)})."""
    steps = m.steps
    limit = L.watchdog
    first = tuple(b.regs)
    path = []
    resolved = {}  # position in path -> the step's function for the recorded registers (a transfer's ``resolve``)
    i = start
    try:
        while True:
            if len(path) >= MAX_STEPS or b.count + 1 > limit:
                raise _Hand(i)
            s = steps[i]
            kind = s.kind
            if kind == "br_z" or kind == "br_nz":
                c = b.regs[_cond(m, s)]
                if np.ndim(c) == 0:
                    take = bool(c) == (kind == "br_nz")
                else:
                    cb = np.asarray(c).astype(bool)
                    if kind == "br_z":
                        cb = ~cb
                    if cb.all():
                        take = True
                    elif not cb.any():
                        take = False
                    else:
                        raise _Hand(i)  # the programs diverge: execute splits the batch
                b.count += 1
                L.executed += 1
                path.append((i, None))
                i = s.target if take else i + 1
                continue
            regs = None if (s.pure or kind in ("set", "wait", "barrier", "jmp")) else tuple(b.regs)
            b.count += 1
            L.executed += 1
            try:
                s.fn(b, L)
            except DvmError:
                raise
            except STEP_ERRORS as e:
                raise InvalidBytecodeError(f"{s.ins.name} at pc {s.pc} cannot execute: {e}", section="code",
                                           offset=s.pc * 8) from None
            if regs is not None:
                resolve = getattr(s.fn, "resolve", None)
                if resolve is not None:  # (a transfer: its descriptor for these registers, found once)
                    fast = resolve(b)
                    if fast is not None:
                        resolved[len(path)] = fast
            path.append((i, regs))
            if kind == "end":
                return (first, path, tuple(b.regs), resolved), None
            i = s.target if kind == "jmp" else i + 1
    except _Hand as h:
        return None, h.i


def _cond(m, s) -> int:
    return m.decoded[s.index].vals["rc"]


def generate(m, trace, n: int) -> Replay:
    """The function replaying ``trace`` (``record``'s) for a batch of ``n`` programs."""
    first, path, final, resolved = trace
    steps = m.steps
    env = {"DvmError": DvmError, "ERRORS": STEP_ERRORS, "invalid": _invalid, "STEPS": steps, "np": np}
    consts: dict = {}  # id(value) -> its name

    def const(v) -> str:
        name = consts.get(id(v))
        if name is None:
            name = consts[id(v)] = f"C{len(consts)}"
            if v.__class__ is np.ndarray:
                v = v.copy()
                v.flags.writeable = False
            env[name] = v
        return name

    biggest = max((_tile_bytes(m, i, i + 1) for i, regs in path if regs is not None), default=0)
    tiles = _Tiles(m, env) if biggest and n <= SMALL_BYTES // biggest else None
    cur = list(first)
    body: list[str] = []
    read_after = _ub_reads_after(m, path) if tiles is not None else None
    lifts: dict = {}

    def lifted(match) -> str:  # a register's value as a tile operand: the register is the recorded constant
        r, rank, dtn = int(match.group(1)), int(match.group(2)), match.group(3)
        key = (id(cur[r]), rank, dtn)
        name = lifts.get(key)
        if name is None:
            v = sem.lift(cur[r], rank, env[dtn])
            if v.flags.writeable:
                v.flags.writeable = False
            name = lifts[key] = f"LF{len(lifts)}"
            env[name] = v
        return name

    def regs_to(regs):
        for r, v in enumerate(regs):
            if v is not cur[r]:
                body.append(f"R[{r}] = {const(v)}")
                cur[r] = v

    for j, (i, regs) in enumerate(path):
        s = steps[i]
        if regs is None or s.kind == "end":
            continue
        regs_to(regs)
        body.append(f"k = {i}")
        d = m.decoded[i]
        if s.ins.family == "nop":
            continue
        at = len(body)
        if tiles is not None and tiles.emit(d, body):
            for x in range(at, len(body)):
                body[x] = _LIFT.sub(lifted, body[x])
            addr, dtp, shape = m.layout(d.vals["dst"])
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtp.itemsize
            if not any(lo < addr + nbytes and addr < hi for lo, hi in read_after[j]):
                last = body[-1]  # the store of a value nothing reads from the unified buffer again: dropped
                assert last.startswith(("MU[", "place_among(MU,")), last
                body.pop()
            continue
        fast = resolved.get(j)
        if fast is not None:
            env[f"D{j}"] = fast
            body.append(f"D{j}(b, L)")
        else:
            env[f"S{i}"] = s.fn
            body.append(f"S{i}(b, L)")
        if tiles is not None:
            tiles.forget()
    regs_to(final)
    head = ["def replay(b, L):", "    R = b.regs", "    k = 0"]
    if tiles is not None and tiles.used:
        head.append("    MU = b.mem['ub']")
    src = "\n".join(head + ["    try:"] + ["        " + x for x in body + ["return None"]] + [
        "    except DvmError:", "        raise", "    except ERRORS as e:",
        "        raise invalid(STEPS[k], e) from None"]) + "\n"
    code = compile(src, f"<dvmlang replay {m.kernel.name}>", "exec")
    exec(code, env)  # noqa: S102 - generated from the machine's own steps and a recorded path
    return Replay(env["replay"], len(path), src)


def _ub_reads_after(m, path) -> list:
    """Per position of ``path``, the unified-buffer byte ranges (lo, hi) some later step of it reads (a step may
    read its destination too: an accumulating MMAD, a load that keeps part of it)."""
    out = [()] * len(path)
    later: set = set()
    for j in range(len(path) - 1, -1, -1):
        out[j] = tuple(later)
        i, regs = path[j]
        if regs is not None:
            d = m.decoded[i]
            if sum(f.kind == "tile" for f in d.ins.fields) != sum(1 for _ in m.tile_fields(d)):
                later.add((0, 1 << 62))  # (a tile whose layout the kernel lacks: any bytes)
            for space, lo, hi in _operands(m, d)[1]:
                if space == "ub":
                    later.add((lo, hi))
    return out


def run(rp: Replay, b, L) -> None:
    """Replay ``rp`` on batch ``b`` of launch ``L`` (floating-point errors ignored by the caller): the counts as the
    step-by-step path leaves them."""
    rp.fn(b, L)
    b.count += rp.n
    L.executed += rp.n
