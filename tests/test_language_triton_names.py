"""The `triton.language` names dvmlang adds for Triton compatibility (docs/language.md, section 11), each
checked against numpy on sizes that are 1, prime and not powers of two."""

import math

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.language import math as dlmath

SIZES = [1, 7, 13, 64]


def _ints(rng, n, dtype):
    info = np.iinfo(dtype)
    vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    vals[: min(n, 4)] = np.array([info.min, info.max, 0, 1], dtype=dtype)[: min(n, 4)]
    return vals


def _compile_error(kernel, *args, **kw):
    with pytest.raises(dvmlang.CompilationError) as ei:
        kernel[(1,)](*args, **kw)
    text = str(ei.value)
    assert "test_language_triton_names.py:" in text and "hint:" in text, text
    return text


# ---- math spellings ----------------------------------------------------------------------------------------

@dvmlang.kernel
def _spelled_k(x_ptr, y_ptr, out_ptr, N: dl.constexpr, OP: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    if OP == "add":
        r = dl.add(x, y, sanitize_overflow=False)
    elif OP == "sub":
        r = dl.sub(x, y)
    elif OP == "mul":
        r = dl.mul(x, y, sanitize_overflow=True)
    elif OP == "fdiv":
        r = dl.fdiv(x, y, ieee_rounding=True)
    elif OP == "div_rn":
        r = dl.div_rn(x, y)
    elif OP == "sqrt_rn":
        r = dl.sqrt_rn(x)
    elif OP == "umulhi":
        r = dl.umulhi(x, y)
    elif OP == "math":
        r = dlmath.fma(dlmath.max(x, y), dlmath.exp(dl.math.min(x, y)), dl.math.div_rn(x, y))
    dl.store(out_ptr + offs, r)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op, ref", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_add_sub_mul(rng, n, op, ref, dtype):
    x = (rng.standard_normal(n) * 100).astype(dtype)
    y = (rng.standard_normal(n) * 100).astype(dtype)
    if dtype == np.int32:
        x[0] = np.iinfo(np.int32).max  # overflow wraps
    out = np.zeros(n, dtype)
    _spelled_k[(1,)](x, y, out, N=n, OP=op)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, ref(x, y))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fdiv_div_rn_sqrt_rn(rng, n, dtype):
    x = rng.uniform(0.1, 10, n).astype(dtype)
    y = rng.uniform(0.1, 10, n).astype(dtype)
    for op, ref in (("fdiv", x / y), ("div_rn", x / y), ("sqrt_rn", np.sqrt(x))):
        out = np.zeros(n, dtype)
        _spelled_k[(1,)](x, y, out, N=n, OP=op)
        np.testing.assert_array_equal(out, ref.astype(dtype))


def test_math_namespace(rng):
    x = rng.uniform(0.5, 2, 13).astype(np.float32)
    y = rng.uniform(0.5, 2, 13).astype(np.float32)
    out = np.zeros(13, np.float32)
    _spelled_k[(1,)](x, y, out, N=13, OP="math")
    np.testing.assert_allclose(out, np.maximum(x, y) * np.exp(np.minimum(x, y)) + x / y, rtol=1e-6)
    assert dl.math.max is dl.maximum and dlmath.sqrt is dl.sqrt
    import dvmlang.language.math as imported
    assert imported is dl.math


def _umulhi_ref(x, y):
    bits = x.dtype.itemsize * 8
    ux = [int(v) % (1 << bits) for v in x.ravel()]
    uy = [int(v) % (1 << bits) for v in np.broadcast_to(y, x.shape).ravel()]
    hi = [(a * b) >> bits for a, b in zip(ux, uy)]
    return np.array(hi, dtype=np.dtype(f"u{x.dtype.itemsize}")).view(x.dtype).reshape(x.shape)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_umulhi(rng, n, dtype):
    x, y = _ints(rng, n, dtype), _ints(rng, n, dtype)[::-1].copy()
    out = np.zeros(n, dtype)
    _spelled_k[(1,)](x, y, out, N=n, OP="umulhi")
    np.testing.assert_array_equal(out, _umulhi_ref(x, y))


@dvmlang.kernel
def _umulhi_scalar_k(x_ptr, out_ptr, s, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, dl.umulhi(x, 0xCD9E8D57))
    dl.store(out_ptr + N + offs, dl.umulhi(s, x))
    dl.store(out_ptr + 2 * N, dl.umulhi(s, s))


def test_umulhi_with_constants_and_scalars(rng):
    x = _ints(rng, 7, np.uint32)
    s = np.uint32(0xDEADBEEF)
    out = np.zeros(15, np.uint32)
    _umulhi_scalar_k[(1,)](x, out, s, N=7)
    np.testing.assert_array_equal(out[:7], _umulhi_ref(x, np.array(0xCD9E8D57, np.uint32)))
    np.testing.assert_array_equal(out[7:14], _umulhi_ref(x, np.array(s)))
    assert out[14] == (int(s) * int(s)) >> 32


def test_float_only_spellings_reject_integers():
    x = np.arange(4, dtype=np.int32)
    text = _compile_error(_spelled_k, x, x, np.zeros(4, np.int32), N=4, OP="fdiv")
    assert "dl.fdiv needs floating-point operands" in text
    text = _compile_error(_spelled_k, x, x, np.zeros(4, np.int32), N=4, OP="sqrt_rn")
    assert "dl.sqrt_rn needs a floating-point operand" in text
    f = np.arange(4, dtype=np.float32)
    text = _compile_error(_spelled_k, f, f, np.zeros(4, np.float32), N=4, OP="umulhi")
    assert "dl.umulhi needs 32- or 64-bit integer operands" in text


@dvmlang.kernel
def _softmax_k(x_ptr, out_ptr, M: dl.constexpr, N: dl.constexpr, DIM: dl.constexpr, METHOD: dl.constexpr):
    offs = dl.arange(0, M)[:, None] * N + dl.arange(0, N)[None, :]
    x = dl.load(x_ptr + offs)
    if M == 1:
        x1 = dl.reshape(x, (N,))
        r = x1.softmax() if METHOD else dl.softmax(x1, ieee_rounding=True)
    elif METHOD:
        r = x.softmax(DIM, keep_dims=True)
    else:
        r = dl.softmax(x, dim=DIM)
    dl.store(out_ptr + offs, r)


def _softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("m, n, dim", [(1, 1, None), (1, 13, None), (1, 64, None), (5, 7, 0), (5, 7, 1),
                                       (3, 1, 1), (7, 13, None)])
@pytest.mark.parametrize("method", [False, True])
def test_softmax(rng, m, n, dim, method):
    x = (rng.standard_normal((m, n)) * 4).astype(np.float32)
    out = np.zeros_like(x)
    _softmax_k[(1,)](x, out, M=m, N=n, DIM=dim, METHOD=method)
    axis = (1 if m == 1 else 0) if dim is None else dim
    np.testing.assert_allclose(out, _softmax_ref(x, axis), rtol=2e-6, atol=1e-7)


def test_softmax_fp16(rng):
    x = rng.standard_normal((5, 7)).astype(np.float16)
    out = np.zeros_like(x)
    _softmax_k[(1,)](x, out, M=5, N=7, DIM=1, METHOD=False)
    np.testing.assert_allclose(out.astype(np.float32), _softmax_ref(x, 1), rtol=2e-3, atol=2e-3)


def test_unknown_keyword_is_a_compile_error_with_the_signature():
    x = np.zeros(4, np.float32)

    @dvmlang.kernel
    def bad(x_ptr, N: dl.constexpr):
        dl.store(x_ptr + dl.arange(0, N), dl.softmax(dl.load(x_ptr + dl.arange(0, N)), axis=0))

    text = _compile_error(bad, x, N=4)
    assert "unexpected keyword argument 'axis'" in text
    assert "the signature is dl.softmax(x, dim=None, keep_dims=False, ieee_rounding=False)" in text


# ---- tensor methods ----------------------------------------------------------------------------------------

@dvmlang.kernel
def _methods_k(x_ptr, i_ptr, out_ptr, iout_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    i = dl.load(i_ptr + offs)
    dl.store(out_ptr + offs, x.floor())
    dl.store(out_ptr + N + offs, x.ceil())
    dl.store(out_ptr + 2 * N + offs, x.sin())
    dl.store(out_ptr + 3 * N + offs, x.cos())
    dl.store(out_ptr + 4 * N + offs, x.erf())
    dl.store(out_ptr + 5 * N + offs, dl.abs(x).rsqrt())
    dl.store(out_ptr + 6 * N + offs, i.cast(dl.float32))
    dl.store(iout_ptr + offs, i.cdiv(3))
    dl.store(iout_ptr + N + offs, (i > 0).logical_and(i < 5).to(dl.int32))
    dl.store(iout_ptr + 2 * N + offs, (i < 0).logical_or(i > 5).to(dl.int32))
    dl.store(iout_ptr + 3 * N + offs, dl.logical_and(i, 1).to(dl.int32))
    dl.store(iout_ptr + 4 * N, i.xor_sum(axis=0))


@pytest.mark.parametrize("n", SIZES)
def test_tensor_methods(rng, n):
    x = rng.uniform(-3, 3, n).astype(np.float32)
    i = rng.integers(-10, 10, n).astype(np.int32)
    out = np.zeros(7 * n, np.float32)
    iout = np.zeros(4 * n + 1, np.int32)
    _methods_k[(1,)](x, i, out, iout, N=n)
    erf = np.vectorize(math.erf)
    for k, ref in enumerate([np.floor(x), np.ceil(x), np.sin(x), np.cos(x), erf(x), 1 / np.sqrt(np.abs(x)),
                             i.astype(np.float32)]):
        np.testing.assert_allclose(out[k * n:(k + 1) * n], ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(iout[:n], np.trunc((i + 2) / 3))  # Triton's (i + 3 - 1) // 3, truncating
    np.testing.assert_array_equal(iout[n:2 * n], (i > 0) & (i < 5))
    np.testing.assert_array_equal(iout[2 * n:3 * n], (i < 0) | (i > 5))
    np.testing.assert_array_equal(iout[3 * n:4 * n], i != 0)
    assert iout[4 * n] == np.bitwise_xor.reduce(i)


@dvmlang.kernel
def _pointer_methods_k(acc_ptr, x_ptr, old_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    p = acc_ptr + offs
    o1 = p.atomic_add(x)
    o2 = p.atomic_max(x * 2)
    o3 = p.atomic_min(x * 3, mask=offs % 2 == 0)
    o4 = (acc_ptr + N + offs).atomic_xchg(x)
    o5 = (acc_ptr + 2 * N + offs).atomic_and(x)
    o6 = (acc_ptr + 3 * N + offs).atomic_or(x)
    o7 = (acc_ptr + 4 * N + offs).atomic_xor(x)
    o8 = (acc_ptr + 5 * N + offs).atomic_cas(x, -x)
    dl.store(old_ptr + offs, o1)
    dl.store(old_ptr + N + offs, o2)
    dl.store(old_ptr + 2 * N + offs, o3)
    dl.store(old_ptr + 3 * N + offs, o4 + o5 + o6 + o7 + o8)


@pytest.mark.parametrize("n", [1, 7, 16])
def test_pointer_atomic_methods(rng, n):
    x = rng.integers(-20, 20, n).astype(np.int32)
    init = rng.integers(-20, 20, 6 * n).astype(np.int32)
    acc, old = init.copy(), np.zeros(4 * n, np.int32)
    _pointer_methods_k[(1,)](acc, x, old, N=n)
    a = init[:n].copy()
    np.testing.assert_array_equal(old[:n], a)
    a = a + x
    np.testing.assert_array_equal(old[n:2 * n], a)
    a = np.maximum(a, 2 * x)
    even = np.arange(n) % 2 == 0
    np.testing.assert_array_equal(old[2 * n:3 * n], np.where(even, a, 0))
    a = np.where(even, np.minimum(a, 3 * x), a)
    np.testing.assert_array_equal(acc[:n], a)
    rest = [init[k * n:(k + 1) * n] for k in range(1, 6)]
    np.testing.assert_array_equal(old[3 * n:], sum(rest))
    np.testing.assert_array_equal(acc[n:2 * n], x)
    np.testing.assert_array_equal(acc[2 * n:3 * n], rest[1] & x)
    np.testing.assert_array_equal(acc[3 * n:4 * n], rest[2] | x)
    np.testing.assert_array_equal(acc[4 * n:5 * n], rest[3] ^ x)
    np.testing.assert_array_equal(acc[5 * n:], np.where(rest[4] == x, -x, rest[4]))


@dvmlang.kernel
def _advance_method_k(x_ptr, out_ptr, M, N, BM: dl.constexpr, BN: dl.constexpr):
    bp = dl.make_block_ptr(x_ptr, (M, N), (N, 1), (0, 0), (BM, BN))
    total = dl.zeros((BM, BN), dl.float32)
    for _ in range(dl.cdiv(N, BN)):
        total += dl.load(bp, boundary_check=(0, 1), padding_option="zero")
        bp = bp.advance((0, BN))
    dl.store(out_ptr + dl.arange(0, BM)[:, None] * BN + dl.arange(0, BN)[None, :], total)


def test_block_pointer_advance_method(rng):
    x = rng.standard_normal((3, 11)).astype(np.float32)
    out = np.zeros((4, 4), np.float32)
    _advance_method_k[(1,)](x, out, 3, 11, BM=4, BN=4)
    pad = np.zeros((4, 12), np.float32)
    pad[:3, :11] = x
    np.testing.assert_allclose(out, pad.reshape(4, 3, 4).sum(axis=1), rtol=1e-6)


# ---- keyword arguments -------------------------------------------------------------------------------------

@dvmlang.kernel
def _kwargs_k(x_ptr, y_ptr, out_ptr, iout_ptr, M: dl.constexpr, N: dl.constexpr, AXIS: dl.constexpr):
    offs = dl.arange(0, M)[:, None] * N + dl.arange(0, N)[None, :]
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    v, i = dl.max(x, AXIS, return_indices=True)
    w, j = x.min(axis=AXIS, return_indices=True, return_indices_tie_break_left=False, keep_dims=True)
    o = dl.arange(0, v.shape[0])
    dl.store(out_ptr + o, v)
    dl.store(iout_ptr + o, i)
    dl.store(out_ptr + M * N + o, dl.reshape(w, v.shape))
    dl.store(iout_ptr + M * N + o, dl.reshape(j, v.shape))
    dl.store(iout_ptr + 2 * M * N + o, dl.argmax(x, AXIS, tie_break_left=False))
    dl.store(iout_ptr + 3 * M * N + o, x.argmin(AXIS, True))
    dl.store(out_ptr + 2 * M * N + offs, dl.maximum(x, y, propagate_nan=dl.PropagateNan.NONE))
    dl.store(out_ptr + 3 * M * N + offs, dl.minimum(x, y, propagate_nan=dl.PropagateNan.ALL))
    dl.store(out_ptr + 4 * M * N + offs, dl.clamp(x, min=-0.5, max=0.5))
    dl.store(out_ptr + 5 * M * N + offs, dl.clamp(x, lo=-0.25, hi=y, propagate_nan=dl.PropagateNan.NONE))
    dl.store(out_ptr + 6 * M * N + offs, dl.minimum(x, y, dl.PropagateNan.NONE))


@pytest.mark.parametrize("m, n, axis", [(1, 1, 1), (1, 13, 1), (5, 7, 0), (5, 7, 1), (3, 64, 1)])
def test_return_indices_tie_break_and_propagate_nan(rng, m, n, axis):
    x = rng.integers(-3, 3, (m, n)).astype(np.float32)  # many ties
    y = rng.standard_normal((m, n)).astype(np.float32)
    x.flat[::3] = np.nan
    y.flat[::2] = np.nan
    out = np.zeros(7 * m * n, np.float32)
    iout = np.zeros(4 * m * n, np.int32)
    _kwargs_k[(1,)](x, y, out, iout, M=m, N=n, AXIS=axis)
    k = x.shape[1 - axis]
    mn = m * n
    # Triton's max/min reductions and argmax/argmin ignore NaN (the first index of the extreme; 0 if all NaN)
    vmax, vmin = np.fmax.reduce(x, axis=axis), np.fmin.reduce(x, axis=axis)
    imax = np.argmax(x == np.expand_dims(vmax, axis), axis=axis)
    imin = np.argmax(x == np.expand_dims(vmin, axis), axis=axis)
    np.testing.assert_array_equal(out[:k], vmax)
    np.testing.assert_array_equal(iout[:k], imax)
    np.testing.assert_array_equal(out[mn:mn + k], vmin)
    np.testing.assert_array_equal(iout[mn:mn + k], imin)
    np.testing.assert_array_equal(iout[2 * mn:2 * mn + k], imax)
    np.testing.assert_array_equal(iout[3 * mn:3 * mn + k], imin)
    part = [out[(2 + q) * mn:(3 + q) * mn].reshape(m, n) for q in range(5)]
    np.testing.assert_array_equal(part[0], np.fmax(x, y))
    np.testing.assert_array_equal(part[1], np.minimum(x, y))
    np.testing.assert_array_equal(part[2], np.fmin(np.fmax(x, -0.5), 0.5))  # clamp defaults to PropagateNan.NONE
    np.testing.assert_array_equal(part[3], np.fmin(np.fmax(x, -0.25), y))
    np.testing.assert_array_equal(part[4], np.fmin(x, y))


@dvmlang.kernel
def _int_kwargs_k(x_ptr, out_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, dl.maximum(x, 3, propagate_nan=dl.PropagateNan.NONE))
    dl.store(out_ptr + N + offs, dl.clamp(x, 0, 5))
    dl.store(out_ptr + 2 * N + offs, dl.cumsum(x, 0, dtype=dl.int8))
    dl.store(out_ptr + 3 * N + offs, x.cumsum(reverse=True, dtype=dl.int64).to(dl.int32))
    dl.store(out_ptr + 4 * N + offs, dl.cumsum(x.to(dl.int8)))


@pytest.mark.parametrize("n", SIZES)
def test_integer_kwargs_and_cumsum_dtype(rng, n):
    x = rng.integers(-100, 100, n).astype(np.int32)
    out = np.zeros(5 * n, np.int32)
    _int_kwargs_k[(1,)](x, out, N=n)
    np.testing.assert_array_equal(out[:n], np.maximum(x, 3))
    np.testing.assert_array_equal(out[n:2 * n], np.clip(x, 0, 5))
    np.testing.assert_array_equal(out[2 * n:3 * n], np.cumsum(x.astype(np.int8), dtype=np.int8))  # wraps in int8
    np.testing.assert_array_equal(out[3 * n:4 * n], np.cumsum(x[::-1])[::-1])
    np.testing.assert_array_equal(out[4 * n:], np.cumsum(x.astype(np.int8).astype(np.int32)))  # int8 scans in int32


@dvmlang.kernel
def _rounding_k(x_ptr, out_ptr, h_ptr, s, N: dl.constexpr, DT: dl.constexpr, MODE: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, dl.cast(x, DT, fp_downcast_rounding=MODE))
    dl.store(out_ptr + N + offs, x.to(DT, fp_downcast_rounding=MODE, bitcast=False))
    dl.store(h_ptr, s.to(dl.float16, fp_downcast_rounding=MODE))


def _rtz_ref(x, dtype):
    with np.errstate(over="ignore"):
        r = x.astype(dtype)
    away = np.abs(r.astype(np.float64)) > np.abs(x.astype(np.float64))
    bits = r.view(np.dtype(f"u{r.dtype.itemsize}"))
    return np.where(away, bits - 1, bits).astype(bits.dtype).view(dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("mode", ["rtne", "rtz"])
def test_fp_downcast_rounding(rng, dtype, mode):
    x = (rng.standard_normal(13) * 10).astype(np.float32)
    x[:6] = [1e9, -1e9, np.inf, -np.inf, 1e-9, -1e-9]
    out = np.zeros(26, dtype)
    h = np.zeros(1, np.float16)
    s = np.float32(1.0009765625 + 2 ** -12)  # halfway between two float16 neighbours above 1
    _rounding_k[(1,)](x, out, h, s, N=13, DT=dl.float16 if dtype == np.float16 else dl.bfloat16, MODE=mode)
    with np.errstate(over="ignore"):
        ref = x.astype(dtype) if mode == "rtne" else _rtz_ref(x, dtype)
    np.testing.assert_array_equal(out[:13].view(np.uint16), ref.view(np.uint16))
    np.testing.assert_array_equal(out[13:].view(np.uint16), ref.view(np.uint16))
    assert h[0] == (np.float16(1.0009765625) if mode == "rtz" else np.float16(s))
    if mode == "rtz" and dtype == np.float16:  # a finite overflow gives the largest finite value
        finite = np.finfo(np.float16).max
        assert out[0] == finite and out[1] == -finite and np.isinf(out[2]) and out[4] == 0


@dvmlang.kernel
def _hints_k(x_ptr, a_ptr, b_ptr, out_ptr, N: dl.constexpr, K: dl.constexpr):
    offs = dl.max_constancy(dl.arange(0, N), 1)
    dl.assume(N > 0)
    x = dl.load(x_ptr + offs)
    dl.assume(dl.max(x, axis=0) < 1000.0)
    dl.device_assert(x >= 0, "x must not be negative")
    a = dl.load(a_ptr + dl.arange(0, N)[:, None] * K + dl.arange(0, K)[None, :])
    b = dl.load(b_ptr + dl.arange(0, K)[:, None] * N + dl.arange(0, N)[None, :])
    c = dl.dot(a, b, max_num_imprecise_acc=0)
    dl.store(out_ptr + dl.arange(0, N)[:, None] * N + dl.arange(0, N)[None, :], c + x[None, :])


def test_hints_and_max_num_imprecise_acc(rng):
    x = rng.uniform(0, 1, 7).astype(np.float32)
    a = rng.standard_normal((7, 5)).astype(np.float16)
    b = rng.standard_normal((5, 7)).astype(np.float16)
    out = np.zeros((7, 7), np.float32)
    _hints_k[(1,)](x, a, b, out, N=7, K=5)
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32) + x[None, :], rtol=1e-5, atol=1e-5)


@dvmlang.kernel
def _assert_k(x_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    x = dl.load(x_ptr + offs, mask=m, other=-1)
    dl.device_assert(x >= 0, "negative count", mask=m)
    dl.device_assert(dl.sum(x, axis=0) < 1000)


def test_device_assert_is_mask_aware_and_names_line_and_message():
    x = np.arange(10, dtype=np.int32)
    _assert_k[(2,)](x, 10, BLOCK=8)  # the masked-off tail reads -1 but is not checked
    x[9] = -5
    with pytest.raises(dvmlang.DeviceError) as ei:
        _assert_k[(2,)](x, 10, BLOCK=8)
    text = str(ei.value)
    assert "programs [1]" in text and "negative count" in text
    assert f"test_language_triton_names.py:{_assert_k.fn.__code__.co_firstlineno + 5}" in text
    x[9] = 1500
    with pytest.raises(dvmlang.DeviceError, match="device assertion failed"):
        _assert_k[(2,)](x, 10, BLOCK=8)


@dvmlang.kernel
def _bad_kwargs_k(x_ptr, N: dl.constexpr, CASE: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    if CASE == 0:
        r = dl.maximum(x, x, propagate_nan=True)
    elif CASE == 1:
        r = dl.clamp(x, 0.0, 1.0, lo=0.0)
    elif CASE == 2:
        r = x.to(dl.float16, fp_downcast_rounding="rtp")
    elif CASE == 3:
        r = x.to(dl.float64, fp_downcast_rounding="rtz")
    elif CASE == 4:
        r = dl.cumsum(x, dtype=dl.int1)
    elif CASE == 5:
        r = dl.max(x, 0, return_indices=x > 0)
    else:
        r = dl.clamp(x)
    dl.store(x_ptr + offs, r)


@pytest.mark.parametrize("case, message", [
    (0, "propagate_nan must be dl.PropagateNan.NONE or dl.PropagateNan.ALL"),
    (1, "needs its `min` bound exactly once"),
    (2, "fp_downcast_rounding must be 'rtne' or 'rtz'"),
    (3, "applies to a float converted to a narrower float, not to dl.float32 to dl.float64"),
    (4, "cannot accumulate in int1"),
    (5, "return_indices must be a compile-time value"),
    (6, "needs its `min` bound exactly once"),
])
def test_wrong_keyword_use_is_a_compile_error(case, message):
    text = _compile_error(_bad_kwargs_k, np.zeros(4, np.float32), N=4, CASE=case)
    assert message in text


# ---- shape helpers -----------------------------------------------------------------------------------------

@dvmlang.kernel
def _offs(SHAPE):
    if len(SHAPE) == 1:
        return dl.arange(0, SHAPE[0])
    if len(SHAPE) == 2:
        return dl.arange(0, SHAPE[0])[:, None] * SHAPE[1] + dl.arange(0, SHAPE[1])[None, :]
    return (dl.arange(0, SHAPE[0])[:, None, None] * SHAPE[1] + dl.arange(0, SHAPE[1])[None, :, None]) * SHAPE[2] + \
        dl.arange(0, SHAPE[2])[None, None, :]


@dvmlang.kernel
def _flip_k(x_ptr, out_ptr, SHAPE: dl.constexpr, DIM: dl.constexpr, METHOD: dl.constexpr):
    offs = _offs(SHAPE)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, x.flip(DIM) if METHOD else dl.flip(x, dim=DIM))


@pytest.mark.parametrize("shape, dim", [((1,), None), ((7,), None), ((13,), 0), ((64,), -1), ((5, 7), 0),
                                        ((5, 7), 1), ((1, 13), None), ((3, 4, 5), 1), ((3, 4, 5), None)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_flip(rng, shape, dim, dtype):
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    for method in (False, True):
        out = np.zeros_like(x)
        _flip_k[(1,)](x, out, SHAPE=shape, DIM=dim, METHOD=method)
        np.testing.assert_array_equal(out, np.flip(x, axis=len(shape) - 1 if dim is None else dim))


@dvmlang.kernel
def _interleave_k(a_ptr, b_ptr, out_ptr, s_ptr, M: dl.constexpr, N: dl.constexpr):
    a = dl.load(a_ptr + _offs((M, N)))
    b = dl.load(b_ptr + _offs((M, N)))
    dl.store(out_ptr + _offs((M, 2 * N)), dl.interleave(a, b))
    dl.store(out_ptr + 2 * M * N + _offs((2 * N,)), dl.interleave(dl.reshape(a[0], (N,)), 5.0))
    dl.store(s_ptr + dl.arange(0, 2), dl.interleave(dl.sum(a, axis=None), dl.max(b, axis=None)))
    x, y = dl.split(dl.join(a, b))
    dl.store(out_ptr + 2 * M * N + 2 * N + _offs((M, N)), x - y)


@pytest.mark.parametrize("m, n", [(1, 1), (1, 7), (5, 13), (4, 16)])
def test_interleave_join_split(rng, m, n):
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)
    out = np.zeros(3 * m * n + 2 * n, np.float32)
    s = np.zeros(2, np.float32)
    _interleave_k[(1,)](a, b, out, s, M=m, N=n)
    ref = np.stack([a, b], axis=-1).reshape(m, 2 * n)
    np.testing.assert_array_equal(out[:2 * m * n].reshape(m, 2 * n), ref)
    np.testing.assert_array_equal(out[2 * m * n:2 * m * n + 2 * n], np.stack([a[0], np.full(n, 5.0)], -1).ravel())
    np.testing.assert_allclose(s, [a.sum(), b.max()], rtol=1e-6)
    np.testing.assert_array_equal(out[2 * m * n + 2 * n:].reshape(m, n), a - b)


@dvmlang.kernel
def _reshape_helpers_k(x_ptr, out_ptr, s_ptr, M: dl.constexpr, N: dl.constexpr):
    x = dl.load(x_ptr + _offs((M, N)))
    base = 0
    dl.store(out_ptr + _offs((M * N,)), dl.ravel(x))
    dl.store(out_ptr + M * N + _offs((M * N,)), x.ravel(can_reorder=True) * 2)
    dl.store(out_ptr + 2 * M * N + _offs((N, M)), x.reshape(N, M))
    dl.store(out_ptr + 3 * M * N + _offs((M * N,)), dl.view(x, M * N) + 1)
    dl.store(out_ptr + 4 * M * N + _offs((M, N)), x.view(M, N) - 1)
    row = dl.load(x_ptr + _offs((N,)))
    dl.store(out_ptr + 5 * M * N + _offs((M, N)), dl.broadcast_to(row, M, N) + row.broadcast_to(M, N))
    e = dl.expand_dims(row, (0, 2))
    dl.store(out_ptr + 6 * M * N + _offs((1, N, 1)), e * 3)
    dl.store(out_ptr + 6 * M * N + N + _offs((N,)), dl.squeeze(dl.unsqueeze(row, 0), 0) + row.unsqueeze(1).squeeze(1))
    p, q = dl.split(dl.reshape(dl.arange(0, 2), (2,)))
    dl.store(s_ptr + base, p * 10 + q)


@pytest.mark.parametrize("m, n", [(1, 1), (1, 7), (5, 13), (4, 16)])
def test_ravel_reshape_view_broadcast_squeeze(rng, m, n):
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.zeros(6 * m * n + 2 * n, np.float32)
    s = np.zeros(1, np.int32)
    _reshape_helpers_k[(1,)](x, out, s, M=m, N=n)
    mn = m * n
    np.testing.assert_array_equal(out[:mn], x.ravel())
    np.testing.assert_array_equal(out[mn:2 * mn], x.ravel() * 2)
    np.testing.assert_array_equal(out[2 * mn:3 * mn], x.ravel())
    np.testing.assert_array_equal(out[3 * mn:4 * mn], x.ravel() + 1)
    np.testing.assert_array_equal(out[4 * mn:5 * mn], x.ravel() - 1)
    np.testing.assert_array_equal(out[5 * mn:6 * mn].reshape(m, n), np.broadcast_to(2 * x.ravel()[:n], (m, n)))
    np.testing.assert_array_equal(out[6 * mn:6 * mn + n], x.ravel()[:n] * 3)
    np.testing.assert_array_equal(out[6 * mn + n:], x.ravel()[:n] * 2)
    assert s[0] == 1


@dvmlang.kernel
def _bad_shape_k(x_ptr, N: dl.constexpr, CASE: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, N))
    if CASE == 0:
        r = dl.flip(x, 1)
    elif CASE == 1:
        r, _ = dl.split(x)
    elif CASE == 2:
        r = dl.squeeze(x, 0)
    else:
        r = dl.flip(dl.sum(x, axis=0))
    dl.store(x_ptr + dl.arange(0, N), r)


@pytest.mark.parametrize("case, message", [(0, "axis 1 is out of range"), (1, "needs a last dimension of 2"),
                                           (2, "is not 1"), (3, "dl.flip needs a tile with at least one dimension")])
def test_shape_helper_errors(case, message):
    text = _compile_error(_bad_shape_k, np.zeros(4, np.float32), N=4, CASE=case)
    assert message in text


@dvmlang.kernel
def _broadcast_users_k(x_ptr, out_ptr, M: dl.constexpr, N: dl.constexpr):
    row = dl.load(x_ptr + dl.arange(0, N))
    b = dl.broadcast_to(row, M, N)
    offs = _offs((M, N))
    dl.store(out_ptr + offs, b + 1.0)
    dl.store(out_ptr + M * N + offs, dl.where(b > 1.0, b, 0.0))
    dl.store(out_ptr + 2 * M * N + offs, dl.fma(b, b, 1.0))
    dl.store(out_ptr + 3 * M * N + offs, b + dl.broadcast_to(row[None, :] * 2, (M, N)))


@pytest.mark.parametrize("m, n", [(1, 1), (2, 3), (3, 1)])
def test_explicit_broadcasts_next_to_scalars_and_other_broadcasts(m, n):
    # regression: an unmaterialised broadcast next to a scalar, or meeting another one, gave invalid bytecode
    x = np.arange(n, dtype=np.float32) + 1
    out = np.zeros(4 * m * n, np.float32)
    _broadcast_users_k[(1,)](x, out, M=m, N=n)
    b = np.broadcast_to(x, (m, n)).ravel()
    np.testing.assert_array_equal(out.reshape(4, -1), [b + 1, np.where(b > 1, b, 0), b * b + 1, 3 * b])


# ---- reduce_or, histogram, gather, sort, topk, swizzle2d --------------------------------------------------

@dvmlang.kernel
def _reduce_or_k(x_ptr, out_ptr, M: dl.constexpr, N: dl.constexpr):
    x = dl.load(x_ptr + _offs((M, N)))
    dl.store(out_ptr + dl.arange(0, N), dl.reduce_or(x, 0))
    dl.store(out_ptr + N + dl.arange(0, M), x.reduce_or(axis=1))
    dl.store(out_ptr + N + M + _offs((M, 1)), dl.reduce_or(x, 1, keep_dims=True))
    dl.store(out_ptr + N + 2 * M, dl.reduce_or(x))
    dl.store(out_ptr + N + 2 * M + 1, dl.reduce_or(x != 0, axis=None).to(x.dtype))


@pytest.mark.parametrize("m, n", [(1, 1), (5, 7), (3, 64)])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_reduce_or(rng, m, n, dtype):
    x = (rng.integers(0, 256, (m, n)) << rng.integers(0, 7, (m, n))).astype(dtype)
    out = np.zeros(n + 2 * m + 2, dtype)
    _reduce_or_k[(1,)](x, out, M=m, N=n)
    np.testing.assert_array_equal(out[:n], np.bitwise_or.reduce(x, axis=0))
    np.testing.assert_array_equal(out[n:n + m], np.bitwise_or.reduce(x, axis=1))
    np.testing.assert_array_equal(out[n + m:n + 2 * m], np.bitwise_or.reduce(x, axis=1))
    assert out[n + 2 * m] == np.bitwise_or.reduce(x.ravel()) and out[-1] == (x != 0).any()


@dvmlang.kernel
def _histogram_k(x_ptr, out_ptr, n, BLOCK: dl.constexpr, BINS: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    x = dl.load(x_ptr + offs, mask=m, other=0)
    dl.store(out_ptr + dl.arange(0, BINS), dl.histogram(x, BINS, mask=m))
    dl.store(out_ptr + BINS + dl.arange(0, BINS), x.histogram(BINS))
    dl.store(out_ptr + 2 * BINS + dl.arange(0, BINS), dl.histogram(dl.reshape(x, (1, BLOCK)), BINS, mask=False))
    dl.store(out_ptr + 3 * BINS + dl.arange(0, BINS), dl.histogram(x[None, :], BINS, mask=m[None, :] & (x > 1)))


@pytest.mark.parametrize("block, n, bins", [(1, 1, 1), (7, 5, 5), (13, 13, 17), (64, 50, 8)])
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_histogram(rng, block, n, bins, dtype):
    x = rng.integers(-2, bins + 3, block).astype(dtype)  # values outside [0, bins) are not counted
    out = np.zeros(4 * bins, np.int32)
    _histogram_k[(1,)](x, out, n, BLOCK=block, BINS=bins)

    def hist(v):
        return np.bincount(v[(v >= 0) & (v < bins)].astype(np.int64), minlength=bins)
    tail = np.where(np.arange(block) < n, x, 0)
    np.testing.assert_array_equal(out[:bins], hist(x[:n]))
    np.testing.assert_array_equal(out[bins:2 * bins], hist(tail))
    np.testing.assert_array_equal(out[2 * bins:3 * bins], 0)
    np.testing.assert_array_equal(out[3 * bins:], hist(x[:n][x[:n] > 1]))


@dvmlang.kernel
def _gather_k(src_ptr, idx_ptr, out_ptr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr, AXIS: dl.constexpr):
    src = dl.load(src_ptr + _offs((M, N)))
    if AXIS == 0:
        idx = dl.load(idx_ptr + _offs((K, N)))
        dl.store(out_ptr + _offs((K, N)), dl.gather(src, idx, 0))
    else:
        idx = dl.load(idx_ptr + _offs((M, K)))
        dl.store(out_ptr + _offs((M, K)), src.gather(idx, axis=-1))


@pytest.mark.parametrize("m, n, k, axis", [(1, 1, 1, 0), (1, 13, 7, 1), (5, 7, 3, 0), (5, 7, 11, 1), (4, 64, 64, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_gather(rng, m, n, k, axis, dtype):
    src = (rng.standard_normal((m, n)) * 100).astype(dtype)
    ishape = (k, n) if axis == 0 else (m, k)
    idx = rng.integers(0, src.shape[axis], ishape).astype(np.int32)
    out = np.zeros(ishape, dtype)
    _gather_k[(1,)](src, idx, out, M=m, N=n, K=k, AXIS=axis)
    np.testing.assert_array_equal(out, np.take_along_axis(src, idx, axis=axis))


def test_gather_index_out_of_range_is_a_device_error(rng):
    src = rng.standard_normal((5, 7)).astype(np.float32)
    idx = rng.integers(0, 7, (5, 3)).astype(np.int32)
    idx[2, 1] = 7
    with pytest.raises(dvmlang.DeviceError) as ei:
        _gather_k[(1,)](src, idx, np.zeros((5, 3), np.float32), M=5, N=7, K=3, AXIS=1)
    text = str(ei.value)
    assert "gather index 7 is outside [0, 7)" in text and "programs [0]" in text
    assert f"test_language_triton_names.py:{_gather_k.fn.__code__.co_firstlineno + 8}" in text


@dvmlang.kernel
def _sort_k(x_ptr, out_ptr, M: dl.constexpr, N: dl.constexpr, DIM: dl.constexpr, K: dl.constexpr):
    offs = _offs((M, N))
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, dl.sort(x, DIM))
    dl.store(out_ptr + M * N + offs, x.sort(dim=DIM, descending=True))
    if DIM == 0:
        dl.store(out_ptr + 2 * M * N + _offs((K, N)), dl.topk(x, K, dim=0))
    else:
        dl.store(out_ptr + 2 * M * N + _offs((M, K)), x.topk(K))


@pytest.mark.parametrize("m, n, dim, k", [(1, 1, None, 1), (1, 13, None, 4), (1, 64, 1, 64), (5, 7, 0, 2),
                                          (5, 7, -1, 7), (4, 16, 1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8])
def test_sort_and_topk(rng, m, n, dim, k, dtype):
    x = (rng.standard_normal((m, n)) * 50).astype(dtype)
    if np.dtype(dtype).kind in "fV" and x.size > 3:
        x.flat[[0, 3]] = np.nan  # NaN sorts as the largest value
    axis = 1 if dim is None else dim
    kshape = (k, n) if axis == 0 else (m, k)
    out = np.zeros(2 * m * n + k * (n if axis == 0 else m), dtype)
    _sort_k[(1,)](x, out, M=m, N=n, DIM=dim, K=k)
    out = out.astype(np.float64)  # compares NaN with NaN for bfloat16 too
    asc = np.sort(x.astype(np.float64), axis=axis)
    desc = np.flip(asc, axis=axis)
    np.testing.assert_array_equal(out[:m * n].reshape(m, n), asc)
    np.testing.assert_array_equal(out[m * n:2 * m * n].reshape(m, n), desc)
    top = desc[:k] if axis == 0 else desc[:, :k]
    np.testing.assert_array_equal(out[2 * m * n:].reshape(kshape), top)


@dvmlang.kernel
def _bottom_k(x_ptr, out_ptr, N: dl.constexpr, K: dl.constexpr):
    dl.store(out_ptr + dl.arange(0, K), dl.topk(dl.load(x_ptr + dl.arange(0, N)), K, descending=False))


def test_topk_not_descending_is_the_k_smallest_smallest_first(rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = np.zeros(4, np.float32)
    _bottom_k[(1,)](x, out, N=16, K=4)
    np.testing.assert_array_equal(out, np.sort(x)[:4])  # torch.topk(x, 4, largest=False).values


def _swizzle_ref(i, j, size_i, size_j, size_g):
    ij = i * size_j + j
    size_gj = size_g * size_j
    off_i = (ij // size_gj) * size_g
    rows = np.minimum(size_i - off_i, size_g)
    return off_i + ij % rows, (ij % size_gj) // rows


@dvmlang.kernel
def _swizzle_k(out_ptr, size_i, size_j, G: dl.constexpr, BI: dl.constexpr, BJ: dl.constexpr):
    i = dl.arange(0, BI)[:, None]
    j = dl.arange(0, BJ)[None, :]
    ni, nj = dl.swizzle2d(i, j, size_i, size_j, G)
    dl.store(out_ptr + _offs((BI, BJ)), ni * 1000 + nj)
    si, sj = dl.swizzle2d(dl.program_id(0), 1, size_i, size_j, G)
    dl.store(out_ptr + BI * BJ, si * 1000 + sj)
    ci, cj = dl.swizzle2d(3, 2, 5, 4, 2)
    dl.static_assert(ci * 1000 + cj == 2003)  # compile-time operands give compile-time values
    dl.store(out_ptr + BI * BJ + 1, ci * 1000 + cj)


@pytest.mark.parametrize("size_i, size_j, g", [(4, 4, 2), (5, 3, 2), (7, 1, 3), (1, 6, 4), (6, 5, 1)])
def test_swizzle2d(size_i, size_j, g):
    out = np.zeros(size_i * size_j + 2, np.int32)
    _swizzle_k[(1,)](out, size_i, size_j, G=g, BI=size_i, BJ=size_j)
    i, j = np.meshgrid(np.arange(size_i), np.arange(size_j), indexing="ij")
    ni, nj = _swizzle_ref(i, j, size_i, size_j, g)
    np.testing.assert_array_equal(out[:-2].reshape(size_i, size_j), ni * 1000 + nj)
    si, sj = _swizzle_ref(0, 1, size_i, size_j, g)
    assert out[-2] == si * 1000 + sj and out[-1] == 2003
    if (size_i, size_j, g) == (4, 4, 2):  # Triton's docstring example: element (i, j) moves to (ni, nj)
        moved = np.zeros((4, 4), np.int64)
        moved[ni, nj] = i * 4 + j
        np.testing.assert_array_equal(moved, [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]])


@dvmlang.kernel
def _bad_select_k(x_ptr, N: dl.constexpr, CASE: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, N))
    if CASE == 0:
        r = dl.reduce_or(x, 0)
    elif CASE == 1:
        r = dl.histogram(x, 4)
    elif CASE == 2:
        r = dl.gather(x, dl.arange(0, N)[:, None], 0)
    elif CASE == 3:
        r = dl.gather(x, x, 0)
    elif CASE == 4:
        r = dl.topk(x, N + 1)
    elif CASE == 5:
        r = dl.xor_sum(x)
    else:
        r = dl.histogram(x.to(dl.int32), 0)
    dl.store(x_ptr, r)


@pytest.mark.parametrize("case, message", [
    (0, "dl.reduce_or needs an integer or boolean tile"), (1, "dl.histogram counts integer values"),
    (2, "needs a tile and an index tile of the same rank"), (3, "dl.gather indices must be integers"),
    (4, "k = 5 must lie in [1, 4]"), (5, "dl.xor_sum needs an integer or boolean tile"),
    (6, "num_bins must be a positive compile-time integer"),
])
def test_selection_errors(case, message):
    text = _compile_error(_bad_select_k, np.zeros(4, np.float32), N=4, CASE=case)
    assert message in text


# ---- random numbers ----------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def _philox_ref(seed, c0, c1, c2, c3, n_rounds=10):
    """Philox4x32 in numpy: counters are uint32 arrays, the key is the low and high half of a uint64 seed."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint32).astype(np.uint64) for c in (c0, c1, c2, c3))
    k0, k1 = np.uint64(seed & M32), np.uint64((seed >> 32) & M32)
    for _ in range(n_rounds):
        p0 = np.uint64(0xD2511F53) * c0
        p2 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p2 >> np.uint64(32)) ^ c1 ^ k0, p2 & np.uint64(M32), (p0 >> np.uint64(32)) ^ c3 ^ k1, \
            p0 & np.uint64(M32)
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(M32), (k1 + np.uint64(0xBB67AE85)) & np.uint64(M32)
    return [c.astype(np.uint32) for c in (c0, c1, c2, c3)]


def _uniform_ref(u):
    x = u.view(np.int32)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


def _normal_ref(u1, u2):
    u1 = np.maximum(np.float32(1e-7), u1)
    th = np.float32(6.283185307179586) * u2
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    return r * np.cos(th), r * np.sin(th)


@dvmlang.kernel
def _random_k(out_ptr, f_ptr, seed, base, N: dl.constexpr, ROUNDS: dl.constexpr, WIDE: dl.constexpr):
    offs = dl.arange(0, N)
    o = base + offs
    if WIDE:
        o = o.to(dl.int64) * 3_000_000_000
    a, b, c, d = dl.randint4x(seed, o, ROUNDS)
    dl.store(out_ptr + offs, a)
    dl.store(out_ptr + N + offs, b)
    dl.store(out_ptr + 2 * N + offs, c)
    dl.store(out_ptr + 3 * N + offs, d)
    dl.store(out_ptr + 4 * N + offs, dl.randint(seed, o, n_rounds=ROUNDS))
    dl.store(f_ptr + offs, dl.rand(seed, o, ROUNDS))
    u1, u2, u3, u4 = dl.rand4x(seed, o, ROUNDS)
    dl.store(f_ptr + N + offs, u4)
    dl.store(f_ptr + 2 * N + offs, dl.randn(seed, o, ROUNDS))
    n1, n2, n3, n4 = dl.randn4x(seed, o, ROUNDS)
    dl.store(f_ptr + 3 * N + offs, n2)
    dl.store(f_ptr + 4 * N + offs, n3)


@pytest.mark.parametrize("n", [1, 13, 64])
@pytest.mark.parametrize("seed, base, rounds, wide", [(0, 0, 10, False), (12345, -7, 10, False),
                                                      (-1, 2**31 - 5, 10, False), (2**40 + 17, 3, 7, False),
                                                      (42, 5, 10, True)])
def test_random_numbers_match_philox_bit_for_bit(n, seed, base, rounds, wide):
    out = np.zeros(5 * n, np.uint32)
    f = np.zeros(5 * n, np.float32)
    _random_k[(1,)](out, f, seed, base, N=n, ROUNDS=rounds, WIDE=wide)
    offs = (np.int64(base) + np.arange(n)).astype(np.int32).astype(np.int64)  # the int32 offsets wrap
    if wide:
        offs = offs * 3_000_000_000
    zero = np.zeros(n, np.uint32)
    lo = (offs & M32).astype(np.uint32)
    hi = ((offs >> 32) & M32).astype(np.uint32) if wide else zero  # 32-bit offsets leave the high word 0
    ref = _philox_ref(seed % 2**64, lo, hi, zero, zero, rounds)  # the seed as uint64 (-1 sign-extends)
    np.testing.assert_array_equal(out.reshape(5, n), ref + [ref[0]])
    u = [_uniform_ref(r) for r in ref]
    np.testing.assert_array_equal(f[:n], u[0])
    np.testing.assert_array_equal(f[n:2 * n], u[3])
    np.testing.assert_array_equal(f[2 * n:3 * n], _normal_ref(u[0], u[1])[0])
    np.testing.assert_array_equal(f[3 * n:4 * n], _normal_ref(u[0], u[1])[1])
    np.testing.assert_array_equal(f[4 * n:], _normal_ref(u[2], u[3])[0])
    assert ((f[:2 * n] >= 0) & (f[:2 * n] < 1)).all()


@dvmlang.kernel
def _philox_k(out_ptr, seed, c0, c1, c2, c3):
    a, b, c, d = dl.philox(seed, c0, c1, c2, c3)
    o = dl.arange(0, 1)
    dl.store(out_ptr + o, dl.full((1,), a, dl.uint32))
    dl.store(out_ptr + 1 + o, dl.full((1,), b, dl.uint32))
    dl.store(out_ptr + 2 + o, dl.full((1,), c, dl.uint32))
    dl.store(out_ptr + 3 + o, dl.full((1,), d, dl.uint32))


@pytest.mark.parametrize("key, ctr, expected", [
    # Philox4x32-10 known-answer vectors of the Random123 reference (counter, key -> output)
    ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32), (M32, M32, M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0xA4093822, 0x299F31D0), (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(key, ctr, expected):
    seed = key[0] | key[1] << 32
    assert [int(v[()]) for v in _philox_ref(seed, *ctr)] == list(expected)
    out = np.zeros(4, np.uint32)
    _philox_k[(1,)](out, np.uint64(seed), *(np.uint32(c) for c in ctr))
    assert out.tolist() == list(expected)


@dvmlang.kernel
def _bad_random_k(out_ptr, N: dl.constexpr, CASE: dl.constexpr):
    offs = dl.arange(0, N)
    if CASE == 0:
        r = dl.rand(7, offs.to(dl.float32))
    elif CASE == 1:
        r = dl.randint(1.5, offs)
    elif CASE == 2:
        r, _, _, _ = dl.philox_impl(offs, offs, offs, offs, 1, 2)
    else:
        r, _, _, _ = dl.philox(1, offs, offs, offs, offs.to(dl.int64))
    dl.store(out_ptr + offs, r)


@pytest.mark.parametrize("case, message", [(0, "random-number offsets must be integers"),
                                           (1, "the Philox seed must be an integer"),
                                           (2, "needs four uint32 or four uint64 counters"),
                                           (3, "needs four 32-bit or four 64-bit counters")])
def test_random_number_errors(case, message):
    text = _compile_error(_bad_random_k, np.zeros(4, np.float32), N=4, CASE=case)
    assert message in text


def _philox4x64_ref(k0, k1, ctr, n_rounds=10):
    """Philox4x64 on Python integers."""
    m = 2**64 - 1
    c0, c1, c2, c3 = ctr
    for _ in range(n_rounds):
        p0, p2 = 0xD2E7470EE14C6C93 * c0, 0xCA5A826395121157 * c2
        c0, c1, c2, c3 = (p2 >> 64) ^ c1 ^ k0, p2 & m, (p0 >> 64) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + 0x9E3779B97F4A7C15) & m, (k1 + 0xBB67AE8584CAA73B) & m
    return c0, c1, c2, c3


@dvmlang.kernel
def _philox64_k(out_ptr, seed, c_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    c0 = dl.load(c_ptr + offs)
    c1 = dl.load(c_ptr + N + offs)
    c2 = dl.load(c_ptr + 2 * N + offs)
    c3 = dl.load(c_ptr + 3 * N + offs)
    a, b, cc, d = dl.philox(seed, c0, c1, c2, c3)
    dl.store(out_ptr + offs, a.to(dl.int64, bitcast=True))
    dl.store(out_ptr + N + offs, b.to(dl.int64, bitcast=True))
    dl.store(out_ptr + 2 * N + offs, cc.to(dl.int64, bitcast=True))
    dl.store(out_ptr + 3 * N + offs, d.to(dl.int64, bitcast=True))


def test_philox_with_64_bit_counters(rng):
    n = 5
    ctr = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (4, n), dtype=np.int64)
    ctr[:, 0] = 0
    out = np.zeros(4 * n, np.int64)
    for seed in (0, 0x0123456789ABCDEF):
        _philox64_k[(1,)](out, seed, ctr, N=n)
        for i in range(n):
            ref = _philox4x64_ref(seed, 0, [int(v) % 2**64 for v in ctr[:, i]])
            assert [int(v) % 2**64 for v in out.reshape(4, n)[:, i]] == list(ref)
    # the Random123 known answer for counter 0 and key 0
    assert _philox4x64_ref(0, 0, (0, 0, 0, 0)) == (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B,
                                                   0x7E68B68AEC7BA23B)


@dvmlang.kernel
def _item_k(x_ptr, out_ptr):
    v = dl.load(x_ptr + dl.arange(0, 1)).item()  # a scalar: it can bound a loop
    acc = 0.0
    for i in range(0, v.to(dl.int32)):
        acc += 1.0
    dl.store(out_ptr, acc + v)


def test_item_of_a_one_element_tile_is_a_scalar():
    out = np.zeros(1, np.float32)
    _item_k[(1,)](np.array([3.0], np.float32), out)
    assert out[0] == 6.0


def test_item_of_a_larger_tile_is_a_compile_error():
    @dvmlang.kernel
    def k(x_ptr, out_ptr):
        dl.store(out_ptr, dl.load(x_ptr + dl.arange(0, 2)).item())

    with pytest.raises(dvmlang.KernelTypeError, match="item\\(\\) needs a tile with one element"):
        k[(1,)](np.zeros(2, np.float32), np.zeros(1, np.float32))
