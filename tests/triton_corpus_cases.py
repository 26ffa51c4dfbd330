"""The cases of ``tests/triton_corpus.py``: each calls a published package's own op (its Triton kernels, unchanged)
on small CPU tensors and checks every result against torch, with references written here from each op's
definition. ``kernels`` names the ``@triton.jit`` functions a case runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

CASES: list["Case"] = []


@dataclass
class Case:
    project: str
    name: str
    kernels: tuple
    fn: Callable


def case(project: str, *kernels: str):
    def deco(fn):
        CASES.append(Case(project, fn.__name__, kernels, fn))
        return fn
    return deco


def close(got, want, atol=1e-4, rtol=1e-4, what="result"):
    got, want = got.detach().float(), want.detach().float()
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    err = (got - want).abs()
    bad = err > atol + rtol * want.abs()
    if bad.any() or torch.isnan(got).ne(torch.isnan(want)).any():
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} off, max error {err.max().item():.3g}")


def grads(fn, *xs):
    """``fn(*xs)`` and the gradients of its sum of squares (a fixed, non-trivial upstream gradient)."""
    xs = [x.detach().clone().requires_grad_(True) for x in xs]
    y = fn(*xs)
    y0 = y[0] if isinstance(y, tuple) else y
    (y0.float() ** 2).sum().backward() if y0.dim() else y0.backward()
    return y0.detach(), [x.grad for x in xs]


def check_fwd_bwd(mine, ref, *xs, atol=1e-4, rtol=1e-4):
    y, gs = grads(mine, *xs)
    y_ref, gs_ref = grads(ref, *xs)
    close(y, y_ref, atol, rtol, "forward")
    for i, (g, g_ref) in enumerate(zip(gs, gs_ref)):
        if g_ref is not None:
            close(g, g_ref, atol, rtol, f"gradient {i}")


torch.manual_seed(0)


def rnd(*shape, dtype=torch.float32, scale=1.0):
    return torch.randn(*shape, dtype=dtype) * scale


# ---- Liger-Kernel (linkedin/Liger-Kernel, BSD-2-Clause): LLM training kernels -------------------------------------

@case("liger-kernel", "_rms_norm_forward_kernel", "_rms_norm_backward_kernel")
def liger_rms_norm():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    x, w = rnd(6, 200), rnd(200)

    def ref(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    check_fwd_bwd(lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6), ref, x, w)


@case("liger-kernel", "_swiglu_forward_kernel", "_swiglu_backward_kernel")
def liger_swiglu():
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    check_fwd_bwd(lambda a, b: LigerSiLUMulFunction.apply(a, b), lambda a, b: F.silu(a) * b, rnd(4, 300), rnd(4, 300))


@case("liger-kernel", "_geglu_tanh_forward_kernel", "_geglu_tanh_backward_kernel")
def liger_geglu():
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    check_fwd_bwd(lambda a, b: LigerGELUMulFunction.apply(a, b), lambda a, b: F.gelu(a, approximate="tanh") * b,
                  rnd(4, 300), rnd(4, 300), atol=1e-3)


@case("liger-kernel", "liger_cross_entropy_kernel", "element_mul_kernel")
def liger_cross_entropy():
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    x, t = rnd(8, 500), torch.randint(0, 500, (8,))
    t[3] = -100
    check_fwd_bwd(lambda x: LigerCrossEntropyFunction.apply(x, t, None, -100)[0],
                  lambda x: F.cross_entropy(x, t, ignore_index=-100), x, atol=1e-4)


@case("liger-kernel", "liger_cross_entropy_kernel", "element_mul_kernel")
def liger_fused_linear_cross_entropy():
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    h, w, t = rnd(16, 64, scale=0.5), rnd(300, 64, scale=0.5), torch.randint(0, 300, (16,))
    check_fwd_bwd(lambda h, w: LigerFusedLinearCrossEntropyFunction.apply(h, w, t)[0],
                  lambda h, w: F.cross_entropy(h @ w.T, t), h, w, atol=1e-3)


@case("liger-kernel", "_layer_norm_forward_kernel", "_layer_norm_backward_kernel")
def liger_layer_norm():
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    check_fwd_bwd(lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5),
                  lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), rnd(5, 130), rnd(130), rnd(130),
                  atol=1e-3)


@case("liger-kernel", "_triton_rope")
def liger_rope():
    from liger_kernel.ops.rope import LigerRopeFunction
    B, H, T, D = 1, 2, 8, 16
    q, k = rnd(B, H, T, D), rnd(B, H, T, D)
    pos = torch.arange(T, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    f = torch.outer(pos, inv)
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos()[None], emb.sin()[None]

    def rot(x):
        return torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    qo, ko = LigerRopeFunction.apply(q.clone(), k.clone(), cos, sin)
    close(qo, q * cos[:, None] + rot(q) * sin[:, None], 1e-4, 1e-4, "q")
    close(ko, k * cos[:, None] + rot(k) * sin[:, None], 1e-4, 1e-4, "k")


@case("liger-kernel", "_jsd_kernel")
def liger_jsd():
    from liger_kernel.ops.jsd import LigerJSDFunction
    x, y = rnd(4, 200).log_softmax(-1), rnd(4, 200).log_softmax(-1)

    def ref(x, y):
        m = 0.5 * (x.exp() + y.exp())
        return (0.5 * (y.exp() * (y - m.log())).sum() + 0.5 * (x.exp() * (x - m.log())).sum()) / x.shape[0]
    check_fwd_bwd(lambda x: LigerJSDFunction.apply(x, y), lambda x: ref(x, y), x, atol=1e-4)


@case("liger-kernel", "_kldiv_kernel_forward", "_kldiv_kernel_backward")
def liger_kl_div():
    from liger_kernel.ops.kl_div import LigerKLDivLossFunction
    x, y = rnd(4, 200).log_softmax(-1), rnd(4, 200).softmax(-1)
    check_fwd_bwd(lambda x: LigerKLDivLossFunction.apply(x, y, "batchmean", False),
                  lambda x: F.kl_div(x, y, reduction="batchmean"), x, atol=1e-4)


@case("liger-kernel", "_dyt_fwd_kernel")
def liger_dyt():
    # forward only: Liger's backward sizes its partial sums from torch.cuda/xpu/npu and has no CPU branch
    from liger_kernel.ops.dyt import LigerDyTFunction
    x, alpha, g, b = rnd(6, 96), torch.tensor([0.7]), rnd(96), rnd(96)
    close(LigerDyTFunction.apply(x, alpha, g, b), torch.tanh(alpha * x) * g + b, 1e-5, 1e-5, "forward")


@case("liger-kernel", "_group_norm_forward_kernel", "_group_norm_backward_kernel")
def liger_group_norm():
    from liger_kernel.ops.group_norm import LigerGroupNormFunction
    x, w, b = rnd(2, 8, 30), rnd(8), rnd(8)
    check_fwd_bwd(lambda x, w, b: LigerGroupNormFunction.apply(x, w, b, 8, 4, 1e-5),
                  lambda x, w, b: F.group_norm(x, 4, w, b, 1e-5), x, w, b, atol=1e-3)


@case("liger-kernel", "_softmax_single_block_forward_kernel", "_softmax_single_block_backward_kernel")
def liger_softmax():
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
    check_fwd_bwd(lambda x: LigerSoftmaxFunction.apply(x), lambda x: x.softmax(-1), rnd(5, 333), atol=1e-5)


@case("liger-kernel", "_fused_add_rms_norm_forward_kernel", "_fused_add_rms_norm_backward_kernel")
def liger_fused_add_rms_norm():
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    x, r, w = rnd(6, 100), rnd(6, 100), rnd(100)

    def ref(x, r, w):
        s = x + r
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    check_fwd_bwd(lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6)[0], ref, x, r, w, atol=1e-4)


@case("liger-kernel", "_tv_distance_kernel")
def liger_tvd():
    from liger_kernel.ops.tvd import LigerTVDLossFunction
    p, q = rnd(4, 120).softmax(-1), rnd(4, 120).softmax(-1)
    check_fwd_bwd(lambda p: LigerTVDLossFunction.apply(p, q, None, "batchmean"),
                  lambda p: 0.5 * (p - q).abs().sum() / p.shape[0], p, atol=1e-5)


# ---- flash-linear-attention (fla-org/flash-linear-attention, MIT): linear-attention and recurrent kernels ---------

def recurrent_ref(q, k, v, scale, decay=None, beta=None, h0=None):
    """The recurrence these ops compute, one step at a time ([B, T, H, K] layouts): S_t = decay_t * S_{t-1}
    + k_t^T v_t (or the delta rule's S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})), o_t = scale * q_t S_t. ``decay``
    is [B, T, H] (one per head) or [B, T, H, K] (per key), as a multiplier."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = torch.zeros(B, H, K, V, dtype=torch.float64) if h0 is None else h0.double().clone()
    out = torch.empty(B, T, H, V, dtype=torch.float64)
    q, k, v = q.double(), k.double(), v.double()
    for t in range(T):
        if decay is not None:
            d = decay[:, t].double()
            S = S * (d[..., None, None] if d.dim() == 2 else d[..., None])
        kt, vt = k[:, t], v[:, t]
        if beta is not None:
            u = vt - torch.einsum("bhk,bhkv->bhv", kt, S)
            S = S + torch.einsum("bhk,bhv->bhkv", kt, u * beta[:, t].double()[..., None])
        else:
            S = S + torch.einsum("bhk,bhv->bhkv", kt, vt)
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return out, S


def qkv(B=1, T=37, H=2, K=32, V=32):
    return rnd(B, T, H, K, scale=0.5), rnd(B, T, H, K, scale=0.5), rnd(B, T, H, V, scale=0.5)


@case("fla", "fused_recurrent_fwd_kernel")
def fla_fused_recurrent_simple_gla():
    from fla.ops.simple_gla import fused_recurrent_simple_gla
    q, k, v = qkv()
    g = -torch.rand(1, 37, 2) * 0.2
    o, s = fused_recurrent_simple_gla(q, k, v, g=g, scale=0.3, output_final_state=True)
    o_ref, s_ref = recurrent_ref(q, k, v, 0.3, decay=g.exp())
    close(o, o_ref, 1e-4, 1e-4, "output")
    close(s, s_ref, 1e-4, 1e-4, "final state")


@case("fla", "chunk_local_cumsum_scalar_kernel", "chunk_fwd_kernel_h", "chunk_fwd_kernel_o")
def fla_chunk_simple_gla():
    from fla.ops.simple_gla import chunk_simple_gla
    q, k, v = qkv(T=100)
    g = -torch.rand(1, 100, 2) * 0.1
    o, s = chunk_simple_gla(q, k, v, g=g, scale=0.3, output_final_state=True)
    o_ref, s_ref = recurrent_ref(q, k, v, 0.3, decay=g.exp())
    close(o, o_ref, 2e-3, 2e-3, "output")
    close(s, s_ref, 2e-3, 2e-3, "final state")


@case("fla", "fused_recurrent_fwd_kernel")
def fla_fused_recurrent_linear_attn():
    from fla.ops.linear_attn import fused_recurrent_linear_attn
    q, k, v = qkv()
    o, _ = fused_recurrent_linear_attn(q, k, v, scale=0.2)
    close(o, recurrent_ref(q, k, v, 0.2)[0], 1e-4, 1e-4, "output")


@case("fla", "chunk_fwd_kernel_h", "chunk_fwd_kernel_o")
def fla_chunk_linear_attn():
    from fla.ops.linear_attn import chunk_linear_attn
    q, k, v = qkv(T=90)
    o, _ = chunk_linear_attn(q, k, v, scale=0.2, normalize=False)
    close(o, recurrent_ref(q, k, v, 0.2)[0], 2e-3, 2e-3, "output")


@case("fla", "fused_recurrent_fwd_kernel")
def fla_fused_recurrent_retention():
    from fla.ops.retention import fused_recurrent_retention
    q, k, v = qkv()
    o, _ = fused_recurrent_retention(q, k, v, scale=0.25)
    gamma = 1 - 2.0 ** (-5.0 - torch.arange(2, dtype=torch.float64))  # RetNet's per-head decay
    close(o, recurrent_ref(q, k, v, 0.25, decay=gamma.expand(1, 37, 2))[0], 1e-4, 1e-4, "output")


@case("fla", "fused_recurrent_delta_rule_fwd_kernel", "fused_recurrent_delta_rule_bwd_kernel")
def fla_fused_recurrent_delta_rule():
    from fla.ops.delta_rule import fused_recurrent_delta_rule
    q, k, v = qkv(T=20, K=16, V=16)
    k = F.normalize(k, dim=-1)
    beta = torch.rand(1, 20, 2)
    o, s = fused_recurrent_delta_rule(q, k, v, beta=beta, scale=0.25, output_final_state=True)
    o_ref, s_ref = recurrent_ref(q, k, v, 0.25, beta=beta)
    close(o, o_ref, 1e-4, 1e-4, "output")
    close(s, s_ref, 1e-4, 1e-4, "final state")
    check_fwd_bwd(lambda q, v: fused_recurrent_delta_rule(q, k, v, beta=beta, scale=0.25)[0],
                  lambda q, v: recurrent_ref(q, k, v, 0.25, beta=beta)[0].float(), q, v, atol=1e-3)


@case("fla", "fused_recurrent_hgrn_fwd_kernel", "fused_recurrent_hgrn_bwd_kernel")
def fla_fused_recurrent_hgrn():
    from fla.ops.hgrn import fused_recurrent_hgrn
    x, g = rnd(2, 30, 48), F.logsigmoid(rnd(2, 30, 48))

    def ref(x, g):
        h, out = torch.zeros(2, 48), []
        for t in range(30):
            h = g[:, t].exp() * h + x[:, t]
            out.append(h)
        return torch.stack(out, 1)
    check_fwd_bwd(lambda x, g: fused_recurrent_hgrn(x, g)[0], ref, x, g, atol=1e-4)


@case("fla", "chunk_local_cumsum_scalar_kernel")
def fla_chunk_local_cumsum():
    from fla.ops.utils.cumsum import chunk_local_cumsum
    g = rnd(2, 100, 3)
    got = chunk_local_cumsum(g, chunk_size=32)
    want = torch.cat([c.cumsum(1) for c in g.split(32, dim=1)], 1)
    close(got, want, 1e-4, 1e-4, "cumsum")


@case("fla", "layer_norm_fwd_kernel", "layer_norm_bwd_kernel")
def fla_rms_norm():
    from fla.modules.norm.layernorm import rms_norm
    x, w = rnd(3, 10, 96), rnd(96)
    check_fwd_bwd(lambda x, w: rms_norm(x, w, None, eps=1e-5),
                  lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w, x, w, atol=1e-3)


@case("fla", "l2norm_fwd_kernel", "l2norm_bwd_kernel")
def fla_l2norm():
    from fla.modules.norm.l2norm import l2norm
    check_fwd_bwd(lambda x: l2norm(x), lambda x: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6),
                  rnd(4, 9, 64), atol=1e-4)


@case("fla", "layer_norm_gated_fwd_kernel", "layer_norm_gated_bwd_kernel")
def fla_rms_norm_gated():
    from fla.modules.norm.fused_norm_gate import rms_norm_gated
    x, g, w = rnd(12, 64), rnd(12, 64), rnd(64)
    check_fwd_bwd(lambda x, g: rms_norm_gated(x, g, w, None, eps=1e-5),
                  lambda x, g: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w * F.silu(g), x, g,
                  atol=1e-3)


@case("fla", "rotary_embedding_kernel")
def fla_rotary():
    from fla.modules.rotary.ops import rotary_embedding
    B, T, H, D = 1, 12, 2, 32
    x = rnd(B, T, H, D)
    f = torch.outer(torch.arange(T, dtype=torch.float32), 1.0 / (10000 ** (torch.arange(0, D, 2) / D)))
    cos, sin = f.cos(), f.sin()
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    c, s = cos[None, :, None], sin[None, :, None]
    close(rotary_embedding(x, cos, sin), torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1), 1e-5, 1e-5, "rotary")


# ---- bitsandbytes (bitsandbytes-foundation/bitsandbytes, MIT): its Triton backend's quantisation and optimizer ----

def _roundtrip_bound(x, blocksize, levels):
    """Per element, the largest error a nearest-level block quantisation may make: half the widest gap between
    adjacent levels (scaled by the block's absmax), plus rounding."""
    gaps = (levels[1:] - levels[:-1]).max().item()
    absmax = x.reshape(-1, blocksize).abs().amax(1)
    return (absmax[:, None] * (gaps / 2) + 1e-6).expand(-1, blocksize).reshape(x.shape)


@case("bitsandbytes", "quantize_8bit_blockwise_kernel", "dequant_8bit_kernel")
def bnb_blockwise_8bit():
    from bitsandbytes.backends.triton.kernels_8bit_quant import dequant_8bit_blockwise, quantize_blockwise_triton
    code = torch.linspace(-1, 1, 256)
    x = rnd(8, 128)
    q, absmax = quantize_blockwise_triton(x, code, 64)
    close(absmax, x.reshape(-1, 64).abs().amax(1), 0, 0, "absmax")
    nearest = (x.reshape(-1, 64, 1) / absmax[:, None, None] - code).abs().argmin(-1).reshape(x.shape)
    if not torch.equal(q.long(), nearest):
        d = (x.reshape(-1, 64, 1) / absmax[:, None, None] - code).abs()
        ties = d.gather(-1, q.long().reshape(-1, 64, 1)) - d.min(-1, keepdim=True).values
        if ties.abs().max() > 1e-6:
            raise AssertionError(f"{int((q.long() != nearest).sum())} codes are not the nearest level")
    y = dequant_8bit_blockwise(q, absmax, code, 64, dtype=torch.float32)
    close(y, code[q.long()] * absmax.repeat_interleave(64).reshape(x.shape), 1e-6, 1e-6, "dequantised")


NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0])  # the NF4 levels (QLoRA, Dettmers et al. 2023)


@case("bitsandbytes", "quantize_nf4_blockwise_kernel", "dequant_nf4_kernel")
def bnb_nf4():
    from bitsandbytes.backends.triton.kernels_4bit import dequantize_4bit_impl, quantize_4bit_blockwise_triton
    x = rnd(4, 256)
    n, bs = x.numel(), 64
    absmax = torch.empty(n // bs)
    packed = torch.empty(n // 2, dtype=torch.uint8)
    quantize_4bit_blockwise_triton(x, bs, "nf4", n // bs, absmax, n, packed)
    close(absmax, x.reshape(-1, bs).abs().amax(1), 0, 0, "absmax")
    out = torch.empty_like(x)
    dequantize_4bit_impl(packed, absmax, bs, "nf4", torch.float32, out)
    err = (out - x).abs()
    if (err > _roundtrip_bound(x, bs, NF4)).any():
        raise AssertionError(f"nf4 round trip off by {err.max().item():.3g}")
    levels = (out.reshape(-1, bs) / absmax[:, None]).reshape(-1)
    if ((levels[:, None] - NF4).abs().min(1).values > 1e-5).any():
        raise AssertionError("dequantised values are not NF4 levels")


@case("bitsandbytes", "quantize_fp4_blockwise_kernel", "dequant_fp4_kernel")
def bnb_fp4():
    from bitsandbytes.backends.triton.kernels_4bit import dequantize_4bit_impl, quantize_4bit_blockwise_triton
    x = rnd(4, 256)
    n, bs = x.numel(), 64
    absmax = torch.empty(n // bs)
    packed = torch.empty(n // 2, dtype=torch.uint8)
    quantize_4bit_blockwise_triton(x, bs, "fp4", n // bs, absmax, n, packed)
    out = torch.empty_like(x)
    dequantize_4bit_impl(packed, absmax, bs, "fp4", torch.float32, out)
    # bitsandbytes' fp4 levels (e2m1 scaled to [-1, 1]): 0, 1/192 (its subnormal), 1/12 ... 1 and their negatives
    pos = torch.tensor([0.0, 0.0052083333, 0.6666667, 1.0, 0.3333333, 0.5, 0.1666667, 0.25])
    levels = torch.cat([-pos, pos]).sort().values
    err = (out - x).abs()
    if (err > _roundtrip_bound(x, bs, levels) * 1.0001).any():
        raise AssertionError(f"fp4 round trip off by {err.max().item():.3g}")


@case("bitsandbytes", "_optimizer_update_2state_32bit_triton_kernel")
def bnb_adam_32bit():
    from bitsandbytes.backends.triton.kernels_optim import optimizer_update_32bit_impl
    p, g = rnd(1000), rnd(1000)
    m, v = torch.zeros(1000), torch.zeros(1000)
    p_ref, m_ref, v_ref = p.clone().double(), m.clone().double(), v.clone().double()
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-2
    for step in (1, 2, 3):
        optimizer_update_32bit_impl("adam", g, p, m, v, None, 0.0, 0.0, b1, b2, 0.0, 0.0, eps, 0.0, step, lr)
        m_ref = b1 * m_ref + (1 - b1) * g.double()
        v_ref = b2 * v_ref + (1 - b2) * g.double() ** 2
        p_ref = p_ref - lr * (m_ref / (1 - b1 ** step)) / ((v_ref / (1 - b2 ** step)).sqrt() + eps)
    close(m, m_ref, 1e-6, 1e-5, "first moment")
    close(v, v_ref, 1e-6, 1e-5, "second moment")
    close(p, p_ref, 1e-5, 1e-5, "parameters")


# ---- lightning-attn (OpenNLPLab's lightning attention 2, MIT): causal linear attention with decay ------------------

def lightning_ref(q, k, v, s=None):
    n = q.shape[-2]
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).double()
    decay = torch.exp(-s.double().reshape(1, -1, 1, 1) * dist) if s is not None else torch.ones(1, 1, n, n)
    w = torch.where(dist >= 0, decay, torch.zeros(()))
    return ((q.double() @ k.double().transpose(-1, -2)) * w) @ v.double()


@case("lightning-attn", "_fwd_kernel", "_bwd_intra_kernel", "_bwd_inter_kernel")
def lightning_attn2_decay():
    from lightning_attn.ops.triton.lightning_attn2 import lightning_attn2
    q, k, v = rnd(1, 2, 100, 16, scale=0.3), rnd(1, 2, 100, 16, scale=0.3), rnd(1, 2, 100, 32, scale=0.3)
    s = torch.tensor([0.1, 0.02]).reshape(2, 1, 1)
    check_fwd_bwd(lambda q, k, v: lightning_attn2(q, k, v, s), lambda q, k, v: lightning_ref(q, k, v, s).float(),
                  q, k, v, atol=2e-3, rtol=2e-3)


@case("lightning-attn", "_fwd_kernel")
def lightning_attn2_no_decay():
    from lightning_attn.ops.triton.lightning_attn2_no_decay import lightning_attn2_no_decay
    q, k, v = rnd(1, 2, 70, 16, scale=0.3), rnd(1, 2, 70, 16, scale=0.3), rnd(1, 2, 70, 16, scale=0.3)
    close(lightning_attn2_no_decay(q, k, v), lightning_ref(q, k, v), 2e-3, 2e-3, "output")


@case("lightning-attn", "srms_norm_fw", "srms_norm_bwd_dx_fused")
def lightning_srmsnorm():
    from lightning_attn.ops.triton.srmsnorm import _SrmsNorm
    check_fwd_bwd(lambda x: _SrmsNorm.apply(x, 1e-6),
                  lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), rnd(6, 96), atol=1e-4)


# ---- torchao (pytorch/ao, BSD-3-Clause): fp8 block quantisation and low-precision GEMMs -----------------------------

E4M3_MAX = 448.0


def fp8_quant_ref(x, scale):
    """``x / scale`` rounded to float8_e4m3fn (torch's own cast), as float32."""
    return (x / scale).to(torch.float8_e4m3fn).float()


@case("torchao", "triton_fp8_blockwise_act_quant_lhs_kernel")
def torchao_fp8_act_quant_lhs():
    from torchao.prototype.blockwise_fp8_training.kernels import triton_fp8_blockwise_act_quant_lhs
    x = rnd(40, 256)
    y, s = triton_fp8_blockwise_act_quant_lhs(x, 128)
    amax = x.reshape(40, 2, 128).abs().amax(-1).clamp(min=1e-12).double()
    scale = (E4M3_MAX / amax).float()
    close(s, 1.0 / scale, 0, 1e-6, "reciprocal scales")
    want = (x.reshape(40, 2, 128) * scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
    close(y.float(), want.reshape(40, 256), 0, 0, "fp8 values")


@case("torchao", "triton_fp8_blockwise_weight_quant_rhs_kernel")
def torchao_fp8_weight_quant_rhs():
    from torchao.prototype.blockwise_fp8_training.kernels import triton_fp8_blockwise_weight_quant_rhs
    w = rnd(256, 128)
    y, s = triton_fp8_blockwise_weight_quant_rhs(w, 128)
    amax = w.reshape(2, 128, 1, 128).abs().amax((1, 3)).clamp(min=1e-12).double()
    scale = (E4M3_MAX / amax).float()
    close(s, 1.0 / scale, 0, 1e-6, "reciprocal scales")
    want = (w.reshape(2, 128, 1, 128) * scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    close(y.float(), want.float().reshape(256, 128), 0, 0, "fp8 values")


@case("torchao", "triton_fp8_blockwise_act_quant_lhs_kernel", "triton_fp8_blockwise_weight_quant_rhs_kernel",
      "triton_fp8_gemm_1x128_128x128_kernel")
def torchao_fp8_gemm_1x128_128x128():
    from torchao.prototype.blockwise_fp8_training.kernels import (triton_fp8_blockwise_act_quant_lhs,
                                                                  triton_fp8_blockwise_weight_quant_rhs,
                                                                  triton_fp8_gemm_1x128_128x128)
    a, b = rnd(32, 256), rnd(256, 128)
    aq, a_s = triton_fp8_blockwise_act_quant_lhs(a, 128)
    bq, b_s = triton_fp8_blockwise_weight_quant_rhs(b, 128)
    c = triton_fp8_gemm_1x128_128x128(aq, bq, a_s, b_s, 128)
    a_deq = aq.float().reshape(32, 2, 128) * a_s[..., None]
    b_deq = bq.float().reshape(2, 128, 1, 128) * b_s[:, None, :, None]
    want = a_deq.reshape(32, 256).double() @ b_deq.reshape(256, 128).double()
    close(c, want, 1e-3, 1e-4, "product")


@case("torchao", "_scaled_int8_mm_kernel")
def torchao_scaled_int8_mm():
    from torchao.prototype.quantized_training.int8_mm import scaled_int8_mm_cuda
    A, B = torch.randint(-128, 128, (64, 96), dtype=torch.int8), torch.randint(-128, 128, (96, 80), dtype=torch.int8)
    row, col = torch.rand(64, 1), torch.rand(1, 80)
    c = scaled_int8_mm_cuda(A, B, row, col)
    want = (A.double() @ B.double()) * row.double() * col.double()
    close(c, want, 1e-3, 1e-5, "product")


@case("torchao", "matmul_kernel_with_block_pointers")
def torchao_int_matmul():
    import triton
    from torchao.kernel.intmm_triton import int_matmul_kernel
    a, b = torch.randint(-128, 128, (64, 64), dtype=torch.int8), torch.randint(-128, 128, (64, 64), dtype=torch.int8)
    c = torch.empty(64, 64, dtype=torch.int32)
    config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=2, num_warps=4)
    int_matmul_kernel(a, b, c, config)
    if not torch.equal(c, a.int() @ b.int()):
        raise AssertionError(f"int8 product off in {int((c != a.int() @ b.int()).sum())} elements")


@case("liger-kernel", "liger_cross_entropy_kernel")
def liger_cross_entropy_vocab_32000():
    # a GPU-sized block: BLOCK_SIZE = 32768 for a 32,000-word vocabulary (its gradient loop holds 256 KiB as
    # written; strip-mined to fit a core's Unified Buffer)
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    x, t = rnd(4, 32000), torch.randint(0, 32000, (4,))
    check_fwd_bwd(lambda x: LigerCrossEntropyFunction.apply(x, t, None, -100)[0],
                  lambda x: F.cross_entropy(x, t), x, atol=1e-5)


# ---- FlashInfer (flashinfer-ai/flashinfer, Apache-2.0): its Triton kernels for serving ---------------------------

@case("flashinfer", "rms_norm_kernel")
def flashinfer_rms_norm():
    from flashinfer.triton.norm import rms_norm
    x, w = rnd(7, 300), rnd(300)
    out = torch.empty_like(x)
    rms_norm(x, w, out, 1e-6)
    close(out, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, 1e-5, 1e-5, "rms norm")


@case("flashinfer", "rms_norm_kernel")
def flashinfer_rms_norm_add_residual():
    from flashinfer.triton.norm import rms_norm_add_residual
    x, r, w = rnd(5, 200), rnd(5, 200), rnd(200)
    x0, r0 = x.clone(), r.clone()
    out = torch.empty_like(x)
    rms_norm_add_residual(x, r, w, 1e-6, x_out=out)
    s = x0 + r0
    close(r, s, 1e-6, 1e-6, "residual (r + x)")
    close(out, s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w, 1e-5, 1e-5, "rms norm of r + x")


@case("flashinfer", "silu_and_mul_kernel")
def flashinfer_silu_and_mul():
    from flashinfer.triton.activation import silu_and_mul
    x = rnd(6, 2 * 700)
    close(silu_and_mul(x), F.silu(x[:, :700]) * x[:, 700:], 1e-5, 1e-5, "silu and mul")
