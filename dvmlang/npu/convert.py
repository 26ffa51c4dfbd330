"""Value conversions shared by the units: dtype casts (saturating float -> integer, round-toward-zero float
narrowing) and scalar registers lifted to tile-shaped arrays."""

from __future__ import annotations

import numpy as np


def cast(a: np.ndarray, npdt) -> np.ndarray:
    if npdt == np.bool_:
        return a != 0
    src = a.dtype
    if np.issubdtype(npdt, np.integer) and (np.issubdtype(src, np.floating) or src.kind == "V"):
        info = np.iinfo(npdt)
        x = np.asarray(a, dtype=np.float64)
        x = np.where(np.isnan(x), 0, np.trunc(x))
        # compare with the bounds as floats: 2**63 - 1 is 2**63 in float64, and converting that would wrap
        big, small = x >= float(info.max), x <= float(info.min)
        inside = np.where(big | small, 0, x).astype(npdt)
        top, bottom = np.dtype(npdt).type(info.max), np.dtype(npdt).type(info.min)
        return np.where(big, top, np.where(small, bottom, inside))
    return a.astype(npdt)


def cast_rtz(a: np.ndarray, npdt) -> np.ndarray:
    """A float converted to a narrower float, rounded toward zero: the nearest value, moved one step toward
    zero wherever rounding went away from zero (so a finite overflow gives the largest finite value)."""
    r = np.asarray(a.astype(npdt))
    wide = np.asarray(a, dtype=np.float64)
    away = (np.abs(r.astype(np.float64)) > np.abs(wide)) | (np.isnan(r.astype(np.float64)) & ~np.isnan(wide))
    if not away.any():
        return r
    bits = r.view(np.dtype(f"u{r.dtype.itemsize}"))
    return np.where(away, bits - 1, bits).astype(bits.dtype).view(npdt)


def lift(v, rank: int, npdt) -> np.ndarray:
    """A register value as an array (rows, 1, ..., 1) of dtype ``npdt``."""
    a = np.asarray(v)
    if a.dtype != npdt:
        a = a.astype(npdt)
    if a.ndim == 0:
        return a.reshape((1,) * (rank + 1))
    return a.reshape((a.shape[0],) + (1,) * rank)
