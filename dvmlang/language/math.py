"""Triton's ``tl.math`` spellings: each is the ``dl`` function of the same name (``max`` and ``min`` are the
elementwise ``maximum`` and ``minimum``). ``dl.math.exp`` works inside kernels, and ``import
dvmlang.language.math`` outside them.
"""

from . import elementwise as _ew

globals().update(_ew.MATH)
div_rn, fdiv, fma, sqrt_rn, umulhi = _ew.div_rn, _ew.fdiv, _ew.fma, _ew.sqrt_rn, _ew.umulhi
max, min = _ew.maximum, _ew.minimum  # noqa: A001 - Triton's spellings

__all__ = [*_ew.MATH, "div_rn", "fdiv", "fma", "max", "min", "sqrt_rn", "umulhi"]
