"""Property: a random small program of ``dvmlang.ops`` gives numpy's result fused and unfused, at two shapes.

A program is a list of steps over a pool of values of four kinds — full ``(R, C)``, per-row ``(R, 1)``,
per-column ``(C,)`` and ``(1,)`` (a column value reduced) — so that every combination broadcasts. Unary steps are bounded (tanh, sigmoid, ...)
so that values stay in a range where float32 results can be compared with a tight tolerance.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dvmlang
import dvmlang.ops as ops

UNARY = {
    "tanh": (ops.tanh, np.tanh),
    "sigmoid": (ops.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    "abs": (ops.abs, np.abs),
    "neg": (ops.neg, np.negative),
    "exp_tanh": (lambda v: ops.exp(ops.tanh(v)), lambda v: np.exp(np.tanh(v))),
    "sqrt1": (lambda v: ops.sqrt(ops.abs(v) + 1.0), lambda v: np.sqrt(np.abs(v) + 1)),
    "log1": (lambda v: ops.log(v * v + 1.0), lambda v: np.log(v * v + 1)),
}
BINARY = {
    "add": (ops.add, np.add),
    "sub": (ops.sub, np.subtract),
    "mul": (ops.mul, np.multiply),
    "max": (ops.maximum, np.maximum),
    "min": (ops.minimum, np.minimum),
    "div": (lambda a, b: a / (ops.abs(b) + 1.0), lambda a, b: a / (np.abs(b) + 1)),
    "where": (lambda a, b: ops.where(a > b, a, b * 0.5), lambda a, b: np.where(a > b, a, b * 0.5)),
}
REDUCE = {
    "sum": (lambda v: ops.sum(v, -1, keepdims=True), lambda v: v.sum(-1, keepdims=True)),
    "mean": (lambda v: ops.mean(v, -1, keepdims=True), lambda v: v.mean(-1, keepdims=True)),
    "max": (lambda v: ops.max(v, -1, keepdims=True), lambda v: v.max(-1, keepdims=True)),
    "min": (lambda v: ops.min(v, -1, keepdims=True), lambda v: v.min(-1, keepdims=True)),
    "softmax": (ops.softmax, lambda v: np.exp(v - v.max(-1, keepdims=True)) /
                np.exp(v - v.max(-1, keepdims=True)).sum(-1, keepdims=True)),
}


@st.composite
def programs(draw):
    """Steps ``(op, name, operand indices)`` over a pool that starts with the inputs x, y (full), r (row) and
    w (col); the last one or two values are the outputs."""
    kinds = ["full", "full", "row", "col"]
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        what = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "const"]))
        if what == "unary":
            i = draw(st.integers(0, len(kinds) - 1))
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), (i,)))
            kinds.append(kinds[i])
        elif what == "binary":
            i, j = draw(st.integers(0, len(kinds) - 1)), draw(st.integers(0, len(kinds) - 1))
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), (i, j)))
            pair = {kinds[i], kinds[j]} - {"one"}
            kinds.append("full" if len(pair) > 1 or "full" in pair else pair.pop() if pair else "one")
        elif what == "const":
            i = draw(st.integers(0, len(kinds) - 1))
            steps.append(("const", draw(st.sampled_from([0.5, -2.0, 3.0])), (i,)))
            kinds.append(kinds[i])
        else:  # over the last dim of any value: a per-row (R, 1) value reduces over a size-1 dim
            i = draw(st.integers(0, len(kinds) - 1))
            name = draw(st.sampled_from(sorted(REDUCE)))
            steps.append(("reduce", name, (i,)))
            kinds.append(kinds[i] if name == "softmax" else "row" if kinds[i] in ("full", "row") else "one")
    n_out = draw(st.integers(1, 2))
    return steps, n_out


def evaluate(steps, n_out, inputs, lib):
    """Run the program with dvmlang.ops (``lib=0``) or numpy (``lib=1``)."""
    pool = list(inputs)
    for op, name, args in steps:
        vals = [pool[i] for i in args]
        if op == "unary":
            pool.append(UNARY[name][lib](vals[0]))
        elif op == "binary":
            pool.append(BINARY[name][lib](vals[0], vals[1]))
        elif op == "reduce":
            pool.append(REDUCE[name][lib](vals[0]))
        else:
            pool.append(vals[0] * name + 1.0)
    return tuple(pool[-n_out:])


def as_graph(steps, n_out, fuse):
    def program(x, y, r, w):
        return evaluate(steps, n_out, (x, y, r, w), 0)

    return dvmlang.graph(program, fuse=fuse)


def close(got, want):
    want = np.broadcast_to(want, got.shape) if want.shape != got.shape and want.size == 1 else want
    assert got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-5 * scale)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(), shapes=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 70)), min_size=2,
                                        max_size=2), seed=st.integers(0, 2 ** 16))
def test_random_programs_fused_equal_unfused_and_numpy(prog, shapes, seed):
    steps, n_out = prog
    rng = np.random.default_rng(seed)
    fused, unfused = as_graph(steps, n_out, True), as_graph(steps, n_out, False)
    for rows, cols in shapes:
        if rows == 1 or cols == 1:
            rows, cols = rows + 1, cols + 1  # a size-1 dim is a different signature (it broadcasts)
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        y = rng.standard_normal((rows, cols)).astype(np.float32)
        r = rng.standard_normal((rows, 1)).astype(np.float32)
        w = rng.standard_normal(cols).astype(np.float32)
        want = evaluate(steps, n_out, tuple(a.astype(np.float64) for a in (x, y, r, w)), 1)
        got_f = fused(x, y, r, w)
        got_u = unfused(x, y, r, w)
        got_f = got_f if isinstance(got_f, tuple) else (got_f,)
        got_u = got_u if isinstance(got_u, tuple) else (got_u,)
        for f, u, ref in zip(got_f, got_u, want):
            close(f, ref)
            close(u, ref)
            close(f, u.astype(np.float64))
    # one capture, and one more with r's and w's size-1 dims as 1s when the program broadcasts them (the generic
    # capture then fails to bind them)
    assert fused.stats.captures <= 2 and unfused.stats.captures <= 2


SMALL_UB = dvmlang.npu.Device(profile={"ub_bytes": 32 * 1024})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(), cols=st.lists(st.integers(2, 600), min_size=2, max_size=2), rows=st.integers(2, 9),
       seed=st.integers(0, 2 ** 16))
def test_random_programs_with_rows_too_long_for_ub_take_the_split_plan(prog, cols, rows, seed):
    """On a device with a small UB, rows of a few hundred elements do not fit: the fused plan's guard fails
    and the split plan runs (reductions end their groups, elementwise values are recomputed)."""
    steps, n_out = prog
    last = 3 + len(steps)  # then a softmax of the last value times x: a reduction consumed at full width
    steps = steps + [("binary", "add", (last, 0)), ("reduce", "softmax", (last + 1,)), ("binary", "mul", (last + 2, 1))]
    rng = np.random.default_rng(seed)
    fused = dvmlang.graph(lambda x, y, r, w: evaluate(steps, n_out, (x, y, r, w), 0), device=SMALL_UB)
    for c in cols:
        x, y = (rng.standard_normal((rows, c)).astype(np.float32) for _ in range(2))
        r, w = rng.standard_normal((rows, 1)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        want = evaluate(steps, n_out, tuple(a.astype(np.float64) for a in (x, y, r, w)), 1)
        got = fused(x, y, r, w)
        for f, ref in zip(got if isinstance(got, tuple) else (got,), want):
            close(f, ref)
