"""LayerNorm forward (Triton tutorial style): one program per row, looping over column blocks."""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def layernorm(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n_cols, eps, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    acc = dl.zeros((BLOCK,), dl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        acc += dl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(dl.float32)
    mean = dl.sum(acc, axis=0) / n_cols
    acc = dl.zeros((BLOCK,), dl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        x = dl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(dl.float32)
        diff = dl.where(cols < n_cols, x - mean, 0.0)
        acc += diff * diff
    var = dl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / dl.sqrt(var + eps)
    dl.store(mean_ptr + row, mean)
    dl.store(rstd_ptr + row, rstd)
    for off in range(0, n_cols, BLOCK):
        cols = off + dl.arange(0, BLOCK)
        mask = cols < n_cols
        w = dl.load(w_ptr + cols, mask=mask)
        b = dl.load(b_ptr + cols, mask=mask)
        x = dl.load(x_row + cols, mask=mask, other=0.0).to(dl.float32)
        y = (x - mean) * rstd * w + b
        dl.store(y_row + cols, y, mask=mask)


def layer_norm(x, w, b, eps=1e-5, block=None):
    n_rows, n_cols = x.shape
    y = np.empty_like(x)
    mean = np.empty(n_rows, np.float32)
    rstd = np.empty(n_rows, np.float32)
    block = block or min(4096, dl.next_power_of_2(n_cols))
    launch = layernorm[(n_rows,)](x, y, w, b, mean, rstd, x.shape[1], n_cols, eps, BLOCK=block)
    return y, mean, rstd, launch


def reference(x, w, b, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def run(n_rows: int = 517, n_cols: int = 1000):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n_rows, n_cols), dtype=np.float32)
    w = rng.standard_normal(n_cols, dtype=np.float32)
    b = rng.standard_normal(n_cols, dtype=np.float32)
    y, mean, rstd, launch = layer_norm(x, w, b, block=256)
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, x.mean(axis=1), rtol=1e-4, atol=1e-5)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"layernorm: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
