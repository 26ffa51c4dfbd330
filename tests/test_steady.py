"""The steady launch (``npu/steady.py``): a member of a stacked launch whose timing is kept and whose path is
replayed runs without the launch's machinery. Random fused programs (the fuser property test's generator) and the
torch models of the test suite are called many times, with new data, shapes alternating, aliased arguments and a
trace requested in the middle of the stream, on a device that takes the steady way, on one that never replays
(``Device(replay=False)``) and on the sequential device. Every call's outputs must be the same bits, its record
(cycles, bytes, instructions, pipe times, L2 figures, and each member's) the same as the full path's, its cycles
the sequential device's, and the devices' summed cycles the same."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dvmlang
import dvmlang.npu.steady as steady_mod
from dvmlang.npu.device import Device
from fuzzing import budget
from test_fuser_property import as_graph, programs
from test_timing_cache import _record


class _Count:
    """Launches that took the steady way (``steady.run`` returned a record)."""

    def __init__(self, monkeypatch):
        self.n = 0
        run = steady_mod.run

        def counted(*a):
            rec = run(*a)
            self.n += rec is not None
            return rec
        monkeypatch.setattr(steady_mod, "run", counted)


def _inputs(rng, rows, cols):
    return (rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal((rows, cols)).astype(np.float32),
            rng.standard_normal((rows, 1)).astype(np.float32), rng.standard_normal(cols).astype(np.float32))


def _calls(shapes, seed, n=9):
    """``n`` calls' inputs: new data at every call, the shapes taken in turn (alternating when there are two)."""
    rng = np.random.default_rng(seed)
    return [_inputs(rng, *shapes[k % len(shapes)]) for k in range(n)]


TRACE_AT = 5  # the call made inside a trace session


def _stream(steps, n_out, dev, calls, trace_at=TRACE_AT, same_x=False):
    """Each call's (output bits, record) on ``dev``, the call ``trace_at`` traced; with ``same_x`` the first two
    arguments are one array (aliased inputs)."""
    g = as_graph(steps, n_out, True)
    out = []
    for k, (x, y, r, w) in enumerate(calls):
        args = (x, x if same_x else y, r, w)
        if k == trace_at:
            with dvmlang.trace():
                got = g(*args, device=dev)
        else:
            got = g(*args, device=dev)
        got = got if isinstance(got, tuple) else (got,)
        rec = g.last_launch
        out.append(([o.tobytes() for o in got], _record(rec) if rec is not None else None,
                     rec.cycles if rec is not None else None))
    return out, dev.simulated_cycles


def _compare(steps, n_out, calls, same_x=False):
    steady, full, seq = Device(), Device(replay=False), Device(sequential=True)
    a, ca = _stream(steps, n_out, steady, calls, same_x=same_x)
    b, cb = _stream(steps, n_out, full, calls, same_x=same_x)
    c, cc = _stream(steps, n_out, seq, calls, same_x=same_x)
    assert a == b, "a steady call differs from the full path's"
    assert ca == cb
    assert [(o, cyc) for o, _, cyc in a] == [(o, cyc) for o, _, cyc in c], "a steady call differs from the sequential device's"
    assert ca == cc


def _shapes(draw_shapes):
    return [(rows + 1 if rows == 1 else rows, cols + 1 if cols == 1 else cols) for rows, cols in draw_shapes]


@budget(12)
@given(prog=programs(), shapes=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 70)), min_size=1, max_size=2),
       seed=st.integers(0, 2 ** 16), same_x=st.booleans())
def test_steady_calls_of_random_programs_are_the_full_paths(prog, shapes, seed, same_x):
    steps, n_out = prog
    _compare(steps, n_out, _calls(_shapes(shapes), seed), same_x)


def test_random_programs_take_the_steady_way(monkeypatch):
    """Not vacuous: the steady way runs, and most relaunches take it (after a call times, and one records)."""
    count = _Count(monkeypatch)
    steps = [("unary", "exp_tanh", (0,)), ("binary", "add", (4, 1)), ("reduce", "sum", (5,)), ("binary", "mul", (6, 2))]
    calls = _calls([(4, 33), (7, 12)], 3, n=12)
    _compare(steps, 1, calls)
    steady_calls = count.n
    assert steady_calls >= 6, steady_calls


def test_a_steady_launch_after_a_fault_is_the_full_paths(monkeypatch):
    """A fault in a steady launch (an out-of-range gather) fails as the full path does, and the launches after it
    are the full path's again."""
    import dvmlang.ops as ops

    count = _Count(monkeypatch)
    outcomes = []
    for replay in (True, False):
        dev = Device(replay=replay)

        @dvmlang.graph(device=dev)
        def pick(x, idx):
            return ops.gather(x, 1, idx) * 2.0 + 1.0

        x = np.arange(3 * 16, dtype=np.float32).reshape(3, 16)
        good = np.tile(np.arange(8, dtype=np.int32)[::-1], (3, 1))
        bad = good.copy()
        bad[1, 3] = 99
        got = []
        for idx in (good, good, good, good, bad, good, good, bad, good):
            try:
                got.append((pick(x, idx).tobytes(), _record(pick.last_launch)))
            except dvmlang.DvmError as e:
                got.append((type(e).__name__, str(e)))
        outcomes.append((got, dev.simulated_cycles))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0][4][0] != outcomes[0][0][3][0]  # (the fault)
    assert count.n >= 2


# ---- the torch models of the test suite -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "transformer_encoder_layer", "llama_tiny", "sdpa_causal_and_bool_mask",
                                  "cumsum_flip_pad_tril", "embedding_index_select_gather"])
def test_steady_model_calls_are_the_full_paths(name, monkeypatch):
    """A model's calls (new data each time, a trace in the middle) on the steady device and on
    ``Device(replay=False)``: outputs, every launch's record, and the devices' summed cycles."""
    torch = pytest.importorskip("torch")
    from test_replay import _models
    tst = importlib.import_module("dvmlang.torch.stats")
    f, make = _models()[name]
    torch.manual_seed(2)
    inputs = [make() for _ in range(8)]
    count = _Count(monkeypatch)
    results = []
    for replay in (True, False):
        torch._dynamo.reset()
        dev = Device(replay=replay)
        with dev:
            c = torch.compile(f, backend="dvmlang")
            got = []
            with torch.no_grad():
                for k, args in enumerate(inputs):
                    tst.LAST_LAUNCHES.clear()
                    if k == 4:
                        with dvmlang.trace():
                            out = c(*args)
                    else:
                        out = c(*args)
                    outs = out if isinstance(out, tuple) else (out,)
                    got.append(([o.detach().numpy().tobytes() for o in outs],
                                [_record(r) for r in tst.LAST_LAUNCHES]))
        results.append((got, dev.simulated_cycles))
    assert count.n > 0, "no launch took the steady way"
    assert results[0] == results[1], "a steady model call differs from the full path's"


def test_compiled_outputs_keep_torchs_stride_order_at_every_call():
    """A result whose fake value has another stride order than C's (an elementwise op on a permuted view keeps the
    view's order in eager): the compiled graph gives it that order at its first call and at the steady ones after
    (the order is worked out once per output: ``partition.stride_order``)."""
    torch = pytest.importorskip("torch")

    def f(x):
        return x.permute(0, 2, 1) * 2.0 + 1.0, (x * 3.0).transpose(0, 1)

    torch._dynamo.reset()
    c = torch.compile(f, backend="dvmlang")
    for k in range(4):
        x = torch.randn(3, 4, 5) if k % 2 == 0 else torch.randn(2, 6, 7)
        want = f(x)
        got = c(x)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.stride() == w.stride(), (k, g.stride(), w.stride())
            assert torch.equal(g, w)


def test_steady_calls_with_alternating_shapes_under_dynamic_shapes_are_the_full_paths(monkeypatch):
    """``torch.compile(dynamic=True)``: one graph, its programs' instances alternating with the batch size (as a
    decode loop's lengths do): outputs, every launch's record and the summed cycles as ``Device(replay=False)``."""
    torch = pytest.importorskip("torch")
    tst = importlib.import_module("dvmlang.torch.stats")
    torch.manual_seed(3)
    lin1, lin2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def f(x):
        h = torch.nn.functional.gelu(lin1(x))
        return torch.softmax(lin2(h), dim=-1) + x

    xs = [torch.randn(n, 16) for n in (5, 9, 5, 9, 3, 5, 9, 3, 5)]
    count = _Count(monkeypatch)
    results = []
    for replay in (True, False):
        torch._dynamo.reset()
        dev = Device(replay=replay)
        with dev:
            c = torch.compile(f, backend="dvmlang", dynamic=True)
            got = []
            with torch.no_grad():
                for x in xs:
                    tst.LAST_LAUNCHES.clear()
                    got.append((c(x).numpy().tobytes(), [_record(r) for r in tst.LAST_LAUNCHES]))
        results.append((got, dev.simulated_cycles))
    assert count.n > 0, "no launch took the steady way"
    assert results[0] == results[1]


def test_a_steady_state_whose_timing_was_dropped_or_whose_launch_is_held_takes_the_general_way(monkeypatch):
    """Mid-stream, every launch base's kept timings are dropped (as a base keeping 16 timings drops them) on both
    devices, then the steady device's launches are held (as another thread's launch holds them): the calls after
    each are still the full path's, and the steady way comes back."""
    bases: dict = {}
    made = Device._bases

    def collect(self, *a):
        base = made(self, *a)
        bases.setdefault(id(self), {})[id(base)] = base
        return base
    monkeypatch.setattr(Device, "_bases", collect)
    count = _Count(monkeypatch)
    steps = [("unary", "tanh", (0,)), ("reduce", "softmax", (4,)), ("binary", "add", (5, 1)),
             ("reduce", "max", (6,))]
    calls = _calls([(5, 40), (3, 17)], 11, n=14)
    out = []
    for dev in (Device(), Device(replay=False)):
        g = as_graph(steps, 2, True)
        got = []
        for k, args in enumerate(calls):
            if k == 6:
                for base in bases[id(dev)].values():
                    base.timing.clear()
            if k == 10:  # (both shapes' steady states made again, at calls 8 and 9)
                for base in bases[id(dev)].values():
                    if base.steady is not None:
                        base.steady.spare.clear()
            res = g(*args, device=dev)
            got.append(([o.tobytes() for o in res], _record(g.last_launch), count.n))
        out.append((got, dev.simulated_cycles))
    steady, full = out
    assert [(o, r) for o, r, _ in steady[0]] == [(o, r) for o, r, _ in full[0]] and steady[1] == full[1]
    n = [c for _, _, c in steady[0]]
    # steady before the drop, not at the calls that time again (6, 7), again after them (8, 9), never while held
    assert n[5] > n[3] and n[7] == n[5] and n[9] > n[8] > n[7] and n[13] == n[9], n


def test_a_stacked_launchs_record_sums_its_members_as_the_dataclass_did():
    """``LaunchRecord.combined`` (one pass, a record made by ``LaunchRecord.of``) against the sums written out as
    the dataclass constructor took them, on the stacked launches of a torch model's first and steady calls."""
    torch = pytest.importorskip("torch")
    from dvmlang.npu.device import LaunchRecord

    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 8)).eval()
    seen = []
    combined = LaunchRecord.combined.__func__

    def spy(cls, name, parts, cycles, kind, launch_overhead, profile, launches=1):
        total = combined(cls, name, parts, cycles, kind, launch_overhead, profile, launches)
        seen.append((list(parts), total, (name, cycles, kind, launch_overhead, profile, launches)))
        return total
    torch._dynamo.reset()
    LaunchRecord.combined = classmethod(spy)
    try:
        with Device():
            c = torch.compile(model, backend="dvmlang")
            with torch.no_grad():
                for n in (5, 5, 5, 5):
                    c(torch.randn(n, 16))
    finally:
        LaunchRecord.combined = classmethod(combined)
    assert any(len(parts) > 1 for parts, _, _ in seen)
    for parts, total, (name, cycles, kind, overhead, profile, launches) in seen:
        want = LaunchRecord(name=name, grid=(), cycles=cycles, bytes_read=sum(r.bytes_read for r in parts),
                            bytes_written=sum(r.bytes_written for r in parts), time_us=cycles / profile.clock_hz * 1e6,
                            cores=max((r.cores for r in parts), default=0), kind=kind, launch_overhead=overhead,
                            profile=profile, group=name, instructions=sum(r.instructions for r in parts),
                            launches=launches, hbm_bytes=sum(r.hbm_bytes for r in parts),
                            l2_hit_bytes=sum(r.l2_hit_bytes for r in parts),
                            writeback_bytes=sum(r.writeback_bytes for r in parts),
                            dispatched=sum(r.dispatched for r in parts),
                            unaligned_cycles=sum(r.unaligned_cycles for r in parts))
        for r in parts:
            for q, v in r.pipe_busy.items():
                want.pipe_busy[q] = want.pipe_busy.get(q, 0.0) + v
        for f in ("name", "grid", "cycles", "bytes_read", "bytes_written", "time_us", "cores", "kind",
                  "launch_overhead", "profile", "group", "instructions", "launches", "hbm_bytes", "l2_hit_bytes",
                  "writeback_bytes", "dispatched", "unaligned_cycles", "pipe_busy", "trace", "start",
                  "hbm_stretch", "timing_kept", "waves", "double_buffer", "bytecode", "prints", "diagnostics"):
            got, exp = getattr(total, f), getattr(want, f)
            assert got == exp and type(got) is type(exp), (f, got, exp)


def _split_cores_as_it_was(stage, prof):
    if len(stage) == 1:
        bc = stage[0][0]
        return [prof.cube_cores if bc.kernels[0].mix else prof.vector_cores]
    out = []
    progs = [bc.kernels[0].grid[0] * bc.kernels[0].grid[1] * bc.kernels[0].grid[2] for bc, _, _, _ in stage]
    for (bc, _, _, _), p in zip(stage, progs):
        mix = bc.kernels[0].mix
        pool = prof.cube_cores if mix else prof.vector_cores
        same = sum(q for (b2, _, _, _), q in zip(stage, progs) if b2.kernels[0].mix == mix)
        n_same = sum(1 for b2, _, _, _ in stage if b2.kernels[0].mix == mix)
        share = max(1, int(pool * p / max(1, same)))
        out.append(min(share, max(1, pool - (n_same - 1))))
    return out


def test_a_stages_cores_are_split_as_before():
    """``device._split_cores`` (one pass over the stage) against its former quadratic form, on random stages."""
    from types import SimpleNamespace

    from dvmlang.npu.device import _split_cores
    rng = np.random.default_rng(38)
    for prof in (Device().profile, Device(profile="910B3").profile):
        for _ in range(3000):
            n = int(rng.integers(1, 9))
            stage = []
            for _ in range(n):
                grid = tuple(int(g) for g in rng.integers(0, 5, 3) ** rng.integers(0, 4, 3))
                kern = SimpleNamespace(grid=grid, mix=bool(rng.integers(0, 2)))
                stage.append((SimpleNamespace(kernels=[kern]), {}, "k", None))
            assert _split_cores(stage, prof) == _split_cores_as_it_was(stage, prof)


def test_a_dropped_programs_stack_plan_keeps_none_of_its_bytecodes():
    """The device keeps a stacked launch's plan under its first bytecode while that bytecode lives: a program that
    is dropped takes its bytecodes (and the simulator's steps for them) with it, and its plan goes too."""
    import gc

    import dvmlang.ops as ops
    dev = Device()
    g = dvmlang.graph(lambda x, w: ops.softmax(ops.matmul(x, w), axis=-1) * 2.0, device=dev)
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((32, 24)).astype(np.float32)
    for _ in range(3):
        g(x, w)
    stacks = dev.__dict__.get("_stacks", {})
    assert stacks  # (the calls took the steady way: their plan is kept)
    refs = [m.bc for _, _, made, _ in stacks.values() for row in made for m in row]
    assert refs and all(r() is not None for r in refs)
    del g
    gc.collect()
    assert all(r() is None for r in refs)
    assert not stacks
