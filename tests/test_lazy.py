"""dvmlang.lazy(): flush triggers and their reasons, stats, outputs, in-place and aliasing hazards, failures."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.ops as ops

MODES = [pytest.param(False, id="foreground"), pytest.param(True, id="background")]


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


@pytest.fixture
def x(rng):
    return rng.standard_normal((8, 100)).astype(np.float32)


# ---- the example and the stats ------------------------------------------------------------------


@pytest.mark.parametrize("bg", MODES)
def test_three_elementwise_and_a_sum_observed_once_make_one_launch_storing_only_the_result(bg, x):
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        v = ops.sum(ops.exp(t) * 2 + 1, axis=-1)
        got = v.numpy()
    close(got, (np.exp(x) * 2 + 1).sum(-1), 1e-4)
    st = session.stats
    assert len(st.flushes) == 1 and st.reasons == {"observe": 1}
    f = st.flushes[0]
    assert (f.ops, f.kernels, f.launches, f.outputs, f.dead) == (4, 1, 1, 1, 0)
    assert f.bytes_stored == 8 * 4 == st.bytes_stored  # only the 8 row sums reach GM
    assert st.launches == 1 and st.ops_fused == 4


@pytest.mark.parametrize("bg", MODES)
def test_a_live_intermediate_is_an_output_and_a_dead_one_is_not(bg, x):
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        u = ops.exp(t) * 2 + 1  # still referenced when v is observed: published too
        v = ops.sum(u, axis=-1)
        v.numpy()
    f = session.stats.flushes[0]
    assert f.outputs == 2 and f.bytes_stored == 8 * 4 + x.nbytes
    close(u.numpy(), np.exp(x) * 2 + 1, 1e-5)
    assert u.state == "ready"


@pytest.mark.parametrize("bg", MODES)
def test_unobservable_work_is_dropped(bg, x):
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        ops.exp(t) * 3  # nobody keeps it
        w = ops.tanh(t)
        del w  # dropped before anything needed it
        keep = t + 1
    f = session.stats.flushes[0]
    assert f.reason == "exit" and f.ops == 1 and f.dead == 3 and f.outputs == 1
    close(keep.numpy(), x + 1)


def test_stats_print_and_repr(x):
    with dvmlang.lazy(background=False) as session:
        float(ops.sum(dvmlang.tensor(x)))
    text = str(session.stats)
    assert "1 flush(es), 1 launch(es)" in text and "#0 observe (float())" in text
    assert "1 flushes (observe 1)" in repr(session.stats)


# ---- each trigger and its reason ----------------------------------------------------------------------------


OBSERVERS = {
    ".numpy()": lambda t: t.numpy(),
    "np.asarray": np.asarray,
    "float()": lambda t: float(ops.sum(t)),
    "int()": lambda t: int(ops.max(t)),
    "bool() / if": lambda t: bool(ops.max(t) > 0),
    "str()": str,
    "repr()": repr,
    ".item()": lambda t: ops.min(t).item(),
    ".tolist()": lambda t: t.tolist(),
}


@pytest.mark.parametrize("how", list(OBSERVERS))
def test_observing_flushes_with_reason_observe(how, x):
    with dvmlang.lazy(background=False) as session:
        t = ops.exp(dvmlang.tensor(x))
        assert t.state == "pending" and session.stats.flushes == []
        OBSERVERS[how](t)
        assert t.state == "ready"
    assert [(f.reason, f.detail) for f in session.stats.flushes] == [("observe", how)]


def test_print_and_if_flush(x, capsys):
    with dvmlang.lazy(background=False) as session:
        t = dvmlang.tensor(x) * 0 + 1
        print(t.sum(axis=-1))
        if t.sum() > 5:
            print("big")
    assert "big" in capsys.readouterr().out
    assert [f.detail for f in session.stats.flushes] == ["str()", "bool() / if"]


def test_leaving_the_block_flushes_and_nested_blocks_flush_the_outer_one(x):
    with dvmlang.lazy(background=False) as outer:
        a = dvmlang.tensor(x) * 2
        with dvmlang.lazy(background=False) as inner:
            b = a + 1
            assert a.state == "ready"
        assert b.state == "ready"
        c = b * 3
        assert c.state == "pending"
    assert c.state == "ready"
    close(c.numpy(), (x * 2 + 1) * 3)
    assert [f.reason for f in outer.stats.flushes] == ["nested", "exit"]
    assert [f.reason for f in inner.stats.flushes] == ["exit"]


def test_size_cap_flushes_and_the_result_is_unchanged(x):
    with dvmlang.lazy(background=False, max_pending=8) as session:
        t = dvmlang.tensor(x)
        for _ in range(10):
            t = t * 1.5 - 0.25
        got = t.numpy()
    ref = x.copy()
    for _ in range(10):
        ref = ref * np.float32(1.5) - np.float32(0.25)
    close(got, ref, 1e-4)
    reasons = session.stats.reasons
    assert reasons["size cap"] >= 2 and reasons["observe"] == 1
    assert all(len(f.names) <= 1 for f in session.stats.flushes)


def test_explicit_flush(x):
    with dvmlang.lazy(background=True) as session:
        t = ops.exp(dvmlang.tensor(x))
        rec = session.flush(wait=True)
        assert rec.reason == "explicit" and t.state == "ready"
        assert session.flush() is None  # nothing pending: no flush recorded
    assert len(session.stats.flushes) == 1


@dvmlang.kernel
def _double(x_ptr, n, out_ptr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) * 2, mask=m)


@pytest.mark.parametrize("bg", MODES)
def test_a_user_kernel_is_unfusible_and_runs_as_its_own_launch(bg, rng):
    x = rng.standard_normal(100).astype(np.float32)
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x) + 1
        d = ops.custom(_double, (1,), [((100,), np.float32)], t, 100, BLOCK=128)
        r = ops.exp(d)
    close(r.numpy(), np.exp((x + 1) * 2), 1e-5)
    fl = session.stats.flushes
    assert [f.reason for f in fl] == ["unfusible", "unfusible", "exit"]
    assert fl[1].detail == "ops.custom(_double)" and fl[1].launches == 1


def test_a_user_kernel_outside_lazy_runs_at_once(rng):
    x = rng.standard_normal(50).astype(np.float32)
    d = ops.custom(_double, (1,), [((50,), np.float32)], dvmlang.tensor(x), 50, BLOCK=64)
    assert d.state == "ready"
    close(d.numpy(), x * 2)


def test_indexing_a_pending_value_is_unfusible(x):
    with dvmlang.lazy(background=False) as session:
        t = ops.exp(dvmlang.tensor(x))
        row = t[2]
        close(row.numpy(), np.exp(x[2]))
    assert [(f.reason, f.detail) for f in session.stats.flushes] == [("unfusible", "indexing")]


# ---- outside lazy: one kernel per op -------------------------------------------------------------------------


def test_outside_lazy_each_op_runs_at_once_one_kernel_each(x):
    with dvmlang.trace() as tr:
        t = dvmlang.tensor(x)
        s = ops.softmax(t)  # max, sub, exp, sum, div
        assert s.state == "ready"
    assert len(tr.launches) == 5
    close(s.numpy(), np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1,
                                                                                                     keepdims=True))


def test_dvmlang_trace_shows_the_launches_of_a_flush(x):
    with dvmlang.trace() as tr:
        with dvmlang.lazy(background=True) as session:
            t = dvmlang.tensor(x)
            y = ops.softmax(t) @ t.T
        y.numpy()
    names = [launch.name for launch in tr.launches]
    assert names == session.stats.flushes[0].names and len(names) == 2
    assert "max_sub_exp_sum_truediv" in names[0] and "matmul" in names[1]


# ---- tensors and operators -----------------------------------------------------------------------------------


def test_tensor_wraps_without_copying_and_knows_its_shape(x):
    t = dvmlang.tensor(x)
    assert t.numpy() is x and t.shape == x.shape and t.dtype is dvmlang.ops.dt.float32 and t.ndim == 2
    assert dvmlang.tensor(t) is t
    assert dvmlang.tensor([1.0, 2.0]).dtype.name == "float32" and dvmlang.tensor(3).dtype.name == "int32"
    with pytest.raises(dvmlang.GraphError, match="complex64 is not supported"):
        dvmlang.tensor(np.zeros(3, np.complex64))


def test_python_operators_match_numpy(rng):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    with dvmlang.lazy(background=False):
        ta, tb = dvmlang.tensor(a), dvmlang.tensor(b)
        res = {
            "add": ta + tb, "radd": 2 + ta, "sub": ta - 1, "rsub": 1 - ta, "mul": ta * tb, "div": ta / (abs(tb) + 1),
            "rdiv": 1 / (abs(ta) + 1), "pow": abs(ta) ** 2, "neg": -ta, "abs": abs(ta), "matmul": ta @ w,
            "rmatmul": a @ dvmlang.tensor(w), "T": ta.T, "lt": ta < tb, "le": ta <= 0, "gt": ta > tb, "ge": ta >= 0,
            "eq": ta == ta, "ne": ta != tb, "np_left": a + tb, "sum": ta.sum(), "mean": ta.mean(axis=0),
            "max": ta.max(axis=1, keepdims=True), "min": ta.min(), "reshape": ta.reshape(7, 5),
        }
    ref = {
        "add": a + b, "radd": 2 + a, "sub": a - 1, "rsub": 1 - a, "mul": a * b, "div": a / (abs(b) + 1),
        "rdiv": 1 / (abs(a) + 1), "pow": abs(a) ** 2, "neg": -a, "abs": abs(a), "matmul": a @ w, "rmatmul": a @ w,
        "T": a.T, "lt": a < b, "le": a <= 0, "gt": a > b, "ge": a >= 0, "eq": a == a, "ne": a != b, "np_left": a + b,
        "sum": a.sum(), "mean": a.mean(axis=0), "max": a.max(axis=1, keepdims=True), "min": a.min(),
        "reshape": a.reshape(7, 5),
    }
    for k, v in res.items():
        assert isinstance(v, dvmlang.LazyTensor), k
        got = v.numpy()
        assert got.shape == ref[k].shape, k
        np.testing.assert_allclose(got, ref[k], rtol=1e-4, atol=1e-4, err_msg=k)


def test_errors_are_dvmlang_errors_raised_at_capture(x):
    with dvmlang.lazy(background=False) as session:
        t = dvmlang.tensor(x)
        with pytest.raises(dvmlang.GraphError, match="do not broadcast"):
            t + dvmlang.tensor(np.ones(3, np.float32))
        with pytest.raises(dvmlang.GraphError, match="ambiguous"):
            bool(t)
        with pytest.raises(dvmlang.GraphError, match="one element"):
            float(t)
    assert session.stats.flushes == []


def test_graph_functions_accept_lazy_tensors(x):
    g = dvmlang.graph(lambda a: ops.exp(a) + 1)
    with dvmlang.lazy(background=False) as session:
        t = dvmlang.tensor(x) * 2
        close(g(t), np.exp(x * 2) + 1, 1e-5)
    assert session.stats.flushes[0].detail == "passed to a kernel or graph"


# ---- programs are reused across shapes ------------------------------------------------------------------------


def test_a_new_shape_reuses_the_compiled_program(rng):
    seen = []
    for rows, cols in ((5, 33), (17, 40), (9, 33)):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        with dvmlang.lazy(background=False) as session:
            y = ops.softmax(dvmlang.tensor(x) * 3.0)
            got = y.numpy()
        e = np.exp(3 * x - (3 * x).max(-1, keepdims=True))
        close(got, e / e.sum(-1, keepdims=True), 1e-5)
        seen.append(session.stats.flushes[0].new_program)
    assert seen[1:] == [False, False]


def test_means_use_the_runtime_size(rng):
    """The count of a mean is a runtime value: a cached program gives the right mean for another size."""
    for cols in (10, 30):
        x = rng.standard_normal((4, cols)).astype(np.float32)
        with dvmlang.lazy(background=False):
            m = ops.mean(dvmlang.tensor(x) + 0.5, axis=-1)
        close(m.numpy(), (x + 0.5).mean(-1), 1e-5)


# ---- background thread -------------------------------------------------------------------------------------------


def test_background_results_and_stats_are_identical_to_foreground(rng):
    x = rng.standard_normal((16, 48)).astype(np.float32)
    w = rng.standard_normal((48, 48)).astype(np.float32) / 7
    out, stats = {}, {}
    for bg in (False, True):
        with dvmlang.lazy(background=bg, max_pending=12) as session:
            h = dvmlang.tensor(x)
            for _ in range(3):
                h = ops.rms_norm(h) @ dvmlang.tensor(w)
                h = ops.silu(h) + h
            out[bg] = h.numpy()
        stats[bg] = [(f.reason, f.ops, f.kernels, f.launches, f.outputs, f.bytes_stored, f.cycles)
                     for f in session.stats.flushes]
    np.testing.assert_array_equal(out[False], out[True])
    assert stats[False] == stats[True] and len(stats[True]) > 1


def test_background_flushes_do_not_block_capture(x):
    with dvmlang.lazy(background=True, max_pending=4) as session:
        t = dvmlang.tensor(x)
        for _ in range(4):
            t = ops.exp(t * 0.01)
        states = {f.index: f for f in session.stats.flushes}
        assert states  # size-cap flushes were submitted while we kept issuing operations
    assert all(f.error is None for f in session.stats.flushes)
    ref = x.copy()
    for _ in range(4):
        ref = np.exp(ref * np.float32(0.01))
    close(t.numpy(), ref, 1e-5)
    assert session.stats.blocked_s >= 0 and session.stats.hidden_encode_s >= 0


def test_row_reduction_of_a_size_one_axis_beside_a_wider_value():
    x = np.ones((3, 4), np.float32)
    r = np.full((3, 1), 2.0, np.float32)
    with dvmlang.lazy(background=False):
        a = abs(dvmlang.tensor(r))
        s = ops.sum(a, axis=-1, keepdims=True)
        wide = dvmlang.tensor(x) + a
    close(s.numpy(), r)
    close(wide.numpy(), x + 2)


def test_matmul_epilogue_reading_its_own_operand():
    a = np.ones((3, 1), np.float32)
    b = np.full((1, 4), 2.0, np.float32)
    with dvmlang.lazy(background=False):
        tb = dvmlang.tensor(b)
        y = dvmlang.tensor(a) @ tb + tb
    close(y.numpy(), a @ b + b)
