"""
Paged-attention decode
======================

One decoding step of a served language model: each sequence of the batch has one new query token and attends to
all its earlier tokens, whose keys and values live in a *paged* KV cache. The cache is a pool of fixed-size
blocks (``block_size`` tokens each); a sequence's tokens are scattered over blocks that its row of the block
table names, in order. This is the layout serving engines use (vLLM's PagedAttention, SGLang's, LMDeploy's), so
sequences grow without copying and share a single pool.

``_paged_decode``: one program per (sequence, query head). It walks the sequence's blocks: loads the block's
physical index from the block table, the block's keys and values (``block_size x head_dim`` tiles), scores
``q . k`` (scaled), and folds them into an online softmax (running max, sum and weighted value). Grouped-query
attention: query head ``h`` reads key/value head ``h // (num_heads // num_kv_heads)``. The last block of a
sequence is partly used: its tail is masked by the sequence length.

Written for dvmlang in the style of those engines (no code copied); checked against attention computed in torch
over each sequence's tokens gathered from the cache (``run()``).
"""

import math
import sys

import torch

import dvmlang.triton as triton
import dvmlang.triton.language as tl


@triton.jit
def _paged_decode(q_ptr, k_cache, v_cache, block_tables, seq_lens, out_ptr, scale,
                  stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_bt, stride_ob, stride_oh,
                  GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP
    d = tl.arange(0, HEAD_DIM)
    t = tl.arange(0, BLOCK_SIZE)
    q = tl.load(q_ptr + seq * stride_qb + head * stride_qh + d).to(tl.float32) * scale
    n = tl.load(seq_lens + seq)
    m = float("-inf")
    s = 0.0
    acc = tl.zeros((HEAD_DIM,), tl.float32)
    for j in range(0, tl.cdiv(n, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + j)
        base = block * stride_kb + kv_head * stride_kh
        valid = j * BLOCK_SIZE + t < n
        k = tl.load(k_cache + base + t[:, None] * stride_kt + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_cache + base + t[:, None] * stride_kt + d[None, :], mask=valid[:, None], other=0.0)
        scores = tl.where(valid, tl.sum(k.to(tl.float32) * q[None, :], 1), float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new)
        s = s * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m = m_new
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + d, (acc / s).to(out_ptr.dtype.element_ty))


def paged_decode(q, k_cache, v_cache, block_tables, seq_lens):
    """``q``: (batch, heads, head_dim); caches: (num_blocks, block_size, kv_heads, head_dim); ``block_tables``:
    (batch, max_blocks) int32; ``seq_lens``: (batch,) int32."""
    B, Hq, D = q.shape
    _, block_size, Hkv, _ = k_cache.shape
    out = torch.empty_like(q)
    _paged_decode[(B, Hq)](q, k_cache, v_cache, block_tables, seq_lens, out, 1.0 / math.sqrt(D),
                           q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
                           block_tables.stride(0), out.stride(0), out.stride(1),
                           GROUP=Hq // Hkv, BLOCK_SIZE=block_size, HEAD_DIM=D)
    return out


def reference(q, k_cache, v_cache, block_tables, seq_lens):
    B, Hq, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty(B, Hq, D)
    for b in range(B):
        n = int(seq_lens[b])
        blocks = block_tables[b, :(n + block_size - 1) // block_size].long()
        k = k_cache[blocks].reshape(-1, Hkv, D)[:n].float()  # (n, Hkv, D), the sequence's tokens in order
        v = v_cache[blocks].reshape(-1, Hkv, D)[:n].float()
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
        w = torch.softmax(torch.einsum("hd,thd->ht", q[b].float(), k) / math.sqrt(D), dim=-1)
        out[b] = torch.einsum("ht,thd->hd", w, v)
    return out


def run():
    torch.manual_seed(0)
    B, Hq, Hkv, D, block_size, num_blocks = 4, 8, 2, 64, 16, 40
    seq_lens = torch.tensor([1, 17, 100, 64], dtype=torch.int32)  # a one-token sequence, partial last blocks
    max_blocks = int((seq_lens.max() + block_size - 1) // block_size)
    # every sequence's blocks drawn from the pool without repeats, in a scrambled order
    perm = torch.randperm(num_blocks)[:B * max_blocks].reshape(B, max_blocks).to(torch.int32)
    q = torch.randn(B, Hq, D).half()
    k_cache = torch.randn(num_blocks, block_size, Hkv, D).half()
    v_cache = torch.randn(num_blocks, block_size, Hkv, D).half()
    out = paged_decode(q, k_cache, v_cache, perm, seq_lens)
    ref = reference(q, k_cache, v_cache, perm, seq_lens)
    print(f"max |dvmlang - torch| = {(out.float() - ref).abs().max().item():.2e}")
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=1e-2)
    print("✅ paged-attention decode matches torch")


if __name__ == "__main__":
    run()
    sys.exit(0)
