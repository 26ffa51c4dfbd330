"""Matrix multiplication: the classic K-loop with ``dl.dot`` on the cube unit.

fp16 inputs accumulate in fp32; M, N and K need not be multiples of the tile sizes (the edges are
masked, and masked-off elements read 0 so they add nothing to the dot products).
"""

import numpy as np

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: dl.constexpr, BLOCK_N: dl.constexpr, BLOCK_K: dl.constexpr):
    pid_m = dl.program_id(0)
    pid_n = dl.program_id(1)
    offs_m = pid_m * BLOCK_M + dl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + dl.arange(0, BLOCK_N)
    offs_k = dl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = dl.zeros((BLOCK_M, BLOCK_N), dtype=dl.float32)
    for k in range(0, dl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = dl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = dl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = dl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(dl.float16)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    dl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: np.ndarray, b: np.ndarray, block_m=64, block_n=64, block_k=32):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, "inner dimensions differ"
    c = np.empty((M, N), np.float16)
    grid = (dl.cdiv(M, block_m), dl.cdiv(N, block_n))
    launch = matmul_kernel[grid](a, b, c, M, N, K, a.shape[1], 1, b.shape[1], 1, c.shape[1], 1,
                                 BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c, launch


def run(M: int = 200, N: int = 150, K: int = 100):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c, launch = matmul(a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    # fp32 accumulation, one rounding to fp16 at the end
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-3, atol=2e-2)
    return launch


if __name__ == "__main__":
    launch = run()
    print(f"matmul: correct, {launch.cycles} simulated cycles ({launch.time_us:.2f} us)")
