"""The steady relaunch: a launch whose timing is the instance's (``timing_cache``) replays its numerics as one
straight-line function, generated once per instance.

A register written by a pure scalar step (``Step.pure``) from registers that do not come from memory holds, at
each step of a launch, a value fixed by the instance (immediates, the program's coordinates, the grid, the
parameter table). The other registers are *live*: written by a step that reads memory (a scalar load, a tile's
element moved to a register) or computed from one. When no branch tests a live register, every launch of the
instance runs the same steps in the same order.

The first launch that runs the numerics alone (its timing kept) runs its steps one by one and records them
(``record``): the steps in the order they ran, the registers before each, and for a transfer its descriptor for
those registers (``fn.resolve``); a build's first instance records them earlier, as its timed launch runs its steps
one by one (``execute.PathRecorder``, ``Device._records_as_timed``). When the batch never split and the path is not
too long, ``generate`` writes that path as one function (``Replay``):

* pure steps on fixed registers, branches on them, jumps and events disappear (in a launch whose timing is kept
  they only set registers or do nothing); before each remaining step, the fixed registers that differ from what
  the path last left are set to the recorded values, so every step sees exactly the registers the step-by-step
  path gives it; live registers are computed as the steps compute them (a pure step reading one runs);
* a transfer runs with the descriptor its step found for the recorded registers (a tensor of another size goes
  through the step, which checks it again); a vector instruction of a small batch is computed directly
  (``compiled._Tiles``) with its register operands as constants, and its result is not stored in the unified
  buffer when no later step of the path reads those bytes (the batch's on-chip memory is dropped at the end);
  one that reads no loaded value (an index tile, a size argument, numbers: a kernel's masks and index arithmetic)
  is computed when the function is written, and the path takes that array (``_fold``); a matmul's tiles (loads
  into L1, copies to L0A / L0B and from L0C, MMADs) go through local variables too (``cube_chain``);
* a branch on a live register whose other way traps (a device assertion: a gather's index check) is tested as
  the step-by-step path tests it; the programs that go the other way trap, with the trap's own error (the
  programs, as the split batch would hold them, and the line). Any other branch on a live register: no replay.

So the numerics, faults and on-chip values any step reads are those of the step-by-step path: the same functions
on the same values in the same order, without the scheduler, the blocks' calls, the scalar statements, the
descriptors' lookups and the dead stores. The record (cycles, bytes, instructions) is the kept timing's, as for
any launch whose timing is kept; the L2 model settles as before.

Programs whose paths part at a branch (``divergence``: a persistent loop's last trip, which only some programs
take) are recorded group by group, one launch at a time (``Device._replay_batch``), and replayed as ``Parts``:
each group's path one function, run on a batch of its programs alone.

Not replayed: traced launches, devices in debug or race-detection mode (never untimed), the sequential device,
kernels with atomics, groups whose path tests a live register, more than ``MAX_PARTS`` groups, several batches,
paths longer than ``MAX_STEPS``, and a watchdog budget the path would exceed: those run as before.
``Device(replay=False)`` turns it off. ``tests/test_replay.py`` compares replayed launches with the full path's on
the gallery, the Triton tutorials, random kernels, the test suite's torch models, out-of-range gathers and
programs replayed in groups.
"""

from __future__ import annotations

import ast
import re

import numpy as np

from ..errors import DvmError, InvalidBytecodeError
from ..vm import semantics as sem
from .compiled import SMALL_BYTES, STEP_ERRORS, _invalid, _tile_bytes, _Tiles
from .cube_chain import SPACES, CubeLocals, dead_stores, reads_of
from .boxview import _strided
from .dma import dma_write
from .execute import PathRecorder
from .state import Batch, materialise_views
from .timing_cache import _operands, tile_reads

_LIFT = re.compile(r"lift\(R\[(\d+)\], (\d+), (\w+)\)")

MAX_STEPS = 20000  # the longest path (steps, per program) a replay is written for
# (a replay's file name, its source) -> its code: instances whose paths are alike (other sizes, the same steps) have
# the same source, every value the path takes being a name of the function's globals
_CODE: dict = {}


class Replay:
    """A launch path as one function: ``fn(batch, launch)`` runs its ``n`` steps (each program's count)."""

    __slots__ = ("fn", "n", "source")

    def __init__(self, fn, n: int, source: str):
        self.fn, self.n, self.source = fn, n, source


MAX_PARTS = 16  # the most groups of programs (each with a path of its own) a launch is replayed in


class Parts:
    """A launch whose programs take different paths fixed by the instance (the programs that run one more trip of
    a persistent loop than the others, its virtual programs not a multiple of its programs): its programs in
    groups, in program order, each group's path replayed as one function (``Replay``) on a batch of those
    programs alone (``run``). ``n``: the longest group's count of steps (a program's budget is checked against
    it). ``Pending``: the groups found so far, some without their function yet (recorded at the next launch)."""

    __slots__ = ("parts", "grid", "zero_regs", "n")

    def __init__(self, parts: list, grid, zero_regs: tuple):
        self.parts = parts  # [(program ids, their coordinates, Replay)]
        self.grid, self.zero_regs = grid, zero_regs
        self.n = max(rp.n for _, _, rp in parts)


class Pending:
    """The groups of a launch's programs found so far (``divergence``) while their paths are recorded, one launch
    at a time: [(program ids, their coordinates, their ``Replay`` or None until recorded)]."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts


def divergence(m, b, i: int):
    """Which programs of batch ``b`` take the branch at step ``i`` (a bool mask), when some do and some do not
    (where ``record`` stopped: the batch splits); None for any other step or when they agree."""
    s = m.steps[i]
    if s.kind != "br_z" and s.kind != "br_nz":
        return None
    c = b.regs[_cond(m, s)]
    if np.ndim(c) == 0:
        return None
    taken = np.asarray(c).astype(bool)
    if s.kind == "br_z":
        taken = ~taken
    return None if taken.all() or not taken.any() else taken


def record_groups(m, L, parts: list, grid, on_from):
    """Run untimed launch ``L``'s programs group by group (``parts``: [(program ids, coordinates, their Replay or
    None)]), recording the groups that have no function yet, and return what the launch base replays from now
    on: a ``Replay`` (one group), ``Parts``, ``Pending`` (a group parted at a branch: the two parts are recorded at
    the next launch) or False (a group's path tests a value from memory, more than ``MAX_PARTS`` groups, or a budget
    a path would exceed). ``on_from(batch, step)`` runs a group on step by step from a step (where its recording
    stopped, or from the start once the launch is not replayed): every program runs to its end either way."""
    made, found, ok = [], [], True
    for pids, coords, one in parts:
        batch = Batch(pids, grid, m.zero_regs, uniform=True, coords=coords)
        if one is not None and one.n <= L.watchdog:
            run(one, batch, L)
            made.append((pids, coords, one))
            continue
        if one is not None:  # (a budget the path would exceed: the steps one by one, which stop at it)
            ok = False
        trace, at = record(m, batch, L, 0) if ok else (None, 0)
        if trace is not None:
            one = generate(m, trace, len(pids))
            ok = one is not None
            made.append((pids, coords, one))
            continue
        taken = divergence(m, batch, at) if ok else None
        if taken is None:
            ok = False
        else:
            found += [(_read_only(pids[w]), tuple(_read_only(c[w]) for c in coords), None) for w in (taken, ~taken)]
        on_from(batch, at)
    if not ok or len(made) + len(found) > MAX_PARTS:
        return False
    if found:
        return Pending(sorted(made + found, key=lambda part: part[0][0]))
    return made[0][2] if len(made) == 1 else Parts(made, grid, m.zero_regs)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def eligible(m) -> bool:
    """Whether machine ``m``'s launches may be replayed (not with atomics: programs that wait on each other's
    atomics spin as often as the programs running with them make them)."""
    return not m.atomics


class _Hand(Exception):
    """The path cannot be recorded from here (the batch splits, or the budget would end): the caller goes on."""

    def __init__(self, i: int):
        self.i = i


def record(m, b, L, start: int):
    """Run batch ``b`` of an untimed launch ``L`` from step ``start`` step by step, as ``execute`` runs it, and
    record the path: (trace, or None when it cannot be replayed, and the step to go on from when the recording
    stopped early, or None at the end). A trace is (start registers, [(step index, registers before it or None
    for a branch, a jump or an event)], final registers, {position: the step's function for its
    recorded registers, where the step has one (``fn.resolve``: a transfer with its descriptor found)})."""
    steps = m.steps
    limit = L.watchdog
    rec = PathRecorder(b, MAX_STEPS)  # (what a timed launch records as ``execute`` runs it, taken the same way)
    i = start
    try:
        while True:
            if len(rec.path) >= MAX_STEPS or b.count + 1 > limit:
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
                rec.add(i, s, b)
                i = s.target if take else i + 1
                continue
            b.count += 1
            L.executed += 1
            try:
                s.fn(b, L)
            except DvmError:
                raise
            except STEP_ERRORS as e:
                raise InvalidBytecodeError(f"{s.ins.name} at pc {s.pc} cannot execute: {e}", section="code",
                                           offset=s.pc * 8) from None
            rec.add(i, s, b)
            if kind == "end":
                return rec.trace(), None
            i = s.target if kind == "jmp" else i + 1
    except _Hand as h:
        return None, h.i


_LOCAL = re.compile(r"(t\d+|s_) = (.*)")
_NAMES: dict = {}  # an expression _fold saw -> the names it reads (the same lines recur in every instance's path)


def _fold(line: str, env: dict, known: dict) -> str:
    """``line`` of a vector instruction run directly, its value computed now when every name it reads is a
    constant of the replay or a local already folded (an index tile, a lifted register, a number broadcast, a
    mask computed from them): the value is then the instance's, the same array at every launch (read-only, as
    the replay's other constants), and the line takes it. Any other line, and one whose computation raises (left
    to the launch, which reports the step), is returned as it is; a local it assigns is no longer known."""
    got = _LOCAL.fullmatch(line)
    if got is None:
        return line
    var, expr = got.groups()
    known.pop(var, None)
    names = _NAMES.get(expr)
    if names is None:
        if len(_NAMES) >= 4096:
            _NAMES.clear()
        names = _NAMES[expr] = [n.id for n in ast.walk(ast.parse(expr, mode="eval")) if n.__class__ is ast.Name]
    if not all(n in known or (n in env and n not in _DYNAMIC) for n in names):
        return line
    try:
        with np.errstate(all="ignore"):
            value = eval(expr, env, dict(known))  # noqa: S307 - the replay's own expression over its constants
    except Exception:  # noqa: BLE001 - raised again by the launch, at its step
        return line
    if value.__class__ is not np.ndarray:
        return line
    if value.flags.writeable:
        value.flags.writeable = False
    known[var] = value
    n = env["#folded"] = env.get("#folded", 0) + 1  # (numbered in order: paths alike, sources alike)
    name = f"KF{n}"
    env[name] = value
    return f"{var} = {name}"


_DYNAMIC = frozenset(("b", "L", "R", "MU", "g", "k", "c"))  # what a replay's line reads of the launch


def _cond(m, s) -> int:
    return m.decoded[s.index].vals["rc"]


_UNKNOWN = object()  # a register the replay has not set (not yet, or live: the steps compute it as they run)


def generate(m, trace, n: int) -> Replay | None:
    """The function replaying ``trace`` (``record``'s) for a batch of ``n`` programs; None when the path depends on
    the data (a branch tests a live register)."""
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
    cube = CubeLocals(m, env, tiles)
    cur = [_UNKNOWN] * len(first)  # (every register set at the first step that runs: whatever the batch starts with)
    body: list[str] = []
    live: set = set()  # registers holding a value from memory, or computed from one, at this point of the path
    ub: list = []  # what the body does to the unified buffer, in order: reads, stores and overwrites (_dead_stores)
    kept_loads: set = set()  # the body's lines loading a tile into a local variable (and the buffer, unless dead)
    lifts: dict = {}
    known: dict = {}  # the locals holding a value fixed by the instance (``_fold``) -> that value

    def lifted(match) -> str:  # a register's value as a tile operand: the register is the recorded constant
        r, rank, dtn = int(match.group(1)), int(match.group(2)), match.group(3)
        if r in live:
            return match.group(0)
        key = (id(cur[r]), rank, dtn)
        name = lifts.get(key)
        if name is None:
            v = sem.lift(cur[r], rank, env[dtn])
            if v.flags.writeable:
                v.flags.writeable = False
            name = lifts[key] = f"LF{len(lifts)}"
            env[name] = v
        return name

    runs: list = []  # the tuples of values set into runs of registers (``RS{n}``)

    def regs_to(regs):
        todo = []
        for r, v in enumerate(regs):
            if v is not cur[r] and r not in live:
                todo.append((r, const(v)))
                cur[r] = v
        k = 0
        while k < len(todo):  # (consecutive registers, four or more, in one assignment: the path's first step sets
            e = k + 1  # every register)
            while e < len(todo) and todo[e][0] == todo[e - 1][0] + 1:
                e += 1
            if e - k >= 4:
                name = f"RS{len(runs)}"
                env[name] = tuple([env[c] for _, c in todo[k:e]])
                runs.append(name)
                body.append(f"R[{todo[k][0]}:{todo[e - 1][0] + 1}] = {name}")
            else:
                body.extend([f"R[{r}] = {c}" for r, c in todo[k:e]])
            k = e

    for j, (i, regs) in enumerate(path):
        s = steps[i]
        d = m.decoded[i]
        r_in, _, w_reg, w_tile = _operands(m, d)
        if s.kind in ("br_z", "br_nz") and d.vals["rc"] in live:
            # a branch on a value from memory: replayed only when its other way traps (a device assertion), then
            # tested as the step-by-step path tests it, the programs that go the other way trapping
            take = j + 1 < len(path) and path[j + 1][0] == s.target
            other = i + 1 if take else s.target
            if j + 1 >= len(path) or other >= len(steps) or steps[other].ins.family != "trap" or \
                    other >= path[j + 1][0]:
                return None  # (the trap after the way on: the programs going on would run first, to there)
            env[f"TRAP{other}"] = steps[other].fn
            body += [f"k = {other}", f"c = R[{d.vals['rc']}]", "if c.__class__ is np.ndarray and c.ndim:",
                     "    cb = np.asarray(c).astype(bool)",
                     f"    bad = {'~cb' if (s.kind == 'br_nz') == take else 'cb'}",
                     "    if bad.any():",
                     f"        TRAP{other}(b if bad.all() else b.subset(bad), L)",
                     f"elif bool(c) != {(s.kind == 'br_nz') == take}:",
                     f"    TRAP{other}(b, L)"]
            continue
        if regs is None or s.kind == "end" or s.ins.family == "nop":
            continue
        if s.pure and not any(r in live for r in r_in):
            if w_reg is not None:
                live.discard(w_reg)  # (the recorded value: set where a later step reads it)
            continue
        regs_to(regs)
        body.append(f"k = {i}")
        if s.pure:  # computed from a live register: run as the step runs
            env[f"S{i}"] = s.fn
            body.append(f"S{i}(b, L)")
            ub.append(_ub_ranges(m, d))
            if w_reg is not None:
                live.add(w_reg)
                cur[w_reg] = _UNKNOWN
            continue
        if s.ins.family == "mmad" or s.ins.family == "copy_space":
            got = cube.emit(d, body)  # (a cube tile's step from the tiles the path holds: npu/cube_chain.py)
            if got is not None:
                ub.append([])
                if got:  # (a copy into the unified buffer: its store, a whole tile)
                    ub.append((len(body) - 1,) + got)
                continue
        at = len(body)
        if tiles is not None and tiles.emit(d, body):
            for x in range(at, len(body)):
                body[x] = _fold(_LIFT.sub(lifted, body[x]), env, known)
            ub.append(_emitted_reads(m, d, body, at))  # (the operands read from the unified buffer, not a local)
            addr, dtp, shape = m.layout(d.vals["dst"])
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtp.itemsize
            assert body[-1].startswith(("MU[", "place_among(MU,")), body[-1]
            ub.append((len(body) - 1, addr, addr + nbytes))  # its store, a whole tile
            continue
        if s.ins.family == "l0c_fill" and d.vals["rs"] not in live and cur[d.vals["rs"]] is not _UNKNOWN:
            # an accumulator's fill with a register the instance fixes: the same tile at every launch, made now
            # (the step's broadcast of the lifted register, read-only as the step's is)
            _, fdt, fshape = m.layout(d.vals["dst"])
            v = sem.lift(cur[d.vals["rs"]], len(fshape), fdt.np)
            env[f"CV{i}"] = np.broadcast_to(v, (v.shape[0],) + tuple(fshape))
            env[f"CW{i}"] = m.writer(d.vals["dst"], "l0c")
            cube.stored(len(body), d)
            body.append(f"CW{i}(b, CV{i})")
            ub.append([])
            cube.hold(d, "dst", f"CV{i}")
            continue
        if s.ins.family == "gather" and tiles is not None and hasattr(s.fn, "value") and w_tile[0] == "ub":
            # the gathered tile a local variable, stored in the buffer as the step stores it unless no later step
            # reads it from there (the step itself runs when an offset is out of range: its fault, GPU semantics;
            # either way only the tile's own bytes of the unified buffer change: the cube's variables stay)
            lo, hi = w_tile[1], w_tile[2]
            var = _gather(m, d, s, env, tiles, body)
            ub.append(_ub_ranges(m, d))  # (the step's reads: its offsets and mask, read from the buffer)
            body.append(f"WG{d.pc}(b, {var})")
            ub.append((len(body) - 1, lo, hi))
            tiles.forget_range(lo, hi)
            _, dtp, shape = m.layout(d.vals["dst"])
            tiles.local[(lo, hi - lo, dtp.np)] = (var, tuple(shape))
            continue
        fast = resolved.get(j)
        if w_reg is not None:
            live.add(w_reg)  # (a value from memory: a scalar load, a tile's element)
            cur[w_reg] = _UNKNOWN
        reads = _ub_ranges(m, d)
        if fast is not None and not any(r in live for r in r_in):
            if s.ins.family == "dma_load" and w_tile is not None and w_tile[0] == "ub":
                # a resolved load writes its whole destination and nothing else on chip (its descriptor was found
                # for a load that keeps none of it: ``resolve``), and leaves global memory as it is: the locals
                # of other ranges still hold what the buffer holds there. With a small batch, the tile is a local
                # variable too, stored in the buffer only when a later step reads it from there (``_dead_stores``)
                lo, hi = w_tile[1], w_tile[2]
                ub.append([r for r in reads if r != (lo, hi)])
                if tiles is not None:
                    tiles.forget_range(lo, hi)
                value = getattr(fast, "value", None)
                if tiles is not None and value is not None:
                    env[f"LV{j}"] = value
                    tiles.n += 1
                    var = f"t{tiles.n}"
                    direct = _direct_load(fast, j, env)
                    if direct is not None:  # the box read straight from the tensor, stored as the step stores it
                        body.append(f"{var} = {direct[0]} if {direct[1]} else LV{j}(b, L, False)")
                        kept_loads.add(len(body) - 1)
                        # (a view of the tensor is stored with its alias group: copied before the tensor changes)
                        body.append(f"W{j}(b, {var}, L.alias[{fast.direct[0]}])" if direct[2] else f"W{j}(b, {var})")
                    else:
                        body.append(f"{var} = LV{j}(b, L, True)")
                        kept_loads.add(len(body) - 1)
                    ub.append((len(body) - 1, lo, hi))
                    _, dtp, shape = m.layout(d.vals["dst"])
                    tiles.local[(lo, hi - lo, dtp.np)] = (var, tuple(shape))
                else:
                    env[f"D{j}"] = fast
                    body += _load_lines(fast, j, env) or [f"D{j}(b, L)"]
                    ub.append((None, lo, hi))
                continue
            env[f"D{j}"] = fast
            if s.ins.family != "dma_load":
                direct = _direct_store(m, d, fast, j, env, tiles, cube)
                # (a store: a load into L1 the path holds may be a view of its tensor; one written from a local
                # variable reads no slot, its other way storing the slot it reads itself)
                cube.forget([] if direct is not None else reads_of(m, d))
            elif w_tile is not None and w_tile[0] in SPACES:
                direct = _cube_load(m, d, fast, j, env, cube, len(body))
            else:
                direct = _load_lines(fast, j, env)
            if direct is not None:  # a load into another buffer, or a value the path holds written into the tensor
                body += direct
                ub.append([] if s.ins.family != "dma_load" else reads)  # (a store reads the buffer only through
                if tiles is not None:  # the step, after storing its tile there)
                    tiles.forget()
                continue
            body.append(f"D{j}(b, L)")
        else:
            env[f"S{i}"] = s.fn
            body.append(f"S{i}(b, L)")
        ub.append(reads)
        cube.forget(reads_of(m, d))
        if tiles is not None:
            tiles.forget()
    regs_to(final)
    dead = _dead_stores(ub)
    gone = cube.dead()  # (cube tiles no step run as itself reads: their values stay in local variables)
    if dead or gone:  # (a dead load still loads, into its local variable alone)
        body = [x if at not in dead else x[:-len("True)")] + "False)" for at, x in enumerate(body)
                if (at not in dead or at in kept_loads) and at not in gone]
    head = ["def replay(b, L):", "    R = b.regs", "    k = 0"]
    if tiles is not None and tiles.used:
        head.append("    MU = b.mem['ub']")
    src = "\n".join(head + ["    try:"] + ["        " + x for x in body + ["return None"]] + [
        "    except DvmError:", "        raise", "    except ERRORS as e:",
        "        raise invalid(STEPS[k], e) from None"]) + "\n"
    where = f"<dvmlang replay {m.kernel.name}>"
    code = _CODE.get((where, src))
    if code is None:
        if len(_CODE) >= 1024:
            _CODE.clear()
        code = _CODE[where, src] = compile(src, where, "exec")
    exec(code, env)  # noqa: S102 - generated from the machine's own steps and a recorded path
    return Replay(env["replay"], len(path), src)


_ANY = ((0, 1 << 62),)  # (a tile whose layout the kernel lacks: any bytes)


def _gather(m, d, s, env: dict, tiles, body: list) -> str:
    """Append the lines computing GATHER step ``s`` (decoded ``d``) into a local variable with the step's own
    ``value`` from the offsets and mask the path holds (or reads from the buffer), the step itself running when
    that gives None; returns the variable."""
    i = d.pc
    env[f"GA{i}"], env[f"S{s.index}"] = s.fn.value, s.fn
    env[f"RB{i}"], env[f"WG{i}"] = m.reader(d.vals["dst"]), m.writer(d.vals["dst"])
    off = tiles._read(d, "offsets", None, body)
    msk = tiles._read(d, "mask", None, body) if d.vals["masked"] else "None"
    tiles.n += 1
    var = f"t{tiles.n}"
    body.append(f"{var} = GA{i}(b, L, {off}, {msk})")
    body.append(f"if {var} is None: S{s.index}(b, L); {var} = RB{i}(b, L)")
    return var


def _view(j: int, plan, env: dict, writeable: bool) -> str:
    """The expression of a transfer's view of tensor ``g`` (``direct.direct_plan``'s ``plan``), as ``boxview._boxes``
    makes it for a tensor of the size the plan was found for."""
    start, shape, strides, size = plan[:4]
    if size is not None:  # (names, not numbers: see _CODE)
        env[f"SL{j}"], env[f"SP{j}"] = slice(start, start + size), shape
        return f"g[SL{j}].reshape(SP{j})"
    env[f"VW{j}"] = _viewer(start, shape, strides, writeable)
    return f"VW{j}(g)"


def _viewer(start: int, shape: tuple, strides: tuple, writeable: bool):
    """``boxview._strided(g, start, shape, strides, writeable)`` for a box that is not a slice of ``g``, with its
    byte offset and strides worked out once per item size: numpy's constructor makes the same view (it checks
    the bounds; a box it refuses goes through ``_strided``)."""
    byte = {isz: (start * isz, tuple(x * isz for x in strides)) for isz in (1, 2, 4, 8)}

    def view(g):
        try:
            off, st = byte[g.itemsize]
            v = np.ndarray(shape, g.dtype, g, off, st)
        except (KeyError, TypeError, ValueError, BufferError):
            return _strided(g, start, shape, strides, writeable)
        if not writeable:
            v.flags.writeable = False
        return v
    return view


def _direct_load(fast, j: int, env: dict) -> tuple | None:
    """(the value, the condition, whether the value is a view of the tensor) of a resolved load read straight from
    its tensor (``W{j}`` stores it as the step does): the condition holds when the tensor has the size the
    descriptor was checked for (``g``: the tensor). None when the box is not one view of the tensor."""
    direct = getattr(fast, "direct", None)
    if direct is None or direct[2] is None:
        return None
    t, checked, plan, finish, w = direct
    env[f"FL{j}"], env[f"W{j}"] = finish, w
    env[f"N{j}"] = checked  # (a name, not the number: the source is the same for instances of other sizes)
    cond = f"(g := L.arrays[{t}]).size == N{j}"
    if len(plan) == 5:  # the box is the tile: its view
        return f"FL{j}({_view(j, plan, env, False)})", cond, True
    pad, undef = plan[5], plan[6]  # a box of the tile, put in the padding (``dma_read``)
    pad.flags.writeable = False
    env[f"PAD{j}"], env[f"BX{j}"] = pad, (slice(None),) + plan[4]
    env["put"] = _put
    return f"FL{j}(put(PAD{j}, BX{j}, {_view(j, plan, env, False)}))", cond + (" and not L.debug" if undef else ""), \
        False


def _load_lines(fast, j: int, env: dict) -> list | None:
    """The lines of a resolved load into any on-chip buffer that read its box straight from the tensor and store it
    as the step's writer does (``D{j}``, the step, when the tensor has another size); None as ``_direct_load``."""
    direct = _direct_load(fast, j, env)
    if direct is None:
        return None
    value, cond, view = direct
    return [f"if {cond}:", f"    W{j}(b, {value}{f', L.alias[{fast.direct[0]}]' if view else ''})", "else:",
            f"    D{j}(b, L)"]


def _put(pad, box, view):
    """A copy of the padding ``pad`` with ``view`` put in ``box`` (what ``dma_read`` reads a partial box as)."""
    out = pad.copy()
    out[box] = view
    return out


def _cube_load(m, d, fast, j: int, env: dict, cube, at: int) -> list | None:
    """``_load_lines`` of a load into a cube space, its tile held in a local variable (``cube_chain``): read
    back from its slot when the tensor has another size. ``at``: the body's line the lines start at."""
    direct = _direct_load(fast, j, env)
    if direct is None:
        return None
    value, cond, view = direct
    var = cube.var()
    env[f"RL{j}"] = m.reader(d.vals["dst"], d.ins.spaces["dst"])
    cube.stored(at + 2, d)
    cube.hold(d, "dst", var)
    return [f"if {cond}:", f"    {var} = {value}",
            f"    W{j}(b, {var}{f', L.alias[{fast.direct[0]}]' if view else ''})", "else:", f"    D{j}(b, L)",
            f"    {var} = RL{j}(b, L)"]


def _direct_store(m, d, fast, j: int, env: dict, tiles, cube) -> list | None:
    """The lines writing a resolved store's source tile, held in a local variable (the unified buffer's, or an
    accumulator's in L0C: ``cube_chain``), straight into its tensor (as ``dma_write`` writes it) when the tensor
    has the size the descriptor was checked for and no load reads poison (one assignment when the boxes are one
    view of the tensor); otherwise the tile is stored in its buffer (where the step reads it) and the step runs.
    None when the path does not hold the tile."""
    direct = getattr(fast, "direct", None)
    if direct is None:
        return None
    t, checked, plan, space, addr, nbytes, npdt = direct
    if space == "ub" and tiles is not None:
        hit = tiles.local.get((addr, nbytes, npdt))
    elif space == "l0c":
        hit = cube.local.get((space, addr, nbytes, npdt))
    else:
        return None
    _, _, shape = m.layout(d.vals["src"])
    if hit is None or hit[1] != tuple(shape):
        return None
    var = hit[0]
    env[f"W{j}"] = m.writer(d.vals["src"], space)
    env["materialise_views"] = materialise_views
    if plan is not None:  # (the boxes one view of the tensor: written as one assignment)
        env[f"BX{j}"] = (slice(None),) + plan[4]
        write = f"    {_view(j, plan, env, True)}[...] = {var}[BX{j}]"
    else:  # (the step's write, of the tile the path holds)
        env["dma_write"], env[f"DS{j}"], env[f"SH{j}"] = dma_write, fast.desc, fast.shape
        write = f"    dma_write(g, DS{j}, SH{j}, {var}, b.n)"
    env[f"N{j}"] = checked
    return [f"if (g := L.arrays[{t}]).size == N{j} and getattr(L, 'poison_from', None) is None:",
            f"    materialise_views(b, L, {t})", write,
            "else:",
            f"    W{j}(b, {var})",
            f"    D{j}(b, L)"]


def _ub_ranges(m, d) -> list:
    """The unified-buffer byte ranges (lo, hi) step ``d`` may read when it runs as its step (a step may read its
    destination too: an accumulating MMAD, a load that keeps part of it)."""
    reads = tile_reads(m, d)
    return list(_ANY) if reads is None else [(lo, hi) for space, lo, hi in reads if space == "ub"]


def _emitted_reads(m, d, body: list, at: int) -> list:
    """The unified-buffer ranges a vector instruction written from line ``at`` of ``body`` on reads from the buffer
    (its reader called: ``_Tiles._read``), not from a local variable."""
    out = []
    for f in d.ins.fields:
        if f.kind == "tile" and d.ins.spaces.get(f.name) == "ub" and not f.writes and any(
                x.startswith("t") and f"= RD{d.pc}_{f.name}(" in x for x in body[at:]):
            addr, dtp, shape = m.layout(d.vals[f.name])
            out.append((addr, addr + max(int(np.prod(shape, dtype=np.int64)) * dtp.itemsize, dtp.itemsize)))
    return out


def _dead_stores(ub: list) -> set:
    """The lines of a replay's body that store a value in the unified buffer which no later line reads from there
    before another overwrites it (``cube_chain.dead_stores``). ``ub`` holds, in the body's order, a list of the
    ranges (lo, hi) a line reads, or (line, lo, hi) for a line storing a whole tile at [lo, hi) (line None: an
    overwrite that is not dropped)."""
    return dead_stores([[("ub",) + r for r in e] if e.__class__ is list else (e[0], "ub") + e[1:] for e in ub],
                       ("ub",))


def run(rp, b, L) -> None:
    """Replay ``rp`` on batch ``b`` of launch ``L`` (floating-point errors ignored by the caller): the counts as the
    step-by-step path leaves them. ``Parts`` run each group of programs on a batch of its own, in program order
    (``b`` is None for them: the callers make no batch of the whole launch)."""
    if rp.__class__ is Parts:
        grid, zero = rp.grid, rp.zero_regs
        for pids, coords, one in rp.parts:
            part = Batch(pids, grid, zero, uniform=True, coords=coords)
            one.fn(part, L)
            part.count += one.n
            L.executed += one.n
        return
    rp.fn(b, L)
    b.count += rp.n
    L.executed += rp.n
