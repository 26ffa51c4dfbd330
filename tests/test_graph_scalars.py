"""Float arguments of a ``@dvmlang.graph`` function are runtime scalars (dvmlang/fuser/graph.py ``ScalarArg``): a new
value is neither a capture nor a build, the result is what the number as a constant gives, and a function that
uses the float as a Python number is captured with its floats as constants (keyed by value), never wrong."""

import math

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser.graph import GraphError


def _x(shape=(6, 40), dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_new_float_is_neither_a_capture_nor_a_build():
    g = dvmlang.graph(lambda x, t: ops.softmax(x / t, axis=-1))
    x = _x()
    for t in (1.0, 0.5, 2.0, 0.7, 1.0, 3.25):
        np.testing.assert_allclose(g(x, t), _softmax(x / np.float32(t)), rtol=1e-5, atol=1e-6)
    assert g.stats.captures == 1 and g.stats.builds == 1
    assert g.stats.encodes == 5  # (one instance per value: the value is an immediate of the launch)


def test_the_value_gives_the_bits_of_the_number_as_a_constant():
    """Each value against a function that has the same number written in (a capture constant)."""
    x16 = _x(dtype=np.float16)
    xi = np.arange(24, dtype=np.int32).reshape(4, 6)
    run = dvmlang.graph(lambda x, a: x * a + ops.exp(x) * a)
    for a in (0.1, -3.5, 1e-3, 65504.0, -0.0):
        fixed = dvmlang.graph(lambda x: x * a + ops.exp(x) * a)
        for x in (_x(), x16, xi):
            got, want = run(x, a), fixed(x)
            assert got.dtype == want.dtype  # (a float adopts a float tensor's dtype, and is float32 with ints)
            assert got.tobytes() == want.tobytes()  # (bit for bit: -0.0 too)
    assert run.stats.builds == 3  # one per input dtype, none per value
    nan = run(_x(), float("nan"))
    assert np.isnan(nan).all()


def test_floats_in_keywords_defaults_and_several_uses():
    def f(x, lo, hi=1.0):
        return ops.minimum(ops.maximum(x, lo), hi) * hi + ops.full((1,), lo)

    g = dvmlang.graph(f)
    x = _x()
    for lo, hi in ((-0.5, 0.5), (-1.0, None), (0.25, 2.0)):
        got = g(x, lo) if hi is None else g(x, lo=lo, hi=hi)
        h = 1.0 if hi is None else hi
        want = np.minimum(np.maximum(x, np.float32(lo)), np.float32(h)) * np.float32(h) + np.float32(lo)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert g.stats.captures == 1


def test_a_float_used_as_a_python_number_is_a_constant_of_its_capture():
    """``math``, comparisons and arithmetic on the float need its value: each value is a capture of its own, and
    each result is right."""
    def scaled(x, a):
        return x * math.sqrt(a)

    def branch(x, a):
        return ops.exp(x) if a > 0 else x * a

    def mixed(x, a):
        return x * a + (a * 2.0)  # (the first use is a runtime scalar, the second needs the value)

    x = _x()
    for fn, ref in ((scaled, lambda x, a: x * np.float32(math.sqrt(a))),
                    (branch, lambda x, a: np.exp(x) if a > 0 else x * np.float32(a)),
                    (mixed, lambda x, a: x * np.float32(a) + np.float32(a * 2.0))):
        g = dvmlang.graph(fn)
        values = (2.0, 3.0, 2.0, 0.5) if fn is scaled else (1.5, -2.0, 1.5, 4.0)
        for a in values:
            np.testing.assert_allclose(g(x, a), ref(x, a), rtol=1e-5, atol=1e-6)
        assert g.stats.captures == 3  # (one per distinct value)


def test_floats_inside_containers_and_ints_stay_constants():
    g = dvmlang.graph(lambda x, p, n: ops.reshape(x * p[0] + p[1], (n, -1)))
    x = _x((4, 6))
    for p, n in (((2.0, 1.0), 2), ((3.0, -1.0), 2), ((2.0, 1.0), 4)):
        np.testing.assert_allclose(g(x, p, n), (x * np.float32(p[0]) + np.float32(p[1])).reshape(n, -1), rtol=1e-6)
    assert g.stats.captures == 3


def test_errors_are_the_functions_own():
    g = dvmlang.graph(lambda x, y, a: x * a + y)
    with pytest.raises(GraphError, match="must equal"):
        g(_x((4, 6)), _x((4, 7)), 0.5)
    bad = dvmlang.graph(lambda x, a: ops.softmax(x * a, axis=5))  # (raised while capturing, with floats as values too)
    with pytest.raises(GraphError, match="axis"):
        bad(_x(), 0.5)
    with pytest.raises(GraphError, match="must return graph values"):
        dvmlang.graph(lambda x, a: a)(_x(), 0.5)


def test_encode_shows_the_value_and_builds_nothing():
    g = dvmlang.graph(lambda x, a: x * a)
    x = _x()
    one, two = g.encode(x, 1.5), g.encode(x, -1.5)
    assert g.stats.builds == 1 and g.stats.captures == 1
    assert [b.code.tobytes() for b in one] != [b.code.tobytes() for b in two]
    np.testing.assert_array_equal(g(x, -1.5), x * np.float32(-1.5))


def test_a_float_whose_constant_the_rewrites_drop_binds_nothing():
    def f(x, a):
        dead = x * a  # noqa: F841 - nothing depends on it
        return x + 1.0

    g = dvmlang.graph(f)
    x = _x()
    for a in (2.0, 3.0):
        np.testing.assert_array_equal(g(x, a), x + np.float32(1.0))


def test_calls_straight_to_the_program_take_the_floats_and_stop_when_they_become_constants():
    """After two calls, calls of arrays and floats go straight to the program's instance functions with the
    floats' values; once another capture needs a float's value (here: a 3-D input), floats are constants for
    every call, and the 2-D calls are right for new values too."""
    def f(x, a):
        return x * (math.sqrt(a) if x.ndim == 3 else a)

    g = dvmlang.graph(f)
    x, x3 = _x(), _x((2, 3, 4))
    for a in (2.0, 3.0, 5.0, 7.0):
        np.testing.assert_array_equal(g(x, a), x * np.float32(a))
    assert g.stats.captures == 1 and g._direct
    np.testing.assert_allclose(g(x3, 4.0), x3 * 2, rtol=1e-6)
    assert not g._direct
    for a in (2.0, 11.0, 13.0):
        np.testing.assert_array_equal(g(x, a), x * np.float32(a))
    assert g.stats.captures == 5  # (the generic one, the 3-D one, then one per new value)


def test_a_float_from_a_trailing_default_is_taken_on_the_straight_path(monkeypatch):
    """A function whose float parameter has a default (``eps=1e-5``) and is called without it goes straight to
    its program's instance functions too, with the default's value; a call passing another value gets that
    value, and the default is used again after it."""
    from dvmlang.fuser import api

    def f(x, w, eps=1e-5, scale=2.0):
        return x * ops.rsqrt(ops.mean(x * x, axis=-1, keepdims=True) + eps) * w * scale

    def want(x, w, eps=1e-5, scale=2.0):
        ms = (x * x).mean(-1, keepdims=True)
        return x / np.sqrt(ms + np.float32(eps)) * w * np.float32(scale)

    g = dvmlang.graph(f)
    direct = []
    call_direct = api.GraphFunction._call_direct

    def counting(self, args, device):
        r = call_direct(self, args, device)
        direct.append(r is not None)
        return r

    monkeypatch.setattr(api.GraphFunction, "_call_direct", counting)
    w = _x((40,), seed=1)
    for k, eps in enumerate((None, None, 0.5, None, None, 1e-5, 3.0)):
        x = _x(seed=k)
        got = g(x, w) if eps is None else g(x, w, eps)
        np.testing.assert_allclose(got, want(x, w) if eps is None else want(x, w, eps), rtol=2e-5, atol=1e-6)
    assert g.stats.captures == 1
    assert direct[-4:] == [True] * 4, direct  # (after the calls that wrote the instance functions)
