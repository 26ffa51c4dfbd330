"""
FP8 GEMM with row-wise scales
=============================

Inference and training libraries (FBGEMM's fp8 row-wise GEMM, torchao's float8 row-wise recipe, vLLM's fp8
linear layers) multiply in 8-bit floats: each row of the activations ``a`` (M x K) and each row of the weights
``w`` (N x K, one row per output feature) gets its own scale, ``amax(row) / 448`` (448 is float8 e4m3's largest
value), the values divided by it are rounded to float8 e4m3, and the product of the 8-bit matrices, accumulated
in float32, is scaled back: ``out[i, j] = (a8[i] . w8[j]) * sa[i] * sw[j]``.

* ``_rowwise_quant``: one program per block of rows: the row maxima, the scales, the float8 values.
* ``_fp8_rowwise_gemm``: tiles of ``a8`` and ``w8.T`` through ``tl.dot`` (float8 operands, float32
  accumulator over the K loop), then the scales of the tile's rows and columns, once, after the loop (the
  epilogue: on an Ascend-class part that is where the accumulator leaves the cube for the vector unit, so it
  happens once per output tile, not per K step), and the conversion to bfloat16.

Written for dvmlang in the style of those libraries (no code copied); checked against torch: the quantisation
against torch's own float8 conversion (exactly), the product against the float64 product of the dequantised
matrices, and against the unquantised product within float8's error (``run()``).
"""

import sys

import torch

import dvmlang.triton as triton
import dvmlang.triton.language as tl

FP8_MAX = 448.0


@triton.jit
def _rowwise_quant(x_ptr, q_ptr, s_ptr, M, K, stride_x, stride_q,
                   BM: tl.constexpr, BK: tl.constexpr, FP8_MAX: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < M
    amax = tl.zeros((BM,), tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rows[:, None] * stride_x + ks[None, :], mask=rmask[:, None] & (ks[None, :] < K),
                    other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), 1))
    scale = tl.maximum(amax, 1e-12) / FP8_MAX
    tl.store(s_ptr + rows, scale, mask=rmask)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        mask = rmask[:, None] & (ks[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_x + ks[None, :], mask=mask, other=0.0).to(tl.float32)
        q = tl.clamp(x / scale[:, None], -FP8_MAX, FP8_MAX)
        tl.store(q_ptr + rows[:, None] * stride_q + ks[None, :], q.to(tl.float8e4nv), mask=mask)


@triton.jit
def _fp8_rowwise_gemm(a_ptr, w_ptr, sa_ptr, sw_ptr, c_ptr, M, N, K, stride_a, stride_w, stride_c,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * stride_a + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K),
                    other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_w + ks[:, None], mask=(rn[None, :] < N) & (ks[:, None] < K),
                    other=0.0)
        acc = tl.dot(a, w, acc)
    sa = tl.load(sa_ptr + rm, mask=rm < M, other=0.0)
    sw = tl.load(sw_ptr + rn, mask=rn < N, other=0.0)
    out = acc * sa[:, None] * sw[None, :]
    tl.store(c_ptr + rm[:, None] * stride_c + rn[None, :], out.to(tl.bfloat16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def quantize_rowwise(x, BM=16, BK=128):
    M, K = x.shape
    q = torch.empty(M, K, dtype=torch.float8_e4m3fn)
    s = torch.empty(M, dtype=torch.float32)
    _rowwise_quant[(triton.cdiv(M, BM),)](x, q, s, M, K, x.stride(0), q.stride(0), BM=BM, BK=BK, FP8_MAX=FP8_MAX)
    return q, s


def fp8_rowwise_gemm(a8, sa, w8, sw, BM=32, BN=32, BK=64):
    M, K = a8.shape
    N = w8.shape[0]
    c = torch.empty(M, N, dtype=torch.bfloat16)
    _fp8_rowwise_gemm[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a8, w8, sa, sw, c, M, N, K, a8.stride(0),
                                                               w8.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK)
    return c


def run():
    torch.manual_seed(0)
    M, N, K = 70, 96, 200  # no dimension a multiple of its block
    a = torch.randn(M, K).bfloat16()
    w = (torch.randn(N, K) * 0.05).bfloat16()
    a8, sa = quantize_rowwise(a)
    w8, sw = quantize_rowwise(w)
    # the quantisation: torch's own scales and float8 rounding of the same values
    sa_ref = a.float().abs().amax(1).clamp(min=1e-12) / FP8_MAX
    torch.testing.assert_close(sa, sa_ref, atol=0, rtol=1e-6)
    a8_ref = (a.float() / sa_ref[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    mismatch = (a8.float() != a8_ref.float()).float().mean().item()
    assert mismatch < 1e-3, f"{mismatch:.2%} of the float8 values differ from torch's"
    c = fp8_rowwise_gemm(a8, sa, w8, sw)
    deq = (a8.double() * sa.double()[:, None]) @ (w8.double() * sw.double()[:, None]).T
    torch.testing.assert_close(c.double(), deq.bfloat16().double(), atol=1e-2, rtol=1e-2)
    exact = a.double() @ w.double().T
    rel = ((c.double() - exact).norm() / exact.norm()).item()
    print(f"relative error of the fp8 product against the unquantised one: {rel:.3%}")
    assert rel < 0.06  # float8 e4m3 keeps 3 mantissa bits: a few percent
    print("✅ fp8 row-wise GEMM matches torch")


if __name__ == "__main__":
    run()
    sys.exit(0)
