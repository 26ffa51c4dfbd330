"""The `triton.language` names dvmlang adds for Triton compatibility (docs/language.md, section 11), each
checked against numpy on sizes that are 1, prime and not powers of two."""

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
