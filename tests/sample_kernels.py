"""Kernels several test modules launch: one definition each, so a fix to one reaches every test.

(Tests that assert on a kernel's own file:line keep their kernel beside them.)
"""

from __future__ import annotations

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) + dl.load(y_ptr + offs, mask=m), mask=m)


@dvmlang.kernel
def softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    mask = cols < n_cols
    x = dl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - dl.max(x, axis=0)
    num = dl.exp(x)
    dl.store(out_ptr + row * stride + cols, num / dl.sum(num, axis=0), mask=mask)


@dvmlang.kernel
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rn = dl.program_id(1) * BN + dl.arange(0, BN)
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        rk = k + dl.arange(0, BK)
        a = dl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = dl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += dl.dot(a, b)
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dvmlang.kernel
def loop_sum(x_ptr, out_ptr, n_cols, stride, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    acc = dl.zeros((BLOCK,), dl.float32)
    count = 0
    for start in range(0, n_cols, BLOCK):
        cols = start + dl.arange(0, BLOCK)
        acc += dl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        count += 1
    total = dl.sum(acc, axis=0)
    if count > 3:
        total = total + 1000.0
    else:
        total = total - 1000.0
    dl.store(out_ptr + row, total)
