"""Vector addition: the hello world of tile kernels (masked tail, any length)."""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    pid = dl.program_id(0)
    offs = pid * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask)
    y = dl.load(y_ptr + offs, mask=mask)
    dl.store(out_ptr + offs, x + y, mask=mask)


def run(n: int = 98_432, block: int = 1024):
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    out = np.empty_like(x)
    launch = add[(dl.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    np.testing.assert_allclose(out, x + y, rtol=0, atol=0)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"vector_add: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
