"""Histogram of float data with atomics.

Each program bins its block of values, counts them per bin inside the tile (one comparison of every
value against every bin, then a column sum), and adds its ``BINS`` partial counts to the global histogram
with one ``dl.atomic_add`` over contiguous addresses. Privatising the counts first means the atomic is a
single DMA-shaped update per program instead of a scatter of one increment per value. A second kernel
shows the direct per-value form (``atomic_add(hist_ptr + bin, 1)``), which is a scatter.
"""

import warnings

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def histogram_kernel(x_ptr, hist_ptr, n, lo, hi, BINS: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=0.0)
    b = dl.floor((x - lo) / (hi - lo) * BINS).to(dl.int32)
    b = dl.clamp(b, 0, BINS - 1)  # values on the edges go to the first and last bins
    b = dl.where(mask, b, -1)  # masked-off lanes fall in no bin
    bins = dl.arange(0, BINS)
    counts = dl.sum((b[:, None] == bins[None, :]).to(dl.int32), axis=0)
    dl.atomic_add(hist_ptr + bins, counts)


@dvmlang.kernel
def histogram_scatter_kernel(x_ptr, hist_ptr, n, lo, hi, BINS: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=0.0)
    b = dl.clamp(dl.floor((x - lo) / (hi - lo) * BINS).to(dl.int32), 0, BINS - 1)
    dl.atomic_add(hist_ptr + b, 1, mask=mask)


def histogram(x, bins, lo, hi, block=512):
    hist = np.zeros(bins, np.int32)
    launch = histogram_kernel[(dl.cdiv(x.size, block),)](x, hist, x.size, lo, hi, BINS=bins, BLOCK=block)
    return hist, launch


def reference(x, bins, lo, hi):
    b = np.clip(np.floor((x - np.float32(lo)) / np.float32(hi - lo) * np.float32(bins)).astype(np.int64), 0, bins - 1)
    return np.bincount(b, minlength=bins).astype(np.int32)


def run(n: int = 20_001, bins: int = 37):
    rng = np.random.default_rng(11)
    x = np.clip(rng.normal(0.0, 1.0, n), -3.0, 3.0).astype(np.float32)
    hist, launch = histogram(x, bins, -3.0, 3.0)
    ref = reference(x, bins, -3.0, 3.0)
    np.testing.assert_array_equal(hist, ref)
    assert hist.sum() == n
    hist2 = np.zeros(bins, np.int32)
    with warnings.catch_warnings():
        # a scatter is what this form is; the gallery need not repeat the warning
        warnings.simplefilter("ignore", dvmlang.PerformanceWarning)
        histogram_scatter_kernel[(dl.cdiv(n, 1024),)](x, hist2, n, -3.0, 3.0, BINS=bins, BLOCK=1024)
    np.testing.assert_array_equal(hist2, ref)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"histogram: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
