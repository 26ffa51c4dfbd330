"""Timing that does not depend on the data, computed once per kernel instance.

A launch's cycles come from its programs' instruction streams: which instructions each program runs, the
descriptors of its transfers, the elements its gathers move, the events and the costs. When none of that can
depend on a value loaded from global memory, every launch of one instance (same code, immediates, grid and
tensor shapes, on the same device with the same options) runs the same streams and takes the same cycles. So
the first launch is timed in full and what it found is kept with the instance's launch base; the launches
after it run the numerics alone (``Launch.untimed``: no pipe clock, no transfer figures) and take the kept
figures: cycles of the programs on their cores, pipe times, bytes, instructions, and the bytes each tensor's
transfers moved (the L2 model still settles every launch with them, so what L2 holds, and the HBM bytes and
the roofline that follow, are worked out as before).

Whether a kernel's timing can depend on data is decided once per machine (``fixed``) by following loaded
values through the code, step by step along every path: a register a scalar load (``LDG``) writes is
*loaded*, so is a tile a transfer from global memory, a gather or an atomic writes, and a register or tile
computed from a loaded one (``MOVTS`` of a loaded tile); a register written from values that are not loaded
is not, whatever it held (tiles are known by their byte ranges). The timing is fixed when no branch tests a
loaded register (except a device assertion's: its other way traps, so a launch that completes went the same
way), no transfer's descriptor reads one, no gather or scatter has a loaded mask, the kernel has no atomics
(programs that wait on each other's atomics spin as often as the programs running with them make them) and it
does not communicate with other devices (a wait's cycles are a peer's). Traced launches, and devices in debug or
race-detection mode, are always timed in full. ``Device(timing_cache="check")`` times every launch in full and compares with
the kept figures (``tests/test_timing_cache.py`` runs the gallery, the Triton tutorials and random kernels
that way).
"""

from __future__ import annotations

from ..errors import DvmError
from ..vm.decode import sop_parts, tile_parts

_LOADS_REG = frozenset(("ldg",))  # families whose register result is a value from global memory
_LOADS_TILE = frozenset(("dma_load", "gather", "atomic"))  # ... whose tile result is
_DESCRIPTORS = frozenset(("dma_load", "dma_store", "fix_store"))
_ELEMENTWISE = frozenset(("gather", "scatter"))
_READS_DST = frozenset(("mmad", "dma_load"))  # families whose result may keep part of what dst held
# families whose time depends on other devices (a peer's signal, the links' queues): never kept
_COMMUNICATES = frozenset(("remote_store", "signal", "wait_signal"))


def fixed(m) -> bool:
    """Whether machine ``m``'s timing depends only on its instance (see the module's docstring); worked out
    once per machine."""
    v = m.__dict__.get("_fixed_timing")
    if v is None:
        v = m._fixed_timing = _fixed(m)
    return v


def _operands(m, d):
    """(registers read, tiles read as (space, lo, hi), register written, tile written) of decoded ``d`` (read-only:
    worked out once per step of the machine, which every instance of a build shares)."""
    return _known(m, d)[1]


def _known(m, d) -> tuple:
    """(d, its ``_operands``, its ``tile_reads``), kept with the machine by the step's pc."""
    memo = m.__dict__.get("_operands")
    if memo is None:
        memo = m._operands = {}
    got = memo.get(d.pc)
    if got is None or got[0] is not d:
        ops = _operands_of(m, d)
        known = sum(f.kind == "tile" for f in d.ins.fields) == sum(1 for _ in m.tile_fields(d))
        got = memo[d.pc] = (d, ops, ops[1] if known else None)
    return got


def _operands_of(m, d):
    regs, tiles, w_reg, w_tile = [], [], None, None
    for f in d.ins.fields:
        val = d.vals.get(f.name)
        if val is None:
            continue
        if f.kind == "reg":
            if f.writes:
                w_reg = val
            else:
                regs.append(val)
        elif f.kind in ("sop", "sop16"):
            is_reg, x = sop_parts(val, f.kind)
            if is_reg:
                regs.append(x)
    for f, space, addr, n, item in m.tile_fields(d):
        r = (space, addr, addr + max(n, item))
        if f.writes:
            w_tile = r
            if d.ins.family in _READS_DST:  # (an accumulating MMAD, a load that keeps part of dst)
                tiles.append(r)
        else:
            tiles.append(r)
    return regs, tiles, w_reg, w_tile


def tile_reads(m, d) -> list | None:
    """The tiles (space, lo, hi) step ``d`` may read when it runs as its step (a step may read its destination
    too: an accumulating MMAD, a load that keeps part of it), or None when its tile operands are not all known
    (a tile whose layout the kernel lacks: it may read any bytes)."""
    return _known(m, d)[2]


def _overlaps(r, ranges) -> bool:
    sp, lo, hi = r
    return any(s == sp and a < hi and lo < b for s, a, b in ranges)


def _fixed(m) -> bool:
    """A forward dataflow over the machine's steps: which registers and tile ranges hold a loaded value before
    each step (a register or range is loaded after a step if the step loads it, or computes it from a loaded
    operand; a register written from operands that are not loaded is not, whatever it held). Fixed when no
    branch tests a loaded register (unless its other way is a TRAP: a launch that goes on took the same way),
    no transfer's descriptor reads one and no gather's or scatter's mask is loaded."""
    if m.atomics or any(d.ins.family in _COMMUNICATES for d in m.decoded):
        return False
    steps, decoded = m.steps, m.decoded
    n = len(steps)
    ops = [_operands(m, d) for d in decoded]
    succ = []
    for s in steps:
        if s.kind == "end" or s.ins.family == "trap":
            succ.append(())
        elif s.kind == "jmp":
            succ.append((s.target,))
        elif s.kind in ("br_z", "br_nz"):
            succ.append((s.index + 1, s.target))
        else:
            succ.append((s.index + 1,))
    before: list = [None] * n  # (loaded registers, loaded tile ranges) before each step, as far as known
    before[0] = (frozenset(), frozenset())
    work = [0]
    while work:
        i = work.pop()
        regs, tiles = before[i]
        d = decoded[i]
        fam = d.ins.family
        r_in, t_in, w_reg, w_tile = ops[i]
        loaded = any(r in regs for r in r_in) or any(_overlaps(t, tiles) for t in t_in)
        if w_reg is not None:
            regs = regs | {w_reg} if (loaded or fam in _LOADS_REG) else regs - {w_reg}
        if w_tile is not None:
            if loaded or fam in _LOADS_TILE:
                tiles = tiles | {w_tile}
            elif _overlaps(w_tile, tiles):
                tiles = _cut(tiles, w_tile)  # (what the write covers holds its value now; the rest stays loaded)
        for j in succ[i]:
            if j >= n:
                continue
            old = before[j]
            new = (regs, tiles) if old is None else (old[0] | regs, old[1] | tiles)
            if new != old:
                before[j] = new
                work.append(j)
    for i, d in enumerate(decoded):
        if before[i] is None:
            continue  # (never reached)
        regs, tiles = before[i]
        fam = d.ins.family
        r_in = ops[i][0]
        if fam == "br" and d.vals["rc"] in regs and not any(_traps(steps, j) for j in succ[i]):
            return False
        if fam in _DESCRIPTORS and any(r in regs for r in r_in):
            return False
        if fam in _ELEMENTWISE and d.vals.get("masked") and _overlaps(_mask_range(m, d), tiles):
            return False
    return True


def _cut(tiles: frozenset, w) -> frozenset:
    """Loaded tile ranges ``tiles`` after range ``w`` is written with a value that is not loaded: the parts of
    them outside ``w``."""
    sp, lo, hi = w
    out = set()
    for t in tiles:
        s, a, b = t
        if s != sp or b <= lo or hi <= a:
            out.add(t)
            continue
        if a < lo:
            out.add((s, a, lo))
        if hi < b:
            out.add((s, hi, b))
    return frozenset(out)


def _traps(steps, j: int) -> bool:
    """Whether the step ``j`` a branch goes to traps (a device assertion's failing way)."""
    return j < len(steps) and steps[j].ins.family == "trap"


def _mask_range(m, d):
    addr, li = tile_parts(d.vals["mask"])
    if li >= len(m.layouts):
        return ("ub", 0, 1 << 62)
    dtp, shape = m.layouts[li]
    n = 1
    for e in shape:
        n *= e
    return (d.ins.spaces["mask"], addr, addr + max(1, n) * dtp.itemsize)


def key(L) -> tuple:
    """What a launch's rates depend on besides its instance: which tensors alias and which alias groups fit
    L2 (``Rates._fits``)."""
    rates = L.rates
    gb = rates.group_bytes
    cap = rates.l2_bytes
    return tuple(L.alias.items()), tuple((g, n <= cap) for g, n in gb.items())


class Timing:
    """A timed launch's figures: the programs' cycles on their cores (``body``), busy cycles per pipe, bytes
    read and written, instructions, and its rates' totals per alias group and the DMA notes for the trace."""

    __slots__ = ("body", "busy", "bytes_r", "bytes_w", "instrs", "reads", "writes", "unaligned", "transfers")

    def __init__(self, body, busy, bytes_r, bytes_w, instrs, rates):
        self.body, self.busy, self.bytes_r, self.bytes_w, self.instrs = body, list(busy), bytes_r, bytes_w, instrs
        self.reads, self.writes = dict(rates.group_reads), dict(rates.group_writes)
        self.unaligned, self.transfers = rates.unaligned_cycles, dict(rates.transfers)

    def figures(self) -> tuple:
        return self.body, list(self.busy), self.bytes_r, self.bytes_w, self.instrs

    def restore(self, rates) -> None:
        """Put the kept totals in a launch's rates, as the timed launch left them."""
        rates.group_reads.update(self.reads)
        rates.group_writes.update(self.writes)
        rates.transfers.update(self.transfers)
        rates.unaligned_cycles = self.unaligned

    def check(self, other: "Timing", name: str) -> None:
        """A launch timed in full against the kept figures (``Device(timing_cache="check")``)."""
        mine = (self.body, self.busy, self.bytes_r, self.bytes_w, self.instrs, self.reads, self.writes,
                self.unaligned)
        theirs = (other.body, other.busy, other.bytes_r, other.bytes_w, other.instrs, other.reads, other.writes,
                  other.unaligned)
        if mine != theirs:
            raise DvmError(f"kernel `{name}`: the timing kept for its instance {mine} differs from a full timing "
                           f"{theirs} (a dvmlang bug: please report it)")
