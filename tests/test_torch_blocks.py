"""torch.nn building blocks and the ops of their backward graphs under ``torch.compile(backend="dvmlang")``:
forward and gradients equal eager (fp32 rtol 1e-3) and nothing falls back to eager.

Each case runs with ``dynamic=False``; the ones marked ``dyn`` also with ``dynamic=True`` (the rest fall back
there: a gather or scatter whose operands fold or name their dims differently; docs/torch.md, Fallbacks)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import dvmlang.torch as D  # noqa: E402

RTOL = 1e-3


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=RTOL, atol=1e-5)


def _weighted(out):
    """A scalar whose gradient is a different weight at every element of every output."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum((o * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum() for o in outs)


def _check(f, args, grad, dynamic):
    torch._dynamo.reset()
    D.reset_stats()
    c = torch.compile(f, backend="dvmlang", dynamic=dynamic)
    if not grad:
        with torch.no_grad():
            _close(c(*args), f(*args))
    else:
        mine = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
        ref = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
        out, want = c(*mine), f(*ref)
        _close(out, want)
        _weighted(out).backward()
        _weighted(want).backward()
        for a, b in zip(mine, ref):
            if b.grad is not None:
                _close(a.grad, b.grad)
    s = D.stats()
    assert s["fallback_ops"] == {} and s["runtime_fallbacks"] == 0, (s["fallback_ops"], s["runtime_reasons"])
    assert s["launches"] >= 1


torch.manual_seed(0)
X = torch.randn(2, 7, 16)
IDS = torch.randint(0, 50, (2, 7))
EMB = torch.nn.Embedding(50, 16)
GI = torch.randint(0, 16, (2, 7, 4))
TGT = torch.randint(0, 16, (14,))
Q, K, V = (torch.randn(2, 4, 7, 8) for _ in range(3))
AMASK = torch.randn(2, 1, 7, 7)
BMASK = torch.rand(7, 7) > 0.3
BMASK[:, 0] = True
LIN = torch.nn.Linear(16, 8)


def _rot(a):
    a1, a2 = a[..., :8], a[..., 8:]
    return a * 0.5 + torch.cat((-a2, a1), -1) * 0.25


def _sum(*outs):
    """Several blocks' outputs (one compile checks them all; a fallback names its op)."""
    return outs


SDPA = F.scaled_dot_product_attention
CASES = {  # name: (function, args, also with dynamic=True)
    "embedding_index_select_gather": (
        lambda w, a, i: _sum(F.embedding(IDS, w).sum(-1), torch.index_select(a, 1, torch.tensor([3, 0, 5, 3])) * 2,
                             torch.gather(a, -1, i) + 1), (EMB.weight.detach(), X, GI), True),
    "cumsum_flip_pad_tril": (
        lambda a: _sum(torch.cumsum(a, 1), torch.flip(a, [-1, 1]) + 1, F.pad(a, (1, 2, -1, 0), value=0.5) * 2,
                       torch.tril(a[0, :, :7])), (X,), True),
    "softmaxes_max_var": (
        lambda a: _sum(F.log_softmax(a, -1), a.masked_fill(a > 0.5, -1e4).softmax(-1),
                       a.max(-1).values + a.min(1).values.sum(), a.var(-1) + a.mean(1).sum()), (X,), True),
    "cross_entropy": (lambda a, t: F.cross_entropy(a.reshape(-1, 16), t, ignore_index=3).reshape(1), (X, TGT), False),
    "cross_entropy_lm": (  # a language-model loss: logits and labels folded alike, batch * seq
        lambda a, t: F.cross_entropy(a.reshape(-1, 16), t.reshape(-1)).reshape(1), (X, IDS % 16), True),
    "sdpa_causal_and_bool_mask": (
        lambda q, k, v: _sum(SDPA(q, k, v, is_causal=True), SDPA(q, k, v, attn_mask=BMASK)), (Q, K, V), True),
    "sdpa_additive_mask": (lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), (Q, K, V, AMASK), True),
    "rotary_chunk_split": (
        lambda a: _sum(_rot(a), torch.cat([c * (i + 1) for i, c in enumerate(a[..., :15].chunk(4, -1))], -1),
                       torch.split(a, [5, 11], -1)[1].exp()), (X,), True),
    "scatter_scatter_add": (
        lambda a, i: _sum(torch.zeros(2, 7, 16).scatter(-1, i, a[..., :4]),
                          torch.ones(2, 7, 16).scatter_add(-1, i, a[..., :4])), (X, GI), False),
    "norms_linear_activations": (
        lambda a: _sum(NORMS[0](a), NORMS[1](a), F.gelu(LIN(a)), F.relu(F.silu(LIN(a)) - 0.1)), (X,), True),
}
NORMS = (torch.nn.LayerNorm(16), torch.nn.RMSNorm(16))


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_equal_eager_without_fallback(name):
    f, args, dyn = CASES[name]
    grad = any(a.is_floating_point() for a in args)
    _check(f, args, grad, False)
    if dyn:
        _check(f, args, grad, True)


def test_argmax_and_dropout_in_eval():
    drop = torch.nn.Dropout(0.3).eval()
    _check(lambda a: drop(a).argmax(-1) + a.argmax(1).sum(), (X,), False, True)


@pytest.mark.parametrize("kind", ["mha", "encoder"])
def test_attention_layers_train(kind):
    torch.manual_seed(2)
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        if kind == "mha":
            mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
            _check(lambda a: mha(a, a, a)[0], (X,), True, False)
            _check(lambda a: mha(a, a, a)[0], (X,), True, True)
        else:
            enc = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
            _check(enc, (X,), True, False)
    finally:
        torch.backends.mha.set_fastpath_enabled(prev)


def test_chunks_of_a_symbolic_size_encode_at_every_length():
    """``chunk`` under ``dynamic=True``: chunk sizes are ``(n + 3) // 4`` and ``n - 3 * ((n + 3) // 4)``, sizes the
    fuser derives from the symbol at every call."""
    f = lambda a: torch.cat([c * (i + 1) for i, c in enumerate(a.chunk(4, -1))], -1).exp()  # noqa: E731
    torch._dynamo.reset()
    D.reset_stats()
    c = torch.compile(f, backend="dvmlang", dynamic=True)
    for n in (16, 18, 21, 30):
        x = torch.randn(3, n)
        _close(c(x), f(x))
    s = D.stats()
    assert s["fallback_ops"] == {} and s["runtime_fallbacks"] == 0, s["runtime_reasons"]
