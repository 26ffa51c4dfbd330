"""``triton.language`` (``import dvmlang.triton.language as tl``): every ``dvmlang.language`` name, plus Triton's
module layout (``tl.math``, ``tl.core``, ``tl.standard``, ``tl.extra.libdevice``) and host helpers
(``str_to_ty``). Names Triton has that cannot mean anything on the simulated NPU raise a ``DvmError`` saying
why when they are looked up (``UNSUPPORTED``)."""

from __future__ import annotations

from ... import dtypes as _dt
from ...errors import DvmError
from ...language import *  # noqa: F403 - dl is tl's core
from ...language import __all__ as _dl_all
from ...language import N_ROUNDS_DEFAULT, PropagateNan, TENSOR_METHODS  # noqa: F401
from ...language import bool_, builtin, cdiv, next_power_of_2, random, range, static_range, view  # noqa: F401, A004
from ...language import (bfloat16, constexpr, float8e4nv, float8e5, float16, float32, float64, int1, int8,
                         int16, int32, int64, uint8, uint16, uint32, uint64)
from ...frontend.blockptr import pointer_type  # noqa: F401 - int64 addresses from pointer tables (tutorial 08)

pi32_t = pointer_type(int32)  # Triton's name for a pointer to int32
from . import core, extra, math, standard  # noqa: F401 - Triton's submodules

# Triton's short dtype names (str_to_ty and signatures)
_SHORT = {"i1": int1, "i8": int8, "i16": int16, "i32": int32, "i64": int64, "u1": int1, "u8": uint8,
          "u16": uint16, "u32": uint32, "u64": uint64, "fp16": float16, "bf16": bfloat16, "fp32": float32,
          "fp64": float64, "fp8e4nv": float8e4nv, "fp8e5": float8e5}


def str_to_ty(name: str, c=None):
    """Triton's dtype from its short name (``"fp32"``, ``"i32"``, ...) or a full one (``"float32"``)."""
    if name.startswith("*"):
        raise DvmError(f"str_to_ty({name!r}): pointer types are not values in dvmlang; a pointer's element dtype is "
                       f"str_to_ty({name[1:]!r})")
    d = _SHORT.get(name) or _dt.BY_NAME.get(name)
    other = {"fp8e4b15": float8e4b15, "fp8e4b8": float8e4b8, "fp8e5b16": float8e5b16}.get(name)
    if other is not None or name in _FP8_OTHER:
        o = other or globals()[name]
        raise DvmError(f"str_to_ty({name!r}): {o.name} is not supported by dvmlang: {o.reason}")
    if d is None:
        raise DvmError(f"str_to_ty: unknown dtype {name!r}; dvmlang has {', '.join(sorted(_SHORT))}")
    return d


class _DTypeClass(type):
    """``tl.dtype`` is Triton's dtype class: ``isinstance(tl.float32, tl.dtype)`` holds (every dvmlang dtype is
    one), and ``tl.dtype("fp16")`` returns dvmlang's dtype of that name (``str_to_ty``)."""

    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, _dt.DType)

    def __call__(cls, name):
        return str_to_ty(name)


class dtype(metaclass=_DTypeClass):  # noqa: N801 - Triton's name
    SINT_TYPES = ["int8", "int16", "int32", "int64"]
    UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
    FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
    STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
    OTHER_TYPES = ["void"]


# Triton names with no meaning here, and why (a lookup raises DvmError with the reason)
UNSUPPORTED = {
    "inline_asm_elementwise": "there is no GPU assembly on the simulated NPU; write the operation with tl functions",
    "map_elementwise": "not implemented; write the operation with tl functions",
}


class UnsupportedDType:
    """Triton's dtypes of other vendors' fp8 formats: named, so programs that list them import, and refused where
    they would be used (``str_to_ty`` raises; a kernel given one gets a dtype error)."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason

    def __repr__(self) -> str:
        return f"tl.{self.name} (not supported by dvmlang: {self.reason})"

    __str__ = __repr__

    @property
    def primitive_bitwidth(self) -> int:
        return 8

    def __getattr__(self, attr):
        raise UnsupportedDTypeError(f"tl.{self.name} has no `{attr}`: it is not supported by dvmlang: {self.reason}")


class UnsupportedDTypeError(DvmError, AttributeError):
    """An attribute of an unsupported dtype (an ``AttributeError`` too, so ``getattr(x, name, default)`` works)."""


_FP8_OTHER = {"float8e4b15": "the fp8 e4m3 format with exponent bias 15 is a pre-Hopper NVIDIA format",
              "float8e4b8": "the fp8 e4m3 fnuz format is AMD's", "float8e5b16": "the fp8 e5m2 fnuz format is AMD's"}
float8e4b15, float8e4b8, float8e5b16 = (UnsupportedDType(n, r + "; dvmlang has float8e4nv and float8e5")
                                        for n, r in _FP8_OTHER.items())


def __getattr__(name):
    if name in UNSUPPORTED:
        raise DvmError(f"tl.{name} is not available in dvmlang: {UNSUPPORTED[name]}")
    raise AttributeError(f"module 'dvmlang.triton.language' has no attribute {name!r}")


__all__ = [*(n for n in _dl_all if n != "dtype"), "dtype", "str_to_ty", "range", "static_range", "cdiv",
           "next_power_of_2", "view", "random", "core", "extra", "math", "standard", "PropagateNan", "pointer_type", "pi32_t"]
