"""Kernel numerics are Triton's: each test states Triton's rule (from triton/language/semantic.py, standard.py and
Triton's own test_core.py / test_standard.py) as a numpy reference written here, independent of dvmlang."""

import math

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.errors import KernelTypeError


@dvmlang.kernel
def binop_k(x_ptr, y_ptr, o_ptr, N: dl.constexpr, OP: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    if OP == "<<":
        r = x << y
    elif OP == ">>":
        r = x >> y
    elif OP == "+":
        r = x + y
    elif OP == "-":
        r = x - y
    elif OP == "*":
        r = x * y
    elif OP == "//":
        r = x // y
    elif OP == "%":
        r = x % y
    elif OP == "/":
        r = x / y
    elif OP == "maximum":
        r = dl.maximum(x, y)
    elif OP == "minimum":
        r = dl.minimum(x, y)
    else:
        r = dl.abs(x)
    dl.static_assert(r.dtype == o_ptr.dtype, "result dtype differs from the output's")
    dl.store(o_ptr + offs, r)


def _run_binop(op, x, y, out_dtype):
    out = np.zeros(x.shape, out_dtype)
    binop_k[(1,)](x, y, out, N=x.size, OP=op)
    return out


# ---- 1. integer promotion (integer_promote_impl) and shifts ----------------------------------------------

def _triton_int_promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """Triton's integer_promote_impl (C's usual arithmetic conversions; int1 counts as unsigned)."""
    a_un, b_un = a.kind in "ub", b.kind in "ub"
    a_bits, b_bits = (1 if a.kind == "b" else a.itemsize * 8), (1 if b.kind == "b" else b.itemsize * 8)
    if a_un == b_un:
        return a if a_bits > b_bits else b
    if a_un:
        return a if a_bits >= b_bits else b
    return b if b_bits >= a_bits else a


INTS = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64]


@pytest.mark.parametrize("dx", INTS)
@pytest.mark.parametrize("dy", [np.uint8, np.uint32, np.int8, np.int32])
@pytest.mark.parametrize("op", ["<<", ">>"])
def test_shift_result_type_is_the_promoted_type(dx, dy, op):
    """`uint8 << uint32` is uint32 (was uint8: the count was cast to the left operand's type). As Triton's
    test_shift_op: the shift happens in the promoted type, and `>>` is arithmetic when the left operand is signed."""
    rng = np.random.default_rng(1)
    x = rng.integers(np.iinfo(dx).min, np.iinfo(dx).max, 64, endpoint=True).astype(dx)
    rd = np.dtype(_triton_int_promote(np.dtype(dx), np.dtype(dy)))
    bits = rd.itemsize * 8
    y = rng.integers(0, min(bits, np.iinfo(dy).max + 1), 64).astype(dy)
    got = _run_binop(op, x, y, rd)
    xv = [int(v) for v in x]
    if op == "<<":
        ref = [(a << int(s)) % (1 << bits) for a, s in zip(xv, y)]
    else:
        ref = [(a >> int(s)) % (1 << bits) for a, s in zip(xv, y)]  # Python's >> floors: arithmetic on signed
    assert [int(v) % (1 << bits) for v in got] == ref


@pytest.mark.parametrize("dx", INTS)
@pytest.mark.parametrize("dy", INTS)
def test_integer_add_promotes_like_triton(dx, dy):
    """Triton's test_bin_op override table: int8 + uint16 is uint16, int16 + uint8 is int16, int32 + uint32 uint32."""
    rd = np.dtype(_triton_int_promote(np.dtype(dx), np.dtype(dy)))
    x = np.arange(1, 9).astype(dx)
    y = np.arange(3, 11).astype(dy)
    got = _run_binop("+", x, y, rd)
    np.testing.assert_array_equal(got, (x.astype(np.int64) + y.astype(np.int64)).astype(rd))


# ---- 2. reverse associative_scan: operand order ----------------------------------------------------------

@dvmlang.kernel
def first_of(a, b):
    return a


@dvmlang.kernel
def linear_rec(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@dvmlang.kernel
def scan_k(x_ptr, y_ptr, o_ptr, N: dl.constexpr, REVERSE: dl.constexpr, FN: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    if FN == 0:
        r = dl.associative_scan(x, 0, first_of, reverse=REVERSE)
    else:
        _, r = dl.associative_scan((x, y), 0, linear_rec, reverse=REVERSE)
    dl.store(o_ptr + offs, r)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_a_non_commutative_combine(n, reverse):
    """Triton's test_scan2d: a reverse scan is the forward scan of the flipped sequence, flipped back, so
    `get_first_element` gives the last element everywhere (was the elements unchanged)."""
    x = np.arange(1, n + 1, dtype=np.int32)
    y = (np.arange(n, dtype=np.int32) % 3) - 1
    out = np.zeros(n, np.int32)
    scan_k[(1,)](x, y, out, N=n, REVERSE=reverse, FN=0)
    np.testing.assert_array_equal(out, np.full(n, x[-1] if reverse else x[0]))
    xs, ys = (x[::-1], y[::-1]) if reverse else (x, y)
    acc, ref = 0, []
    for a, b in zip(xs, ys):
        acc = int(a) * acc + int(b)
        ref.append(acc)
    ref = np.array(ref[::-1] if reverse else ref, dtype=np.int64).astype(np.int32)
    scan_k[(1,)](x, y, out, N=n, REVERSE=reverse, FN=1)
    np.testing.assert_array_equal(out, ref)


# ---- 3. integer dot -------------------------------------------------------------------------------------

@dvmlang.kernel
def idot_k(a_ptr, b_ptr, o_ptr, M: dl.constexpr, K: dl.constexpr, N: dl.constexpr, OD: dl.constexpr):
    rm, rk, rn = dl.arange(0, M), dl.arange(0, K), dl.arange(0, N)
    a = dl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = dl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = dl.dot(a, b, out_dtype=OD)
    dl.static_assert(c.dtype == dl.int32, "an integer dot gives int32")
    dl.store(o_ptr + rm[:, None] * N + rn[None, :], c)


@pytest.mark.parametrize("od", [None, dl.int32, dl.int8, dl.float32])
def test_integer_dot_accumulates_and_returns_int32(od):
    """Triton: integer inputs give an int32 result whatever out_dtype says (was out_dtype=int8 wrapping to int8,
    and out_dtype=float32 accumulating in float32)."""
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (300, 6)).astype(np.int8)
    a[0, :] = 127
    b[:, 0] = 127  # 300 * 127 * 127 > 2**24: a float32 accumulator would round
    out = np.zeros((5, 6), np.int32)
    idot_k[(1,)](a, b, out, M=5, K=300, N=6, OD=od)
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


# ---- 4. int1 arithmetic wraps ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["+", "-", "*", "maximum", "minimum", "abs"])
def test_int1_arithmetic(op):
    """Triton's test_int1_bin_op_wraparound: int1 is a 1-bit unsigned integer, so True + True is False
    (was 2 in int32); maximum/minimum/abs of bools are or/and/identity (were invalid bytecode)."""
    x = np.array([False, False, True, True])
    y = np.array([False, True, False, True])
    xi, yi = x.astype(np.int64), y.astype(np.int64)
    ref = {"+": (xi + yi) % 2, "-": (xi - yi) % 2, "*": xi * yi, "maximum": np.maximum(xi, yi),
           "minimum": np.minimum(xi, yi), "abs": xi}[op].astype(bool)
    np.testing.assert_array_equal(_run_binop(op, x, y, np.bool_), ref)


# ---- 5. swizzle2d ---------------------------------------------------------------------------------------

@dvmlang.kernel
def swizzle_k(o_ptr, SI: dl.constexpr, SJ: dl.constexpr, SG: dl.constexpr):
    i = dl.arange(0, SI)[:, None] + dl.zeros((SI, SJ), dl.int32)
    j = dl.arange(0, SJ)[None, :] + dl.zeros((SI, SJ), dl.int32)
    ni, nj = dl.swizzle2d(i, j, SI, SJ, SG)
    dl.store(o_ptr + ni * SJ + nj, i * SJ + j)


@pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")
def test_swizzle2d_last_partial_group():
    """Triton's test_swizzle2d (5 x 7 grid, groups of 3 rows): the last group has 2 rows (was a wrong order)."""
    out = np.full((5, 7), -1, np.int32)
    swizzle_k[(1,)](out, SI=5, SJ=7, SG=3)
    expected = np.array([[0, 3, 6, 9, 12, 15, 18], [1, 4, 7, 10, 13, 16, 19], [2, 5, 8, 11, 14, 17, 20],
                         [21, 23, 25, 27, 29, 31, 33], [22, 24, 26, 28, 30, 32, 34]])
    np.testing.assert_array_equal(out, expected)


# ---- 6. max/min reductions and argmax/argmin ignore NaN ------------------------------------------------

@dvmlang.kernel
def nanreduce_k(x_ptr, v_ptr, i_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    dl.store(v_ptr, dl.max(x, axis=0))
    dl.store(v_ptr + 1, dl.min(x, axis=0))
    dl.store(i_ptr, dl.argmax(x, axis=0))
    dl.store(i_ptr + 1, dl.argmin(x, axis=0))


@pytest.mark.parametrize("x, vals, idxs", [
    ([math.nan, 6.0, 8.0], (8.0, 6.0), (2, 1)),
    ([3.0, 5.0, math.nan], (5.0, 3.0), (1, 0)),
    ([math.nan, -math.inf, math.inf, 1.0], (math.inf, -math.inf), (2, 1)),
])
def test_max_min_reductions_ignore_nan(x, vals, idxs):
    """Triton's test_max_min_with_nan and test_argmax_argmin_with_nan (was NaN and the NaN's index)."""
    x = np.array(x, np.float32)
    v, i = np.zeros(2, np.float32), np.zeros(2, np.int32)
    nanreduce_k[(1,)](x, v, i, N=x.size)
    assert tuple(v) == vals and tuple(i) == idxs


def test_max_of_all_nan_is_nan():
    x = np.full(3, np.nan, np.float32)
    v, i = np.zeros(2, np.float32), np.zeros(2, np.int32)
    nanreduce_k[(1,)](x, v, i, N=3)
    assert np.isnan(v).all() and tuple(i) == (0, 0)


@pytest.mark.parametrize("func", ["maximum", "minimum"])
def test_maximum_minimum_default_to_propagate_nan_none(func):
    """Triton's default is PropagateNan.NONE (test_propagate_nan): one NaN operand gives the other one."""
    x = np.array([np.nan, 1.0, np.nan], np.float32)
    y = np.array([2.0, np.nan, np.nan], np.float32)
    got = _run_binop(func, x, y, np.float32)
    np.testing.assert_array_equal(got, getattr(np, "fmax" if func == "maximum" else "fmin")(x, y))


# ---- 7, 8. // and % -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_division_truncates_toward_zero(dtype):
    """Triton's test_floordiv / test_bin_op: `//` truncates toward zero and `%` has the dividend's sign (C)."""
    x = np.array([-7, 7, -7, 7, -1, 0, 5, -128], dtype)
    y = np.array([2, -2, -2, 2, 3, 3, 0, 3], dtype)
    q, r = _run_binop("//", x, y, dtype), _run_binop("%", x, y, dtype)
    nz = y != 0
    np.testing.assert_array_equal(q[nz], np.trunc(x[nz].astype(np.float64) / y[nz]).astype(dtype))
    np.testing.assert_array_equal(r[nz], np.fmod(x[nz], y[nz]))
    assert q[~nz].tolist() == [0] and r[~nz].tolist() == [0]  # division by zero gives 0 (documented)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_remainder_is_fmod_and_floordiv_floors(dtype):
    """Triton's test_bin_op: float `%` is np.fmod, and fp16 `%` and `/` compute (and give) float32. Float `//` is
    an error in Triton; dvmlang floors it (documented), in the same promoted type."""
    x = np.array([-7.0, 7.0, -5.5, 7.5], dtype)
    y = np.array([2.0, -2.0, 2.0, 2.0], dtype)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    np.testing.assert_array_equal(_run_binop("%", x, y, np.float32), np.fmod(x32, y32))
    np.testing.assert_array_equal(_run_binop("/", x, y, np.float32), x32 / y32)
    np.testing.assert_array_equal(_run_binop("//", x, y, np.float32), np.floor(x32 / y32))


def test_division_of_mixed_signedness_is_an_error():
    """Triton: "Cannot use /, //, or % with int32 and uint32 because they have different signedness"."""
    x = np.arange(1, 5, dtype=np.int32)
    y = np.arange(1, 5, dtype=np.uint32)
    with pytest.raises(KernelTypeError, match="signedness"):
        _run_binop("//", x, y, np.uint32)


# ---- 10. erf of a scalar --------------------------------------------------------------------------------

@dvmlang.kernel
def erf_scalar_k(x, o_ptr):
    dl.store(o_ptr, dl.erf(x))


def test_erf_of_a_scalar():
    """`dl.erf` of a runtime scalar (the SERF instruction) raised a bare AttributeError."""
    out = np.zeros(1, np.float32)
    erf_scalar_k[(1,)](0.5, out)
    assert out[0] == np.float32(math.erf(np.float32(0.5)))


# ---- 11. other, stored values and atomic operands are cast to the element type --------------------------

@dvmlang.kernel
def other_k(x_ptr, o_ptr, n, N: dl.constexpr):
    offs = dl.arange(0, N)
    dl.store(o_ptr + offs, dl.load(x_ptr + offs, mask=offs < n, other=-1))
    dl.store(o_ptr + N + offs, -2)


def test_negative_other_and_store_on_uint8_wrap():
    """Triton casts `other` (and a stored number) to the pointer's element type: -1 on uint8 is 255 (was a
    KernelTypeError, against the documentation)."""
    x = np.array([1, 2, 3, 4], np.uint8)
    out = np.zeros(8, np.uint8)
    other_k[(1,)](x, out, 2, N=4)
    assert out.tolist() == [1, 2, 255, 255, 254, 254, 254, 254]


# ---- found by tests/test_diff_kernels.py ----------------------------------------------------------------

@dvmlang.kernel
def cast_k(x_ptr, o_ptr, s, N: dl.constexpr):
    offs = dl.arange(0, N)
    dl.store(o_ptr + offs, dl.load(x_ptr + offs).to(o_ptr.dtype.element_ty))
    dl.store(o_ptr + N, s.to(o_ptr.dtype.element_ty))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32])
def test_float_to_wide_int_casts_saturate(dtype):
    """Documented: float to integer saturates at the range (NaN gives 0). A float at or past 2**63 cast to int64
    gave -2**63 (the clipped bound 2**63 - 1 rounds up to 2**63 in float64 and wrapped), tile and scalar alike."""
    info = np.iinfo(dtype)
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 2.5, -2.5, 2.0 ** 63], np.float32)
    out = np.zeros(x.size + 1, dtype)
    cast_k[(1,)](x, out, 1e30, N=x.size)
    minus_two = -2 if info.min < 0 else 0
    assert out.tolist() == [info.max, info.min, 0, info.max, info.min, 2, minus_two, info.max, info.max]


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_order_signed_zeros(op):
    """-0.0 counts as below +0.0, whatever the operand order (was numpy's order-dependent choice, so the batched and
    the sequential devices could store different zeros)."""
    x = np.array([-0.0, 0.0, -0.0, 0.0, 1.0], np.float32)
    y = np.array([0.0, -0.0, -0.0, 0.0, 1.0], np.float32)
    want = np.array([-0.0, -0.0, -0.0, 0.0, 1.0] if op == "minimum" else [0.0, 0.0, -0.0, 0.0, 1.0], np.float32)
    for a, b in ((x, y), (y, x)):
        got = _run_binop(op, a, b, np.float32)
        assert got.tobytes() == want.tobytes(), (a, b, got)
