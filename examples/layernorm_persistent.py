"""LayerNorm forward, persistent: one program per vector core, each looping over its rows (the whole row
in one tile, so each row is read once).

The form to use on Ascend-class parts: `layernorm.py` (the Triton tutorial's one program per row, three
passes over column blocks) pays a dispatch for every program beyond the core count (about 2 us per block on
hardware, `program_dispatch_cycles` here) and reads each row three times.
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def layernorm_persistent(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n_rows, n_cols, eps,
                         BLOCK: dl.constexpr):
    cols = dl.arange(0, BLOCK)
    mask = cols < n_cols
    w = dl.load(w_ptr + cols, mask=mask)
    b = dl.load(b_ptr + cols, mask=mask)
    for row in range(dl.program_id(0), n_rows, dl.num_programs(0)):
        x = dl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(dl.float32)
        mean = dl.sum(x, axis=0) / n_cols
        diff = dl.where(mask, x - mean, 0.0)
        rstd = 1.0 / dl.sqrt(dl.sum(diff * diff, axis=0) / n_cols + eps)
        dl.store(mean_ptr + row, mean)
        dl.store(rstd_ptr + row, rstd)
        dl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)


def layer_norm(x, w, b, eps=1e-5, device=None):
    n_rows, n_cols = x.shape
    y = np.empty_like(x)
    mean = np.empty(n_rows, np.float32)
    rstd = np.empty(n_rows, np.float32)
    cores = (device or dvmlang.npu.default_device()).profile.vector_cores
    launch = layernorm_persistent[(min(cores, n_rows),)](x, y, w, b, mean, rstd, x.shape[1], n_rows, n_cols, eps,
                                                         BLOCK=dl.next_power_of_2(n_cols), device=device)
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
    y, mean, rstd, launch = layer_norm(x, w, b)
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, x.mean(axis=1), rtol=1e-5, atol=1e-5)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"layernorm_persistent: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us) on "
          f"{launch.grid[0]} programs")
