"""Plans by structure (dvmlang/fuser/structure.py): a capture equal to one planned before takes its canonical
graph and plan; any difference that could change the plan, a result or a message is a new plan."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.ops as ops
from dvmlang.fuser import build as fbuild
from dvmlang.fuser.graph import GraphError


def _softmax(x):
    return ops.softmax(x * 2.0, axis=-1) + 1.0


def _program(g):
    (prog,) = g._captured.values()
    return prog


def test_a_second_graph_of_one_function_takes_the_first_ones_plan_and_builds():
    fbuild.forget()
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)
    a = dvmlang.graph(_softmax)
    ra = a(x)
    b = dvmlang.graph(_softmax)
    rb = b(x)
    pa, pb = _program(a), _program(b)
    assert pb.plan is pa.plan and pb.graph is pa.graph
    assert b.stats.builds == 0 and a.stats.builds > 0
    e = np.exp(2 * x - (2 * x).max(-1, keepdims=True))
    np.testing.assert_allclose(ra, e / e.sum(-1, keepdims=True) + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rb, ra)
    y = np.random.default_rng(1).standard_normal((3, 77)).astype(np.float32)  # another shape, both programs
    np.testing.assert_array_equal(b(y), a(y))


def _graphs(c):
    """Two programs of one source line each, whatever ``c`` is: only the number tells them apart."""
    return (dvmlang.graph(lambda v: ops.maximum(v * c, v) / (v * v + 1)), dvmlang.graph(lambda v: 1.0 / (v * c)))


@pytest.mark.parametrize("c1,c2", [(2.0, 3.0), (0.0, -0.0), (1, 1.0), (True, 1), (2, 3)])
def test_functions_that_differ_in_a_number_are_planned_apart(c1, c2):
    """The number's value, type and sign of zero are part of the structure: each program gets numpy's values (the
    reciprocal of a signed zero is an infinity of its sign)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    ones = np.ones((2, 2), np.float32)
    (f1, g1), (f2, g2) = _graphs(c1), _graphs(c2)
    r1, r2, q1, q2 = f1(x), f2(x), g1(ones), g2(ones)
    assert _program(f1).plan is not _program(f2).plan and _program(g1).plan is not _program(g2).plan
    with np.errstate(divide="ignore"):
        for c, r, q in ((c1, r1, q1), (c2, r2, q2)):
            np.testing.assert_allclose(r, np.maximum(x * np.float32(c), x) / (x * x + 1), rtol=1e-6)
            want = np.float32(1.0) / (ones * np.float32(c))
            np.testing.assert_array_equal(q, want)
            np.testing.assert_array_equal(np.signbit(q), np.signbit(want))


def test_a_deduced_equality_is_part_of_the_structure():
    """``x + y`` over (n, m) + (n, m) deduces the sizes equal; the same operations over (n, m) + (1, m) do not: the
    second capture must check its own sizes, not take the first one's guards."""

    def f(x, y):
        return x * y + x

    a, b = dvmlang.graph(f), dvmlang.graph(f)
    x = np.ones((4, 8), np.float32)
    a(x, x * 3)
    np.testing.assert_array_equal(b(x, np.full((1, 8), 2, np.float32)), x * 3)
    with pytest.raises(GraphError):
        b(x, np.ones((4, 9), np.float32))


def test_a_different_source_line_is_a_different_plan():
    def f(v):
        return ops.exp(v) * 2.0

    def g(v):
        return ops.exp(v) * 2.0

    x = np.ones((2, 3), np.float32)
    a, b = dvmlang.graph(f), dvmlang.graph(g)
    np.testing.assert_allclose(a(x), b(x))
    assert _program(a).plan is not _program(b).plan  # (its kernels' lines point at its own code)


def test_a_graph_that_closes_over_arrays_reads_its_own():
    def make(w):
        return dvmlang.graph(lambda v: v * w + 1.0)

    x = np.ones((2, 5), np.float32)
    w1, w2 = np.full((2, 5), 2, np.float32), np.full((2, 5), 7, np.float32)
    np.testing.assert_array_equal(make(w1)(x), x * 2 + 1)
    np.testing.assert_array_equal(make(w2)(x), x * 7 + 1)


@dvmlang.kernel
def _times3(x, n, out, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out + offs, dl.load(x + offs, mask=m) * 3.0, mask=m)


@dvmlang.kernel
def _times5(x, n, out, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out + offs, dl.load(x + offs, mask=m) * 5.0, mask=m)


def test_a_user_kernel_is_keyed_by_itself():
    def make(k):  # (one source line for both: only the kernel differs)
        return dvmlang.graph(lambda v: ops.custom(k, (1,), [((32,), np.float32)], ops.exp(v), 32, BLOCK=32) + 1.0)

    x = np.zeros(32, np.float32)
    np.testing.assert_array_equal(make(_times3)(x), np.full(32, 4, np.float32))
    np.testing.assert_array_equal(make(_times5)(x), np.full(32, 6, np.float32))
    np.testing.assert_array_equal(make(_times3)(x), np.full(32, 4, np.float32))


def test_forget_drops_the_plans():
    x = np.ones((3, 3), np.float32)
    a = dvmlang.graph(_softmax)
    a(x)
    fbuild.forget()
    b = dvmlang.graph(_softmax)
    b(x)
    assert _program(b).plan is not _program(a).plan
