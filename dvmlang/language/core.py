"""The core of the kernel language: dtypes, the ``builtin`` marker, program ids, tile creation, casts,
loop iterators, and the helpers that work on the host too (``cdiv``, ``next_power_of_2``).

Inside a kernel the compiler passes each ``builtin`` a ``_sem`` argument (the typed IR builder, a
``frontend.semantic.Semantic``); called anywhere else, a kernel-only function raises ``DvmError`` saying so.
"""

from __future__ import annotations

import functools

from .. import dtypes as dt
from ..errors import ConstexprError, DvmError, KernelTypeError
from ..frontend.values import is_runtime, tensor, unwrap

# ---- dtypes ----------------------------------------------------------------------------------------------
int1 = bool_ = dt.bool_
int8, uint8, int16, uint16 = dt.int8, dt.uint8, dt.int16, dt.uint16
int32, uint32, int64, uint64 = dt.int32, dt.uint32, dt.int64, dt.uint64
float16, bfloat16, float32, float64 = dt.float16, dt.bfloat16, dt.float32, dt.float64
float8e4nv, float8e5 = dt.float8e4nv, dt.float8e5
dtype = dt.DType


def builtin(fn):
    """Mark ``fn`` as a kernel-language function; the compiler calls it with ``_sem=``."""

    @functools.wraps(fn)
    def wrapper(*args, _sem=None, **kwargs):
        if _sem is None:
            raise DvmError(f"dl.{fn.__name__}() can only be used inside a @dvmlang.kernel function")
        return fn(*args, _sem=_sem, **kwargs)

    wrapper.__dvm_builtin__ = True
    return wrapper


@builtin
def _item(x, _sem=None):
    """``x.item()``: the one element of a one-element tile, as a scalar (Triton's ``tensor.item``)."""
    x = _sem.to_tensor(x)
    if x.numel != 1:
        raise KernelTypeError(f"item() needs a tile with one element, got a tile of shape {x.shape}",
                              hint="reduce the tile first, for example dl.max(x, axis=0)")
    return _sem.as_scalar(x)


def bool_const(v, what):
    """A compile-time truth value (``ConstexprError`` for a runtime one)."""
    v = unwrap(v)
    if is_runtime(v):
        raise ConstexprError(f"{what} must be a compile-time value, got a runtime {type(v).__name__}",
                             hint="pass True or False, or a dl.constexpr parameter")
    return bool(v)


def int_const(v, what):
    """A compile-time integer (``ConstexprError`` otherwise)."""
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

def _grid_axis(axis, what) -> int:
    axis = int_const(axis, f"{what} axis")
    if axis not in (0, 1, 2):
        raise KernelTypeError(f"{what} axis must be 0, 1, or 2 but got {axis}")  # Triton's wording
    return axis


@builtin
def program_id(axis=0, _sem=None):
    """The index of this program along grid ``axis`` (0, 1 or 2)."""
    return tensor(_sem.b.program_id(_grid_axis(axis, "program_id")))


@builtin
def num_programs(axis=0, _sem=None):
    """The grid size along ``axis``."""
    return tensor(_sem.b.num_programs(_grid_axis(axis, "num_programs")))


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
    return _sem.cast(x, dtype, bool_const(bitcast, "bitcast"), fp_downcast_rounding)


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


class static_range:
    """``for i in dl.static_range(n)``: unrolled at compile time; ``i`` is a compile-time integer."""

    def __init__(self, arg1, arg2=None, step=1):
        self.args = (arg1, arg2, step)


class range:  # noqa: A001 - mirrors tl.range
    """``for i in dl.range(a, b, step, num_stages=...)``: a runtime loop (hints accepted and ignored)."""

    def __init__(self, arg1, arg2=None, step=1, num_stages=None, loop_unroll_factor=None, **_hints):
        self.args = (arg1, arg2, step)


__all__ = ["program_id", "num_programs", "arange", "full", "zeros", "zeros_like", "full_like", "cast", "swizzle2d"]
