"""Every operation of the language against numpy, for float32, float16, bfloat16 and integer dtypes,
on tile shapes that are and are not powers of two."""

import math

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

BF16 = ml_dtypes.bfloat16
FLOATS = [np.float32, np.float16, BF16]
SHAPES = [(16,), (7,), (4, 8), (3, 5)]
TOL = {np.dtype(np.float32): (2e-6, 1e-6), np.dtype(np.float16): (2e-3, 2e-3), np.dtype(BF16): (2e-2, 2e-2)}


@dvmlang.kernel
def offsets(SHAPE):
    if len(SHAPE) == 1:
        return dl.arange(0, SHAPE[0])
    return dl.arange(0, SHAPE[0])[:, None] * SHAPE[1] + dl.arange(0, SHAPE[1])[None, :]


@dvmlang.kernel
def unary_k(x_ptr, out_ptr, SHAPE: dl.constexpr, OP: dl.constexpr):
    offs = offsets(SHAPE)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, getattr(dl, OP)(x))


@dvmlang.kernel
def binary_k(x_ptr, y_ptr, out_ptr, SHAPE: dl.constexpr, OP: dl.constexpr):
    offs = offsets(SHAPE)
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "truediv":
        r = x / y
    elif OP == "floordiv":
        r = x // y
    elif OP == "mod":
        r = x % y
    elif OP == "maximum":
        r = dl.maximum(x, y)
    elif OP == "minimum":
        r = dl.minimum(x, y)
    elif OP == "and":
        r = x & y
    elif OP == "or":
        r = x | y
    elif OP == "xor":
        r = x ^ y
    elif OP == "shl":
        r = x << y
    elif OP == "shr":
        r = x >> y
    elif OP == "lt":
        r = x < y
    elif OP == "le":
        r = x <= y
    elif OP == "gt":
        r = x > y
    elif OP == "ge":
        r = x >= y
    elif OP == "eq":
        r = x == y
    else:
        r = x != y
    dl.store(out_ptr + offs, r)


def _data(rng, shape, dtype, lo=-3.0, hi=3.0, positive=False):
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        a = rng.integers(max(info.min, -100), min(info.max, 100), size=shape).astype(dtype)
        return a
    a = rng.uniform(0.1 if positive else lo, hi, size=shape)
    return a.astype(dtype)


UNARY_REF = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil,
    "abs": np.abs,
}
POSITIVE = {"log", "log2", "sqrt", "rsqrt"}


@pytest.mark.parametrize("op", sorted(UNARY_REF))
@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(16,), (3, 5)])
def test_unary_float(rng, op, dtype, shape):
    x = _data(rng, shape, dtype, positive=op in POSITIVE)
    out = np.zeros(shape, dtype)
    unary_k[(1,)](x, out, SHAPE=shape, OP=op)
    ref = UNARY_REF[op](x.astype(np.float64)).astype(dtype)
    rtol, atol = TOL[np.dtype(dtype)]
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_unary_int_abs(rng, dtype):
    x = _data(rng, (7,), dtype)
    out = np.zeros_like(x)
    unary_k[(1,)](x, out, SHAPE=(7,), OP="abs")
    np.testing.assert_array_equal(out, np.abs(x))


def _c_floordiv(x, y):
    """Triton's `//`: integers truncate toward zero (C), floats floor (an error in Triton, defined by dvmlang)."""
    if np.issubdtype(np.result_type(x, y), np.integer):
        return (x - np.fmod(x, y)) // y
    return np.floor_divide(x, y)


ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
         "maximum": np.maximum, "minimum": np.minimum, "floordiv": _c_floordiv, "mod": np.fmod}
CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
       "ne": np.not_equal}
BITS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("op", sorted(ARITH) + sorted(CMP))
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int8], ids=["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("shape", SHAPES)
def test_binary(rng, op, dtype, shape):
    x = _data(rng, shape, dtype)
    y = _data(rng, shape, dtype)
    if op in ("truediv", "floordiv", "mod"):
        y = np.where(y == 0, 1, y).astype(dtype)
    if op == "eq":
        y[..., 0] = x[..., 0]
    is_int = np.issubdtype(np.dtype(dtype), np.integer)
    out_dtype = bool if op in CMP else (np.float32 if op == "truediv" and is_int else dtype)
    out = np.zeros(shape, out_dtype)
    binary_k[(1,)](x, y, out, SHAPE=shape, OP=op)
    if op in CMP:
        np.testing.assert_array_equal(out, CMP[op](x, y))
        return
    if is_int:
        ref = ARITH[op](x.astype(np.int64), y.astype(np.int64))
        ref = ref.astype(np.float32) if op == "truediv" else ref.astype(dtype)
        np.testing.assert_allclose(out, ref, rtol=1e-6)
        return
    if op in ("floordiv", "mod"):
        ref = ARITH[op](x.astype(np.float32), y.astype(np.float32))  # 16-bit floats compute in float32 (Triton)
        rtol, atol = TOL[np.dtype(dtype)]
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)
        return
    ref = ARITH[op](x.astype(np.float64), y.astype(np.float64)).astype(dtype)
    rtol, atol = TOL[np.dtype(dtype)]
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", sorted(BITS) + ["shl", "shr"])
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_bitwise(rng, op, dtype):
    shape = (4, 8)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    if op in ("shl", "shr"):
        y = rng.integers(0, 8 * np.dtype(dtype).itemsize, size=shape).astype(dtype)
        ref = (np.left_shift if op == "shl" else np.right_shift)(x, y)
    else:
        y = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
        ref = BITS[op](x, y)
    out = np.zeros(shape, dtype)
    binary_k[(1,)](x, y, out, SHAPE=shape, OP=op)
    np.testing.assert_array_equal(out, ref)


@dvmlang.kernel
def misc_k(x_ptr, y_ptr, out_ptr, a, b, N: dl.constexpr, OP: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    y = dl.load(y_ptr + offs)
    if OP == "fma":
        r = dl.fma(x, y, 0.5)
    elif OP == "clamp":
        r = dl.clamp(x, -0.5, 0.75)
    elif OP == "where":
        r = dl.where((x > 0) & (y < 0), x, dl.where(x > y, y, 2.0))
    elif OP == "logical":
        r = ((x > 0) and (y > 0)).to(dl.float32) + ((x > 0) or (y > 0)).to(dl.float32) * 2.0 + \
            (not (x > 0)).to(dl.float32) * 4.0
    elif OP == "invert":
        r = (~(x > 0)).to(dl.float32)
    elif OP == "scalar_minmax":
        r = x * min(a, b) + max(a, b)
    elif OP == "cdiv":
        r = x + dl.cdiv(a, b)
    elif OP == "int_floordiv_mod":
        r = (a // b + a % b + (-a) // b + (-a) % b).to(dl.float32) + x * 0.0
    elif OP == "chained_compare":
        r = (-0.5 < x < 0.5).to(dl.float32)
    else:
        r = -x
    dl.store(out_ptr + offs, r)


@pytest.mark.parametrize("op,ref", [
    ("fma", lambda x, y, a, b: x * y + 0.5),
    ("clamp", lambda x, y, a, b: np.clip(x, -0.5, 0.75)),
    ("where", lambda x, y, a, b: np.where((x > 0) & (y < 0), x, np.where(x > y, y, 2.0))),
    ("logical", lambda x, y, a, b: ((x > 0) & (y > 0)) + ((x > 0) | (y > 0)) * 2.0 + (~(x > 0)) * 4.0),
    ("invert", lambda x, y, a, b: ~(x > 0)),
    ("scalar_minmax", lambda x, y, a, b: x * min(a, b) + max(a, b)),
    ("cdiv", lambda x, y, a, b: x + -(-a // b)),
    ("int_floordiv_mod", lambda x, y, a, b: np.full_like(x, 2 + 1 - 2 - 1)),  # C: 7 // 3, 7 % 3, -7 // 3, -7 % 3
    ("chained_compare", lambda x, y, a, b: (-0.5 < x) & (x < 0.5)),
])
def test_misc_math(rng, op, ref):
    n = 13
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = rng.uniform(-1, 1, n).astype(np.float32)
    out = np.zeros(n, np.float32)
    misc_k[(1,)](x, y, out, 7, 3, N=n, OP=op)
    np.testing.assert_allclose(out, ref(x, y, 7, 3).astype(np.float32), rtol=1e-6, atol=1e-6)


@dvmlang.kernel
def reduce_k(x_ptr, out_ptr, R: dl.constexpr, C: dl.constexpr, OP: dl.constexpr, AXIS: dl.constexpr,
             KEEP: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, R)[:, None] * C + dl.arange(0, C)[None, :])
    r = getattr(dl, OP)(x, axis=AXIS, keep_dims=KEEP)
    if AXIS is None:
        dl.store(out_ptr + dl.arange(0, 1), dl.reshape(r, (1,)))
    elif AXIS == 0:
        dl.store(out_ptr + dl.arange(0, C), dl.reshape(r, (C,)))
    else:
        dl.store(out_ptr + dl.arange(0, R), dl.reshape(r, (R,)))


@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32], ids=["f32", "f16", "bf16", "i32"])
@pytest.mark.parametrize("keep", [False, True])
def test_reductions(rng, op, axis, dtype, keep):
    R, C = 5, 12
    x = _data(rng, (R, C), dtype)
    n = 1 if axis is None else (C if axis == 0 else R)
    is_arg = op.startswith("arg")
    out_dtype = np.int32 if is_arg else dtype
    out = np.zeros(n, out_dtype)
    reduce_k[(1,)](x, out, R=R, C=C, OP=op, AXIS=axis, KEEP=keep)
    if is_arg:
        ref = getattr(np, op)(x.astype(np.float64), axis=axis)
        np.testing.assert_array_equal(out, ref)
        return
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[op](x.astype(np.float64), axis=axis)
    ref = np.atleast_1d(ref).astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer):
        np.testing.assert_array_equal(out, ref)
    else:
        rtol, atol = TOL[np.dtype(dtype)]
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol * 10)


@dvmlang.kernel
def scan_k(x_ptr, out_ptr, R: dl.constexpr, C: dl.constexpr, OP: dl.constexpr, AXIS: dl.constexpr,
           REV: dl.constexpr):
    offs = dl.arange(0, R)[:, None] * C + dl.arange(0, C)[None, :]
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, getattr(dl, OP)(x, axis=AXIS, reverse=REV))


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("rev", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scans(rng, op, axis, rev, dtype):
    R, C = 3, 7
    x = (rng.uniform(0.5, 1.5, (R, C)) if dtype == np.float32 else rng.integers(-3, 4, (R, C))).astype(dtype)
    out = np.zeros_like(x)
    scan_k[(1,)](x, out, R=R, C=C, OP=op, AXIS=axis, REV=rev)
    f = np.cumsum if op == "cumsum" else np.cumprod
    src = np.flip(x, axis) if rev else x
    ref = f(src.astype(np.float64), axis=axis)
    ref = np.flip(ref, axis) if rev else ref
    np.testing.assert_allclose(out, ref.astype(dtype), rtol=1e-5)


@dvmlang.kernel
def combine_add(a, b):
    return a + b


@dvmlang.kernel
def combine_argmax(v1, i1, v2, i2):
    right = (v2 > v1) | ((v2 == v1) & (i2 < i1))
    return dl.where(right, v2, v1), dl.where(right, i2, i1)


@dvmlang.kernel
def combine_k(x_ptr, sum_ptr, arg_ptr, scan_ptr, rscan_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    x = dl.load(x_ptr + offs)
    dl.store(sum_ptr, dl.reduce(x, 0, combine_add))
    v, i = dl.reduce((x, offs), 0, combine_argmax)
    dl.store(arg_ptr, i)
    dl.store(scan_ptr + offs, dl.associative_scan(x, 0, combine_add))
    dl.store(rscan_ptr + offs, dl.associative_scan(x, 0, combine_add, reverse=True))


@pytest.mark.parametrize("n", [1, 2, 5, 13, 32])
def test_reduce_and_scan_with_combine_fn(rng, n):
    x = rng.integers(-20, 20, n).astype(np.float32)
    s, a, sc, rs = np.zeros(1, np.float32), np.zeros(1, np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    combine_k[(1,)](x, s, a, sc, rs, N=n)
    assert s[0] == x.sum() and a[0] == np.argmax(x)
    np.testing.assert_array_equal(sc, np.cumsum(x))
    np.testing.assert_array_equal(rs, np.cumsum(x[::-1])[::-1])


@dvmlang.kernel
def shape_k(x_ptr, out_ptr, R: dl.constexpr, C: dl.constexpr, OP: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, R)[:, None] * C + dl.arange(0, C)[None, :])
    if OP == "trans":
        r = dl.trans(x)
    elif OP == "T":
        r = x.T
    elif OP == "reshape":
        r = dl.reshape(x, (C, R))
    elif OP == "permute3":
        r = dl.reshape(dl.permute(dl.reshape(x, (R, 1, C)), (2, 0, 1)), (C, R))
    elif OP == "broadcast":
        r = dl.broadcast_to(dl.sum(x, axis=0)[:, None], (C, R))
    elif OP == "expand":
        r = dl.expand_dims(dl.max(x, axis=1), 0) + dl.zeros((C, R), dl.float32)
    elif OP == "none_index":
        r = dl.sum(x, axis=0)[:, None] * dl.sum(x, axis=1)[None, :]
    elif OP == "cat":
        r = dl.reshape(dl.cat(x, x * 2.0, dim=0), (C, 2 * R))
    elif OP == "join":
        r = dl.reshape(dl.join(x, -x), (C, 2 * R))
    elif OP == "slice":
        r = dl.reshape(dl.cat(x[1:, :], x[:1, :], dim=0), (C, R))
    elif OP == "cast":
        r = dl.trans(x.to(dl.int32).to(dl.float32) + dl.cast(x, dl.float16).to(dl.float32))
    else:
        r = dl.trans(dl.zeros_like(x) + dl.full((R, C), 2.5, dl.float32))
    dl.store(out_ptr + dl.arange(0, r.shape[0])[:, None] * r.shape[1] + dl.arange(0, r.shape[1])[None, :], r)


SHAPE_REF = {
    "trans": lambda x: x.T, "T": lambda x: x.T, "reshape": lambda x: x.reshape(x.shape[1], x.shape[0]),
    "permute3": lambda x: x.T, "broadcast": lambda x: np.broadcast_to(x.sum(0)[:, None], (x.shape[1], x.shape[0])),
    "expand": lambda x: np.broadcast_to(x.max(1)[None, :], (x.shape[1], x.shape[0])),
    "none_index": lambda x: x.sum(0)[:, None] * x.sum(1)[None, :],
    "cat": lambda x: np.concatenate([x, 2 * x], 0).reshape(x.shape[1], -1),
    "join": lambda x: np.stack([x, -x], -1).reshape(x.shape[1], -1),
    "slice": lambda x: np.concatenate([x[1:], x[:1]], 0).reshape(x.shape[1], x.shape[0]),
    "cast": lambda x: (x.astype(np.int32).astype(np.float32) + x.astype(np.float16).astype(np.float32)).T,
    "full": lambda x: np.full((x.shape[1], x.shape[0]), 2.5),
}


@pytest.mark.parametrize("op", sorted(SHAPE_REF))
@pytest.mark.parametrize("shape", [(4, 8), (3, 5)])
def test_shape_ops(rng, op, shape):
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    ref = SHAPE_REF[op](x).astype(np.float32)
    out = np.zeros(ref.shape, np.float32)
    shape_k[(1,)](x, out, R=shape[0], C=shape[1], OP=op)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("src,dst", [(np.float32, np.float16), (np.float32, BF16), (np.float16, np.float32),
                                     (np.float32, np.int32), (np.int32, np.float32), (np.int32, np.int8),
                                     (np.float32, np.int8), (BF16, np.float16)])
def test_casts(rng, src, dst):
    x = rng.uniform(-100, 100, 12).astype(src)
    out = np.zeros(12, dst)

    unary_cast[(1,)](x, out, N=12, DT=dvmlang.dtypes.from_numpy(np.dtype(dst)))
    if np.issubdtype(np.dtype(dst), np.integer) and not np.issubdtype(np.dtype(src), np.integer):
        info = np.iinfo(dst)
        ref = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max).astype(dst)
    else:
        ref = x.astype(dst)
    np.testing.assert_array_equal(out, ref)


@dvmlang.kernel
def unary_cast(x_ptr, out_ptr, N: dl.constexpr, DT: dl.constexpr):
    offs = dl.arange(0, N)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs).to(DT))


def test_bitcast():
    x = np.array([1.0, -2.5, 0.0, 3.25], np.float32)
    out = np.zeros(4, np.int32)
    bitcast_k[(1,)](x, out, N=4)
    np.testing.assert_array_equal(out, x.view(np.int32))


@dvmlang.kernel
def bitcast_k(x_ptr, out_ptr, N: dl.constexpr):
    offs = dl.arange(0, N)
    dl.store(out_ptr + offs, dl.cast(dl.load(x_ptr + offs), dl.int32, bitcast=True))
