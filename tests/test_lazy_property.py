"""Random eager programs give the same results lazily (foreground and background), eagerly, and in numpy."""

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dvmlang
import dvmlang.ops as ops

# Each step reads values from a pool and appends its result (or writes one in place, or appends a view). Shapes
# stay (R, C) or broadcast to it, so any two pool values combine.
UNARY = {
    "exp": (lambda t: ops.exp(t * 0.5), lambda a: np.exp(a * np.float32(0.5))),
    "tanh": (ops.tanh, np.tanh),
    "sigmoid": (ops.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
    "neg": (lambda t: -t, np.negative),
    "abs": (abs, np.abs),
    "sqrt1": (lambda t: ops.sqrt(abs(t) + 1), lambda a: np.sqrt(np.abs(a) + 1)),
    "silu": (ops.silu, lambda a: a / (1 + np.exp(-a))),
    "softmax": (ops.softmax, lambda a: np.exp(a - a.max(-1, keepdims=True))
                / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "rms_norm": (ops.rms_norm, lambda a: a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6)),
    "rowsum": (lambda t: t.sum(axis=-1, keepdims=True), lambda a: a.sum(-1, keepdims=True)),
    "rowmax": (lambda t: t.max(axis=-1, keepdims=True), lambda a: a.max(-1, keepdims=True)),
    "colmean": (lambda t: t.mean(axis=0), lambda a: a.mean(0)),
    # the last operand is a fresh value: the fuser cannot yet fuse an epilogue that reads the matmul's own
    # operand (see test_lazy.py::test_matmul_epilogue_reading_its_own_operand)
    "gram": (lambda t: (t @ t.T) @ (t * 0.1), lambda a: (a @ a.T) @ (a * np.float32(0.1))),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (ops.maximum, np.maximum),
    "where": (lambda a, b: ops.where(a > b, a, b * 0.5), lambda a, b: np.where(a > b, a, b * np.float32(0.5))),
}
RANK = {"softmax": 1, "rms_norm": 1, "rowsum": 1, "rowmax": 1, "colmean": 1, "gram": 2}  # minimum rank
# Row reductions of a value whose last dimension is 1 are left out while the fuser merges them into wider groups
# (it then reduces the broadcast copies): see test_lazy.py::test_row_reduction_of_a_size_one_axis_beside_a_wider_value
ROW_REDUCING = {"softmax", "rms_norm", "rowsum", "rowmax"}
INPLACE = {
    "iadd": (lambda t, o: t.__iadd__(o), np.add),
    "imul": (lambda t, o: t.__imul__(o), np.multiply),
}

step = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), st.integers(0, 20)),
    st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY)), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("scalar"), st.sampled_from(["add", "mul"]), st.integers(0, 20),
              st.sampled_from([0.5, -1.0, 2.0])),
    st.tuples(st.just("inplace"), st.sampled_from(sorted(INPLACE)), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("view"), st.integers(0, 20)),
    st.tuples(st.just("observe"), st.integers(0, 20)),
    st.tuples(st.just("drop"), st.integers(0, 20)),
)


def _run(prog, arrays, tensor, unary, binary, inplace, observe):
    """Interpret ``prog`` over a pool; returns the final pool (dropped slots are None)."""
    pool = [tensor(a) for a in arrays]

    def pick(i):
        live = [j for j, v in enumerate(pool) if v is not None]
        return live[i % len(live)]

    for s in prog:
        kind = s[0]
        if kind == "unary":
            x = pool[pick(s[2])]
            shape = np.shape(x)
            if len(shape) < RANK.get(s[1], 0) or (s[1] in ROW_REDUCING and shape[-1] == 1 and arrays[0].shape[-1] > 1):
                continue
            pool.append(unary[s[1]](x))
        elif kind == "binary":
            pool.append(binary[s[1]](pool[pick(s[2])], pool[pick(s[3])]))
        elif kind == "scalar":
            a = pool[pick(s[2])]
            pool.append(a + s[3] if s[1] == "add" else a * s[3])
        elif kind == "inplace":
            i, j = pick(s[2]), pick(s[3])
            if np.shape(pool[i]) == np.broadcast_shapes(np.shape(pool[i]), np.shape(pool[j])):
                pool[i] = inplace[s[1]](pool[i], pool[j])
        elif kind == "view":  # an alias: in-place writes through it reach its base, and the other way round
            x = pool[pick(s[1])]
            pool.append(x.T.T if len(np.shape(x)) >= 2 else x.reshape(np.shape(x)))
        elif kind == "observe":
            observe(pool[pick(s[1])])
        elif kind == "drop" and sum(v is not None for v in pool) > 1:
            pool[pick(s[1])] = None
    return pool


def _numpy(prog, arrays):
    def ip(name):
        return lambda a, b: INPLACE[name][1](a, b, out=a)

    def array_of(f):  # numpy reduces a 1-D array to a scalar; a tensor stays a (0-d) array, written in place
        return lambda *a: np.asarray(f(*a))
    return _run(prog, arrays, np.array, {k: array_of(v[1]) for k, v in UNARY.items()},
                {k: array_of(v[1]) for k, v in BINARY.items()}, {k: ip(k) for k in INPLACE}, lambda a: None)


def _dvm(prog, arrays, observed):
    def observe(t):
        observed.append(np.array(t))
    return _run(prog, arrays, dvmlang.tensor, {k: v[0] for k, v in UNARY.items()},
                {k: v[0] for k, v in BINARY.items()}, {k: v[0] for k, v in INPLACE.items()}, observe)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(prog=[("unary", "colmean", 1), ("inplace", "iadd", 3, 3)], rows=1, cols=1, seed=0)  # a 0-d value in place
@given(prog=st.lists(step, min_size=1, max_size=9), rows=st.integers(1, 6), cols=st.integers(1, 9),
       seed=st.integers(0, 3))
def test_random_programs_lazy_equal_eager_and_numpy(prog, rows, cols, seed):
    rng = np.random.default_rng(seed)
    base = [rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32),
            rng.standard_normal((rows, 1)).astype(np.float32)]
    ref = _numpy(prog, [a.copy() for a in base])
    runs = {}
    for mode in ("eager", "foreground", "background"):
        arrays = [a.copy() for a in base]
        observed = []
        if mode == "eager":
            pool = _dvm(prog, arrays, observed)
        else:
            with dvmlang.lazy(background=mode == "background", max_pending=24) as session:
                pool = _dvm(prog, arrays, observed)
            assert all(f.error is None for f in session.stats.flushes)
        runs[mode] = ([None if v is None else np.array(v) for v in pool], arrays, observed)
    for mode, (pool, arrays, _) in runs.items():
        for k, (got, want) in enumerate(zip(pool, ref)):
            if want is None:
                assert got is None
                continue
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"{mode}: pool[{k}]")
        for got, want in zip(arrays, [np.asarray(r) for r in ref[:3]]):  # in-place writes reached the inputs
            if want is not None and got.shape == want.shape:
                np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"{mode}: wrapped input")
    # the background thread changes when work runs, never what it computes
    fg, bg = runs["foreground"], runs["background"]
    for a, b in zip(fg[0] + fg[1] + fg[2], bg[0] + bg[1] + bg[2]):
        if a is not None:
            np.testing.assert_array_equal(a, b)
