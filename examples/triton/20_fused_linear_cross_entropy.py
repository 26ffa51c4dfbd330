"""
Fused linear + cross-entropy
============================

The last layer of a language model, ``loss = cross_entropy(h @ W.T, targets)``, without the logits: for a
vocabulary of V words the logits are N x V floats (N tokens), far more than the hidden states (N x H) or the
weights (V x H). This is how LLM-training kernel libraries (Liger-Kernel's fused linear cross entropy, Apple's
cut cross-entropy) keep that memory: the logits of one block of rows and one tile of the vocabulary live in
on-chip memory only, while an online log-sum-exp runs over the vocabulary tiles.

* ``_flce_fwd``: per block of rows, for each vocabulary tile, ``logits = h @ W_tile.T`` (``tl.dot``, K loop
  over H), then the running max and sum of exponentials and the target's logit: ``loss = lse - logit[target]``.
* ``_flce_bwd``: the gradient with respect to ``h`` in a second pass, again tile by tile:
  ``dh = (softmax(logits) - onehot(target)) @ W / N``, with ``lse`` from the forward pass.

Written for dvmlang in the style of those libraries (no code copied); checked against torch's
``cross_entropy`` of the materialised logits, forward and backward (``run()``).
"""

import sys

import torch
import torch.nn.functional as F

import dvmlang.triton as triton
import dvmlang.triton.language as tl


@triton.jit
def _flce_fwd(h_ptr, w_ptr, t_ptr, loss_ptr, lse_ptr, N, V, stride_h, stride_w,
              H: tl.constexpr, BM: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < N
    target = tl.load(t_ptr + rows, mask=rmask, other=0)
    m = tl.full((BM,), float("-inf"), tl.float32)
    s = tl.zeros((BM,), tl.float32)
    picked = tl.zeros((BM,), tl.float32)
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        cmask = cols < V
        logits = tl.zeros((BM, BV), tl.float32)
        for k0 in range(0, H, BK):
            ks = k0 + tl.arange(0, BK)
            a = tl.load(h_ptr + rows[:, None] * stride_h + ks[None, :], mask=rmask[:, None], other=0.0)
            b = tl.load(w_ptr + cols[None, :] * stride_w + ks[:, None], mask=cmask[None, :], other=0.0)
            logits = tl.dot(a, b, logits)
        logits = tl.where(cmask[None, :], logits, float("-inf"))
        m_new = tl.maximum(m, tl.max(logits, 1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(logits - m_new[:, None]), 1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == target[:, None], logits, 0.0), 1)
    lse = m + tl.log(s)
    tl.store(lse_ptr + rows, lse, mask=rmask)
    tl.store(loss_ptr + rows, lse - picked, mask=rmask)


@triton.jit
def _flce_bwd(h_ptr, w_ptr, t_ptr, lse_ptr, dh_ptr, N, V, stride_h, stride_w, scale,
              H: tl.constexpr, BM: tl.constexpr, BV: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < N
    ks = tl.arange(0, H)
    target = tl.load(t_ptr + rows, mask=rmask, other=0)
    lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
    a = tl.load(h_ptr + rows[:, None] * stride_h + ks[None, :], mask=rmask[:, None], other=0.0)
    dh = tl.zeros((BM, H), tl.float32)
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        cmask = cols < V
        w = tl.load(w_ptr + cols[:, None] * stride_w + ks[None, :], mask=cmask[:, None], other=0.0)
        logits = tl.dot(a, tl.trans(w))
        p = tl.where(cmask[None, :], tl.exp(logits - lse[:, None]), 0.0)
        g = p - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)
        dh = tl.dot((g * scale).to(w.dtype), w, dh)
    tl.store(dh_ptr + rows[:, None] * stride_h + ks[None, :], dh.to(dh_ptr.dtype.element_ty), mask=rmask[:, None])


class FusedLinearCrossEntropy(torch.autograd.Function):
    """``cross_entropy(h @ w.T, targets)`` (mean over rows) with the logits never in memory."""

    @staticmethod
    def forward(ctx, h, w, targets, BM=32, BV=64):
        N, H = h.shape
        V = w.shape[0]
        loss = torch.empty(N, dtype=torch.float32)
        lse = torch.empty(N, dtype=torch.float32)
        grid = (triton.cdiv(N, BM),)
        _flce_fwd[grid](h, w, targets, loss, lse, N, V, h.stride(0), w.stride(0), H=H, BM=BM, BV=BV, BK=min(H, 64))
        ctx.save_for_backward(h, w, targets, lse)
        ctx.blocks = BM, BV
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        h, w, targets, lse = ctx.saved_tensors
        BM, BV = ctx.blocks
        N, H = h.shape
        dh = torch.empty_like(h)
        _flce_bwd[(triton.cdiv(N, BM),)](h, w, targets, lse, dh, N, w.shape[0], h.stride(0), w.stride(0),
                                         float(grad) / N, H=H, BM=BM, BV=BV)
        return dh, None, None, None, None


def run():
    torch.manual_seed(0)
    N, H, V = 100, 64, 1000  # V not a multiple of the tile, N not a multiple of the row block
    h = (torch.randn(N, H) * 0.5).half().requires_grad_(True)
    w = (torch.randn(V, H) * 0.5).half()
    t = torch.randint(0, V, (N,))
    loss = FusedLinearCrossEntropy.apply(h, w, t)
    loss.backward()
    h32 = h.detach().float().requires_grad_(True)
    ref = F.cross_entropy(h32 @ w.float().T, t)
    ref.backward()
    print(f"loss: dvmlang {loss.item():.6f}, torch {ref.item():.6f}")
    torch.testing.assert_close(loss, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(h.grad.float(), h32.grad, atol=2e-4, rtol=1e-2)
    print("✅ fused linear + cross-entropy matches torch (loss and dL/dh)")


if __name__ == "__main__":
    run()
    sys.exit(0)
