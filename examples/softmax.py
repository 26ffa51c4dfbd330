"""Row-wise softmax: one program per row, masked columns (n_cols need not be a power of two)."""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    mask = cols < n_cols
    x = dl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - dl.max(x, axis=0)
    num = dl.exp(x)
    den = dl.sum(num, axis=0)
    dl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def softmax_rows(x: np.ndarray):
    n_rows, n_cols = x.shape
    out = np.empty_like(x)
    block = dl.next_power_of_2(n_cols)
    launch = softmax[(n_rows,)](out, x, x.shape[1], out.shape[1], n_cols, BLOCK=block)
    return out, launch


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def run(n_rows: int = 1823, n_cols: int = 781):
    x = np.random.default_rng(1).standard_normal((n_rows, n_cols), dtype=np.float32)
    out, launch = softmax_rows(x)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-6)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"softmax: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
