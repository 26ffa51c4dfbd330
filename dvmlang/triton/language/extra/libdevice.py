"""``triton.language.extra.libdevice``: the libdevice math functions the simulated NPU computes, with C's
semantics (each is checked against numpy in tests/test_triton_namespace.py).

The unary functions are the ``dl`` math functions of the op vocabulary (``dvmlang.opdefs.UNARY``), under their
libdevice names as well (``fabs``, ``nearbyint``, ...). The binary ones (``atan2``, ``hypot``, ``copysign``,
``nextafter``, ``fdim``, ``fmod``) take floating-point operands. ``isnan``, ``isinf``, ``isfinited``/``finitef`` and
``signbit`` return int32 0 or 1, as libdevice's ``__nv_isnanf`` and friends do.
"""

from __future__ import annotations

from .... import dtypes as _dt
from ....errors import KernelTypeError
from ....language import elementwise as _ew
from ....language.core import builtin

_LIBDEVICE_UNARY = ("abs", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "cbrt", "sin",
                    "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
                    "erfc", "lgamma", "tgamma", "floor", "ceil", "trunc", "rint", "round")
globals().update({name: _ew.MATH[name] for name in _LIBDEVICE_UNARY})

fabs = _ew.MATH["abs"]
nearbyint = _ew.MATH["rint"]  # rounds to nearest even in the default rounding mode, as rint
fast_expf, fast_logf = _ew.MATH["exp"], _ew.MATH["log"]
pow, fma, umulhi, sqrt_rn, div_rn = _ew.pow, _ew.fma, _ew.umulhi, _ew.sqrt_rn, _ew.div_rn  # noqa: A001
fast_dividef = _ew.fdiv


def _float(x, what, _sem):
    x = _sem.to_tensor(x)
    if not x.dtype.is_float:
        raise KernelTypeError(f"libdevice.{what} needs a floating-point operand, got {x.dtype}",
                              hint="cast with .to(tl.float32)")
    return x


def _binary(name, doc, what=None):
    def fn(x, y, _sem=None):
        return _sem.float_binary(name, x, y, what or name)
    fn.__name__ = fn.__qualname__ = what or name
    fn.__doc__ = doc
    return builtin(fn)


atan2 = _binary("atan2", "atan(y / x) in the right quadrant: ``atan2(y, x)`` (C's atan2).")
hypot = _binary("hypot", "sqrt(x * x + y * y) without overflow (C's hypot).")
copysign = _binary("copysign", "|x| with the sign of y (C's copysign).")
nextafter = _binary("nextafter", "The next representable value after x toward y (C's nextafter).")
fdim = _binary("fdim", "x - y when x > y, else +0; NaN when either is (C's fdim).")
fmod = _binary("mod", "The remainder of x / y with the sign of x (C's fmod).", "fmod")


@builtin
def fmax(x, y, _sem=None):
    """The larger operand; a NaN operand gives the other one (C's fmax)."""
    return _sem.binary("fmax", x, y)


@builtin
def fmin(x, y, _sem=None):
    """The smaller operand; a NaN operand gives the other one (C's fmin)."""
    return _sem.binary("fmin", x, y)


def _int32(cond, _sem):
    return _sem.cast(cond, _dt.int32)


@builtin
def isnan(x, _sem=None):
    """1 where x is NaN, else 0 (int32)."""
    x = _float(x, "isnan", _sem)
    return _int32(_sem.compare("ne", x, x), _sem)


@builtin
def isinf(x, _sem=None):
    """1 where x is +inf or -inf, else 0 (int32)."""
    x = _float(x, "isinf", _sem)
    return _int32(_sem.compare("eq", _sem.unary("abs", x), float("inf")), _sem)


@builtin
def isfinited(x, _sem=None):
    """1 where x is neither infinite nor NaN, else 0 (int32)."""
    x = _float(x, "isfinited", _sem)
    return _int32(_sem.compare("lt", _sem.unary("abs", x), float("inf")), _sem)


finitef = isfinited

_SAME_WIDTH_INT = {2: _dt.int16, 4: _dt.int32, 8: _dt.int64, 1: _dt.int8}


@builtin
def signbit(x, _sem=None):
    """1 where x's sign bit is set (including -0.0 and negative NaNs), else 0 (int32)."""
    x = _float(x, "signbit", _sem)
    bits = _sem.cast(x, _SAME_WIDTH_INT[x.dtype.itemsize], bitcast=True)
    return _int32(_sem.compare("lt", bits, 0), _sem)


__all__ = [*_LIBDEVICE_UNARY, "fabs", "nearbyint", "fast_expf", "fast_logf", "fast_dividef", "pow", "fma", "umulhi",
           "sqrt_rn", "div_rn", "atan2", "hypot", "copysign", "nextafter", "fdim", "fmod", "fmax", "fmin", "isnan",
           "isinf", "isfinited", "finitef", "signbit"]
