"""Special functions the simulator evaluates elementwise, vectorised in numpy (Python's ``math`` has them one
value at a time)."""

from __future__ import annotations

import numpy as np

# the coefficients of fdlibm's s_erf.c (Sun Microsystems, 1993; freely distributable), evaluated as it does
_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)


def _poly(x, cs):
    """cs[0] + x*(cs[1] + x*(...)), by Horner's rule (``c + x*r`` per term; in place: the same roundings)."""
    r = x * cs[-1]  # (x times an array full of cs[-1]: the same products)
    r += cs[-2]
    for c in cs[-3::-1]:
        r *= x
        r += c
    return r


def _one_plus(x, cs):
    """1 + x*(cs[0] + x*(cs[1] + ...))."""
    r = _poly(x, cs)
    r *= x
    r += 1.0
    return r


def _erf_regions(x: np.ndarray) -> np.ndarray:
    """``erf`` of a float64 array, each region's rational function evaluated on that region's elements alone
    (gathered by index, the results put back): the same operations on the same values as evaluating every region's
    function on every element and taking each element's region's (fdlibm's per element), in fewer element
    operations, for large arrays (tests/test_special.py compares the bits with that way)."""
    shape = x.shape
    x = x.reshape(-1)
    a = np.abs(x)
    out = np.copysign(np.ones_like(x), x)  # |x| >= 6 (and +-inf): +-1
    with np.errstate(all="ignore"):
        i = np.flatnonzero(a < 0.84375)
        if i.size:
            v = x[i]
            z = v * v
            out[i] = v + v * (_poly(z, _PP) / _one_plus(z, _QQ))
        i = np.flatnonzero((a >= 0.84375) & (a < 1.25))
        if i.size:
            s = a[i] - 1.0
            out[i] = np.copysign(_ERX + _poly(s, _PA) / _one_plus(s, _QA), x[i])
        for lo, hi_, num, den in ((1.25, 1 / 0.35, _RA, _SA), (1 / 0.35, 6.0, _RB, _SB)):
            i = np.flatnonzero((a >= lo) & (a < hi_))
            if i.size:
                v, av = x[i], a[i]
                s = 1.0 / (v * v)
                rs = _poly(s, num) / _one_plus(s, den)
                hi = (av.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)  # low word cleared
                out[i] = np.copysign(1.0 - np.exp(-hi * hi - 0.5625) * np.exp((hi - av) * (hi + av) + rs) / av, v)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = x[nan]
    return out.reshape(shape)


TABLE_MAX = 512  # erf takes its coefficients per element (fewer numpy calls) up to this many elements


def _table(*polys) -> np.ndarray:
    """The coefficients of ``polys`` (each lowest degree first) as rows of one array, each padded with zeros at the
    high end to the longest's length."""
    n = max(len(p) for p in polys)
    return np.array([list(p) + [0.0] * (n - len(p)) for p in polys], dtype=np.float64)


# erf's four rational approximations, one row per region (see erf): numerators and the denominators' polynomials
# (a column per region: row j is every region's coefficient of degree j)
_NUM = _table(_PP, _PA, _RA, _RB).T.copy()
_DEN = _table(_QQ, _QA, _SA, _SB).T.copy()


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 of float64 ``x``, elementwise, with fdlibm's method: x + x*P/Q below 0.84375, erx + P/Q of
    |x| - 1 up to 1.25, 1 - exp(-x^2 - 0.5625 + ...)/|x| with R/S of 1/x^2 up to 6, then +-1. Within one float64
    ulp of ``math.erf``; rounded to float32 or narrower, it gave ``math.erf``'s result on every value tested (all
    float16 and bfloat16 values, millions of float32 ones: tests/test_opdefs.py).

    Each element's four rational functions are one: its region's coefficients (``_NUM``, ``_DEN``: a row per region,
    gathered per element) by Horner's rule on its region's variable, ``c + t*r`` per term as fdlibm computes it (a
    row padded with zeros at its high end gives +0 until its own highest coefficient, which it then holds exactly:
    ``t`` is finite wherever the result is taken), so every element gets the bits of its region's polynomial alone,
    in about half the numpy calls of evaluating every region's (``_erf_regions``, which larger arrays take: there the
    gathers cost more than the calls; tests/test_special.py compares both ways with it as it was)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size > TABLE_MAX:
        return _erf_regions(x)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        z = x * x
        s = a - 1.0
        inv = 1.0 / z
        region = (a >= 0.84375).view(np.int8) + (a >= 1.25).view(np.int8) + (a >= 1 / 0.35).view(np.int8)
        t = np.where(a < 0.84375, z, np.where(a < 1.25, s, inv))  # (NaN: region 0, its result not taken)
        num = _NUM[:, region]
        den = _DEN[:, region]
        k = len(num) - 1
        p = num[k]
        q = den[k]
        for j in range(k - 1, -1, -1):  # (p = num[j] + t*p in place: rows of the gathered tables, used once)
            p *= t
            p += num[j]
            q *= t
            q += den[j]
        ratio = p / (1.0 + t * q)
        small = x + x * ratio
        mid = _ERX + ratio
        hi = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)  # |x| with its low word cleared
        tail = 1.0 - np.exp(-hi * hi - 0.5625) * np.exp((hi - a) * (hi + a) + ratio) / a
    out = np.where(a < 0.84375, small, np.copysign(np.where(a < 6.0, np.where(a < 1.25, mid, tail), 1.0), x))
    return np.where(np.isnan(x), x, out)
