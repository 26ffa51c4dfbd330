"""dvmlang/special.py: erf's one-table evaluation gives the bits of evaluating each region's rational function on
its own (the way it was computed before, kept here as the reference), on every float16 and bfloat16 value,
millions of float32 ones, the region boundaries, the edges (+-0, +-inf, NaN, subnormals, the largest values), as
float64 and rounded through opdefs' erf, in arrays of any shape and length, and as a 0-d value."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from dvmlang import opdefs, special

_P = special


def _poly(x, cs):
    r = np.full_like(x, cs[-1])
    for c in cs[-2::-1]:
        r = c + x * r
    return r


def _one_plus(x, cs):
    return 1.0 + x * _poly(x, cs)


def reference_erf(x):
    """special.erf as it was (every region's rational function on every element, then the region's taken)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        z = x * x
        small = x + x * (_poly(z, _P._PP) / _one_plus(z, _P._QQ))
        s = a - 1.0
        mid = _P._ERX + _poly(s, _P._PA) / _one_plus(s, _P._QA)
        s = 1.0 / z
        rs = np.where(a < 1 / 0.35, _poly(s, _P._RA) / _one_plus(s, _P._SA), _poly(s, _P._RB) / _one_plus(s, _P._SB))
        hi = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
        tail = 1.0 - np.exp(-hi * hi - 0.5625) * np.exp((hi - a) * (hi + a) + rs) / a
    out = np.where(a < 0.84375, small, np.copysign(np.where(a < 6.0, np.where(a < 1.25, mid, tail), 1.0), x))
    return np.where(np.isnan(x), x, out)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    g, w = got.view(bits) if got.ndim else got.reshape(1).view(bits), \
        want.view(bits) if want.ndim else want.reshape(1).view(bits)
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert not len(bad), f"{len(bad)} values differ, first at {bad[:5]}"


def _both_ways(x):
    """special.erf of ``x`` whole (the per-region way above ``TABLE_MAX`` elements) and in pieces of at most
    ``TABLE_MAX`` (the table's way), each against the reference."""
    want = reference_erf(x)
    _same_bits(special.erf(x), want)
    flat, w = x.reshape(-1), want.reshape(-1)
    n = special.TABLE_MAX
    for lo in range(0, len(flat), n):
        _same_bits(special.erf(flat[lo:lo + n]), w[lo:lo + n])


def _edges() -> np.ndarray:
    bounds = [0.84375, 1.25, 1 / 0.35, 6.0]
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
            1e-310, np.finfo(np.float64).max, -np.finfo(np.float64).max, 1e154, 1e155, 1e-200, 1.0, -1.0]
    for b in bounds:
        for v in (b, -b):
            vals += [v, np.nextafter(v, np.inf), np.nextafter(v, -np.inf)]
            f = np.float32(v)
            vals += [float(f), float(np.nextafter(f, np.float32(np.inf))), float(np.nextafter(f, np.float32(-np.inf)))]
    vals += [float(np.float32(1e-45)), float(np.float32(1.17549435e-38)), float(np.float32(3.4028235e38))]
    return np.array(vals, dtype=np.float64)


def test_erf_edges_and_region_bounds_match_the_reference():
    x = _edges()
    _same_bits(special.erf(x), reference_erf(x))
    _both_ways(np.tile(x, 40))
    nan_payload = np.array([0x7FF8000000000123, 0xFFF4000000000001], dtype=np.uint64).view(np.float64)
    _same_bits(special.erf(nan_payload), reference_erf(nan_payload))
    for v in x:  # one value at a time, 0-d and as a one-element array
        _same_bits(special.erf(np.float64(v)), reference_erf(np.float64(v)))
        _same_bits(special.erf(np.array([v])), reference_erf(np.array([v])))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_erf_every_half_value_matches_the_reference(dtype):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    with np.errstate(all="ignore"):  # (NaN payloads cast, as a launch runs: quietly)
        wide = x.astype(np.float64)
        _both_ways(wide)
        _same_bits(opdefs._erf(x), reference_erf(wide).astype(dtype))


def test_erf_float32_values_match_the_reference():
    rng = np.random.default_rng(38)
    x = rng.integers(0, 1 << 32, size=1 << 21, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (rng.standard_normal(1 << 20) * rng.choice([0.3, 1.0, 3.0, 10.0], 1 << 20)).astype(np.float32)
    for v in (x, near):
        with np.errstate(all="ignore"):  # (NaN payloads cast)
            wide = v.astype(np.float64)
            _both_ways(wide)
            _same_bits(opdefs._erf(v), reference_erf(wide).astype(np.float32))


def test_erf_any_shape_and_length_matches_the_reference():
    """numpy may take another loop for a short or strided array; every element gets its region's bits anyway."""
    rng = np.random.default_rng(7)
    for n in list(range(0, 40)) + [63, 64, 65, 255, 256, 257, 511, 512, 513, 1000]:
        x = rng.standard_normal(n) * rng.choice([0.5, 2.0, 8.0])
        _same_bits(special.erf(x), reference_erf(x))
    x = rng.standard_normal((5, 7, 9)) * 2
    _same_bits(special.erf(x), reference_erf(x))
    strided = x[:, ::2, 1::3]
    _same_bits(special.erf(strided), reference_erf(strided))
    _same_bits(special.erf(x.T), reference_erf(x.T))
