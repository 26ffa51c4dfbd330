"""Work merged before and during fusion (docs/fusion.md, Groups): sibling vector groups over one iteration space that
read a tensor in common, neither depending on the other, are one kernel; an operation equal to an earlier one is
computed once. Checked against numpy, with the cases that must stay apart."""

import numpy as np

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser import tiling


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _run(f, args, static=None):
    g = dvmlang.graph(f, static=static) if static else dvmlang.graph(f)
    out = g(*args)
    return g, out, g.explain(*args)


def test_reductions_and_maps_of_one_input_are_one_kernel_that_reads_it_once(rng):
    def f(x, y):
        return (ops.log_softmax(x, -1), ops.softmax(ops.masked_fill(x, x > 0.5, -1e4), -1), x.max(-1), x.var(-1),
                ops.exp(y))

    x = rng.standard_normal((6, 40)).astype(np.float32)
    y = rng.standard_normal((6, 40)).astype(np.float32)
    g, (ls, sm, mx, var, ey), report = _run(f, (x, y), static={"x": (1,), "y": (1,)})
    np.testing.assert_allclose(ls, _log_softmax(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sm, _softmax(np.where(x > 0.5, -1e4, x)), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(mx, x.max(-1))
    np.testing.assert_allclose(var, x.var(-1), rtol=1e-5)
    np.testing.assert_allclose(ey, np.exp(y), rtol=1e-6)
    reads_x = [grp for grp in report.groups if any(i.op == "input" and i.name == "x" for i in grp.inputs)]
    assert len(reads_x) == 1, [grp.name for grp in report.groups]  # y's exp shares no read: a kernel of its own
    assert len(report.groups) == 2
    assert g.last_launch.bytes_read == x.nbytes + y.nbytes


def test_maps_of_one_input_merge_at_symbolic_sizes_and_rows_stay_apart_behind_their_guards(rng):
    """Elementwise siblings need no whole row: they merge at any size. Row-mode siblings of a symbolic row stay
    apart: merged, the row would be guarded at a smaller size (the split plan taken sooner)."""
    x = rng.standard_normal((5, 33)).astype(np.float32)
    _, (a, b), report = _run(lambda x: (ops.exp(x), ops.sigmoid(x) * 2.0), (x,))
    np.testing.assert_allclose(a, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(b, 2 / (1 + np.exp(-x)), rtol=1e-6)
    assert len(report.groups) == 1
    _, (s, n), report = _run(_two_rows, (x,))
    np.testing.assert_allclose(s, _softmax(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(n, x / x.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert len(report.groups) == 2 and all(grp.guard is not None for grp in report.groups)


def _two_rows(x):
    """Two row normalisations of one input that share no operation (nothing for the equal-operation merge)."""
    return ops.softmax(x, -1), x / x.sum(-1, keepdims=True)


def test_static_row_siblings_merge_only_while_the_merged_row_fits(rng):
    profile = dvmlang.npu.get_profile(None)
    modes = []
    for cols in (256, 4096):
        x = rng.standard_normal((3, cols)).astype(np.float32)
        _, (s, n), report = _run(_two_rows, (x,), static={"x": (1,)})
        np.testing.assert_allclose(s, _softmax(x), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(n, x / x.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)
        assert all(tiling.row_fits(grp, cols, profile) for grp in report.groups if grp.mode == "row")
        modes.append([grp.mode for grp in report.groups])
    assert modes == [["row"], ["row", "row"]]  # a row of 4096 fits either group's buffers, not both groups' at once


def test_siblings_one_of_which_depends_on_the_other_through_a_kernel_stay_apart(rng):
    """exp(x) feeds a matmul (one column: its epilogue cannot take the broadcast) whose result the second sibling
    reads with x: merged, the kernel would read what it has not written yet (a cycle between kernels)."""
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 1)).astype(np.float32)

    def f(x, w):
        e = ops.exp(x)
        return e, x * ops.matmul(e, w)

    _, (e, z), report = _run(f, (x, w))
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(z, x * (np.exp(x) @ w), rtol=1e-4, atol=1e-4)
    assert len(report.groups) == 3


def test_an_operation_equal_to_an_earlier_one_is_computed_once(rng):
    """A layer applied twice to one input (two equal matmuls, each with its bias), and equal chains on top: one
    matmul kernel, one of each chain's operations, numpy's results."""
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 12)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)

    def f(x, w, b):
        return ops.gelu(ops.matmul(x, w) + b) + ops.sigmoid(ops.matmul(x, w) + b) * ops.exp(x.sum(-1, keepdims=True))

    g, out, report = _run(f, (x, w, b))
    h = (x.astype(np.float64) @ w + b)
    import math
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    np.testing.assert_allclose(out, gelu + 1 / (1 + np.exp(-h)) * np.exp(x.sum(-1, keepdims=True)), rtol=1e-4)
    ops_in = [n.op for grp in report.groups for n in grp.nodes]
    assert ops_in.count("matmul") == 1, [grp.name for grp in report.groups]


def test_values_returned_twice_stay_two_arrays_and_numbers_stay_apart(rng):
    """Two equal values both returned are two arrays (writing one leaves the other); in a lazy session, equal
    numbers are runtime scalars of a program that later calls reuse with other numbers: never merged."""
    x = rng.standard_normal((4, 9)).astype(np.float32)
    _, (a, b), _ = _run(lambda x: (ops.exp(x), ops.exp(x)), (x,))
    a[...] = 0
    np.testing.assert_allclose(b, np.exp(x), rtol=1e-6)
    for p, q in ((0.5, 0.5), (0.5, 0.75), (2.0, -1.0)):
        with dvmlang.lazy(background=False):
            t = dvmlang.tensor(x)
            got = (t * p + t * q).numpy()
        np.testing.assert_allclose(got, x * p + x * q, rtol=1e-6)


def test_a_chain_its_readers_broadcast_is_computed_in_their_kernel(rng):
    """A per-channel chain read over a batch (batch norm in inference), and a mask built from aranges over (L, L)
    read over heads: computed again by the kernel that reads them, one kernel each, numpy's results."""
    x = rng.standard_normal((6, 16)).astype(np.float32)
    rm, w, b = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
    rv = rng.random(16).astype(np.float32) + 0.5

    def bn(x, rm, rv, w, b):
        return (x - rm) * ops.rsqrt(rv + 1e-5) * w + b

    _, y, report = _run(bn, (x, rm, rv, w, b))
    np.testing.assert_allclose(y, (x - rm) / np.sqrt(rv + 1e-5) * w + b, rtol=1e-5, atol=1e-6)
    assert len(report.groups) == 1, [grp.name for grp in report.groups]

    s = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    m = (rng.random((5, 5)) > 0.3).astype(np.float32)
    m[:, 0] = 1

    def masked(s, m):
        return ops.softmax(s + ops.where(m > 0.5, 0.0, -1e9), -1)

    _, p, report = _run(masked, (s, m))
    np.testing.assert_allclose(p, _softmax(s + np.where(m > 0.5, 0, -1e9).astype(np.float32)), rtol=1e-5, atol=1e-7)
    assert len(report.groups) == 1, [grp.name for grp in report.groups]


def test_a_broadcast_chain_stays_a_kernel_when_returned_read_otherwise_or_too_long(rng):
    x = rng.standard_normal((6, 16)).astype(np.float32)
    v = rng.random(16).astype(np.float32) + 0.5
    w = rng.standard_normal((16, 4)).astype(np.float32)
    _, (y, s), report = _run(lambda x, v: (x * ops.rsqrt(v + 1.0), ops.rsqrt(v + 1.0)), (x, v))
    np.testing.assert_allclose(s, 1 / np.sqrt(v + 1), rtol=1e-6)
    np.testing.assert_allclose(y, x / np.sqrt(v + 1), rtol=1e-6)
    assert len(report.groups) == 2  # returned: stored by a kernel of its own, which the product reads
    _, (y, m), report = _run(lambda x, v, w: (x * ops.exp(v), ops.matmul(ops.reshape(ops.exp(v), (1, 16)), w)),
                             (x, v, w), static={"x": (0, 1), "v": (0,), "w": (0, 1)})
    np.testing.assert_allclose(y, x * np.exp(v), rtol=1e-6)
    np.testing.assert_allclose(m, np.exp(v)[None] @ w, rtol=1e-5)
    assert any(n.op == "exp" and grp.kind == "vector" and n.shape == (16,) for grp in report.groups
               for n in grp.nodes)  # (read by the matmul too: computed once, at its own shape)

    def long(x, v):
        c = v
        for k in range(12):
            c = c * 0.5 + float(k)
        return x + c

    _, y, report = _run(long, (x, v))
    c = v.astype(np.float32)
    for k in range(12):
        c = (c * np.float32(0.5) + np.float32(k)).astype(np.float32)
    np.testing.assert_allclose(y, x + c, rtol=1e-5)
    assert len(report.groups) == 2  # 24 operations: more than a reader computes again


def test_index_arithmetic_read_through_a_view_its_reader_broadcasts_joins_the_reader(rng):
    """``cast(arange(n)) * 0.5`` unsqueezed to (1, n) and subtracted from (m, n): the view moves under the
    operations (read through views alone, they are no kernel of their own) and the reader computes them over its
    space; a value also read directly keeps its kernel."""
    y = rng.standard_normal((6, 5)).astype(np.float32)

    def f(y):
        c = ops.cast(ops.arange(y.shape[1]), "float32") * 0.5
        return y - ops.unsqueeze(c, 0)

    _, out, report = _run(f, (y,))
    np.testing.assert_allclose(out, y - np.arange(5)[None] * 0.5, rtol=1e-6)
    assert [grp.name.split("_", 1)[1] for grp in report.groups] == ["cast_mul_sub"]
    _, (out, c), report = _run(lambda y: (y - ops.unsqueeze(ops.exp(y[0]), 0), ops.exp(y[0])), (y,))
    np.testing.assert_allclose(out, y - np.exp(y[:1]), rtol=1e-6)
    assert len(report.groups) == 2  # exp(y[0]) is returned: computed once, read through the view


def test_a_chain_broadcast_to_a_gathers_index_shape_joins_the_gather(rng):
    """``index_select`` as torch lowers it: the ids cast and broadcast to the gather's shape; the cast is computed
    at that shape in the gather's kernel (one kernel, numpy's values)."""
    t = rng.standard_normal((2, 7, 16)).astype(np.float32)
    i = np.array([3, 0, 5, 3], np.int64)

    def f(t, i):
        idx = ops.broadcast_to(ops.cast(ops.reshape(i, (1, 4, 1)), "int32"), (2, 4, 16))
        return ops.gather(t, 1, idx) * 2.0

    _, out, report = _run(f, (t, i), static={"t": (0, 1, 2), "i": (0,)})
    np.testing.assert_array_equal(out, t[:, i] * 2)
    assert len(report.groups) == 1, [grp.name for grp in report.groups]


def test_a_scale_on_a_transposed_operand_of_a_matmul_joins_its_producer(rng):
    """``q @ (exp(k).T * s)``, the scale applied to a permute of a computed value and read only by the matmul: the
    scale is computed with exp(k) in its kernel (the matmul reads it through the permute), one kernel fewer, and
    numpy's values; with another reader the operation stays where it was."""
    q = rng.standard_normal((2, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 6, 8)).astype(np.float32) * 0.3

    def f(q, k):
        return ops.matmul(q, ops.permute(ops.exp(k), (0, 2, 1)) * 0.25)

    _, out, report = _run(f, (q, k))
    np.testing.assert_allclose(out, q @ (np.exp(k).transpose(0, 2, 1) * 0.25), rtol=1e-4, atol=1e-5)
    assert [grp.kind for grp in report.groups] == ["vector", "matmul"], [grp.name for grp in report.groups]

    def g(q, k):
        kt = ops.permute(ops.exp(k), (0, 2, 1)) * 0.25
        return ops.matmul(q, kt), kt

    _, (out, kt), report = _run(g, (q, k))
    np.testing.assert_allclose(kt, np.exp(k).transpose(0, 2, 1) * 0.25, rtol=1e-6)
    np.testing.assert_allclose(out, q @ kt, rtol=1e-4, atol=1e-5)


def test_a_scale_on_a_head_split_of_a_copy_joins_the_copy(rng):
    """Attention's q split into heads and scaled: ``reshape(copy of a strided slice) -> permute -> * s``, read only
    by the matmul. The slice of a computed value cannot be reshaped in place, so it is copied; the scale moves under
    the reshape and the permute into the copy's kernel (one kernel fewer), numpy's values."""
    x = rng.standard_normal((5, 2, 96)).astype(np.float32)
    k = rng.standard_normal((8, 8, 5)).astype(np.float32)

    def f(x, k):
        y = ops.exp(x)  # (5, 2, 96): q is the first 32 of the last dim, a strided slice; (2, 32) -> (8, 8) merges
        q = ops.permute(ops.reshape(y[:, :, :32], (5, 8, 8)), (1, 0, 2)) * 0.25
        return ops.matmul(q, k)

    _, out, report = _run(f, (x, k), static={"x": (0, 1, 2), "k": (0, 1, 2)})
    want = (np.exp(x)[:, :, :32].reshape(5, 8, 8).transpose(1, 0, 2) * 0.25) @ k
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    assert not any(grp.kind == "vector" and [n.op for n in grp.nodes] == ["mul"] for grp in report.groups), \
        [grp.name for grp in report.groups]


def test_a_bias_after_a_matmul_and_a_reshape_is_its_epilogue_unless_a_vector_operation_reads_it(rng):
    """``linear`` on a 3-D input as torch decomposes it: flatten, matmul, unflatten, ``+ bias``. The bias spans only
    the last dim, which the reshape keeps: it is the matmul's epilogue (one kernel). Read by a softmax, the add
    stays the softmax's first operation (it is then no kernel of its own either); a bias over two dims the
    reshape does not keep stays where it is."""
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    w = rng.standard_normal((16, 12)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)

    def linear(x, w, b):
        return ops.reshape(ops.matmul(ops.reshape(x, (10, 16)), w), (2, 5, 12)) + b

    _, out, report = _run(linear, (x, w, b), static={"x": (0, 1, 2), "w": (0, 1), "b": (0,)})
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-4, atol=1e-5)
    assert [grp.name for grp in report.groups] == ["g0_matmul_add"]

    _, out, report = _run(lambda x, w, b: ops.softmax(linear(x, w, b), -1), (x, w, b),
                          static={"x": (0, 1, 2), "w": (0, 1), "b": (0,)})
    np.testing.assert_allclose(out, _softmax(x @ w + b), rtol=1e-4, atol=1e-6)
    assert [grp.kind for grp in report.groups] == ["matmul", "vector"]
    assert any(n.op == "add" for n in report.groups[1].nodes)

    b2 = rng.standard_normal((5, 12)).astype(np.float32)
    _, out, report = _run(linear, (x, w, b2), static={"x": (0, 1, 2), "w": (0, 1), "b": (0, 1)})
    np.testing.assert_allclose(out, x @ w + b2, rtol=1e-4, atol=1e-5)
    assert len(report.groups) == 2


def test_siblings_that_load_one_value_through_reshapes_merge_and_slices_of_it_stay_apart(rng):
    """Two row reductions of one computed value through two different chains of reshapes: they load every element
    of it either way, one kernel. Two copies of different slices of it load different elements: apart (side by
    side)."""
    x = rng.standard_normal((6, 8, 4)).astype(np.float32)

    def f(x):
        y = ops.exp(x)
        return ops.softmax(ops.reshape(y, (6, 32)), -1), ops.reshape(ops.reshape(y, (48, 4)), (6, 32)).sum(-1)

    _, (s, t), report = _run(f, (x,), static={"x": (0, 1, 2)})
    e = np.exp(x).reshape(6, 32)
    np.testing.assert_allclose(s, _softmax(e), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t, e.sum(-1), rtol=1e-5)
    assert len(report.groups) == 2 and report.groups[1].mode == "row", [grp.name for grp in report.groups]

    def two_slices(x):
        y = ops.exp(x)
        return ops.reshape(y[:, :4, :], (6, 16)) * 2.0, ops.reshape(y[:, 4:, :], (6, 16)) * 3.0

    _, (a, c), report = _run(two_slices, (x,), static={"x": (0, 1, 2)})
    np.testing.assert_allclose(a, np.exp(x)[:, :4].reshape(6, 16) * 2, rtol=1e-6)
    np.testing.assert_allclose(c, np.exp(x)[:, 4:].reshape(6, 16) * 3, rtol=1e-6)
    copies = [grp for grp in report.groups if any(n.op == "broadcast_to" for n in grp.nodes)]
    assert len(copies) == 2, [grp.name for grp in report.groups]


def test_heads_split_and_merged_back_are_the_permuted_value_itself(rng):
    """``(H, L, D) -> (B, H/B, L, D) -> (H, L, D)`` over a permuted computed value, as torch's batched matmul
    decomposition reshapes attention's v: one reshape to the value's own shape, so the matmul reads the permuted
    value through strides (no copy kernel); numpy's values. A reshape that is returned stays."""
    x = rng.standard_normal((5, 8, 8)).astype(np.float32)
    a = rng.standard_normal((8, 5, 5)).astype(np.float32)

    def f(x, a):
        v = ops.permute(ops.exp(x), (1, 0, 2))  # (8, 5, 8)
        return ops.matmul(a, ops.reshape(ops.reshape(v, (2, 4, 5, 8)), (8, 5, 8)))

    _, out, report = _run(f, (x, a), static={"x": (0, 1, 2), "a": (0, 1, 2)})
    np.testing.assert_allclose(out, a @ np.exp(x).transpose(1, 0, 2), rtol=1e-4, atol=1e-5)
    assert [grp.name for grp in report.groups] == ["g0_exp", "g1_matmul"], [grp.name for grp in report.groups]

    def g(x):
        return ops.reshape(ops.reshape(ops.exp(x), (40, 8)), (5, 8, 8))

    _, out, report = _run(g, (x,), static={"x": (0, 1, 2)})
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_a_cats_constant_parts_are_computed_in_its_kernel(rng):
    """``F.pad`` and a convolution's padding are a cat of numbers broadcast and the tensor: the numbers are
    computed where their parts lie, in the cat's kernel (one kernel, where each part was a kernel storing it),
    along every axis, at static and symbolic sizes, first, middle or last; numpy's values. A number broadcast that
    is also returned is stored as before."""
    from dvmlang.fuser.graph_ops import filled

    def full(v, shape, d="float32"):
        return ops.broadcast_to(ops.full((), v, d), shape)

    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    for ax in (0, 1, 2):
        lo, hi = list(x.shape), list(x.shape)
        lo[ax], hi[ax] = 2, 3

        def f(x, ax=ax, lo=tuple(lo), hi=tuple(hi)):
            return ops.exp(ops.cat([full(-1.5, lo), x, full(2.0, hi)], ax)) * 2.0

        want = np.exp(np.concatenate([np.full(lo, -1.5, np.float32), x, np.full(hi, 2.0, np.float32)], ax)) * 2
        for static in ({"x": (0, 1, 2)}, None):
            _, out, report = _run(f, (x,), static=static)
            np.testing.assert_allclose(out, want, rtol=1e-6)
            assert len(report.groups) == 1, [grp.name for grp in report.groups]
            (cat,) = [n for n in report.groups[0].nodes if n.op == "cat"]
            assert filled(cat.inputs[0]) and filled(cat.inputs[2])
    a = rng.integers(-5, 5, (4, 6)).astype(np.int32)
    _, out, report = _run(lambda a: ops.cat([a, full(7, (4, 3), "int32"), a], 1), (a,))
    np.testing.assert_array_equal(out, np.concatenate([a, np.full((4, 3), 7, np.int32), a], 1))
    assert len(report.groups) == 1

    def g(x):
        pad = full(0.25, (3, 5, 2))
        return ops.cat([x, pad], 2), pad

    _, (out, pad), report = _run(g, (x,))
    np.testing.assert_array_equal(out, np.concatenate([x, np.full((3, 5, 2), 0.25, np.float32)], 2))
    np.testing.assert_array_equal(pad, np.full((3, 5, 2), 0.25, np.float32))


def test_heads_moved_behind_the_sequence_and_merged_are_stored_in_that_order(rng):
    """Attention's output as torch writes it: ``(B*H, L, D)`` split into ``(B, H, L, D)``, permuted to ``(L, B, H,
    D)`` and merged into ``(L, B*H*D)`` for the output projection. The permute of the split is one permute of the
    matmul's result (``views.permutes_before_splits``), which the matmul's kernel stores in that order: no copy
    kernel, numpy's values. A permute that separates a split dim's parts stays as it was."""
    a = rng.standard_normal((8, 5, 6)).astype(np.float32)
    v = rng.standard_normal((8, 6, 4)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)

    def f(a, v, w):
        o = ops.reshape(ops.matmul(a, v), (2, 4, 5, 4))
        return ops.matmul(ops.reshape(ops.permute(o, (2, 0, 1, 3)), (5, 32)), w)

    static = {"a": (0, 1, 2), "v": (0, 1, 2), "w": (0, 1)}
    _, out, report = _run(f, (a, v, w), static=static)
    want = ((a @ v).reshape(2, 4, 5, 4).transpose(2, 0, 1, 3).reshape(5, 32)) @ w
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert [grp.kind for grp in report.groups] == ["matmul", "matmul"], [grp.name for grp in report.groups]

    def g(a, v):  # (2, 4) split, then 2 and 4 apart: not one permute of (8, 5, 4)
        return ops.exp(ops.permute(ops.reshape(ops.matmul(a, v), (2, 4, 5, 4)), (1, 2, 0, 3)))

    _, out, report = _run(g, (a, v), static={"a": (0, 1, 2), "v": (0, 1, 2)})
    np.testing.assert_allclose(out, np.exp((a @ v).reshape(2, 4, 5, 4).transpose(1, 2, 0, 3)), rtol=1e-4, atol=1e-5)
