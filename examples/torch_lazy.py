"""Ordinary eager PyTorch under `with dvmlang.torch.lazy():`, fused on observation, checked against torch eager.

A pre-norm transformer block (layer norm, two-head attention, GELU MLP) written as plain eager torch code on
CPU tensors. Under the lazy mode every aten op is captured into a dvmlang lazy graph instead of running; the
Python `if` on a computed value observes it (one flush: the whole block as one stacked launch), a `logcumsumexp`
(no dvmlang lowering) flushes and runs in torch, an in-place update through a view keeps eager aliasing, and a
`@dvmlang.kernel` wrapped as a torch op (`dvmlang.torch.custom_op`) runs as its own launch (docs/torch.md).
"""

import math
import os
import sys

# run as a script, this folder is sys.path[0], and its triton/ (Triton's tutorials) would shadow the `triton`
# package torch probes for at import
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import torch  # noqa: E402

import dvmlang  # noqa: E402
import dvmlang.language as dl  # noqa: E402
import dvmlang.torch as dvt  # noqa: E402
from dvmlang.fuser.lazy import fresh_runtime  # noqa: E402

D, HEADS = 32, 2


@dvmlang.kernel
def residual_scale(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) + alpha * dl.load(y_ptr + offs, mask=m), mask=m)


@dvt.custom_op("dvmlang_examples::residual_half", outputs=lambda x, y: [(x.shape, x.dtype)])
def residual_half(x, y, out):
    n = x.numel()
    residual_scale[(dl.cdiv(n, 512),)](x, y, out, n, 0.5, BLOCK=512)


def params():
    g = torch.Generator().manual_seed(0)
    w = {k: torch.randn(*s, generator=g) * 0.2 for k, s in
         {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (4 * D, D), "w2": (D, 4 * D)}.items()}
    w["b1"] = torch.zeros(4 * D)
    w["g"], w["b"] = torch.ones(D), torch.zeros(D)
    return w


def block(x, p):
    B, S, _ = x.shape
    h = torch.nn.functional.layer_norm(x, (D,), p["g"], p["b"])
    q, k, v = ((h @ p[n]).view(B, S, HEADS, D // HEADS).transpose(1, 2) for n in ("wq", "wk", "wv"))
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // HEADS), dim=-1)
    x = x + (a @ v).transpose(1, 2).reshape(B, S, D) @ p["wo"]
    h = torch.nn.functional.layer_norm(x, (D,), p["g"], p["b"])
    return x + torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(h, p["w1"], p["b1"])),
                                          p["w2"])


def program(x, p):
    y = block(x, p)
    if y.abs().mean() > 10:  # a Python `if` on a tensor: observes (flush #0, the whole block)
        y = y / 10
    top = torch.logcumsumexp(y, dim=-1)[..., -4:]  # no dvmlang lowering: runs in torch
    y[:, 0] += 1.0  # in place through a view (a slice): the base sees it, as in eager
    z = residual_half(y, torch.tanh(y))  # a dvmlang kernel as a torch op
    return z.sum(-1), top


def run(verbose=False):
    x = torch.randn(2, 8, D, generator=torch.Generator().manual_seed(1))
    p = params()
    with torch.no_grad():
        ref = program(x.clone(), p)
        with fresh_runtime():  # fresh lazy program names: the gallery's bytecode is deterministic
            dvt.reset_stats()
            with dvt.lazy() as session:
                got = program(x.clone(), p)
                vals = [t.numpy().copy() for t in got]  # observes what is still pending
    for g, r in zip(vals, ref):
        torch.testing.assert_close(torch.from_numpy(g), r, rtol=1e-4, atol=1e-4)
    s = dvt.stats()
    assert session.stats.flushes[0].reason == "observe", "the `if` observes the whole block"
    assert s["fallback_ops"].get("logcumsumexp.default") == 1
    if verbose:
        print(session.stats)
        print({k: s[k] for k in ("builds", "encodes", "launches", "fallback_ops", "cycles")})
    assert all(f.launches == 1 for f in session.stats.flushes), "each flush is one stacked launch"
    return session.stats.flushes  # one record per flush (each one launch, with its cycles)


if __name__ == "__main__":
    run(verbose=True)
