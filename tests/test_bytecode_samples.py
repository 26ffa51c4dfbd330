"""Real bytecodes the bytecode and fuzz suites work on, and a harness that runs any parsed bytecode on
small arrays built from its own parameter table.

The samples cover the instruction families the fuzzer should reach: DMA with masks (vector add),
reductions and transcendental vector ops (softmax), scalar control flow with a runtime loop and an
``if`` (loop_if: the shared loop_sum kernel), and the cube path with ``dl.dot`` (matmul).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device
from sample_kernels import add as vector_add
from sample_kernels import loop_sum as loop_if
from sample_kernels import matmul, softmax










@dvmlang.kernel
def gather_scan(x_ptr, idx_ptr, out_ptr, cnt_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    idx = dl.load(idx_ptr + offs, mask=m, other=0)
    g = dl.load(x_ptr + idx, mask=m, other=0).to(dl.float32)
    c = dl.cumsum(g, axis=0)
    dl.atomic_add(cnt_ptr + idx, 1, mask=m)
    dl.device_print("argmax", dl.argmax(c, axis=0))
    dl.store(out_ptr + offs, dl.where(c > 100.0, c, -c), mask=m)


def _arrays(name: str):
    """(grid, args, constexprs, check) for one small launch of a sample; ``check(args)`` compares with numpy."""
    rng = np.random.default_rng(7)
    if name == "vector_add":
        n = 300
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        args = (x, y, np.zeros(n, np.float32), n)
        return (3,), args, {"BLOCK": 128}, lambda a: np.testing.assert_array_equal(a[2], a[0] + a[1])
    if name == "softmax":
        x = rng.standard_normal((4, 50), dtype=np.float32)

        def check(a):
            e = np.exp(a[1] - a[1].max(1, keepdims=True))
            np.testing.assert_allclose(a[0], e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        return (4,), (np.zeros_like(x), x, 50, 50), {"BLOCK": 64}, check
    if name == "loop_if":
        x = rng.random((3, 100), dtype=np.float32)

        def check(a):
            np.testing.assert_allclose(a[1], a[0].sum(1) + 1000.0, rtol=1e-5)
        return (3,), (x, np.zeros(3, np.float32), 100, 100), {"BLOCK": 32}, check
    if name == "matmul":
        M, N, K = 20, 12, 40
        a = rng.random((M, K)).astype(np.float16)
        b = rng.random((K, N)).astype(np.float16)

        def check(x):
            np.testing.assert_allclose(x[2], x[0].astype(np.float32) @ x[1].astype(np.float32), rtol=1e-3)
        return (2, 1), (a, b, np.zeros((M, N), np.float32), M, N, K), {"BM": 16, "BN": 16, "BK": 16}, check
    if name == "gather_scan":
        n = 40
        x = rng.integers(-100, 100, 64).astype(np.int8)
        idx = rng.integers(0, 64, n).astype(np.int32)

        def check(a):
            g = np.zeros(64, np.float32)
            g[:n] = a[0][a[1]]
            c = np.cumsum(g.reshape(2, 32), axis=1).reshape(-1)[:n]
            np.testing.assert_allclose(a[2], np.where(c > 100, c, -c))
            np.testing.assert_array_equal(a[3], np.bincount(a[1], minlength=64))
        return (2,), (x, idx, np.zeros(n, np.float32), np.zeros(64, np.int32), n), {"BLOCK": 32}, check
    raise KeyError(name)


KERNELS = {"vector_add": vector_add, "softmax": softmax, "loop_if": loop_if, "matmul": matmul,
           "gather_scan": gather_scan}
SAMPLES = tuple(KERNELS)


@functools.lru_cache(maxsize=None)
def sample_bytes(name: str) -> bytes:
    """The ``.dvmb`` bytes of one launch instance of a sample kernel."""
    grid, args, meta, _ = _arrays(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dvmlang.PerformanceWarning)  # gather_scan gathers on purpose
        return KERNELS[name].encode(grid, *args, **meta).to_bytes()


def sample_args(name: str):
    grid, args, meta, check = _arrays(name)
    return args, check


def small_args(bc: dvmlang.Bytecode, rng=None):
    """Arguments for ``dvmlang.run(bc, ...)`` made from the bytecode's own parameter table: a small array of
    each tensor parameter's dtype and rank, and a small value of each scalar parameter's dtype."""
    rng = rng or np.random.default_rng(0)
    out = []
    for p in bc.params:
        if p.kind == "tensor":
            shape = tuple(min(int(s), 64) for s in p.shape) if len(p.shape) == p.rank else (4,) * p.rank
            a = rng.random(shape if shape else ()) * 4
            out.append(np.ascontiguousarray(np.asarray(a).astype(p.dtype.np)))
        else:
            d = p.dtype
            if d.is_bool:
                out.append(True)
            elif d.is_float:
                out.append(d.np.type(1.5))
            else:
                out.append(d.np.type(5))
    return out


pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")

FUZZ_DEVICE = Device(watchdog=4000)


def run_parsed(bc: dvmlang.Bytecode):
    """Run a parsed bytecode the way a user would run a loaded file. A ``DeviceError`` (a memory fault, the
    watchdog, a trap) is a safe outcome for a mutated program and is returned rather than raised."""
    try:
        return dvmlang.run(bc, *small_args(bc), device=FUZZ_DEVICE)
    except dvmlang.DeviceError as e:
        return e


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_compute_the_right_answer(name):
    grid, args, meta, check = _arrays(name)
    KERNELS[name][grid](*args, **meta)
    check(args)


@pytest.mark.parametrize("name", SAMPLES)
def test_loaded_samples_run_on_new_arrays(name):
    bc = dvmlang.Bytecode.from_bytes(sample_bytes(name))
    args, check = sample_args(name)
    dvmlang.run(bc, *args)
    check(args)


@pytest.mark.parametrize("name", SAMPLES)
def test_run_parsed_harness_runs_every_sample(name):
    rec = run_parsed(dvmlang.Bytecode.from_bytes(sample_bytes(name)))
    assert not isinstance(rec, Exception), rec
    assert rec.cycles > 0
