""".dvmb files: save, load, ahead-of-time export, and running a loaded file — in this process and in a fresh
one. Loading is safe on untrusted input: nothing is unpickled or evaluated."""

from __future__ import annotations

import builtins
import dataclasses
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dvmlang
from dvmlang.vm import container as C
from test_bytecode_samples import KERNELS, SAMPLES, sample_args, sample_bytes

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")


@pytest.mark.parametrize("name", SAMPLES)
def test_save_then_load_gives_an_equal_bytecode(tmp_path, name):
    bc = dvmlang.Bytecode.from_bytes(sample_bytes(name))
    path = bc.save(tmp_path / f"{name}.dvmb")
    assert path == tmp_path / f"{name}.dvmb"
    assert path.read_bytes() == sample_bytes(name)
    assert not list(tmp_path.glob("*.tmp"))
    loaded = dvmlang.Bytecode.load(path)
    assert loaded == bc and loaded.to_bytes() == bc.to_bytes()


def test_export_then_run_the_file(tmp_path):
    add = KERNELS["vector_add"]
    x = np.arange(300, dtype=np.float32)
    path = add.export(tmp_path / "add.dvmb", (3,), x, x, np.empty_like(x), 300, BLOCK=128)
    bc = dvmlang.Bytecode.load(path)
    assert bc.name == "add" and bc.grid == (3, 1, 1)
    a = np.random.default_rng(1).random(300, dtype=np.float32)
    b = np.random.default_rng(2).random(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    launch = dvmlang.run(bc, a, b, out, 300)
    np.testing.assert_array_equal(out, a + b)
    assert launch.cycles > 0
    # same signature, new shapes: the grid is the file's, so a smaller problem runs under its masks
    small = np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    dvmlang.run(bc, small, small, out, 100)
    np.testing.assert_array_equal(out, 2 * small)


def test_exported_file_runs_in_a_fresh_process(tmp_path):
    soft = KERNELS["softmax"]
    x = np.random.default_rng(3).standard_normal((4, 50), dtype=np.float32)
    path = soft.export(tmp_path / "softmax.dvmb", (4,), np.empty_like(x), x, 50, 50, BLOCK=64)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, dvmlang
        bc = dvmlang.Bytecode.load({str(path)!r})
        x = np.load({str(tmp_path / 'x.npy')!r})
        out = np.empty_like(x)
        dvmlang.run(bc, out, x, 50, 50)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        print("ok", bc.name, bc.grid)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok softmax (4, 1, 1)"


def test_run_checks_the_arguments_against_the_file():
    bc = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add"))
    x = np.zeros(10, np.float32)
    with pytest.raises(dvmlang.ArgumentError, match="takes 4 arguments"):
        dvmlang.run(bc, x, x, x)
    with pytest.raises(dvmlang.ArgumentError, match="must be a 1-d float32 array"):
        dvmlang.run(bc, x.astype(np.float64), x, x, 10)
    with pytest.raises(dvmlang.ArgumentError, match="must be a 1-d float32 array"):
        dvmlang.run(bc, x.reshape(2, 5), x, x, 10)
    with pytest.raises(dvmlang.ArgumentError, match="expects a dvmlang.Bytecode"):
        dvmlang.run(sample_bytes("vector_add"), x, x, x, 10)


def test_run_of_a_loaded_file_that_overruns_its_arrays_faults(tmp_path):
    bc = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add"))
    x = np.zeros(50, np.float32)
    with pytest.raises(dvmlang.MemoryFault, match="out-of-bounds"):
        dvmlang.run(bc, x, x, np.zeros(50, np.float32), 300)  # n says 300, the arrays hold 50


def test_load_errors_are_dvmlang_errors(tmp_path):
    with pytest.raises(dvmlang.DvmError, match="cannot read"):
        dvmlang.Bytecode.load(tmp_path / "missing.dvmb")
    with pytest.raises(dvmlang.DvmError, match="cannot read"):
        dvmlang.Bytecode.load(tmp_path)
    big = tmp_path / "big.dvmb"
    big.write_bytes(sample_bytes("vector_add"))
    limits = dataclasses.replace(C.LIMITS, max_file_bytes=64)
    with pytest.raises(dvmlang.MalformedBytecodeError, match="too large"):
        dvmlang.Bytecode.load(big, limits)


def test_loading_never_unpickles_or_evaluates(tmp_path, monkeypatch):
    class Boom:
        def __reduce__(self):
            return (print, ("unpickled!",))

    evil = tmp_path / "evil.dvmb"
    evil.write_bytes(pickle.dumps(Boom()))
    calls = []
    for mod, name in ((builtins, "eval"), (builtins, "exec"), (pickle, "loads"), (pickle, "load")):
        monkeypatch.setattr(mod, name, lambda *a, _n=name, **k: calls.append(_n))
    with pytest.raises(dvmlang.MalformedBytecodeError, match="bad magic"):
        dvmlang.Bytecode.load(evil)
    good = tmp_path / "good.dvmb"
    good.write_bytes(sample_bytes("matmul"))
    dvmlang.Bytecode.load(good)
    assert calls == []


def test_save_reports_unwritable_paths(tmp_path):
    bc = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add"))
    with pytest.raises(dvmlang.DvmError, match="cannot write"):
        bc.save(tmp_path / "no" / "such" / "dir.dvmb")


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_runs_from_a_file(tmp_path, name):
    path = dvmlang.Bytecode.from_bytes(sample_bytes(name)).save(tmp_path / "k.dvmb")
    args, check = sample_args(name)
    dvmlang.run(dvmlang.Bytecode.load(Path(path)), *args)
    check(args)
