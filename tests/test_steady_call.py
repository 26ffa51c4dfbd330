"""The steady call's host work (docs/device.md, "Host speed"): what a replay stores on chip, how a batch reads the
boxes of a grid of programs, a stacked launch's kept plan and the L2 model's view offsets. Each is compared with
what it replaces: the replay with ``Device(replay=False)`` and the step-by-step reads, the grid read with each
program's box read alone, the plan with the general way of ``run_stack``."""

from __future__ import annotations

import importlib
import re
from types import SimpleNamespace

import numpy as np
import pytest

import dvmlang.npu.steady as steady_mod
from dvmlang.npu import dma
from dvmlang.npu.device import Device
from dvmlang.npu.l2 import _address
from dvmlang.npu.replay import Replay, _dead_stores
from test_timing_cache import _record

# ---- the replay's stores in the unified buffer -------------------------------------------------------------------


def test_a_store_overwritten_before_any_read_is_dead():
    """``_dead_stores`` on hand-made bodies: (line, lo, hi) a whole-tile store, a list the ranges a line reads."""
    # stored at [0, 64), overwritten whole at line 3 before line 4 reads it: line 0 dead, line 3 live
    assert _dead_stores([(0, 0, 64), [(128, 192)], (3, 0, 64), [(0, 64)]]) == {0}
    # only part of it overwritten: the rest is read from the first store
    assert _dead_stores([(0, 0, 64), (1, 0, 32), [(0, 64)]]) == set()
    # read before the overwrite
    assert _dead_stores([(0, 0, 64), [(16, 20)], (2, 0, 64)]) == {2}
    # an overwrite that is not a dropped line (a resolved load: line None) kills as well
    assert _dead_stores([(0, 0, 64), (None, 0, 64), [(0, 64)]]) == {0}
    # pieces: [0, 64) cut by [16, 32), then [0, 16) read: the first store is live; nothing read after: the last dead
    assert _dead_stores([(0, 0, 64), (1, 16, 32), [(0, 16)], (3, 0, 8)]) == {1, 3}
    # a read of any bytes (a tile whose layout the kernel lacks) keeps every earlier store
    assert _dead_stores([(0, 0, 64), (1, 64, 128), [(0, 1 << 62)]]) == set()


def test_dead_stores_are_worked_out_per_space_and_any_read_keeps_every_space_alive():
    """``cube_chain.dead_stores`` (the cube spaces' pass and the unified buffer's): a store is dead when a later store
    of the same space overwrites it before a read of that space; a read of any bytes (None: a step whose tiles are
    not all known) keeps the stores of every space before it, but for what a later store overwrites first."""
    from dvmlang.npu.cube_chain import SPACES, dead_stores

    # the same bytes of two spaces: overwriting L0A's does not kill L1's
    assert dead_stores([(0, "l1", 0, 64), (1, "l0a", 0, 64), (2, "l0a", 0, 64), [("l1", 0, 64)]], SPACES) == {1, 2}
    # a read of any bytes: both spaces live, but for a store overwritten whole before it
    assert dead_stores([(0, "l1", 0, 64), (1, "l0c", 0, 32), (2, "l0c", 0, 32), None], SPACES) == {1}
    # nothing read after: every store dead
    assert dead_stores([(0, "l1", 0, 64), (1, "l0b", 0, 64)], SPACES) == {0, 1}
    # a read of one space keeps only that space's store
    assert dead_stores([(0, "l1", 0, 64), (1, "l0b", 0, 64), [("l0b", 8, 16)]], SPACES) == {0}


def _stores(rp: Replay) -> int:
    """The tiles a replay stores in the unified buffer: vector results, and loads kept in the buffer too."""
    return len(re.findall(r"^\s+(MU\[\d+\] = Slot|place_among\(|t\d+ = LV\d+\(b, L, True\))", rp.source, re.M))


def test_the_models_replays_drop_the_stores_overwritten_before_a_read(monkeypatch):
    """The replays of a torch model store fewer tiles than vector instructions they compute (a result overwritten
    on chip before any step reads it there is a local variable only, and so is a loaded tile), and the model's calls
    are those of a device that never replays, bit for bit (outputs and every launch's record)."""
    torch = pytest.importorskip("torch")
    from test_replay import _models, compiled_calls
    f, make = _models()["llama_tiny"]
    torch.manual_seed(7)
    inputs = [make() for _ in range(5)]
    made = []
    generate = steady_mod._replay.generate

    def spy(m, trace, n):
        rp = generate(m, trace, n)
        if rp is not None:
            made.append(rp)
        return rp
    monkeypatch.setattr(steady_mod._replay, "generate", spy)
    results = [compiled_calls(f, inputs, replay) for replay in (True, False)]
    assert results[0] == results[1]
    assert made
    # (a vector instruction's line: its function's result, through the writer's finish unless that would leave
    # it as it is)
    computed = sum(len(re.findall(r"^\s+t\d+ = (?:FIN\d+\(|F\d+\(|np\.where\()", rp.source, re.M)) for rp in made)
    stored = sum(_stores(rp) for rp in made)
    loads = sum(len(re.findall(r"= LV\d+\(b, L, False\)", rp.source)) for rp in made)
    assert computed > 0 and stored * 2 < computed, (stored, computed)  # (before: 294 of 295 on this model; 76 now)
    assert loads > 0  # (loads only vector instructions read, into local variables alone)


# ---- a batch's reads of a grid of programs ----------------------------------------------------------------------


def _per_program(g, base, st, lo, hi, shape, pad, dtype):
    """Each program's box read alone (the reference): out[p][box] = the elements at base[p] + sum(st * index)."""
    n = len(base)
    out = np.full((n,) + shape, pad, dtype)
    for p in range(n):
        idx = np.indices(tuple(h - lo_ for lo_, h in zip(lo, hi))).reshape(len(shape), -1)
        if idx.shape[1] == 0:
            continue
        flat = base[p] + sum((i + lo_) * s for i, lo_, s in zip(idx, lo, st))
        box = tuple(i + lo_ for i, lo_ in zip(idx, lo))
        out[(p,) + box] = g[flat]
    return out


def test_a_grid_of_programs_reads_each_programs_box():
    """``dma.dma_read`` where the programs' bases form a grid (rows and columns of tiles, in either order, or a
    permutation of stepping windows), whole tiles and partial boxes: each program's box, as read alone."""
    rng = np.random.default_rng(38)
    seen = set()
    for trial in range(300):
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        th, tw = int(rng.integers(1, 5)), int(rng.integers(1, 9))
        ld = tw * int(rng.integers(1, 4)) + int(rng.integers(0, 3))
        pm, pn = np.divmod(np.arange(rows * cols), cols)
        if trial % 3 < 2:  # a grid: a row step and a column step (windows may overlap: reads only)
            base = pm * int(rng.integers(0, 3 * th * ld)) + pn * int(rng.integers(1, 3 * tw))
        else:  # windows stepping uniformly, taken in another order
            base = rng.permutation(rows * cols) * int(rng.integers(1, 2 * tw))
        g = rng.standard_normal(int(base.max()) + th * ld + tw + 1).astype(np.float32)
        shape = (th, tw)
        lo = [int(rng.integers(0, 2)) if rng.random() < 0.3 else 0, 0]
        hi = [th if rng.random() < 0.7 else int(rng.integers(lo[0], th + 1)), tw if rng.random() < 0.7 else
              int(rng.integers(0, tw + 1))]
        st = [ld, 1]
        b = SimpleNamespace(n=len(base))
        desc = dma.Desc(b, lambda b, v=base: v, [lambda b, v=s: v for s in st], [lambda b, v=v: v for v in lo],
                        [lambda b, v=v: v for v in hi], shape)
        want = _per_program(g, base, st, lo, hi, shape, -3.0, np.float32)
        got, _ = dma.dma_read(g, desc, shape, np.float32, -3.0, len(base))
        assert np.array_equal(np.broadcast_to(got, want.shape), want), trial
        u = dma._uniform_desc(desc, len(base))
        if u is not None and u.prog is None and len(base) > 1:
            seen.add((dma._grid_of(desc, len(base)) is not None, u.full(shape)))
    assert (True, True) in seen and (True, False) in seen  # (the grid path, whole and partial boxes, was taken)


# ---- the stacked launch's kept plan ---------------------------------------------------------------------------


def test_stacks_taken_in_turn_on_one_device_are_the_general_ways(monkeypatch):
    """Two torch models called in turn on one device (each call's stack replaces the kept plan of the other's
    first kernel), then a device whose options change mid-stream: outputs and records as ``Device(replay=False)``,
    the plans kept and used."""
    torch = pytest.importorskip("torch")
    from test_replay import _models
    tst = importlib.import_module("dvmlang.torch.stats")
    models = _models()
    torch.manual_seed(3)
    pairs = [(models[n][0], models[n][1]) for n in ("mlp", "norm_gelu_silu_block")]
    inputs = [[make() for _ in range(6)] for _, make in pairs]
    kept = []
    members = steady_mod.members

    def spy(device, stages):
        hit = steady_mod._kept(device, stages, device.profile, (device.debug, device.watchdog,
                                                                 device.race_detection)) is not None
        kept.append(hit)
        return members(device, stages)
    monkeypatch.setattr(steady_mod, "members", spy)
    results = []
    for replay in (True, False):
        torch._dynamo.reset()
        dev = Device(replay=replay)
        compiled = [torch.compile(f, backend="dvmlang") for f, _ in pairs]
        got = []
        with dev, torch.no_grad():
            for k in range(6):
                if k == 4:
                    dev.watchdog = 1 << 30  # (new options: every plan made anew)
                for c, ins in zip(compiled, inputs):
                    tst.LAST_LAUNCHES.clear()
                    out = c(*ins[k])
                    outs = out if isinstance(out, tuple) else (out,)
                    got.append(([o.detach().numpy().tobytes() for o in outs],
                                [_record(r) for r in tst.LAST_LAUNCHES]))
        results.append((got, dev.simulated_cycles))
    assert results[0] == results[1]
    assert any(kept) and not all(kept)


# ---- the L2 model's view offsets --------------------------------------------------------------------------------


def test_an_arrays_address_is_numpys():
    r = np.zeros(1000, np.float32)
    ro = r[4:]
    ro.flags.writeable = False
    for a in (r, r[10:500], r[10:500].reshape(10, 49), r[::2], r[5:], r[0:0], np.zeros((3, 4))[:, 1],
              np.broadcast_to(r[3:4], (5,)), r.view(np.uint8)[3:], ro, np.zeros(0), np.zeros((2, 3)).T):
        assert _address(a) == a.__array_interface__["data"][0]


def test_a_stack_of_no_kernel_or_an_empty_stage_runs(monkeypatch):
    """``run_stack`` of no stage, of an empty stage (what a lazy flush of views alone hands the device), and of an
    empty stage before a model's stages, called again and again, on the steady device and on
    ``Device(replay=False)``: the same records and outputs."""
    torch = pytest.importorskip("torch")
    from test_replay import _models
    f, make = _models()["mlp"]
    torch.manual_seed(5)
    args = make()
    out = []
    for replay in (True, False):
        dev = Device(replay=replay)
        seen = []
        run_stack = Device.run_stack

        def spy(self, stages, **kw):
            seen.append(stages)
            return run_stack(self, stages, **kw)
        monkeypatch.setattr(Device, "run_stack", spy)
        torch._dynamo.reset()
        with dev, torch.no_grad():
            c = torch.compile(f, backend="dvmlang")
            c(*args)
        monkeypatch.setattr(Device, "run_stack", run_stack)
        got = []
        for _ in range(4):
            for stages in ([], [[]], [[]] + seen[-1], seen[-1] + [[]]):
                got.append(_record(dev.run_stack(stages, name="s")))
                got.append([a.tobytes() for stage in stages for item in stage for a in item[1].values()])
        out.append(got)
    assert out[0] == out[1]
