"""Every op and composite of ``dvmlang.ops`` against numpy, fused and unfused, at many shapes.

One ``dvmlang.graph`` per (function, fuse) is reused across the shapes of a test, the way a model calls it:
the shapes are symbolic, so the shapes after the first only encode (the first call's tiles are kept).
"""

import math

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops

SHAPES = [(1,), (7,), (1, 1), (1, 13), (13, 1), (3, 5), (13, 97), (2, 3, 5), (2, 3, 4, 5), (67, 1031)]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x.astype(np.float64)).astype(x.dtype)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_layer_norm(x, w=None, b=None, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    v = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(v + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def np_rms_norm(x, w=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def np_gelu(x):
    return (0.5 * x * (1 + erf(x / np.float32(math.sqrt(2))))).astype(x.dtype)


def np_gelu_tanh(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))).astype(x.dtype)


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_sdpa(q, k, v, causal=False):
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ np.swapaxes(k64, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        rows, cols = s.shape[-2:]
        s = np.where(np.tril(np.ones((rows, cols), bool)), s, -np.inf)
    return (np_softmax(s) @ v64).astype(q.dtype)


_graphs: dict = {}


def graph_of(fn, fuse, **kw):
    key = (fn, fuse, tuple(sorted(kw.items())))
    if key not in _graphs:
        _graphs[key] = dvmlang.graph(fn, fuse=fuse, **kw)
    return _graphs[key]


def check(fn, ref, *args, rtol=1e-5, atol=1e-6, dtype=None):
    """``fn`` fused and unfused gives numpy's ``ref`` (values, shape and dtype)."""
    want = ref(*args)
    wants = want if isinstance(want, tuple) else (want,)
    for fuse in (True, False):
        got = graph_of(fn, fuse)(*args)
        gots = got if isinstance(got, tuple) else (got,)
        assert len(gots) == len(wants)
        for g, w in zip(gots, wants):
            w = np.asarray(w)
            assert g.shape == w.shape, (fuse, g.shape, w.shape)
            assert g.dtype == (dtype or w.dtype), (fuse, g.dtype, w.dtype)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"fuse={fuse} shape={w.shape}")


def randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- elementwise ---------------------------------------------------------------------------------------------

BINARY = {
    "add": (ops.add, np.add), "sub": (ops.sub, np.subtract), "mul": (ops.mul, np.multiply),
    "div": (ops.div, np.divide), "maximum": (ops.maximum, np.maximum), "minimum": (ops.minimum, np.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, rng):
    op, ref = BINARY[name]
    fn = lambda a, b: op(a, b)  # noqa: E731
    for shape in SHAPES:
        a, b = randn(rng, shape), randn(rng, shape)
        if name == "div":
            b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
        check(fn, ref, a, b)


def test_pow(rng):
    for shape in SHAPES:
        a = rng.random(shape).astype(np.float32) + 0.1
        b = randn(rng, shape)
        check(lambda a, b: ops.pow(a, b), np.power, a, b, rtol=1e-5)
        check(lambda a: a ** 2.0, lambda a: a ** 2, a)


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons(name, rng):
    ref = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
           "ne": np.not_equal}[name]
    op = getattr(ops, name)
    for shape in SHAPES:
        a = randn(rng, shape)
        b = np.where(rng.random(shape) < 0.3, a, randn(rng, shape)).astype(np.float32)  # some ties
        check(lambda a, b: op(a, b), ref, a, b)


UNARY = {
    "neg": (ops.neg, np.negative, "any"), "abs": (ops.abs, np.abs, "any"), "exp": (ops.exp, np.exp, "any"),
    "log": (ops.log, np.log, "pos"), "sqrt": (ops.sqrt, np.sqrt, "pos"),
    "rsqrt": (ops.rsqrt, lambda x: 1 / np.sqrt(x), "pos"), "tanh": (ops.tanh, np.tanh, "any"),
    "sigmoid": (ops.sigmoid, np_sigmoid, "any"), "erf": (ops.erf, erf, "any"),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, rng):
    op, ref, domain = UNARY[name]
    for shape in SHAPES:
        x = randn(rng, shape) * 3
        if domain == "pos":
            x = np.abs(x) + 0.05
        check(lambda a: op(a), ref, x.astype(np.float32), rtol=2e-5, atol=2e-6)


def test_integer_inputs_keep_or_promote_their_dtype(rng):
    a = rng.integers(-50, 50, (9, 11)).astype(np.int32)
    b = rng.integers(1, 50, (9, 11)).astype(np.int32)
    check(lambda a, b: a + b * 3, lambda a, b: a + b * 3, a, b)
    check(lambda a: ops.abs(a) - 1, lambda a: np.abs(a) - 1, a)
    check(lambda a, b: a / b, lambda a, b: (a / b).astype(np.float32), a, b)  # true division of ints is float32
    check(lambda a: ops.exp(a * 0.01), lambda a: np.exp(a.astype(np.float32) * np.float32(0.01)), a)


def test_python_operators(rng):
    x, y = randn(rng, (6, 7)), randn(rng, (6, 7))
    y = np.where(np.abs(y) < 0.1, 1.0, y).astype(np.float32)

    def f(a, b):
        return (2.0 + a) * b - a / b + (-a) - abs(b) + (1.0 - b) * 3.0 + 1.0 / b + a ** 2.0

    check(f, lambda a, b: (2 + a) * b - a / b + (-a) - abs(b) + (1 - b) * 3 + 1 / b + a ** 2, x, y, rtol=1e-4)
    check(lambda a, b: ((a < b), (a <= b), (a > b), (a >= b)), lambda a, b: (a < b, a <= b, a > b, a >= b), x, y)
    z = np.where(rng.random((6, 7)) < 0.5, x, y).astype(np.float32)
    check(lambda a, b: (a == b, a != b, ops.where(a == b, 1.0, 0.0)),
          lambda a, b: (a == b, a != b, np.where(a == b, 1.0, 0.0).astype(np.float32)), x, z)
    w = randn(rng, (7, 3))
    check(lambda a, w: (a @ w) + a.sum(axis=1, keepdims=True) + a.mean(axis=1, keepdims=True) +
          a.max(axis=1, keepdims=True),
          lambda a, w: a @ w + a.sum(1, keepdims=True) + a.mean(1, keepdims=True) + a.max(1, keepdims=True),
          x, w, rtol=1e-4, atol=1e-5)
    check(lambda a: a.T * 2.0 + a.reshape(a.shape[1], a.shape[0]).astype("float16").astype("float32"),
          lambda a: a.T * 2 + a.reshape(7, 6).astype(np.float16).astype(np.float32), x)


def test_where_and_cast(rng):
    for shape in SHAPES:
        a, b = randn(rng, shape), randn(rng, shape)
        check(lambda a, b: ops.where(a > b, a, b * 2.0), lambda a, b: np.where(a > b, a, b * 2), a, b)
        check(lambda a: ops.where(a > 0, a, 0.0), lambda a: np.where(a > 0, a, np.float32(0)), a)
        check(lambda a: ops.where(a > 0, 1.0, a), lambda a: np.where(a > 0, np.float32(1), a), a)
        check(lambda a: ops.cast(a, np.float16), lambda a: a.astype(np.float16), a, rtol=1e-3)
        check(lambda a: ops.cast(a * 10.0, "int32"), lambda a: (a * 10).astype(np.int32), a)
        check(lambda a: ops.cast(a > 0, dvmlang.dtypes.float32) + 1.0, lambda a: (a > 0).astype(np.float32) + 1, a)
    h = randn(rng, (5, 33), np.float16)
    check(lambda a: ops.cast(a, "float32") * 2.0, lambda a: a.astype(np.float32) * 2, h)
    check(lambda a: ops.exp(a) + a, lambda a: (np.exp(a.astype(np.float32)) + a).astype(np.float16), h, rtol=2e-3,
          atol=2e-3)


# ---- shapes ---------------------------------------------------------------------------------------------------


def test_broadcasting(rng):
    cases = [((5, 7), (7,)), ((5, 7), (5, 1)), ((5, 1), (1, 7)), ((2, 3, 4), (3, 1)), ((2, 1, 4), (3, 4)),
             ((1,), (9, 4)), ((2, 3, 4, 5), (4, 5)), ((3, 1, 5), (1, 4, 1))]
    for sa, sb in cases:
        a, b = randn(rng, sa), randn(rng, sb)
        check(lambda a, b: ops.exp(a) * b + a, lambda a, b: np.exp(a) * b + a, a, b, rtol=1e-5)


def test_broadcast_to(rng):
    for src, dst in [((7,), (4, 7)), ((3, 1), (3, 5)), ((1,), (2, 3, 4)), ((1, 6), (2, 5, 6))]:
        x = randn(rng, src)
        check(lambda a, dst=dst: ops.broadcast_to(a, dst) + 1.0, lambda a: np.broadcast_to(a, dst) + 1, x)
        check(lambda a, dst=dst: ops.broadcast_to(a, dst), lambda a: np.broadcast_to(a, dst), x)


def test_reshape(rng):
    x = randn(rng, (6, 10))
    flat = dvmlang.graph(lambda a: ops.reshape(ops.exp(a), (-1,)) * 2.0, static={"a": (0, 1)})
    np.testing.assert_allclose(flat(x), np.exp(x).reshape(-1) * 2, rtol=1e-6)
    check(lambda a: ops.reshape(a, (a.shape[1], a.shape[0])) + 1.0, lambda a: a.reshape(10, 6) + 1, x)
    x3 = randn(rng, (4, 3, 5))
    rows = dvmlang.graph(lambda a: ops.reshape(a + 1.0, (a.shape[0], -1)), static={"a": (1, 2)})
    np.testing.assert_allclose(rows(x3), (x3 + 1).reshape(4, 15))
    np.testing.assert_allclose(rows(x3[:2]), (x3[:2] + 1).reshape(2, 15))
    # a product of symbols is a dim (shape arithmetic, tests/test_fuser_torch_ops.py)
    np.testing.assert_allclose(dvmlang.graph(lambda a: ops.reshape(a, (a.shape[0], -1)))(x3), x3.reshape(4, 15))
    g = dvmlang.graph(lambda a: ops.reshape(a, (3, 20)) * 2.0, static={"a": (0, 1)})
    np.testing.assert_allclose(g(x), x.reshape(3, 20) * 2)


def test_reshape_of_symbolic_dims_to_numbers_says_how_to_fix_it():
    g = dvmlang.graph(lambda a: ops.reshape(a, (3, 20)))
    with pytest.raises(dvmlang.GraphError, match="static"):
        g(np.ones((6, 10), np.float32))


def test_transpose_and_permute(rng):
    for shape in [(1, 5), (7, 3), (13, 97)]:
        x = randn(rng, shape)
        check(lambda a: ops.transpose(a), lambda a: a.T, x)
        check(lambda a: ops.exp(ops.transpose(a)) + 1.0, lambda a: np.exp(a.T) + 1, x)
        check(lambda a: ops.transpose(ops.exp(a)) * 2.0, lambda a: np.exp(a).T * 2, x)
    x3 = randn(rng, (3, 5, 6))
    for perm in [(2, 0, 1), (1, 0, 2), (0, 2, 1), (2, 1, 0)]:
        check(lambda a, perm=perm: ops.permute(a, perm) * 3.0, lambda a: a.transpose(perm) * 3, x3)
    check(lambda a: ops.transpose(a, 0, 2) - 1.0, lambda a: np.swapaxes(a, 0, 2) - 1, x3)
    x4 = randn(rng, (2, 3, 4, 5))
    check(lambda a: ops.permute(a, 3, 1, 0, 2) + 0.5, lambda a: a.transpose(3, 1, 0, 2) + 0.5, x4)


# ---- reductions -----------------------------------------------------------------------------------------------

REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "var": np.var}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name, rng):
    op, ref = getattr(ops, name), REDUCTIONS[name]
    shapes = [(1,), (7,), (1, 1), (1, 13), (13, 1), (13, 97), (2, 3, 5), (2, 3, 4, 5), (3, 5000)]
    if name in ("mean", "var"):  # composites of sum: fewer shapes
        shapes = [(7,), (1, 13), (13, 97), (2, 3, 5), (3, 5000)]
    for shape in shapes:
        x = randn(rng, shape)
        r = len(shape)
        axes = [None, 0, -1] + ([1, (0, r - 1)] if r >= 2 else []) + ([(1, 2), (0, 2)] if r >= 3 else [])
        for axis in axes:
            for keepdims in (False, True):
                check(lambda a, axis=axis, keepdims=keepdims: op(a, axis=axis, keepdims=keepdims),
                      lambda a, axis=axis, keepdims=keepdims: ref(a, axis=axis, keepdims=keepdims), x,
                      rtol=1e-4, atol=1e-5)


def test_var_correction_and_reductions_of_expressions(rng):
    x = randn(rng, (9, 31))
    check(lambda a: ops.var(a, -1, correction=1), lambda a: a.var(-1, ddof=1), x, rtol=1e-4)
    check(lambda a: ops.sum(ops.exp(a) * 2.0, -1) + ops.max(a, -1), lambda a: (np.exp(a) * 2).sum(-1) + a.max(-1),
          x, rtol=1e-5)
    i = rng.integers(-9, 9, (5, 7)).astype(np.int32)
    check(lambda a: ops.sum(a, -1), lambda a: a.sum(-1).astype(np.int32), i)
    check(lambda a: ops.max(a, 0), lambda a: a.max(0), i)
    check(lambda a: ops.mean(a, -1), lambda a: a.mean(-1).astype(np.float32), i)
    b = rng.random((4, 6)) < 0.5
    check(lambda a: ops.sum(a, -1), lambda a: a.sum(-1).astype(np.int32), b)


# ---- matmul ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul(dtype, rng):
    tol = 1e-4 if dtype == np.float32 else 2e-2
    for m, k, n in [(1, 1, 1), (5, 7, 3), (64, 64, 64), (37, 129, 71), (200, 96, 130)]:
        a, b = randn(rng, (m, k), dtype), randn(rng, (k, n), dtype)
        ref = lambda a, b: (a.astype(np.float32) @ b.astype(np.float32)).astype(dtype)  # noqa: E731
        check(lambda a, b: ops.matmul(a, b), ref, a, b, rtol=tol, atol=tol * 4)
        check(lambda a, b: ops.maximum(a @ b, 0.0) * 2.0,
              lambda a, b: (np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0) * 2).astype(dtype), a, b,
              rtol=tol, atol=tol * 4)


def test_matmul_epilogue_with_several_live_tiles_is_tiled_to_fit_ub(rng):
    # silu(h @ w) * u keeps the accumulator, a loaded tile and two computed ones live: 128x128 tiles would not fit
    h, w, u = randn(rng, (77, 64)), randn(rng, (64, 128)), randn(rng, (77, 128))
    check(lambda h, w, u: ops.silu(h @ w) * u, lambda h, w, u: (h @ w) * np_sigmoid(h @ w) * u, h, w, u,
          rtol=1e-4, atol=1e-4)


def test_batched_matmul(rng):
    cases = [((3, 5, 7), (3, 7, 4)), ((3, 5, 7), (7, 4)), ((5, 7), (2, 7, 4)), ((2, 3, 5, 7), (2, 3, 7, 6)),
             ((2, 1, 5, 7), (1, 3, 7, 6)), ((4, 1, 9), (4, 9, 1))]
    for sa, sb in cases:
        a, b = randn(rng, sa), randn(rng, sb)
        check(lambda a, b: a @ b, lambda a, b: a @ b, a, b, rtol=1e-4, atol=1e-4)
    a, b, c = randn(rng, (3, 5, 7)), randn(rng, (3, 7, 4)), randn(rng, (4,))
    check(lambda a, b, c: ops.tanh(a @ b + c), lambda a, b, c: np.tanh(a @ b + c), a, b, c, rtol=1e-4, atol=1e-5)
    h = randn(rng, (2, 33, 40), np.float16)
    check(lambda a, b: a @ ops.transpose(b), lambda a, b: (a.astype(np.float32) @
                                                          np.swapaxes(b, -1, -2).astype(np.float32)).astype(np.float16),
          h, h, rtol=2e-2, atol=0.1)


# ---- composites -----------------------------------------------------------------------------------------------

ROWS = [(1, 1), (1, 7), (7, 1), (3, 5), (13, 97), (64, 300), (5, 4099), (2, 3, 5, 7)]


def test_softmax_and_log_softmax(rng):
    for shape in ROWS:
        x = randn(rng, shape) * 3
        check(lambda a: ops.softmax(a), np_softmax, x, rtol=1e-5, atol=1e-7)
        check(lambda a: ops.log_softmax(a), lambda a: np.log(np_softmax(a)), x, rtol=1e-5, atol=1e-5)
    x = randn(rng, (6, 9, 4))
    check(lambda a: ops.softmax(a, axis=1), lambda a: np_softmax(a, 1), x, rtol=1e-5, atol=1e-7)
    check(lambda a: ops.log_softmax(a, axis=0), lambda a: np.log(np_softmax(a, 0)), x, rtol=1e-5, atol=1e-5)


def test_layer_norm_and_rms_norm(rng):
    for shape in ROWS:
        x = randn(rng, shape)
        w, b = randn(rng, shape[-1:]), randn(rng, shape[-1:])
        check(lambda a, w, b: ops.layer_norm(a, w, b), np_layer_norm, x, w, b, rtol=1e-4, atol=1e-4)
        check(lambda a, w: ops.rms_norm(a, w), np_rms_norm, x, w, rtol=1e-4, atol=1e-5)
    x = randn(rng, (9, 40))
    check(lambda a: ops.layer_norm(a, eps=1e-3), lambda a: np_layer_norm(a, eps=1e-3), x, rtol=1e-4, atol=1e-4)
    check(lambda a: ops.rms_norm(a), np_rms_norm, x, rtol=1e-4, atol=1e-5)


def test_activations(rng):
    for shape in ROWS:
        x = randn(rng, shape) * 2
        g = randn(rng, shape)
        check(lambda a: ops.gelu(a), np_gelu, x, rtol=1e-5, atol=1e-6)
        check(lambda a: ops.gelu(a, approximate="tanh"), np_gelu_tanh, x, rtol=1e-5, atol=1e-6)
        check(lambda a: ops.silu(a), lambda a: a * np_sigmoid(a), x, rtol=1e-5, atol=1e-6)
        check(lambda a, b: ops.swiglu(a, b), lambda a, b: a * b * np_sigmoid(b), x, g, rtol=1e-5, atol=1e-6)
    with pytest.raises(dvmlang.GraphError, match="approximate"):
        dvmlang.graph(lambda a: ops.gelu(a, approximate="fast"))(np.ones((2, 2), np.float32))


def test_layer_norm_gelu_block(rng):
    @dvmlang.graph
    def block(x, w, b):
        return ops.gelu(ops.layer_norm(x, w, b, eps=1e-5)) * 2.0

    for rows, cols in [(1, 8), (64, 300), (97, 1000), (3, 6000)]:
        x, w, b = randn(rng, (rows, cols)), randn(rng, cols), randn(rng, cols)
        np.testing.assert_allclose(block(x, w, b), np_gelu(np_layer_norm(x, w, b)) * 2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal, rng):
    fn = lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=causal)  # noqa: E731
    for shape in [(1, 1, 4), (2, 7, 16), (2, 33, 64), (2, 3, 9, 16)]:
        q, k, v = randn(rng, shape), randn(rng, shape), randn(rng, shape)
        check(fn, lambda q, k, v: np_sdpa(q, k, v, causal), q, k, v, rtol=1e-4, atol=1e-4)
    q, k, v = randn(rng, (2, 5, 16)), randn(rng, (2, 11, 16)), randn(rng, (2, 11, 8))  # keys longer than queries
    check(fn, lambda q, k, v: np_sdpa(q, k, v, causal), q, k, v, rtol=1e-4, atol=1e-4)


def test_attention_fp16_keeps_fp16(rng):
    q, k, v = (randn(rng, (2, 3, 9, 16), np.float16) for _ in range(3))
    check(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=True),
          lambda q, k, v: np_sdpa(q, k, v, True), q, k, v, rtol=3e-2, atol=3e-2)
    g = dvmlang.graph(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, scale=0.5))
    np.testing.assert_allclose(g(q, k, v).astype(np.float32),
                               np_sdpa(q * np.float16(2), k, v).astype(np.float32), rtol=3e-2, atol=3e-2)


def test_swiglu_mlp(rng):
    def mlp(x, w1, w3, w2):
        return ops.swiglu(x @ w3, x @ w1) @ w2

    def ref(x, w1, w3, w2):
        h = x @ w1
        return (x @ w3 * h * np_sigmoid(h)) @ w2

    for rows in (1, 17, 64):
        x, w1, w3, w2 = randn(rng, (rows, 32)), randn(rng, (32, 48)), randn(rng, (32, 48)), randn(rng, (48, 32))
        check(mlp, ref, x, w1, w3, w2, rtol=1e-4, atol=1e-3)
