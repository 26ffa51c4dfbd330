"""Typed operations on kernel values: promotion, broadcasting, checks, and the IR they build.

Every method raises ``KernelTypeError`` / ``ConstexprError`` without a location; the code generator
attaches the source span of the expression being compiled.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .. import opdefs
from ..errors import ConstexprError, KernelTypeError
from ..ir.builder import Builder, broadcast_shapes
from .values import block_pointer, pointer, tensor, unwrap

PY_NUMBER = (bool, int, float)

# from the op vocabulary: constant folding of Python numbers, spellings, Triton's div_or_mod promotion
_PY_BINARY = {name: op.fold for name, op in opdefs.BINARY.items() if op.fold}
_PY_COMPARE = {name: op.fold for name, op in opdefs.COMPARE.items()}
SYMBOL = {name: op.spelling for name, op in opdefs.ELEMENTWISE.items()}
_DIVISION = frozenset(name for name, op in opdefs.BINARY.items() if "division" in op.traits)
_BITWISE = frozenset(name for name, op in opdefs.BINARY.items() if "bitwise" in op.traits)
MAX_TILE_ELEMS = 1 << 22


def _shape_text(shape) -> str:
    return "scalar" if shape == () else str(tuple(shape))


class Semantic:
    """Builds typed IR for one kernel build. ``params`` are the kernel's IR parameters."""

    def __init__(self, builder: Builder, params):
        self.b = builder
        self.params = params

    # ---- conversions --------------------------------------------------------------------------------
    def const(self, value, dtype: dt.DType | None = None) -> tensor:
        value = unwrap(value)
        if dtype is None:
            dtype = dt.scalar_dtype_of_python(value)
        if dtype.is_int and isinstance(value, int) and not dt.int_fits(value, dtype):
            raise KernelTypeError(f"the constant {value} does not fit {dtype}",
                                  hint="cast the other operand to a wider type, for example .to(dl.int64)")
        return tensor(self.b.const(value, dtype))

    def to_tensor(self, x, dtype: dt.DType | None = None) -> tensor:
        x = unwrap(x)
        if isinstance(x, tensor):
            return x
        if isinstance(x, PY_NUMBER) or isinstance(x, np.generic):
            if isinstance(x, np.generic):
                x = x.item()
            return self.const(x, dtype)
        if isinstance(x, pointer):
            raise KernelTypeError(f"{x!r} is a pointer; load from it with dl.load first")
        raise KernelTypeError(f"expected a number or a tile, got {type(x).__name__} {x!r}")

    def cast(self, x, dtype: dt.DType, bitcast: bool = False, rounding=None) -> tensor:
        """``rounding`` is ``fp_downcast_rounding``: None or "rtne" (to nearest even) or "rtz" (toward zero), for a
        float converted to a narrower float."""
        dtype = self.dtype_arg(dtype)
        rounding = unwrap(rounding)
        if rounding is not None:
            if rounding not in ("rtne", "rtz"):
                raise KernelTypeError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {rounding!r}",
                                      hint="'rtne' rounds to nearest even (the default), 'rtz' toward zero")
            x = self.to_tensor(x)
            if bitcast or not (x.dtype.is_float and dtype.is_float and dtype.bits < x.dtype.bits):
                raise KernelTypeError(f"fp_downcast_rounding applies to a float converted to a narrower float, not to "
                                      f"{'a bitcast' if bitcast else f'{x.dtype} to {dtype}'}",
                                      hint="drop fp_downcast_rounding")
            if rounding == "rtz":
                return tensor(self.b.cast(x.handle, dtype, False, "rtz"))
        x = unwrap(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and (
                isinstance(x, float) and not dtype.is_float or dtype.is_int and not dt.int_fits(x, dtype)):
            x = self.to_tensor(x)  # as Triton: the number takes its own type, then converts (-1 to uint8 is 255)
        x = self.to_tensor(x, dtype if not bitcast else None)
        if x.dtype is dtype:
            return x
        if bitcast and x.dtype.itemsize != dtype.itemsize:
            raise KernelTypeError(f"cannot bitcast {x.dtype} to {dtype}: sizes differ "
                                  f"({x.dtype.itemsize} vs {dtype.itemsize} bytes)")
        return tensor(self.b.cast(x.handle, dtype, bitcast))

    def dtype_arg(self, d) -> dt.DType:
        d = unwrap(d)
        found = dt.lookup(d)
        if found is None:
            raise KernelTypeError(f"{d!r} is not a dtype", hint="use dl.float32, dl.float16, dl.int32, ...")
        return found

    def as_scalar(self, x, what: str = "value") -> tensor:
        """A scalar from a number, a scalar, or a one-element tile (moved from the vector unit)."""
        x = self.to_tensor(x)
        if x.is_scalar:
            return x
        if x.numel != 1:
            raise KernelTypeError(f"{what} must be a scalar, got a tile of shape {x.shape}",
                                  hint="reduce the tile first, for example dl.max(x, axis=0)")
        h = x.handle
        if x.shape != ():
            h = self.b.reshape(h, ())
        return tensor(self.b.to_scalar(h))

    # ---- promotion ----------------------------------------------------------------------------------
    def _weak(self, x, other: tensor) -> tensor:
        """Give a Python number the type it takes next to ``other`` (Triton: a number of a kind no higher than the
        tile's, bool < int < float, takes the tile's dtype). An int that does not fit an integer tile's dtype
        becomes int64 (Triton raises)."""
        if isinstance(x, bool) or isinstance(x, int) and other.dtype.is_float:
            return self.const(x, other.dtype)
        if isinstance(x, int):
            if other.dtype.is_int and dt.int_fits(x, other.dtype):
                return self.const(x, other.dtype)
            return self.const(x, dt.int64 if other.dtype.is_int else None)
        if isinstance(x, float):
            return self.const(x, other.dtype if other.dtype.is_float else dt.float32)
        return self.to_tensor(x)

    def pair(self, a, b) -> tuple[tensor, tensor]:
        a, b = unwrap(a), unwrap(b)
        if isinstance(a, np.generic):
            a = a.item()
        if isinstance(b, np.generic):
            b = b.item()
        if isinstance(a, tensor) and not isinstance(b, tensor):
            return a, self._weak(b, a)
        if isinstance(b, tensor) and not isinstance(a, tensor):
            return self._weak(a, b), b
        return self.to_tensor(a), self.to_tensor(b)

    def _check_shapes(self, a: tensor, b: tensor, what: str):
        if a.is_tile and b.is_tile and broadcast_shapes(a.shape, b.shape) is None:
            raise KernelTypeError(f"cannot broadcast shapes {a.shape} and {b.shape} in `{what}`",
                                  hint="make the shapes agree, for example x[:, None] or dl.broadcast_to")

    def _numel_check(self, shape):
        n = 1
        for s in shape:
            n *= s
        if n > MAX_TILE_ELEMS:
            raise KernelTypeError(f"a tile of shape {shape} has {n} elements, more than the limit {MAX_TILE_ELEMS}",
                                  hint="use a smaller BLOCK and loop over the data")

    # ---- arithmetic -----------------------------------------------------------------------------------
    def binary(self, opname: str, a, b):
        a, b = unwrap(a), unwrap(b)
        if isinstance(a, pointer) or isinstance(b, pointer):
            return self.pointer_arith(opname, a, b)
        if not isinstance(a, tensor) and not isinstance(b, tensor):
            try:
                return _PY_BINARY[opname](a, b)
            except Exception as e:  # noqa: BLE001 - a constant expression that Python rejects
                raise ConstexprError(f"cannot evaluate constant `{a!r} {SYMBOL[opname]} {b!r}`: {e}") from None
        a, b = self.pair(a, b)
        self._check_shapes(a, b, SYMBOL[opname])
        if opname in _BITWISE:
            return self._bitwise(opname, a, b)
        division = opname in _DIVISION
        if division and not (a.dtype.is_float or b.dtype.is_float) and (a.dtype.kind in "ub") != (b.dtype.kind in "ub"):
            raise KernelTypeError(f"cannot use `{SYMBOL[opname]}` with {a.dtype} and {b.dtype}: they have different "
                                  "signedness (as in Triton)", hint="cast one of them, for example .to(dl.int32)")
        res = dt.promote(a.dtype, b.dtype, division)
        if opname == "truediv" and not res.is_float:
            res = dt.float32
        a, b = self.cast(a, res), self.cast(b, res)
        if res.is_bool:
            return self._int1_arith(opname, a, b)
        if opname == "floordiv" and res.is_int:
            opname = "div"  # C division, truncating toward zero (Triton's sdiv/udiv)
        return tensor(self.b.binary(opname, a.handle, b.handle, res))

    def _bitwise(self, opname: str, a: tensor, b: tensor) -> tensor:
        """``& | ^ << >>`` in the promoted integer type (Triton's bitwise_op_type_checking_impl). ``>>`` is
        arithmetic when the left operand is signed, even if the promoted type is unsigned (``int8 >> uint32``)."""
        if opname in ("shl", "shr"):
            if not (a.dtype.is_int and b.dtype.is_int):
                raise KernelTypeError(f"`{SYMBOL[opname]}` needs integer operands, got {a.dtype} and {b.dtype}")
        elif a.dtype.is_float or b.dtype.is_float:
            raise KernelTypeError(f"`{SYMBOL[opname]}` needs integer or boolean operands, got {a.dtype} and {b.dtype}",
                                  hint="compare first (x > 0), or cast with .to(dl.int32)")
        res = dt.promote(a.dtype, b.dtype)
        signed_shr = opname == "shr" and a.dtype.is_signed and not res.is_signed
        a, b = self.cast(a, res), self.cast(b, res)
        if not signed_shr:
            return tensor(self.b.binary(opname, a.handle, b.handle, res))
        sres = dt.by_name(res.name[1:])  # uint32 -> int32: the same bits, shifted arithmetically
        r = self.b.binary("shr", self.cast(a, sres, bitcast=True).handle, self.cast(b, sres, bitcast=True).handle, sres)
        return self.cast(tensor(r), res, bitcast=True)

    def _int1_arith(self, opname: str, a: tensor, b: tensor) -> tensor:
        """Arithmetic on two int1 values, which Triton treats as a 1-bit unsigned integer: computed in uint8 and
        wrapped to the low bit (``True + True`` is False, ``maximum`` is ``or``)."""
        u8 = dt.uint8
        r = tensor(self.b.binary(opname if opname != "floordiv" else "div", self.cast(a, u8).handle,
                                 self.cast(b, u8).handle, u8))
        return self.cast(tensor(self.b.binary("and", r.handle, self.const(1, u8).handle, u8)), dt.bool_)

    def compare(self, opname: str, a, b):
        a, b = unwrap(a), unwrap(b)
        if not isinstance(a, tensor) and not isinstance(b, tensor):
            if isinstance(a, pointer) or isinstance(b, pointer):
                raise KernelTypeError("pointers cannot be compared", hint="compare the offsets instead")
            try:
                return _PY_COMPARE[opname](a, b)
            except Exception as e:  # noqa: BLE001
                raise ConstexprError(f"cannot evaluate constant comparison: {e}") from None
        if isinstance(a, pointer) or isinstance(b, pointer):
            raise KernelTypeError("pointers cannot be compared", hint="compare the offsets instead")
        a, b = self.pair(a, b)
        self._check_shapes(a, b, SYMBOL[opname])
        res = dt.promote(a.dtype, b.dtype)
        a, b = self.cast(a, res), self.cast(b, res)
        return tensor(self.b.compare(opname, a.handle, b.handle))

    def logical(self, opname: str, a, b):
        """``and`` / ``or`` on runtime values: elementwise logical operations on truth values."""
        a, b = self.truth(a), self.truth(b)
        return self.binary("and" if opname == "and" else "or", a, b)

    def truth(self, x) -> tensor:
        x = self.to_tensor(x)
        if x.dtype.is_bool:
            return x
        return self.compare("ne", x, 0)

    def unary(self, opname: str, x):
        x = unwrap(x)
        if not isinstance(x, tensor):
            if isinstance(x, PY_NUMBER):
                if opname == "neg":
                    return -x
                if opname == "invert":
                    return ~x
                if opname == "not":
                    return not x
                if opname == "abs":
                    return abs(x)
                if opname == "pos":
                    return x
            x = self.to_tensor(x)
        if opname == "pos":
            return x
        if opname == "not":
            x = self.truth(x)
            return tensor(self.b.unary("not", x.handle))
        if opname == "invert":
            if x.dtype.is_float:
                raise KernelTypeError(f"`~` needs an integer or boolean operand, got {x.dtype}")
            return tensor(self.b.unary("not", x.handle))
        if opname in opdefs.FLOAT_UNARY and not x.dtype.is_float:
            if "int_identity" in opdefs.UNARY[opname].traits:
                return x
            x = self.cast(x, dt.float32)
        if opname in ("neg", "abs") and x.dtype.is_bool:
            return x  # int1 is a 1-bit unsigned integer (Triton): -x wraps to x, abs is the identity
        return tensor(self.b.unary(opname, x.handle))

    def where(self, cond, a, b):
        cond, a, b = unwrap(cond), unwrap(a), unwrap(b)
        if not isinstance(cond, tensor):
            return a if cond else b
        cond = self.truth(cond)
        if isinstance(a, pointer) or isinstance(b, pointer):
            raise KernelTypeError("dl.where on pointers is not supported", hint="select the offsets instead")
        a, b = self.pair(a, b)
        res = dt.promote(a.dtype, b.dtype)
        a, b = self.cast(a, res), self.cast(b, res)
        shape = ()
        for v in (cond, a, b):
            if v.is_tile:
                s = broadcast_shapes(shape, v.shape)
                if s is None:
                    raise KernelTypeError(f"dl.where operands do not broadcast: {cond.shape}, {a.shape}, {b.shape}")
                shape = s
        return tensor(self.b.select(cond.handle, a.handle, b.handle))

    def float_binary(self, opname: str, a, b, what: str):
        """``a <op> b`` for Triton's float-only spellings (``fdiv``, ``div_rn``): integer operands are an error."""
        a, b = self.pair(a, b)
        if not (a.dtype.is_float and b.dtype.is_float):
            raise KernelTypeError(f"dl.{what} needs floating-point operands, got {a.dtype} and {b.dtype}",
                                  hint="cast with .to(dl.float32), or use `/`, which converts integers itself")
        return self.binary(opname, a, b)

    def umulhi(self, a, b):
        """The high half of the double-width product, the operands' bits read as unsigned."""
        a, b = self.pair(a, b)
        self._check_shapes(a, b, "umulhi")
        res = dt.promote(a.dtype, b.dtype)
        if not res.is_int or res.bits not in (32, 64):
            raise KernelTypeError(f"dl.umulhi needs 32- or 64-bit integer operands, got {a.dtype} and {b.dtype}",
                                  hint="cast with .to(dl.uint32) (or dl.int32, dl.int64, dl.uint64) first")
        a, b = self.cast(a, res), self.cast(b, res)
        return tensor(self.b.binary("umulhi", a.handle, b.handle, res))

    def fma(self, a, b, c):
        a, b = self.pair(a, b)
        res = dt.promote(a.dtype, b.dtype)
        c = self._weak(unwrap(c), a) if not isinstance(unwrap(c), tensor) else c
        res = dt.promote(res, c.dtype)
        if not res.is_float:
            return self.binary("add", self.binary("mul", a, b), c)
        a, b, c = self.cast(a, res), self.cast(b, res), self.cast(c, res)
        for x, y in ((a, b), (a, c), (b, c)):
            self._check_shapes(x, y, "fma")
        if not (a.is_tile or b.is_tile or c.is_tile):
            return self.binary("add", self.binary("mul", a, b), c)
        return tensor(self.b.fma(a.handle, b.handle, c.handle))

    # ---- pointers -------------------------------------------------------------------------------------
    def pointer_arith(self, opname, a, b):
        if isinstance(b, pointer) and opname == "add":
            a, b = b, a
        if not isinstance(a, pointer) or isinstance(b, pointer) or opname not in ("add", "sub"):
            raise KernelTypeError(f"`{SYMBOL.get(opname, opname)}` is not defined on pointers",
                                  hint="pointers support `ptr + offsets` and `ptr - offsets`")
        off = self.to_tensor(b) if not isinstance(unwrap(b), PY_NUMBER) else unwrap(b)
        if isinstance(off, tensor) and not (off.dtype.is_int or off.dtype.is_bool):
            raise KernelTypeError(f"pointer offsets must be integers, got {off.dtype}",
                                  hint="cast the offsets with .to(dl.int32)")
        if isinstance(off, float):
            raise KernelTypeError("pointer offsets must be integers, got a float")
        if opname == "sub":
            off = self.unary("neg", off)
        if isinstance(off, tensor) and off.dtype.is_bool:
            off = self.cast(off, dt.int32)
        if isinstance(off, tensor) and off.is_tile and off.shape == ():
            off = self.as_scalar(off)  # a 0-d tile (a reduction result) offsets the whole pointer: a scalar
        if isinstance(off, tensor) and off.is_tile:
            new = off if a.offset is None else self.binary("add", a.offset, off)
            return pointer(a.param, a.dtype, new, a.name, a.scalar)
        # a scalar increment stays apart from the offset tile
        s = off if a.scalar is None else self.binary("add", a.scalar, off)
        if not isinstance(s, tensor):
            s = self.to_tensor(s, dt.int32)
        return pointer(a.param, a.dtype, a.offset, a.name, s)

    def ptr_offsets(self, ptr: pointer) -> tensor:
        """The full element offset of a pointer (tile part plus scalar part)."""
        off, s = ptr.offset, ptr.scalar
        if off is None:
            return s if s is not None else self.const(0)
        if s is None:
            return off
        return self.binary("add", off, s)

    def ptr_with(self, ptr: pointer, fn) -> pointer:
        """Apply a shape operation to the tile part of a pointer (a scalar-only pointer becomes a tile)."""
        off = ptr.offset if ptr.offset is not None else self.const(0)
        return pointer(ptr.param, ptr.dtype, fn(off), ptr.name, ptr.scalar)

    # ---- creation -------------------------------------------------------------------------------------
    def shape_arg(self, shape, what="shape") -> tuple[int, ...]:
        shape = unwrap(shape)
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(shape, list):
            shape = tuple(shape)
        if not isinstance(shape, tuple) or not all(isinstance(unwrap(s), int) for s in shape):
            raise ConstexprError(f"{what} must be a tuple of compile-time integers, got {shape!r}",
                                 hint="mark the sizes as dl.constexpr parameters")
        shape = tuple(unwrap(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise KernelTypeError(f"{what} {shape} has a dimension that is not positive")
        self._numel_check(shape)
        return shape

    def arange(self, start, end):
        start, end = unwrap(start), unwrap(end)
        if not isinstance(start, int) or not isinstance(end, int):
            raise ConstexprError("dl.arange bounds must be compile-time integers",
                                 hint="sizes must be integers known at compile time: pass an int to a `dl.constexpr` parameter")
        if end <= start:
            raise KernelTypeError(f"dl.arange({start}, {end}) is empty: end must be greater than start")
        self._numel_check((end - start,))
        return tensor(self.b.arange(start, end))

    def full(self, shape, value, dtype=None):
        shape = self.shape_arg(shape)
        value = unwrap(value)
        d = self.dtype_arg(dtype) if dtype is not None else None
        if isinstance(value, tensor):
            s = self.as_scalar(value, "the fill value")
            if d is not None:
                s = self.cast(s, d)
        else:
            if d is None:
                d = dt.scalar_dtype_of_python(value)
            s = self.const(value, d)
        return tensor(self.b.full(shape, s.handle))

    def splat(self, x: tensor, shape) -> tensor:
        if x.is_tile:
            return self.broadcast_to(x, shape)
        return tensor(self.b.full(tuple(shape), x.handle))

    # ---- shape ----------------------------------------------------------------------------------------
    def broadcast_to(self, x, shape):
        shape = self.shape_arg(shape)
        x = unwrap(x)
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.broadcast_to(off, shape))
        x = self.to_tensor(x)
        if x.is_scalar:
            return tensor(self.b.full(shape, x.handle))
        if x.shape == shape:
            return x
        if broadcast_shapes(x.shape, shape) != shape:
            raise KernelTypeError(f"cannot broadcast shape {x.shape} to {shape}")
        return tensor(self.b.broadcast(x.handle, shape))

    def reshape(self, x, shape):
        shape = unwrap(shape)
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(unwrap(s) for s in shape)
        x = unwrap(x)
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.reshape(off, shape))
        x = self.to_tensor(x)
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            shape = tuple(x.numel // known if s == -1 else s for s in shape)
        shape = self.shape_arg(shape) if shape else ()
        n = 1
        for s in shape:
            n *= s
        if n != x.numel:
            raise KernelTypeError(f"cannot reshape a tile of shape {_shape_text(x.shape)} ({x.numel} elements) "
                                  f"to {shape} ({n} elements)")
        if x.is_scalar:
            return tensor(self.b.full(shape, x.handle))
        if shape == x.shape:
            return x
        return tensor(self.b.reshape(x.handle, shape))

    def expand_dims(self, x, axis):
        x = unwrap(x)
        axes = unwrap(axis)
        axes = [unwrap(a) for a in axes] if isinstance(axes, (tuple, list)) else [axes]
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.expand_dims(off, tuple(axes)))
        x = self.to_tensor(x)
        shape = list(x.shape)
        for a in axes:
            if not isinstance(a, int):
                raise ConstexprError("expand_dims axis must be a compile-time integer")
            rank = len(shape) + 1
            if not -rank <= a < rank:
                raise KernelTypeError(f"axis {a} is out of range for a result of rank {rank}")
            shape.insert(a % rank, 1)
        if x.is_scalar:
            return tensor(self.b.full(tuple(shape), x.handle))
        return tensor(self.b.reshape(x.handle, tuple(shape)))

    def permute(self, x, perm):
        x = self.to_tensor(x)
        perm = tuple(unwrap(p) for p in (unwrap(perm) if isinstance(unwrap(perm), (tuple, list)) else (perm,)))
        if sorted(perm) != list(range(len(x.shape))):
            raise KernelTypeError(f"permutation {perm} does not fit a tile of rank {len(x.shape)}")
        if perm == tuple(range(len(perm))):
            return x
        return tensor(self.b.permute(x.handle, perm))

    def trans(self, x, dims=None):
        x = self.to_tensor(x)
        if dims is None or dims == ():
            if len(x.shape) < 2:
                return x
            perm = tuple(range(len(x.shape) - 2)) + (len(x.shape) - 1, len(x.shape) - 2)
            return self.permute(x, perm)
        return self.permute(x, dims)

    def cat(self, a, b, axis=0):
        a, b = self.pair(a, b)
        axis = unwrap(axis)
        if a.dtype is not b.dtype:
            res = dt.promote(a.dtype, b.dtype)
            a, b = self.cast(a, res), self.cast(b, res)
        if len(a.shape) != len(b.shape) or not a.shape:
            raise KernelTypeError(f"dl.cat needs two tiles of the same rank, got {a.shape} and {b.shape}")
        axis = axis % len(a.shape)
        if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis):
            raise KernelTypeError(f"dl.cat shapes {a.shape} and {b.shape} differ outside axis {axis}")
        return tensor(self.b.cat(a.handle, b.handle, axis))

    def join(self, a, b):
        a, b = self.pair(a, b)
        if a.shape != b.shape:
            s = broadcast_shapes(a.shape, b.shape)
            if s is None:
                raise KernelTypeError(f"dl.join shapes {a.shape} and {b.shape} do not broadcast")
            a, b = self.broadcast_to(a, s), self.broadcast_to(b, s)
        r = len(a.shape)
        return self.cat(self.expand_dims(a, r), self.expand_dims(b, r), axis=r)

    def flip(self, x, dim=None):
        """``x`` reversed along ``dim`` (the last dimension when None): a take with a descending index."""
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.flip needs a tile with at least one dimension, got a single value",
                                  hint="a single value is its own flip")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        n = x.shape[ax]
        if n == 1:
            return x
        rev = self.binary("sub", n - 1, self.arange(0, n))
        idx = self.reshape(rev, tuple(n if d == ax else 1 for d in range(len(x.shape))))
        return tensor(self.b.take(x.handle, idx.handle, ax))

    def interleave(self, a, b):
        """The elements of ``a`` and ``b`` alternating along the last dimension."""
        c = self.join(a, b)
        if len(c.shape) == 1:
            return c
        return self.reshape(c, c.shape[:-2] + (2 * c.shape[-2],))

    def gather(self, src, index, axis):
        """Triton's ``tl.gather``: ``out[..., i, ...] = src[..., index[..., i, ...], ...]`` along ``axis``."""
        src, index = self.to_tensor(src), self.to_tensor(index)
        if not src.shape or len(index.shape) != len(src.shape):
            raise KernelTypeError(f"dl.gather needs a tile and an index tile of the same rank, got shapes "
                                  f"{_shape_text(src.shape)} and {_shape_text(index.shape)}",
                                  hint="add unit dimensions to the index with idx[:, None] or dl.expand_dims")
        if not index.dtype.is_int:
            raise KernelTypeError(f"dl.gather indices must be integers, got {index.dtype}",
                                  hint="convert them with .to(dl.int32)")
        ax = self._axis(src, axis)
        for d in range(len(src.shape)):
            if d != ax and index.shape[d] != src.shape[d]:
                raise KernelTypeError(f"dl.gather index shape {index.shape} must match the source shape {src.shape} "
                                      f"in every dimension but the axis {ax}", hint="broadcast the index first")
        return tensor(self.b.take(src.handle, index.handle, ax))

    def sort(self, x, dim=None, descending=False):
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.sort needs a tile with at least one dimension, got a single value",
                                  hint="a single value is already sorted")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        if x.shape[ax] == 1:
            return x
        return tensor(self.b.sort(x.handle, ax, bool(descending)))

    def topk(self, x, k, dim=None):
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.topk needs a tile with at least one dimension, got a single value")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        k = unwrap(k)
        if not isinstance(k, int) or isinstance(k, bool):
            raise ConstexprError(f"dl.topk's k must be a compile-time integer, got {k!r}",
                                 hint="pass a literal or a dl.constexpr parameter")
        if not 1 <= k <= x.shape[ax]:
            raise KernelTypeError(f"dl.topk's k = {k} must lie in [1, {x.shape[ax]}] for a tile of shape {x.shape} "
                                  f"along dimension {ax}", hint="sort with dl.sort(x, descending=True) for all of them")
        s = self.sort(x, ax, True)
        return s if k == x.shape[ax] else self.slice(s, (0,) * len(x.shape),
                                                      tuple(k if d == ax else n for d, n in enumerate(x.shape)))

    def histogram(self, x, num_bins, mask=None):
        x = self.to_tensor(x)
        if not x.dtype.is_int:
            raise KernelTypeError(f"dl.histogram counts integer values, got {x.dtype}",
                                  hint="compute bin indices first, for example dl.floor(v * scale).to(dl.int32)")
        num_bins = unwrap(num_bins)
        if not isinstance(num_bins, int) or isinstance(num_bins, bool) or num_bins < 1:
            raise ConstexprError(f"dl.histogram's num_bins must be a positive compile-time integer, got {num_bins!r}",
                                 hint="pass a literal or a dl.constexpr parameter")
        self._numel_check((num_bins,))
        m = unwrap(mask)
        if m is not None and not isinstance(m, tensor):
            if not m:
                return self.full((num_bins,), 0, dt.int32)
            m = None
        shape = x.shape if x.shape else (1,)
        if m is not None:
            m = self.truth(m)
            if m.shape != shape and broadcast_shapes(m.shape, shape) != shape:
                raise KernelTypeError(f"dl.histogram mask shape {_shape_text(m.shape)} does not broadcast to the "
                                      f"input shape {shape}", hint="give the mask the input's shape")
            m = self.reshape(self.broadcast_to(m, shape), (x.numel,))
        x = self.reshape(x, (x.numel,))
        return tensor(self.b.histogram(x.handle, m.handle if m is not None else None, num_bins))

    def slice(self, x: tensor, starts, sizes) -> tensor:
        return tensor(self.b.slice(x.handle, tuple(starts), tuple(sizes)))

    # ---- reductions -----------------------------------------------------------------------------------
    def _axis(self, x: tensor, axis) -> int | None:
        axis = unwrap(axis)
        if axis is None:
            return None
        if not isinstance(axis, int):
            raise ConstexprError("the reduction axis must be a compile-time integer")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise KernelTypeError(f"axis {axis} is out of range for a tile of shape {_shape_text(x.shape)}",
                                  hint=f"axes run from 0 to {rank - 1}; negative axes count from the end")
        return axis % rank

    def reduce(self, x, opname: str, axis=None, keep_dims=False, dtype=None):
        x = self.to_tensor(x)
        keep_dims = bool(unwrap(keep_dims))
        if x.is_scalar:
            x = self.reshape(x, (1,))
        ax = self._axis(x, axis)
        if ax is None:
            rank = len(x.shape)
            flat = self.reshape(x, (x.numel,)) if rank != 1 else x
            r = self.reduce(flat, opname, 0, False, dtype)
            if keep_dims:
                r = self.reshape(r, (1,) * rank)
            return r
        res = x.dtype
        if opname in ("xor_sum", "or") and x.dtype.is_float:
            what = "dl.xor_sum" if opname == "xor_sum" else "dl.reduce_or"
            raise KernelTypeError(f"{what} needs an integer or boolean tile, got {x.dtype}",
                                  hint="compare first (x != 0), or reinterpret the bits with x.to(dl.int32, bitcast=True)")
        if opname in ("argmax", "argmin"):
            res = dt.int32
        elif opname in ("sum", "prod"):
            if dtype is not None:
                res = self.dtype_arg(dtype)
                x = self.cast(x, res)
            elif x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32):
                res = dt.int32
                x = self.cast(x, res)
        return tensor(self.b.reduce(x.handle, opname, ax, keep_dims, res))

    def scan(self, x, opname: str, axis=0, reverse=False, dtype=None):
        x = self.to_tensor(x)
        if x.is_scalar:
            raise KernelTypeError("a scan needs a tile")
        ax = self._axis(x, axis)
        if dtype is not None:
            d = self.dtype_arg(dtype)
            if d.is_bool:
                raise KernelTypeError("a scan cannot accumulate in int1", hint="pass dtype=dl.int32")
            x = self.cast(x, d)
        elif x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32):
            x = self.cast(x, dt.int32)
        return tensor(self.b.scan(x.handle, opname, ax, bool(unwrap(reverse))))

    # ---- memory ---------------------------------------------------------------------------------------
    def _mem_shapes(self, ptr: pointer, *others):
        shape = ptr.shape
        for o in others:
            if isinstance(o, tensor) and o.is_tile:
                s = broadcast_shapes(shape, o.shape)
                if s is None:
                    raise KernelTypeError(f"pointer shape {_shape_text(ptr.shape)} and operand shape {o.shape} "
                                          "do not broadcast")
                shape = s
        return shape

    def _offsets(self, ptr: pointer, shape) -> tensor:
        off = self.ptr_offsets(ptr)
        if shape and off.shape != shape:
            off = self.broadcast_to(off, shape)
        return off

    def _mask(self, mask, shape):
        mask = unwrap(mask)
        if mask is None:
            return None
        if not isinstance(mask, tensor):
            return None if mask else self.splat(self.const(False, dt.bool_), shape) if shape else self.const(False, dt.bool_)
        mask = self.truth(mask)
        if shape and mask.shape != shape:
            mask = self.broadcast_to(mask, shape)
        return mask

    def load(self, ptr, mask=None, other=None, attrs=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.load expects a pointer, got {_describe(ptr)}",
                                  hint="pass a tensor parameter plus offsets, for example x_ptr + offs")
        m = unwrap(mask)
        o = unwrap(other)
        if ptr.shape == () and isinstance(m, tensor) and m.numel == 1 and not (isinstance(o, tensor) and o.numel > 1):
            # a masked scalar load: one masked element through the vector unit, then into a register
            o1 = self._one(o) if isinstance(o, tensor) and o.is_tile else o
            return self.as_scalar(self.load(self._one_element(ptr), self._one(m, mask=True), o1, attrs))
        shape = self._mem_shapes(ptr, m if isinstance(m, tensor) else None, o if isinstance(o, tensor) else None)
        offs = self._offsets(ptr, shape)
        mk = self._mask(m, shape)
        oth = None
        if o is not None and mk is not None:
            oth = self.cast(o, ptr.dtype)
            if oth.is_tile and oth.handle.op is not None and oth.handle.op.kind == "full":
                oth = tensor(oth.handle.op.operands[0])  # a splat: its scalar is the fill value
            elif oth.is_tile:
                # a fill value that varies per element: load the masked elements, then select
                if shape and oth.shape != shape:
                    oth = self.broadcast_to(oth, shape)
                h = self.b.load(ptr.param, ptr.dtype, offs.handle, mk.handle, None, attrs)
                return self.where(mk, tensor(h), oth)
        h = self.b.load(ptr.param, ptr.dtype, offs.handle, mk.handle if mk is not None else None,
                        oth.handle if oth is not None else None, attrs)
        return tensor(h)

    def _one_element(self, ptr: pointer) -> pointer:
        """A scalar pointer as a pointer tile of shape (1,)."""
        return pointer(ptr.param, ptr.dtype, self.splat(self.ptr_offsets(ptr), (1,)), ptr.name)

    def _one(self, x: tensor, mask: bool = False) -> tensor:
        """A one-element value as a tile of shape (1,) (a scalar mask is made boolean first)."""
        if x.is_tile:
            return self.reshape(x, (1,))
        return self.splat(self.truth(x) if mask else x, (1,))

    def store(self, ptr, value, mask=None, attrs=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.store expects a pointer, got {_describe(ptr)}",
                                  hint="pass a tensor parameter plus offsets, for example out_ptr + offs")
        value = unwrap(value)
        if isinstance(value, pointer):
            raise KernelTypeError("cannot store a pointer", hint="store a loaded or computed value")
        v = self.cast(value, ptr.dtype)
        m = unwrap(mask)
        if ptr.shape == () and v.numel == 1 and (v.is_tile or isinstance(m, tensor)) and \
                not (isinstance(m, tensor) and m.is_tile and m.numel > 1):
            # one element from the vector unit, or a masked scalar store: a one-element DMA
            ptr = self._one_element(ptr)
            v = self._one(v)
            if isinstance(m, tensor):
                m = self._one(m, mask=True)
        shape = self._mem_shapes(ptr, v, m if isinstance(m, tensor) else None)
        offs = self._offsets(ptr, shape)
        v = self.cast(v, ptr.dtype)
        if shape and v.shape != shape:
            v = self.broadcast_to(v, shape)
        mk = self._mask(m, shape)
        self.b.store(ptr.param, offs.handle, v.handle, mk.handle if mk is not None else None, attrs)

    def atomic(self, opname, ptr, val, mask=None, cmp=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.atomic_{opname} expects a pointer, got {_describe(ptr)}")
        v = self.cast(val, ptr.dtype)
        m = unwrap(mask)
        c = self.cast(cmp, ptr.dtype) if cmp is not None else None
        if ptr.shape == () and all(x is None or not isinstance(x, tensor) or x.numel == 1 for x in (v, m, c)):
            # a scalar atomic: a one-element tile atomic, its old value read back into a register
            v, m, c = (self._one(x) if isinstance(x, tensor) else x for x in (v, m, c))
            return self.as_scalar(self.atomic(opname, self._one_element(ptr), v, m, c))
        shape = self._mem_shapes(ptr, v, m if isinstance(m, tensor) else None, c)
        offs = self._offsets(ptr, shape)
        v = self.cast(v, ptr.dtype)
        if shape and v.shape != shape:
            v = self.broadcast_to(v, shape)
        if c is not None:
            c = self.cast(c, ptr.dtype)
            if shape and c.shape != shape:
                c = self.broadcast_to(c, shape)
        mk = self._mask(m, shape)
        return tensor(self.b.atomic(opname, ptr.param, ptr.dtype, offs.handle, v.handle,
                                    mk.handle if mk is not None else None, c.handle if c is not None else None))

    # ---- matrix ---------------------------------------------------------------------------------------
    def dot(self, a, b, acc=None, out_dtype=None, allow_tf32=None):
        a, b = self.to_tensor(a), self.to_tensor(b)
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise KernelTypeError(f"dl.dot needs two 2-D tiles, got shapes {_shape_text(a.shape)} and "
                                  f"{_shape_text(b.shape)}")
        if a.shape[1] != b.shape[0]:
            raise KernelTypeError(f"dl.dot shapes {a.shape} @ {b.shape} do not chain: {a.shape[1]} != {b.shape[0]}",
                                  hint="the inner dimensions must match; transpose with dl.trans if needed")
        if a.dtype is not b.dtype:
            res = dt.promote(a.dtype, b.dtype)
            a, b = self.cast(a, res), self.cast(b, res)
        if a.dtype.is_int or a.dtype.is_bool:
            od = dt.int32  # as Triton: integer inputs accumulate in and give int32, whatever out_dtype says
        elif out_dtype is not None:
            od = self.dtype_arg(out_dtype)
        else:
            od = dt.float32
        shape = (a.shape[0], b.shape[1])
        acc = unwrap(acc)
        if acc is not None:
            acc = self.to_tensor(acc)
            if acc.shape != shape:
                raise KernelTypeError(f"dl.dot accumulator shape {_shape_text(acc.shape)} does not match the "
                                      f"product shape {shape}")
            od = acc.dtype if out_dtype is None and not od.is_int else od
            acc = self.cast(acc, od)
        return tensor(self.b.dot(a.handle, b.handle, acc.handle if acc is not None else None, od))


def _describe(v) -> str:
    v = unwrap(v)
    if isinstance(v, tensor):
        return f"a {'tile' if v.is_tile else 'scalar'} of {v.dtype}"
    if isinstance(v, block_pointer):
        return "a block pointer (use dl.load(block_ptr, boundary_check=...))"
    return f"{type(v).__name__} {v!r}"


def is_number(x) -> bool:
    return isinstance(unwrap(x), PY_NUMBER)


def float_const_ok(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


