"""Memory operations of the kernel language: ``load``/``store`` through pointers and block pointers, atomics,
block pointers and tensor descriptors, and the tile-indexed ``load_tile``/``store_tile``.
"""

from __future__ import annotations

from ..frontend import blockptr
from ..frontend.values import block_pointer, unwrap
from ..errors import KernelTypeError
from .core import builtin

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, _sem=None):
    """Load the elements a pointer (tile) addresses. Masked-off elements read ``other`` (0 by default)
    and are never touched, so they cannot fault."""
    ptr = unwrap(pointer)
    if isinstance(ptr, block_pointer):
        return blockptr.load_block(_sem, ptr, boundary_check, padding_option)
    return _sem.load(ptr, mask, other)


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="", _sem=None):
    """Store ``value`` (broadcast to the pointer's shape, cast to its dtype) where ``mask`` holds."""
    ptr = unwrap(pointer)
    if isinstance(ptr, block_pointer):
        return blockptr.store_block(_sem, ptr, value, boundary_check)
    return _sem.store(ptr, value, mask)


def _atomic(name, doc):
    def fn(pointer, val, mask=None, sem=None, scope=None, _sem=None):
        return _sem.atomic(name, pointer, val, mask)
    fn.__name__ = f"atomic_{name}"
    fn.__qualname__ = fn.__name__
    fn.__doc__ = doc
    return builtin(fn)


atomic_add = _atomic("add", "Atomically add ``val`` in global memory; returns the old values.")
atomic_max = _atomic("max", "Atomic maximum; returns the old values.")
atomic_min = _atomic("min", "Atomic minimum; returns the old values.")
atomic_xchg = _atomic("xchg", "Atomic exchange; returns the old values.")
atomic_and = _atomic("and", "Atomic bitwise and; returns the old values.")
atomic_or = _atomic("or", "Atomic bitwise or; returns the old values.")
atomic_xor = _atomic("xor", "Atomic bitwise xor; returns the old values.")


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None, _sem=None):
    """Where the current value equals ``cmp``, write ``val``; returns the old values."""
    return _sem.atomic("cas", pointer, val, None, cmp)


@builtin
def atomic_poll(pointer, value, sem=None, scope=None, timeout_ns=None, _sem=None):
    """Triton's ``atomic_poll``: wait until the scalar at ``pointer`` equals ``value``; returns whether it did.
    On the simulated device nothing can change memory while a program waits (the other programs of a launch run
    in program order, not beside it), so the flag is read once, atomically: a match returns True; a mismatch
    returns False when ``timeout_ns`` is given (the wait timed out) and otherwise stops the launch with
    ``DeviceError`` (on a GPU it would wait forever, or until another program stored ``value``)."""
    ptr = unwrap(pointer)
    if getattr(ptr, "is_tile", False):
        raise KernelTypeError("atomic_poll needs a scalar pointer, got a pointer tile",
                              hint="poll one flag: pass flag_ptr, not flag_ptr + dl.arange(...)")
    old = _sem.atomic("cas", ptr, value, None, value)  # an atomic read: writes `value` only where it is there
    matched = _sem.compare("eq", old, _sem.cast(value, old.dtype))
    if unwrap(timeout_ns) is None:
        _sem.b.op("assert", [matched.handle], [], {"message": "atomic_poll: the flag does not hold the value "
                                                              "polled for, and nothing can store it while this "
                                                              "program waits; pass timeout_ns to get False instead"})
    return matched


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order=None, _sem=None):
    """A block pointer: a ``block_shape`` window at ``offsets`` into a tensor of runtime ``shape`` and
    ``strides`` (in elements). Load it with ``dl.load(bp, boundary_check=(0, 1), padding_option="zero")``."""
    return blockptr.make_block_ptr(_sem, base, shape, strides, offsets, block_shape, order)


@builtin
def advance(base, offsets, _sem=None):
    """A block pointer moved by ``offsets`` elements along each dimension."""
    return blockptr.advance(_sem, base, offsets)


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero", _sem=None):
    """Triton's tensor descriptor: ``desc.load([i, j])`` / ``desc.store([i, j], v)`` with bounds handled
    (out-of-range elements read as 0, or NaN with ``padding_option="nan"``; stores to them are dropped)."""
    return blockptr.make_tensor_descriptor(_sem, base, shape, strides, block_shape, padding_option)


@builtin
def load_tile(x, index, shape, padding=0, _sem=None):
    """Tile number ``index`` (in units of ``shape``) of array parameter ``x``, padded past the edges:
    ``dl.load_tile(x, index=(i, j), shape=(BM, BN))``. No masks: it maps 1:1 onto a DMA descriptor."""
    return blockptr.load_tile(_sem, x, index, shape, padding)


@builtin
def store_tile(x, index, value, _sem=None):
    """Store ``value`` as tile number ``index`` of array parameter ``x``; elements past the edges are
    dropped."""
    return blockptr.store_tile(_sem, x, index, value)


__all__ = ["load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_and", "atomic_or",
           "atomic_xor", "atomic_cas", "atomic_poll", "make_block_ptr", "advance", "make_tensor_descriptor", "load_tile", "store_tile"]
