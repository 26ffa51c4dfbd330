"""The gallery's softmax kernel (examples/softmax.py) on one input: wall time of a cached launch against numpy's
softmax in the same process, and the host time to encode the kernel for column counts it has not seen.

    python benchmarks/softmax_launch.py [--rows 4096] [--cols 1000] [--repeat 9] [--shapes 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import softmax  # noqa: E402

import dvmlang.language as dl  # noqa: E402


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--shapes", type=int, default=100, help="new column counts to encode")
    a = ap.parse_args()
    rows, cols = a.rows, a.cols
    block = dl.next_power_of_2(cols)
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    out = np.empty_like(x)
    kern = softmax.softmax

    def launch():
        return kern[(rows,)](out, x, cols, cols, cols, BLOCK=block)

    rec = launch()  # build and encode once
    np.testing.assert_allclose(out, softmax.reference(x), rtol=1e-5, atol=1e-7)
    dvm = median_ms(launch, a.repeat)
    ref = median_ms(lambda: softmax.reference(x), a.repeat)
    print(f"softmax {rows}x{cols} fp32, BLOCK={block}")
    print(f"  dvmlang launch (cached)   {dvm:9.2f} ms   simulated {rec.time_us:.1f} us ({rec.cycles:,} cycles)")
    print(f"  numpy softmax             {ref:9.2f} ms   ratio {dvm / ref:.2f}x")

    # new column counts with the same BLOCK: an encode each, never a build
    builds = kern.cache_info().builds
    lo = block // 2 + 1
    widths = [c for c in np.linspace(lo, block, a.shapes, dtype=int).tolist() if c != cols]
    enc = []
    for c in dict.fromkeys(widths):
        x2 = np.empty((rows, c), np.float32)
        o2 = np.empty_like(x2)
        t = time.perf_counter()
        kern.encode((rows,), o2, x2, c, c, c, BLOCK=block)
        enc.append(time.perf_counter() - t)
    enc_us = sorted(e * 1e6 for e in enc)
    p99 = enc_us[min(len(enc_us) - 1, int(round(0.99 * (len(enc_us) - 1))))]
    print(f"  encode for a new n_cols   median {statistics.median(enc_us):.1f} us, p99 {p99:.1f} us, "
          f"max {enc_us[-1]:.1f} us over {len(enc_us)} column counts; "
          f"builds during them: {kern.cache_info().builds - builds}")


if __name__ == "__main__":
    main()
