"""The ``dvmlang.ops`` that transformer models' aten graphs need (issue 14), against numpy.

Every test runs one ``dvmlang.graph`` at two (or more) shapes and asserts it was captured once: sizes are
symbols, derived sizes (``x.shape[-1] // 2``) are computed per call, so a new shape only binds and encodes.
"""

import math

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops


@pytest.fixture
def rng():
    return np.random.default_rng(14)


def randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def across_shapes(fn, cases, ref, fuse=(True, False), rtol=1e-5, atol=1e-6, exact=False):
    """``fn`` as one graph (per fuse setting) at every argument tuple of ``cases`` equals ``ref``; captured once.
    Returns the fused graph."""
    fused = None
    for f in fuse:
        g = dvmlang.graph(fn, fuse=f)
        for args in cases:
            got, want = g(*args), ref(*args)
            gots = got if isinstance(got, tuple) else (got,)
            wants = want if isinstance(want, tuple) else (want,)
            assert len(gots) == len(wants)
            for a, b in zip(gots, wants):
                b = np.asarray(b)
                assert a.shape == b.shape, (f, a.shape, b.shape)
                if exact:
                    np.testing.assert_array_equal(a, b)
                else:
                    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)
        assert g.stats.captures == 1, g.stats
        fused = g if f else fused
    return fused


# ---- symbolic shape arithmetic ----------------------------------------------------------------------------


def test_shape_arithmetic_reshape_targets(rng):
    def fn(x):
        b, n = x.shape
        y = ops.reshape(x, (b, n // 2, 2))
        z = ops.reshape(ops.exp(y), (b * (n // 2), -1))
        return z * 2.0, ops.reshape(x, (-1,)) + 1.0, x / x.shape[1], ops.reshape(x, (b * n,))

    def ref(x):
        return (np.exp(x).reshape(-1, 2) * 2, x.reshape(-1) + 1, x / x.shape[1], x.reshape(-1))
    cases = [(randn(rng, (3, 8)),), (randn(rng, (5, 12)),), (randn(rng, (2, 6)),)]
    g = across_shapes(fn, cases, ref)
    with pytest.raises(dvmlang.GraphError, match=r"reshape \(s0, s1\) -> \(s0, \(s1 // 2\), 2\).*21 vs 18"):
        g(np.ones((3, 7), np.float32))


def test_derived_dims_are_canonical_and_prove_equalities():
    def fn(x):
        n = x.shape[-1]
        assert (n - n // 2) + n // 2 is n and (2 * n) // 2 is n and n * x.shape[0] is x.shape[0] * n
        assert n // 2 is n // 2 and (n + 1) - 1 is n
        return x

    dvmlang.graph(fn)(np.ones((2, 4), np.float32))


def test_a_derived_dim_equal_to_another_input_is_checked_per_call(rng):
    def fn(x, y):  # y's last dim is deduced equal to half of x's
        h = x.shape[-1] // 2
        return x[..., :h] * y

    g = across_shapes(fn, [(randn(rng, (3, 8)), randn(rng, (3, 4))), (randn(rng, (2, 10)), randn(rng, (2, 5)))],
                      lambda x, y: x[..., :x.shape[-1] // 2] * y)
    with pytest.raises(dvmlang.GraphError, match="must equal"):
        g(np.ones((3, 8), np.float32), np.ones((3, 5), np.float32))


def test_iterating_a_graph_value_needs_a_static_first_dim(rng):
    g = dvmlang.graph(lambda x: tuple(r * 2.0 for r in x), static={"x": (0,)})
    x = randn(rng, (3, 4))
    for a, b in zip(g(x), x * 2):
        np.testing.assert_allclose(a, b)
    with pytest.raises(dvmlang.GraphError, match="static first dim"):
        dvmlang.graph(lambda x: tuple(r for r in x))(x)


def test_shape_arithmetic_errors_say_what_to_do():
    def bad_index(x):
        return ops.exp(x) * list(range(x.shape[0]))[0]

    with pytest.raises(dvmlang.GraphError, match="symbolic size"):
        dvmlang.graph(bad_index)(np.ones((3, 4), np.float32))

    def bad_div(x):
        return ops.reshape(x, (x.shape[0] / 2, -1))

    with pytest.raises(dvmlang.GraphError, match="divides with //"):
        dvmlang.graph(bad_div)(np.ones((4, 4), np.float32))


# ---- slicing, cat, neg: rotary embeddings ------------------------------------------------------------------


def _np_rot_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def test_rotary_embedding_with_symbolic_halves(rng):
    def rope(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + ops.cat([-x[..., h:], x[..., :h]], -1) * sin

    cases = []
    for shp in [(2, 5, 8), (3, 7, 16), (2, 4, 64)]:
        cases.append((randn(rng, shp), randn(rng, shp[1:]), randn(rng, shp[1:])))
    g = across_shapes(rope, cases, lambda x, c, s: x * c + _np_rot_half(x) * s)
    # the halves are views of x; -x[..., h:] is computed in the cat's kernel: one kernel in all
    assert [m.name for m in g.last_launch.members] == ["rope_g0_mul_cat_cast_lt_neg_where_add"]


def test_slices_static_symbolic_negative_and_strided(rng):
    def fn(x):
        n = x.shape[1]
        return (x[:, 1:3], x[:, -2:], x[:, n // 4: n // 2], x[::2, ::3], ops.exp(x)[1:, :-1] + 1.0,
                x[0], x[:, -1], x[None, :, 2], x[..., 1])

    def ref(x):
        n = x.shape[1]
        return (x[:, 1:3], x[:, -2:], x[:, n // 4: n // 2], x[::2, ::3], np.exp(x)[1:, :-1] + 1.0,
                x[0], x[:, -1], x[None, :, 2], x[..., 1])
    g = across_shapes(fn, [(randn(rng, (5, 8)),), (randn(rng, (4, 13)),)], ref)
    with pytest.raises(dvmlang.GraphError, match="stop is past the end"):
        g(np.ones((4, 2), np.float32))


def test_narrow_select_chunk_split(rng):
    def fn(x):
        a, b = ops.chunk(x, 2, -1)
        p, q, r = ops.split(x, [1, x.shape[-1] - 3, 2], -1)
        return ops.narrow(x, 0, 1, 2), ops.select(x, 1, -1), a * 2.0, b, p, q, r, ops.split(x, [2, x.shape[0] - 2], 0)[1]

    def ref(x):
        h = x.shape[-1] // 2
        return (x[1:3], x[:, -1], x[:, :h] * 2, x[:, h:], x[:, :1], x[:, 1:-2], x[:, -2:], x[2:])
    g = across_shapes(fn, [(randn(rng, (4, 8)),), (randn(rng, (5, 12)),)], ref)
    with pytest.raises(dvmlang.GraphError, match="divide evenly"):
        g(np.ones((4, 7), np.float32))
    # an int split size of a static dim splits as torch does (the last piece smaller); of a symbolic one, it says how
    st = dvmlang.graph(lambda x: ops.split(x, 2, 0), static={"x": (0,)})
    x = randn(rng, (5, 3))
    for a, b in zip(st(x), np.split(x, [2, 4])):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(dvmlang.GraphError, match="number of pieces must be known"):
        dvmlang.graph(lambda x: ops.split(x, 2, 0))(x)


def test_cat_along_every_axis_promotes_and_stacks(rng):
    def fn(a, b, c):
        e = ops.exp(a)
        return (ops.cat([a, e, a], 0), ops.cat([a, c], 1), ops.cat([a, b.astype(np.float16)], 0),
                ops.stack([a, e], 1), ops.cat([e], 0), ops.cat([a * e, -e * 2.0, a], 0))

    def ref(a, b, c):
        e = np.exp(a)
        return (np.concatenate([a, e, a], 0), np.concatenate([a, c], 1), np.concatenate([a, b.astype(np.float16)]),
                np.stack([a, e], 1), e, np.concatenate([a * e, -e * 2, a], 0))
    cases = [(randn(rng, (3, 5)), randn(rng, (2, 5)), randn(rng, (3, 4))),
             (randn(rng, (6, 9)), randn(rng, (4, 9)), randn(rng, (6, 2)))]
    across_shapes(fn, cases, ref, rtol=1e-3)


def test_slice_of_a_computed_value_reshaped_gets_a_copy(rng):
    def fn(x):
        y = ops.exp(x)[:, 1:]
        return ops.reshape(y, (-1,)) * 2.0

    across_shapes(fn, [(randn(rng, (3, 5)),), (randn(rng, (4, 9)),)], lambda x: np.exp(x)[:, 1:].reshape(-1) * 2,
                  rtol=1e-5)


def test_expand_unsqueeze_squeeze_flatten(rng):
    def fn(x, v):
        return (ops.expand(v, x.shape[0], -1) + x, ops.unsqueeze(v, 0) * x, ops.squeeze(ops.unsqueeze(x, 1), 1),
                ops.flatten(x), x.reshape(x.shape[0] * x.shape[1]) + 0.0)

    def ref(x, v):
        return (v + x, v[None] * x, x, x.reshape(-1), x.reshape(-1))
    across_shapes(fn, [(randn(rng, (3, 5)), randn(rng, (5,))), (randn(rng, (6, 2)), randn(rng, (2,)))], ref)


# ---- gather, index_select, embedding ------------------------------------------------------------------------


def test_embedding_index_select_gather(rng):
    def fn(w, ids, x, idx):
        return (ops.embedding(w, ids) * 2.0, ops.index_select(x, 1, idx[0]), ops.gather(x, 1, idx),
                w[ids[0]], ops.take_along_axis(x, idx, 1) + 1.0)

    def ref(w, ids, x, idx):
        return (w[ids] * 2, x[:, idx[0]], np.take_along_axis(x, idx, 1), w[ids[0]],
                np.take_along_axis(x, idx, 1) + 1)
    cases = []
    for V, D, B, S, R, C, K in [(10, 8, 2, 3, 4, 6, 3), (17, 12, 3, 5, 5, 9, 2)]:
        cases.append((randn(rng, (V, D)), rng.integers(0, V, (B, S)), randn(rng, (R, C)),
                      rng.integers(0, C, (R, K)).astype(np.int32)))
    g = across_shapes(fn, cases, ref)
    w, ids, x, idx = cases[0]
    with pytest.raises(dvmlang.DeviceError, match=r"gather .*outside \[0, "):
        g(w, np.full_like(ids, 10), x, idx)
    with pytest.raises(dvmlang.DeviceError, match="outside"):
        g(w, ids, x, np.full_like(idx, -1))


def test_gather_from_a_computed_table_is_a_second_kernel(rng):
    def fn(x, idx):
        return ops.gather(ops.exp(x), -1, idx)

    g = across_shapes(fn, [(randn(rng, (4, 7)), rng.integers(0, 7, (4, 2))),
                           (randn(rng, (3, 11)), rng.integers(0, 11, (3, 5)))],
                      lambda x, i: np.take_along_axis(np.exp(x), i, -1))
    x, i = randn(rng, (4, 7)), rng.integers(0, 7, (4, 2))
    assert any("reads %" in r and "from memory" in r for r in g.explain(x, i).reasons())


# ---- where, masks, factories ---------------------------------------------------------------------------------


def test_masked_fill_tril_triu_and_causal_masks_from_arange(rng):
    def fn(x):
        n = x.shape[-1]
        causal = ops.arange(n)[:, None] >= ops.arange(n)[None, :]
        s = ops.masked_fill(x, ~causal, float("-inf"))
        return (s, ops.softmax(s, -1), ops.tril(x), ops.triu(x, 1), ops.tril(x, -1),
                ops.where(x > 0, x, 0.0), x.masked_fill(x < 0, 2))

    def ref(x):
        m = np.tril(np.ones(x.shape, bool))
        s = np.where(m, x, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return (s, e / e.sum(-1, keepdims=True), np.tril(x), np.triu(x, 1), np.tril(x, -1), np.where(x > 0, x, 0),
                np.where(x < 0, 2, x))
    across_shapes(fn, [(randn(rng, (5, 5)),), (randn(rng, (9, 9)),), (randn(rng, (2, 4, 4)),)][:2], ref)


def test_full_zeros_ones_arange_with_symbolic_sizes(rng):
    def fn(x):
        b, n = x.shape
        return (ops.full((b, n // 2), 3.0), ops.zeros((n,)), ops.ones((b, 1), np.int32), ops.arange(n),
                ops.arange(2, n), ops.arange(1, 9, 3), ops.arange(n // 2, n) * 2, ops.full_like(x, float("-inf")),
                ops.zeros_like(x, np.float16), ops.arange(0.0, 1.0, 0.25), ops.arange(n) + x)

    def ref(x):
        b, n = x.shape
        return (np.full((b, n // 2), 3.0), np.zeros(n), np.ones((b, 1), np.int32), np.arange(n), np.arange(2, n),
                np.arange(1, 9, 3), np.arange(n // 2, n) * 2, np.full(x.shape, -np.inf), np.zeros(x.shape),
                np.arange(0, 1, 0.25), np.arange(n) + x)
    g = across_shapes(fn, [(randn(rng, (3, 8)),), (randn(rng, (5, 5)),)], ref)
    out = g(randn(rng, (3, 8)))
    assert out[3].dtype == np.int32 and out[2].dtype == np.int32 and out[8].dtype == np.float16


def test_position_ids_and_integer_ops(rng):
    def fn(ids, x):
        pos = ops.arange(ids.shape[1]) + 3
        return (pos[None, :] + ids * 0, ids // 3, ids % 3, -ids // 2, (ids > 2) & (ids < 7), ~(ids > 2) | (ids == 0),
                ops.floor_divide(x, 0.5), ops.remainder(x, 0.75))

    def ref(ids, x):
        pos = np.arange(ids.shape[1]) + 3
        return (pos[None, :] + ids * 0, ids // 3, ids % 3, -ids // 2, (ids > 2) & (ids < 7), ~(ids > 2) | (ids == 0),
                np.floor_divide(x, 0.5), np.remainder(x, 0.75))
    across_shapes(fn, [(rng.integers(-9, 9, (2, 5)).astype(np.int32), randn(rng, (2, 5))),
                       (rng.integers(-9, 9, (3, 7)).astype(np.int32), randn(rng, (3, 7)))], ref, rtol=1e-5,
                  atol=1e-5)


def test_attention_with_a_bool_or_additive_mask(rng):
    def fn(q, k, v, keep, bias):
        return (ops.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                ops.scaled_dot_product_attention(q, k, v, attn_mask=bias))

    def ref(q, k, v, keep, bias):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        out = []
        for t in (np.where(keep, s, -np.inf), s + bias):
            e = np.exp(t - t.max(-1, keepdims=True))
            out.append(e / e.sum(-1, keepdims=True) @ v)
        return tuple(out)
    cases = []
    for b, n, d in [(2, 5, 8), (3, 9, 16)]:
        keep = rng.random((n, n)) < 0.7
        keep[:, 0] = True
        cases.append((randn(rng, (b, n, d)), randn(rng, (b, n, d)), randn(rng, (b, n, d)), keep, randn(rng, (n, n))))
    across_shapes(fn, cases, ref, rtol=1e-4, atol=1e-5)


# ---- scans and index reductions -----------------------------------------------------------------------------


def test_cumsum_over_rows_columns_and_long_rows(rng):
    def fn(x, i):
        return ops.cumsum(x, -1), ops.cumsum(ops.exp(x), 0) * 2.0, ops.cumsum(i, -1), x.cumsum(-1) / 2.0

    def ref(x, i):
        return x.cumsum(-1), np.exp(x).cumsum(0) * 2, i.cumsum(-1), x.cumsum(-1) / 2
    cases = [(randn(rng, (5, 7)), rng.integers(-5, 5, (5, 7)).astype(np.int32)),
             (randn(rng, (3, 5000)), rng.integers(-5, 5, (3, 5000)).astype(np.int32))]
    across_shapes(fn, cases, ref, rtol=1e-4, atol=2e-3)


def test_argmax_argmin_ties_nan_and_flat(rng):
    def fn(x):
        return ops.argmax(x, -1), ops.argmin(x, 0), ops.argmax(x), x.argmin(-1, keepdims=True)

    def ref(x):
        return x.argmax(-1), x.argmin(0), np.asarray(x.argmax()), x.argmin(-1)[:, None]
    a = np.round(randn(rng, (6, 9)))  # ties
    b = randn(rng, (4, 300))
    b[1, 7] = np.nan
    b[1, 200] = np.nan
    across_shapes(fn, [(a,), (b,), (randn(rng, (7, 2)),)], ref, exact=True)


# ---- losses and norms ------------------------------------------------------------------------------------------


def _np_log_softmax(x):
    s = x - x.max(-1, keepdims=True)
    return s - np.log(np.exp(s).sum(-1, keepdims=True))


def test_cross_entropy_is_log_softmax_gather_mean(rng):
    def fn(logits, t):
        return (ops.cross_entropy(logits, t), ops.cross_entropy(logits, t, reduction="sum"),
                ops.cross_entropy(logits, t, reduction="none"), ops.cross_entropy(logits, t, label_smoothing=0.1),
                ops.nll_loss(ops.log_softmax(logits, -1), t))

    def ref(logits, t):
        lp = _np_log_softmax(logits.astype(np.float64))
        v = t != -100
        picked = np.where(v, -lp[np.arange(len(t)), np.where(v, t, 0)], 0)
        smooth = np.where(v, -lp.mean(-1), 0)
        mean = picked.sum() / v.sum()
        return (mean, picked.sum(), picked, 0.9 * mean + 0.1 * smooth.sum() / v.sum(), mean)
    cases = []
    for n, c in [(4, 7), (9, 33)]:
        t = rng.integers(0, c, n)
        t[1] = -100
        cases.append((randn(rng, (n, c)), t))
    across_shapes(fn, cases, ref, rtol=1e-5, atol=1e-5)


def test_norms_from_pow_rsqrt_mean_var(rng):
    def fn(x, w):
        rms = x * ops.rsqrt(ops.mean(x.pow(2) if hasattr(x, "pow") else x ** 2, -1, keepdims=True) + 1e-6) * w
        ln = (x - x.mean(-1, keepdims=True)) * ops.rsqrt(x.var(-1, keepdims=True) + 1e-5)
        return rms, ln

    def ref(x, w):
        rms = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * w
        ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return rms, ln
    across_shapes(fn, [(randn(rng, (4, 16)), randn(rng, (16,))), (randn(rng, (3, 40)), randn(rng, (40,)))], ref,
                  rtol=1e-4, atol=1e-5)


# ---- eager (lazy) use --------------------------------------------------------------------------------------------


def test_eager_tensors_take_the_new_ops(rng):
    x = randn(rng, (4, 6))
    t = dvmlang.tensor(x)
    np.testing.assert_allclose(ops.cat([ops.neg(t), t], -1).numpy(), np.concatenate([-x, x], -1))
    np.testing.assert_allclose(ops.slice(ops.exp(t), -1, 2, 5).numpy(), np.exp(x)[:, 2:5], rtol=1e-6)
    np.testing.assert_allclose(ops.cumsum(t, -1).numpy(), x.cumsum(-1), atol=1e-5)
    np.testing.assert_array_equal(ops.argmax(t, -1).numpy(), x.argmax(-1))
    w = randn(rng, (10, 3))
    ids = np.array([[1, 2], [9, 0]], np.int32)
    np.testing.assert_array_equal(ops.embedding(dvmlang.tensor(w), dvmlang.tensor(ids)).numpy(), w[ids])
    np.testing.assert_array_equal(ops.tril(t).numpy(), np.tril(x))
    np.testing.assert_array_equal(ops.masked_fill(t, t > 0, 0.0).numpy(), np.where(x > 0, 0, x))
    with dvmlang.lazy():
        a = ops.cat(ops.chunk(ops.exp(t), 2, -1)[::-1], -1)
        b = ops.select(ops.exp(t), 0, 1)
    np.testing.assert_allclose(a.numpy(), np.concatenate([np.exp(x)[:, 3:], np.exp(x)[:, :3]], -1), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), np.exp(x)[1], rtol=1e-6)
    assert math.isclose(float(ops.cross_entropy(dvmlang.tensor(x), dvmlang.tensor(np.array([0, 1, 2, 3]))).numpy()),
                        float(-_np_log_softmax(x.astype(np.float64))[np.arange(4), [0, 1, 2, 3]].mean()),
                        rel_tol=1e-5)


# ---- nested arguments and closed-over weights ------------------------------------------------------------------


def test_nested_lists_tuples_dicts_of_arrays(rng):
    def mlp(x, params):
        h = ops.silu(x @ params["w1"])
        for w in params["layers"]:
            h = h @ w
        return h, params["pair"][0] * params["pair"][1]

    def ref(x, params):
        h = x @ params["w1"]
        h = h / (1 + np.exp(-h))
        for w in params["layers"]:
            h = h @ w
        return h, params["pair"][0] * params["pair"][1]
    cases = []
    for n, d, f in [(3, 8, 6), (5, 4, 10)]:
        p = {"w1": randn(rng, (d, f)), "layers": [randn(rng, (f, f)) for _ in range(2)], "pair": (randn(rng, (f,)), 3)}
        cases.append((randn(rng, (n, d)), p))
    g = across_shapes(mlp, cases, ref, rtol=1e-4, atol=1e-4)
    x, p = cases[0]
    assert "params['layers'][0].shape[1]" in str(g.explain(x, p))
    g(x, dict(p, layers=p["layers"][:1]))  # another structure: a second capture
    assert g.stats.captures == 2
    with pytest.raises(dvmlang.GraphError, match="must be a numpy array, a number, or lists"):
        g(x, {"w1": object()})


W_GLOBAL = np.arange(12, dtype=np.float32).reshape(4, 3)


def test_weights_closed_over_from_the_enclosing_scope(rng):
    bias = np.ones(3, np.float32)

    @dvmlang.graph
    def lin(x):
        return ops.matmul(x, W_GLOBAL) + bias

    x = randn(rng, (5, 4))
    np.testing.assert_allclose(lin(x), x @ W_GLOBAL + 1, rtol=1e-5)
    np.testing.assert_allclose(lin(x[:2]), x[:2] @ W_GLOBAL + 1, rtol=1e-5)
    assert lin.stats.captures == 1
    bias[:] = 2  # an in-place write is seen: the array is read at every call
    np.testing.assert_allclose(lin(x), x @ W_GLOBAL + 2, rtol=1e-5)
    bias = np.full(3, 7, np.float32)  # noqa: F841 - rebinding the name captures again
    np.testing.assert_allclose(lin(x), x @ W_GLOBAL + 7, rtol=1e-5)
    assert lin.stats.captures == 2
