"""The op vocabulary: every elementwise operation of kernels and tensor programs, declared once.

A row says what the operation is everywhere it appears:

* ``name``, ``arity`` and ``rule`` (the operand dtypes the instruction accepts: ``num``, ``float``, ``int``,
  ``intbool``); a ``float`` unary op computes integer operands in float32, as Triton and PyTorch do;
* ``ref``: the numpy semantics, which the device executes and the constant folder evaluates;
* ``cycles``: vector cycles per 256-byte repeat of its instruction;
* ``symbol`` and ``fold``: the Python spelling in kernels (and error messages) and the function that folds
  two Python numbers at compile time;
* ``dl``: the docstring of ``dl.<name>`` when the language has a function of that name;
* ``tensor``: the name of the ``dvmlang.ops`` function, and ``fuse``: the kernel source the fuser writes for
  the tensor op (``{}`` for each operand);
* ``traits``: ``division`` (Triton's div_or_mod promotion), ``bitwise``, ``compare``, ``int_identity``
  (the identity on integer operands).

Readers: ``vm/isa`` makes one scalar and one vector instruction per binary and unary row (opcodes in row
order, so new rows go at the end of their table); ``language`` defines the ``dl`` functions; the frontend's
``semantic`` folds, checks and promotes; ``dvmlang.ops`` defines the tensor functions; the fuser's graph,
fusion and code generator read ``tensor``/``fuse``. ``KINDS`` is the other vocabulary: the tile IR's op
kinds and their traits (``pure``, ``removable``), read by the IR verifier and passes.

Adding an elementwise op is one row here plus its tests (``docs/architecture.md``, "Add an op").
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from . import special


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int
    rule: str
    ref: object
    cycles: int = 1
    symbol: str = ""
    fold: object = None
    dl: str = ""
    tensor: str = ""
    fuse: str = ""
    traits: frozenset = frozenset()

    @property
    def float_only(self) -> bool:
        return self.rule == "float"

    @property
    def spelling(self) -> str:
        """How error messages name the op: its Python symbol, else its name."""
        return self.symbol or self.name


# ---- numpy semantics that numpy does not spell directly -------------------------------------------------

def _floordiv(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        with np.errstate(divide="ignore", invalid="ignore"):
            b0 = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, np.floor_divide(a, b0)).astype(np.result_type(a, b), copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor_divide(a, b)  # numpy's (and Python's, torch's): 1.0 // 0.1 is 9.0, inf // -100 is nan


def _div(a, b):
    """C's integer division: the quotient truncated toward zero (``-7 div 2 == -3``); ``x div 0`` is 0."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b0 = np.where(b == 0, 1, b)
        q = np.floor_divide(a, b0)
        q = q + ((np.fmod(a, b0) != 0) & ((a < 0) != (b0 < 0)))
        return np.where(b == 0, 0, q).astype(np.result_type(a, b), copy=False)


def _mod(a, b):
    """C's remainder, with the dividend's sign (``-7 mod 2 == -1``): ``fmod`` for floats; an integer ``x mod 0``
    is 0."""
    if np.issubdtype(np.result_type(a, b), np.integer):
        with np.errstate(divide="ignore", invalid="ignore"):
            b0 = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, np.fmod(a, b0)).astype(np.result_type(a, b), copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


def _shl(a, b):
    bits = np.dtype(np.result_type(a)).itemsize * 8
    return np.where((b >= 0) & (b < bits), np.left_shift(a, np.clip(b, 0, bits - 1)), 0).astype(np.result_type(a), copy=False)


def _shr(a, b):
    bits = np.dtype(np.result_type(a)).itemsize * 8
    return np.right_shift(a, np.clip(b, 0, bits - 1)).astype(np.result_type(a), copy=False)


def _zero_ordered(fn, lower: bool):
    """``fn`` (numpy's maximum/minimum/fmax/fmin) with -0.0 below +0.0: numpy returns either zero of a tie,
    depending on operand order and loop, so the batched and sequential paths could differ."""
    def op(a, b):
        r = fn(a, b)
        zeros = (a == 0) & (b == 0)
        if not np.any(zeros):
            return r
        signed = -(-a + -b) if lower else a + b  # a sum of zeros is -0.0 only when both are
        return np.where(zeros, signed, r).astype(r.dtype, copy=False)
    return op


def _pow(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return np.power(a, np.maximum(b, 0))
    return np.power(a, b)


def _umulhi(a, b):
    """The high half of the double-width product of two integers whose bits are read as unsigned."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.result_type(a, b)
    udt = np.dtype(f"u{dtype.itemsize}")
    ua, ub = a.astype(dtype, copy=False).view(udt), b.astype(dtype, copy=False).view(udt)
    if dtype.itemsize < 8:
        prod = ua.astype(np.uint64) * ub.astype(np.uint64)
        return (prod >> np.uint64(dtype.itemsize * 8)).astype(udt).view(dtype)
    lo32 = np.uint64(0xFFFFFFFF)
    k = np.uint64(32)
    a0, a1, b0, b1 = ua & lo32, ua >> k, ub & lo32, ub >> k
    cross0, cross1 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> k) + (cross0 & lo32) + (cross1 & lo32)
    return (a1 * b1 + (cross0 >> k) + (cross1 >> k) + (mid >> k)).view(dtype)


def _sigmoid(x):
    one = np.ones((), dtype=x.dtype)
    return one / (one + np.exp(-x))


def _rsqrt(x):
    one = np.ones((), dtype=x.dtype)
    return one / np.sqrt(x)


def _recip(x):
    one = np.ones((), dtype=x.dtype)
    return one / x


# up to this many elements, ``math.erf`` value by value costs less host time than the vectorised rational functions
# (their few dozen numpy calls cost the same for 1 element as for 2,000)
MATH_ERF_MAX = 1024


def _math_erf(x64: np.ndarray) -> np.ndarray:
    """``math.erf`` of each value of a float64 array (a NaN as it is, as ``special.erf`` gives it)."""
    out = np.fromiter(map(math.erf, x64.ravel().tolist()), np.float64, x64.size).reshape(x64.shape)
    return np.where(x64 != x64, x64, out)


def _erf(x):
    """erf computed in float64 and rounded to x's dtype: ``math.erf`` itself for float64 and for small arrays,
    vectorised (``special.erf``) for larger float32 and narrower ones, where it rounds to exactly ``math.erf``'s
    values (every float32, float16 and bfloat16 value: tests/test_opdefs.py), so the size never changes a bit."""
    x = np.asarray(x)
    x64 = x.astype(np.float64, copy=False)
    if x.dtype == np.float64 or x.size <= MATH_ERF_MAX:
        return _math_erf(x64).astype(x.dtype, copy=False)
    return special.erf(x64).astype(x.dtype)


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _erfc(x):
    """C's erfc (1 - erf(x) without the cancellation), computed in float64 and rounded to x's dtype."""
    x = np.asarray(x)
    return np.asarray(_ERFC(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _round_half_away(x):
    """C's ``round``: to the nearest integer, halfway cases away from zero (``rint`` rounds them to even)."""
    x = np.asarray(x)
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):
        away = np.abs(x - t) >= 0.5  # x - trunc(x) is exact; false for inf and nan, which stay as they are
    return np.where(away, t + np.copysign(np.ones((), x.dtype), x), t).astype(x.dtype, copy=False)


def _c_gamma(fn, pole):
    """A C gamma function (``lgamma``/``tgamma``) on float64, rounded to x's dtype: ``pole(v)`` is C's value
    where Python's math raises (a pole, or outside the domain); overflow is infinity."""
    def one(v):
        try:
            return fn(v)
        except ValueError:
            return pole(v)
        except OverflowError:
            return math.inf
    f = np.frompyfunc(one, 1, 1)

    def op(x):
        x = np.asarray(x)
        with np.errstate(over="ignore"):
            return np.asarray(f(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)
    return op


# lgamma has a pole (+inf) at 0 and the negative integers; tgamma is +-inf at +-0 and NaN at negative integers
# and at -inf
_lgamma = _c_gamma(math.lgamma, lambda v: math.inf)
_tgamma = _c_gamma(math.gamma, lambda v: math.copysign(math.inf, v) if v == 0 else math.nan)


def _fdim(a, b):
    """C's fdim: ``a - b`` when ``a > b``, else +0; NaN when either is."""
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(a > b, a - b, np.zeros((), np.result_type(a, b)))
        return np.where(np.isnan(a) | np.isnan(b), np.asarray(np.nan, d.dtype), d).astype(d.dtype, copy=False)


def _not(x):
    if x.dtype == np.bool_:
        return np.logical_not(x)
    return np.invert(x)


def _abs(x):
    if x.dtype == np.bool_:
        return x
    return np.abs(x)


def _neg(x):
    if x.dtype == np.bool_:
        return x
    return np.negative(x)


# ---- the rows ----------------------------------------------------------------------------------------------

def _infix(symbol: str) -> str:
    return "({} " + symbol + " {})"


_NAN_ALL = "dl.{}({{}}, {{}}, propagate_nan=dl.PropagateNan.ALL)"  # tensor ops propagate NaN (numpy, PyTorch)
_DIVISION, _BITWISE = frozenset({"division"}), frozenset({"bitwise"})

BINARY: dict[str, OpDef] = {op.name: op for op in (
    OpDef("add", 2, "num", np.add, 1, "+", operator.add, tensor="add", fuse=_infix("+")),
    OpDef("sub", 2, "num", np.subtract, 1, "-", operator.sub, tensor="sub", fuse=_infix("-")),
    OpDef("mul", 2, "num", np.multiply, 1, "*", operator.mul, tensor="mul", fuse=_infix("*")),
    OpDef("truediv", 2, "float", np.true_divide, 4, "/", operator.truediv, tensor="div", fuse=_infix("/"),
          traits=_DIVISION),
    OpDef("floordiv", 2, "num", _floordiv, 4, "//", operator.floordiv, traits=_DIVISION),
    OpDef("mod", 2, "num", _mod, 4, "%", operator.mod, traits=_DIVISION),
    OpDef("maximum", 2, "num", _zero_ordered(np.maximum, False), 1, "maximum", max, tensor="maximum",
          fuse=_NAN_ALL.format("maximum")),
    OpDef("minimum", 2, "num", _zero_ordered(np.minimum, True), 1, "minimum", min, tensor="minimum",
          fuse=_NAN_ALL.format("minimum")),
    OpDef("pow", 2, "num", _pow, 8, "**", operator.pow, tensor="pow", fuse=_infix("**")),
    OpDef("and", 2, "intbool", np.bitwise_and, 1, "&", operator.and_, tensor="bitwise_and", fuse=_infix("&"),
          traits=_BITWISE),
    OpDef("or", 2, "intbool", np.bitwise_or, 1, "|", operator.or_, tensor="bitwise_or", fuse=_infix("|"),
          traits=_BITWISE),
    OpDef("xor", 2, "intbool", np.bitwise_xor, 1, "^", operator.xor, tensor="bitwise_xor", fuse=_infix("^"),
          traits=_BITWISE),
    OpDef("shl", 2, "int", _shl, 1, "<<", operator.lshift, tensor="left_shift", fuse=_infix("<<"),
          traits=_BITWISE),
    OpDef("shr", 2, "int", _shr, 1, ">>", operator.rshift, tensor="right_shift", fuse=_infix(">>"),
          traits=_BITWISE),
    OpDef("umulhi", 2, "int", _umulhi, 2),
    OpDef("fmax", 2, "num", _zero_ordered(np.fmax, False), 1, "maximum", max),
    OpDef("fmin", 2, "num", _zero_ordered(np.fmin, True), 1, "minimum", min),
    OpDef("div", 2, "int", _div, 4),
    # C math of two floats (libdevice): the kernel functions are dvmlang.triton.language.extra.libdevice's
    OpDef("atan2", 2, "float", np.arctan2, 8, tensor="atan2", fuse="libdevice.atan2({}, {})"),
    OpDef("hypot", 2, "float", np.hypot, 4, tensor="hypot", fuse="libdevice.hypot({}, {})"),
    OpDef("copysign", 2, "float", np.copysign, 1, tensor="copysign", fuse="libdevice.copysign({}, {})"),
    OpDef("nextafter", 2, "float", np.nextafter, 1),
    OpDef("fdim", 2, "float", _fdim, 1),
)}

_CMP = frozenset({"compare"})
COMPARE: dict[str, OpDef] = {op.name: op for op in (
    OpDef(name, 2, "num", ref, 1, symbol, fold, tensor=name, fuse=_infix(symbol), traits=_CMP)
    for name, ref, symbol, fold in (
        ("lt", np.less, "<", operator.lt), ("le", np.less_equal, "<=", operator.le),
        ("gt", np.greater, ">", operator.gt), ("ge", np.greater_equal, ">=", operator.ge),
        ("eq", np.equal, "==", operator.eq), ("ne", np.not_equal, "!=", operator.ne)))}


def _math(name, ref, cycles, doc, rule="float", traits=frozenset()) -> OpDef:
    """A unary math function: ``dl.<name>`` in kernels, ``ops.<name>`` on tensors."""
    return OpDef(name, 1, rule, ref, cycles, dl=doc, tensor=name, fuse=f"dl.{name}({{}})", traits=traits)


_ROUNDING = frozenset({"int_identity"})
UNARY: dict[str, OpDef] = {op.name: op for op in (
    OpDef("neg", 1, "num", _neg, 1, "-", operator.neg, tensor="neg", fuse="(-{})"),
    OpDef("not", 1, "intbool", _not, 1, tensor="bitwise_not", fuse="(~{})"),
    _math("abs", _abs, 1, "Absolute value.", rule="num"),
    _math("exp", np.exp, 4, "e ** x, elementwise."),
    _math("exp2", np.exp2, 4, "2 ** x, elementwise."),
    _math("log", np.log, 4, "Natural logarithm."),
    _math("log2", np.log2, 4, "Base-2 logarithm."),
    _math("sqrt", np.sqrt, 2, "Square root."),
    _math("rsqrt", _rsqrt, 2, "1 / sqrt(x)."),
    _math("sin", np.sin, 8, "Sine."),
    _math("cos", np.cos, 8, "Cosine."),
    _math("tanh", np.tanh, 8, "Hyperbolic tangent."),
    _math("sigmoid", _sigmoid, 8, "1 / (1 + exp(-x))."),
    _math("erf", _erf, 8, "The error function."),
    _math("floor", np.floor, 1, "Round down.", traits=_ROUNDING),
    _math("ceil", np.ceil, 1, "Round up.", traits=_ROUNDING),
    OpDef("recip", 1, "float", _recip, 2, fuse="(1.0 / {})"),
    _math("log1p", np.log1p, 4, "log(1 + x), accurate for x near 0."),
    _math("tan", np.tan, 8, "Tangent."),
    _math("asin", np.arcsin, 8, "Inverse sine (NaN outside [-1, 1])."),
    _math("acos", np.arccos, 8, "Inverse cosine (NaN outside [-1, 1])."),
    _math("atan", np.arctan, 8, "Inverse tangent."),
    _math("sinh", np.sinh, 8, "Hyperbolic sine."),
    _math("cosh", np.cosh, 8, "Hyperbolic cosine."),
    _math("asinh", np.arcsinh, 8, "Inverse hyperbolic sine."),
    _math("acosh", np.arccosh, 8, "Inverse hyperbolic cosine (NaN below 1)."),
    _math("atanh", np.arctanh, 8, "Inverse hyperbolic tangent (NaN outside [-1, 1])."),
    _math("expm1", np.expm1, 4, "exp(x) - 1, accurate for x near 0."),
    _math("log10", np.log10, 4, "Base-10 logarithm."),
    _math("cbrt", np.cbrt, 8, "Cube root (negative for negative x)."),
    _math("erfc", _erfc, 8, "The complementary error function, 1 - erf(x), accurate for large x."),
    _math("trunc", np.trunc, 1, "Round toward zero.", traits=_ROUNDING),
    _math("rint", np.rint, 1, "Round to the nearest integer, halfway cases to even (C's rint).", traits=_ROUNDING),
    _math("round", _round_half_away, 1, "Round to the nearest integer, halfway cases away from zero (C's round).",
          traits=_ROUNDING),
    _math("lgamma", _lgamma, 8, "log |gamma(x)| (C's lgamma; +inf at the poles 0, -1, -2, ...)."),
    _math("tgamma", _tgamma, 8, "The gamma function (C's tgamma; NaN at the negative integers)."),
)}

ELEMENTWISE: dict[str, OpDef] = {**BINARY, **COMPARE, **UNARY}
FUSIBLE = frozenset(name for name, op in ELEMENTWISE.items() if op.fuse)  # the fuser's elementwise graph ops
FLOAT_UNARY = frozenset(name for name, op in UNARY.items() if op.float_only)

# ---- tile IR op kinds ----------------------------------------------------------------------------------------
# pure: no effect, so equal ops may be merged (CSE) and unused ones dropped; removable: may be dropped when
# its results are unused (pure ops, and reads, which have no effect); the rest are kept where they are.
_PURE = frozenset({"pure", "removable"})
_READ = frozenset({"removable"})
KINDS: dict[str, frozenset] = {
    **dict.fromkeys(("const", "program_id", "num_programs", "arange", "full", "tensor_dim", "tensor_stride",
                     "binary", "compare", "unary", "select", "cast", "fma", "broadcast", "reshape", "permute",
                     "cat", "slice", "reduce", "scan", "take", "sort", "histogram"), _PURE),
    **dict.fromkeys(("load", "dma_load", "gather", "to_scalar", "dot"), _READ),
    **dict.fromkeys(("store", "dma_store", "scatter", "atomic", "print", "assert", "for", "while", "if", "scope",
                     "yield", "break", "continue", "return", "remote_store", "signal", "wait_signal"), frozenset()),
}


def kinds_with(trait: str) -> frozenset:
    return frozenset(k for k, traits in KINDS.items() if trait in traits)
