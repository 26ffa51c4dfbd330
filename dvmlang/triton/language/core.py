"""``triton.language.core``: the language's core names (dtypes, ``constexpr``, ``tensor``, builtins), which
``tl`` itself re-exports, and the helpers packages and torch's Inductor import from it (``view``,
``_unwrap_if_constexpr``, ``CONSTEXPR_0``, ``TRITON_MAX_TENSOR_NUMEL``, ``must_use_result``, ``is_builtin``)."""

from ...language import *  # noqa: F403
from ...language import __all__ as _all
from ...language import (bfloat16, builtin, constexpr, dtype, float8e4nv, float8e5, float16, float32, float64,  # noqa: F401
                         int1, int8, int16, int32, int64, range, static_range, tensor, uint8, uint16, uint32, uint64,
                         view)
from ...frontend.blockptr import pointer_type  # noqa: F401

CONSTEXPR_0 = constexpr(0)
# Triton's limit of elements in one tile (a kernel's tiles here are bounded by on-chip memory instead)
TRITON_MAX_TENSOR_NUMEL = 1048576


def _unwrap_if_constexpr(o):
    """A ``constexpr``'s value, anything else itself (Triton's helper)."""
    return o.value if isinstance(o, constexpr) else o


def is_builtin(fn) -> bool:
    """Whether ``fn`` is a kernel-language builtin."""
    return bool(getattr(fn, "__dvm_builtin__", False))


def must_use_result(x, s=True):
    """Triton's marker of functions whose result must be used (a warning there): accepted, no effect."""
    return x if callable(x) else (lambda fn: fn)


__all__ = [*_all, "view", "_unwrap_if_constexpr", "CONSTEXPR_0", "TRITON_MAX_TENSOR_NUMEL", "is_builtin",
           "must_use_result", "pointer_type", "range", "static_range", "bfloat16", "float16", "float32", "float64",
           "float8e4nv", "float8e5", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
