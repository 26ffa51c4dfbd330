"""``dl.dot_scaled`` (Triton's ``tl.dot_scaled``): microscaled matrix products against a numpy reference.

The reference below is written from the OCP MX definitions, independently of dvmlang/language/scaled.py: e2m1 by
table, fp8 by ``ml_dtypes``, an e8m0 scale ``s`` as ``2^(s - 127)`` (255 is NaN), each operand rounded to the compute
dtype Triton's emulation uses (float16 if either format is fp16, else bfloat16) after scaling, and the product in
float64. The kernel accumulates in float32, so results agree to float32 accumulation error.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.errors import ConstexprError, KernelTypeError

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
M, N, K = 16, 8, 64
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_FP = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "bf16": ml_dtypes.bfloat16,
       "fp16": np.float16}


@dvmlang.kernel
def _dot_scaled_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, acc_ptr, o_ptr, AR: dl.constexpr, AC: dl.constexpr,
                       BR: dl.constexpr, BC: dl.constexpr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr,
                       FA: dl.constexpr, FB: dl.constexpr, FAST: dl.constexpr, LKP: dl.constexpr,
                       RKP: dl.constexpr):
    a = dl.load(a_ptr + dl.arange(0, AR)[:, None] * AC + dl.arange(0, AC)[None, :])
    b = dl.load(b_ptr + dl.arange(0, BR)[:, None] * BC + dl.arange(0, BC)[None, :])
    sa = None
    if sa_ptr is not None:
        sa = dl.load(sa_ptr + dl.arange(0, M)[:, None] * (K // 32) + dl.arange(0, K // 32)[None, :])
    sb = None
    if sb_ptr is not None:
        sb = dl.load(sb_ptr + dl.arange(0, N)[:, None] * (K // 32) + dl.arange(0, K // 32)[None, :])
    acc = None
    if acc_ptr is not None:
        acc = dl.load(acc_ptr + dl.arange(0, M)[:, None] * N + dl.arange(0, N)[None, :])
    c = dl.dot_scaled(a, sa, FA, b, sb, FB, acc=acc, fast_math=FAST, lhs_k_pack=LKP, rhs_k_pack=RKP)
    dl.store(o_ptr + dl.arange(0, M)[:, None] * N + dl.arange(0, N)[None, :], c)


def _run(a, sa, fa, b, sb, fb, acc=None, fast=False, lkp=True, rkp=True):
    o = np.zeros((M, N), np.float32)
    _dot_scaled_kernel[(1,)](a, sa, b, sb, acc, o, *a.shape, *b.shape, M, N, K, fa, fb, fast, lkp, rkp)
    return o


# ---- the reference --------------------------------------------------------------------------------------

def _compute_dtype(fa, fb):
    return np.float16 if "fp16" in (fa, fb) else ml_dtypes.bfloat16


def _decode(x, fmt, packed_axis):
    """float64 values of an operand; e2m1 bytes hold two values along ``packed_axis``, the low nibble first."""
    if fmt == "e2m1":
        nib = np.stack([x & 0xF, x >> 4], axis=packed_axis + 1)
        shape = list(x.shape)
        shape[packed_axis] *= 2
        nib = nib.reshape(shape)
        mag = _E2M1[nib & 7]
        return np.where(nib & 8, -mag, mag)
    return x.view(_FP[fmt]).astype(np.float64)


def _e8m0(s):
    s = s.astype(np.int64)
    return np.where(s == 255, np.nan, np.ldexp(1.0, s - 127))


def _reference(a, sa, fa, b, sb, fb, acc=None, lkp=True, rkp=True):
    """The product and, per element, the sum of the magnitudes of its terms (the accumulation error bound)."""
    cdt = _compute_dtype(fa, fb)

    def rounded(v):  # to the compute dtype and back
        return v.astype(cdt).astype(np.float64)

    with np.errstate(invalid="ignore", over="ignore"):  # float16 overflow to inf is part of the reference
        x = rounded(_decode(a, fa, 1 if lkp else 0))
        y = rounded(_decode(b, fb, 0 if rkp else 1))
        if sa is not None:
            x = rounded(x * np.repeat(rounded(_e8m0(sa)), 32, axis=1))
        if sb is not None:
            y = rounded(y * np.repeat(rounded(_e8m0(sb)), 32, axis=1).T)
        ref = x @ y
        bound = np.abs(x) @ np.abs(y)
    if acc is not None:
        ref = ref + acc
        bound = bound + np.abs(acc)
    return ref, bound


def _check(out, ref, bound):
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    inf = np.isinf(ref)  # a scaled value that overflows float16 is +-inf in both
    np.testing.assert_array_equal(out[inf], ref[inf])
    ok = np.isfinite(ref)
    err = np.abs(out[ok].astype(np.float64) - ref[ok])
    assert np.all(err <= 1e-5 * bound[ok] + 1e-30), err.max()


# ---- data -------------------------------------------------------------------------------------------------

def _operand(rng, fmt, shape):
    """Random operand bits of ``fmt`` (finite: fp8 NaN/inf patterns are replaced), ``shape`` in values."""
    if fmt in ("bf16", "fp16"):
        return rng.standard_normal(shape).astype(_FP[fmt])
    if fmt == "e2m1":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    special = 0x7F if fmt == "e4m3" else 0x7C
    return np.where(x & special == special, x & 0xBB, x).astype(np.uint8)


def _operands(rng, fa, fb, lkp=True, rkp=True):
    ashape = (M, K // 2) if fa == "e2m1" and lkp else (M // 2, K) if fa == "e2m1" else (M, K)
    bshape = (K // 2, N) if fb == "e2m1" and rkp else (K, N // 2) if fb == "e2m1" else (K, N)
    return _operand(rng, fa, ashape), _operand(rng, fb, bshape)


def _scales(rng, rows, cdt):
    lo, hi = (118, 136) if cdt is ml_dtypes.bfloat16 else (124, 131)  # float16 compute has little exponent range
    return rng.integers(lo, hi + 1, (rows, K // 32), dtype=np.uint8)


# ---- every pair of formats ------------------------------------------------------------------------------

@pytest.mark.parametrize("fa, fb", list(itertools.product(FORMATS, FORMATS)))
@pytest.mark.parametrize("scaled", ["both", "none"])
def test_every_format_pair_matches_the_reference(fa, fb, scaled):
    rng = np.random.default_rng([FORMATS.index(fa), FORMATS.index(fb), scaled == "both"])
    a, b = _operands(rng, fa, fb)
    cdt = _compute_dtype(fa, fb)
    sa, sb = (_scales(rng, M, cdt), _scales(rng, N, cdt)) if scaled == "both" else (None, None)
    _check(_run(a, sa, fa, b, sb, fb), *_reference(a, sa, fa, b, sb, fb))


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("bf16", "e2m1"), ("e4m3", "fp16"), ("fp16", "e5m2"),
                                    ("e5m2", "e4m3"), ("e2m1", "e2m1")])
@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_one_sided_scale(fa, fb, side):
    rng = np.random.default_rng(7)
    a, b = _operands(rng, fa, fb)
    cdt = _compute_dtype(fa, fb)
    sa = _scales(rng, M, cdt) if side == "lhs" else None
    sb = _scales(rng, N, cdt) if side == "rhs" else None
    _check(_run(a, sa, fa, b, sb, fb), *_reference(a, sa, fa, b, sb, fb))


@pytest.mark.parametrize("fa, fb", [("e2m1", "fp16"), ("e4m3", "bf16"), ("e5m2", "e2m1")])
def test_acc_is_added(fa, fb):
    rng = np.random.default_rng(3)
    a, b = _operands(rng, fa, fb)
    cdt = _compute_dtype(fa, fb)
    sa, sb = _scales(rng, M, cdt), _scales(rng, N, cdt)
    acc = rng.standard_normal((M, N)).astype(np.float32)
    _check(_run(a, sa, fa, b, sb, fb, acc=acc), *_reference(a, sa, fa, b, sb, fb, acc=acc))


@pytest.mark.parametrize("lkp, rkp", [(False, True), (True, False), (False, False)])
def test_e2m1_packed_along_m_or_n(lkp, rkp):
    rng = np.random.default_rng(11)
    a, b = _operands(rng, "e2m1", "e2m1", lkp, rkp)
    sa, sb = _scales(rng, M, ml_dtypes.bfloat16), _scales(rng, N, ml_dtypes.bfloat16)
    out = _run(a, sa, "e2m1", b, sb, "e2m1", lkp=lkp, rkp=rkp)
    _check(out, *_reference(a, sa, "e2m1", b, sb, "e2m1", lkp=lkp, rkp=rkp))


# ---- exact values ---------------------------------------------------------------------------------------

def test_every_e2m1_code_decodes_exactly():
    # lhs row i holds code i in every nibble (both halves of each byte); rhs is a column of ones
    codes = np.arange(16, dtype=np.uint8)
    a = np.repeat((codes | (codes << 4))[:, None], K // 2, axis=1)
    b = np.zeros((K, N), ml_dtypes.bfloat16)
    b[:, 0] = 1.0
    o = np.zeros((M, N), np.float32)
    _dot_scaled_kernel[(1,)](a, None, b, None, None, o, *a.shape, *b.shape, M, N, K, "e2m1", "bf16", False, True,
                             True)
    values = np.concatenate([_E2M1, -_E2M1])
    np.testing.assert_array_equal(o[:, 0], values * K)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_e8m0_boundaries(fmt):
    # e2m1 ones (0x22: both nibbles 1.0) against ones, each row of 32 sharing a scale: 0, 127, 128, 255
    a = np.full((M, K // 2), 0x22, np.uint8)
    sa = np.repeat(np.array([0, 127, 128, 255] * (M // 4), np.uint8)[:, None], K // 32, axis=1)
    b = np.ones((K, N), _FP[fmt])
    out = _run(a, sa, "e2m1", b, None, fmt)
    smallest = 2.0 ** -127 * K if fmt == "bf16" else 0.0  # 2^-127 is a bfloat16 subnormal, and 0 in float16
    expect = np.array([smallest, K, 2 * K, np.nan] * (M // 4), np.float32)
    np.testing.assert_array_equal(out, np.broadcast_to(expect[:, None], (M, N)))
    fast = _run(a, sa, "e2m1", b, None, fmt, fast=True)  # fast_math: scale 255 reads as +inf
    np.testing.assert_array_equal(fast[3::4], np.inf)
    np.testing.assert_array_equal(fast[1::4], K)


def test_fp8_nan_and_inf_propagate():
    a = np.full((M, K), 0x38, np.uint8)  # e4m3 1.0
    a[0, 5] = 0x7F  # e4m3 NaN
    b = np.full((K, N), 0x3C, np.uint8)  # e5m2 1.0
    b[3, 1] = 0x7C  # e5m2 +inf
    out = _run(a, None, "e4m3", b, None, "e5m2")
    assert np.isnan(out[0]).all()
    assert np.isinf(out[1:, 1]).all() and (out[1:, 1] > 0).all()
    np.testing.assert_array_equal(np.delete(out[1:], 1, axis=1), K)


def test_operands_may_have_their_fp_dtype_and_scales_int8():
    rng = np.random.default_rng(5)
    a, b = _operands(rng, "e4m3", "e5m2")
    sa, sb = _scales(rng, M, ml_dtypes.bfloat16), _scales(rng, N, ml_dtypes.bfloat16)
    ref = _reference(a, sa, "e4m3", b, sb, "e5m2")
    o = np.zeros((M, N), np.float32)
    _dot_scaled_kernel[(1,)](a.view(ml_dtypes.float8_e4m3fn), sa.view(np.int8), b.view(ml_dtypes.float8_e5m2), sb,
                             None, o, *a.shape, *b.shape, M, N, K, "e4m3", "e5m2", False, True, True)
    _check(o, *ref)


def test_triton_spelling():
    import dvmlang.triton.language as tl
    assert tl.dot_scaled is dl.dot_scaled


# ---- errors ---------------------------------------------------------------------------------------------

def _fails(exc, match, a, sa, fa, b, sb, fb, acc=None, lkp=True, rkp=True, out=None):
    o = np.zeros((M, N), np.float32)

    @dvmlang.kernel
    def k(a_ptr, sa_ptr, b_ptr, sb_ptr, acc_ptr, o_ptr, AR: dl.constexpr, AC: dl.constexpr, BR: dl.constexpr,
          BC: dl.constexpr, SAR: dl.constexpr, SAC: dl.constexpr, SBR: dl.constexpr, SBC: dl.constexpr,
          FA: dl.constexpr, FB: dl.constexpr, LKP: dl.constexpr, RKP: dl.constexpr, OUT: dl.constexpr):
        a = dl.load(a_ptr + dl.arange(0, AR)[:, None] * AC + dl.arange(0, AC)[None, :])
        b = dl.load(b_ptr + dl.arange(0, BR)[:, None] * BC + dl.arange(0, BC)[None, :])
        sa = None
        if sa_ptr is not None:
            sa = dl.load(sa_ptr + dl.arange(0, SAR)[:, None] * SAC + dl.arange(0, SAC)[None, :])
        sb = None
        if sb_ptr is not None:
            sb = dl.load(sb_ptr + dl.arange(0, SBR)[:, None] * SBC + dl.arange(0, SBC)[None, :])
        acc = None
        if acc_ptr is not None:
            acc = dl.load(acc_ptr + dl.arange(0, 4)[:, None] * 4 + dl.arange(0, 4)[None, :])
        if OUT is None:
            c = dl.dot_scaled(a, sa, FA, b, sb, FB, acc=acc, lhs_k_pack=LKP, rhs_k_pack=RKP)
        else:
            c = dl.dot_scaled(a, sa, FA, b, sb, FB, acc=acc, lhs_k_pack=LKP, rhs_k_pack=RKP, out_dtype=OUT)
        dl.store(o_ptr + dl.arange(0, 4)[:, None] * 4 + dl.arange(0, 4)[None, :], c[:4, :4])

    sas = sa.shape if sa is not None else (1, 1)
    sbs = sb.shape if sb is not None else (1, 1)
    with pytest.raises(exc, match=match):
        k[(1,)](a, sa, b, sb, acc, o, *a.shape, *b.shape, *sas, *sbs, fa, fb, lkp, rkp, out)


U8 = np.zeros((M, K), np.uint8)
U8_B = np.zeros((K, N), np.uint8)
BF_B = np.zeros((K, N), ml_dtypes.bfloat16)
S_A = np.full((M, K // 32), 127, np.uint8)


def test_error_unknown_format():
    _fails(KernelTypeError, "unknown lhs_format 'e3m3'", U8, None, "e3m3", U8_B, None, "e4m3")
    _fails(KernelTypeError, "unknown rhs_format 'e2m3'.*implements no dot", U8, None, "e4m3", U8_B, None, "e2m3")


def test_error_format_not_a_string():
    _fails(ConstexprError, "lhs_format must be a compile-time string", U8, None, 4, U8_B, None, "e4m3")


def test_error_operand_dtype_does_not_hold_the_format():
    _fails(KernelTypeError, "lhs operand has dtype dl.float16.*e2m1.*takes dl.uint8 or dl.int8",
           np.zeros((M, K // 2), np.float16), None, "e2m1", BF_B, None, "bf16")
    _fails(KernelTypeError, "rhs operand has dtype dl.bfloat16.*e4m3", U8, None, "e4m3", BF_B, None, "e4m3")


def test_error_k_mismatch():
    # an e2m1 lhs of (M, K) bytes holds 2K values per row
    _fails(KernelTypeError, "K = 128 values per row.*K = 64 per column", U8, None, "e2m1", BF_B, None, "bf16")


def test_error_scale_shape():
    _fails(KernelTypeError, r"lhs_scale has shape \(16, 4\).*needs \(16, 2\)", U8, np.zeros((M, 4), np.uint8),
           "e4m3", BF_B, None, "bf16")
    _fails(KernelTypeError, r"rhs_scale has shape \(16, 2\).*needs \(8, 2\): \(N, K / 32\)", U8, None, "e4m3",
           U8_B, np.zeros((M, 2), np.uint8), "e5m2")


def test_error_scale_dtype():
    _fails(KernelTypeError, "lhs_scale must be a uint8 tile.*float32", U8, S_A.astype(np.float32), "e4m3", BF_B,
           None, "bf16")


def test_error_k_not_a_multiple_of_32_with_a_scale():
    a = np.zeros((M, 48), np.uint8)
    _fails(KernelTypeError, "K to be a multiple of 32, got K = 48", a, np.zeros((M, 1), np.uint8), "e4m3",
           np.zeros((48, N), np.uint8), None, "e4m3")


def test_error_k_pack_needs_e2m1():
    _fails(KernelTypeError, "lhs_k_pack=False needs an e2m1 lhs", U8, None, "e4m3", BF_B, None, "bf16", lkp=False)


def test_error_out_dtype_and_acc():
    _fails(KernelTypeError, "out_dtype=dl.float16 is not supported", U8, None, "e4m3", BF_B, None, "bf16",
           out=dl.float16)
    _fails(KernelTypeError, r"acc must be a float32 tile of the product's shape \(16, 8\)", U8, None, "e4m3", BF_B,
           None, "bf16", acc=np.zeros((4, 4), np.float32))


# ---- batched (3-D) operands -------------------------------------------------------------------------------

@dvmlang.kernel
def _batched_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, o_ptr, B: dl.constexpr, M: dl.constexpr, N: dl.constexpr,
                    K: dl.constexpr):
    ib = dl.arange(0, B)[:, None, None]
    a = dl.load(a_ptr + ib * (M * K // 2) + dl.arange(0, M)[None, :, None] * (K // 2)
                + dl.arange(0, K // 2)[None, None, :])
    sa = dl.load(sa_ptr + ib * (M * K // 32) + dl.arange(0, M)[None, :, None] * (K // 32)
                 + dl.arange(0, K // 32)[None, None, :])
    b = dl.load(b_ptr + ib * (K * N) + dl.arange(0, K)[None, :, None] * N + dl.arange(0, N)[None, None, :])
    sb = dl.load(sb_ptr + ib * (N * K // 32) + dl.arange(0, N)[None, :, None] * (K // 32)
                 + dl.arange(0, K // 32)[None, None, :])
    c = dl.dot_scaled(a, sa, "e2m1", b, sb, "e4m3")
    dl.store(o_ptr + ib * (M * N) + dl.arange(0, M)[None, :, None] * N + dl.arange(0, N)[None, None, :], c)


def test_batched_operands():
    rng = np.random.default_rng(13)
    B = 2
    a = rng.integers(0, 256, (B, M, K // 2), dtype=np.uint8)
    b = _operand(rng, "e4m3", (B, K, N))
    sa = np.stack([_scales(rng, M, ml_dtypes.bfloat16) for _ in range(B)])
    sb = np.stack([_scales(rng, N, ml_dtypes.bfloat16) for _ in range(B)])
    o = np.zeros((B, M, N), np.float32)
    _batched_kernel[(1,)](a, sa, b, sb, o, B, M, N, K)
    for i in range(B):
        _check(o[i], *_reference(a[i], sa[i], "e2m1", b[i], sb[i], "e4m3"))


@pytest.mark.parametrize("fa, fb, side", [("e4m3", "e4m3", "rhs"), ("e5m2", "e2m1", "both"), ("e2m1", "e4m3", "lhs")])
def test_128_cube_fits_ub(fa, fb, side):
    # 128 x 128 x 128 with both operands decoded on the vector unit: the decode order and the grouped scale
    # multiply keep the live buffers within UB (a materialized (K, N) scale tile did not fit)
    m = n = k = 128
    rng = np.random.default_rng(17)
    a = _operand(rng, fa, (m, k // 2) if fa == "e2m1" else (m, k))
    b = _operand(rng, fb, (k // 2, n) if fb == "e2m1" else (k, n))
    sa = rng.integers(118, 137, (m, k // 32), dtype=np.uint8) if side in ("lhs", "both") else None
    sb = rng.integers(118, 137, (n, k // 32), dtype=np.uint8) if side in ("rhs", "both") else None
    o = np.zeros((m, n), np.float32)
    _dot_scaled_kernel[(1,)](a, sa, b, sb, None, o, *a.shape, *b.shape, m, n, k, fa, fb, False, True, True)
    _check(o, *_reference(a, sa, fa, b, sb, fb))
