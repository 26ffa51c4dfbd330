"""What every level of the paper evaluation shares: the request stream, the result rows, CSV files, host timing,
TorchInductor compile timing, and the launch-overhead arithmetic."""

from __future__ import annotations

import csv
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

SEED = 2024
FIELDS = ["level", "workload", "system", "request", "length", "compile_s", "device_us", "host_s", "launches",
          "gm_bytes", "launch_overhead_us"]
OVERHEADS_US = (0.0, 1.0, 3.0, 5.0)  # the launch overheads the sensitivity table recomputes device time for


def stream(n: int, lo: int = 1, hi: int = 2048, seed: int = SEED) -> list[int]:
    """``n`` request lengths in arrival order: log-normal (median 64, sigma 1.2), rounded and clipped to
    [lo, hi], seeded. Long-tailed: most requests are short, a few are near ``hi``; repeats happen."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=math.log(64), sigma=1.2, size=n)
    return [int(v) for v in np.clip(np.rint(raw), lo, hi)]


def row(level, workload, system, request, length, *, compile_s=0.0, device_us=float("nan"), host_s=float("nan"),
        launches=0, gm_bytes=0, launch_overhead_us=float("nan")) -> dict:
    return {"level": level, "workload": workload, "system": system, "request": request, "length": length,
            "compile_s": compile_s, "device_us": device_us, "host_s": host_s, "launches": launches,
            "gm_bytes": gm_bytes, "launch_overhead_us": launch_overhead_us}


def write_csv(path: Path, rows: list[dict], fields=None) -> Path:
    fields = fields or (list(rows[0]) if rows else FIELDS)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in fields})
    return path


def _cell(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return v


def with_overhead(device_us: float, launches: int, base_us: float, new_us: float) -> float:
    """Device time of a call with a launch overhead of ``new_us`` instead of ``base_us`` per launch."""
    return device_us - launches * base_us + launches * new_us


def median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


class InductorTimer:
    """TorchInductor's compile time for new shapes, with a fresh cache directory for each timer: the time of a
    call that compiles minus the time of the same call once compiled (median of three)."""

    def __init__(self, fn, dynamic: bool):
        import torch
        self.torch = torch
        self.dir = tempfile.mkdtemp(prefix="dvmlang-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.dir
        torch._dynamo.reset()
        self.compiled = torch.compile(fn, backend="inductor", dynamic=dynamic)

    def compile_s(self, *args) -> float:
        with self.torch.no_grad():
            t0 = time.perf_counter()
            self.compiled(*args)
            first = time.perf_counter() - t0
            steady = []
            for _ in range(3):
                t0 = time.perf_counter()
                self.compiled(*args)
                steady.append(time.perf_counter() - t0)
        return max(0.0, first - statistics.median(steady))
