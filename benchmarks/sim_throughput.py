"""Simulator host speed: dvmlang wall time vs numpy doing the same computation in the same process.

Prints, per workload, the median wall time of a launch (after one warm-up launch, so build and encode are
excluded), numpy's median, their ratio, the simulated device time, and the peak host memory a launch
allocates beyond its own input/output arrays (measured with tracemalloc, which sees numpy buffers).
When `triton` is importable, the Triton interpreter (TRITON_INTERPRET=1) runs the equivalent kernel on a
subset of rows/tiles and its time is scaled to the full problem.

    python benchmarks/sim_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import dvmlang.language as dl  # noqa: E402
import softmax  # noqa: E402
import vector_add  # noqa: E402

import dvmlang  # noqa: E402


@dvmlang.kernel
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    pm = dl.program_id(0)
    pn = dl.program_id(1)
    rm = pm * BM + dl.arange(0, BM)
    rn = pn * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        a = dl.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = dl.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = dl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dvmlang.kernel
def layernorm_row(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: dl.constexpr):
    """One row per program in one tile (the same kernel as the Triton reference)."""
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    mask = cols < n_cols
    x = dl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = dl.sum(x, axis=0) / n_cols
    d = dl.where(mask, x - mean, 0.0)
    rstd = 1.0 / dl.sqrt(dl.sum(d * d, axis=0) / n_cols + eps)
    w = dl.load(w_ptr + cols, mask=mask)
    b = dl.load(b_ptr + cols, mask=mask)
    dl.store(y_ptr + row * stride + cols, d * rstd * w + b, mask=mask)


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_extra_bytes(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak - base


def workloads(quick: bool):
    rng = np.random.default_rng(0)
    rows = 2048 if quick else 8192
    x = rng.standard_normal((rows, 1024), dtype=np.float32)
    out = np.empty_like(x)

    def sm():
        return softmax.softmax[(rows,)](out, x, 1024, 1024, 1024, BLOCK=1024)

    def sm_np():
        m = x.max(axis=1, keepdims=True)
        e = np.exp(x - m)
        e /= e.sum(axis=1, keepdims=True)
        return e

    yield "softmax", f"{rows}x1024 fp32", sm, sm_np, x.nbytes * 2

    w = rng.standard_normal(1024, dtype=np.float32)
    b = rng.standard_normal(1024, dtype=np.float32)
    y = np.empty_like(x)

    def ln():
        return layernorm_row[(rows,)](x, y, w, b, 1024, 1024, 1e-5, BLOCK=1024)

    def ln_np():
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w + b

    yield "layernorm", f"{rows}x1024 fp32", ln, ln_np, x.nbytes * 2

    n = (16 if quick else 64) * 1024 * 1024
    a = rng.random(n, dtype=np.float32)
    c = rng.random(n, dtype=np.float32)
    o = np.empty_like(a)
    block = 8192

    def va():
        return vector_add.add[(dl.cdiv(n, block),)](a, c, o, n, BLOCK=block)

    def va_np():
        np.add(a, c, out=o)
        return o

    yield "vector add", f"{n // (1024 * 1024)}M fp32", va, va_np, a.nbytes * 3

    m = 512 if quick else 1024
    A = rng.random((m, m), dtype=np.float32).astype(np.float16)
    B = rng.random((m, m), dtype=np.float32).astype(np.float16)
    C = np.empty((m, m), np.float32)

    def mm():
        return matmul[(dl.cdiv(m, 128), dl.cdiv(m, 128))](A, B, C, m, m, m, BM=128, BN=128, BK=128)

    def mm_np():
        return A.astype(np.float32) @ B.astype(np.float32)

    yield "matmul", f"{m}^3 fp16->fp32", mm, mm_np, A.nbytes + B.nbytes + C.nbytes


def triton_interpreter_time(name, quick):
    """Seconds the Triton interpreter needs for the full problem, or None when triton is absent."""
    try:
        import importlib.util
        if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
            return None
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from triton_reference import interpreter_seconds  # benchmarks/triton_reference.py
    except Exception:  # noqa: BLE001 - optional dependency that failed to import
        return None
    return interpreter_seconds(name, quick)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller problems, fewer repeats")
    args = ap.parse_args(argv)
    repeat = 3 if args.quick else 5
    console = Console(width=max(Console().width, 140))
    t = Table(title="dvmlang simulator throughput (median wall time of a cached launch)")
    for col in ("workload", "size", "dvmlang", "numpy", "ratio", "simulated", "extra host memory",
                "triton interp.", "speed-up"):
        t.add_column(col, justify="left" if col in ("workload", "size") else "right")
    for name, size, fn, ref, tensor_bytes in workloads(args.quick):
        launch = fn()  # warm-up: build + encode
        ours = median_time(fn, repeat)
        theirs = median_time(ref, repeat)
        extra = peak_extra_bytes(fn)
        tri = triton_interpreter_time(name, args.quick)
        t.add_row(name, size, f"{ours * 1e3:.1f} ms", f"{theirs * 1e3:.1f} ms", f"{ours / theirs:.2f}x",
                  f"{launch.time_us:.1f} us", f"{extra / 2**20:.1f} MiB ({extra / tensor_bytes:.2f}x tensors)",
                  f"{tri:.1f} s" if tri else "n/a", f"{tri / ours:.0f}x" if tri else "n/a")
    console.print(t)


if __name__ == "__main__":
    main()
