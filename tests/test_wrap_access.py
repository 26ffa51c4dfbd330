"""Wrapped and clamped edges of affine accesses (dvmlang/ir/access.py): Triton's `% M` row wrap (tutorial 03),
`where(offs < M, offs, 0)`, `minimum(offs, M - 1)` and `maximum(offs, 0)` become DMAs in pieces, read exactly
the elements a gather would, and cost about what the masked form costs."""

import warnings

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.errors import PerformanceWarning


@dvmlang.kernel
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr, WRAP: dl.constexpr):
    pid_m = dl.program_id(0)
    pid_n = dl.program_id(1)
    if WRAP:
        offs_am = (pid_m * BM + dl.arange(0, BM)) % M
        offs_bn = (pid_n * BN + dl.arange(0, BN)) % N
    else:
        offs_am = pid_m * BM + dl.arange(0, BM)
        offs_bn = pid_n * BN + dl.arange(0, BN)
    offs_k = dl.arange(0, BK)
    a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_bn[None, :]
    acc = dl.zeros((BM, BN), dtype=dl.float32)
    for k in range(0, dl.cdiv(K, BK)):
        if WRAP:
            a = dl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
            b = dl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        else:
            a = dl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k * BK), other=0.0)
            b = dl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BK) & (offs_bn[None, :] < N), other=0.0)
        acc = dl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    offs_cm = pid_m * BM + dl.arange(0, BM)
    offs_cn = pid_n * BN + dl.arange(0, BN)
    dl.store(c_ptr + offs_cm[:, None] * N + offs_cn[None, :], acc.to(dl.float16),
             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _matmul(M, N, K, wrap, BM=64, BN=64, BK=32):
    rng = np.random.default_rng(M * 7 + N)
    a = (rng.random((M, K)) - 0.5).astype(np.float16)
    b = (rng.random((K, N)) - 0.5).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        launch = _mm[(dl.cdiv(M, BM), dl.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, WRAP=wrap)
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), atol=2e-2,
                               rtol=2e-3)
    return launch.cycles, [x for x in w if issubclass(x.category, PerformanceWarning)]


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (200, 150, 100), (300, 260, 96)])
def test_wrapped_rows_cost_what_masks_cost(M, N, K):
    wrap, warned = _matmul(M, N, K, True)
    masked, _ = _matmul(M, N, K, False)
    assert not warned, [str(x.message) for x in warned]
    assert wrap <= 1.2 * masked, (wrap, masked)


def test_wrap_more_than_once_falls_back_to_the_exact_gather():
    # M = 20 rows under a 64-row block: the rows wrap three times; the guarded branch takes the gather
    _matmul(20, 24, 40, True)


@dvmlang.kernel
def _rows(x_ptr, out_ptr, M, n, start, KIND: dl.constexpr, BM: dl.constexpr, BN: dl.constexpr):
    offs = start + dl.program_id(0) * BM + dl.arange(0, BM)
    if KIND == 0:
        r = offs % M
    elif KIND == 1:
        r = dl.where(offs < M, offs, 0)
    elif KIND == 2:
        r = dl.minimum(offs, M - 1)
    elif KIND == 3:
        r = dl.maximum(offs, 0)
    else:
        r = dl.where(offs >= 0, offs, M - 1)
    cols = dl.arange(0, BN)
    x = dl.load(x_ptr + r[:, None] * n + cols[None, :], mask=cols[None, :] < n, other=-1.0)
    o = dl.program_id(0) * BM + dl.arange(0, BM)
    dl.store(out_ptr + o[:, None] * BN + cols[None, :], x)


def _ref(kind, offs, M):
    if kind == 0:
        return np.fmod(offs, M)
    if kind == 1:
        return np.where(offs < M, offs, 0)
    if kind == 2:
        return np.minimum(offs, M - 1)
    if kind == 3:
        return np.maximum(offs, 0)
    return np.where(offs >= 0, offs, M - 1)


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("M,start", [(50, 0), (37, 0), (100, -20), (7, 0), (64, 5)])
def test_wrapped_and_clamped_rows_read_exactly_those_rows(kind, M, start):
    if kind == 0 and start < 0:
        pytest.skip("a negative start wraps to negative rows: out of bounds under any lowering")
    BM, BN, n = 16, 16, 12
    grid = 4
    x = np.random.default_rng(kind).random((max(M, 1), n)).astype(np.float32)
    out = np.zeros((grid * BM, BN), np.float32)
    offs = start + np.arange(grid * BM)
    rows = _ref(kind, offs, M)
    if rows.min() < 0 or rows.max() >= M:
        pytest.skip("the clamp leaves rows outside the array")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _rows[(grid,)](x, out, M, n, start, KIND=kind, BM=BM, BN=BN)
    assert not [x for x in w if issubclass(x.category, PerformanceWarning)]
    want = np.full((grid * BM, BN), -1.0, np.float32)
    want[:, :n] = x[rows]
    np.testing.assert_array_equal(out, want)


def test_a_remaining_gather_names_the_expression_and_the_rewrite():
    @dvmlang.kernel
    def k(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        i = dl.arange(0, BLOCK)
        dl.store(out_ptr + i, dl.load(x_ptr + (i * i) % n))

    x = np.arange(32, dtype=np.float32)
    out = np.zeros(16, np.float32)
    with pytest.warns(PerformanceWarning, match=r"`i \* i` \(line \d+\) is `\*` of two values that both vary"):
        k[(1,)](x, out, 32, BLOCK=16)
    np.testing.assert_array_equal(out, x[(np.arange(16) ** 2) % 32])
