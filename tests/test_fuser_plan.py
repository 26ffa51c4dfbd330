"""Fusion decisions and their reasons, guards, stacking, traces, and the new-shape path of ``@dvmlang.graph``."""

import math
import os

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.ops as ops
from dvmlang.fuser import tiling


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def np_block(x, w, b):
    """gelu(layer_norm(x, w, b)) * 2, in float64."""
    y = np_layer_norm(x.astype(np.float64), w, b)
    return 0.5 * y * (1 + np.vectorize(math.erf, otypes=[np.float64])(y / math.sqrt(2))) * 2


def kernels(gf):
    """The kernels of a graph function's (single) capture's fused plan (its split plan's are built ahead too)."""
    (prog,) = [p for p in gf._captured.values() if p is not None]
    return list({id(kt): kt for kt in (prog.kernel(prog.plan, grp) for grp in prog.plan.groups
                                       if grp.kind != "custom")}.values())


def launch_names(gf, *args):
    with dvmlang.trace() as t:
        gf(*args)
    return [launch.name for launch in t.launches], t


# ---- what fuses -------------------------------------------------------------------------------------------


def test_layer_norm_gelu_is_one_row_group_behind_a_guard(rng):
    block = dvmlang.graph(lambda x, w, b: ops.gelu(ops.layer_norm(x, w, b)) * 2.0)
    x, w, b = rng.standard_normal((64, 300)).astype(np.float32), np.ones(300, np.float32), np.zeros(300, np.float32)
    block(x, w, b)
    report = block.explain(x, w, b)
    (grp,) = report.groups
    assert grp.kind == "vector" and grp.mode == "row" and grp.guard is not None
    assert report.launches == 1 and report.rejections == []
    text = str(report)
    assert "[vector, row]" in text and "guard: a whole row of s1 elements must fit UB" in text
    assert "s1 (x.shape[1]) == s2  [operands of mul]" in text  # the deduced equalities, checked at every call
    assert block.last_launch.stages == [1] and block.stats.launches == 1


def test_elementwise_chain_with_two_computed_operands_is_one_group(rng):
    g = dvmlang.graph(lambda a, b: ops.exp(a) * ops.tanh(b) + ops.sigmoid(a - b))
    a, b = rng.standard_normal((2, 9, 33)).astype(np.float32), rng.standard_normal((2, 9, 33)).astype(np.float32)
    np.testing.assert_allclose(g(a, b), np.exp(a) * np.tanh(b) + 1 / (1 + np.exp(b - a)), rtol=1e-5)
    report = g.explain(a, b)
    assert len(report.groups) == 1 and report.groups[0].mode == "tiled" and report.rejections == []


def test_reductions_as_sinks_use_loop_tiling(rng):
    def f(x):
        e = ops.exp(x)
        return ops.sum(e, -1, keepdims=True), ops.max(e * 2.0, -1, keepdims=True)

    g = dvmlang.graph(f)
    x = rng.standard_normal((5, 3000)).astype(np.float32)
    s, m = g(x)
    np.testing.assert_allclose(s, np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(m, (np.exp(x) * 2).max(-1, keepdims=True), rtol=1e-6)
    (grp,) = g.explain(x).groups
    assert grp.mode == "loop"


def test_matmul_epilogue_is_one_mix_group_and_prologues_are_explained(rng):
    g = dvmlang.graph(lambda a, b, c: ops.maximum(ops.exp(a) @ b + c, 0.0))
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((33, 40), (40, 20), (20,)))
    np.testing.assert_allclose(g(a, b, c), np.maximum(np.exp(a) @ b + c, 0), rtol=1e-4, atol=1e-4)
    report = g.explain(a, b, c)
    kinds = [(grp.kind, [n.op for n in grp.nodes]) for grp in report.groups]
    assert kinds == [("vector", ["exp"]), ("matmul", ["matmul", "add", "maximum"])]
    assert report.reasons() == ["elementwise producers of a matmul operand are not fused into the cube kernel (no "
                                "prologue fusion): the operand is stored and the matmul reads it"]


def test_reduction_is_not_fused_into_a_matmul_epilogue(rng):
    g = dvmlang.graph(lambda a, b: ops.sum(a @ b, -1))
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 24)).astype(np.float32)
    np.testing.assert_allclose(g(a, b), (a @ b).sum(-1), rtol=1e-4, atol=1e-4)
    assert "a reduction is not fused into a matmul epilogue" in g.explain(a, b).reasons()[0]


# ---- what must not fuse, and why ----------------------------------------------------------------------------


def test_softmax_over_a_row_too_long_for_ub_takes_the_split_plan(rng):
    g = dvmlang.graph(lambda x: ops.softmax(x))
    short, long = rng.standard_normal((4, 1000)).astype(np.float32), rng.standard_normal((4, 50000)).astype(np.float32)
    np.testing.assert_allclose(g(short), np_softmax(short), rtol=1e-5, atol=1e-7)
    fused = g.explain(short)
    assert [grp.mode for grp in fused.groups] == ["row"] and not fused.plan.split_reductions
    np.testing.assert_allclose(g(long), np_softmax(long), rtol=1e-5, atol=1e-8)
    assert g.stats.fallbacks == 1 and g.stats.captures == 1
    split = g.explain(long)
    assert g.stats.fallbacks == 1 and g._captured[next(iter(g._captured))].fallbacks == 1  # explain runs nothing
    assert split.plan.split_reductions and [grp.mode for grp in split.groups] == ["loop", "loop", "tiled"]
    assert split.reasons() == ["a reduction's result is consumed inside its group; this is the split plan, used "
                               "when a row does not fit UB"] * 2
    assert [r.producer for r in split.rejections] == ["%1 reduce max", "%3 exp"]
    assert "split plan: a guarded row did not fit UB" in str(split)
    assert split.launches == 1  # the split plan is still one stacked launch, in three stages
    # the last stage computes exp(x - max) again rather than reading it back: only per-row values are stored
    assert [n.op for n in split.groups[2].recompute] == ["sub", "exp"]
    assert [o.shape[-1] for grp in split.groups[:2] for o in grp.outputs] == [1, 1]
    assert "recomputes: %2 sub, %3 exp" in str(split)
    assert g.last_launch.bytes_written == long.nbytes + 2 * 4 * 4  # the result, and max and sum per row


def test_static_row_that_cannot_fit_ub_is_split_with_the_footprint_reason(rng):
    g = dvmlang.graph(lambda x, w, b: ops.layer_norm(x, w, b), static={"x": (1,), "w": (0,), "b": (0,)})
    x = rng.standard_normal((3, 8000)).astype(np.float32)
    w, b = rng.standard_normal(8000).astype(np.float32), rng.standard_normal(8000).astype(np.float32)
    np.testing.assert_allclose(g(x, w, b), np_layer_norm(x, w, b), rtol=1e-4, atol=1e-4)
    report = g.explain(x, w, b)
    assert report.plan.fallback is None and not report.plan.split_reductions  # decided at capture: no guard
    assert report.rejections and all("a row of 8000 elements cannot fit UB (footprint" in r for r in report.reasons())
    assert all(grp.mode != "row" for grp in report.groups)
    small = dvmlang.graph(lambda x, w, b: ops.layer_norm(x, w, b), static={"x": (1,), "w": (0,), "b": (0,)})
    xs = x[:, :1000].copy()
    small(xs, w[:1000].copy(), b[:1000].copy())
    assert [grp.mode for grp in small.explain(xs, w[:1000], b[:1000]).groups] == ["row"]


def test_broadcast_dims_that_cannot_be_proven_equal_do_not_fuse(rng):
    # x is (s0, s1) and y is (s0, s2): the sum broadcasts along s2, which nothing ties to s1
    g = dvmlang.graph(lambda x, y: ops.sum(ops.exp(x), -1, keepdims=True) * y)
    x, y = rng.standard_normal((6, 7)).astype(np.float32), rng.standard_normal((6, 7)).astype(np.float32)
    np.testing.assert_allclose(g(x, y), np.exp(x).sum(-1, keepdims=True) * y, rtol=1e-5)
    report = g.explain(x, y)
    assert len(report.groups) == 2
    assert report.reasons() == ["iteration spaces cannot be proven equal: (s0, s3) vs (s0, s1) (unknown means do not "
                                "fuse)"]
    y2 = rng.standard_normal((6, 11)).astype(np.float32)  # and indeed they may differ
    np.testing.assert_allclose(g(x, y2), np.exp(x).sum(-1, keepdims=True) * y2, rtol=1e-5)


def test_values_read_through_views_are_stored_and_explained(rng):
    g = dvmlang.graph(lambda x: ops.exp(ops.transpose(ops.exp(x))) + 1.0)
    x = rng.standard_normal((5, 9)).astype(np.float32)
    np.testing.assert_allclose(g(x), np.exp(np.exp(x).T) + 1, rtol=1e-5)
    assert g.explain(x).reasons() == ["read through a view (%2 permute): views are not computed in a kernel; the "
                                      "producer stores its value and this operation reads it through strides"]


def test_a_group_never_reads_its_own_results_back_through_a_view(rng):
    g = dvmlang.graph(lambda x: ops.exp(x) + ops.transpose(ops.exp(x) * 1.0))
    x = rng.standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(g(x), np.exp(x) + np.exp(x).T, rtol=1e-5)
    own = dvmlang.graph(lambda x: (lambda y: y + ops.transpose(y))(ops.exp(x)))
    np.testing.assert_allclose(own(x), np.exp(x) + np.exp(x).T, rtol=1e-5)
    assert any("cannot read back its own results" in r for r in own.explain(x).reasons())


def test_views_carry_dependencies_so_groups_never_form_a_cycle(rng):
    def f(x):
        y = ops.exp(x)
        z = ops.exp(ops.transpose(y))
        return y + ops.transpose(z)

    x = rng.standard_normal((16, 16)).astype(np.float32)
    g = dvmlang.graph(f)
    np.testing.assert_allclose(g(x), np.exp(x) + np.exp(np.exp(x).T).T, rtol=1e-5)
    assert "fusing would create a cycle between kernels" in g.explain(x).reasons()


def test_each_rejected_pair_is_listed_once(rng):
    g = dvmlang.graph(lambda x: ops.exp(x) + ops.transpose(ops.exp(x)))
    x = rng.standard_normal((8, 8)).astype(np.float32)
    pairs = [(r.producer, r.consumer) for r in g.explain(x).rejections]
    assert len(pairs) == len(set(pairs))


# ---- guards and errors ------------------------------------------------------------------------------------


def test_deduced_equalities_are_checked_at_every_call():
    block = dvmlang.graph(lambda x, w, b: ops.layer_norm(x, w, b))
    x, w = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    block(x, w, w)
    with pytest.raises(dvmlang.GraphError, match=r"`<lambda>`: w.shape\[0\] is 5 but it must equal x.shape\[1\] = 4 "
                                                 r"\(deduced while capturing: operands of mul\)"):
        block(x, np.ones(5, np.float32), w)
    with pytest.raises(dvmlang.GraphError, match=r"b.shape\[0\] is 5 but .* \(deduced while capturing: operands of "
                                                 r"add\)"):
        block(x, w, np.ones(5, np.float32))
    mm = dvmlang.graph(lambda a, b: a @ b)
    mm(np.ones((3, 4), np.float32), np.ones((4, 6), np.float32))
    with pytest.raises(dvmlang.GraphError, match=r"b.shape\[0\] is 5 but it must equal a.shape\[1\] = 4 \(deduced "
                                                 "while capturing: inner dimensions of matmul\\)"):
        mm(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32))
    assert block.stats.captures == 1 and mm.stats.captures == 1


def test_shape_errors_at_capture_are_graph_errors():
    with pytest.raises(dvmlang.GraphError, match="do not broadcast"):
        dvmlang.graph(lambda a: a + ops.transpose(a) * 0.0, static={"a": (0, 1)})(np.ones((3, 4), np.float32))
    with pytest.raises(dvmlang.GraphError, match="rank <= 4"):
        dvmlang.graph(lambda a: ops.exp(a))(np.ones((2, 2, 2, 2, 2), np.float32))
    with pytest.raises(dvmlang.GraphError, match="at most two batch dimensions"):
        dvmlang.graph(lambda a, b: a @ b)(np.ones((2, 2, 2, 3, 4), np.float32), np.ones((2, 2, 2, 4, 3), np.float32))
    with pytest.raises(dvmlang.GraphError, match="programs per launch"):
        dvmlang.graph(lambda a: ops.exp(a))(np.ones((4097, 4097, 1, 2), np.float32))  # 4097**2 > 2**24 programs
    with pytest.raises(dvmlang.GraphError, match="takes the arguments"):
        dvmlang.graph(lambda a, b: a + b)(np.ones(3, np.float32))
    with pytest.raises(dvmlang.GraphError, match="no truth value"):
        dvmlang.graph(lambda a: a if a > 0 else -a)(np.ones(3, np.float32))


def test_defaults_keywords_and_constants_of_a_graph_call(rng):
    def scaled(x, w, eps=1e-5, scale=2.0):
        return ops.rms_norm(x, w, eps=eps) * scale

    g = dvmlang.graph(scaled)
    x, w = rng.standard_normal((4, 40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(g(x, w), ref * 2, rtol=1e-5)
    np.testing.assert_allclose(g(x, w, scale=3.0), ref * 3, rtol=1e-5)
    np.testing.assert_allclose(g(x[:2], w, 1e-5, 3.0), ref[:2] * 3, rtol=1e-5)
    assert g.stats.captures == 1  # floats are runtime scalars: scale=3.0 is not a second capture
    h = dvmlang.graph(lambda x, k: x * k)
    np.testing.assert_array_equal(h(x, 2), x * 2)
    np.testing.assert_array_equal(h(x, 3), x * 3)
    assert h.stats.captures == 2  # ints are constants of a capture (as sizes, axes and flags often are)


# ---- a new shape only encodes -------------------------------------------------------------------------------


def test_a_new_shape_only_encodes(rng):
    block = dvmlang.graph(lambda x, w, b: ops.gelu(ops.layer_norm(x, w, b)) * 2.0)
    shapes = [(200, 400), (300, 512), (1000, 300), (1500, 400), (3000, 257)]  # one tiling class (4 x 512 rows)
    for rows, cols in shapes:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
        np.testing.assert_allclose(block(x, w, b), np_block(x, w, b), rtol=1e-4, atol=1e-4)
    (kernel,) = kernels(block)
    info = kernel.cache_info()
    assert block.stats.captures == 1
    assert info.builds == 1 and info.encodes == len(shapes)


def test_many_shapes_build_once_the_first_calls_tiles_are_kept(rng):
    g = dvmlang.graph(lambda x, y: ops.exp(x) * y + 1.0)
    for _ in range(25):
        rows, cols = int(rng.integers(1, 3000)), int(rng.integers(2, 3000))
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        np.testing.assert_allclose(g(x, x), np.exp(x) * x + 1, rtol=1e-5)
    (kernel,) = kernels(g)
    assert g.stats.captures <= 2  # a size-1 dim is its own signature
    assert kernel.cache_info().builds == 1  # every other shape only encodes (tiling.py: tiles are kept)


def test_a_symbolic_row_beyond_its_row_block_runs_the_split_plan_without_rebuilding(rng):
    sm = dvmlang.graph(lambda x: ops.softmax(x, axis=-1))
    for cols in (40, 200, 2000, 5000, 3000):
        x = rng.standard_normal((8, cols)).astype(np.float32)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(sm(x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    (prog,) = sm._captured.values()
    builds = {id(kt): kt.cache_info().builds + kt.built_ahead for kt in prog.kernels.values()}
    assert all(b == 1 for b in builds.values())  # the row plan once, the split plan once (ahead), nothing rebuilt
    assert prog.fallbacks == 3  # 2000, 5000 and 3000 outgrew the row block (DESIGN_SIZE, 256) the row plan built


def test_the_split_plan_is_built_ahead_once_a_row_changes_so_a_row_outgrowing_its_block_only_encodes(rng,
                                                                                                      monkeypatch):
    monkeypatch.setenv("DVMLANG_BUILD_AHEAD", "0")  # ahead, but on this thread: the counts are deterministic
    sm = dvmlang.graph(lambda x: ops.softmax(x, axis=-1) * 2.0)

    def check(rows, cols):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(sm(x), 2 * e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)

    check(8, 40)
    check(3, 40)  # another number of rows: the guarded row has not changed, nothing is built ahead
    assert sm.stats.builds == 1 and sm.stats.built_ahead == 0  # the row plan's kernel only
    check(8, 100)  # the row changed (still within its block): the split plan's kernels are built ahead
    assert sm.stats.builds == 1 and sm.stats.built_ahead >= 1
    for cols in (300, 2000, 5000, 270):
        check(8, cols)
    assert sm.stats.fallbacks == 4 and sm.stats.builds == 1  # the longer rows only encoded


def test_a_program_whose_rows_never_change_never_builds_its_split_plan(rng):
    """A row over a hidden size (softmax, layernorm, rmsnorm over the last dim of (L, D) for any L) never needs
    the split plan: neither a call nor the worker builds it."""
    def layernorm(x, w):
        m = ops.mean(x, axis=-1, keepdims=True)
        v = ops.mean((x - m) * (x - m), axis=-1, keepdims=True)
        return (x - m) / ops.sqrt(v + 1e-5) * w

    g = dvmlang.graph(layernorm)
    w = rng.standard_normal(48).astype(np.float32)
    for L in (5, 17, 1, 300, 64, 2):
        x = rng.standard_normal((L, 48)).astype(np.float32)
        m = x.mean(-1, keepdims=True)
        ref = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * w
        np.testing.assert_allclose(g(x, w), ref, rtol=1e-4, atol=1e-5)
    dvmlang.fuser.build.settle()
    (prog,) = [p for p in g._captured.values() if p is not None]
    assert prog.plan.has_fallback  # (the row is symbolic: it could outgrow its block)
    assert g.stats.builds == 1 and g.stats.built_ahead == 0 and g.stats.fallbacks == 0


@pytest.mark.parametrize("preload", ["1", "0"])
def test_the_build_ahead_worker_is_started_after_import_not_by_the_first_call(preload):
    """Starting a thread waits until it runs: ``import dvmlang`` starts the worker on its preload thread, so the first
    call that hands work over only queues it (``DVMLANG_PRELOAD=0``: no thread at import, the first call starts it)."""
    import subprocess
    import sys
    code = """
import threading, time
import dvmlang
end = time.monotonic() + (20 if WAIT else 1)
while time.monotonic() < end and "dvmlang-build-ahead" not in {t.name for t in threading.enumerate()}:
    time.sleep(0.01)
print(sorted(t.name for t in threading.enumerate()))
""".replace("WAIT", str(preload == "1"))
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DVMLANG_PRELOAD=preload),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("dvmlang-build-ahead" in out.stdout) == (preload == "1"), out.stdout


def test_a_row_that_outgrows_its_block_at_its_first_change_builds_the_split_plan_in_that_call(rng):
    sm = dvmlang.graph(lambda x: ops.softmax(x, axis=-1))
    for cols in (40, 3000, 40, 5000, 700):
        x = rng.standard_normal((4, cols)).astype(np.float32)
        np.testing.assert_allclose(sm(x), np_softmax(x), rtol=1e-5, atol=1e-7)
    dvmlang.fuser.build.settle()
    assert sm.stats.fallbacks == 3 and sm.stats.built_ahead == 0
    (prog,) = [p for p in sm._captured.values() if p is not None]
    kinds = {id(kt): kt.cache_info().builds for kt in prog.kernels.values()}
    assert all(b == 1 for b in kinds.values())  # each kernel built once, by the call at 3000


def test_a_size_one_dim_that_nothing_broadcasts_is_a_size_like_any_other(rng):
    g = dvmlang.graph(lambda x: ops.softmax(x))
    for shape in [(4, 9), (7, 33), (1, 9), (1, 40), (5, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(g(x), np_softmax(x), rtol=1e-5, atol=1e-7)
    assert g.stats.captures == 1  # one program for every length, 1 included
    assert [k.cache_info().builds for k in kernels(g)] == [1]  # and one kernel


def test_a_size_one_dim_that_broadcasts_gets_a_capture_of_its_own(rng):
    g = dvmlang.graph(lambda x, y: x * y + 1.0)
    a, b = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    np.testing.assert_allclose(g(a, b), a * b + 1, rtol=1e-6)
    row = rng.standard_normal((1, 8)).astype(np.float32)  # broadcasts against b: the deduced rows equality fails
    np.testing.assert_allclose(g(row, b), row * b + 1, rtol=1e-6)
    np.testing.assert_allclose(g(row, row), row * row + 1, rtol=1e-6)  # (1, 1) rows: the generic capture takes it
    np.testing.assert_allclose(g(row[:, :1], b), row[:, :1] * b + 1, rtol=1e-6)
    assert g.stats.captures == 3  # the generic one; (1, s) with (s, s); (1, 1) with (s, s)


def test_a_function_that_reads_a_size_as_a_number_keeps_size_one_dims_specialised(rng):
    def f(x):
        return ops.squeeze(x, 0) * 2.0 if x.shape[0] == 1 else ops.sum(x, axis=0) * 2.0
    g = dvmlang.graph(f)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(g(x), x.sum(0) * 2, rtol=1e-5)
    np.testing.assert_allclose(g(x[:1]), x[0] * 2, rtol=1e-5)  # the capture with its 1 decides the branch
    assert g.stats.captures == 2


# ---- launches, stacking, traces -------------------------------------------------------------------------------


def test_fuse_false_is_one_launch_per_op(rng):
    fn = lambda x, w, b: ops.gelu(ops.layer_norm(x, w, b))  # noqa: E731
    fused, unfused = dvmlang.graph(fn), dvmlang.graph(fn, fuse=False)
    x, w, b = rng.standard_normal((64, 256)).astype(np.float32), np.ones(256, np.float32), np.zeros(256, np.float32)
    np.testing.assert_allclose(fused(x, w, b), unfused(x, w, b), rtol=1e-5, atol=1e-6)
    report = unfused.explain(x, w, b)
    ops_count = sum(1 for grp in report.groups for n in grp.nodes)
    assert len(report.groups) == ops_count and report.launches == ops_count and report.rejections == []
    assert unfused.stats.launches == ops_count and unfused.last_launch.launches == ops_count
    assert "(unfused: one launch per op)" in str(report) and "side by side" not in str(report)
    assert fused.stats.launches == 1
    assert unfused.last_launch.cycles > 2 * fused.last_launch.cycles


def test_every_launch_appears_in_the_trace_named_after_its_group(rng):
    g = dvmlang.graph(lambda x: ops.softmax(x))
    x = rng.standard_normal((4, 50000)).astype(np.float32)
    names, t = launch_names(g, x)
    report = g.explain(x)
    assert names == [f"k_lambda__{grp.name}" for grp in report.groups]  # <lambda> made an identifier
    for launch in t.launches:
        assert launch.group == launch.name and launch.trace is not None and len(launch.trace) > 0
    assert [m.name for m in g.last_launch.members] == names

    @dvmlang.graph
    def block(x, w, b):
        return ops.gelu(ops.layer_norm(x, w, b)) * 2.0

    x, w = rng.standard_normal((8, 64)).astype(np.float32), np.ones(64, np.float32)
    names, t = launch_names(block, x, w, w)
    assert names == ["block_g0_sum_truediv_sub_mul_add_rsqrt_erf"]
    unfused = dvmlang.graph(block.fn, fuse=False, name="block")
    names, t = launch_names(unfused, x, w, w)
    assert len(names) == unfused.last_launch.launches > 10 and all(n.startswith("block_g") for n in names)


def test_independent_groups_run_side_by_side_in_one_stage(rng):
    g = dvmlang.graph(lambda a, b: (ops.exp(a) * 2.0, ops.sum(ops.tanh(b), -1)))
    a, b = rng.standard_normal((96, 512)).astype(np.float32), rng.standard_normal((300, 700)).astype(np.float32)
    ea, sb = g(a, b)
    np.testing.assert_allclose(ea, np.exp(a) * 2, rtol=1e-5)
    np.testing.assert_allclose(sb, np.tanh(b).sum(-1), rtol=1e-4, atol=1e-4)
    report = g.explain(a, b)
    assert [len(stage) for stage in report.plan.stages] == [2] and "stage 0 (side by side)" in str(report)
    launch = g.last_launch
    first, second = launch.members
    assert launch.stages == [2] and first.start == second.start == 0
    assert first.cores + second.cores <= launch.profile.vector_cores  # disjoint cores
    # overlapped, not summed
    assert max(first.cycles, second.cycles) + launch.launch_overhead <= launch.cycles
    assert launch.cycles < first.cycles + second.cycles + launch.launch_overhead


def test_side_by_side_kernels_share_hbm_bandwidth():
    # two memory-bound kernels on half the cores each cannot move more bytes than HBM allows
    a = np.ones((4096, 2048), np.float32)
    g = dvmlang.graph(lambda a, b: (ops.exp(a) * 2.0, ops.exp(b) * 2.0))
    g(a, a)
    launch = g.last_launch
    assert launch.stages == [2]
    p = launch.profile  # the HBM floor for what crossed HBM, the L2 floor for every byte moved
    assert launch.cycles >= launch.hbm_bytes / p.hbm_bytes_per_cycle
    assert launch.cycles >= (launch.bytes_read + launch.bytes_written) / p.l2_bytes_per_cycle


def test_dependent_groups_run_in_sequence_within_one_launch(rng):
    g = dvmlang.graph(lambda x: ops.softmax(x))
    x = rng.standard_normal((4, 50000)).astype(np.float32)
    g(x)
    launch = g.last_launch
    assert launch.stages == [1, 1, 1] and g.stats.launches == 1
    starts = [m.start for m in launch.members]
    assert starts[0] == 0 and starts[1] == launch.members[0].cycles
    assert starts[2] == starts[1] + launch.members[1].cycles
    assert launch.cycles == round(starts[2] + launch.members[2].cycles + launch.launch_overhead)


@dvmlang.kernel
def _scale_rows(x, n_cols, out, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    m = cols < n_cols
    v = dl.load(x + row * n_cols + cols, mask=m, other=0.0)
    dl.store(out + row * n_cols + cols, v * 3.0 + 1.0, mask=m)


def test_user_kernels_are_stacked_with_generated_kernels(rng):
    def f(x):
        y = ops.custom(_scale_rows, lambda xs, n: (xs[0],), [(x.shape, np.float32)], ops.exp(x), x.shape[1],
                       BLOCK=64)
        return ops.softmax(y), ops.sigmoid(x)

    x = rng.standard_normal((10, 50)).astype(np.float32)
    for fuse in (True, False):
        g = dvmlang.graph(f, fuse=fuse)
        s, sig = g(x)
        np.testing.assert_allclose(s, np_softmax(np.exp(x) * 3 + 1), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(sig, 1 / (1 + np.exp(-x)), rtol=1e-5)
        names, _ = launch_names(g, x)
        assert sum(n.startswith("f_g") and n.endswith("_custom__scale_rows") for n in names) == 1
    fused = dvmlang.graph(f)
    fused(x)
    # exp(x) and sigmoid(x) read x over one space: one kernel (horizontal fusion), then the user kernel, the softmax
    assert fused.stats.launches == 1 and len(fused.last_launch.members) == 3
    report = fused.explain(x)
    assert "user kernel" in str(report)
    assert "the producer is a user kernel (ops.custom): its outputs are stored" in report.reasons()


# ---- regressions underneath -----------------------------------------------------------------------------------


@dvmlang.kernel
def _add_one(x, out, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out + offs, dl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)


@dvmlang.kernel
def _times_two(x, out, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out + offs, dl.load(x + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_the_device_never_reuses_the_decoder_of_a_freed_build():
    # templates are keyed by id(): a freed build's id can be reused by the next one, which must not run the
    # old build's decoded program (this made fused graphs created and freed in a loop compute garbage)
    dev = dvmlang.npu.Device()
    x = np.arange(10, dtype=np.float32)
    out = np.empty_like(x)
    _, first, flat, alias = _add_one.prepare((1,), x, out, 10, BLOCK=16, device=dev)
    dev.run(first, flat, alias_groups=alias)
    np.testing.assert_array_equal(out, x + 1)
    _, second, flat, alias = _times_two.prepare((1,), x, out, 10, BLOCK=16, device=dev)
    second.template_key = first.template_key  # what id() reuse does
    dev.run(second, flat, alias_groups=alias)
    np.testing.assert_array_equal(out, x * 2)


def test_inputs_that_are_views_are_read_in_place_or_copied(rng):
    g = dvmlang.graph(lambda x, y: ops.softmax(x) * 2.0 + y)
    base = rng.standard_normal((40, 50)).astype(np.float32)
    y = rng.standard_normal((30, 20)).astype(np.float32)
    views = [base[5:35, 10:30], base[::-1][:30, :20], base[:30, :40:2], np.asfortranarray(base[:30, :20]),
             base.T[:30, :20]]
    for x in views:
        np.testing.assert_allclose(g(x, y), np_softmax(np.ascontiguousarray(x)) * 2 + y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g(y, views[0]), np_softmax(y) * 2 + views[0], rtol=1e-5, atol=1e-6)
    assert g.stats.captures == 1


def test_scalar_arithmetic_on_sizes_and_constants_is_computed_inside_kernels(rng):
    # 1/sqrt(head size) of a symbolic head size, n - 1 of a sample variance: no kernel (or launch) of their own
    q = rng.standard_normal((2, 16, 32)).astype(np.float16)
    g = dvmlang.graph(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=True))
    g(q, q, q)
    assert [(grp.kind, grp.mode) for grp in g.explain(q, q, q).groups] == [("matmul", "matmul"), ("vector", "row"),
                                                                          ("matmul", "matmul")]
    x = rng.standard_normal((5, 9)).astype(np.float32)
    v = dvmlang.graph(lambda x: ops.var(x, -1, True, correction=1) * ops.cast(2.0, "float16").astype("float32"))
    np.testing.assert_allclose(v(x), x.var(-1, ddof=1, keepdims=True) * 2, rtol=1e-5)
    assert len(v.explain(x).groups) == 1


def test_mean_and_var_without_keepdims_are_one_kernel(rng):
    x = rng.standard_normal((3, 5, 9)).astype(np.float32)
    for fn, ref in [(lambda x: ops.mean(x, -1), lambda x: x.mean(-1)), (lambda x: ops.var(x, -1), lambda x: x.var(-1))]:
        g = dvmlang.graph(fn)
        np.testing.assert_allclose(g(x), ref(x), rtol=1e-5, atol=1e-6)
        assert len(g.explain(x).groups) == 1


def test_size_zero_dims_and_numpy_scalars(rng):
    g = dvmlang.graph(lambda x, y: ops.softmax(x) @ y)
    out = g(np.zeros((0, 3, 5), np.float32), np.zeros((0, 5, 2), np.float32))
    assert out.shape == (0, 3, 2) and g.stats.launches == 0  # nothing to compute: no launch
    mm = dvmlang.graph(lambda a, b: (a @ b) + 1.0)
    assert mm(np.zeros((0, 4), np.float32), np.ones((4, 3), np.float32)).shape == (0, 3)
    np.testing.assert_array_equal(mm(np.ones((2, 0), np.float32), np.ones((0, 3), np.float32)), np.ones((2, 3)))
    s = dvmlang.graph(lambda x: ops.sum(x, -1))
    np.testing.assert_array_equal(s(np.zeros((3, 0), np.float32)), np.zeros(3))
    scaled = dvmlang.graph(lambda x, s: x * s)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(scaled(x, np.float32(2.5)), x * 2.5)
    np.testing.assert_allclose(scaled(x, np.float32(-1.0)), -x)
    assert scaled.stats.captures == 1  # a numpy scalar is a 0-d array: its value is not part of the signature


def test_swiglu_mlp_plan_and_reasons(rng):
    mlp = dvmlang.graph(lambda x, w1, w3, w2: ops.swiglu(x @ w3, x @ w1) @ w2)
    x = rng.standard_normal((16, 32)).astype(np.float16)
    w1, w3, w2 = (rng.standard_normal(s).astype(np.float16) * np.float16(0.2) for s in ((32, 48), (32, 48), (48, 32)))
    mlp(x, w1, w3, w2)
    report = mlp.explain(x, w1, w3, w2)
    assert [[n.op for n in grp.nodes] for grp in report.groups] == [["matmul"], ["matmul", "sigmoid", "mul", "mul"],
                                                                     ["matmul"]]
    assert report.reasons() == [
        "the operation joined a matmul (the group of %5); the producer's group is a matmul, which cannot be merged "
        "into it: the value is stored and read back",
        "elementwise producers of a matmul operand are not fused into the cube kernel (no prologue fusion): the "
        "operand is stored and the matmul reads it"]


def test_auto_tiler_fits_ub_with_powers_of_two_and_one_ragged_tile(rng):
    prof = dvmlang.npu.device.default_device().profile
    budget = tiling.tile_budget(prof)
    cases = [(lambda x: ops.exp(x) * 2.0, "tiled"), (lambda x: ops.sum(ops.exp(x), -1, keepdims=True), "loop"),
             (lambda x: ops.softmax(x), "row")]
    for fn, mode in cases:
        g = dvmlang.graph(fn)
        for rows, cols in [(1, 7), (5, 300), (48, 1000), (97, 4000), (4800, 1024), (3000, 257), (20, 100000)]:
            x = np.zeros((rows, cols), np.float32)
            report = g.explain(x)
            grp = report.groups[0]
            if grp.mode != mode:
                continue  # a row too long for UB: the split plan
            live = tiling.live_bytes_per_element(grp)
            t = tiling.choose(grp, rows, cols, 1, prof, live)
            assert t.br * t.bc * live <= budget or t.br == 1  # the live tiles fit half of UB
            assert t.br & (t.br - 1) == 0 and t.bc & (t.bc - 1) == 0  # powers of two: few builds
            row_tiles = -(-rows // t.br)
            assert t.grid[0] == row_tiles * t.ncb and (row_tiles - 1) * t.br < rows  # one ragged row tile at most
            if mode == "tiled":
                assert (t.ncb - 1) * t.bc < cols  # and one ragged column block
            else:
                assert t.ncb == 1 and (mode == "loop" or t.bc >= cols)


def test_a_reduction_over_a_size_one_dim_keeps_its_own_iteration_space():
    # sum(|r|) over the size-1 last dim of r (rows, 1), next to x + |r| over (rows, cols): the reduction must not
    # run over the wider group's columns (it summed cols copies of |r|)
    x, r = np.ones((3, 4), np.float32), np.full((3, 1), -2.0, np.float32)

    def f(x, r):
        a = ops.abs(r)
        return ops.sum(a, -1, keepdims=True), x + a

    def g(x, r):
        wide = ops.exp(x)
        return wide, ops.sum(ops.abs(r), -1, keepdims=True) * wide

    def h(x, r):
        a = ops.abs(r)
        wide = x + a  # the group of |r| now iterates over (rows, cols)
        return wide, ops.sum(a, -1, keepdims=True)

    for fn, want in [(f, (np.abs(r), x + 2)), (g, (np.exp(x), 2 * np.exp(x))), (h, (x + 2, np.abs(r)))]:
        got = dvmlang.graph(fn)(x, r)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    # f and h broadcast r's size-1 dim against x's columns: their captures keep it a 1 (api._program). g never
    # broadcasts it, so its size-1 dim is a symbol of the generic capture, which cannot prove the two spaces equal
    reasons = {fn.__name__: dvmlang.graph(fn).explain(x, r).reasons() for fn in (f, g, h)}
    assert any("would change what they reduce" in s for s in reasons["f"])
    assert any("iteration spaces cannot be proven equal" in s for s in reasons["g"])
    assert any("the reduction runs over the last dim of (s0, 1) (size 1), not over the columns" in s
               for s in reasons["h"])


def test_a_matmul_epilogue_may_read_the_matmul_operands(rng):
    a, b = np.ones((3, 1), np.float32), np.full((1, 4), 2.0, np.float32)
    np.testing.assert_allclose(dvmlang.graph(lambda a, b: a @ b + b)(a, b), a @ b + b)
    sq = rng.standard_normal((2, 16, 16)).astype(np.float32)
    g = dvmlang.graph(lambda a, b: (a @ b) * b - a)
    np.testing.assert_allclose(g(sq, sq * 0.5), (sq @ (sq * 0.5)) * (sq * 0.5) - sq, rtol=1e-4, atol=1e-4)
    assert [grp.kind for grp in g.explain(sq, sq).groups] == ["matmul"]


def test_two_graphs_with_the_same_group_share_one_build(rng):
    fn = lambda x: ops.exp(x) * 2.0 + 1.0  # noqa: E731
    x = rng.standard_normal((30, 70)).astype(np.float32)
    a, b = dvmlang.graph(fn), dvmlang.graph(fn)
    np.testing.assert_allclose(a(x), np.exp(x) * 2 + 1, rtol=1e-5)
    np.testing.assert_allclose(b(x[:7]), np.exp(x[:7]) * 2 + 1, rtol=1e-5)
    (ka,), (kb,) = kernels(a), kernels(b)
    assert ka.cache_info().builds == 1 and kb.cache_info().builds == 0  # the second graph found the first's build
    assert ka.cache_info().encodes == 1 and kb.cache_info().encodes == 1
    (ba,), (bb,) = ka.builds(), kb.builds()
    assert ba is bb
    # another constant (a runtime parameter) on another line: the same composition, with a line table of its own
    c = dvmlang.graph(lambda x: ops.exp(x) * 3.0 + 1.0)
    np.testing.assert_allclose(c(x), np.exp(x) * 3 + 1, rtol=1e-5)
    (kc,) = kernels(c)
    assert kc.cache_info().builds == 0 and kc.builds()[0] is not ba
    assert kc.builds()[0].template.words is ba.template.words
    d = dvmlang.graph(lambda x: ops.exp(x) * 3.0 - 1.0)  # another operation: another structure, another build
    np.testing.assert_allclose(d(x), np.exp(x) * 3 - 1, rtol=1e-5)
    (kd,) = kernels(d)
    assert kd.cache_info().builds == 1


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_a_whole_tensor_reduction_is_split_across_the_cores(rng, op):
    """A reduction of a whole tensor (one row) of a symbolic or large count runs as per-core partials and a
    combine (two kernels of one stacked launch), not as one program on one core; chunks that do not divide
    the count and a tail shorter than a column block are exact."""
    g = dvmlang.graph(lambda x: getattr(ops, op)(x))
    for n in (1, 47, 1000, 70_001):
        x = rng.standard_normal(n).astype(np.float32)
        want = getattr(np, op)(x.astype(np.float64))
        np.testing.assert_allclose(g(x), want, rtol=1e-5, atol=1e-5)
        assert len(g.last_launch.members) == 2 and g.last_launch.members[0].grid[0] > 1
    one = dvmlang.graph(lambda x: getattr(ops, op)(x), static={"x": (0,)})  # static and small: one kernel
    np.testing.assert_allclose(one(x[:1000]), getattr(np, op)(x[:1000].astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert len(one.last_launch.members) == 1


def test_a_split_reduction_fuses_its_elementwise_producers_and_beats_one_program(rng):
    x = rng.standard_normal(1 << 18).astype(np.float32)
    y = rng.standard_normal(1 << 18).astype(np.float32)
    fn = lambda a, b: ops.mean((a - b) * (a - b))  # noqa: E731 - a loss
    g = dvmlang.graph(fn)
    np.testing.assert_allclose(g(x, y), np.mean((x.astype(np.float64) - y) ** 2), rtol=1e-5)
    assert [m.name.split("_g")[-1] for m in g.last_launch.members] == ["0_sub_mul_sum", "1_sum_truediv"]
    with_text = os.environ.get("DVMLANG_FUSER")
    os.environ["DVMLANG_FUSER"] = "text"  # the text path does not split: one program reduces everything
    try:
        one = dvmlang.graph(fn)
        np.testing.assert_allclose(one(x, y), np.mean((x.astype(np.float64) - y) ** 2), rtol=1e-4)
    finally:
        os.environ.pop("DVMLANG_FUSER") if with_text is None else os.environ.__setitem__("DVMLANG_FUSER", with_text)
    assert len(one.last_launch.members) == 1 and g.last_launch.cycles * 4 < one.last_launch.cycles


def test_a_reshape_that_only_splits_dims_of_a_computed_view_is_a_view_not_a_copy(rng):
    """A head split (L, H*D) -> (L, H, D) of a slice of a fused projection (GPT-2's q/k/v) only splits a dim: a
    view of any strided array, so no copy kernel is placed under it (canonical._splits_only); a reshape that
    merges dims of such a slice still gets one. Results equal numpy's at several lengths, on the generic path
    and the instance function."""
    H, D = 4, 8

    def heads(x, w):
        qkv = x @ w  # (L, 3*H*D), computed in the launch
        n = x.shape[0]
        q = ops.transpose(ops.reshape(qkv[:, 0:H * D], (n, H, D)), 0, 1)
        k = ops.transpose(ops.reshape(qkv[:, H * D:2 * H * D], (n, H, D)), 0, 1)
        return q @ ops.transpose(k, 1, 2)

    def merged(x, w):
        y = ops.reshape(x @ w, (x.shape[0], 3, H * D))[:, 0:2, :]  # (L, 2, H*D) of a (L, 3, H*D) value
        return ops.reshape(y, (x.shape[0], 2 * H * D)) * 2.0  # merges two dims: a copy under it

    g, m = dvmlang.graph(heads, static={"w": (0, 1)}), dvmlang.graph(merged, static={"w": (0, 1)})
    w = rng.standard_normal((16, 3 * H * D)).astype(np.float32)
    for L in (5, 9, 5, 17, 33):
        x = rng.standard_normal((L, 16)).astype(np.float32)
        qkv = x @ w
        q = qkv[:, :H * D].reshape(L, H, D).transpose(1, 0, 2)
        k = qkv[:, H * D:2 * H * D].reshape(L, H, D).transpose(1, 0, 2)
        np.testing.assert_allclose(g(x, w), q @ k.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(m(x, w), (x @ w)[:, :2 * H * D] * 2.0, rtol=1e-4, atol=1e-4)
    copies = lambda f: [n for p in f._captured.values() if p is not None for n in p.graph.nodes  # noqa: E731
                        if n.op == "broadcast_to" and n.attrs.get("copy")]
    assert copies(g) == [] and len(copies(m)) == 1


def test_a_value_read_only_through_permutes_is_stored_in_their_order_not_copied(rng):
    """An attention's output (H, L, D), transposed to (L, H, D) and reshaped to (L, H*D) for the output projection,
    is stored as (L, H, D) by the kernel that computes it (through its output strides): the reshape is then a
    view and no copy kernel runs (canonical._store_in_order). A value something else also reads keeps its own
    order and the copy. Results equal numpy's at several lengths, on the generic path and the instance
    function."""
    H, D = 4, 8

    def attention(q, k, v, wo):
        n = q.shape[1]
        a = ops.softmax(q @ ops.transpose(k, 1, 2), axis=-1) @ v  # (H, L, D)
        return ops.reshape(ops.transpose(a, 0, 1), (n, H * D)) @ wo

    def read_twice(q, k, v, wo):
        n = q.shape[1]
        a = ops.softmax(q @ ops.transpose(k, 1, 2), axis=-1) @ v
        return ops.reshape(ops.transpose(a, 0, 1), (n, H * D)) @ wo, a * 2.0

    static = {"wo": (0, 1), "q": (0, 2), "k": (0, 2), "v": (0, 2)}
    g, t = dvmlang.graph(attention, static=static), dvmlang.graph(read_twice, static=static)
    wo = rng.standard_normal((H * D, 16)).astype(np.float32)
    for L in (5, 9, 5, 17, 40):
        q, k, v = (rng.standard_normal((H, L, D)).astype(np.float32) for _ in range(3))
        s = q @ k.transpose(0, 2, 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        a = (p / p.sum(-1, keepdims=True)) @ v
        ref = a.transpose(1, 0, 2).reshape(L, H * D) @ wo
        np.testing.assert_allclose(g(q, k, v, wo), ref, rtol=1e-4, atol=1e-4)
        y, a2 = t(q, k, v, wo)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(a2, a * 2.0, rtol=1e-4, atol=1e-4)
    nodes = lambda f: [n for p in f._captured.values() if p is not None for n in p.graph.nodes]  # noqa: E731
    assert not [n for n in nodes(g) if n.op == "broadcast_to" and n.attrs.get("copy")]
    assert [n.attrs["order"] for n in nodes(g) if n.attrs.get("order")] == [(1, 0, 2)]
    assert len([n for n in nodes(t) if n.op == "broadcast_to" and n.attrs.get("copy")]) == 1
    assert not [n for n in nodes(t) if n.attrs.get("order")]


@pytest.mark.parametrize("producer", ["mul", "exp_sum", "cumsum", "softmax", "matmul"])
@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (0, 2, 1), (1, 2, 0)])
def test_views_of_a_computed_value_in_any_order_equal_numpy(rng, producer, perm):
    """A rank-3 value computed by any kind of kernel and read only through a permute, then a reshape that merges
    the last two dims (the value is stored in the permuted order: canonical._store_in_order) or that splits
    the last dim (a view, when it is a number): numpy's results at several sizes, through the generic path and
    the instance function."""
    def value(x, w):
        if producer == "mul":
            return x * 2.0 + 1.0
        if producer == "exp_sum":
            return ops.exp(x) - ops.sum(x, axis=-1, keepdims=True)
        if producer == "cumsum":
            return ops.cumsum(x, axis=1)
        if producer == "softmax":
            return ops.softmax(x, axis=-1)
        return x @ w

    def merge(x, w):
        p = ops.permute(value(x, w), *perm)
        a, b, c = p.shape
        return ops.reshape(p, (a, b * c)) * 3.0

    def split(x, w):
        p = ops.permute(value(x, w), *perm)
        a, b, c = p.shape
        return ops.reshape(p, (a, b, c // 2, 2)) + 1.0

    def ref(x, w):
        v = {"mul": lambda: x * 2.0 + 1.0, "exp_sum": lambda: np.exp(x) - x.sum(-1, keepdims=True),
             "cumsum": lambda: np.cumsum(x, axis=1), "softmax": lambda: np_softmax(x), "matmul": lambda: x @ w}[
            producer]()
        return v.transpose(perm)

    static = {"x": (0, 2), "w": (0, 1)}
    gm, gs = dvmlang.graph(merge, static=static), dvmlang.graph(split, static=static)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    for L in (3, 6, 3, 10, 7):
        x = rng.standard_normal((2, L, 4)).astype(np.float32)
        p = ref(x, w)
        a, b, c = p.shape
        np.testing.assert_allclose(gm(x, w), p.reshape(a, b * c) * 3.0, rtol=1e-4, atol=1e-4)
        if perm[-1] != 1:  # (the last dim a number: split)
            np.testing.assert_allclose(gs(x, w), p.reshape(a, b, c // 2, 2) + 1.0, rtol=1e-4, atol=1e-4)
    nodes = [n for q in gm._captured.values() if q is not None for n in q.graph.nodes]
    assert not [n for n in nodes if n.op == "broadcast_to" and n.attrs.get("copy")]  # stored in order, not copied


def test_a_number_from_a_0d_input_is_computed_in_the_kernel_that_reads_it(rng):
    # torch.compile(dynamic=True) passes a Python float (an RMSNorm's eps) as a 0-d float64 tensor: its cast was a
    # kernel of its own, storing one element
    from dvmlang.npu import Device
    x = rng.standard_normal((37, 300)).astype(np.float32)
    eps = np.array(0.25, np.float64)

    def rms(x, eps):
        return x * ops.rsqrt(ops.mean(x * x, -1, keepdims=True) + ops.cast(eps, "float32"))

    def twice(x, eps):  # read by two operations: stored once, by a kernel of its own (not by every program)
        e = ops.cast(eps, "float32")
        return x + e, e * 3.0

    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 0.25)
    for dev in (Device(), Device(race_detection=True)):
        g = dvmlang.graph(rms)
        np.testing.assert_allclose(g(x, eps, device=dev), want, rtol=1e-5)
        assert len(g.explain(x, eps, device=dev).groups) == 1
        a, b = dvmlang.graph(twice)(x, eps, device=dev)
        np.testing.assert_array_equal(a, x + np.float32(0.25))
        assert b == np.float32(0.75)
