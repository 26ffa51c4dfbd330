"""2-D transpose through block pointers.

Each program reads one ``(BLOCK_M, BLOCK_N)`` block of ``x`` with ``dl.make_block_ptr`` and writes its
transpose into ``y``. ``boundary_check`` handles the ragged edges: out-of-range elements read as the
padding value and are not written, so M and N need not be multiples of the block.
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def transpose_kernel(x_ptr, y_ptr, M, N, BLOCK_M: dl.constexpr, BLOCK_N: dl.constexpr):
    pid_m = dl.program_id(0)
    pid_n = dl.program_id(1)
    src = dl.make_block_ptr(x_ptr, shape=(M, N), strides=(N, 1), offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N),
                            block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    dst = dl.make_block_ptr(y_ptr, shape=(N, M), strides=(M, 1), offsets=(pid_n * BLOCK_N, pid_m * BLOCK_M),
                            block_shape=(BLOCK_N, BLOCK_M), order=(1, 0))
    block = dl.load(src, boundary_check=(0, 1), padding_option="zero")
    dl.store(dst, dl.trans(block), boundary_check=(0, 1))


def transpose(x, block_m=64, block_n=32):
    M, N = x.shape
    y = np.empty((N, M), x.dtype)
    grid = (dl.cdiv(M, block_m), dl.cdiv(N, block_n))
    launch = transpose_kernel[grid](x, y, M, N, BLOCK_M=block_m, BLOCK_N=block_n)
    return y, launch


def run(M: int = 300, N: int = 211):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((M, N)).astype(np.float32)
    y, launch = transpose(x)
    np.testing.assert_array_equal(y, x.T)
    xh = rng.standard_normal((33, 65)).astype(np.float16)
    yh, _ = transpose(xh, block_m=16, block_n=16)
    np.testing.assert_array_equal(yh, xh.T)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"transpose: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
