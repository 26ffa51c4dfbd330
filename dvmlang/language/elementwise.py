"""Elementwise math of the kernel language: one function per unary row of the op vocabulary
(``dvmlang.opdefs.UNARY``: ``dl.exp``, ``dl.erf``, ...), the arithmetic spellings Triton has as functions
(``add``, ``fdiv``, ``umulhi``, ``fma``, ``pow``, ...), ``maximum``/``minimum``/``clamp`` with their NaN policy,
``where``, and the logical operations.
"""

from __future__ import annotations

import enum

from .. import opdefs
from ..errors import KernelTypeError
from ..frontend.values import unwrap
from .core import builtin

def _unary(op: opdefs.OpDef):
    def fn(x, _sem=None):
        return _sem.unary(op.name, x)
    fn.__name__ = op.name
    fn.__qualname__ = op.name
    fn.__doc__ = op.dl
    return builtin(fn)


# dl.exp, dl.erf, ...: one function per unary row of the op vocabulary that names a dl function
MATH = {name: _unary(op) for name, op in opdefs.UNARY.items() if op.dl}
globals().update(MATH)


@builtin
def add(x, y, sanitize_overflow=True, _sem=None):
    """x + y. Integer overflow wraps, so ``sanitize_overflow`` (Triton's overflow check) is accepted and has
    nothing to check."""
    return _sem.binary("add", x, y)


@builtin
def sub(x, y, sanitize_overflow=True, _sem=None):
    """x - y (integer overflow wraps)."""
    return _sem.binary("sub", x, y)


@builtin
def mul(x, y, sanitize_overflow=True, _sem=None):
    """x * y (integer overflow wraps)."""
    return _sem.binary("mul", x, y)


@builtin
def fdiv(x, y, ieee_rounding=False, _sem=None):
    """x / y on floating-point operands, correctly rounded (so ``ieee_rounding`` changes nothing)."""
    return _sem.float_binary("truediv", x, y, "fdiv")


@builtin
def div_rn(x, y, _sem=None):
    """x / y on floating-point operands, rounded to nearest."""
    return _sem.float_binary("truediv", x, y, "div_rn")


@builtin
def sqrt_rn(x, _sem=None):
    """Square root of a floating-point operand, rounded to nearest (``dl.sqrt`` rounds the same way)."""
    x = _sem.to_tensor(x)
    if not x.dtype.is_float:
        raise KernelTypeError(f"dl.sqrt_rn needs a floating-point operand, got {x.dtype}",
                              hint="cast with .to(dl.float32), or use dl.sqrt, which converts integers itself")
    return _sem.unary("sqrt", x)


@builtin
def umulhi(x, y, _sem=None):
    """The most significant half of the double-width product of two 32- or 64-bit integers (their bits
    read as unsigned); the result has the operands' dtype."""
    return _sem.umulhi(x, y)


@builtin
def fma(a, b, c, _sem=None):
    """a * b + c."""
    return _sem.fma(a, b, c)


class PropagateNan(enum.Enum):
    """``propagate_nan=`` of ``maximum``, ``minimum`` and ``clamp``: with ``ALL`` (dvmlang's default) a NaN
    operand gives NaN; with ``NONE`` the other operand is returned (NaN only when both are NaN)."""

    NONE = 0
    ALL = 0xFFFF



def nan_op(opname, propagate_nan):
    p = unwrap(propagate_nan)
    if p is PropagateNan.ALL:
        return opname
    if p is PropagateNan.NONE:
        return {"maximum": "fmax", "minimum": "fmin"}[opname]
    raise KernelTypeError(f"propagate_nan must be dl.PropagateNan.NONE or dl.PropagateNan.ALL, got {p!r}",
                          hint="dl.PropagateNan.NONE (the default, as in Triton) returns the other operand; ALL "
                               "propagates NaN")


@builtin
def maximum(a, b, propagate_nan=PropagateNan.NONE, _sem=None):
    """Elementwise maximum; a NaN operand gives the other one (Triton's default), or NaN with
    ``propagate_nan=dl.PropagateNan.ALL``."""
    return _sem.binary(nan_op("maximum", propagate_nan), a, b)


@builtin
def minimum(a, b, propagate_nan=PropagateNan.NONE, _sem=None):
    """Elementwise minimum; a NaN operand gives the other one (Triton's default), or NaN with
    ``propagate_nan=dl.PropagateNan.ALL``."""
    return _sem.binary(nan_op("minimum", propagate_nan), a, b)


@builtin
def clamp(x, min=None, max=None, propagate_nan=PropagateNan.NONE, lo=None, hi=None, _sem=None):  # noqa: A002
    """``minimum(maximum(x, min), max)``; the bounds may also be given as ``lo`` and ``hi``."""
    bounds = []
    for name, alias, v, w in (("min", "lo", min, lo), ("max", "hi", max, hi)):
        if (v is None) == (w is None):
            raise KernelTypeError(f"dl.clamp needs its `{name}` bound exactly once (as `{name}=` or `{alias}=`)",
                                  hint="dl.clamp(x, lo, hi) or dl.clamp(x, min=lo, max=hi)")
        bounds.append(v if v is not None else w)
    lo_op, hi_op = nan_op("maximum", propagate_nan), nan_op("minimum", propagate_nan)
    return _sem.binary(hi_op, _sem.binary(lo_op, x, bounds[0]), bounds[1])


@builtin
def where(condition, x, y, _sem=None):
    """``x`` where ``condition`` holds, else ``y``."""
    return _sem.where(condition, x, y)


@builtin
def pow(x, y, _sem=None):  # noqa: A001
    """x ** y, elementwise."""
    return _sem.binary("pow", x, y)


@builtin
def logical_and(x, y, _sem=None):
    """Elementwise ``x and y`` on truth values (``!= 0``), as an int1 tile; also ``x.logical_and(y)``."""
    return _sem.logical("and", x, y)


@builtin
def logical_or(x, y, _sem=None):
    """Elementwise ``x or y`` on truth values (``!= 0``), as an int1 tile; also ``x.logical_or(y)``."""
    return _sem.logical("or", x, y)


__all__ = [*MATH, "add", "sub", "mul", "fdiv", "div_rn", "sqrt_rn", "umulhi", "fma", "PropagateNan", "maximum",
           "minimum", "clamp", "where", "pow", "logical_and", "logical_or"]
