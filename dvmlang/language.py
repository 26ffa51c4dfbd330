"""The kernel language: ``import dvmlang.language as dl``.

Every function here is usable inside a ``@dvmlang.kernel``; ``cdiv`` and ``next_power_of_2`` also work
on the host. Inside a kernel the compiler passes each call a ``_sem`` argument (the typed IR builder);
called anywhere else, a kernel-only function raises ``DvmError`` saying so.
"""

from __future__ import annotations

import builtins as _builtins
import enum as _enum
import functools
import sys as _sys
import types as _types

from . import dtypes as _dt
from . import opdefs as _opdefs
from .errors import ConstexprError, DvmError, KernelTypeError
from .frontend.values import block_pointer, constexpr, is_runtime, pointer, tensor, unwrap

# ---- dtypes ----------------------------------------------------------------------------------------------
int1 = bool_ = _dt.bool_
int8, uint8, int16, uint16 = _dt.int8, _dt.uint8, _dt.int16, _dt.uint16
int32, uint32, int64, uint64 = _dt.int32, _dt.uint32, _dt.int64, _dt.uint64
float16, bfloat16, float32, float64 = _dt.float16, _dt.bfloat16, _dt.float32, _dt.float64
float8e4nv, float8e5 = _dt.float8e4nv, _dt.float8e5
dtype = _dt.DType

__all__ = ["constexpr", "tensor", "pointer", "block_pointer", "dtype"]


def builtin(fn):
    """Mark ``fn`` as a kernel-language function; the compiler calls it with ``_sem=``."""

    @functools.wraps(fn)
    def wrapper(*args, _sem=None, **kwargs):
        if _sem is None:
            raise DvmError(f"dl.{fn.__name__}() can only be used inside a @dvmlang.kernel function")
        return fn(*args, _sem=_sem, **kwargs)

    wrapper.__dvm_builtin__ = True
    __all__.append(fn.__name__)
    return wrapper


def _bool_const(v, what):
    v = unwrap(v)
    if is_runtime(v):
        raise ConstexprError(f"{what} must be a compile-time value, got a runtime {type(v).__name__}",
                             hint="pass True or False, or a dl.constexpr parameter")
    return bool(v)


def _int_const(v, what):
    v = unwrap(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConstexprError(f"{what} must be a compile-time integer, got {v!r}")
    return v


# ---- host-and-kernel helpers -----------------------------------------------------------------------------

def cdiv(a, b, _sem=None):
    """Ceiling division ``(a + b - 1) // b`` for non-negative integers; works on the host too."""
    a, b = unwrap(a), unwrap(b)
    if _sem is None or (not isinstance(a, tensor) and not isinstance(b, tensor)):
        if not isinstance(a, int) or not isinstance(b, int):
            raise DvmError(f"cdiv expects integers, got {type(a).__name__} and {type(b).__name__}")
        return -(-a // b)
    return _sem.binary("floordiv", _sem.binary("sub", _sem.binary("add", a, b), 1), b)


cdiv.__dvm_builtin__ = True


def next_power_of_2(n, _sem=None):
    """The smallest power of two >= n (a compile-time integer); works on the host too."""
    n = unwrap(n)
    if not isinstance(n, int) or n < 0:
        raise DvmError(f"next_power_of_2 expects a non-negative integer, got {n!r}")
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


next_power_of_2.__dvm_builtin__ = True


# ---- program ---------------------------------------------------------------------------------------------

@builtin
def program_id(axis=0, _sem=None):
    """The index of this program along grid ``axis`` (0, 1 or 2)."""
    axis = _int_const(axis, "program_id axis")
    if axis not in (0, 1, 2):
        raise KernelTypeError(f"program_id axis must be 0, 1 or 2, got {axis}")
    return tensor(_sem.b.program_id(axis))


@builtin
def num_programs(axis=0, _sem=None):
    """The grid size along ``axis``."""
    axis = _int_const(axis, "num_programs axis")
    if axis not in (0, 1, 2):
        raise KernelTypeError(f"num_programs axis must be 0, 1 or 2, got {axis}")
    return tensor(_sem.b.num_programs(axis))


# ---- creation --------------------------------------------------------------------------------------------

@builtin
def arange(start, end, _sem=None):
    """The int32 tile ``[start, start+1, ..., end-1]`` (compile-time bounds; any length)."""
    return _sem.arange(start, end)


@builtin
def full(shape, value, dtype=None, _sem=None):
    """A tile of ``shape`` filled with ``value``."""
    return _sem.full(shape, value, dtype)


@builtin
def zeros(shape, dtype=float32, _sem=None):
    """A tile of zeros."""
    return _sem.full(shape, 0, dtype)


@builtin
def zeros_like(x, _sem=None):
    """Zeros with the shape and dtype of ``x``."""
    x = _sem.to_tensor(x)
    return _sem.full(x.shape, 0, x.dtype) if x.is_tile else _sem.cast(0, x.dtype)


@builtin
def full_like(x, value, _sem=None):
    """``value`` with the shape and dtype of ``x``."""
    x = _sem.to_tensor(x)
    return _sem.full(x.shape, value, x.dtype) if x.is_tile else _sem.cast(value, x.dtype)


@builtin
def cast(x, dtype, fp_downcast_rounding=None, bitcast=False, _sem=None):
    """Convert ``x`` to ``dtype`` (``bitcast=True`` reinterprets the bits). A float converted to a narrower
    float rounds to nearest even, or toward zero with ``fp_downcast_rounding="rtz"``."""
    return _sem.cast(x, dtype, _bool_const(bitcast, "bitcast"), fp_downcast_rounding)


# ---- shape -----------------------------------------------------------------------------------------------

def _shape_args(shape):
    """``f(x, (2, 3))`` and ``f(x, 2, 3)`` both work, as in Triton."""
    if len(shape) == 1 and isinstance(unwrap(shape[0]), (tuple, list)):
        return tuple(unwrap(shape[0]))
    return tuple(shape)


@builtin
def reshape(x, *shape, can_reorder=False, _sem=None):
    """The same elements in a new shape (row-major): ``dl.reshape(x, (2, 3))`` or ``x.reshape(2, 3)``."""
    return _sem.reshape(x, _shape_args(shape))


view = reshape


@builtin
def broadcast_to(x, *shape, _sem=None):
    """``x`` broadcast to ``shape`` (numpy rules); the shape may also be given as separate sizes."""
    return _sem.broadcast_to(x, _shape_args(shape))


@builtin
def broadcast(a, b, _sem=None):
    """Both operands broadcast to their common shape."""
    a, b = _sem.pair(a, b)
    from .ir.builder import broadcast_shapes
    s = broadcast_shapes(a.shape, b.shape)
    if s is None:
        raise KernelTypeError(f"shapes {a.shape} and {b.shape} do not broadcast")
    return _sem.broadcast_to(a, s), _sem.broadcast_to(b, s)


@builtin
def expand_dims(x, axis, _sem=None):
    """Insert a unit dimension at ``axis`` (same as ``x[:, None]`` for axis 1)."""
    return _sem.expand_dims(x, axis)


@builtin
def trans(x, *dims, _sem=None):
    """Transpose: swap the last two dims, or permute by ``dims``."""
    if len(dims) == 1 and isinstance(unwrap(dims[0]), (tuple, list)):
        dims = tuple(unwrap(dims[0]))
    return _sem.trans(x, dims or None)


@builtin
def permute(x, *dims, _sem=None):
    """Reorder dimensions."""
    if len(dims) == 1 and isinstance(unwrap(dims[0]), (tuple, list)):
        dims = tuple(unwrap(dims[0]))
    return _sem.permute(x, dims)


@builtin
def cat(a, b, dim=0, can_reorder=False, _sem=None):
    """Concatenate two tiles along ``dim``."""
    return _sem.cat(a, b, dim)


@builtin
def join(a, b, _sem=None):
    """Stack two tiles along a new last dimension."""
    return _sem.join(a, b)


# ---- math ------------------------------------------------------------------------------------------------

def _unary(op: _opdefs.OpDef):
    def fn(x, _sem=None):
        return _sem.unary(op.name, x)
    fn.__name__ = op.name
    fn.__qualname__ = op.name
    fn.__doc__ = op.dl
    return builtin(fn)


# dl.exp, dl.erf, ...: one function per unary row of the op vocabulary that names a dl function
_MATH = {name: _unary(op) for name, op in _opdefs.UNARY.items() if op.dl}
globals().update(_MATH)


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


class PropagateNan(_enum.Enum):
    """``propagate_nan=`` of ``maximum``, ``minimum`` and ``clamp``: with ``ALL`` (dvmlang's default) a NaN
    operand gives NaN; with ``NONE`` the other operand is returned (NaN only when both are NaN)."""

    NONE = 0
    ALL = 0xFFFF


__all__.append("PropagateNan")


def _nan_op(opname, propagate_nan):
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
    return _sem.binary(_nan_op("maximum", propagate_nan), a, b)


@builtin
def minimum(a, b, propagate_nan=PropagateNan.NONE, _sem=None):
    """Elementwise minimum; a NaN operand gives the other one (Triton's default), or NaN with
    ``propagate_nan=dl.PropagateNan.ALL``."""
    return _sem.binary(_nan_op("minimum", propagate_nan), a, b)


@builtin
def clamp(x, min=None, max=None, propagate_nan=PropagateNan.NONE, lo=None, hi=None, _sem=None):  # noqa: A002
    """``minimum(maximum(x, min), max)``; the bounds may also be given as ``lo`` and ``hi``."""
    bounds = []
    for name, alias, v, w in (("min", "lo", min, lo), ("max", "hi", max, hi)):
        if (v is None) == (w is None):
            raise KernelTypeError(f"dl.clamp needs its `{name}` bound exactly once (as `{name}=` or `{alias}=`)",
                                  hint="dl.clamp(x, lo, hi) or dl.clamp(x, min=lo, max=hi)")
        bounds.append(v if v is not None else w)
    lo_op, hi_op = _nan_op("maximum", propagate_nan), _nan_op("minimum", propagate_nan)
    return _sem.binary(hi_op, _sem.binary(lo_op, x, bounds[0]), bounds[1])


@builtin
def where(condition, x, y, _sem=None):
    """``x`` where ``condition`` holds, else ``y``."""
    return _sem.where(condition, x, y)


# ---- reductions and scans --------------------------------------------------------------------------------

def _reduction(name, doc):
    def fn(input, axis=None, keep_dims=False, dtype=None, _sem=None):
        return _sem.reduce(input, name, axis, keep_dims, dtype)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


sum = _reduction("sum", "Sum along ``axis`` (all elements when None). Small ints sum in int32; fp16/bf16 accumulate in fp32.")
prod = _reduction("prod", "Product along ``axis``.")
xor_sum = _reduction("xor_sum", "Bitwise xor along ``axis`` (integers and booleans).")


@builtin
def reduce_or(input, axis=None, keep_dims=False, _sem=None):
    """Bitwise or along ``axis`` (integers and booleans; on booleans, "any")."""
    return _sem.reduce(input, "or", axis, keep_dims)


def _max_min(name, doc):
    def fn(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False,
           propagate_nan=PropagateNan.NONE, _sem=None):
        _bool_const(return_indices_tie_break_left, "return_indices_tie_break_left")
        nan = _nan_op("maximum", propagate_nan) == "maximum"  # ALL: a NaN in the input gives NaN
        if nan and _bool_const(return_indices, "return_indices"):
            raise KernelTypeError(f"dl.{name}(..., propagate_nan=dl.PropagateNan.ALL) returns no indices",
                                  hint=f"call dl.arg{name} for the indices (it ignores NaN, as in Triton)")
        value = _sem.reduce(input, name + "_nan" if nan else name, axis, keep_dims)
        if _bool_const(return_indices, "return_indices"):
            return value, _sem.reduce(input, "arg" + name, axis, keep_dims)
        return value
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


max = _max_min("max", "Maximum along ``axis``, ignoring NaN as Triton does (NaN only if every value is NaN; "
                      "``propagate_nan=dl.PropagateNan.ALL``: NaN if any value is); with ``return_indices=True`` the "
                      "pair (maximum, index of its first occurrence).")
min = _max_min("min", "Minimum along ``axis``, ignoring NaN as Triton does (NaN only if every value is NaN; "
                      "``propagate_nan=dl.PropagateNan.ALL``: NaN if any value is); with ``return_indices=True`` the "
                      "pair (minimum, index of its first occurrence).")


@builtin
def argmax(input, axis=None, tie_break_left=True, keep_dims=False, _sem=None):
    """Index of the maximum along ``axis`` (the first one on ties, which ``tie_break_left=False`` allows too),
    as int32; with ``axis=None`` the index into the flattened tile."""
    _bool_const(tie_break_left, "tie_break_left")
    return _sem.reduce(input, "argmax", axis, keep_dims)


@builtin
def argmin(input, axis=None, tie_break_left=True, keep_dims=False, _sem=None):
    """Index of the minimum along ``axis`` (the first one on ties, which ``tie_break_left=False`` allows too),
    as int32; with ``axis=None`` the index into the flattened tile."""
    _bool_const(tie_break_left, "tie_break_left")
    return _sem.reduce(input, "argmin", axis, keep_dims)


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None, _sem=None):
    """Inclusive prefix sum along ``axis``; ``dtype`` converts the input first (and is the result's dtype)."""
    return _sem.scan(input, "sum", axis, reverse, dtype)


@builtin
def cumprod(input, axis=0, reverse=False, _sem=None):
    """Inclusive prefix product along ``axis``."""
    return _sem.scan(input, "prod", axis, reverse)


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False, _sem=None):
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (as in Triton, ``None`` means dimension 0). The result
    has ``x``'s shape; ``keep_dims`` and ``ieee_rounding`` are accepted and change nothing."""
    x = _sem.to_tensor(x)
    if not x.shape:
        raise KernelTypeError("dl.softmax needs a tile with at least one dimension, got a single value",
                              hint="the softmax of a single value is 1.0")
    d = 0 if unwrap(dim) is None else dim
    z = _sem.binary("sub", x, _sem.reduce(x, "max", d, True))
    num = _sem.unary("exp", z)
    return _sem.binary("truediv", num, _sem.reduce(num, "sum", d, True))


@builtin
def sort(x, dim=None, descending=False, _sem=None):
    """``x`` sorted along ``dim`` (the last dimension when None), ascending unless ``descending``; NaN sorts as
    the largest value."""
    return _sem.sort(x, dim, _bool_const(descending, "descending"))


@builtin
def topk(x, k, dim=None, _sem=None):
    """The ``k`` largest elements along ``dim`` (the last dimension when None), largest first."""
    return _sem.topk(x, k, dim)


@builtin
def gather(src, index, axis, _sem=None):
    """``out[..., i, ...] = src[..., index[..., i, ...], ...]`` along ``axis``: ``index`` has ``src``'s rank and
    shape except along ``axis``; the result has ``index``'s shape. An index outside ``[0, src.shape[axis])``
    stops the launch with ``DeviceError``."""
    return _sem.gather(src, index, axis)


@builtin
def histogram(input, num_bins, mask=None, _sem=None):
    """The ``int32`` counts of the values ``0 .. num_bins - 1`` among the integer elements of ``input`` (any
    shape); other values, and elements where ``mask`` is false, are not counted."""
    return _sem.histogram(input, num_bins, mask)


@builtin
def swizzle2d(i, j, size_i, size_j, size_g, _sem=None):
    """Triton's tile reordering: the index pair (i, j) of a row-major ``size_i x size_j`` grid mapped to one that
    walks column-major within groups of ``size_g`` rows (better reuse for matmul tiles)."""
    ij = _sem.binary("add", _sem.binary("mul", i, size_j), j)
    size_gj = _sem.binary("mul", size_g, size_j)
    off_i = _sem.binary("mul", _sem.binary("floordiv", ij, size_gj), size_g)
    rows = _sem.binary("minimum", _sem.binary("sub", size_i, off_i), size_g)  # the last group may have fewer
    in_group = _sem.binary("mod", ij, size_gj)
    return _sem.binary("add", off_i, _sem.binary("mod", in_group, rows)), _sem.binary("floordiv", in_group, rows)


# ---- memory ----------------------------------------------------------------------------------------------

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, _sem=None):
    """Load the elements a pointer (tile) addresses. Masked-off elements read ``other`` (0 by default)
    and are never touched, so they cannot fault."""
    return _sem.codegen.load(pointer, mask, other, boundary_check, padding_option)


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="", _sem=None):
    """Store ``value`` (broadcast to the pointer's shape, cast to its dtype) where ``mask`` holds."""
    return _sem.codegen.store(pointer, value, mask, boundary_check)


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
def make_block_ptr(base, shape, strides, offsets, block_shape, order=None, _sem=None):
    """A block pointer: a ``block_shape`` window at ``offsets`` into a tensor of runtime ``shape`` and
    ``strides`` (in elements). Load it with ``dl.load(bp, boundary_check=(0, 1), padding_option="zero")``."""
    from .frontend.blockptr import make_block_ptr as mk
    return mk(_sem, base, shape, strides, offsets, block_shape, order)


@builtin
def advance(base, offsets, _sem=None):
    """A block pointer moved by ``offsets`` elements along each dimension."""
    from .frontend.blockptr import advance as adv
    return adv(_sem, base, offsets)


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, _sem=None):
    """Triton's tensor descriptor: ``desc.load([i, j])`` / ``desc.store([i, j], v)`` with bounds handled."""
    from .frontend.blockptr import make_tensor_descriptor as mk
    return mk(_sem, base, shape, strides, block_shape)


@builtin
def load_tile(x, index, shape, padding=0, _sem=None):
    """Tile number ``index`` (in units of ``shape``) of array parameter ``x``, padded past the edges:
    ``dl.load_tile(x, index=(i, j), shape=(BM, BN))``. No masks: it maps 1:1 onto a DMA descriptor."""
    from .frontend.blockptr import load_tile as lt
    return lt(_sem, x, index, shape, padding)


@builtin
def store_tile(x, index, value, _sem=None):
    """Store ``value`` as tile number ``index`` of array parameter ``x``; elements past the edges are
    dropped."""
    from .frontend.blockptr import store_tile as st
    return st(_sem, x, index, value)


@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _sem=None):
    """Reduce along ``axis`` with an associative ``combine_fn`` (a ``@dvmlang.kernel`` taking two values,
    or two tuples, and returning one). ``input`` may be a tuple of tiles of one shape."""
    return _sem.codegen.combine_reduce(input, axis, combine_fn, bool(unwrap(keep_dims)))


@builtin
def associative_scan(input, axis, combine_fn, reverse=False, _sem=None):
    """Inclusive scan along ``axis`` with an associative ``combine_fn`` (``reverse`` scans from the end)."""
    return _sem.codegen.combine_scan(input, axis, combine_fn, bool(unwrap(reverse)))


# ---- matrix ----------------------------------------------------------------------------------------------

@builtin
def dot(input, other, acc=None, out_dtype=None, allow_tf32=None, input_precision=None, max_num_imprecise_acc=None,
        _sem=None):
    """Matrix product on the cube unit: fp16/bf16 inputs accumulate in fp32; ``acc`` is added. The precision
    hints are accepted and ignored (the cube unit accumulates every product exactly in fp32)."""
    return _sem.dot(input, other, acc, out_dtype)


# ---- compile time and debugging --------------------------------------------------------------------------

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
def ravel(x, can_reorder=False, _sem=None):
    """The tile flattened to one dimension (row-major; ``can_reorder`` is accepted, the order is always kept)."""
    x = _sem.to_tensor(x)
    return _sem.reshape(x, (x.numel,))


@builtin
def squeeze(x, dim, _sem=None):
    """Remove the unit dimension ``dim``."""
    x = _sem.to_tensor(x)
    d = _int_const(dim, "squeeze dim") % len(x.shape)
    if x.shape[d] != 1:
        raise KernelTypeError(f"dl.squeeze: dimension {d} of shape {x.shape} is not 1",
                              hint="only a dimension of size 1 can be removed; use dl.reshape to change sizes")
    return _sem.reshape(x, x.shape[:d] + x.shape[d + 1:])


@builtin
def unsqueeze(x, dim, _sem=None):
    """Insert a unit dimension at ``dim`` (same as expand_dims)."""
    return _sem.expand_dims(x, dim)


@builtin
def split(a, _sem=None):
    """The inverse of ``dl.join``: split a tile whose last dimension is 2 into two tiles."""
    a = _sem.to_tensor(a)
    if not a.shape or a.shape[-1] != 2:
        raise KernelTypeError(f"dl.split needs a last dimension of 2, got shape {a.shape}",
                              hint="dl.split undoes dl.join; reshape to (..., 2) first, or slice with x[..., :k]")
    r = len(a.shape)
    outs = []
    for j in (0, 1):
        part = _sem.slice(a, (0,) * (r - 1) + (j,), a.shape[:-1] + (1,))
        outs.append(_sem.reshape(part, a.shape[:-1]) if r > 1 else _sem.as_scalar(part))
    return tuple(outs)


@builtin
def interleave(a, b, _sem=None):
    """The elements of ``a`` and ``b`` alternating along the last dimension, which doubles (both broadcast to
    one shape first); two scalars give a tile of 2."""
    return _sem.interleave(a, b)


@builtin
def flip(x, dim=None, _sem=None):
    """``x`` reversed along ``dim`` (the last dimension when None)."""
    return _sem.flip(x, dim)


@builtin
def pow(x, y, _sem=None):  # noqa: A001
    """x ** y, elementwise."""
    return _sem.binary("pow", x, y)


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
def logical_and(x, y, _sem=None):
    """Elementwise ``x and y`` on truth values (``!= 0``), as an int1 tile; also ``x.logical_and(y)``."""
    return _sem.logical("and", x, y)


@builtin
def logical_or(x, y, _sem=None):
    """Elementwise ``x or y`` on truth values (``!= 0``), as an int1 tile; also ``x.logical_or(y)``."""
    return _sem.logical("or", x, y)


@builtin
def debug_barrier(_sem=None):
    """Accepted for Triton compatibility: programs of dvmlang synchronise through pipe events."""
    return None


# ---- random numbers (Triton's Philox generator, value for value) ------------------------------------------

N_ROUNDS_DEFAULT = 10
# Philox key increments (Weyl constants) and round multipliers, for 32-bit and 64-bit counters
_PHILOX_CONSTANTS = {32: (0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57),
                     64: (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B, 0xD2E7470EE14C6C93, 0xCA5A826395121157)}


@builtin
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """``n_rounds`` rounds of Philox on the counter (c0, c1, c2, c3) with the key (k0, k1), all ``uint32``
    (Philox4x32) or all ``uint64`` (Philox4x64); returns the four output words."""
    c = [_sem.to_tensor(v) for v in (c0, c1, c2, c3)]
    if c[0].dtype not in (uint32, uint64) or any(v.dtype is not c[0].dtype for v in c):
        raise KernelTypeError(f"dl.philox_impl needs four uint32 or four uint64 counters, got "
                              f"{', '.join(str(v.dtype) for v in c)}",
                              hint="use dl.philox, which converts the counters and splits the seed")
    d = c[0].dtype
    key_a, key_b, round_a, round_b = _PHILOX_CONSTANTS[d.bits]
    k = [_sem.cast(_sem.to_tensor(v), d) for v in (k0, k1)]
    c0, c1, c2, c3 = c
    for _ in _builtins.range(_int_const(n_rounds, "n_rounds")):
        _c0, _c2 = c0, c2
        c0 = _sem.binary("xor", _sem.binary("xor", _sem.umulhi(round_b, _c2), c1), k[0])
        c2 = _sem.binary("xor", _sem.binary("xor", _sem.umulhi(round_a, _c0), c3), k[1])
        c1 = _sem.binary("mul", round_b, _c2)
        c3 = _sem.binary("mul", round_a, _c0)
        k = [_sem.binary("add", k[0], key_a), _sem.binary("add", k[1], key_b)]
    return c0, c1, c2, c3


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Philox keyed by an integer ``seed`` (as ``uint64``: the low and high 32 bits key 32-bit counters, the
    whole seed keys 64-bit ones) on counters of 32 or 64 bits (their bits reinterpreted as unsigned)."""
    seed = _sem.to_tensor(seed)
    if not seed.dtype.is_int:
        raise KernelTypeError(f"the Philox seed must be an integer, got {seed.dtype}", hint="pass an int seed")
    seed = _sem.cast(seed, uint64)
    c = [_sem.to_tensor(v) for v in (c0, c1, c2, c3)]
    bits = c[0].dtype.bits
    if bits not in (32, 64) or any(v.dtype.bits != bits for v in c):
        raise KernelTypeError(f"dl.philox needs four 32-bit or four 64-bit counters, got "
                              f"{', '.join(str(v.dtype) for v in c)}", hint="cast the counters with .to(dl.uint32)")
    d = uint32 if bits == 32 else uint64
    if bits == 32:
        k0 = _sem.cast(_sem.binary("and", seed, 0xFFFFFFFF), uint32)
        k1 = _sem.cast(_sem.binary("and", _sem.binary("shr", seed, 32), 0xFFFFFFFF), uint32)
    else:
        k0, k1 = seed, _sem.cast(0, uint64)
    c = [_sem.cast(v, d, True) for v in c]
    return philox_impl(*c, k0, k1, n_rounds, _sem=_sem)


@builtin
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of random ``uint32`` for a scalar ``seed`` and a block of integer ``offset`` s: Philox4x32 on
    the counter (offset low 32 bits, offset high 32 bits, 0, 0)."""
    offset = _sem.to_tensor(offset)
    if not offset.dtype.is_int:
        raise KernelTypeError(f"random-number offsets must be integers, got {offset.dtype}",
                              hint="use dl.arange-based integer offsets")
    lo = _sem.cast(offset, uint32)
    zero = _sem.full(offset.shape, 0, uint32) if offset.is_tile else _sem.cast(0, uint32)
    hi = _sem.cast(_sem.binary("shr", offset, 32), uint32) if offset.dtype.bits > 32 else zero
    return philox(seed, lo, hi, zero, zero, n_rounds, _sem=_sem)


@builtin
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``uint32`` for a scalar ``seed`` and a block of integer offsets (the first word of
    ``randint4x``)."""
    return randint4x(seed, offset, n_rounds, _sem=_sem)[0]


@builtin
def uint_to_uniform_float(x, _sem=None):
    """Random 32- or 64-bit integers to ``float32`` uniform in [0, 1) (Triton's mapping: the bits read as signed,
    negatives folded onto non-negatives, times a scale just below 2**-31 or 2**-63)."""
    x = _sem.to_tensor(x)
    if x.dtype in (int32, uint32):
        x, scale = _sem.cast(x, int32, True), 4.6566127342e-10
    elif x.dtype in (int64, uint64):
        x, scale = _sem.cast(x, int64, True), 1.0842020432385337e-19
    else:
        raise KernelTypeError(f"dl.uint_to_uniform_float needs 32- or 64-bit integers, got {x.dtype}")
    x = _sem.where(_sem.compare("lt", x, 0), _sem.binary("sub", _sem.unary("neg", x), 1), x)
    return _sem.binary("mul", x, scale)


@builtin
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``float32`` uniform in [0, 1) for a scalar ``seed`` and a block of integer offsets."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds, _sem=_sem), _sem=_sem)


@builtin
def rand4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of random ``float32`` uniform in [0, 1) (from the four words of ``randint4x``)."""
    return tuple(uint_to_uniform_float(v, _sem=_sem) for v in randint4x(seed, offset, n_rounds, _sem=_sem))


@builtin
def pair_uniform_to_normal(u1, u2, _sem=None):
    """The Box-Muller transform: two uniform blocks to two standard normal blocks."""
    u1 = _sem.binary("maximum", 1.0e-7, u1)
    th = _sem.binary("mul", 6.283185307179586, u2)
    r = _sem.unary("sqrt", _sem.binary("mul", -2.0, _sem.unary("log", u1)))
    return _sem.binary("mul", r, _sem.unary("cos", th)), _sem.binary("mul", r, _sem.unary("sin", th))


@builtin
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``float32`` from the standard normal distribution (Box-Muller on the first two words
    of ``randint4x``)."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds, _sem=_sem)
    return pair_uniform_to_normal(uint_to_uniform_float(i1, _sem=_sem), uint_to_uniform_float(i2, _sem=_sem),
                                  _sem=_sem)[0]


@builtin
def randn4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of standard normal ``float32`` (Box-Muller on the pairs of ``rand4x``)."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds, _sem=_sem)
    return pair_uniform_to_normal(u1, u2, _sem=_sem) + pair_uniform_to_normal(u3, u4, _sem=_sem)


class static_range:
    """``for i in dl.static_range(n)``: unrolled at compile time; ``i`` is a compile-time integer."""

    def __init__(self, arg1, arg2=None, step=1):
        self.args = (arg1, arg2, step)


class range:  # noqa: A001 - mirrors tl.range
    """``for i in dl.range(a, b, step, num_stages=...)``: a runtime loop (hints accepted and ignored)."""

    def __init__(self, arg1, arg2=None, step=1, num_stages=None, loop_unroll_factor=None, **_hints):
        self.args = (arg1, arg2, step)


TENSOR_METHODS = {
    "to": "cast", "reshape": "reshape", "view": "reshape", "broadcast_to": "broadcast_to",
    "expand_dims": "expand_dims", "trans": "trans", "permute": "permute", "sum": "sum", "max": "max",
    "min": "min", "argmax": "argmax", "argmin": "argmin", "cumsum": "cumsum", "cumprod": "cumprod",
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "abs": "abs",
    "sigmoid": "sigmoid", "reduce": "reduce", "associative_scan": "associative_scan", "ravel": "ravel",
    "cast": "cast", "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos", "erf": "erf", "rsqrt": "rsqrt",
    "xor_sum": "xor_sum", "split": "split", "squeeze": "squeeze", "unsqueeze": "unsqueeze", "tanh": "tanh",
    "softmax": "softmax", "cdiv": "cdiv", "logical_and": "logical_and", "logical_or": "logical_or",
    "atomic_add": "atomic_add", "atomic_max": "atomic_max", "atomic_min": "atomic_min", "atomic_xchg": "atomic_xchg",
    "atomic_and": "atomic_and", "atomic_or": "atomic_or", "atomic_xor": "atomic_xor", "atomic_cas": "atomic_cas",
    "advance": "advance", "flip": "flip", "interleave": "interleave", "join": "join", "reduce_or": "reduce_or",
    "sort": "sort", "topk": "topk", "gather": "gather", "histogram": "histogram",
}


def _namespace(name: str, doc: str, members: dict):
    """A submodule of ``dvmlang.language`` (importable, and reachable as ``dl.<name>`` inside kernels)."""
    mod = _types.ModuleType(f"{__name__}.{name}", doc)
    for k, v in members.items():
        setattr(mod, k, v)
    mod.__all__ = list(members)
    _sys.modules[mod.__name__] = mod
    return mod


math = _namespace("math", "Triton's ``tl.math`` spellings: each is the ``dl`` function of the same name "
                  "(``max`` and ``min`` are the elementwise ``maximum`` and ``minimum``).", {
                      **_MATH, "div_rn": div_rn, "fdiv": fdiv, "fma": fma, "max": maximum, "min": minimum,
                      "sqrt_rn": sqrt_rn, "umulhi": umulhi})
__all__.append("math")
