"""Views of size-1 dims under elementwise operations (``canonical._sink_unit_views``) and index tiles along a dim
of size 1: numbers against numpy on both fuser paths, and the kernels a program becomes."""

import numpy as np
import pytest
from fuzzing import budget
from hypothesis import given
from hypothesis import strategies as st

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser.canonical import MAX_SUNK


def _groups(gf, *args):
    return gf.explain(*args).groups


@pytest.mark.parametrize("path", ["compose", "text"])
@pytest.mark.parametrize("fuse", [True, False])
def test_an_index_along_a_size_one_dim_is_zero_wherever_it_broadcasts(rng, monkeypatch, path, fuse):
    x = rng.standard_normal(9).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32)

    def f(x, y):
        one = ops.cast(ops.arange(1, dtype="int32"), "float32")  # (1,): [0], broadcast over x's 9
        col = ops.cast(ops.arange(8, dtype="int32"), "float32")  # (8,): 0..7 along y's columns
        return x + one, y * 2.0 + col + one * 5.0

    monkeypatch.setenv("DVMLANG_FUSER", path)
    a, b = dvmlang.graph(f, static={"x": (0,), "y": (0, 1)}, fuse=fuse)(x, y)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_allclose(b, y * 2 + np.arange(8, dtype=np.float32), rtol=1e-6)


def _mask_index(t, b):
    """A transformers-style index: a batch offset (1, 1, 1, 1) and positions (1, 1, 9, 1), each wrapped as a
    negative index is, flattened to (9,) and gathered with."""
    bi = ops.cast(ops.reshape(ops.reshape(b, ()), (1, 1, 1, 1)), "int32")
    bw = ops.where(bi < 0, bi + 1, bi) * 9
    q = ops.cast(ops.reshape(ops.arange(9, dtype="int64") + 0, (1, 1, 9, 1)), "int32")
    qw = ops.where(q < 0, q + 9, q)
    return ops.gather(t, 0, ops.reshape(bw + qw, (9,)))


def test_index_arithmetic_on_views_of_size_one_dims_joins_the_kernel_that_gathers_with_it(rng, monkeypatch):
    t = rng.standard_normal(9).astype(np.float32)
    for b in (np.array([0], np.int64), np.array([-1], np.int64)):
        for path in ("text", "compose"):
            monkeypatch.setenv("DVMLANG_FUSER", path)
            gf = dvmlang.graph(_mask_index, static={"t": (0,), "b": (0,)})
            np.testing.assert_array_equal(gf(t, b), t)  # (b = -1 wraps to 0 too)
        assert len(_groups(gf, t, b)) == 1  # (three kernels, one per view, before)
    with pytest.raises(dvmlang.DeviceError, match="outside"):  # an index out of range still traps
        dvmlang.graph(_mask_index, static={"t": (0,), "b": (0,)})(t, np.array([1], np.int64))


def test_a_value_read_directly_and_through_a_view_of_size_one_dims(rng):
    x = rng.standard_normal(7).astype(np.float32)
    y = rng.standard_normal((3, 7, 4)).astype(np.float32)

    def f(x, y):
        v = ops.exp(x) * 2.0
        return v, ops.reshape(v, (1, x.shape[0], 1)) + y, ops.unsqueeze(v, 0) - 1.0

    for n in (7, 1, 5):
        a, b, c = dvmlang.graph(f)(x[:n], y[:, :n])
        v = np.exp(x[:n]) * 2
        np.testing.assert_allclose(a, v, rtol=1e-6)
        np.testing.assert_allclose(b, v[None, :, None] + y[:, :n], rtol=1e-6)
        np.testing.assert_allclose(c, v[None] - 1, rtol=1e-6)
    # v - 1 over (1, L) computes exp(x) * 2 again from a strided read of x, in its own kernel; the (3, L, 4) add
    # cannot take v's operations into its kernel (v holds a value per middle dim): it reads v through the view
    groups = _groups(dvmlang.graph(f), x, y)
    assert sorted(grp.name.split("_", 1)[1] for grp in groups) == ["add", "exp_mul", "exp_mul_sub"]


def test_an_index_tile_under_a_view_keeps_its_axis(rng):
    y = rng.standard_normal((3, 6, 4)).astype(np.float32)

    def f(y):
        i = ops.cast(ops.arange(6, dtype="int32"), "float32") * 0.5  # (6,)
        return y + ops.reshape(i, (1, 6, 1)) + ops.reshape(i, (6, 1))

    got = dvmlang.graph(f, static={"y": (0, 1, 2)})(y)
    i = np.arange(6, dtype=np.float32) * 0.5
    np.testing.assert_allclose(got, y + i[None, :, None] + i[:, None], rtol=1e-6)


def test_a_view_over_a_reduction_reads_the_reduction_through_a_view_and_a_reordering_view_stays(rng):
    x = rng.standard_normal((5, 9)).astype(np.float32)

    def centred(x, y):
        c = x - ops.mean(x, -1, keepdims=True)  # the mean's rows are read through a view of size-1 dims
        return ops.reshape(c, (1, 5, 9)) * y, c

    y = rng.standard_normal((1, 5, 9)).astype(np.float32)
    a, b = dvmlang.graph(centred, static={"x": (0, 1), "y": (0, 1, 2)})(x, y)
    c = x - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(a, c[None] * y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)
    sq = rng.standard_normal((6, 6)).astype(np.float32)  # a transpose of equal dims moves data: not a unit view
    g = dvmlang.graph(lambda x: ops.transpose(ops.exp(x)) + x)
    np.testing.assert_allclose(g(sq), np.exp(sq).T + sq, rtol=1e-5)
    assert any("read through a view" in r for r in g.explain(sq).reasons())


def test_operations_that_broadcast_under_the_view_are_read_not_computed_again(rng):
    # q (H, L, D) * cos (L, D) seen as (1, H, L, D): the multiply moves under the view, cos's operations (a (1, L, D)
    # operand of a (1, H, L, D) reader) stay in their kernel and are read through a view
    q = rng.standard_normal((4, 9, 8)).astype(np.float32)
    t = rng.standard_normal((9, 8)).astype(np.float32)

    def f(q, t):
        return ops.reshape(q * ops.cos(t), (1, 4, 9, 8)) + ops.reshape(q, (1, 4, 9, 8))

    gf = dvmlang.graph(f, static={"q": (0, 1, 2), "t": (0, 1)})
    np.testing.assert_allclose(gf(q, t), (q * np.cos(t) + q)[None], rtol=1e-5, atol=1e-6)
    assert sorted(grp.name.split("_", 1)[1] for grp in _groups(gf, q, t)) == ["cos", "mul_add"]


def test_a_chain_longer_than_the_limit_stays_a_stored_value_read_through_the_view(rng):
    x = rng.standard_normal(8).astype(np.float32)

    def f(x, y):
        v = x
        for _ in range(MAX_SUNK + 1):
            v = v * 0.5 + 0.25
        return ops.reshape(v, (1, 8)) + y

    y = rng.standard_normal((3, 8)).astype(np.float32)
    gf = dvmlang.graph(f, static={"x": (0,), "y": (0, 1)})
    want = x.astype(np.float64)
    for _ in range(MAX_SUNK + 1):
        want = want * 0.5 + 0.25
    np.testing.assert_allclose(gf(x, y), want[None] + y, rtol=1e-5)
    assert len(_groups(gf, x, y)) == 2


def test_index_arithmetic_broadcast_to_a_shape_is_computed_at_that_shape(rng):
    # repeat_interleave of key/value heads (grouped-query attention): head h reads kv head h // 2
    kv = rng.standard_normal((1, 2, 9, 8)).astype(np.float32)

    def f(kv):
        h = ops.cast(ops.floor(ops.cast(ops.arange(4, dtype="int32"), "float32") / 2.0), "int32")
        return ops.gather(kv, 1, ops.broadcast_to(ops.reshape(h, (1, 4, 1, 1)), (1, 4, 9, 8))) * 2.0

    gf = dvmlang.graph(f, static={"kv": (0, 1, 2, 3)})
    np.testing.assert_array_equal(gf(kv), np.repeat(kv, 2, axis=1) * 2)
    assert len(_groups(gf, kv)) == 1  # (the index was a kernel of its own, stored at (4,) and read broadcast)


# ---- random chains of elementwise operations and views of size-1 dims, against numpy --------------------------

_UNARY = {"tanh": (ops.tanh, np.tanh), "neg": (lambda v: -v, np.negative),  # (bounded: a chain cannot overflow)
          "sigmoid": (ops.sigmoid, lambda v: 1 / (1 + np.exp(-v)))}


@st.composite
def _chains(draw):
    shape = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3, 5]), min_size=1, max_size=3)))
    steps = []
    cur = shape
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "scale", "input", "index", "unsqueeze", "unsqueeze", "squeeze",
                                     "squeeze", "keep"]))
        if kind == "unsqueeze" and len(cur) < 4:
            ax = draw(st.integers(0, len(cur)))
            cur = cur[:ax] + (1,) + cur[ax:]
            steps.append(("view", cur))
        elif kind == "squeeze" and 1 in cur and len(cur) > 1:
            ax = cur.index(1)
            cur = cur[:ax] + cur[ax + 1:]
            steps.append(("view", cur))
        elif kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(_UNARY)))))
        elif kind == "scale":
            steps.append(("scale", draw(st.sampled_from([0.5, -2.0, 3.0]))))
        elif kind == "index" and cur[-1] > 1:
            steps.append(("index", None))  # + arange along the last dim
        elif kind == "keep":
            steps.append(("keep", None))  # the value at this point is also an output (read directly)
        else:
            steps.append(("input", None))  # + x viewed to the current shape
    consumer = draw(st.sampled_from(["add", "sum", "max_rows"]))
    return shape, steps, cur, consumer


@budget(60)
@given(_chains())
def test_random_chains_through_views_of_size_one_dims_match_numpy(case):
    shape, steps, final, consumer = case
    rng = np.random.default_rng(len(steps))
    x = rng.standard_normal(shape).astype(np.float32) * 0.5
    y = rng.standard_normal(final).astype(np.float32)

    def run(lib, x, y):
        outs = []
        v = x
        for kind, arg in steps:
            if kind == "view":
                v = ops.reshape(v, arg) if lib is ops else v.reshape(arg)
            elif kind == "unary":
                v = _UNARY[arg][0 if lib is ops else 1](v)
            elif kind == "scale":
                v = v * arg
            elif kind == "input":
                v = v + (ops.reshape(x, v.shape) if lib is ops else x.reshape(v.shape))
            elif kind == "index":
                n = v.shape[-1]
                v = v + (ops.cast(ops.arange(n, dtype="int32"), "float32") if lib is ops else
                         np.arange(n, dtype=np.float32))
            else:
                outs.append(v)
        if consumer == "add":
            outs.append(v + y)
        elif consumer == "sum":
            outs.append((ops.sum(v * y, -1, keepdims=True)) if lib is ops else (v * y).sum(-1, keepdims=True))
        else:
            outs.append(v - (ops.max(v, -1, keepdims=True) if lib is ops else v.max(-1, keepdims=True)))
        return tuple(outs)

    static = {"x": tuple(range(len(shape))), "y": tuple(range(len(final)))}
    got = dvmlang.graph(lambda x, y: run(ops, x, y), static=static)(x, y)
    want = run(np, x.astype(np.float64), y.astype(np.float64))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("path", ["compose", "text"])
def test_a_row_index_feeds_the_work_before_a_reductions_column_loop(rng, monkeypatch, path):
    # found by the chains above at 40x: (x + an index along the rows) reduced over a last dim of 1 runs in loop
    # mode, its per-row work before the column loop, where the row index was not yet computed
    monkeypatch.setenv("DVMLANG_FUSER", path)
    x = rng.standard_normal((1, 2)).astype(np.float32)
    y = rng.standard_normal((1, 1, 2, 1)).astype(np.float32)

    def f(x, y):
        v = ops.reshape(x, (1, 1, 2)) + ops.cast(ops.arange(2, dtype="int32"), "float32")
        return ops.sum(ops.reshape(v, (1, 1, 2, 1)) * y, -1, keepdims=True)

    got = dvmlang.graph(f, static={"x": (0, 1), "y": (0, 1, 2, 3)})(x, y)
    np.testing.assert_allclose(got, (x.reshape(2) + np.arange(2)).reshape(1, 1, 2, 1) * y, rtol=1e-6)


@pytest.mark.parametrize("path", ["compose", "text"])
def test_a_number_broadcast_to_a_shape_is_read_as_the_number(rng, monkeypatch, path):
    """``full`` (a broadcast of a number) read by elementwise operations in a larger iteration space (a mask's
    ``(L, L)`` over ``(B, H, L, L)``) is computed in their kernels, not stored by a kernel of its own; a
    broadcast of a computed number and a copy stay."""
    monkeypatch.setenv("DVMLANG_FUSER", path)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    y = rng.standard_normal((4, 7)).astype(np.float32)

    def f(x, y):
        m = ops.full((7, 7), 2.0)
        keep = ops.where(ops.full((1, 7), True), y, 0.5)
        scale = ops.broadcast_to(ops.full((), 3.0) * 0.5, (7, 7))  # (scalar arithmetic on numbers: a number)
        return x * m + scale, ops.exp(keep)

    g = dvmlang.graph(f)
    a, b = g(x, y)
    np.testing.assert_allclose(a, x * 2 + 1.5, rtol=1e-6)
    np.testing.assert_allclose(b, np.exp(y), rtol=1e-6)
    assert len(_groups(g, x, y)) == 2  # (one per output's iteration space)

    def computed(x, y):
        s = ops.sum(y)  # a computed number: read through its broadcast as before
        return x * ops.broadcast_to(s, (7, 7))

    np.testing.assert_allclose(dvmlang.graph(computed)(x, y), x * y.sum(), rtol=1e-5)


def _partition(x, ws):
    """A window partition of (B, H, W, C) through a rank-6 view: (B * H/ws * W/ws, ws * ws, C)."""
    B, H, W, C = x.shape
    v = ops.reshape(x, (B, H // ws, ws, W // ws, ws, C))
    return ops.reshape(ops.permute(v, (0, 1, 3, 2, 4, 5)), (-1, ws * ws, C))


@pytest.mark.parametrize("path", ["compose", "text"])
@pytest.mark.parametrize("static", [True, False])
def test_a_copy_of_a_rank_six_permuted_view_runs_over_merged_dims(rng, monkeypatch, path, static):
    """A reshape of a permuted rank-6 view of a computed value needs a copy kernel, whose space had rank 6 (a
    GraphError: vector groups have rank <= 4). The copy runs over the runs of dims the permute keeps together,
    merged: the same elements in the same order."""
    monkeypatch.setenv("DVMLANG_FUSER", path)
    x = rng.standard_normal((2, 8, 12, 16)).astype(np.float32)
    want = (x * 2 + 1).reshape(2, 2, 4, 3, 4, 16).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 16, 16) * 3
    g = dvmlang.graph(lambda x: _partition(x * 2.0 + 1.0, 4) * 3.0, static={"x": (0, 1, 2, 3)} if static else None)
    np.testing.assert_allclose(g(x), want, rtol=1e-6)
    if not static:  # other sizes through the same program
        y = rng.standard_normal((1, 4, 8, 16)).astype(np.float32)
        np.testing.assert_allclose(g(y), (y * 2 + 1).reshape(1, 1, 4, 2, 4, 16).transpose(0, 1, 3, 2, 4, 5)
                                   .reshape(-1, 16, 16) * 3, rtol=1e-6)


@pytest.mark.parametrize("perm", [(5, 4, 3, 2, 1, 0), (0, 1, 4, 2, 5, 3), (3, 0, 4, 1, 5, 2), (1, 0, 2, 3, 5, 4)])
def test_a_rank_six_permute_of_many_runs_copies_in_block_moves(rng, perm):
    """A permute whose dims do not stay together in at most four runs (every dim moves; pixel_shuffle's) is copied
    as block moves, one copy kernel each (``copies._block_moves``: every permutation up to rank 6 in at most 5)."""
    x = rng.standard_normal((4, 24)).astype(np.float32)
    g = dvmlang.graph(lambda x: ops.reshape(ops.permute(ops.reshape(x + 1.0, (2, 2, 2, 2, 2, 3)), perm), (8, 12)),
                      static={"x": (0, 1)})
    np.testing.assert_array_equal(g(x), (x + 1).reshape(2, 2, 2, 2, 2, 3).transpose(perm).reshape(8, 12))


@pytest.mark.parametrize("axis", [0, 2, 4])
def test_a_rank_five_cat_joins_over_merged_dims(rng, axis):
    """A cat of rank-5 tensors (a stack on a fifth dim): the dims on each side of its axis merged. (Elementwise
    work at rank 5 is not merged in a @graph: torch's lowering merges it.)"""
    a = rng.standard_normal((2, 3, 4, 5, 2)).astype(np.float32)
    b = rng.standard_normal((2, 3, 4, 5, 2)).astype(np.float32)
    c = rng.standard_normal(tuple(3 if j == axis else n for j, n in enumerate(a.shape))).astype(np.float32)
    got = dvmlang.graph(lambda a, b, c: ops.cat([a, b, c], axis))(a, b, c)
    np.testing.assert_array_equal(got, np.concatenate([a, b, c], axis))
    x = a[..., 0] * 2  # (rank 4: computed, then stacked on a fifth dim with its negation)
    s = dvmlang.graph(lambda x: ops.stack([x * 2.0, -x], -1))(x)
    np.testing.assert_allclose(s, np.stack([x * 2, -x], -1), rtol=1e-6)


def test_a_cat_part_of_a_literal_size_one_keeps_its_own_length_along_the_axis(rng):
    """A part whose other dim is a literal 1 (a @graph captures a size-1 dim as 1) against one whose size there is
    a symbol deduced equal to 1: the part's own length along the cat's axis stays (it was taken for the result's,
    a deduction every call failed: each call captured again with its size-1 dims as 1s)."""
    a = rng.standard_normal((2, 1)).astype(np.float32)
    c = rng.standard_normal((3, 1)).astype(np.float32)
    g = dvmlang.graph(lambda a, c: ops.cat([a, c], 0), static={"c": (1,)})
    np.testing.assert_array_equal(g(a, c), np.concatenate([a, c], 0))
    assert g.stats.captures == 1  # (the generic capture serves it: no second capture with its size-1 dims as 1s)
