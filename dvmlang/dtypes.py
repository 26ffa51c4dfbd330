"""Element types shared by every layer (the language re-exports them as ``dl.float32`` and so on).

Each dtype has a stable 4-bit code used in bytecode, a numpy dtype for the simulator, and the
promotion rules the frontend applies when two operands meet.
"""

from __future__ import annotations

import numpy as np
import ml_dtypes
from numpy.lib.stride_tricks import as_strided as _as_strided


class Flag(int):
    """A dtype predicate that reads as a bool (``d.is_int``, dvmlang's spelling) and can be called
    (``d.is_int()``, Triton's)."""

    def __call__(self) -> bool:
        return bool(self)

    def __repr__(self) -> str:
        return repr(bool(self))

    __str__ = __repr__


class DType:
    """An element type: ``dl.float32``, ``dl.int32``, ``dl.bfloat16`` ..."""

    __slots__ = ("name", "code", "np", "itemsize", "kind", "bits")

    def __init__(self, name: str, code: int, np_dtype, kind: str):
        self.name = name
        self.code = code
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.kind = kind  # "b" bool, "i" signed int, "u" unsigned int, "f" float
        self.bits = 1 if kind == "b" else self.itemsize * 8

    def __repr__(self) -> str:
        return f"dl.{self.name}"

    __str__ = __repr__

    def __reduce__(self):
        return (by_name, (self.name,))

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> Flag:
        """True for integer dtypes; callable too (``d.is_int()``, Triton's spelling)."""
        return Flag(self.kind in "iu")

    @property
    def is_signed(self) -> bool:
        return self.kind == "i" or self.kind == "f"

    @property
    def is_bool(self) -> Flag:
        """True for ``int1``; callable too (``d.is_bool()``, Triton's spelling)."""
        return Flag(self.kind == "b")

    # ---- Triton's host dtype API (``tl.float16.primitive_bitwidth``, ``x.dtype.is_floating()``, ...) ----------
    @property
    def primitive_bitwidth(self) -> int:
        return self.bits

    @property
    def fp_mantissa_width(self) -> int:
        if self.kind != "f":
            raise AttributeError(f"{self!r} is not a floating-point dtype: it has no fp_mantissa_width")
        return _MANTISSA[self.name]

    @property
    def exponent_bias(self) -> int:
        if self.kind != "f":
            raise AttributeError(f"{self!r} is not a floating-point dtype: it has no exponent_bias")
        return (1 << (self.bits - _MANTISSA[self.name] - 2)) - 1

    @property
    def int_bitwidth(self) -> int:
        if self.kind not in "iub":
            raise AttributeError(f"{self!r} is not an integer dtype: it has no int_bitwidth")
        return self.bits

    @property
    def int_signedness(self) -> str:
        return "signed" if self.kind == "i" else "unsigned"

    @property
    def scalar(self) -> "DType":
        return self

    def is_floating(self) -> bool:
        return self.kind == "f"

    def is_standard_floating(self) -> bool:
        return self.name in ("float16", "bfloat16", "float32", "float64")

    def is_int_signed(self) -> bool:
        return self.kind == "i"

    def is_int_unsigned(self) -> bool:
        return self.kind in "ub"

    def is_fp8(self) -> bool:
        return self.name.startswith("float8")

    def is_ptr(self) -> bool:
        return False

    def is_block(self) -> bool:
        return False

    def is_void(self) -> bool:
        return False

    def __getattr__(self, attr: str):
        # Triton's per-type predicates: is_fp16(), is_bf16(), is_fp8e4nv(), is_int32(), is_uint8(), ...
        if attr not in _PREDICATES:
            raise AttributeError(f"dtype {self!r} has no attribute {attr!r}")
        return lambda: self.name == _PREDICATES[attr]

    def to(self, *_args, **_kw):  # pragma: no cover - guard against confusing a dtype with a tile
        raise TypeError(f"{self!r} is a dtype, not a tile; call .to() on a tile value")


bool_ = DType("int1", 0, np.bool_, "b")
int8 = DType("int8", 1, np.int8, "i")
uint8 = DType("uint8", 2, np.uint8, "u")
int16 = DType("int16", 3, np.int16, "i")
uint16 = DType("uint16", 4, np.uint16, "u")
int32 = DType("int32", 5, np.int32, "i")
uint32 = DType("uint32", 6, np.uint32, "u")
int64 = DType("int64", 7, np.int64, "i")
uint64 = DType("uint64", 8, np.uint64, "u")
float16 = DType("float16", 9, np.float16, "f")
bfloat16 = DType("bfloat16", 10, ml_dtypes.bfloat16, "f")
float32 = DType("float32", 11, np.float32, "f")
float64 = DType("float64", 12, np.float64, "f")
float8e4nv = DType("float8e4nv", 13, ml_dtypes.float8_e4m3fn, "f")
float8e5 = DType("float8e5", 14, ml_dtypes.float8_e5m2, "f")

_MANTISSA = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52, "float8e4nv": 3, "float8e5": 2}
_PREDICATES = {"is_fp16": "float16", "is_bf16": "bfloat16", "is_fp32": "float32", "is_fp64": "float64",
               "is_fp8e4nv": "float8e4nv", "is_fp8e5": "float8e5", "is_int1": "int1",
               **{f"is_{k}{b}": f"{k}{b}" for k in ("int", "uint") for b in (8, 16, 32, 64)},
               **{f"is_fp8{k}": None for k in ("e4b15", "e4b8", "e5b16")}}

ALL: tuple[DType, ...] = (bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16,
                          bfloat16, float32, float64, float8e4nv, float8e5)
BY_CODE: dict[int, DType] = {d.code: d for d in ALL}
BY_NAME: dict[str, DType] = {d.name: d for d in ALL}
BY_NAME.update({"bool": bool_, "int1": bool_, "fp16": float16, "bf16": bfloat16, "fp32": float32,
                "fp64": float64, "half": float16, "float": float32, "double": float64})
_BY_NP: dict[np.dtype, DType] = {d.np: d for d in ALL}

# Array dtypes a launch accepts (issue contract): the rest of the table is usable inside kernels.
ARRAY_DTYPES = (float16, float32, int32, int8, bool_, bfloat16, uint8, int16, int64, float64, uint32,
                float8e4nv, float8e5)


def as_strided(a: np.ndarray, shape, strides, writeable: bool = False) -> np.ndarray:
    """``numpy.lib.stride_tricks.as_strided`` for every dtype dvmlang has: numpy cannot rebuild ml_dtypes arrays
    (bfloat16, fp8) from their array interface, so those are strided as same-size unsigned ints and viewed back."""
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        raw = a.view(np.dtype(f"u{a.itemsize}"))
        return _as_strided(raw, shape=shape, strides=strides, writeable=writeable).view(a.dtype)
    return _as_strided(a, shape=shape, strides=strides, writeable=writeable)


def by_name(name: str) -> DType:
    return BY_NAME[name]


def from_numpy(dt) -> DType | None:
    """The dvmlang dtype of a numpy dtype, or None if dvmlang has no such type."""
    return _BY_NP.get(np.dtype(dt))


# torch's dtypes by their names (``str(torch.float16)`` is ``"torch.float16"``), read without importing torch
_TORCH_NAMES = {"bool": bool_, "int8": int8, "uint8": uint8, "int16": int16, "uint16": uint16, "int32": int32,
                "uint32": uint32, "int64": int64, "uint64": uint64, "float16": float16, "bfloat16": bfloat16,
                "float32": float32, "float64": float64, "float8_e4m3fn": float8e4nv, "float8_e5m2": float8e5}


def lookup(value) -> DType | None:
    """Accept a DType, a numpy dtype/type, a torch dtype or a name; return the DType or None."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return BY_NAME.get(value)
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return _TORCH_NAMES.get(str(value).removeprefix("torch."))
    try:
        return from_numpy(value)
    except TypeError:
        return None


def promote(a: DType, b: DType, div_or_mod: bool = False) -> DType:
    """The type two runtime operands compute in: Triton's ``computation_type_impl``. float64 wins, then float32;
    float16 beats bfloat16 and fp8 (bfloat16 only stays with itself, and gives float32 next to anything else);
    two different fp8 types give float16; a float wins over an integer or bool. Between integers, C's usual
    conversions (``integer_promote``). ``div_or_mod`` (``/``, ``//``, ``%``) computes float16/bfloat16 in float32,
    as Triton does."""
    if a.is_float or b.is_float:
        if float64 in (a, b):
            return float64
        if float32 in (a, b):
            return float32
        if float16 in (a, b):
            return float32 if div_or_mod else float16
        if bfloat16 in (a, b):
            return bfloat16 if a is b and not div_or_mod else float32
        if a.is_float and b.is_float:
            return a if a is b else float16
        return a if a.is_float else b  # fp8 with an integer: Triton rejects it; the float wins here
    return integer_promote(a, b)


def promote_tensors(a: DType, b: DType) -> DType:
    """The common dtype of two tensor operands of ``dvmlang.ops`` (graphs, lazy and eager tensors): PyTorch's
    rules, which are numpy's for arrays, where kernels follow Triton's (``promote``). A float wins over an
    integer or bool and keeps its own dtype; between floats the wider, and float16 with bfloat16 (or two
    different fp8 types) gives float32; between integers of one signedness the wider; a signed and an unsigned
    integer give the narrowest signed type that holds both (uint8 with int8 is int16), and uint64 with a signed
    integer float64, as numpy."""
    if a is b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return float32 if a.bits <= 16 else a
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if (a.kind == "u") == (b.kind == "u"):
        return a if a.bits > b.bits else b
    s, u = (a, b) if b.kind == "u" else (b, a)
    if s.bits > u.bits:
        return s
    return {8: int16, 16: int32, 32: int64}.get(u.bits, float64)


def integer_promote(a: DType, b: DType) -> DType:
    """Triton's ``integer_promote_impl`` (C's usual arithmetic conversions; int1 counts as unsigned): the same
    signedness gives the wider; otherwise the unsigned type if it is at least as wide, else the signed one."""
    a_uns, b_uns = a.kind in "ub", b.kind in "ub"
    if a_uns == b_uns:
        return a if a.bits > b.bits else b
    if a_uns:
        return a if a.bits >= b.bits else b
    return b if b.bits >= a.bits else a


def int_fits(value: int, d: DType) -> bool:
    if d.is_bool:
        return value in (0, 1)
    info = np.iinfo(d.np)
    return info.min <= value <= info.max


def scalar_dtype_of_python(value) -> DType:
    """The dtype a Python literal takes when it must become a typed value on its own."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int32 if int_fits(value, int32) else int64
    return float32
