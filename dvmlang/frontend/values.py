"""The values a kernel manipulates while it is being compiled.

Python values (ints, floats, dtypes, tuples ...) are compile-time constants. ``tensor`` wraps an IR
value: a runtime scalar or a tile. ``pointer`` is a tensor parameter plus an integer offset (a scalar
or a tile of offsets) — pointer tiles never exist on the device; loads and stores consume them.
"""

from __future__ import annotations

import math

from ..dtypes import DType
from ..ir.core import TileType, Value

PY_NUMBER = (bool, int, float)  # the Python values that act as (weakly typed) numbers in kernels


class constexpr:
    """Marks a compile-time constant: ``BLOCK: dl.constexpr`` as a parameter annotation, or
    ``SCALE = dl.constexpr(0.5)`` as a global the kernel reads."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"

    def __index__(self):
        return self.value.__index__()

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self):
        return hash(self.value)


class number(constexpr):
    """A Python number a plain assignment bound to a name inside a kernel (``k = 7``, ``acc = 100``). In Triton
    such a name is a runtime scalar (int32, int64 beyond int32's range, float32, int1), so its arithmetic is the
    device's: ``k // -2`` truncates, ``m + 1`` wraps at 2**31, ``3 // (acc % 5)`` compiles. Here it keeps
    Triton's ``dtype`` and its arithmetic is Triton's, evaluated while compiling (``ArithmeticOps.fold_numbers``:
    the device's semantics of each op on values of that dtype), so the results are Triton's and stay known at
    compile time: where a compile-time value is required (a shape, ``arange``, ``static_assert``) its value
    serves, as the constexpr it also is (dvmlang accepts there what Triton refuses). Met with a runtime value,
    it is a constant of its dtype, not a weakly typed literal."""

    __slots__ = ("dtype",)

    def __init__(self, value, dtype=None):
        super().__init__(value)
        from ..dtypes import scalar_dtype_of_python
        self.dtype = dtype or scalar_dtype_of_python(self.value)

    def __repr__(self) -> str:
        return f"number({self.value!r}, {self.dtype.name})"


def unwrap(v):
    return v.value if isinstance(v, constexpr) else v


class Shape(tuple):
    """A value's ``.shape`` inside a kernel: a tuple of ints that also compares equal to a list, as Triton's
    shapes do (``tl.static_assert(x.shape == [1, N])``), constexpr elements included."""

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == unwrap(b) for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__


class tensor:
    """A runtime value inside a kernel: a scalar (``shape == ()`` and ``is_scalar``) or a tile."""

    __slots__ = ("handle",)

    def __init__(self, handle: Value):
        self.handle = handle

    @property
    def dtype(self) -> DType:
        return self.handle.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.handle.type.shape

    @property
    def is_tile(self) -> bool:
        return isinstance(self.handle.type, TileType)

    @property
    def is_scalar(self) -> bool:
        return not self.is_tile

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        kind = "tile" if self.is_tile else "scalar"
        return f"<{kind} {self.handle.type}>"

    def __bool__(self):
        raise TypeError("a runtime value has no truth value at compile time")


class pointer:
    """A pointer into a tensor parameter: ``param`` indexes the kernel's parameters; the element offset is
    ``offset`` (an integer tile or scalar, None for 0) plus ``scalar`` (an integer scalar, None for 0).
    Keeping scalar increments apart lets ``ptrs += BLOCK * stride`` in a loop carry one scalar."""

    __slots__ = ("param", "dtype", "offset", "name", "scalar")

    def __init__(self, param: int, dtype: DType, offset: tensor | None, name: str, scalar: tensor | None = None):
        self.param = param
        self.dtype = dtype
        self.offset = offset
        self.name = name
        self.scalar = scalar

    @property
    def shape(self) -> tuple[int, ...]:
        return () if self.offset is None else self.offset.shape

    @property
    def is_tile(self) -> bool:
        return self.offset is not None and self.offset.is_tile

    @property
    def is_base(self) -> bool:
        """The tensor parameter itself, with no offset applied."""
        return self.offset is None and self.scalar is None

    def __repr__(self) -> str:
        return f"<pointer to {self.name} ({self.dtype}) shape {self.shape}>"


class block_pointer:
    """A block pointer (``make_block_ptr``): a 2-D (or N-D) window into a tensor with runtime shape and
    strides, advanced with ``dl.advance``."""

    __slots__ = ("param", "dtype", "shape_vals", "strides", "offsets", "block_shape", "order", "name")

    def __init__(self, param, dtype, shape_vals, strides, offsets, block_shape, order, name):
        self.param = param
        self.dtype = dtype
        self.shape_vals = shape_vals
        self.strides = strides
        self.offsets = offsets
        self.block_shape = tuple(block_shape)
        self.order = order
        self.name = name

    @property
    def shape(self):
        return self.block_shape

    def __repr__(self) -> str:
        return f"<block pointer into {self.name} block {self.block_shape}>"


class Undefined:
    """A name that is not defined on every path reaching its use."""

    __slots__ = ("name", "reason")

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason


def is_runtime(v) -> bool:
    return isinstance(v, (tensor, pointer, block_pointer))
