"""Timing computed once per instance (docs/device.md, "Cached timing"): a relaunch that takes the kept timing and
runs the numerics alone gives the record and the outputs a relaunch timed in full gives, for every launch of the
gallery and of the Triton tutorials, and for random kernels (the differential generators' expression and control
flow kernels). Each launch is replayed on its own arrays as the launch left them (other data, the same timing)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvmlang.errors import DvmWarning
from dvmlang.npu.device import Device
from fuzzing import budget

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py"))
TUTORIALS = sorted(f"triton/{p.stem}" for p in (ROOT / "examples" / "triton").glob("*.py")
                   if not p.name.startswith("_"))
FIELDS = ("cycles", "bytes_read", "bytes_written", "instructions", "pipe_busy", "hbm_bytes", "l2_hit_bytes",
          "writeback_bytes", "unaligned_cycles", "hbm_stretch", "prints")


def _record(rec) -> tuple:
    return tuple(getattr(rec, f) for f in FIELDS) + tuple(_record(m) for m in rec.members)


def _copies(arrays: dict, roots: dict | None = None) -> dict:
    """``arrays`` on copies of their buffers: arrays that share a buffer (one kernel's output, the next one's
    input, in a stack) share its copy (``roots``: root id -> its copy, across calls)."""
    roots = {} if roots is None else roots
    out = {}
    for k, a in arrays.items():
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        copy = roots.get(id(root))
        if copy is None:
            copy = roots[id(root)] = (root, root.copy())
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        out[k] = np.ndarray(a.shape, a.dtype, copy[1], offset, a.strides)
    return out


class Replays:
    """Launches replayed on three fresh devices: a relaunch that may take the kept timing, one timed in full
    (the cache off), and one in check mode (timed in full and compared with the kept figures)."""

    def __init__(self):
        self.cached = self.launches = 0

    def one(self, run):
        """``run(device, arrays_fn)`` launches once on ``device``; it is run twice per device."""
        results = []
        for mode in (True, False, "check"):
            dev = Device(timing_cache=mode)
            run(dev)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DvmWarning)
                rec, outs = run(dev)
            results.append((_record(rec), [o.tobytes() for o in outs]))
            if mode is True:
                self.cached += _served_from_cache(rec)
        self.launches += 1
        assert results[0] == results[1] == results[2], "a relaunch with the kept timing differs from a full one"

    def kernel(self, bc, arrays, alias, name):
        def run(dev):
            a = _copies(arrays)
            return dev.run(bc, a, name=name, alias_groups=alias), list(a.values())
        self.one(run)

    def stack(self, stages, name):
        def run(dev):
            roots: dict = {}
            copied = [[(bc, _copies(arrays, roots), kname, alias) for bc, arrays, kname, alias in stage]
                      for stage in stages]
            rec = dev.run_stack(copied, name=name)
            return rec, [a for stage in copied for _, arrays, _, _ in stage for a in arrays.values()]
        self.one(run)


def _served_from_cache(rec) -> int:
    return 1 if rec.timing_kept or (rec.members and all(m.timing_kept for m in rec.members)) else 0


def _captured(name: str, monkeypatch) -> list:
    """Every launch of example ``name``'s ``run()``: (kind, arguments), with copies of its arrays as they were."""
    seen = []
    run, run_stack = Device.run, Device.run_stack

    def record(self, bc, arrays, **kw):
        seen.append(("kernel", (bc, _copies(arrays), kw.get("alias_groups"), kw.get("name"))))
        return run(self, bc, arrays, **kw)

    def record_stack(self, stages, **kw):
        roots: dict = {}
        seen.append(("stack", ([[(bc, _copies(a, roots), n, al) for bc, a, n, al in s] for s in stages],
                               kw["name"])))
        return run_stack(self, stages, **kw)

    monkeypatch.setattr(Device, "run", record)
    monkeypatch.setattr(Device, "run_stack", record_stack)
    if name.startswith("triton/"):
        pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(f"_timing_{name.replace('/', '_')}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        with Device(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", DvmWarning)
            spec.loader.exec_module(mod)
            mod.run()
    finally:
        del sys.modules[spec.name]
        monkeypatch.undo()
    return seen


@pytest.mark.parametrize("name", EXAMPLES + TUTORIALS)
def test_kept_timing_replays_every_gallery_launch(name, monkeypatch):
    launches = _captured(name, monkeypatch)
    assert launches
    replays = Replays()
    with contextlib.redirect_stdout(io.StringIO()):
        for kind, args in launches[:40]:  # (a tutorial's benchmark sweep relaunches the same kernels)
            if kind == "kernel":
                replays.kernel(*args)
            else:
                replays.stack(*args)


def test_the_timing_is_kept_for_most_gallery_launches(monkeypatch):
    """Not vacuous: most of the gallery's kernels have timing that does not depend on the data."""
    replays = Replays()
    for name in ("vector_add", "softmax", "matmul", "layernorm", "graph_block", "flash_attention"):
        for kind, args in _captured(name, monkeypatch)[:10]:
            with contextlib.redirect_stdout(io.StringIO()):
                if kind == "kernel":
                    replays.kernel(*args)
                else:
                    replays.stack(*args)
    assert replays.cached >= 0.8 * replays.launches, (replays.cached, replays.launches)


def random_expression_launch(seed: int):
    """(bytecode, arrays) of a random expression kernel (test_diff_kernels' generator)."""
    from test_diff_kernels import random_program
    kernel, _, args, constexprs, grid, *_ = random_program(seed)
    bc = kernel.encode(grid, *args, **constexprs)
    return bc, {i: np.asarray(a).reshape(-1) for i, a in enumerate(args) if isinstance(a, np.ndarray)}


def random_control_flow_launch(data):
    """(bytecode, arrays) of a random control-flow kernel (test_diff_control's generator), drawn from ``data``."""
    from test_diff_control import NVALS, kernel_of, programs
    stmts = data.draw(programs())
    grid = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(-1, 4))
    vals = np.array(data.draw(st.lists(st.integers(-4, 6), min_size=NVALS, max_size=NVALS)), np.int32)
    kernel, _ = kernel_of(stmts)
    args = (np.full(4 * grid, -99, np.int32), np.full(grid, -99.0, np.float32), np.zeros(1, np.int32), vals, n)
    bc = kernel.encode((grid,), *args)
    return bc, {i: a.reshape(-1) for i, a in enumerate(args) if isinstance(a, np.ndarray)}


@budget(15)
@given(seed=st.integers(0, 2**31))
def test_kept_timing_replays_random_expression_kernels(seed):
    Replays().kernel(*random_expression_launch(seed), None, None)


@budget(40)
@given(data=st.data())
def test_kept_timing_replays_random_control_flow_kernels(data):
    Replays().kernel(*random_control_flow_launch(data), None, None)


def test_a_kernel_whose_branches_test_loaded_values_is_timed_every_launch():
    """Collatz: the loop's trip count is the data's; the device never keeps its timing."""
    from test_device_budget import collatz
    x = np.array([3, 7, 27, 1], np.int32)
    out = np.zeros(4, np.int32)
    dev = Device()
    first = collatz[(4,)](x, out, device=dev)
    x[:] = [1, 1, 1, 1]
    second = collatz[(4,)](x, out, device=dev)
    assert second.cycles < first.cycles and not second.timing_kept
    assert out.tolist() == [0, 0, 0, 0]
