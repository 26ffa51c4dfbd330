"""GPU load semantics (kernels launched through ``dvmlang.triton``): a load lane outside its tensor reads poison.

On a GPU, and in Triton's interpreter, an unmasked load that runs past a buffer reads whatever is there; a
kernel is correct as long as those lanes never reach memory (a masked store drops them). A block wider than the
matrix under one autotune config does exactly that. So for a bytecode marked ``gpu_loads`` (``triton.jit``
sets it; ``dvmlang.kernel`` and ``triton.jit(strict_loads=True)`` do not) an out-of-range load is not a
``MemoryFault``: its in-range lanes read memory, its out-of-range lanes read the poison pattern (all-ones bytes:
a NaN with every payload bit set for floats, -1 for integers, as debug mode's uninitialised memory), and a
``DvmWarning`` names the kernel, the line and the elements, once per kernel and line. A poisoned float that
reaches a store is a ``MemoryFault`` (the store finds the poison pattern among the elements it writes); a
poisoned value used as an address faults as any bad address does, with a note that poison was read. Stores out
of range always fault. (Integers carry no mark a store can see: -1 is an ordinary integer.)
"""

from __future__ import annotations

import numpy as np

from ..errors import MemoryFault, warn_user
from .state import poison_value

_WARNED: set = set()


def enabled(L, t: int) -> bool:
    """GPU load semantics for this launch and tensor (not through a pointer-table heap, which stays strict)."""
    return bool(getattr(L.bc, "gpu_loads", False)) and getattr(L.arrays[t], "dvm_segments", None) is None


def _note(L, b, t, pc, lo, hi, size) -> None:
    """Remember that this launch read poison (stores check for it) and warn once per kernel and line."""
    loc = L.loc_of_pc(pc)
    where = f"{loc.file}:{loc.line}" if loc is not None else f"pc {pc}"
    if getattr(L, "poison_from", None) is None:
        L.poison_from = where
    key = (L.name, where)
    if key in _WARNED:
        return
    _WARNED.add(key)
    name = L.bc.params[t].name
    warn_user(f"kernel `{L.name}` at {where}: a load read elements [{lo}, {hi}] of `{name}`, which has {size} "
              f"(valid 0..{size - 1}); the lanes outside it hold an undefined value (poison), as on a GPU. The "
              "kernel is correct only if no store writes them: a poisoned value that reaches a store or an address "
              "faults. triton.jit(strict_loads=True) makes the load itself a MemoryFault.")


def box_read(L, b, t: int, desc, shape, npdt, pad, pc) -> np.ndarray:
    """The tile a DMA load reads for every program of batch ``b``, element by element: lanes inside the box and
    the tensor read memory, lanes outside the box read ``pad``, lanes inside the box and outside the tensor read
    poison. Only called for a box that runs out of its tensor (the rare path)."""
    g = L.arrays[t]
    size = g.size
    n, r = b.n, len(shape)
    idx = np.broadcast_to(np.asarray(desc.base, dtype=np.int64), (n,)).reshape((n,) + (1,) * r)
    inbox = np.ones((n,) + (1,) * r, bool)
    for dim, s in enumerate(shape):
        i = np.arange(s, dtype=np.int64).reshape((1,) + tuple(s if e == dim else 1 for e in range(r)))
        col = (n,) + (1,) * r
        stride = np.broadcast_to(np.asarray(desc.strides[dim], dtype=np.int64), (n,)).reshape(col)
        lo = np.broadcast_to(np.asarray(desc.lo[dim], dtype=np.int64), (n,)).reshape(col)
        hi = np.broadcast_to(np.asarray(desc.hi[dim], dtype=np.int64), (n,)).reshape(col)
        idx = idx + stride * i
        inbox = inbox & (i >= lo) & (i < hi)
    idx, inbox = np.broadcast_arrays(idx, inbox)
    inrange = (idx >= 0) & (idx < size)
    out = np.where(inbox & inrange, g[np.where(inrange, idx, 0)], np.asarray(pad).astype(npdt, copy=False))
    bad = inbox & ~inrange
    out = np.where(bad, poison_value(npdt), out).astype(npdt, copy=False)
    if bad.any():
        lane = int(np.argmax(bad.reshape(n, -1).any(axis=1)))
        offs = idx[lane][bad[lane]]
        _note(L, b, t, pc, int(offs.min()), int(offs.max()), size)
    return out


def element_read(L, b, t: int, off, msk, pc):
    """(values, mask) of a gather whose kept lanes run out of the tensor: the out-of-range lanes read poison
    (the caller pads the lanes the mask drops)."""
    g = L.arrays[t]
    size = g.size
    inrange = (off >= 0) & (off < size)
    vals = g[np.where(inrange & msk, off, 0)]
    bad = msk & ~inrange
    if bad.any():
        flat = bad.reshape(b.n, -1)
        lane = int(np.argmax(flat.any(axis=1)))
        offs = off.reshape(b.n, -1)[lane][flat[lane]]
        _note(L, b, t, pc, int(offs.min()), int(offs.max()), size)
    return np.where(bad, poison_value(g.dtype), vals)


def scalar_read(L, b, t: int, idx, pc):
    """A scalar load out of range: poison (one value, or one per program)."""
    g = L.arrays[t]
    idx = np.asarray(idx)
    inrange = (idx >= 0) & (idx < g.size)
    v = np.where(inrange, g[np.where(inrange, idx, 0)], poison_value(g.dtype))
    bad = ~np.broadcast_to(inrange, (b.n,))
    if bad.any():
        at = int(np.broadcast_to(idx, (b.n,))[int(np.argmax(bad))])
        _note(L, b, t, pc, at, at, g.size)
    return v[()] if v.ndim == 0 else v


def check_store(L, b, t: int, values, pc, inside=None) -> None:
    """After this launch read poison: a ``MemoryFault`` when the floats a store writes hold the poison pattern
    (``inside``: the lanes it writes, when not all of ``values``)."""
    origin = getattr(L, "poison_from", None)
    if origin is None or values.dtype.kind != "f":
        return
    v = np.asarray(values)
    raw = v.view(np.dtype(f"u{v.dtype.itemsize}"))
    hit = raw == np.iinfo(raw.dtype).max
    if inside is not None:
        hit = hit & inside
    if not hit.any():
        return
    lane = int(np.argmax(hit.reshape(hit.shape[0], -1).any(axis=1))) if hit.ndim > 1 else 0
    name = L.bc.params[t].name
    loc = L.loc_of_pc(pc)
    pid = int(b.pids[min(lane, b.n - 1)])
    raise MemoryFault(f"kernel `{L.name}` stores an undefined value to `{name}`: program {pid} writes a value computed "
                      f"from a load that read outside its tensor at {origin} (poison); mask that load (mask=, other=) "
                      "or the store", kernel=L.name, tensor=name, loc=loc,
                      source=L.bc.debug.line_text(loc.file, loc.line) if loc is not None else None)
