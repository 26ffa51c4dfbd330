"""RMSNorm (as in LLaMA-style models): ``y = x / sqrt(mean(x**2) + eps) * w``.

bfloat16 in and out, fp32 statistics. One program per row; the row is read in column blocks, so any
row length works (the last block is masked).
"""

import ml_dtypes
import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, stride, n_cols, eps, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    sq = dl.zeros((BLOCK,), dl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        x = dl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(dl.float32)
        sq += x * x
    rms = dl.rsqrt(dl.sum(sq, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        mask = cols < n_cols
        x = dl.load(x_row + cols, mask=mask, other=0.0).to(dl.float32)
        w = dl.load(w_ptr + cols, mask=mask, other=0.0).to(dl.float32)
        dl.store(y_row + cols, x * rms * w, mask=mask)


def rmsnorm(x, w, eps=1e-6, block=512):
    n_rows, n_cols = x.shape
    y = np.empty_like(x)
    launch = rmsnorm_kernel[(n_rows,)](x, w, y, x.shape[1], n_cols, eps, BLOCK=block)
    return y, launch


def reference(x, w, eps=1e-6):
    x = x.astype(np.float32)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w.astype(np.float32)


def run(n_rows: int = 300, n_cols: int = 1100):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n_rows, n_cols)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(0.5, 1.5, n_cols).astype(ml_dtypes.bfloat16)
    y, launch = rmsnorm(x, w)
    # bfloat16 keeps 8 significant bits: compare at its resolution
    np.testing.assert_allclose(y.astype(np.float32), reference(x, w), rtol=1e-2, atol=1e-2)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"rmsnorm: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
