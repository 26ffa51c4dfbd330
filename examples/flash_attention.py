"""Flash-attention forward: ``softmax(q @ k.T * scale [+ causal mask]) @ v`` without the score matrix.

One program per (query block, batch x head). It streams K and V in blocks of ``BLOCK_N`` rows and keeps
an online softmax: the running row maximum ``m_i``, the running denominator ``l_i`` and the unnormalised
output ``acc`` are rescaled by ``exp2(m_old - m_new)`` whenever the maximum grows. Both products run on
the cube unit (fp16 inputs, fp32 accumulation). With ``CAUSAL`` the loop stops at the diagonal block and
masks the scores above it. The sequence length need not be a multiple of either block.
"""

import math

import numpy as np

import dvmlang
import dvmlang.language as dl

LOG2E = 1.4426950408889634


@dvmlang.kernel
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale, HEAD_DIM: dl.constexpr,
                         BLOCK_M: dl.constexpr, BLOCK_N: dl.constexpr, CAUSAL: dl.constexpr):
    start_m = dl.program_id(0)
    bh = dl.program_id(1)
    base = bh * seq_len * HEAD_DIM  # q, k, v, o are (batch * heads, seq_len, HEAD_DIM), contiguous
    offs_m = start_m * BLOCK_M + dl.arange(0, BLOCK_M)
    offs_n = dl.arange(0, BLOCK_N)
    offs_d = dl.arange(0, HEAD_DIM)
    q = dl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_len,
                other=0.0)
    m_i = dl.full((BLOCK_M,), -float("inf"), dl.float32)
    l_i = dl.zeros((BLOCK_M,), dl.float32)
    acc = dl.zeros((BLOCK_M, HEAD_DIM), dl.float32)
    qk_scale = scale * LOG2E  # exp(x) == exp2(x * log2(e))
    hi = dl.minimum((start_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        # K is read transposed straight from memory: a (HEAD_DIM, BLOCK_N) tile
        k = dl.load(k_ptr + base + cols[None, :] * HEAD_DIM + offs_d[:, None], mask=cols[None, :] < seq_len,
                    other=0.0)
        qk = dl.dot(q, k) * qk_scale
        valid = cols[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = dl.where(valid, qk, -float("inf"))
        m_new = dl.maximum(m_i, dl.max(qk, axis=1))
        p = dl.exp2(qk - m_new[:, None])
        alpha = dl.exp2(m_i - m_new)
        l_i = l_i * alpha + dl.sum(p, axis=1)
        v = dl.load(v_ptr + base + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=cols[:, None] < seq_len,
                    other=0.0)
        acc = acc * alpha[:, None]
        acc = dl.dot(p.to(dl.float16), v, acc)
        m_i = m_new
    out = acc / l_i[:, None]
    dl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(dl.float16),
             mask=offs_m[:, None] < seq_len)


def attention(q, k, v, causal=False, block_m=64, block_n=64):
    bh, seq_len, head_dim = q.shape
    o = np.empty_like(q)
    grid = (dl.cdiv(seq_len, block_m), bh)
    launch = attention_fwd_kernel[grid](q, k, v, o, seq_len, 1.0 / math.sqrt(head_dim), HEAD_DIM=head_dim,
                                        BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal)
    return o, launch


def reference(q, k, v, causal=False):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True)) @ v


def run(batch: int = 2, heads: int = 3, seq_len: int = 200, head_dim: int = 64):
    rng = np.random.default_rng(12)
    shape = (batch * heads, seq_len, head_dim)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    launches = []
    for causal in (False, True):
        o, launch = attention(q, k, v, causal=causal)
        np.testing.assert_allclose(o.astype(np.float64), reference(q, k, v, causal), rtol=2e-3, atol=2e-3,
                                   err_msg=f"causal={causal}")
        launches.append(launch)
    return launches


if __name__ == "__main__":
    launches = run()
    print(f"flash_attention: correct, {sum(x.cycles for x in launches)} simulated cycles "
          f"in {len(launches)} launches")
