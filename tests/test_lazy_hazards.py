"""dvmlang.lazy(): in-place writes, aliasing hazards, read-only guards, and exceptions inside a block."""

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops

MODES = [pytest.param(False, id="foreground"), pytest.param(True, id="background")]


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


@pytest.fixture
def x(rng):
    return rng.standard_normal((4, 6)).astype(np.float32)


# ---- in-place writes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bg", MODES)
def test_in_place_writes_into_the_wrapped_array_after_pending_reads(bg, x):
    x0 = x.copy()
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        before = t * 2  # reads x before the write
        t += 1
        t *= 3
        after = t - 1  # reads the new value
        assert np.array_equal(x, x0)  # nothing written yet
    close(before.numpy(), x0 * 2)
    close(x, (x0 + 1) * 3)
    close(after.numpy(), (x0 + 1) * 3 - 1)
    assert t.numpy() is x and x.flags.writeable
    assert [f.reason for f in session.stats.flushes] == ["exit"]  # no hazard: all reads precede the write


def test_in_place_outside_lazy_writes_at_once(x):
    x0 = x.copy()
    t = dvmlang.tensor(x)
    t -= 2
    close(x, x0 - 2)
    t /= 2
    close(x, (x0 - 2) / 2)


def test_in_place_keeps_the_dtype_and_refuses_unsafe_casts():
    a = np.arange(6, dtype=np.int32)
    t = dvmlang.tensor(a)
    t += 2
    assert a.tolist() == [2, 3, 4, 5, 6, 7] and t.dtype.name == "int32"
    with pytest.raises(dvmlang.GraphError, match="cannot be stored in a tensor of int32"):
        t *= 1.5
    with pytest.raises(dvmlang.GraphError, match="cannot broadcast the target"):
        dvmlang.tensor(np.zeros(3, np.float32)).__iadd__(dvmlang.tensor(np.zeros((2, 3), np.float32)))
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(dvmlang.GraphError, match="read-only"):
        tr = dvmlang.tensor(ro)
        tr += 1


@pytest.mark.parametrize("bg", MODES)
def test_another_tensor_on_the_same_array_sees_the_write(bg, x):
    """Aliasing hazard: reading memory that a pending in-place operation writes flushes first."""
    x0 = x.copy()
    with dvmlang.lazy(background=bg) as session:
        a, b = dvmlang.tensor(x), dvmlang.tensor(x[1:])
        early = b * 2
        a += 1
        late = b * 2  # b views x: it must see a's write
    close(early.numpy(), x0[1:] * 2)
    close(late.numpy(), (x0[1:] + 1) * 2)
    fl = session.stats.flushes
    assert [f.reason for f in fl] == ["hazard", "exit"]
    assert "pending in-place operation writes" in fl[0].detail


@pytest.mark.parametrize("bg", MODES)
def test_observing_an_alias_of_a_pending_write_flushes(bg, x):
    x0 = x.copy()
    with dvmlang.lazy(background=bg) as session:
        a, b = dvmlang.tensor(x), dvmlang.tensor(x)
        a += 5
        got = b.numpy()
        close(got, x0 + 5)
    assert session.stats.flushes[0].reason == "observe"


@pytest.mark.parametrize("bg", MODES)
def test_indexed_assignment_waits_for_pending_reads(bg, x):
    x0 = x.copy()
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        u = ops.exp(t)
        t[0] = 0.0  # a partial write: the pending exp must read the old row first
        v = ops.exp(t)
    close(u.numpy(), np.exp(x0))
    x1 = x0.copy()
    x1[0] = 0
    close(v.numpy(), np.exp(x1))
    close(x, x1)
    assert [f.reason for f in session.stats.flushes] == ["hazard", "exit"]


def test_indexed_assignment_of_a_pending_value_is_unfusible(x):
    with dvmlang.lazy(background=False) as session:
        t = ops.exp(dvmlang.tensor(x))
        t[:, 0] = dvmlang.tensor(np.ones(4, np.float32)) * 2
        got = t.numpy()
    ref = np.exp(x)
    ref[:, 0] = 2
    close(got, ref)
    assert session.stats.flushes[0].reason == "unfusible"


@pytest.mark.parametrize("bg", MODES)
def test_views_follow_in_place_writes_like_eager(bg, x):
    def run():
        t = dvmlang.tensor(x.copy())
        e = ops.exp(t)
        et = e.T  # a view of e
        e += 1  # e is pending with a view: flushes (hazard) so the view aliases e's storage
        tt = t.T  # a view of a wrapped array
        t -= 1
        return et.numpy().copy(), tt.numpy().copy()

    eager = run()
    with dvmlang.lazy(background=bg) as session:
        lazy = run()
    for a, b in zip(eager, lazy):
        np.testing.assert_array_equal(a, b)
    close(lazy[0], (np.exp(x) + 1).T)
    close(lazy[1], (x - 1).T)
    assert session.stats.reasons["hazard"] == 1


@pytest.mark.parametrize("bg", MODES)
def test_a_view_made_before_an_in_place_write_sees_it(bg):
    x = np.full((2, 3), 0.5, np.float32)
    with dvmlang.lazy(background=bg) as session:
        t = dvmlang.tensor(x)
        v = t.T.T  # a pending view of x
        t += t
        a = abs(v)  # eager: the view shows the doubled values
    np.testing.assert_array_equal(a.numpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(x, np.ones((2, 3), np.float32))
    assert [f.reason for f in session.stats.flushes] == ["hazard", "exit"]
    assert "reading a view" in session.stats.flushes[0].detail


# ---- read-only guards --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bg", MODES)
def test_arrays_read_by_pending_work_are_read_only_until_it_ran(bg, x):
    x0 = x.copy()
    view = x[:2]
    with dvmlang.lazy(background=bg):
        t = dvmlang.tensor(view)
        u = t * 2
        assert not x.flags.writeable and not view.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            x[0, 0] = 99.0
        u.numpy()
        assert x.flags.writeable and view.flags.writeable
        x[3, 3] = 7.0  # no pending work reads it any more
    close(u.numpy(), x0[:2] * 2)


def test_a_read_only_array_stays_read_only(x):
    x.flags.writeable = False
    with dvmlang.lazy(background=False):
        y = dvmlang.tensor(x) + 1
    assert not x.flags.writeable
    close(y.numpy(), x + 1)


@pytest.mark.parametrize("bg", MODES)
def test_in_place_through_a_view_of_a_read_only_array_is_refused(bg):
    ro = np.arange(6, dtype=np.float32).reshape(2, 3)  # a read-only view of a writeable base
    ro.flags.writeable = False
    with pytest.raises(dvmlang.GraphError, match="read-only"):
        with dvmlang.lazy(background=bg):
            t = dvmlang.tensor(ro).T
            t += 1  # t is a pending view: flushed first, then found read-only (in the background: when it runs)
    assert ro.ravel().tolist() == [0, 1, 2, 3, 4, 5] and not ro.flags.writeable and ro.base.flags.writeable


def test_published_views_of_wrapped_arrays_are_writeable(x):
    x0 = x.copy()
    with dvmlang.lazy(background=False):
        tt = dvmlang.tensor(x).T
    arr = tt.numpy()
    assert arr.base is not None and arr.flags.writeable
    tt += 1  # writes x through the view
    close(x, x0 + 1)


# ---- exceptions inside a block ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bg", MODES)
def test_a_python_exception_leaves_captured_work_computed_like_eager(bg, x):
    x0 = x.copy()
    with pytest.raises(KeyError):
        with dvmlang.lazy(background=bg) as session:
            t = dvmlang.tensor(x)
            u = ops.exp(t)
            t += 1
            raise KeyError("boom")
    assert u.state == "ready" and t.state == "ready"
    close(u.numpy(), np.exp(x0))
    close(x, x0 + 1)
    assert session.stats.flushes[0].detail == "leaving the dvmlang.lazy() block on KeyError"


def _rank5():
    return dvmlang.tensor(np.ones((2, 2, 2, 2, 2), np.float32)) * 2  # the fuser cannot run rank-5 elementwise


@pytest.mark.parametrize("bg", MODES)
def test_a_failing_flush_publishes_nothing(bg, x):
    x0 = x.copy()
    with pytest.raises(dvmlang.GraphError, match="rank <= 4") as info:
        with dvmlang.lazy(background=bg) as session:
            t = dvmlang.tensor(x)
            t += 1
            bad = _rank5()
            fine = ops.exp(t)
    assert "raised by dvmlang.lazy flush #0 (exit)" in info.value.__notes__
    assert np.array_equal(x, x0) and x.flags.writeable  # the in-place write was never applied
    for v in (t, bad, fine):
        assert v.state == "failed"
        with pytest.raises(dvmlang.GraphError, match="never computed: lazy flush #0 .exit. failed"):
            v.numpy()
    assert session.stats.flushes[0].error.startswith("GraphError")


def test_a_failing_flush_raises_where_it_was_triggered_in_the_foreground(x):
    with dvmlang.lazy(background=False) as session:
        bad = _rank5()
        good = dvmlang.tensor(x) + 1
        with pytest.raises(dvmlang.GraphError, match="rank <= 4"):
            bad.numpy()
        later = dvmlang.tensor(x) * 2  # the session goes on
    close(later.numpy(), x * 2)
    assert good.state == "failed" and [f.reason for f in session.stats.flushes] == ["observe", "exit"]


def test_a_background_failure_is_raised_once_at_the_next_sync(x):
    with dvmlang.lazy(background=True) as session:
        bad = _rank5()
        session.flush()
        with pytest.raises(dvmlang.GraphError, match="never computed"):
            bad.numpy()  # reported here: not raised again on exit
        ok = dvmlang.tensor(x) - 1
    close(ok.numpy(), x - 1)
    with pytest.raises(dvmlang.GraphError, match="rank <= 4"):
        with dvmlang.lazy(background=True) as session:
            keep = _rank5()  # noqa: F841 - nobody observes it: the failure surfaces when the block ends
            session.flush()


def test_an_input_from_a_failed_flush_fails_the_next_one(x):
    with pytest.raises(dvmlang.GraphError, match="rank <= 4"):  # the first failure, raised when the block ends
        with dvmlang.lazy(background=True) as session:
            bad = _rank5()
            session.flush()
            derived = ops.sum(bad, axis=-1)  # captured while its input is still in flight
    assert [f.error is not None for f in session.stats.flushes] == [True, True]
    with pytest.raises(dvmlang.GraphError, match="not available: this value was never computed: lazy flush #0"):
        derived.numpy()


def test_a_python_exception_with_a_failing_flush_keeps_the_original_exception(x):
    with pytest.raises(KeyError) as info:
        with dvmlang.lazy(background=False):
            bad = _rank5()
            raise KeyError("first")
    assert any("could not be computed either" in n for n in info.value.__notes__)
    assert bad.state == "failed"


class _Interrupt(BaseException):
    pass


def test_an_interrupt_discards_pending_work(x):
    x0 = x.copy()
    with pytest.raises(_Interrupt):
        with dvmlang.lazy(background=True):
            t = dvmlang.tensor(x)
            u = ops.exp(t)
            t += 1
            raise _Interrupt()
    assert np.array_equal(x, x0) and x.flags.writeable
    for v in (t, u):
        assert v.state == "failed"
        with pytest.raises(dvmlang.GraphError, match="interrupted by _Interrupt"):
            v.numpy()
