"""The autotuner's cost model: an estimate of a launch's cycles from its encoded instance alone, without running
anything on the simulated device and without touching a tensor's values.

For a few programs of the grid (spread over it, first and last included) the scalar part of the program is
interpreted: registers, loop counters and branches, from the immediates the encoder patched in (the launch's
scalar arguments, shapes and strides) and the program's coordinates. Every other instruction is only *counted*:
its cycles come from the device's own cost formulas (``npu.timing.COSTS``) with the sizes its operands name (tile
layouts, DMA boxes), and it holds its pipe on a small pipe clock that honours the program's set/wait events, the GM
port and transfer latency. That gives each sampled program's cycles, instructions and bytes per pipe. The launch:
programs go to cores round-robin (vector or cube cores), each program after a core's first pays the dispatch,
programs between samples are interpolated, and the whole launch cannot beat HBM for the bytes that must cross it
(a tensor that fits L2 is read from HBM once; what the launch writes to it stays in L2, as the
device's L2 model keeps it). No tile is computed: a scalar read from memory (``LDG``, ``MOVTS``) is taken
as 0, and a program that runs longer than ``MAX_STEPS`` instructions is cut there (its estimate is then a lower
bound, marked ``exact=False``).

The model ranks candidates; it is not the simulator. ``benchmarks/autotune.py`` reports how far its ranking is
from the simulator's (Spearman's rho, and the simulated rank of the model's favourite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..npu import timing
from ..vm import isa
from ..vm.decode import sop_parts, tile_parts

MAX_STEPS = 200_000  # scalar-interpreted instructions per sampled program
SAMPLES = 6  # programs interpreted per launch (at most)

_PY_INT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "maximum": max, "minimum": min, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
           "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b if 0 <= b < 64 else 0,
           "shr": lambda a, b: a >> b if 0 <= b < 64 else 0,
           "div": lambda a, b: 0 if b == 0 else abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1),
           "mod": lambda a, b: 0 if b == 0 else a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)),
           "floordiv": lambda a, b: 0 if b == 0 else a // b}
_PY_FLOAT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "truediv": lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
             "maximum": max, "minimum": min, "fmax": max, "fmin": min}
_WRITES = frozenset(("dma_store", "fix_store", "scatter", "atomic"))
_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


@dataclass
class Estimate:
    """The model's figures for one launch."""

    cycles: float  # estimated launch cycles (what the simulator's ``LaunchRecord.cycles`` measures)
    program_cycles: float  # mean cycles of one program
    programs: int
    cores: int
    waves: int
    instructions: float  # per program (mean)
    pipe_cycles: dict = field(default_factory=dict)  # pipe name -> busy cycles per program (mean)
    gm_bytes: float = 0.0  # every program's GM traffic together
    hbm_floor: float = 0.0  # the cycles HBM alone needs for the bytes that must cross it
    exact: bool = True  # False: a sampled program hit MAX_STEPS, or read a value from memory to branch on

    def bound(self) -> str:
        """What limits the launch, in a word: the HBM floor or the busiest pipe."""
        if self.hbm_floor >= self.cycles * 0.9:
            return "HBM"
        return max(self.pipe_cycles, key=self.pipe_cycles.get) if self.pipe_cycles else "?"


class _Program:
    """One program's interpretation: a pipe clock and per-pipe, per-tensor counters."""

    def __init__(self, bc, profile, rates, fits_l2):
        k = bc.kernels[0]
        self.bc, self.k, self.profile = bc, k, profile
        self.dec = bc.decoded[0]
        self.code = bc.code
        self.layouts = bc.layouts
        self.index = {d.pc: i for i, d in enumerate(self.dec)}
        self.rates = rates  # (HBM, L2 read, L2 write bytes per cycle of one port)
        self.fits_l2 = fits_l2  # tensor param index -> whether it fits L2
        self.reg_types = k.reg_types
        self.costs = [self._static_cost(d) for d in self.dec]

    # ---- operand sizes ---------------------------------------------------------------------------------------
    def _tile(self, d, name):
        addr, li = tile_parts(d.vals[name])
        if li >= len(self.layouts):
            return None, ()
        return self.layouts[li]

    def _tile_bytes(self, d, name) -> int:
        dtp, shape = self._tile(d, name)
        return 0 if dtp is None else math.prod(shape) * dtp.itemsize

    def _static_cost(self, d):
        """The cycles of ``d`` when they depend on nothing but its operands' layouts (None: worked out per
        execution, a transfer's box)."""
        ins, p = d.ins, self.profile
        kind = ins.cost.kind
        f = timing.COSTS[kind]
        tiles = [f_.name for f_ in ins.fields if f_.kind == "tile"]
        if kind in ("scalar", "branch", "sync", "scalar_gm", "print", "fill"):
            return f(p, ins.cost.k)
        if kind == "vector":
            return f(p, ins.cost.k, nbytes=max((self._tile_bytes(d, t) for t in tiles), default=0), mix=self.k.mix)
        if kind == "reduce":
            _, shape = self._tile(d, "a")
            axis = d.vals.get("axis", 0)
            n = shape[axis] if shape and axis < len(shape) else 1
            return f(p, ins.cost.k, nbytes=max((self._tile_bytes(d, t) for t in tiles), default=0), mix=self.k.mix,
                     n=n)
        if kind == "mte1" or kind == "handoff":
            return f(p, ins.cost.k, nbytes=self._tile_bytes(d, "dst"))
        if kind == "cube":
            adt, ashape = self._tile(d, "a")
            _, bshape = self._tile(d, "b")
            if adt is None or len(ashape) < 2 or len(bshape) < 2:
                return p.cube_startup
            B = math.prod(ashape[:-2]) if len(ashape) > 2 else 1
            return f(p, ins.cost.k, M=ashape[-2], N=bshape[-1], K=ashape[-1], wide=adt.itemsize >= 4, B=B)
        if kind == "atomic":
            return f(p, ins.cost.k, elements=math.prod(self._tile(d, "src")[1] or (1,)))
        if kind == "gather":
            dtp, shape = self._tile(d, "offsets")
            n = math.prod(shape or (1,))
            data = self._tile(d, "dst" if "dst" in d.vals else "src")[0]
            return ("gather", n, n * (data.itemsize if data is not None else 4))
        return None  # dma: per execution

    # ---- the interpreter ---------------------------------------------------------------------------------------
    def run(self, coords) -> dict:
        p = self.profile
        dec, index = self.dec, self.index
        regs = [0] * max(1, len(self.reg_types))
        free = [0.0] * isa.N_PIPES
        busy = [0.0] * isa.N_PIPES
        first = [math.inf] * isa.N_PIPES
        port = 0.0
        port_busy = 0.0
        done = 0.0
        t_issue = 0.0
        flags: dict = {}
        dispatch = p.scalar_dispatch
        read: dict = {}
        written: dict = {}
        steps = 0
        exact = True
        i = 0
        n = len(dec)
        while i < n:
            d = dec[i]
            steps += 1
            if steps > MAX_STEPS:
                exact = False
                break
            ins = d.ins
            fam = ins.family
            nxt = i + 1
            # -- the scalar unit's own work: registers and control flow
            if fam == "movi":
                regs[d.vals["rd"]] = self._imm(d)
            elif fam == "mov":
                regs[d.vals["rd"]] = regs[d.vals["rs"]]
            elif fam == "pid":
                regs[d.vals["rd"]] = coords[d.vals["axis"]]
            elif fam == "nprog":
                regs[d.vals["rd"]] = self.k.grid[d.vals["axis"]]
            elif fam == "tdim":
                prm = self.bc.params[d.vals["tensor"]]
                seq = prm.strides if d.vals["stride"] else prm.shape
                dim = d.vals["dim"]
                regs[d.vals["rd"]] = int(seq[dim]) if dim < len(seq) else 0
            elif fam == "sbin":
                regs[d.vals["rd"]] = self._binary(d, regs[d.vals["ra"]], regs[d.vals["rb"]])
            elif fam == "sun":
                regs[d.vals["rd"]] = self._unary(d, regs[d.vals["ra"]])
            elif fam == "scmp":
                regs[d.vals["rd"]] = int(_CMP[isa.CC_NAMES[d.vals["cc"]]](regs[d.vals["ra"]], regs[d.vals["rb"]]))
            elif fam == "ssel":
                regs[d.vals["rd"]] = regs[d.vals["ra"]] if regs[d.vals["rc"]] else regs[d.vals["rb"]]
            elif fam == "scast":
                regs[d.vals["rd"]] = self._cast(d, regs[d.vals["ra"]])
            elif fam in ("ldg", "movts"):
                regs[d.vals["rd"]] = 0  # a value from memory: not known to the model
                exact = False
            elif fam == "jmp":
                nxt = index[d.vals["target"]]
            elif fam == "br":
                taken = bool(regs[d.vals["rc"]])
                if taken == bool(ins.extra["when"]):
                    nxt = index[d.vals["target"]]
            elif fam == "end":
                break
            # -- the clock: every instruction is dispatched; the others hold their pipe
            cost = self.costs[i]
            kind = ins.cost.kind
            if cost is None or cost.__class__ is tuple:
                cost, tensor, nbytes, write = self._transfer(d, regs, cost)
                acc = written if write else read
                acc[tensor] = acc.get(tensor, 0.0) + nbytes
            issue = t_issue + dispatch
            pipe = int(ins.pipe)
            if fam == "set":
                pipe = d.vals["src"]
                set_key, wait_key = (pipe, d.vals["dst"], d.vals["event"]), None
            elif fam == "wait":
                pipe = d.vals["dst"]
                set_key, wait_key = None, (d.vals["src"], pipe, d.vals["event"])
            else:
                set_key = (pipe, d.set[0], d.set[1]) if d.set is not None else None
                wait_key = (d.wait[0], pipe, d.wait[1]) if d.wait is not None else None
            if fam == "barrier":
                mask = d.vals["mask"]
                drain = [q for q in range(isa.N_PIPES) if mask >> q & 1] or range(isa.N_PIPES)
                t = max([issue] + [free[q] for q in drain])
                for q in drain:
                    free[q] = t
                t_issue = t
                i = nxt
                continue
            uses_port = kind in timing.TRANSFERS or (kind == "handoff" and not p.l0c_to_ub)
            start = max(issue, free[pipe])
            if uses_port and port > start:
                start = port
            if wait_key is not None:
                f = flags.get(wait_key)
                if f is not None and f > start:
                    start = f
            end = start + cost
            free[pipe] = end
            busy[pipe] += cost
            if start < first[pipe]:
                first[pipe] = start
            if uses_port:
                port = end
                port_busy += cost
            lat = timing.latency(p, ins.cost)
            if lat:
                end += lat
                if end > done:
                    done = end
            if set_key is not None:
                flags[set_key] = end
            t_issue = end if pipe == 0 else issue
            i = nxt
        total = max([t_issue, done] + free)
        first[0] = 0.0
        last = list(free)
        last[0] = max(last[0], t_issue)
        return {"cycles": total, "busy": busy, "steady": max(busy + [port_busy]), "first": first, "last": last,
                "port": port_busy, "read": read, "written": written, "steps": steps, "exact": exact}

    def _imm(self, d):
        dtp = d.dtype
        word = self.code[d.pc + 1]
        if dtp.np.kind in "iu":
            bits = dtp.itemsize * 8
            v = word & ((1 << bits) - 1)
            if dtp.np.kind == "i" and v >> (bits - 1):
                v -= 1 << bits
            return v
        if dtp.np.kind == "b":
            return int(word & 1)
        raw = np.array([word], dtype=np.uint64).view(np.uint8)[:dtp.itemsize]
        return float(raw.view(dtp.np)[0])

    def _binary(self, d, a, b):
        op = d.ins.extra.get("op")
        kind = d.dtype.np.kind
        table = _PY_INT if kind in "iub" else _PY_FLOAT
        f = table.get(op)
        if f is not None:
            try:
                return f(a, b)
            except (ArithmeticError, TypeError, ValueError):
                return 0
        with np.errstate(all="ignore"):
            try:
                r = d.ins.fn(np.asarray(a, d.dtype.np), np.asarray(b, d.dtype.np))
                return np.asarray(r).astype(d.dtype.np).item()
            except Exception:  # noqa: BLE001 - a model: an operation it cannot fold is 0
                return 0

    def _unary(self, d, a):
        with np.errstate(all="ignore"):
            try:
                return np.asarray(d.ins.fn(np.asarray(a, d.dtype.np))).astype(d.dtype.np).item()
            except Exception:  # noqa: BLE001 - a model: an operation it cannot fold is 0
                return 0

    def _cast(self, d, a):
        kind = d.dtype.np.kind
        if d.vals["bitcast"]:
            return a
        try:
            if kind in "iu":
                return int(a) if math.isfinite(a) else 0
            if kind == "b":
                return int(bool(a))
            return float(a)
        except (TypeError, ValueError, OverflowError):
            return 0

    def _sop(self, regs, v, kind="sop"):
        is_reg, x = sop_parts(v, kind)
        return regs[x] if is_reg else x

    def _transfer(self, d, regs, static):
        """(cycles, tensor, bytes, is a write) of one execution of a transfer."""
        ins, p = d.ins, self.profile
        t = d.vals.get("tensor", -1)
        write = ins.family in _WRITES
        hbm, l2r, l2w = self.rates
        rate = (l2w if write else l2r) if self.fits_l2.get(t, False) else hbm
        if static is not None and static.__class__ is tuple:  # a gather or scatter
            _, n, nbytes = static
            return timing.COSTS["gather"](p, 1, elements=n, nbytes=nbytes, rate=rate), t, nbytes, write
        rank = ins.extra.get("rank", 0)
        kind = "sop" if rank <= 3 else "sop16"
        tile = "dst" if "dst" in d.vals else "src"
        dtp, shape = self._tile(d, tile)
        box = tuple(shape)[-rank:] if rank else ()
        box = (1,) * (rank - len(box)) + box
        dims = []
        for r in range(rank):  # the box lo <= i < hi inside the tile's index space
            lo = max(0, int(self._sop(regs, d.vals[f"lo{r}"], kind)))
            hi = min(box[r], int(self._sop(regs, d.vals[f"hi{r}"], kind)))
            dims.append(max(0, hi - lo))
        itemsize = dtp.itemsize if dtp is not None else 4
        if t >= 0 and t < len(self.bc.params):
            itemsize = self.bc.params[t].dtype.itemsize
        elements = math.prod(dims) if dims else 0
        nbytes = elements * itemsize
        bursts = math.prod(dims[:-1]) if len(dims) > 1 else (1 if elements else 0)
        cycles = timing.COSTS["dma"](p, 1, bursts=bursts, nbytes=nbytes, rate=rate)
        return cycles, t, nbytes, write


def _coords(lin: int, grid) -> tuple:
    g0, g1 = grid[0], grid[1]
    return (lin % g0, (lin // g0) % g1, lin // (g0 * g1))


def _interp(picks, values, P):
    return np.interp(np.arange(P), picks, values) if len(picks) > 1 else np.full(P, values[0])


def _compose(runs, picks, T, P, cores, double_buffer, profile):
    """The device's own placement of programs on cores (``npu.timing._compose``: waves, consecutive programs on
    a core overlapping where their pipes and double buffering allow, the GM port, the dispatch of every program
    after a core's first), on the sampled programs' pipe times spread over the grid. None where the device does
    not offer it."""
    compose = getattr(timing, "_compose", None)
    if compose is None:
        return None
    first = np.empty((isa.N_PIPES, P))
    last = np.empty((isa.N_PIPES, P))
    for q in range(isa.N_PIPES):
        f = [r["first"][q] for r in runs]
        if all(math.isinf(x) for x in f):
            first[q] = np.inf
        else:
            first[q] = _interp(picks, [x if math.isfinite(x) else 0.0 for x in f], P)
        last[q] = _interp(picks, [r["last"][q] for r in runs], P)
    port = _interp(picks, [r["port"] for r in runs], P)
    d = profile.program_dispatch_cycles
    if d and P > cores:
        T[cores:] += d
        first[1:, cores:] += d
        last[:, cores:] += d
    try:
        _, core_end = compose(T, first, last, cores, double_buffer, port)
    except (TypeError, ValueError):
        return None
    return float(core_end.max()) if len(core_end) else 0.0


def _sequential(runs, picks, T, P, cores, active, k, profile):
    """Programs on cores, one after another, each after a core's first paying the dispatch; with double buffering
    a core's next program costs its busiest pipe (or GM port) rather than its whole length."""
    if k.double_buffer and profile.double_buffer and P > active:
        S = np.interp(np.arange(P), picks, [r["steady"] for r in runs]) if len(picks) > 1 else \
            np.full(P, runs[0]["steady"])
        cost = np.where(np.arange(P) < active, T, np.minimum(T, S))
    else:
        cost = T
    per_core = np.bincount(np.arange(P) % cores, weights=cost, minlength=min(P, cores))[:active]
    counts = np.bincount(np.arange(P) % cores, minlength=min(P, cores))[:active]
    per_core = per_core + np.maximum(0, counts - 1) * profile.program_dispatch_cycles
    return float(per_core.max()) if per_core.size else 0.0


def estimate(bc, profile, samples: int = SAMPLES) -> Estimate:
    """The model's estimate of launching the encoded instance ``bc`` (a ``vm.Bytecode``) on ``profile``."""
    bc.validate()
    k = bc.kernels[0]
    grid = tuple(k.grid) + (1,) * (3 - len(k.grid))
    P = max(1, math.prod(grid))
    cores = profile.cube_cores if k.mix else profile.vector_cores
    active = min(P, cores)
    rates = timing.Rates.constants(profile, active)[:3]
    fits = {i: math.prod(prm.shape or (1,)) * prm.dtype.itemsize <= profile.l2_bytes
            for i, prm in enumerate(bc.params) if prm.kind == "tensor"}
    prog = _Program(bc, profile, rates, fits)
    picks = sorted({int(round(x)) for x in np.linspace(0, P - 1, min(P, samples))})
    runs = [prog.run(_coords(lin, grid)) for lin in picks]
    T = np.interp(np.arange(P), picks, [r["cycles"] for r in runs]) if len(picks) > 1 else \
        np.full(P, runs[0]["cycles"])
    body = _compose(runs, picks, T.copy(), P, cores, k.double_buffer and profile.double_buffer, profile)
    if body is None:
        body = _sequential(runs, picks, T, P, cores, active, k, profile)
    # what must cross HBM: a tensor that fits L2 once (reads) or as written, a larger one every time
    scale = P / len(runs)
    hbm = 0.0
    gm = 0.0
    for key in ("read", "written"):
        totals: dict = {}
        for r in runs:
            for t, nb in r[key].items():
                totals[t] = totals.get(t, 0.0) + nb * scale
        for t, nb in totals.items():
            gm += nb
            if not fits.get(t, False):
                hbm += nb  # larger than L2: every byte crosses HBM
            elif key == "read":
                prm = bc.params[t]
                hbm += min(nb, math.prod(prm.shape or (1,)) * prm.dtype.itemsize)  # from a cold L2, once
            elif not profile.l2_across_launches:
                hbm += nb  # writes go through to HBM (with L2 kept across launches they stay in L2)
    floor = hbm / profile.hbm_bytes_per_cycle
    cycles = max(body, floor) + profile.launch_overhead_cycles
    pipes = {isa.PIPE_NAMES[q]: float(np.mean([r["busy"][q] for r in runs])) for q in range(isa.N_PIPES)}
    return Estimate(cycles=cycles, program_cycles=float(T.mean()), programs=P, cores=cores,
                    waves=-(-P // cores), instructions=float(np.mean([r["steps"] for r in runs])),
                    pipe_cycles={k_: v for k_, v in pipes.items() if v}, gm_bytes=gm, hbm_floor=floor,
                    exact=all(r["exact"] for r in runs))
