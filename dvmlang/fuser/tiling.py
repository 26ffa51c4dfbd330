"""Auto-tiling of fused groups, per call, from UB capacity and the group's peak live buffers.

Tile sizes are powers of two. Among the candidates the tiler picks the cheapest by a small analytic model —
``waves x (work per tile + overhead per tile)`` with ``waves = ceil(tiles / cores)`` — which prefers tile
counts that are multiples of the core count and leaves at most one ragged tile per dimension.

The tiles are chosen at a plan's first call and kept for every later call of the same plan, because tile sizes
are compile-time constants of the generated kernels: a kept tile makes a new size only an encode (masks cover
the ragged edge; the grid and block counts are runtime values). A symbolic dim is tiled as if it were at least
DESIGN_SIZE: a tile too large for a small size wastes little time (the small call is cheap), a tile too small
for a large one multiplies its programs. A row-mode group whose symbolic row outgrows its row block (which
must hold a whole row) makes the program switch to its split plan (api.Program.choose); no rebuild.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fusion import Group
from .graph import GraphError

TILE_OVERHEAD_ELEMS = 2048  # fixed cost of a tile (DMA latency, dispatch), in element-equivalents
DESIGN_SIZE = 256  # a symbolic dim is tiled for at least this size (its tiles are kept for every later size)


@dataclass
class Tiling:
    br: int
    bc: int
    grid: tuple[int, int, int]
    ncb: int
    fits: bool = True


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def live_bytes_per_element(grp: Group) -> int:
    """Peak bytes of live tiles per element of the iteration space (a liveness count over the group; computed
    once per group, after its inputs and outputs are known)."""
    if grp.live_bytes:
        return grp.live_bytes
    order = list(grp.body())
    last_use = {}
    for pos, n in enumerate(order):
        for i in n.inputs:
            last_use[i.id] = pos
    live = {}
    for x in grp.inputs:
        live[x.id] = max(2, x.dtype.itemsize)
    peak = sum(live.values())
    outputs = {o.id for o in grp.outputs}
    for pos, n in enumerate(order):
        live[n.id] = max(2, n.dtype.itemsize)
        peak = max(peak, sum(live.values()))
        for k in [k for k in live if last_use.get(k, -1) <= pos and k != n.id and k not in outputs]:
            del live[k]
    result = max(4, peak + 8)  # plus masks and index tiles
    if grp.outputs:
        grp.live_bytes = result
    return result


def tile_budget(profile) -> int:
    """Bytes of UB one tile's live buffers may use: half of UB (ping-pong), less room for masks and splats."""
    return profile.ub_bytes // 2 - 8192


def row_fits(grp: Group, cols: int, profile) -> bool:
    """Whether a row-mode group can hold a whole row of ``cols`` elements (at least one row per tile)."""
    return _pow2_ceil(max(1, cols)) * live_bytes_per_element(grp) <= tile_budget(profile)


def split_parts(grp: Group) -> int:
    """The number of partials of a split group's whole-tensor reductions (its logical programs)."""
    return next(n.attrs["split"] for n in grp.nodes if n.op == "reduce" and n.attrs.get("split"))


def choose(grp: Group, rows: int, cols: int, outer: int, profile, live_bytes: int) -> Tiling:
    """Tile a vector group over (outer x rows x cols)."""
    budget = tile_budget(profile)
    if grp.mode == "split":  # one row in chunks: a program per chunk, column blocks as wide as fit
        parts = split_parts(grp)
        chunk = _pow2_ceil(max(1, math.ceil(max(1, cols) / parts)))
        bc = 64
        while bc * 2 <= min(chunk, 16384) and bc * 2 * live_bytes <= budget:
            bc *= 2
        return Tiling(1, bc, (parts, 1, 1), 1)
    cores = profile.vector_cores
    max_programs = profile.max_programs
    rows = max(1, rows)
    cols = max(1, cols)
    if grp.mode == "row":
        bc = _pow2_ceil(cols)
        cap_r = budget // (bc * live_bytes)
        if cap_r < 1:
            return Tiling(1, bc, (1, 1, 1), 1, fits=False)
        bc_choices = [bc]
    else:
        full = _pow2_ceil(cols)
        bc_choices = sorted({min(full, c) for c in (64, 256, 1024, 4096, 16384)} | {min(full, 16384)})
        # a column block must fit UB with at least one row (at worst the narrowest block)
        bc_choices = [bc for bc in bc_choices if bc * live_bytes <= budget] or bc_choices[:1]
    best = None
    for bc in bc_choices:
        cap_r = max(1, budget // (bc * live_bytes))
        br_max = min(_pow2_floor(cap_r), _pow2_ceil(rows), 1024)
        br = 1
        while br <= br_max:
            ncb = 1 if grp.mode in ("row", "loop") else math.ceil(cols / bc)
            tiles = math.ceil(rows / br) * ncb * outer
            if tiles <= max_programs:
                waves = math.ceil(tiles / cores)
                work = br * (bc if grp.mode != "loop" else cols)
                cost = waves * (work + TILE_OVERHEAD_ELEMS)
                key = (cost, -br * bc)
                if best is None or key < best[0]:
                    best = (key, br, bc, ncb)
            br *= 2
    if best is None:
        raise GraphError(f"group {grp.name}: no tiling of {outer} x {rows} x {cols} fits the device's limit of "
                         f"{max_programs} programs per launch (each program takes one index of the leading "
                         "dimensions); reshape the tensor to fewer, larger leading dimensions")
    _, br, bc, ncb = best
    return Tiling(br, bc, (math.ceil(rows / br) * ncb, 1, 1), ncb)


def vector_tiles(grp: Group, space: tuple, profile, kept: Tiling | None = None, design: tuple | None = None) -> Tiling:
    """The tiles of a vector group over its iteration ``space`` (outer..., rows, cols): ``kept`` (an earlier
    call's tiles) while they still hold a row and stay within the program limit, else a choice for the
    ``design`` sizes (``space`` with its symbolic dims raised to DESIGN_SIZE, design_space)."""
    r = len(space)
    rows = max(1, space[-2]) if r >= 2 else 1
    cols = max(1, space[-1]) if r >= 1 else 1
    outer = max(1, math.prod(space[:-2])) if r > 2 else 1
    if grp.mode == "split":
        return kept if kept is not None else choose(grp, rows, design[-1] if design else cols, outer, profile,
                                                    live_bytes_per_element(grp))
    if kept is None or not kept.fits or (grp.mode == "row" and cols > kept.bc):
        kept = None
        if design is not None and design != space:
            kept = choose(grp, max(1, design[-2]) if r >= 2 else 1, max(1, design[-1]), outer, profile,
                          live_bytes_per_element(grp))
        if kept is None or not kept.fits:
            kept = choose(grp, rows, cols, outer, profile, live_bytes_per_element(grp))
        if not kept.fits:
            return kept
    ncb = 1 if grp.mode in ("row", "loop") else math.ceil(cols / kept.bc)
    tiles = math.ceil(rows / kept.br) * ncb
    if tiles * outer > profile.max_programs:
        return choose(grp, rows, cols, outer, profile, live_bytes_per_element(grp))
    return Tiling(kept.br, kept.bc, (tiles, 1, 1), ncb)


def matmul_tiles(grp: Group, env, profile, kept: tuple | None = None, design=None) -> tuple[int, int, int]:
    """The cube tiles (bm, bn, bk) of a matmul group: ``kept`` if given (any tile is correct: the edges are
    masked and the K loop runs to the runtime K), else ``choose_matmul`` for the design sizes (``design(d)``:
    the size a dim is tiled for)."""
    if kept is not None:
        return kept
    mm = grp.nodes[0]
    size = design or env.value
    m, n, k = size(mm.shape[-2]), size(mm.shape[-1]), size(mm.inputs[0].shape[-1])
    return choose_matmul(m, n, k, mm.inputs[0].dtype.itemsize, profile, live_bytes_per_element(grp))


def choose_matmul(m: int, n: int, k: int, itemsize: int, profile, epilogue_bytes: int = 4) -> tuple[int, int, int]:
    """Cube tiles: as large as L0A/L0B/L0C allow (with ping-pong), no larger than the matrices, and small
    enough that the epilogue's live tiles (``epilogue_bytes`` per output element: the accumulator moved to UB,
    the values the epilogue loads and computes) fit UB."""
    bm = min(128, max(16, _pow2_ceil(m)))
    bn = min(128, max(16, _pow2_ceil(n)))
    bk = min(128 if itemsize <= 2 else 64, max(16, _pow2_ceil(k)))
    while bm * bk * itemsize * 2 > profile.l0a_bytes and bk > 16:
        bk //= 2
    while bm * bn * 4 > profile.l0c_bytes and bm > 16:
        bm //= 2
    ub = profile.ub_bytes - 16384  # room for masks and splats
    while bm * bn * epilogue_bytes > ub and max(bm, bn) > 16:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    return bm, bn, bk
