"""Conversions, promotion and arithmetic on kernel values: constants, casts, Triton's type promotion
(weak Python numbers, signedness checks, int1 wrap-around), binary and unary operators, comparisons,
``where``, and the few float-only or fused spellings. Python numbers on both sides fold at compile time.

The op vocabulary (``dvmlang.opdefs``) gives the spellings, the folding functions and the traits
(division, bitwise, float-only, integer identity) these rules read.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ... import opdefs
from ...errors import ConstexprError, KernelTypeError
from ...ir.builder import broadcast_shapes
from ..blockptr import pointer_from_table, pointer_type
from ..values import PY_NUMBER, number, pointer, tensor, unwrap

# from the op vocabulary: constant folding of Python numbers, spellings, Triton's div_or_mod promotion
_PY_BINARY = {name: op.fold for name, op in opdefs.BINARY.items() if op.fold}
_PY_COMPARE = {name: op.fold for name, op in opdefs.COMPARE.items()}
SYMBOL = {name: op.spelling for name, op in opdefs.ELEMENTWISE.items()}
_DIVISION = frozenset(name for name, op in opdefs.BINARY.items() if "division" in op.traits)
_BITWISE = frozenset(name for name, op in opdefs.BINARY.items() if "bitwise" in op.traits)


class ArithmeticOps:
    """The ``Semantic``'s conversions, promotion and arithmetic."""

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
        if isinstance(unwrap(dtype), pointer_type):  # an int64 address from a pointer table (blockptr.py)
            return pointer_from_table(self, x, unwrap(dtype))
        dtype = self.dtype_arg(dtype)
        rounding = unwrap(rounding)
        if rounding is not None and not bitcast and isinstance(unwrap(x), tensor) and unwrap(x).dtype is dtype:
            return unwrap(x)  # a cast to its own dtype is the value itself, rounding mode or not (Triton's rule)
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

    # ---- arithmetic -----------------------------------------------------------------------------------
    def runtime_numbers(self, *values):
        """``values`` with each ``number`` (a name bound to a Python number) made a runtime constant of its dtype,
        as Triton's runtime scalar meets a tensor."""
        return [self.const(v.value, v.dtype) if v.__class__ is number else v for v in values]

    @staticmethod
    def _foldable(values) -> bool:
        """At least one ``number`` and otherwise Python numbers: Triton's runtime arithmetic, done now."""
        return any(v.__class__ is number for v in values) and \
            all(v.__class__ is number or unwrap(v).__class__ in (int, float, bool) for v in values)

    def fold_numbers(self, opname: str, values, table) -> number:
        """``opname`` of ``values`` (``number``s and Python numbers) as the device computes it on scalars of
        Triton's dtypes: a Python number next to a ``number`` takes its dtype when it fits (weak typing), the
        dtypes promote as for tensors, integer ``//`` truncates and ``x // 0`` is 0 (the device's ``div``)."""
        typed = [v.dtype for v in values if v.__class__ is number]
        dts = []
        for v in values:
            if v.__class__ is number:
                dts.append(v.dtype)
                continue
            x, other = unwrap(v), typed[0]
            if isinstance(x, bool) or (isinstance(x, int) and other.is_int and dt.int_fits(x, other)):
                dts.append(other)
            elif isinstance(x, int):
                dts.append(other if other.is_float else dt.int64)
            else:
                dts.append(other if other.is_float else dt.float32)
        division = opname in _DIVISION
        res = dts[0]
        for d in dts[1:]:
            res = dt.promote(res, d, division)
        if opname == "truediv" and not res.is_float:
            res = dt.float32
        if opname == "floordiv" and res.is_int:
            opname = "div"
        args = [np.asarray(unwrap(v), dtype=res.np) for v in values]
        with np.errstate(all="ignore"):
            r = np.asarray(table[opname].ref(*args))
        if table is opdefs.COMPARE:
            return number(bool(r), dt.bool_)
        return number(r.astype(res.np).item(), res)

    def binary(self, opname: str, a, b):
        if self._foldable((a, b)) and opname in opdefs.BINARY and not dt.promote(
                *(x.dtype if x.__class__ is number else dt.scalar_dtype_of_python(unwrap(x)) for x in (a, b))).is_bool:
            return self.fold_numbers(opname, (a, b), opdefs.BINARY)
        a, b = self.runtime_numbers(a, b)
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
            raise KernelTypeError(f"Cannot use `{SYMBOL[opname]}` with {a.dtype} and {b.dtype} because they have "
                                  "different signedness (Triton's rule and wording)",
                                  hint="cast one of them, for example .to(dl.int32)")
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
                raise KernelTypeError(f"invalid operands of type {a.dtype} and {b.dtype} for `{SYMBOL[opname]}`: it "
                                      "needs integer operands")
        elif a.dtype.is_float or b.dtype.is_float:
            # "invalid operands of type" is Triton's wording, which its tests and users match
            raise KernelTypeError(f"invalid operands of type {a.dtype} and {b.dtype} for `{SYMBOL[opname]}`: it needs "
                                  "integer or boolean operands",
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
        if self._foldable((a, b)):
            return self.fold_numbers(opname, (a, b), opdefs.COMPARE)
        a, b = self.runtime_numbers(a, b)
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
        if x.__class__ is number and opname in opdefs.UNARY and opname in ("neg", "invert", "abs") and \
                not x.dtype.is_bool:
            with np.errstate(all="ignore"):
                r = opdefs.UNARY[opname].ref(np.asarray(x.value, dtype=x.dtype.np))
            return number(np.asarray(r).astype(x.dtype.np).item(), x.dtype)
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
