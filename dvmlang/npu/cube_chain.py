"""A replay's cube instructions through local variables (``replay.generate``, for a small batch).

A matmul's tiles go global memory -> L1 -> L0A / L0B -> MMAD -> L0C -> the unified buffer or global memory, each
step reading its operands from the batch's on-chip memory and writing its result there. In a replay the path
holds each of those values in a local variable too (``CubeLocals.local``), as ``compiled._Tiles`` does for the
unified buffer's: a load into L1 read straight from its tensor, an L1 -> L0A / L0B copy, an MMAD and its
accumulator's fill. The next step of the chain takes its operand from the variable instead of the slot (the same
array the slot holds: each value is the writer's finished array, which the slot stores), and computes what its
step computes, with the step's functions (``semantics.mmad``, the BLAS thread count around the product, the
writer's ``finish``). A value is stored in its slot as the step stores it unless no step the replay runs as itself
reads that slot before it is overwritten (``dead``, ``dead_stores``), so such a step reads what it always read.

The variables are forgotten at every step the replay runs as itself and at every store to global memory (a load
into L1 may hold a view of its tensor, which a store would change: the slot's copy is made then, not the
variable's), and a variable is taken only for an operand of the same place, size and dtype (another shape of the
same bytes is a reshape, as the step's reader makes it)."""

from __future__ import annotations

from ..vm import semantics as sem
from . import host
from .compiled import slot_line
from .state import prod
from .timing_cache import tile_reads

SPACES = ("l1", "l0a", "l0b", "l0c")


class CubeLocals:
    """The cube tiles a replay's path holds in local variables, and the code that uses them (see the module)."""

    def __init__(self, m, env: dict, tiles):
        self.m, self.env, self.tiles = m, env, tiles  # (``tiles``: the unified buffer's, or None for a large batch)
        self.local: dict = {}  # (space, addr, nbytes, dtype) -> (variable, shape)
        self.n = 0
        self.events: list = []  # in the body's order, as ``dead_stores`` takes them: reads (``forget``), stores

    def var(self) -> str:
        self.n += 1
        return f"c{self.n}"

    def forget(self, reads=None) -> None:
        """A step the replay runs as itself (or a store to global memory) comes next: the variables are forgotten,
        and the slots it reads are ``reads`` ((space, lo, hi) of the cube spaces), or any slot (None)."""
        self.local.clear()
        self.events.append(reads)

    def stored(self, at: int, d, field: str = "dst") -> None:
        """Line ``at`` of the body stores the whole tile ``field`` of ``d`` (dropped when no later step reads it:
        ``dead``)."""
        self.events.append((at,) + self._range(d, field))

    def _range(self, d, field: str) -> tuple:
        """(space, lo, hi) of tile ``field`` of ``d``."""
        (space, addr, nbytes, _), _ = self._key(d, field)
        return space, addr, addr + nbytes

    def dead(self) -> set:
        """The lines storing a cube tile that no step the replay runs as itself reads before it is overwritten."""
        return dead_stores(self.events, SPACES)

    def _key(self, d, field: str):
        addr, dtp, shape = self.m.layout(d.vals[field])
        return (d.ins.spaces[field], addr, prod(shape) * dtp.itemsize, dtp.np), tuple(shape)

    def get(self, d, field: str) -> str | None:
        """The expression of operand ``field`` of ``d`` from a local variable, as the step's reader gives it, or
        None."""
        key, full = self._key(d, field)
        hit = self.local.get(key)
        if hit is None:
            return None
        var, have = hit
        return var if have == full else f"{var}.reshape(({var}.shape[0],) + {full!r})"

    def hold(self, d, field: str, var: str) -> None:
        """``var`` holds what ``d`` wrote at ``field`` (an on-chip tile of a cube space)."""
        key, full = self._key(d, field)
        space, addr, nbytes, _ = key
        for k in [k for k in self.local if k[0] == space and k[1] < addr + nbytes and addr < k[1] + k[2]]:
            del self.local[k]  # (what the write cut away, or replaced)
        self.local[key] = (var, full)

    def _store(self, d, var: str, lines: list) -> None:
        """The line storing ``var`` in ``d``'s destination slot, as the step's writer stores it."""
        space = d.ins.spaces["dst"]
        addr, dtp, shape = self.m.layout(d.vals["dst"])
        self.stored(len(lines), d)
        lines.append(slot_line(self.m, self.env, space, f"b.mem[{space!r}]", addr, prod(shape) * dtp.itemsize, var))

    def emit(self, d, lines: list) -> tuple | None:
        """The code of ``d`` (an L1 -> L0A / L0B or L0C -> unified-buffer copy, or an MMAD) from local variables,
        appended to ``lines``; returns ``()``, or for a copy into the unified buffer the bytes [lo, hi) its last
        line stores there (``replay._dead_stores`` may drop it); None when an operand is not held (nothing
        appended)."""
        fam = d.ins.family
        m, env, pc = self.m, self.env, d.pc
        if fam == "copy_space" and d.ins.spaces["src"] in SPACES:
            src = self.get(d, "src")
            dst_space = d.ins.spaces["dst"]
            if src is None or (dst_space not in SPACES and (dst_space != "ub" or self.tiles is None)):
                return None
            _, ddt, dshape = m.layout(d.vals["dst"])
            env[f"CF{pc}"], env[f"CT{pc}"] = m.writer(d.vals["dst"], dst_space).finish, ddt.np
            var = self.var()
            lines.append(f"{var} = CF{pc}({src}.astype(CT{pc}, copy=False))")
            if dst_space == "ub":  # (stored as a vector instruction's result is, the variable held with it)
                addr, _, _ = m.layout(d.vals["dst"])
                nbytes = prod(dshape) * ddt.itemsize
                self.tiles.store(addr, nbytes, ddt.np, tuple(dshape), var, lines)
                return addr, addr + nbytes
            self._store(d, var, lines)
            self.hold(d, "dst", var)
            return ()
        if fam == "mmad":
            a, b = self.get(d, "a"), self.get(d, "b")
            if a is None or b is None:
                return None
            if d.vals["init"]:
                c = "None"
            else:
                c = self.get(d, "dst")
                if c is None:
                    env[f"CR{pc}"] = m.reader(d.vals["dst"], d.ins.spaces["dst"])
                    c = f"CR{pc}(b, L)"
                    self.events.append([self._range(d, "dst")])  # (the accumulator's slot)
            env[f"MM{pc}"] = _mmad(m, d)
            var = self.var()
            lines.append(f"{var} = MM{pc}(b, {a}, {b}, {c})")
            self._store(d, var, lines)
            self.hold(d, "dst", var)
            return ()
        return None


def _mmad(m, d):
    """MMAD's computation on operands the path holds (``units/cube.mmad``'s, for arrays: the same product in the
    accumulator's dtype, BLAS on one thread for a small product, the writer's finished array)."""
    _, _, ashape = m.layout(d.vals["a"])
    _, _, bshape = m.layout(d.vals["b"])
    _, cd, _ = m.layout(d.vals["dst"])
    acc = cd.np
    M, K = ashape[-2:]
    macs = (ashape[0] if len(ashape) == 3 else 1) * M * K * bshape[-1]
    finish = m.writer(d.vals["dst"], d.ins.spaces["dst"]).finish

    def mm(b, x, y, c):
        threads = host.blas_one_thread(b.n * macs)
        try:
            out = sem.mmad(x, y, c, acc)  # (its operands in the accumulator's dtype, as the step's)
        finally:
            host.blas_restore(threads)
        return finish(out.astype(acc, copy=False))
    return mm


def dead_stores(events: list, spaces: tuple) -> set:
    """The lines of a replay's body that store a whole tile which no later line reads before another store
    overwrites it (a batch's on-chip memory is dropped at the end of its launch): a backward pass over the byte
    ranges read later. ``events``, in the body's order: what a line reads, a list of (space, lo, hi) (None: any
    bytes of every space of ``spaces``), or (line, space, lo, hi) for a line storing [lo, hi) (line None: a store
    that is never dropped)."""
    live: dict = {}  # space -> the (lo, hi) ranges a later line reads before anything overwrites them
    dead = set()
    for e in reversed(events):
        if e is None or e.__class__ is list:
            for space, lo, hi in ((sp, 0, 1 << 62) for sp in spaces) if e is None else e:
                live.setdefault(space, set()).add((lo, hi))
            continue
        line, space, lo, hi = e
        reads = live.get(space, ())
        if line is not None and not any(a < hi and lo < b for a, b in reads):
            dead.add(line)
        if reads:  # (the bytes it overwrites are not read from an earlier store)
            live[space] = {p for a, b in reads for p in ((a, min(b, lo)), (max(a, hi), b)) if p[0] < p[1]}
    return dead


def reads_of(m, d) -> list | None:
    """The cube-space tiles (space, lo, hi) step ``d`` reads, or None when its tile operands are not all known."""
    reads = tile_reads(m, d)
    return None if reads is None else [r for r in reads if r[0] in SPACES]
