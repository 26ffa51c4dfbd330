"""The bytecode of every gallery launch and the simulated time it took, pinned: a refactoring of the compiler
or the device must not change a byte or a cycle. (This is also the test that each example runs and checks
itself, without a PerformanceWarning: the gallery shows the DMA path.)

Each launch of each example's ``run()`` (and of each Triton tutorial's in examples/triton/, keyed
``triton/NN_name``; a changed tutorial regenerates its own entry with ``-k NN_name``) is recorded as a digest
of what the device executes (code words, kernels, layouts, relocations, parameters; not the debug section,
whose file names depend on where the checkout lives), followed by the launch's simulated cycles and GM bytes,
and compared with ``tests/golden/bytecode.json``. A deliberate change of the encoding (a new instruction, a
better lowering) regenerates the file:

    DVMLANG_REGEN_GOLDEN=1 python -m pytest tests/test_golden_bytecode.py

and the commit says why the bytes changed.
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
import warnings
from pathlib import Path

import pytest

from dvmlang.autotune import Autotuner
from dvmlang.errors import DvmWarning, PerformanceWarning
from dvmlang.npu.device import Device

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "bytecode.json"
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py"))
# Triton's tutorials (examples/triton/, they need torch): keyed "triton/NN_name"
TUTORIALS = sorted(f"triton/{p.stem}" for p in (ROOT / "examples" / "triton").glob("*.py")
                   if not p.name.startswith("_"))


def digest(bc) -> str:
    h = hashlib.sha256(bc.code.tobytes())
    for part in (bc.kernels, bc.layouts, bc.relocs, bc.params):
        h.update(repr(part).encode())
    return h.hexdigest()[:20]


def _launches(name: str, monkeypatch) -> list[str]:
    seen: list[str] = []
    run, run_stack = Device.run, Device.run_stack

    def timed(rec):
        return f" {rec.cycles}c {rec.bytes_read}r {rec.bytes_written}w"

    def record(self, bc, arrays, **kw):
        rec = run(self, bc, arrays, **kw)
        seen.append(digest(bc) + timed(rec))
        return rec

    def record_stack(self, stages, **kw):
        rec = run_stack(self, stages, **kw)
        seen.append("stack:" + ",".join(digest(bc) for stage in stages for bc, *_ in stage) + timed(rec))
        return rec

    monkeypatch.setattr(Device, "run", record)
    monkeypatch.setattr(Device, "run_stack", record_stack)
    # an autotuner's trial launches are not pinned: whether they run here or in forked processes (and so are
    # seen here) depends on how long the first trial took; the tuned launch and its choice are pinned
    bench_all = Autotuner._bench_all

    def untracked(self, *a, **kw):
        n = len(seen)
        try:
            return bench_all(self, *a, **kw)
        finally:
            del seen[n:]
    monkeypatch.setattr(Autotuner, "_bench_all", untracked)
    if name.startswith("triton/"):
        pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(f"_golden_{name.replace('/', '_')}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        # a fresh device: an example's cycles do not depend on what earlier tests left in the default one's L2
        with Device(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", DvmWarning)  # a tutorial's do_bench of a torch baseline: nan
            if not name.startswith("triton/"):
                warnings.simplefilter("error", PerformanceWarning)  # the gallery shows the DMA path
            spec.loader.exec_module(mod)
            mod.run()
    finally:
        del sys.modules[spec.name]
    return seen


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.parametrize("name", EXAMPLES + TUTORIALS)
def test_gallery_bytecode_is_unchanged(name, golden, monkeypatch):
    got = _launches(name, monkeypatch)  # runs the example, which checks itself against numpy or torch
    assert got, f"{name} launched nothing"
    assert all(int(g.split()[1][:-1]) > 0 for g in got), f"{name}: a launch took no cycles"
    if os.environ.get("DVMLANG_REGEN_GOLDEN"):
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[name] = got
        GOLDEN.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
        return
    assert name in golden, f"no golden bytecode for {name}: run with DVMLANG_REGEN_GOLDEN=1"
    assert got == golden[name], f"the bytecode or the simulated time of {name} changed"
