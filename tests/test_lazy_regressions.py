"""Regressions of tensor programs (dvmlang.ops eagerly, under dvmlang.lazy() and @dvmlang.graph), one test per bug."""

import gc
import linecache
import threading

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser.lazy import flush as lazy_mod
from dvmlang.fuser.lazy import fresh_runtime

MODES = [pytest.param(False, id="foreground"), pytest.param(True, id="background")]


@pytest.fixture
def lazy_runtime():
    """A fresh lazy runtime for the test (no cached programs, guards or worker of the tests before)."""
    with fresh_runtime() as rt:
        yield rt


# ---- a reshape of a permuted computed value (attention's merge-heads) --------------------------------------


def _merge_heads(t):
    s, h, d = t.shape[1], t.shape[0], t.shape[2]
    return ops.reshape(ops.permute(ops.exp(t), (1, 0, 2)), (s, h * d)) + 1


def _merge_heads_ref(t):
    return np.exp(t).transpose(1, 0, 2).reshape(t.shape[1], -1) + 1


def test_reshape_of_a_permuted_computed_value_under_graph(rng):
    t = rng.random((3, 4, 5), dtype=np.float32)
    f = dvmlang.graph(_merge_heads, static={"t": (0, 1, 2)})
    np.testing.assert_allclose(f(t), _merge_heads_ref(t), rtol=1e-6)
    flat = dvmlang.graph(lambda x: ops.reshape(ops.transpose(ops.exp(x)), (20,)), static={"x": (0, 1)})
    x = rng.random((4, 5), dtype=np.float32)
    np.testing.assert_allclose(flat(x), np.exp(x).T.reshape(20), rtol=1e-6)


@pytest.mark.parametrize("bg", MODES)
def test_reshape_of_a_permuted_computed_value_under_lazy(bg, rng):
    t = rng.random((3, 4, 5), dtype=np.float32)
    x = rng.random((4, 5), dtype=np.float32)
    with dvmlang.lazy(background=bg):
        y = _merge_heads(dvmlang.tensor(t))
        z = ops.reshape(ops.transpose(ops.exp(dvmlang.tensor(x))), (20,))
        np.testing.assert_allclose(np.asarray(y), _merge_heads_ref(t), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(z), np.exp(x).T.reshape(20), rtol=1e-6)


# ---- inputs that reinterpret another array's bytes -----------------------------------------------------------


def _reinterpreted(rng):
    """(int16 array viewed as bfloat16, int32 array viewed as float32), finite bit patterns."""
    f = rng.standard_normal((3, 8)).astype(np.float32)
    bf = f.astype(ml_dtypes.bfloat16).view(np.int16).copy().view(ml_dtypes.bfloat16)
    f32 = f.view(np.int32).copy().view(np.float32)
    return bf, f32


def test_a_dtype_reinterpreting_view_is_read_as_its_own_dtype_eagerly(rng):
    for v in _reinterpreted(rng):
        got = np.asarray(ops.exp(dvmlang.tensor(v))).astype(np.float32)
        np.testing.assert_allclose(got, np.exp(v.astype(np.float32)), rtol=2e-2)


@pytest.mark.parametrize("bg", MODES)
def test_a_dtype_reinterpreting_view_is_read_as_its_own_dtype_lazily(bg, rng):
    for v in _reinterpreted(rng):
        with dvmlang.lazy(background=bg):
            got = np.asarray(ops.exp(dvmlang.tensor(v)) + 1).astype(np.float32)
        np.testing.assert_allclose(got, np.exp(v.astype(np.float32)) + 1, rtol=2e-2)


def test_a_dtype_reinterpreting_view_is_read_as_its_own_dtype_in_a_graph(rng):
    f = dvmlang.graph(lambda a: ops.exp(a) * 2)
    for v in _reinterpreted(rng):
        got = np.asarray(f(v)).astype(np.float32)
        np.testing.assert_allclose(got, np.exp(v.astype(np.float32)) * 2, rtol=2e-2)


# ---- memory another library owns -------------------------------------------------------------------------------


class _Foreign:
    """Memory numpy does not own (like a torch tensor's ``.numpy()``): numpy refuses to make it writeable again once
    it was made read-only."""

    def __init__(self, arr):
        self.keep = arr
        self.__array_interface__ = dict(arr.__array_interface__)


def _foreign(shape):
    a = np.asarray(_Foreign(np.arange(np.prod(shape), dtype=np.float32).reshape(shape)))
    assert not a.flags.owndata and a.flags.writeable
    return a


@pytest.mark.parametrize("bg", MODES)
def test_in_place_on_memory_numpy_does_not_own(bg):
    a = _foreign((3, 4))
    ref = a + 1
    with dvmlang.lazy(background=bg):
        t = dvmlang.tensor(a)
        t += 1
    np.testing.assert_array_equal(a, ref)
    assert a.flags.writeable


@pytest.mark.parametrize("bg", MODES)
def test_reading_memory_numpy_does_not_own_leaves_it_writeable(bg):
    a = _foreign((3, 4))
    view = a[1:]
    with dvmlang.lazy(background=bg):
        s = ops.exp(dvmlang.tensor(view)) + ops.sum(dvmlang.tensor(a))
        np.asarray(s)
    assert a.flags.writeable and view.flags.writeable
    a[0, 0] = 5.0  # still a plain writeable array


def test_in_place_on_a_torch_tensors_numpy_view():
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with dvmlang.lazy():
        t = dvmlang.tensor(x.numpy())
        t += 1
        u = ops.exp(dvmlang.tensor(x.numpy()[:, 1:]))
    assert torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1)
    np.testing.assert_allclose(u.numpy(), np.exp(x.numpy()[:, 1:]), rtol=1e-6)
    assert x.numpy().flags.writeable


# ---- KeyboardInterrupt during a flush ----------------------------------------------------------------------------


def test_an_interrupt_inside_a_foreground_flush_leaves_the_array_untouched(monkeypatch):
    a = np.ones((4, 6), np.float32)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lazy_mod.Program, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with dvmlang.lazy(background=False):
            t = dvmlang.tensor(a)
            t += 1
    assert np.array_equal(a, np.ones((4, 6), np.float32)) and a.flags.writeable
    assert t.state == "failed"


def test_ctrl_c_during_a_background_flush_leaves_the_array_untouched(monkeypatch):
    """Ctrl-C reaches the main thread while it waits at the block's end for the worker, which is inside the flush
    of a pending ``t += 1``: the flush must not publish afterwards."""
    a = np.ones((4, 6), np.float32)
    main = threading.get_ident()
    inside, cancelled = threading.Event(), threading.Event()
    run, cancel, wait = lazy_mod.Program.run, lazy_mod._Batch.cancel, lazy_mod._Batch.wait

    def run_until_cancelled(self, *args, **kwargs):
        if threading.get_ident() != main and not inside.is_set():
            inside.set()
            cancelled.wait(10)  # (only a broken cancel lets this time out; the test then fails below)
        return run(self, *args, **kwargs)

    def interrupted_wait(self):
        if threading.get_ident() == main and not cancelled.is_set():
            inside.wait(10)
            raise KeyboardInterrupt  # as a SIGINT does in the waiting main thread
        return wait(self)

    def cancel_and_go_on(self, why):
        out = cancel(self, why)
        cancelled.set()
        return out

    monkeypatch.setattr(lazy_mod.Program, "run", run_until_cancelled)
    monkeypatch.setattr(lazy_mod._Batch, "wait", interrupted_wait)
    monkeypatch.setattr(lazy_mod._Batch, "cancel", cancel_and_go_on)
    with pytest.raises(KeyboardInterrupt):
        with dvmlang.lazy(background=True):
            t = dvmlang.tensor(a)
            t += 1
            u = ops.exp(t)
    assert cancelled.is_set()
    assert np.array_equal(a, np.ones((4, 6), np.float32)) and a.flags.writeable
    for v in (t, u):
        assert v.state == "failed"
        with pytest.raises(dvmlang.GraphError, match="KeyboardInterrupt"):
            v.numpy()
    with dvmlang.lazy(background=True):  # the worker goes on with the next flush
        w = dvmlang.tensor(a) * 2
    np.testing.assert_array_equal(w.numpy(), a * 2)


# ---- bad indexing and ragged data -------------------------------------------------------------------------------


@pytest.mark.parametrize("in_lazy", [False, True], ids=["eager", "lazy"])
def test_bad_indexing_is_a_graph_error(in_lazy):
    a = np.zeros((4, 6), np.float32)
    with (dvmlang.lazy(background=False) if in_lazy else _nothing()):
        t = dvmlang.tensor(a)
        with pytest.raises(dvmlang.GraphError, match=r"index 10 .*shape \(4, 6\)"):
            t[10]
        with pytest.raises(dvmlang.GraphError, match=r"shape \(7,\).*t\[0\] of shape \(6,\)|\(7,\).*\(6,\)"):
            t[0] = np.ones(7)
        with pytest.raises(dvmlang.GraphError, match="index"):
            t["a"]
    assert not a.any()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_ragged_data_is_a_graph_error():
    with pytest.raises(dvmlang.GraphError, match="ragged|same length"):
        dvmlang.tensor([[1, 2], [3]])
    with dvmlang.lazy(background=False):
        with pytest.raises(dvmlang.GraphError, match="ragged|same length"):
            dvmlang.tensor([[1, 2], [3]])


# ---- generated kernel sources do not pile up in linecache ---------------------------------------------------


def _fused_sources() -> int:
    return sum(1 for k in linecache.cache if isinstance(k, str) and k.startswith("<dvmlang fused"))


def test_lazy_programs_evicted_from_their_cache_leave_linecache(lazy_runtime, monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", "text")  # the text path registers each kernel's source with linecache
    lazy_runtime.programs.capacity = 2
    a = np.ones((2, 3), np.float32)
    with dvmlang.lazy(background=False):
        np.asarray(dvmlang.tensor(a) * 0.5)
    gc.collect()
    before = _fused_sources()
    for k in range(8):  # a new program each time
        with dvmlang.lazy(background=False):
            np.asarray(dvmlang.tensor(a) * (k + 1.5) + float(k))
    gc.collect()
    assert _fused_sources() <= before + 2


def test_a_dropped_graph_function_leaves_linecache(monkeypatch):
    monkeypatch.setenv("DVMLANG_FUSER", "text")
    a = np.ones((2, 3), np.float32)
    gc.collect()
    before = _fused_sources()
    f = dvmlang.graph(lambda x: ops.exp(x) + 3.25)
    f(a)
    assert _fused_sources() == before + 1
    del f
    gc.collect()
    assert _fused_sources() == before


def test_composed_kernels_leave_no_source_behind():
    """The compose path writes no source text anywhere: nothing reaches linecache."""
    a = np.ones((2, 3), np.float32)
    before = _fused_sources()
    f = dvmlang.graph(lambda x: ops.exp(x) + 3.25)
    np.testing.assert_allclose(f(a), np.exp(a) + 3.25, rtol=1e-6)
    with dvmlang.lazy(background=False):
        np.asarray(dvmlang.tensor(a) * 2.5)
    assert _fused_sources() == before


@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (1, 5), (4, 7)])
def test_cumsum_over_a_length_one_axis_and_what_uses_it(shape):
    """A cumsum over columns of one element was emitted before the column loop (as column-independent work),
    where the column mask is not defined: the kernel failed to build ('cmask' is not defined), and a node using
    the cumsum read it before it existed."""
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    np.testing.assert_array_equal(ops.cumsum(dvmlang.tensor(x), axis=-1).numpy(), np.cumsum(x, axis=-1))
    g = dvmlang.graph(lambda a: ops.cumsum(a, axis=-1) * 2.0 + ops.sum(a, axis=-1, keepdims=True))
    np.testing.assert_array_equal(g(x), np.cumsum(x, axis=-1) * 2.0 + x.sum(-1, keepdims=True))


# ---- constants by their bits ---------------------------------------------------------------------------------
# -0.0 == 0.0 and NaN != NaN: a cache keyed by a constant's value (a capture, a kernel instance) served x * 0.0
# with the instance encoded for x * -0.0. Calls alternate, so each cache (the generic path's, the instance
# function's, the capture's) is hit with the other value.

_SIGNED = (-0.0, 0.0, -0.0, 0.0, float("nan"), -0.0, 0.0, float("nan"), 0.0, -0.0)


def _expected(x, c):
    return x * np.float32(c)


def test_a_graph_number_argument_is_kept_by_its_bits():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    g = dvmlang.graph(lambda a, c: a * c)
    for c in _SIGNED:
        np.testing.assert_array_equal(np.signbit(g(x, c)), np.signbit(_expected(x, c)))
        np.testing.assert_array_equal(np.isnan(g(x, c)), np.isnan(_expected(x, c)))
    t = dvmlang.graph(lambda a, c: a * c[0] + c[1])
    for c in ((1.0, -0.0), (0.0, -0.0), (-0.0, -0.0), (0.0, -0.0), (-0.0, -0.0)):
        want = x * np.float32(c[0]) + np.float32(c[1])
        np.testing.assert_array_equal(np.signbit(t(x, c)), np.signbit(want))


def test_a_lazy_constant_is_kept_by_its_bits():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for c in _SIGNED:
        with dvmlang.lazy():
            y = (dvmlang.tensor(x) * c).numpy()
        want = _expected(x, c)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(want))
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
