"""A Dynamo recompile reuses an earlier compiled graph when the new graph is that graph at other sizes
(dvmlang/torch/reuse.py): a length of 1 after a symbolic length, a batch of 1 after a batch of 2, the model compiled
again. Every result is checked against torch eager; where the graphs differ (a squeeze of the dim that became 1,
another constant) the new graph is compiled afresh, and still equals eager."""

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
D = pytest.importorskip("dvmlang.torch")

reuse = importlib.import_module("dvmlang.torch.reuse")

RTOL, ATOL = 1e-3, 1e-5


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    reuse._REGISTRY.clear()  # each test sees only the graphs it compiles
    D.reset_stats()
    yield
    torch._dynamo.reset()


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=RTOL, atol=ATOL)


def _delta(before, after):
    return {k: after[k] - before[k] for k in ("builds", "plans", "graphs", "reused_graphs")}


def _run(c, m, *inputs):
    """One call of the compiled model, checked against eager; what it compiled and built."""
    before = D.stats()
    with torch.no_grad():
        out, ref = c(*inputs), m(*inputs)
    out = out.logits if hasattr(out, "logits") else out
    ref = ref.logits if hasattr(ref, "logits") else ref
    _close(out, ref)
    return _delta(before, D.stats())


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    return LlamaForCausalLM(cfg).eval()


def test_llama_length_one_after_forty_reuses_the_symbolic_graph():
    m = _llama()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    first = _run(c, m, torch.randint(0, 64, (1, 40)))
    assert first["builds"] > 0 and first["reused_graphs"] == 0
    one = _run(c, m, torch.randint(0, 64, (1, 1)))  # dynamo recompiles: the length is the literal 1
    assert one == {"builds": 0, "plans": 0, "graphs": 1, "reused_graphs": 1}
    again = _run(c, m, torch.randint(0, 64, (1, 23)))  # the symbolic graph still serves other lengths
    assert again["builds"] == again["plans"] == again["graphs"] == 0


def test_batch_one_after_batch_two_reuses_the_symbolic_graph():
    m = _llama()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    _run(c, m, torch.randint(0, 64, (2, 12)))
    one = _run(c, m, torch.randint(0, 64, (1, 12)))  # batch 1: literal, the length still a symbol
    assert one == {"builds": 0, "plans": 0, "graphs": 1, "reused_graphs": 1}
    assert _run(c, m, torch.randint(0, 64, (1, 7)))["builds"] == 0  # the reused graph's length is a symbol
    both = _run(c, m, torch.randint(0, 64, (1, 1)))  # batch and length 1
    assert both["builds"] == 0 and both["reused_graphs"] == 1


class Broadcast(torch.nn.Module):
    """A [B, 1, D] value broadcast over the length of a [B, L, D] one: its 1 is a literal in every graph."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x, y):  # x [B, L, D], y [B, 1, D]
        h = torch.tanh(self.lin(x) + y)
        return h * h.mean(1, keepdim=True) + y.sum(-1, keepdim=True)


def test_a_size_one_dim_that_broadcasts_keeps_its_meaning():
    torch.manual_seed(1)
    m = Broadcast().eval()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    _run(c, m, torch.randn(2, 9, 16), torch.randn(2, 1, 16))
    one = _run(c, m, torch.randn(2, 1, 16), torch.randn(2, 1, 16))  # L = 1: both operands [2, 1, 16]
    assert one["reused_graphs"] == 1 and one["builds"] == 0
    _run(c, m, torch.randn(2, 5, 16), torch.randn(2, 1, 16))


class Masked(torch.nn.Module):
    """Attention scores with a causal mask [1, 1, L, L] and a padding mask [B, 1, 1, L], both broadcast."""

    def __init__(self):
        super().__init__()
        self.qk = torch.nn.Linear(16, 32)

    def forward(self, x, keep):  # x [B, L, 16], keep [B, L] (bool)
        b, n, _ = x.shape
        q, k = self.qk(x).view(b, n, 2, 2, 8).transpose(1, 3).unbind(1)  # [B, H, L, 8] each
        s = q @ k.transpose(-1, -2) / 8 ** 0.5
        causal = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
        s = s.masked_fill(~causal, float("-inf")).masked_fill(~keep[:, None, None, :], -1e4)
        return torch.softmax(s, -1)


def test_a_model_with_masks_at_length_one():
    torch.manual_seed(2)
    m = Masked().eval()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    _run(c, m, torch.randn(2, 6, 16), keep)
    one = _run(c, m, torch.randn(2, 1, 16), torch.ones(2, 1, dtype=torch.bool))
    assert one["reused_graphs"] == 1 and one["builds"] == 0
    dropped = torch.ones(2, 1, dtype=torch.bool)
    dropped[0, 0] = False  # a row whose only key is padding: -1e4 everywhere, softmax of one element
    _run(c, m, torch.randn(2, 1, 16), dropped)


def test_a_graph_that_differs_at_size_one_is_compiled_afresh():
    def f(x):  # squeeze(1) drops the length dim only when it is 1: another graph, another result shape
        return torch.exp(x.squeeze(1)) * 2.0

    c = torch.compile(f, backend="dvmlang", dynamic=True)
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        _close(c(x), f(x))
        before = D.stats()
        x1 = torch.randn(3, 1, 8)
        _close(c(x1), f(x1))
    d = _delta(before, D.stats())
    assert d["reused_graphs"] == 0 and d["plans"] == 1


def test_another_constant_is_another_graph():
    """Two functions of the same structure with different numbers: the second is never run by the first's graph."""
    def f2(x):
        return torch.tanh(x * 2.0) + 1.0

    def f3(x):
        return torch.tanh(x * 3.0) + 1.0

    x = torch.randn(4, 8)
    with torch.no_grad():
        _close(torch.compile(f2, backend="dvmlang")(x), f2(x))
        before = D.stats()
        _close(torch.compile(f3, backend="dvmlang")(x), f3(x))
    assert _delta(before, D.stats())["reused_graphs"] == 0


def test_dynamo_reset_is_a_fresh_start():
    """After ``torch._dynamo.reset()`` (as if in a new process) the model is planned again; its kernels are found by
    content, so nothing is built."""
    torch.manual_seed(3)
    m = Broadcast().eval()
    x, y = torch.randn(2, 7, 16), torch.randn(2, 1, 16)
    _run(torch.compile(m, backend="dvmlang", dynamic=True), m, x, y)
    torch._dynamo.reset()
    fresh = _run(torch.compile(m, backend="dvmlang", dynamic=True), m, x, y)
    assert fresh == {"builds": 0, "plans": 1, "graphs": 1, "reused_graphs": 0}


def test_training_at_batch_one_after_batch_four():
    """A training graph's batch of 1: forward and backward equal eager's. (They are compiled afresh: the batch
    was a SymInt input of the symbolic forward, whose outputs and gradients the new graphs do not have.)"""
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    ref.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    for rows in (4, 1):
        x = torch.randn(rows, 8)
        c(x).square().sum().backward()
        ref(x).square().sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=1e-6)
            p.grad = q.grad = None


def test_reuse_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("DVMLANG_TORCH_REUSE", "0")
    torch.manual_seed(1)
    m = Broadcast().eval()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    _run(c, m, torch.randn(2, 9, 16), torch.randn(2, 1, 16))
    one = _run(c, m, torch.randn(2, 1, 16), torch.randn(2, 1, 16))
    assert one["reused_graphs"] == 0 and one["plans"] >= 1


def test_the_registry_holds_only_its_latest_graphs_and_those_weakly():
    """Only the latest ``_TRIES`` graphs of a signature are ever tried, so only those are kept, and weakly: a graph
    dynamo dropped is freed (with its programs and kernels), not kept for the process's life."""
    import gc
    import weakref

    class Graph:  # (what register reads of a CompiledGraph: its placeholders)
        placeholders: list = []

    graphs = [Graph() for _ in range(reuse._TRIES + 3)]
    for g in graphs:
        reuse.register(g, "fw")
    kept = reuse._REGISTRY[reuse._key("fw", [])]
    assert [r() for r in kept] == graphs[-reuse._TRIES:]
    last = weakref.ref(graphs[-1])
    del graphs, g, kept
    gc.collect()
    assert last() is None
