"""The Triton interpreter (TRITON_INTERPRET=1) on the kernels of sim_throughput.py, for comparison.

Only imported when `triton` (and `torch`, which its interpreter uses for tensors) are installed. Each
kernel runs on a subset of its rows or tiles, and the time is scaled to the full problem.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, d * rstd * w + b, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _time(fn):
    fn()  # warm-up
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interpreter_seconds(name: str, quick: bool = False) -> float:
    rows = 2048 if quick else 8192
    sub = 64
    if name == "softmax":
        x = torch.randn(sub, 1024)
        out = torch.empty_like(x)
        return _time(lambda: softmax_kernel[(sub,)](out, x, 1024, 1024, 1024, BLOCK=1024)) * rows / sub
    if name == "layernorm":
        x = torch.randn(sub, 1024)
        y = torch.empty_like(x)
        w = torch.ones(1024)
        b = torch.zeros(1024)
        return _time(lambda: layernorm_kernel[(sub,)](x, y, w, b, 1024, 1024, 1e-5, BLOCK=1024)) * rows / sub
    if name == "vector add":
        n = (16 if quick else 64) * 1024 * 1024
        block = 8192
        part = sub * block
        x = torch.rand(part)
        y = torch.rand(part)
        out = torch.empty_like(x)
        return _time(lambda: add_kernel[(sub,)](x, y, out, part, BLOCK=block)) * (n // block) / sub
    if name == "matmul":
        m = 512 if quick else 1024
        tiles = (m // 128) ** 2
        a = torch.rand(m, m, dtype=torch.float16)
        b = torch.rand(m, m, dtype=torch.float16)
        c = torch.empty(m, m, dtype=torch.float32)
        return _time(lambda: matmul_kernel[(2, 1)](a, b, c, m, m, m, BM=128, BN=128, BK=128)) * tiles / 2
    raise KeyError(name)
