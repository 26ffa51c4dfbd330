"""Autotuning wall time, serial against forked processes (``dvmlang.autotune``'s parallel path).

A matmul kernel with six tile configs is tuned from scratch (no cache), forked (the parallel path forced) and
serial, ``--repeats`` times each way; the table prints the median wall time of one tuning, the ratio, and checks that both ways chose the same config
with the same simulated cycles (they must: cycles do not depend on where a config runs).

    python benchmarks/autotune_parallel.py [--size 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import dvmlang
import dvmlang.language as dl

autotune_module = sys.modules["dvmlang.autotune"]  # the module; dvmlang.autotune is the decorator


@dvmlang.kernel
def matmul(a, b, c, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rn = dl.program_id(1) * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        acc = dl.dot(dl.load(a + rm[:, None] * K + (k + rk)[None, :]), dl.load(b + (k + rk)[:, None] * N + rn[None, :]),
                     acc)
    dl.store(c + rm[:, None] * N + rn[None, :], acc)


CONFIGS = [(64, 64, 32), (64, 128, 32), (128, 64, 64), (128, 128, 32), (64, 64, 64), (128, 128, 64)]


def tune_once(parallel: bool, size: int):
    autotune_module.PARALLEL_TUNING_SECONDS = 0.0 if parallel else float("inf")  # forced either way
    k = dvmlang.autotune([dvmlang.Config({"BM": m, "BN": n, "BK": kk}) for m, n, kk in CONFIGS], key=["M"],
                         cache_results=False)(matmul)
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32).astype(np.float16)
    b = rng.random((size, size), dtype=np.float32).astype(np.float16)
    c = np.zeros((size, size), np.float32)
    t0 = time.perf_counter()
    k[lambda m: (size // m["BM"], size // m["BN"])](a, b, c, size, size, size)
    wall = time.perf_counter() - t0
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3)
    return wall, k.best_config.kwargs, list(k.configs_timings.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    runs = {mode: [tune_once(mode == "parallel", a.size) for _ in range(a.repeats)] for mode in ("serial", "parallel")}
    same = all(r[1:] == runs["serial"][0][1:] for rs in runs.values() for r in rs)
    med = {m: statistics.median(r[0] for r in rs) for m, rs in runs.items()}
    t = Table(title=f"autotuning a {a.size}^3 fp16 matmul over {len(CONFIGS)} configs (median of {a.repeats}, "
                    f"{__import__('os').cpu_count()} cores)")
    t.add_column("mode")
    t.add_column("wall s", justify="right")
    t.add_column("vs serial", justify="right")
    for m in ("serial", "parallel"):
        t.add_row(m, f"{med[m]:.2f}", f"{med[m] / med['serial']:.2f}x")
    Console().print(t)
    print(f"same choice and cycles both ways: {same}  (chosen {runs['serial'][0][1]})")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
