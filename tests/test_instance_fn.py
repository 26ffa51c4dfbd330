"""A plan's generated instance function (fuser/instance.py) is the generic path written out straight: for every
call it serves, its outputs are bit for bit, and its launches' cycles equal, those of the generic path
(``instance.ENABLED = False``), on the paper's workloads, on views, on the split plan and on lengths 1 and 3;
anything it does not cover (a non-contiguous input) falls back to the generic path; its pooled intermediate
buffers never reach the caller."""

import sys
from pathlib import Path

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser import instance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from paper import ops as pops  # noqa: E402


@pytest.fixture(autouse=True)
def _enabled():
    was = instance.ENABLED
    yield
    instance.ENABLED = was


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _fast_count(g) -> int:
    """The instance functions ``g``'s programs have, once the background worker (which writes them after a
    program's first call) has done what it was handed."""
    from dvmlang.fuser import build as fbuild

    fbuild.settle()
    return sum(1 for p in g._captured.values() if p is not None for f in p._fast.values() if f)


def _settle() -> None:
    from dvmlang.fuser import build as fbuild

    fbuild.settle()


def _generic_only(g) -> None:
    """No instance function for ``g``'s next call: the background worker (which writes them after a first call,
    and may have run while ``instance.ENABLED`` was on for the other graph) has finished, and what it wrote is
    dropped."""
    from dvmlang.fuser import build as fbuild

    fbuild.settle()
    g._direct.clear()
    for p in g._captured.values():
        if p is not None:
            p._fast.clear()


def _compare(fn, make_args, lengths, static=None):
    """Calls ``fn`` through two graph functions, one with instance functions and one without, and checks that
    every output and every launch's cycles agree. Returns the first graph function."""
    fast, generic = dvmlang.graph(fn, static=static), dvmlang.graph(fn, static=static)
    rng = np.random.default_rng(7)
    for L in lengths:
        args = make_args(rng, L)
        instance.ENABLED = True
        got = _tuple(fast(*args))
        rec = fast.last_launch
        _settle()  # (what the call handed the worker is done while functions are on, as for a user)
        instance.ENABLED = False
        _generic_only(generic)
        want = _tuple(generic(*args))
        ref = generic.last_launch
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype, (L, a.shape, b.shape)
            assert np.array_equal(a, b, equal_nan=True), f"length {L}: the instance function's output differs"
        assert rec.cycles == ref.cycles, (L, rec.cycles, ref.cycles)
    return fast


LENGTHS = [16, 1, 3, 16, 1, 3, 40, 7, 16, 1]


@pytest.mark.parametrize("name", ["softmax", "layernorm", "add/mul/cast chain", "reduction (row sum)",
                                  "transpose", "rotary embedding", "matmul + bias + gelu", "attention"])
def test_paper_workloads_equal_the_generic_path(name):
    w = next(w for w in pops.WORKLOADS if w.name == name)
    g = _compare(w.graph, w.args, LENGTHS, w.static)
    assert _fast_count(g) >= 1, "no call took the instance function"


def test_decoder_block_equals_the_generic_path():
    w = next(w for w in pops.WORKLOADS if w.name == "decoder block")
    g = _compare(w.graph, w.args, [5, 1, 3, 5, 1, 9], w.static)
    assert _fast_count(g) >= 1


def _views(x, y):
    a = ops.transpose(x[1:, :], 0, 1)  # a slice, then a permute
    b = ops.reshape(y, (y.shape[0] * 2, y.shape[1] // 2))  # a contiguous reshape
    return ops.exp(a) * 2.0, ops.sum(b, axis=-1)


def test_views_equal_the_generic_path():
    def args(rng, L):
        return (rng.standard_normal((L + 1, 24)).astype(np.float32),
                rng.standard_normal((L, 32)).astype(np.float32))
    g = _compare(_views, args, LENGTHS)
    assert _fast_count(g) >= 1


def test_the_split_plan_equals_the_generic_path():
    """A row longer than the row block built takes the split plan: the plan's function returns SPLIT and the split
    plan's own function serves the call."""
    def args(rng, L):
        return (rng.standard_normal((4, L)).astype(np.float32),)
    g = _compare(ops.softmax, args, [8, 300, 8, 300, 1, 2000, 300, 8, 700])
    assert _fast_count(g) >= 2


def test_a_non_contiguous_input_takes_the_generic_path():
    rng = np.random.default_rng(3)
    g = dvmlang.graph(ops.softmax)
    for L in (4, 5, 6):
        g(rng.standard_normal((L, 32)).astype(np.float32))
    assert _fast_count(g) >= 1
    x = rng.standard_normal((9, 64)).astype(np.float32)[:, ::2]  # strided columns
    x0 = x.copy()
    got = g(x)
    e = np.exp(x0 - x0.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert np.array_equal(x, x0)  # the input is not touched


def test_outputs_are_never_pooled_buffers():
    """Intermediates come from a per-program pool; what a call returns must survive the next calls."""
    def f(x):
        h = ops.exp(x) + 1.0  # an intermediate (pooled) ...
        return ops.sum(h, axis=-1), h * 0.5  # ... and an output computed from it
    rng = np.random.default_rng(5)
    g = dvmlang.graph(f)
    kept = []
    for L in [6, 6, 6, 7, 6, 7, 6]:
        x = rng.standard_normal((L, 48)).astype(np.float32)
        s, h = g(x)
        kept.append((x, s, s.copy(), h, h.copy()))
    assert _fast_count(g) >= 1
    for x, s, s0, h, h0 in kept:
        assert np.array_equal(s, s0) and np.array_equal(h, h0)  # no later call wrote into an earlier output
        np.testing.assert_allclose(h, (np.exp(x) + 1.0) * 0.5, rtol=1e-5)
    ids = {id(a) for _, s, _, h, _ in kept for a in (s, h)}
    assert len(ids) == 2 * len(kept)


def test_sizes_seen_before_take_their_instances_without_encoding():
    """The instances a program's sizes decide are kept per program by the sizes: a call at sizes seen before
    (through the generic path or the function) encodes nothing and launches the same bytecode; new sizes
    encode every kernel once. Outputs stay numpy's."""
    w = next(w for w in pops.WORKLOADS if w.name == "decoder block")
    g = dvmlang.graph(w.graph, static=w.static)
    rng = np.random.default_rng(11)
    seen = {}
    for L in [6, 7, 8, 9, 6, 7, 8, 9, 10, 6, 10]:
        args = w.args(rng, L)
        before = g.stats.encodes
        out = g(*args)
        np.testing.assert_allclose(out, w.reference(*args), rtol=w.tol, atol=w.tol)
        codes = [m.name for m in g.last_launch.members]
        if L in seen:
            assert g.stats.encodes == before, f"length {L} was seen before and encoded again"
            assert codes == seen[L]
        else:
            assert g.stats.encodes > before
            seen[L] = codes
    assert _fast_count(g) >= 1


def _unit_reshapes(x, y):
    """Reshapes of strided views that only insert or remove dims of size 1 (a view at any sizes), then a slice
    of one: the instance function addresses them itself, as torch's attention graphs do."""
    a = ops.reshape(ops.permute(x, (1, 0, 2)), (1, x.shape[1], x.shape[0], x.shape[2]))
    b = ops.reshape(ops.transpose(y[:, 1:, :], 1, 2), (y.shape[0], y.shape[2], y.shape[1] - 1))
    c = ops.reshape(ops.permute(ops.reshape(x, (1, x.shape[0], x.shape[1], x.shape[2])), (0, 2, 1, 3)),
                    (x.shape[1], x.shape[0], x.shape[2]))
    return ops.exp(a[:, :, :, 2:]), b * 2.0, c + 1.0


def test_unit_reshapes_of_strided_views_equal_the_generic_path():
    def args(rng, L):
        return (rng.standard_normal((L, 3, 8)).astype(np.float32),
                rng.standard_normal((2, L + 1, 5)).astype(np.float32))
    g = _compare(_unit_reshapes, args, LENGTHS)
    assert _fast_count(g) >= 1
    rng = np.random.default_rng(5)
    x, y = args(rng, 6)
    got = g(x, y)
    want = (np.exp(np.transpose(x, (1, 0, 2))[None][..., 2:]), np.transpose(y[:, 1:, :], (0, 2, 1)) * 2.0,
            np.transpose(x, (1, 0, 2)) + 1.0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_static_dim_of_another_size_takes_its_own_capture():
    """Calls of numpy arrays go straight to the instance functions of the capture that served calls like them
    (``GraphFunction._direct``), static dims included: a call whose static dim differs is refused by the
    function's binding and captured anew, and calls alternating between two static sizes stay correct."""
    # (w's dims meet no other dim: only its static sizes tell the two captures apart)
    g = dvmlang.graph(lambda x, w: x + ops.sum(w, axis=-1)[0:1], static={"w": (0, 1)})
    rng = np.random.default_rng(2)
    caps = []
    for L, n in [(5, 8), (6, 8), (7, 8), (8, 8), (5, 16), (6, 16), (9, 8), (7, 16), (10, 8), (11, 16)]:
        x = rng.standard_normal((L, 4)).astype(np.float32)
        w = rng.standard_normal((n, n)).astype(np.float32)
        np.testing.assert_allclose(g(x, w), x + w.sum(axis=-1)[0:1], rtol=1e-5, atol=1e-5)
        caps.append(g.stats.captures)
    assert caps[-1] == 2, caps  # one capture per static size
    assert _fast_count(g) >= 1


def test_a_plan_of_views_alone_has_an_instance_function():
    """A program whose plan launches no kernel (its outputs are views of its inputs) gets an instance function
    too, with nothing for its sizes to decide."""
    g = dvmlang.graph(lambda x: (ops.transpose(x, 0, 1), x[1:, :]))
    rng = np.random.default_rng(4)
    for L in [3, 4, 5, 6, 4]:
        x = rng.standard_normal((L, 6)).astype(np.float32)
        t, s = g(x)
        np.testing.assert_array_equal(t, x.T)
        np.testing.assert_array_equal(s, x[1:])
    assert _fast_count(g) >= 1


def _words_agree(g, w, lengths, seed, wrap=lambda a: a):
    """Calls ``g`` at ``lengths`` and checks, per call, that the instances the call launched (the instance
    function's written-out encodes, once it has one) are the generic path's (``encode``, which never takes the
    function) word for word and byte for byte, and that the outputs match numpy. Returns the calls the function
    served."""
    from dvmlang.npu import device as npu_device

    launched = []
    run_stack = npu_device.Device.run_stack

    def recording(self, stages, name=None, trace=None):
        launched.append([it.bytecode for st in stages for it in st])
        return run_stack(self, stages, name=name, trace=trace)

    served = 0
    rng = np.random.default_rng(seed)
    npu_device.Device.run_stack = recording
    try:
        for L in lengths:
            args = w.args(rng, L)
            ref = w.reference(*args)
            args = tuple(wrap(a) for a in args)
            launched.clear()
            runs = sum(1 for p in g._captured.values() if p for f in p._fast.values() if f)
            out = g(*args)
            np.testing.assert_allclose(np.asarray(out), ref, rtol=w.tol, atol=w.tol)
            (got,) = launched
            want = g.encode(*args)
            assert len(got) == len(want), L
            for a, b in zip(got, want):
                assert a.code.tobytes() == b.code.tobytes(), f"length {L}: `{a.name}` has other words"
                assert a.to_bytes() == b.to_bytes(), f"length {L}: `{a.name}` has another container"
            served += runs > 0
    finally:
        npu_device.Device.run_stack = run_stack
    return served


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention", "decoder block", "matmul + bias + gelu",
                                  "rotary embedding"])
def test_written_out_encodes_are_the_generic_words(name):
    """The instance function writes every kernel's words itself (no encoder call, no instance key): across random
    lengths (size 1, lengths seen before, and for attention and the decoder lengths past the row block built at
    the first call, so that calls switch between the row plan and the split plan and back), every instance it
    launches is, byte for byte, the one the generic path encodes."""
    from dvmlang.fuser import build as fbuild

    w = next(w for w in pops.WORKLOADS if w.name == name)
    g = dvmlang.graph(w.graph, static=w.static)
    rng = np.random.default_rng(5)
    big = name in ("attention", "decoder block")
    lengths = [int(x) for x in rng.integers(1, 300 if big else 90, 10)]
    lengths = [16, 1] + lengths[:4] + ([290, 20, 300, 290] if big else [3]) + [1, 16] + lengths[4:] + lengths[:2]
    g(*w.args(rng, 16))
    fbuild.settle()  # (the worker writes the plans' instance functions after the first call)
    assert _words_agree(g, w, lengths, 3) >= len(lengths) - 2


def test_a_lazy_program_reused_with_other_constants_writes_their_words(monkeypatch):
    """A lazy program is reused for another Python number (a runtime scalar): its instance function writes the
    constants' words per call (the template holds the program's own), at new shapes and shapes seen before, and
    every result is numpy's."""
    from dvmlang.fuser import api
    from dvmlang.fuser import build as fbuild

    served = []
    run_fast = api.Program.run_fast

    def counting(self, *a, **k):
        r = run_fast(self, *a, **k)
        served.append(r is not None)
        return r

    monkeypatch.setattr(api.Program, "run_fast", counting)
    rng = np.random.default_rng(3)
    cases = [(5, 33, 3.0), (17, 40, -0.5), (9, 33, 3.0), (9, 33, 2.5), (30, 7, -0.0), (1, 33, 0.25), (9, 33, -0.5),
             (5, 33, 3.0), (1, 1, 7.0), (17, 40, -0.5)]
    for rows, cols, c in cases:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        with dvmlang.lazy(background=False):
            got = (ops.tanh(dvmlang.tensor(x) * c) + c).numpy()
        want = np.tanh(x * np.float32(c)) + np.float32(c)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
        assert np.array_equal(np.signbit(got), np.signbit(want)) or c != -0.0
        fbuild.settle()
    assert any(served), "no call took an instance function"


@pytest.mark.parametrize("name", ["softmax", "decoder block"])
def test_written_out_encodes_of_torch_tensors_are_the_generic_words(name):
    """The same with torch tensors in (numpy views over torch's memory, whose base is not an array): the
    instances a generic run encoded are kept for the function too, and every launched instance is the generic
    path's."""
    torch = pytest.importorskip("torch")
    from dvmlang.fuser import build as fbuild

    w = next(w for w in pops.WORKLOADS if w.name == name)
    g = dvmlang.graph(w.graph, static=w.static)
    g(*[torch.from_numpy(a) for a in w.args(np.random.default_rng(1), 16)])
    fbuild.settle()
    lengths = [16, 1, 40, 7, 16, 300 if name == "decoder block" else 90, 40, 1]
    assert _words_agree(g, w, lengths, 4, torch.from_numpy) >= len(lengths) - 2


def test_which_path_a_call_runs_does_not_depend_on_the_workers_progress(monkeypatch):
    """The background worker writes a program's instance functions after its first call; the second call takes
    them however long the worker takes, so the calls (and the device's L2 model, which sees which arrays a path
    reuses) are the same whether the worker is quick or slow."""
    import threading
    import time

    def calls(delay):
        real = instance.generate

        def slow(*a, **k):
            if threading.current_thread() is not threading.main_thread():
                time.sleep(delay)
            return real(*a, **k)
        monkeypatch.setattr(instance, "generate", slow)
        dev = dvmlang.npu.Device()
        g = dvmlang.graph(lambda x, w: ops.softmax(x @ w, axis=-1) * 2.0, device=dev)
        rng = np.random.default_rng(3)
        w = rng.standard_normal((32, 48)).astype(np.float32)
        out = []
        for L in (5, 9, 5, 9, 12):
            y = g(rng.standard_normal((L, 32)).astype(np.float32), w)
            r = g.last_launch
            out.append((y.tobytes(), r.cycles, r.hbm_bytes, r.l2_hit_bytes, sum(1 for p in g._captured.values()
                                                                                 for f in p._fast.values() if f)))
        monkeypatch.setattr(instance, "generate", real)
        return out, dev.simulated_cycles

    quick, slow = calls(0.0), calls(0.3)
    assert quick == slow
    assert quick[0][1][4] >= 1  # (the second call had the function)


def test_a_length_seen_before_encodes_nothing_when_its_first_inputs_were_views():
    """The first call's inputs are views (addressed from their root arrays by the generic path, whose words the
    written-out encodes would lay out otherwise): a later call at that length still encodes nothing."""
    from dvmlang.fuser import build as fbuild

    g = dvmlang.graph(lambda x: ops.gelu(x) * 2.0)
    rng = np.random.default_rng(4)

    def arg(L):
        return rng.standard_normal((2, L, 128)).astype(np.float32)[1]  # C-contiguous, over a larger array

    for L in (9, 13):
        g(arg(L))
        fbuild.settle()
    before = g.stats.encodes
    x = arg(9)
    y = g(x)
    assert g.stats.encodes == before
    assert _fast_count(g) >= 1
    z = x.astype(np.float64)
    from math import erf
    want = 2 * (0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2))))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_a_size_one_capture_is_called_directly_and_only_for_its_ones(monkeypatch):
    """A function that broadcasts a size-1 dim (rotary's ``cos`` of shape (L, 1, D) against (L, H, D)) has a
    capture specialised to its size-1 dims. Calls with the same dims of size 1 go straight to its instance
    functions (no capture lookup); a call with other dims of size 1 (L = 1, H = 1) takes a capture of its own;
    every output equals numpy's, calls alternating between the patterns included."""
    g = dvmlang.graph(lambda x, c: x * c + 1.0)
    rng = np.random.default_rng(3)
    looked_up = []
    program = type(g)._program
    monkeypatch.setattr(type(g), "_program", lambda self, args: looked_up.append(1) or program(self, args))
    shapes = [(5, 4), (6, 4), (7, 4), (8, 4), (9, 4), (1, 4), (10, 4), (11, 1), (12, 4), (1, 1), (13, 4), (11, 1)]
    counts = []
    for L, H in shapes:
        x = rng.standard_normal((L, H, 8)).astype(np.float32)
        c = rng.standard_normal((L, 1, 8)).astype(np.float32)
        np.testing.assert_array_equal(g(x, c), x * c + np.float32(1.0))
        counts.append(len(looked_up))
    assert _fast_count(g) >= 1
    # the (L, H, 1) pattern's calls after its first two (capture, then the instance function written) and the
    # worker's turn take the direct path: (9, 4), (10, 4), (12, 4) and (13, 4) make no lookup
    direct = [shapes[i] for i in range(1, len(shapes)) if counts[i] == counts[i - 1]]
    assert (10, 4) in direct and (12, 4) in direct and (13, 4) in direct, direct
    assert (1, 4) not in direct and (1, 1) not in direct, direct


@pytest.mark.parametrize("name", ["softmax", "decoder block"])
def test_inputs_sliced_from_larger_arrays_are_addressed_alike_on_both_paths(name):
    """C-contiguous inputs over larger arrays (a caller's slices), first call included: the generic path
    addresses each as an array of its own, as the instance function does, so the two paths launch the same
    words and the same cycles, and the program keeps its written-out encodes (a first call on views used to
    cost it them: the decoder's new shapes took twice as long)."""
    from dvmlang.fuser import build as fbuild

    w = next(w for w in pops.WORKLOADS if w.name == name)

    def sliced(a):
        return np.concatenate([a, a], axis=0)[:a.shape[0]] if a.ndim == 2 and a.shape[0] > 1 else a

    def make_args(rng, L):
        return tuple(sliced(a) for a in w.args(rng, L))

    fast = _compare(w.graph, make_args, [16, 9, 16, 23, 9], static=w.static)
    fbuild.settle()
    fns = [f for p in fast._captured.values() if p is not None for f in p._fast.values() if f]
    assert fns and all("code = W" in f.sized_source for f in fns)
    assert _words_agree(fast, w, [31, 16, 40], 4, wrap=sliced) >= 2


def test_the_split_plan_s_function_is_written_when_the_split_plan_first_runs():
    """After the first call the worker writes the fused plan's function only, and builds the split plan's
    kernels once a row has changed: a program whose rows never outgrow the row block never pays for the split
    plan's function. The split plan's first call runs the generic path on the kernels built ahead (no build) and
    hands its function to the worker; its later calls are served by it, with the generic path's results."""
    g = dvmlang.graph(lambda x: ops.softmax(x, axis=-1))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    g(x)
    _settle()
    assert _fast_count(g) == 1 and g.stats.built_ahead == 0
    prog = next(p for p in g._captured.values() if p is not None)
    assert prog.run_fast([rng.standard_normal((4, 16)).astype(np.float32)], dvmlang.npu.default_device())
    _settle()  # (the row changed: the split plan's kernels are built ahead)
    assert prog.plan.has_fallback and g.stats.built_ahead >= 1
    builds = g.stats.builds
    served = []
    for L in (300, 8, 300, 700, 8):
        x = rng.standard_normal((4, L)).astype(np.float32)
        fast = prog.run_fast([x], dvmlang.npu.default_device())
        _settle()
        served.append(fast is not None)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(fast.values[prog.graph.outputs[0].id] if fast is not None else g(x),
                                   e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
        if fast is None:
            _settle()
    assert served == [False, True, True, True, True], served
    assert g.stats.builds == builds and _fast_count(g) == 2


def test_a_kept_input_reaches_the_device_as_the_same_arrays_and_is_never_held(monkeypatch):
    """A caller that passes the same array again (a weight: a view of its tensor's memory, as the torch backend
    passes it) gives the device the same flat arrays at every call (what the L2 model knows a buffer by); a
    1-D input is its own flat array; nothing an input reaches is kept alive by the program once the caller lets
    it go, whether it owns its memory or is a view."""
    import weakref

    from dvmlang.npu import device as npu_device

    seen = []
    run_stack = npu_device.Device.run_stack

    def recording(self, stages, name=None, trace=None):
        seen.append([list(it.arrays.values()) if isinstance(it.arrays, dict) else list(it.arrays)
                     for st in stages for it in st])
        return run_stack(self, stages, name=name, trace=trace)

    monkeypatch.setattr(npu_device.Device, "run_stack", recording)
    g = dvmlang.graph(lambda x, w, b: ops.gelu(x @ w + b) * 2.0 + x[:, :1])
    rng = np.random.default_rng(3)
    root = rng.standard_normal((32, 48)).astype(np.float32)
    w, b = root[...], rng.standard_normal(48).astype(np.float32)
    for _ in range(2):  # (the instance function is written after the first call)
        g(rng.standard_normal((20, 32)).astype(np.float32), w, b)
    _settle()
    assert _fast_count(g) >= 1
    x = rng.standard_normal((20, 32)).astype(np.float32)
    calls = []
    for _ in range(3):
        seen.clear()
        out = g(x, w, b)
        calls.append(seen[0])
        np.testing.assert_allclose(out, _gelu_ref(x @ w + b) * 2.0 + x[:, :1], rtol=1e-4, atol=1e-4)
    flat_w = [a for k in calls[-1] for a in k if np.shares_memory(a, root)]
    assert flat_w and all(any(a is f for k in calls[-2] for a in k) for f in flat_w), "a new view of w per call"
    assert any(a is b for k in calls[-1] for a in k), "a 1-D input is its own flat array"
    refs = [weakref.ref(root), weakref.ref(x), weakref.ref(b)]
    del w, root, x, b, calls, flat_w, out
    seen.clear()
    assert all(r() is None for r in refs), "the program holds an input the caller let go"


def _gelu_ref(v):
    from math import erf, sqrt

    return v * 0.5 * (1.0 + np.vectorize(lambda t: erf(t / sqrt(2.0)))(v).astype(np.float32))


def _attention_out(a, v, w):
    o = a @ v  # (H, L, D): stored as (L, H, D), the order its reader views it in (canonical._store_in_order)
    t = ops.transpose(o, 0, 1)
    return ops.reshape(t, (t.shape[0], t.shape[1] * t.shape[2])) @ w


def test_an_intermediate_stored_in_its_readers_order_is_pooled(monkeypatch):
    """An intermediate stored permuted (an attention's output, stored in the order the output projection reads
    it) comes from the program's buffers as the other intermediates do: every call at one size gives the device
    the same array for it (what the L2 model knows a buffer by), and the outputs equal the generic path's."""
    from dvmlang.npu import device as npu_device

    def args(rng, L):
        return (rng.standard_normal((4, L, L)).astype(np.float32), rng.standard_normal((4, L, 8)).astype(np.float32),
                rng.standard_normal((32, 16)).astype(np.float32))
    g = _compare(_attention_out, args, LENGTHS)
    assert _fast_count(g) >= 1
    seen = []
    run_stack = npu_device.Device.run_stack

    def recording(self, stages, name=None, trace=None):
        seen.append([list(it.arrays.values()) for st in stages for it in st])
        return run_stack(self, stages, name=name, trace=trace)

    monkeypatch.setattr(npu_device.Device, "run_stack", recording)
    rng = np.random.default_rng(5)
    for _ in range(2):
        g(*args(rng, 16))
    first, second = seen
    assert len(first) == 2, "the product and the projection, one launch each"
    stored = first[0][-1]  # the first launch's output: the intermediate the second reads
    assert any(a is stored for a in first[1]), "the projection reads the stored intermediate"
    assert second[0][-1] is stored, "a new buffer for the permuted intermediate at every call"


def test_a_program_of_static_sizes_launches_its_first_calls_instances_again():
    """A program whose sizes are all static has no size to key its instances by: the instances its first (generic)
    call encoded are the ones its instance function launches at the next calls (nothing encoded again, the same
    bytecodes, whose kept timing and recorded paths the device reuses). Outputs stay numpy's."""
    g = dvmlang.graph(lambda x, y: ops.softmax(x * 2.0, axis=-1) + ops.sum(y, axis=0),
                      static={"x": (0, 1), "y": (0, 1)})
    rng = np.random.default_rng(3)
    launched = []
    for _ in range(4):
        x = rng.standard_normal((16, 40)).astype(np.float32)
        y = rng.standard_normal((5, 40)).astype(np.float32)
        z = x.astype(np.float64) * 2.0
        want = np.exp(z - z.max(-1, keepdims=True)) / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)
        np.testing.assert_allclose(g(x, y), want + y.sum(axis=0), rtol=1e-5, atol=1e-5)
        launched.append((g.stats.encodes, [id(m.bytecode) for m in g.last_launch.members]))
    assert _fast_count(g) >= 1
    assert all(enc == launched[0][0] for enc, _ in launched), launched
    assert all(ids == launched[0][1] for _, ids in launched), "a later call launched other bytecodes"
