"""Row-wise argmax over rows of any length.

One program per row walks the row in column blocks, keeping the best value and its column as
loop-carried scalars. ``dl.argmax`` gives the first maximum inside a block; a later block replaces the
running best only when it is strictly greater, so ties resolve to the first occurrence, like numpy.
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def argmax_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    best = -float("inf")
    best_idx = 0
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        x = dl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        i = dl.argmax(x, axis=0)
        v = dl.max(x, axis=0)
        if v > best:
            best = v
            best_idx = off + i
    dl.store(out_ptr + row, best_idx)


def argmax_rows(x, block=256):
    n_rows, n_cols = x.shape
    out = np.empty(n_rows, np.int32)
    launch = argmax_kernel[(n_rows,)](x, out, x.shape[1], n_cols, BLOCK=block)
    return out, launch


def run(n_rows: int = 257, n_cols: int = 1000):
    rng = np.random.default_rng(7)
    # small integers make ties common, including ties across blocks
    x = rng.integers(-50, 50, (n_rows, n_cols)).astype(np.float32)
    x[0, :] = 3.0
    x[1, 999] = 1000.0
    out, launch = argmax_rows(x)
    np.testing.assert_array_equal(out, np.argmax(x, axis=1))
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"argmax: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
