"""Pass 3: addresses and registers.

Each memory space is allocated with a first-fit linear scan (32-byte aligned); ping-pong copies that do not
fit fall back to single buffering, and a space that still leaves no hole big enough (fragmentation) is placed
again largest first; only if that fails too is it a ``BufferOverflowError`` listing the buffers live at the
peak. Scalars get typed registers with a linear scan of their own. ``Staging`` hands
out, while emitting, the space above the allocation: splat slots, the cube's staging buffers, the
temporaries of loop-carried swaps.
"""

from __future__ import annotations

from ... import dtypes as dt
from ...errors import BufferOverflowError, ResourceError
from ...ir.core import Function, ScalarType
from .. import isa
from .program import MAX_REGS, Buffer, Liveness, Placement, Registers, nbytes

ADDR_LIMIT = (1 << 16) * isa.TILE_ADDR_UNIT


def allocate_memory(plan: Placement, profile, kernel: str) -> dict[str, int]:
    """Give every buffer its address; returns the high-water mark of each space."""
    spaces = dict(profile.capacities)
    spaces["ub"] -= getattr(plan, "ub_reserve", 0)  # room the emitters stage in above the tiles (split.py)
    try:
        footprint = _scan_all(plan.buffers, spaces, kernel, profile)
    except ResourceError:
        if plan.alt:
            # ping-pong buffers do not fit: fall back to single buffering
            alts = {id(a) for a in plan.alt.values()}
            plan.buffers = [b for b in plan.buffers if id(b) not in alts]
            plan.alt.clear()
            plan.unrolled.clear()
        footprint = _scan_all(plan.buffers, spaces, kernel, profile, repack=True)
    for b in plan.buffers:
        if b.nbytes == 0:
            b.addr = 0
    return footprint


def _scan_all(buffers: list[Buffer], spaces, kernel: str, profile, repack: bool = False) -> dict:
    fp = {}
    for space, cap in spaces.items():
        bufs = [b for b in buffers if b.space == space and b.nbytes > 0]
        fp[space] = _linear_scan(bufs, cap, space, kernel, profile, repack)
    return fp


def _linear_scan(bufs: list[Buffer], capacity: int, space: str, kernel: str, profile, repack: bool = False) -> int:
    """First-fit allocation by start position; returns the high-water mark. With ``repack``, a buffer that finds
    no hole sends the whole space to ``_largest_first`` before the overflow is reported."""
    bufs = sorted(bufs, key=lambda b: (b.start, -b.nbytes))
    active: list[Buffer] = []
    top = 0
    for b in bufs:
        active = [a for a in active if a.end >= b.start]
        occupied = sorted((a.addr, a.addr + a.nbytes) for a in active)
        addr = 0
        for s, e in occupied:
            if addr + b.nbytes <= s:
                break
            addr = max(addr, e)
        addr = (addr + 31) // 32 * 32
        if addr + b.nbytes > capacity or addr + b.nbytes > ADDR_LIMIT:
            packed = _largest_first(bufs, min(capacity, ADDR_LIMIT)) if repack else None
            if packed is not None:
                return packed
            live = active + [b]
            total = sum(x.nbytes for x in live)
            lines = [f"  {x.name:<24} {x.nbytes / 1024:8.1f} KiB   {x.loc if x.loc else ''}"
                     for x in sorted(live, key=lambda x: -x.nbytes)]
            biggest = max((x for x in live if x.loc is not None), key=lambda x: x.nbytes, default=None)
            # exact bytes when KiB with one decimal would round the excess away ("192.0 KiB live, 192 available")
            live_text = f"{total / 1024:.1f} KiB" if round(total / 1024, 1) * 1024 != capacity else \
                f"{total:,} bytes ({total / 1024:.1f} KiB)"
            raise BufferOverflowError(
                f"kernel `{kernel}` does not fit {space.upper()}: {live_text} live at once, "
                f"{capacity / 1024:.0f} KiB available on {profile.name}\n" + "\n".join(lines),
                biggest.loc if biggest is not None else None,
                "use smaller BLOCK sizes, or loop over the data in chunks")
        b.addr = addr
        active.append(b)
        top = max(top, addr + b.nbytes)
    return top


def _largest_first(bufs: list[Buffer], capacity: int) -> int | None:
    """Greedy by size: each buffer, largest first, at the lowest 32-byte-aligned address that no buffer already
    placed and live at the same time occupies. Returns the high-water mark, or None if a buffer does not fit."""
    placed: list[Buffer] = []
    top = 0
    for b in sorted(bufs, key=lambda b: (-b.nbytes, b.start)):
        addr = 0
        for s, e in sorted((a.addr, a.addr + a.nbytes) for a in placed if a.start <= b.end and b.start <= a.end):
            if addr + b.nbytes <= s:
                break
            addr = max(addr, (e + 31) // 32 * 32)
        if addr + b.nbytes > capacity:
            return None
        b.addr = addr
        placed.append(b)
        top = max(top, addr + b.nbytes)
    return top


def allocate_registers(fn: Function, live: Liveness, plan: Placement) -> Registers:
    """Linear scan over scalar values; registers are typed (one dtype each)."""
    items = []  # (start, end, key, dtype)
    for op in fn.walk():
        if op.kind == "const":
            continue
        for r in op.results:
            if isinstance(r.type, ScalarType) and r.id not in plan.scalar_homes:
                s, e = live.interval(r)
                items.append((s, e, r.id, r.type.dtype))
    for p in fn.params:
        if p.kind == "scalar":
            e = max(live.last_use.get(p.value.id, 0), 0)
            items.append((-1, e, p.value.id, p.dtype))
    for key, (s, e, d) in plan.home_spans.items():
        items.append((s, e, key, d))
    for op in fn.walk():
        if op.kind == "for":
            iv = op.regions[0].args[0]
            items.append((live.pos[id(op)], live.op_end[id(op)], iv.id, iv.type.dtype))
    # constants that need registers live for the whole kernel
    consts: dict = {}
    for op in fn.walk():
        if op.kind == "const":
            key = (op.result.dtype.code, op.attrs["value"], type(op.attrs["value"]).__name__)
            consts.setdefault(key, []).append(op.result)
    for key, vals in consts.items():
        items.append((-2, 1 << 60, ("const",) + key, vals[0].type.dtype))
    items.sort(key=lambda t: (t[0], t[1]))
    regs = Registers(fn.name, consts)
    active: list = []
    free: dict = {}
    of_key = regs.of_key
    for s, e, key, d in items:
        still = []
        for (ae, reg, ad) in active:
            if ae < s:
                free.setdefault(ad.code, []).append(reg)
            else:
                still.append((ae, reg, ad))
        active = still
        pool = free.get(d.code)
        if pool:
            reg = pool.pop()
        else:
            reg = len(regs.types)
            if reg >= MAX_REGS:
                raise ResourceError(f"kernel `{fn.name}` needs more than {MAX_REGS} scalar registers; "
                                    "simplify the scalar arithmetic or split the kernel")
            regs.types.append(d)
        of_key[key] = reg
        active.append((e, reg, d))
    of_value = regs.of_value
    for key, vals in consts.items():
        for v in vals:
            of_value[v.id] = of_key[("const",) + key]
    for vid_or_key, reg in of_key.items():
        if isinstance(vid_or_key, int):
            of_value[vid_or_key] = reg
    for vid, key in plan.scalar_homes.items():
        of_value[vid] = of_key[key]
    return regs


class Staging:
    """The space above the allocated buffers, handed out while emitting: four rotating 32-byte UB slots for
    scalar splats, one cube staging buffer per (space, layout, ping-pong copy), and the UB temporaries of
    loop-carried swaps (above the splat slots)."""

    __slots__ = ("footprint", "profile", "kernel", "scratch_n", "scratch_top", "cube_bufs", "cube_top",
                 "swap_used", "loc")

    def __init__(self, footprint: dict[str, int], profile, kernel: str, loc=None):
        self.footprint = footprint
        self.profile = profile
        self.kernel = kernel
        self.loc = loc  # where an overflow of the staged space points: the largest UB tile's source line
        self.scratch_n = 0  # splat slots handed out
        self.scratch_top = 0
        self.cube_bufs: dict = {}
        self.cube_top: dict = {}
        self.swap_used = 0  # bytes of temporaries for loop-carried swaps

    def scratch(self) -> Buffer:
        """A small UB buffer above every allocated one, reserved for scalar splats."""
        addr = self.footprint["ub"] + 32 * (self.scratch_n % 4)
        self.scratch_n += 1
        self.scratch_top = max(self.scratch_top, 32 * min(self.scratch_n, 4))
        return Buffer("ub", 32, 0, 0, "splat", None, addr)

    def _cube_slot(self, space, dtype: dt.DType, shape) -> tuple[int, int, int]:
        """(address, bytes, capacity) of the next cube staging buffer of ``space`` for a tile of that layout."""
        base = self.footprint.get(space, 0) + self.cube_top.get(space, 0)
        align = 512 if space in ("l0a", "l0b") else 64 if space == "l0c" else 32
        base = (base + align - 1) // align * align
        return base, nbytes(shape, dtype), getattr(self.profile, f"{space}_bytes")

    def cube_fits(self, space, dtype: dt.DType, shape, alt: bool) -> bool:
        """Whether ``cube`` can hand out that staging buffer: it exists already, or there is room for it."""
        if (space, dtype.code, tuple(shape), alt) in self.cube_bufs:
            return True
        base, nb, cap = self._cube_slot(space, dtype, shape)
        return base + nb <= cap or (alt and self.cube_fits(space, dtype, shape, False))

    def cube(self, space, dtype: dt.DType, shape, alt: bool) -> Buffer:
        """Cube staging buffers: one per (space, layout), allocated above the space's live data; ``alt`` asks
        for the copy of the second body of an unrolled loop."""
        key = (space, dtype.code, tuple(shape), alt)
        b = self.cube_bufs.get(key)
        if b is None:
            top = self.cube_top
            base, nb, cap = self._cube_slot(space, dtype, shape)
            if base + nb > cap and alt:
                # no room for a ping-pong copy: the second body copy shares the staging buffer
                b = self.cube(space, dtype, shape, False)
                self.cube_bufs[key] = b
                return b
            if base + nb > cap:
                raise ResourceError(f"kernel `{self.kernel}`: the dot operand tile {tuple(shape)} {dtype} needs "
                                    f"{nb} bytes of {space.upper()} at offset {base}, but {space.upper()} has "
                                    f"{cap} bytes; use smaller BLOCK sizes for dl.dot")
            b = Buffer(space, nb, 0, 0, f"dot {space}", None, base)
            top[space] = base + nb - self.footprint.get(space, 0)
            self.cube_bufs[key] = b
        return b

    def swap_addr(self, size: int) -> int:
        """A UB range above the allocated buffers and the splat slots, for the temporaries of one move."""
        addr = self.footprint["ub"] + 128 + self.swap_used
        self.swap_used += size
        if addr + size > self.profile.ub_bytes:
            raise ResourceError(f"kernel `{self.kernel}`: no UB left for the temporary of a loop-carried swap "
                                f"({size} bytes)")
        return addr

    def total_footprint(self) -> dict[str, int]:
        """The allocation's high-water marks plus what was staged above them. Splat slots are handed out
        without a check (their number is known only once emitted), so a UB the buffers fill to the last bytes
        is a ``BufferOverflowError`` here, not a footprint the validator refuses."""
        footprint = dict(self.footprint)
        staged = max(self.scratch_top, 128 if self.swap_used else 0) + self.swap_used
        footprint["ub"] += staged
        cap = self.profile.ub_bytes
        if footprint["ub"] > cap:
            raise BufferOverflowError(
                f"kernel `{self.kernel}` does not fit UB: its tiles take {self.footprint['ub']} of the {cap} bytes "
                f"on {self.profile.name}, leaving no room for the {staged} bytes of scalar splat slots and "
                "temporaries above them", self.loc, "use smaller BLOCK sizes, or loop over the data in chunks")
        for space, top in self.cube_top.items():
            footprint[space] = footprint.get(space, 0) + top
        return footprint
