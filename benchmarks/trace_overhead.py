"""What tracing costs on the host: wall time of a launch untraced, traced (every row), sampled, and
summary-only, plus the cost of post-processing a full trace (rendering the views, writing Chrome JSON).

Every figure is the median of several launches after a warm-up launch (build and encode excluded).
"Off" is the untraced launch: with no session open the device's only tracing work is one ``rec is not
None`` test per executed instruction and batch; the "hook" column estimates that cost from the number of
such tests and the measured price of one.

    python benchmarks/trace_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import dvmlang.language as dl  # noqa: E402
import layernorm  # noqa: E402
import softmax  # noqa: E402
import vector_add  # noqa: E402

import dvmlang  # noqa: E402
from dvmlang.trace.chrome import write_chrome  # noqa: E402
from dvmlang.trace.views import render  # noqa: E402


@dvmlang.kernel
def scale(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def workloads(quick: bool):
    rng = np.random.default_rng(0)
    n = (1 << 20) if quick else (1 << 22)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.empty_like(x)
    yield (f"vector_add n={n:,} BLOCK=1024",
           lambda: vector_add.add[(dl.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024))
    rows = 1024 if quick else 4096
    s = rng.standard_normal((rows, 781), dtype=np.float32)
    so = np.empty_like(s)
    yield f"softmax {rows}x781", lambda: softmax.softmax_rows(s)
    lrows = 256 if quick else 1024
    w, b = rng.random(4096, dtype=np.float32), rng.random(4096, dtype=np.float32)
    xl = rng.standard_normal((lrows, 4096), dtype=np.float32)
    yield f"layernorm {lrows}x4096 BLOCK=1024", lambda: layernorm.layer_norm(xl, w, b, block=1024)
    g = 65535
    xs = rng.random(g * 16, dtype=np.float32)
    os_ = np.empty_like(xs)
    yield f"scale grid={g:,} BLOCK=16", lambda: scale[(g,)](xs, os_, g * 16, BLOCK=16)
    del so


def medians(fns: dict, repeat: int) -> dict:
    """Median wall time of each function, measured round robin so background load hits all of them alike."""
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def traced(fn, **kw):
    def run():
        with dvmlang.trace(**kw) as t:
            fn()
        return t
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    args = ap.parse_args()
    repeat = 5 if args.quick else 15
    check = timeit.timeit("rec is not None", setup="rec = None", number=1_000_000) / 1_000_000
    console = Console(width=max(Console().width, 140))
    table = Table(title=f"tracing overhead: host wall time per launch, median of {repeat} (x = / untraced)")
    for col in ("workload", "rows", "untraced", "hook (est.)", "traced", "sample=16", "summary only", "views",
                "chrome json"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for name, fn in workloads(args.quick):
        fn()  # warm-up: build and encode
        m = medians({"off": fn, "full": traced(fn, max_events=None), "sampled": traced(fn, max_events=None, sample=16),
                     "summary": traced(fn, summary_only=True)}, repeat)
        off, full, sampled, summary = m["off"], m["full"], m["sampled"], m["summary"]
        t = traced(fn, max_events=None)()
        launches = t.launches
        rows = sum(len(launch.trace) for launch in launches)
        steps = sum(int(launch.instructions) for launch in launches)  # executed (instruction, batch) pairs
        t0 = time.perf_counter()
        for view in ("summary", "source", "timeline", "disasm"):
            render(launches, view, console=Console(file=io.StringIO(), width=100, color_system=None))
        views_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_chrome(launches, io.StringIO())
        chrome_s = time.perf_counter() - t0
        hook = steps * check
        table.add_row(name, f"{rows:,}", f"{off * 1e3:,.1f} ms", f"{hook * 1e6:,.1f} us = {100 * hook / off:.3f}%",
                      f"{full * 1e3:,.1f} ms x{full / off:.2f}", f"{sampled * 1e3:,.1f} ms x{sampled / off:.2f}",
                      f"{summary * 1e3:,.1f} ms x{summary / off:.2f}", f"{views_s * 1e3:,.0f} ms",
                      f"{chrome_s * 1e3:,.0f} ms")
    console.print(table)
    console.print(f"one `rec is not None` test: {check * 1e9:.1f} ns; hook = tests x that price")


if __name__ == "__main__":
    main()
