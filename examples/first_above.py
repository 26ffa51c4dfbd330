"""Find, per row, the first column whose value exceeds a threshold — with an early ``return``.

Each program scans its row block by block and stops as soon as a block contains a hit: the ``return``
inside the loop ends the program, so the rest of the row is never loaded. Rows without a hit fall out
of the loop and store -1. A second kernel does the same with ``break`` and a flag, and also reports how
many blocks it read. Triton rejects both ``return`` inside a loop and ``break``; dvmlang lowers them to
structured exits.
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def first_above_kernel(x_ptr, out_ptr, stride, n_cols, threshold, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        x = dl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        hit = x > threshold
        if dl.max(hit.to(dl.int32), axis=0) > 0:
            # the smallest column with a hit: non-hits become a column past the end of the row
            dl.store(out_ptr + row, dl.min(dl.where(hit, cols, n_cols), axis=0))
            return
    dl.store(out_ptr + row, -1)


@dvmlang.kernel
def first_above_break_kernel(x_ptr, out_ptr, blocks_ptr, stride, n_cols, threshold, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    found = -1
    blocks = 0
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        x = dl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        blocks += 1
        hit = x > threshold
        first = dl.min(dl.where(hit, cols, n_cols), axis=0)
        if first < n_cols:
            found = first
            break
    dl.store(out_ptr + row, found)
    dl.store(blocks_ptr + row, blocks)


def reference(x, threshold):
    hits = x > threshold
    return np.where(hits.any(axis=1), hits.argmax(axis=1), -1).astype(np.int32)


def run(n_rows: int = 200, n_cols: int = 3000, block: int = 256):
    rng = np.random.default_rng(10)
    x = rng.uniform(0, 1, (n_rows, n_cols)).astype(np.float32)
    threshold = 0.9999
    x[:, 0] = np.where(np.arange(n_rows) % 7 == 0, 2.0, x[:, 0])  # some rows hit at once
    x[3] = 0.0  # a row with no hit at all
    x[5, -1] = 2.0  # a hit in the very last (ragged) block
    x[5, :-1] = 0.0
    out = np.full(n_rows, -7, np.int32)
    launch = first_above_kernel[(n_rows,)](x, out, x.shape[1], n_cols, threshold, BLOCK=block)
    ref = reference(x, threshold)
    np.testing.assert_array_equal(out, ref)
    assert ref[3] == -1 and ref[5] == n_cols - 1 and (ref == -1).sum() < n_rows
    out2 = np.full(n_rows, -7, np.int32)
    blocks = np.zeros(n_rows, np.int32)
    first_above_break_kernel[(n_rows,)](x, out2, blocks, x.shape[1], n_cols, threshold, BLOCK=block)
    np.testing.assert_array_equal(out2, ref)
    n_blocks = -(-n_cols // block)
    np.testing.assert_array_equal(blocks, np.where(ref >= 0, ref // block + 1, n_blocks))
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"first_above: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
