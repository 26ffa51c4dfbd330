"""Row-wise inclusive prefix sum over rows of any length.

``dl.cumsum`` scans one block; the running total of the blocks before it is a loop-carried value
added to every element, so a row longer than the block is scanned in pieces. The same kernel scans
float32 and int32 rows (each dtype is its own specialisation).
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def cumsum_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    carry = dl.zeros((), dtype=x_ptr.dtype.element_ty)  # the running total, in the input's dtype
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        mask = cols < n_cols
        x = dl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        y = dl.cumsum(x, axis=0) + carry
        dl.store(y_ptr + row * stride + cols, y, mask=mask)
        carry += dl.sum(x, axis=0)


def cumsum_rows(x, block=128):
    n_rows, n_cols = x.shape
    y = np.empty_like(x)
    launch = cumsum_kernel[(n_rows,)](x, y, x.shape[1], n_cols, BLOCK=block)
    return y, launch


def run(n_rows: int = 100, n_cols: int = 1500):
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, (n_rows, n_cols)).astype(np.float32)
    y, launch = cumsum_rows(x)
    np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-4, atol=1e-4)
    # integers scan exactly
    xi = rng.integers(-1000, 1000, (7, 333)).astype(np.int32)
    yi = np.empty_like(xi)
    cumsum_kernel[(7,)](xi, yi, 333, 333, BLOCK=64)
    np.testing.assert_array_equal(yi, np.cumsum(xi, axis=1))
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"cumsum: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
