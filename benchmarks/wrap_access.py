"""Tutorial 03's matmul kernel, as the tutorial writes it (rows and columns wrapped with ``% M`` / ``% N``),
against the same kernel with masks instead (``offs_am[:, None] < M`` in the A load, ``offs_bn[None, :] < N``
in the B load, no ``%``): simulated cycles of each, and their ratio, for a few sizes and blocks, including
M, N and K that no block divides. The wrapped form is an affine access with a wrapped edge
(dvmlang/ir/access.py: one DMA per piece), so it should cost about what the masked form costs; both are
checked against torch.

    python benchmarks/wrap_access.py
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import torch

import dvmlang.triton as triton
import dvmlang.triton.language as tl

ROOT = Path(__file__).resolve().parent.parent


def _tutorial():
    spec = importlib.util.spec_from_file_location("tutorial03", ROOT / "examples" / "triton" / "03_matrix_multiplication.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@triton.jit
def matmul_masked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    """Tutorial 03's kernel with masks where it wraps: the only lines that differ are marked."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)  # differs: no % M
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)  # differs: no % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)  # differs
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N), other=0.0)  # differs
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def _launch(kernel, a, b, block):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=torch.float16)
    bm, bn, bk = block
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rec = kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                           c.stride(1), BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=4,
                           ACTIVATION="")
    assert torch.allclose(c, torch.matmul(a, b), atol=1e-2, rtol=0)
    gathers = sum(1 for x in w if x.category.__name__ == "PerformanceWarning")
    return rec.cycles, gathers


def main():
    wrapped = _tutorial().matmul_kernel.fn  # the tutorial's kernel itself, under its autotuner
    print(f"{'M x N x K':>16} {'block':>12} {'wrapped (% M)':>14} {'masked':>10} {'ratio':>7}  gathers")
    for (M, N, K) in [(512, 512, 512), (300, 200, 136), (200, 150, 100), (1000, 600, 256)]:
        torch.manual_seed(0)
        a = torch.rand((M, K), dtype=torch.float16) - 0.5
        b = torch.rand((K, N), dtype=torch.float16) - 0.5
        for block in [(64, 64, 64), (128, 128, 64), (64, 32, 64)]:
            cw, gw = _launch(wrapped, a, b, block)
            cm, gm = _launch(matmul_masked, a, b, block)
            print(f"{f'{M} x {N} x {K}':>16} {'x'.join(map(str, block)):>12} {cw:>14,} {cm:>10,} {cw / cm:>7.3f}  "
                  f"{gw}/{gm}")


if __name__ == "__main__":
    main()
