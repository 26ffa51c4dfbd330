"""Bounds checks of global-memory accesses and the faults they raise: a DMA descriptor's box (``check_dma``),
a scalar access (``check_bounds``), element-wise accesses (``check_elements``), and, for a pointer-table heap,
the tensor each access falls in. Every access is checked before anything is read or written.
"""

from __future__ import annotations

import numpy as np

from ..errors import MemoryFault

_EXACT_FLOAT = 1 << 53  # below it, integer sums and products are exact in float64 (and in int64)


def check_dma(L, b, t: int, desc, pc: int, size: int) -> None:
    """The box of DMA descriptor ``desc`` (a ``dma.Desc``) inside tensor ``t`` of ``size`` elements, for every
    program of batch ``b``, or a ``MemoryFault`` naming the first program outside it."""
    segs = getattr(L.arrays[t], "dvm_segments", None)
    if b.n == 1 and segs is None:  # one program: its box's first and last elements in Python numbers
        box = _box_one(desc)
        if box is not None:
            if (box[0] < 0 or box[1] >= size) and not desc.is_empty():
                _fault(L, b, t, 0, box[0], box[1], size, pc)
            return
    lo_idx, hi_idx, flo, fhi = _box_extremes(desc)
    if segs is not None:  # a pointer-table heap: the whole box inside the one tensor its first element is in
        lo = np.broadcast_to(lo_idx, (b.n,))
        hi = np.broadcast_to(hi_idx, (b.n,))
        _check_segments(L, b, t, segs, lo, hi, np.broadcast_to(~desc.empty, (b.n,)), pc)
    bad = ((lo_idx < 0) | (hi_idx >= size) | (flo < 0) | (fhi >= size)) & ~desc.empty
    if np.any(bad):
        i = int(np.argmax(np.broadcast_to(bad, (b.n,))))
        lo = int(np.broadcast_to(lo_idx, (b.n,))[i])
        hi = int(np.broadcast_to(hi_idx, (b.n,))[i])
        _fault(L, b, t, i, lo, hi, size, pc)


def _box_extremes(desc):
    """(first, last element of each program's box, the same two in float64)."""
    lo_idx = desc.base
    hi_idx = desc.base
    for s, l, h in zip(desc.strides, desc.lo, desc.hi):
        a = s * l
        z = s * np.maximum(h - 1, l)
        lo_idx = lo_idx + np.minimum(a, z)
        hi_idx = hi_idx + np.maximum(a, z)
    # int64 address arithmetic can wrap (a stride near 2**63 maps an out-of-range middle element between two
    # in-range end points): check the same extremes in float64, which cannot wrap, before anything is touched.
    flo = fhi = desc.base.astype(np.float64)
    for s, l, h in zip(desc.strides, desc.lo, desc.hi):
        fs = s.astype(np.float64)
        a = fs * l
        z = fs * np.maximum(h - 1, l)
        flo = flo + np.minimum(a, z)
        fhi = fhi + np.maximum(a, z)
    return lo_idx, hi_idx, flo, fhi


def _box_one(desc) -> tuple[int, int] | None:
    """``_box_extremes`` of a one-program descriptor in Python numbers: (first, last element), exact, or None
    when a value is large enough for the int64 or float64 arithmetic there to differ from exact (then
    ``check_dma`` checks it that way)."""
    base, strides, los, his = desc.ints()
    lo = hi = base
    bound = abs(lo)
    for s, l, h in zip(strides, los, his):
        a = s * l
        z = s * (h - 1 if h - 1 > l else l)
        if a < z:
            lo, hi = lo + a, hi + z
        else:
            lo, hi = lo + z, hi + a
        bound += abs(a) + abs(z)
    return (lo, hi) if bound < _EXACT_FLOAT else None


def check_bounds(L, b, t, idx, pc):
    """A scalar access: ``idx`` one element offset, or one per program."""
    size = L.arrays[t].size
    segs = getattr(L.arrays[t], "dvm_segments", None)
    if segs is not None:
        at = np.broadcast_to(np.asarray(idx, dtype=np.int64), (b.n,))
        _check_segments(L, b, t, segs, at, at, np.ones(b.n, bool), pc)
    bad = (idx < 0) | (idx >= size)
    if np.any(bad):
        i = int(np.argmax(np.broadcast_to(bad, (b.n,))))
        at = int(np.broadcast_to(idx, (b.n,))[i])
        _fault(L, b, t, i, at, at, size, pc)


def _check_segments(L, b, t, segs, lo, hi, live, pc):
    """Every live program's element range [lo, hi] of a pointer-table heap inside one of its tensors."""
    j = np.searchsorted(segs[:, 0], lo, side="right") - 1
    jc = np.clip(j, 0, max(len(segs) - 1, 0))
    if len(segs):
        ok = (j >= 0) & (hi < segs[jc, 1]) & (lo >= segs[jc, 0])
    else:
        ok = np.zeros(lo.shape, bool)
    bad = ~ok & live
    if np.any(bad):
        i = int(np.argmax(bad))
        _segment_fault(L, b, t, i, int(lo[i]), int(hi[i]), segs, int(j[i]), pc)


def check_elements(L, b, t, off, m, pc, size):
    _check_element_segments(L, b, t, off, m, pc)
    bad = ((off < 0) | (off >= size)) & m
    if np.any(bad):
        flat = bad.reshape(b.n, -1)
        i = int(np.argmax(flat.any(axis=1)))
        row = off.reshape(b.n, -1)[i][flat[i]]
        _fault(L, b, t, i, int(row.min()), int(row.max()), size, pc)


def _check_element_segments(L, b, t, off, m, pc):
    segs = getattr(L.arrays[t], "dvm_segments", None)
    if segs is not None:  # a pointer-table heap: each element inside some tensor
        j = np.searchsorted(segs[:, 0], off, side="right") - 1
        jc = np.clip(j, 0, max(len(segs) - 1, 0))
        ok = (j >= 0) & (off < segs[jc, 1]) if len(segs) else np.zeros(off.shape, bool)
        bad = ~ok & m
        if np.any(bad):
            flat = bad.reshape(b.n, -1)
            i = int(np.argmax(flat.any(axis=1)))
            k = int(np.argmax(flat[i]))
            at = int(off.reshape(b.n, -1)[i][k])
            _segment_fault(L, b, t, i, at, at, segs, int(j.reshape(b.n, -1)[i][k]), pc)


def _fault(L, b, t, lane, lo, hi, size, pc):
    name = L.bc.params[t].name
    pid = int(b.pids[lane])
    grid = L.kernel.grid
    coords = (pid % grid[0], (pid // grid[0]) % grid[1], pid // (grid[0] * grid[1]))
    pid_text = str(coords[0]) if grid[1] == grid[2] == 1 else str(coords)
    loc = L.loc_of_pc(pc)
    raise MemoryFault(f"out-of-bounds access to `{name}` in kernel `{L.name}`: program {pid_text} touched "
                      f"elements [{lo}, {hi}] but `{name}` has {size} elements (valid 0..{size - 1}); mask the access "
                      "or fix the offsets" + _poison_note(L), kernel=L.name, tensor=name, index_range=(lo, hi), program_id=coords,
                      loc=loc, source=L.bc.debug.line_text(loc.file, loc.line) if loc is not None else None)


def _poison_note(L) -> str:
    origin = getattr(L, "poison_from", None)
    return f" (this launch read out of range at {origin}: those values were poison)" if origin else ""


def _segment_fault(L, b, t, lane, lo, hi, segs, j, pc):
    heap = L.arrays[t]
    pid = int(b.pids[lane])
    grid = L.kernel.grid
    coords = (pid % grid[0], (pid // grid[0]) % grid[1], pid // (grid[0] * grid[1]))
    pid_text = str(coords[0]) if grid[1] == grid[2] == 1 else str(coords)
    item = heap.itemsize
    if 0 <= j < len(segs) and segs[j, 0] <= lo < segs[j, 1]:
        s, e = int(segs[j, 0]), int(segs[j, 1])
        where = (f"they start in {heap.dvm_names[j]} ({e - s} elements) and run {hi - e + 1} elements past its end"
                 if hi >= e else "")
    else:
        where = "the first of them is inside no tensor the pointer tables point into"
    loc = L.loc_of_pc(pc)
    name = L.bc.params[t].name
    raise MemoryFault(f"out-of-bounds access through a pointer table (tl.pointer_type) in kernel `{L.name}`: program "
                      f"{pid_text} touched {hi - lo + 1} {item}-byte elements from address offset {lo * item} of the "
                      f"tables' tensors, and {where}; mask the access or fix the offsets", kernel=L.name,
                      tensor=name, index_range=(lo, hi), program_id=coords, loc=loc,
                      source=L.bc.debug.line_text(loc.file, loc.line) if loc is not None else None)
