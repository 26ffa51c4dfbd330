"""Compile-time checks and debugging in the kernel language (``static_assert``, ``static_print``,
``device_print``, ``device_assert``), and the hints Triton kernels give that dvmlang accepts and does not need.
"""

from __future__ import annotations

from ..frontend.values import unwrap
from .core import builtin, int32

@builtin
def static_assert(cond, msg="", _sem=None):
    """Fail compilation when a compile-time condition is false."""
    return _sem.codegen.static_assert(cond, msg)


@builtin
def static_print(*values, _sem=None):
    """Print compile-time values once, while the kernel is built."""
    return _sem.codegen.static_print(values)


@builtin
def device_print(prefix, *values, hex=False, _sem=None):
    """Print runtime values once per program, prefixed with the program id, in program order."""
    return _sem.codegen.device_print(prefix, values, bool(unwrap(hex)))


@builtin
def device_assert(cond, msg="", mask=None, _sem=None):
    """Stop the launch with ``DeviceError`` (naming the program and this line) where ``cond`` is false;
    a tile condition must hold for every element (where ``mask`` is true)."""
    c = _sem.to_tensor(cond)
    c = _sem.truth(c)
    if mask is not None:
        c = _sem.binary("or", c, _sem.unary("not", _sem.truth(mask)))
    if c.is_tile:
        c = _sem.reduce(_sem.cast(c, int32), "min", None)
        c = _sem.compare("ne", _sem.as_scalar(c), 0)
    _sem.b.op("assert", [c.handle], [], {"message": str(unwrap(msg)) or "device assertion failed"})
    return None


@builtin
def multiple_of(x, values, _sem=None):
    """A hint (accepted for Triton compatibility; the analysis does not need it)."""
    return x


@builtin
def max_contiguous(x, values, _sem=None):
    """A hint (accepted for Triton compatibility)."""
    return x


@builtin
def max_constancy(x, values, _sem=None):
    """A hint (accepted for Triton compatibility)."""
    return x


@builtin
def assume(cond, _sem=None):
    """A hint that ``cond`` holds (accepted for Triton compatibility; nothing is checked or assumed)."""
    return None


@builtin
def debug_barrier(_sem=None):
    """Accepted for Triton compatibility: programs of dvmlang synchronise through pipe events."""
    return None


__all__ = ["static_assert", "static_print", "device_print", "device_assert", "multiple_of", "max_contiguous",
           "max_constancy", "assume", "debug_barrier"]
