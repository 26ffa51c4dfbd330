"""The op vocabulary's bitwise ops and two-operand C math as tensor ops: ``dvmlang.ops.bitwise_and`` / ``_or`` /
``_xor`` / ``_not``, ``left_shift``, ``right_shift``, ``atan2``, ``hypot``, ``copysign`` and the Python operators
``& | ^ ~ << >>`` on graph values and lazy tensors (bitwise on integers, logical on bools, as numpy), and the
``prod`` reduction, through both fuser paths, lazy mode and the torch backend; and ``scatter_reduce``,
``embedding_bag`` and ``cdist`` in the torch backend. References: numpy, and torch eager for the backend (written from
each op's definition: numpy's and torch's documentation of the dtype rules and of shifts by out-of-range amounts)."""

import numpy as np
import pytest

import dvmlang
from dvmlang import ops

INTS = (np.int8, np.uint8, np.int16, np.int32, np.int64)


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _shl(a, s):  # C/Triton/torch: 0 for an amount out of [0, width)
    bits = a.dtype.itemsize * 8
    return np.where((s >= 0) & (s < bits), np.left_shift(a, np.clip(s, 0, bits - 1).astype(a.dtype)),
                    0).astype(a.dtype)


def _shr_kernel(a, s):  # the kernel op: by at most width - 1, a negative amount shifts by nothing
    bits = a.dtype.itemsize * 8
    return np.right_shift(a, np.clip(s, 0, bits - 1).astype(a.dtype))


@pytest.mark.parametrize("path", ["compose", "text"])
@pytest.mark.parametrize("dtype", INTS)
def test_bitwise_ops_on_integers(path, dtype, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    rng = np.random.default_rng(hash((path, np.dtype(dtype).name)) % 2**32)
    a, b = _ints(rng, dtype, (19, 70)), _ints(rng, dtype, (1, 70))  # (b broadcasts along the rows)
    bits = np.dtype(dtype).itemsize * 8
    s = rng.integers(0, bits, (19, 70)).astype(dtype)

    @dvmlang.graph
    def f(a, b, s):
        return (ops.bitwise_and(a, b), ops.bitwise_or(a, b), ops.bitwise_xor(a, b), ops.bitwise_not(a),
                ops.left_shift(a, s), ops.right_shift(a, s), a & 0x5A, 3 | a, a ^ b, ~b, a << 2, a >> 1)

    want = (a & b, a | b, a ^ b, ~a, _shl(a, s), _shr_kernel(a, s), a & dtype(0x5A), dtype(3) | a, a ^ b, ~b,
            _shl(a, np.full_like(a, 2)), a >> dtype(1))
    for i, (g, w) in enumerate(zip(f(a, b, s), want)):
        assert g.dtype == w.dtype, i
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


@pytest.mark.parametrize("path", ["compose", "text"])
def test_shifts_by_amounts_out_of_range_and_of_another_dtype(path, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    a = np.array([[1, -1, 0x40000000, -0x80000000, 7, -7, 123456, -99]], np.int32)
    s = np.array([[0, 31, 32, 40, -1, -3, 1, 30]], np.int64)  # promoted: the result is int64, as numpy's
    got_l, got_r = dvmlang.graph(lambda a, s: (ops.left_shift(a, s), ops.right_shift(a, s)))(a, s)
    a64 = a.astype(np.int64)
    assert got_l.dtype == np.int64 and got_r.dtype == np.int64
    np.testing.assert_array_equal(got_l, _shl(a64, s))
    np.testing.assert_array_equal(got_r, _shr_kernel(a64, s))


@pytest.mark.parametrize("path", ["compose", "text"])
def test_bool_operators_stay_logical_and_floats_keep_their_truth(path, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    x = np.linspace(-2, 2, 48, dtype=np.float32).reshape(6, 8)

    @dvmlang.graph
    def f(x):
        m = (x > 0) & (x < 1)
        return m, ~m, (x > 0) | (x < -1), (x > 0) ^ (x < 1), x & (x > 0), ops.bitwise_not(x > 0)

    want = ((x > 0) & (x < 1), ~((x > 0) & (x < 1)), (x > 0) | (x < -1), (x > 0) ^ (x < 1), (x != 0) & (x > 0),
            ~(x > 0))
    for i, (g, w) in enumerate(zip(f(x), want)):
        assert g.dtype == np.bool_, i
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


@pytest.mark.parametrize("path", ["compose", "text"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_two_operand_math(path, dtype, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((33, 65)) * 4).astype(dtype)
    y = (rng.standard_normal((33, 65)) * 4).astype(dtype)
    x[0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0]
    y[0, :6] = [-0.0, 0.0, np.inf, 1.0, 2.0, -np.inf]
    n = np.arange(33 * 65, dtype=np.int32).reshape(33, 65) - 1000

    @dvmlang.graph
    def f(x, y, n):
        return ops.atan2(x, y), ops.hypot(x, y), ops.copysign(x, y), ops.atan2(n, 100), ops.copysign(3, y)

    got = f(x, y, n)
    want = (np.arctan2(x, y), np.hypot(x, y), np.copysign(x, y),
            np.arctan2(n.astype(np.float32), np.float32(100)), np.copysign(dtype(3), y))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, (i, g.dtype, w.dtype)
        tol = 1e-6 if w.dtype == np.float32 else 1e-3
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {i}")
    assert np.signbit(got[0][0, 1]) == np.signbit(np.arctan2(np.float32(-0.0), np.float32(0.0)))


def test_lazy_tensors_use_the_same_operators():
    rng = np.random.default_rng(5)
    a, b = _ints(rng, np.int32, (7, 9)), _ints(rng, np.int32, (7, 9))
    with dvmlang.lazy():
        ta, tb = dvmlang.tensor(a), dvmlang.tensor(b)
        r = ((ta & tb) ^ (ta << 1) | ~tb) >> 3
        h = ops.hypot(ops.cast(ta, "float32"), 2.0)
        got, got_h = r.numpy(), h.numpy()
    np.testing.assert_array_equal(got, ((a & b) ^ _shl(a, np.ones_like(a)) | ~b) >> 3)
    np.testing.assert_allclose(got_h, np.hypot(a.astype(np.float32), np.float32(2)), rtol=1e-6)


@pytest.mark.parametrize("expr, what", [
    (lambda x: ops.bitwise_xor(x, x), "bitwise_xor needs integer or bool operands, got float32"),
    (lambda x: ops.left_shift(x > 0, 1), "left_shift needs integer operands"),
    (lambda x: x ^ 1.5, "bitwise_xor needs integer or bool operands"),
    (lambda x: ops.bitwise_not(x), "bitwise_not needs integer or bool operands, got float32"),
])
def test_float_operands_of_integer_ops_are_clear_errors(expr, what):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(dvmlang.DvmError, match=what):
        dvmlang.graph(expr)(x)


@pytest.mark.parametrize("path", ["compose", "text"])
def test_prod_reductions(path, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    rng = np.random.default_rng(9)
    x = rng.uniform(0.8, 1.25, (7, 300)).astype(np.float32)  # (300 columns: more than one column block)
    h = rng.uniform(0.9, 1.1, (5, 40)).astype(np.float16)
    n = rng.integers(-3, 4, (7, 9)).astype(np.int32)
    b = rng.integers(0, 2, (4, 6)).astype(np.int8)
    x[3, 17] = np.nan
    x[5, 2] = 0.0

    @dvmlang.graph
    def f(x, h, n, b):
        return (ops.prod(x, -1), ops.prod(x, 0, keepdims=True), ops.prod(x[:2, :50]), ops.prod(h, 1), ops.prod(n, 1),
                ops.prod(b, 0), ops.prod(ops.exp(x[:, :5]) * 0.5, (0, 1)))

    want = (x.prod(-1), x.prod(0, keepdims=True), x[:2, :50].prod(), h.prod(1, dtype=np.float32).astype(np.float16),
            n.prod(1).astype(np.int32), b.prod(0).astype(np.int32),
            (np.exp(x[:, :5]) * np.float32(0.5)).prod(dtype=np.float64).astype(np.float32))
    for i, (g, w) in enumerate(zip(f(x, h, n, b), want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        np.testing.assert_allclose(g, w, rtol=2e-3 if w.dtype == np.float16 else 2e-5, err_msg=f"output {i}")


def test_prod_of_a_whole_tensor_split_over_the_cores():
    """A 1-D product of 2^16 elements is a split reduction (per-core partial products, then their product)."""
    rng = np.random.default_rng(11)
    v = rng.uniform(0.999, 1.001, 1 << 16).astype(np.float32)
    g = dvmlang.graph(lambda v: ops.prod(v))
    np.testing.assert_allclose(g(v), v.astype(np.float64).prod(), rtol=1e-4)
    (prog,) = g._captured.values()
    assert any(n.attrs.get("split") for n in prog.graph.nodes if n.op == "reduce")


@pytest.mark.parametrize("path", ["compose", "text"])
@pytest.mark.parametrize("cols", [300, 20000])  # (one tile per row; column blocks with the running value carried)
def test_running_products_and_extremes(path, cols, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", path)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    x[1, 7] = np.nan  # (propagates to the rest of its row, as numpy's accumulate and torch's cummax)
    p = rng.uniform(0.9999, 1.0001, (3, cols)).astype(np.float32)
    n = rng.integers(-50, 50, (4, 9)).astype(np.int8)

    @dvmlang.graph
    def f(x, p, n):
        return (ops.cummax(x, 1), ops.cummin(x * 2, -1), ops.cumprod(p, 1), ops.cummax(n, 1), ops.cumprod(n % 3, 0),
                ops.cummin(x, 0))

    want = (np.maximum.accumulate(x, 1), np.minimum.accumulate(x * 2, 1), np.cumprod(p.astype(np.float64), 1),
            np.maximum.accumulate(n, 1), np.cumprod((n % 3).astype(np.int32), 0).astype(np.int32),
            np.minimum.accumulate(x, 0))
    for i, (g, w) in enumerate(zip(f(x, p, n), want)):
        assert g.dtype == (np.float32 if i == 2 else w.dtype), i
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"output {i}")


# ---- the torch backend ----------------------------------------------------------------------------------------

def _compiled_matches(f, *xs, rtol=1e-6, dynamic=True):
    torch = pytest.importorskip("torch")
    import dvmlang.torch as D
    torch._dynamo.reset()
    D.reset_stats()
    got = torch.compile(f, backend="dvmlang", dynamic=dynamic)(*xs)
    want = f(*xs)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=rtol, atol=1e-6, equal_nan=True)
    assert D.stats()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_torch_bitwise_ops_fused(dtype):
    torch = pytest.importorskip("torch")
    d = getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    lo, hi = (0, 255) if dtype == "uint8" else (-100, 100)
    a = torch.randint(lo, hi, (6, 11), generator=g, dtype=d)
    b = torch.randint(lo, hi, (6, 11), generator=g, dtype=d)
    bits = torch.iinfo(d).bits
    s = torch.randint(0, bits, (6, 11), generator=g, dtype=d)

    def f(a, b, s):
        return (a & b, a | b, a ^ b, ~a, a & 7, a | 1, torch.bitwise_xor(a, 3), a << s, a >> s, a >> 2, a << 1,
                (a > 0) & (b > 0), ~(a > b), (a + b) * (a ^ b))
    _compiled_matches(f, a, b, s)


def test_torch_shifts_by_out_of_range_amounts():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[1, -1, 1 << 30, -(1 << 31), 7, -7, 123456, -99]], dtype=torch.int32)
    s = torch.tensor([[0, 31, 32, 40, -1, -3, 1, 30]], dtype=torch.int32)
    _compiled_matches(lambda a, s: (a << s, a >> s, a >> 40, a << 33), a, s)


def test_torch_two_operand_math_fused():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(5, 17, generator=g) * 3, torch.randn(5, 17, generator=g) * 3
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    y[0, :4] = torch.tensor([-0.0, 0.0, 1.0, 2.0])
    n = torch.arange(85, dtype=torch.int32).reshape(5, 17) - 40

    def f(x, y, n):
        return (torch.atan2(x, y), torch.hypot(x, y), torch.copysign(x, y), torch.copysign(x, -1.0),
                torch.atan2(n, n + 1), torch.copysign(n, y), torch.atan2(x, y).sum(-1))
    _compiled_matches(f, x, y, n)


def test_torch_prod_fused():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(4)
    x = torch.rand(7, 300, generator=g) * 0.45 + 0.8
    n = torch.randint(-3, 4, (7, 9), generator=g, dtype=torch.int32)

    def f(x, n):
        return (x.prod(-1), torch.prod(x), x.prod(0, keepdim=True), n.prod(1), (n > 0).prod(0), torch.prod(n),
                (x * 2).prod(1, keepdim=True) - 1)
    _compiled_matches(f, x, n, rtol=1e-5)



@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_torch_scatter_reduce_fused(dtype, reduce, include_self):
    """``scatter_reduce`` (a graph network's message aggregation): per result position the sources that hit it,
    reduced, with its own value when ``include_self``; a position no source hits keeps its value; an integer mean
    floors (torch's documented semantics)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(7)
    for dim, shape_b, shape_i in ((0, (6,), (9,)), (1, (3, 5), (3, 8)), (0, (5, 4), (7, 4))):
        if dtype == "float32":
            base, src = torch.randn(shape_b, generator=g), torch.randn(shape_i, generator=g)
        else:
            base = torch.randint(-5, 6, shape_b, generator=g, dtype=torch.int32)
            src = torch.randint(-5, 6, shape_i, generator=g, dtype=torch.int32)
        idx = torch.randint(0, shape_b[dim] - 1, shape_i, generator=g)  # (the last position: never hit)

        def f(b, i, s):
            return ((b * 1).scatter_reduce(dim, i, s * 1, reduce, include_self=include_self) + 0,)
        _compiled_matches(f, base, idx, src, rtol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_torch_embedding_bag_fused(mode, include_last_offset, padding_idx):
    """``EmbeddingBag`` (a recommender's sparse features): bags by offsets, an empty bag of zeros, ``padding_idx``
    left out of the sums, means and maxima (torch's documented semantics), with static and dynamic sizes."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=include_last_offset, padding_idx=padding_idx)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 2, 2])
    off = torch.tensor([0, 3, 3, 7, 10] if include_last_offset else [0, 3, 3, 7])  # (bag 1 is empty)
    with torch.no_grad():
        _compiled_matches(lambda i, o: (m(i, o) * 1.0,), idx, off, rtol=1e-5)


def test_torch_embedding_bag_with_per_sample_weights_and_in_training():
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    m = torch.nn.EmbeddingBag(12, 3, mode="sum")
    idx, off, w = torch.tensor([1, 2, 4, 5, 4, 11]), torch.tensor([0, 2, 5]), torch.rand(6)
    with torch.no_grad():
        _compiled_matches(lambda i, o, s: (m(i, o, per_sample_weights=s),), idx, off, w, rtol=1e-5)
    # training: the backward reads the op's other results, so its region runs eagerly; the gradient is eager's
    import dvmlang.torch as D
    torch._dynamo.reset()
    D.reset_stats()
    out = torch.compile(lambda i, o: m(i, o).pow(2).sum(), backend="dvmlang")(idx, off)
    out.backward()
    got = m.weight.grad.clone()
    m.weight.grad = None
    m(idx, off).pow(2).sum().backward()
    torch.testing.assert_close(got, m.weight.grad)


@pytest.mark.parametrize("p", [2.0, 1.0, float("inf"), 0.0, 3.0])
@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_cdist_fused(p, dynamic):
    """``cdist``: the p-norm distance of every row pair (torch's product form for p = 2 rounds differently, within
    float32's precision of the distances)."""
    torch = pytest.importorskip("torch")
    import dvmlang.torch as D
    g = torch.Generator().manual_seed(3)
    for a, b in ((torch.randn(5, 3, generator=g), torch.randn(4, 3, generator=g)),
                 (torch.randn(2, 30, 8, generator=g), torch.randn(2, 27, 8, generator=g))):
        torch._dynamo.reset()
        D.reset_stats()
        got = torch.compile(lambda x, y: torch.cdist(x, y, p=p), backend="dvmlang", dynamic=dynamic)(a, b)
        torch.testing.assert_close(got, torch.cdist(a, b, p=p), rtol=1e-4, atol=1e-4)
        assert D.stats()["fallback_ops"] == {}


def test_torch_integer_division_rounded_toward_zero():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[7, -7, 7, -7, 6, -6, 0, 1, -1, 13]], dtype=torch.int32)
    b = torch.tensor([[2, 2, -2, -2, 3, -3, 5, -4, 4, 1]], dtype=torch.int32)

    def f(a, b):
        return (torch.div(a, b, rounding_mode="trunc"), torch.div(a * 3, 4, rounding_mode="trunc"),
                torch.div(a * 3, -4, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"))
    _compiled_matches(f, a, b)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (6, 7)])
def test_torch_layer_norm_over_several_dims_and_var_mean(shape):
    """``LayerNorm(normalized_shape)`` over the last two or three dims (with its affine), forward and training;
    ``var_mean`` and ``lgamma``."""
    torch = pytest.importorskip("torch")
    import dvmlang.torch as D
    torch.manual_seed(0)
    k = 2 if len(shape) == 2 else 3
    m = torch.nn.LayerNorm(shape[-k:])
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    x = torch.randn(shape)
    with torch.no_grad():
        _compiled_matches(lambda v: (m(v), *torch.var_mean(v, -1), torch.lgamma(v.abs() + 0.5)), x, rtol=1e-5)
    xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch._dynamo.reset()
    D.reset_stats()
    torch.compile(lambda v: (m(v) ** 2).sum(), backend="dvmlang")(xs).backward()
    gw = m.weight.grad.clone()
    m.weight.grad = None
    (m(xr) ** 2).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, m.weight.grad, rtol=1e-4, atol=1e-5)
    assert D.stats()["fallback_ops"] == {}


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_cumprod_cummax_cummin_fused(dynamic):
    """Values and indices: torch's index is the last position so far holding the running value (it moves on
    ties) and follows each NaN once one is met."""
    torch = pytest.importorskip("torch")
    import dvmlang.torch as D
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 0.0], [2.0, float("nan"), 1.0, float("nan"), 4.0, 0.0, 9.0],
                      [-1.0, -1.0, -2.0, -2.0, -3.0, 7.0, -3.0]])
    n = torch.tensor([[3, 1, 3, 0, 7, 7, 2], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.int32)

    def f(x, n):
        a, b = torch.cummax(x, 1), torch.cummin(x, 1)
        c, e = torch.cummax(n, 1), torch.cummin(x, 0)
        return (a.values, a.indices, b.values, b.indices, c.values, c.indices, e.values, e.indices,
                torch.cumprod(x * 0.5 + 1, 1), torch.cumprod(n + 1, 1), torch.cumprod(x, 0))
    torch._dynamo.reset()
    D.reset_stats()
    got = torch.compile(f, backend="dvmlang", dynamic=dynamic)(x, n)
    for i, (g, w) in enumerate(zip(got, f(x, n))):
        assert g.dtype == w.dtype, i
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, equal_nan=True, msg=f"output {i}")
    assert D.stats()["fallback_ops"] == {}


def test_torch_kthvalue_and_median_values_fused():
    """The k-th smallest value and the (lower) median along a dim or of all elements (NaN the largest for
    ``kthvalue``, a row with a NaN has a NaN median: torch's); a use of the indices, which torch leaves unspecified
    among equal values, runs eagerly and still matches."""
    torch = pytest.importorskip("torch")
    import dvmlang.torch as D
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 7, generator=g)
    x[1, 3] = float("nan")
    y = torch.randn(3, 6, generator=g)

    def f(x, y):
        return (torch.kthvalue(x * 1, 3, 1).values, torch.kthvalue(y * 1, 2, 0, keepdim=True).values,
                torch.median(x * 1, 1).values, torch.median(y * 1, 1).values, torch.median(y * 1, 0, keepdim=True).values,
                torch.median(y * 1), torch.median(x * 1))
    _compiled_matches(f, x, y, dynamic=False)  # (a sort along a dim known only at run time is not lowered)
    torch._dynamo.reset()
    D.reset_stats()
    got = torch.compile(lambda v: torch.kthvalue(v * 1, 3, 1).indices, backend="dvmlang")(y)
    torch.testing.assert_close(got, torch.kthvalue(y, 3, 1).indices)
    assert "kthvalue.default" in D.stats()["fallback_ops"]


def test_torch_one_hot_fused_and_its_range_check_kept():
    """``one_hot``'s graph checks its classes with ``_assert_async``: the condition is computed in the fused region
    and checked on the host, as torch's own host code does, so an out-of-range class still raises."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    i = torch.tensor([[1, 3, 0], [2, 4, 4]])
    _compiled_matches(lambda v: (F.one_hot(v % 5, 5).float() * 2 + 1,), i)
    torch._dynamo.reset()
    g = torch.compile(lambda v: F.one_hot(v, 5).float(), backend="dvmlang")
    assert torch.equal(g(i), F.one_hot(i, 5).float())
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        g(i + 3)


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_signbit_and_masked_scatter_fused(dynamic):
    """``signbit`` reads the sign bit (of -0.0 and of a negative NaN too); ``masked_scatter`` fills the masked
    positions with the source's elements in row-major order, the mask broadcast to the result."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(4, 6, generator=g), torch.randn(30, generator=g)
    x[0, :4] = torch.tensor([-0.0, 0.0, float("nan"), -float("nan")])

    def f(a, b):
        c = torch.nan_to_num(a)
        return (torch.signbit(a * 1), torch.signbit((c * 10).int()), (c * 1).masked_scatter(c > 0, b),
                (c * 1).masked_scatter((c > 0)[0:1], b), (c * 1).masked_scatter(c.sum(1, keepdim=True) > 0, b * 2))
    torch._dynamo.reset()
    import dvmlang.torch as D
    D.reset_stats()
    got = torch.compile(f, backend="dvmlang", dynamic=dynamic)(x, y)
    for i, (a, b) in enumerate(zip(got, f(x, y))):
        torch.testing.assert_close(a, b, equal_nan=True, msg=f"output {i}")
    assert D.stats()["fallback_ops"] == {}
