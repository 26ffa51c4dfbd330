"""A small Llama from `transformers` (random weights, no downloads) under
`torch.compile(model, backend="dvmlang", dynamic=True)` over five sequence lengths, checked against eager.

One dynamic FX graph serves every length: its dvmlang regions are planned once, and a new length only encodes
bytecode for the new sizes (a kernel is built again only when a new size picks a tile size it has not used:
docs/torch.md). The whole forward pass (embedding, rotary embedding, the causal mask, attention, MLP, logits)
is one fused region and one launch per call; an op dvmlang had no lowering for would run in torch eager between
fused regions, counted in `dvmlang.torch.stats()["fallback_ops"]`.
"""

import os
import sys

# run as a script, this folder is sys.path[0], and its triton/ (Triton's tutorials) would shadow the `triton`
# package torch probes for at import
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import time  # noqa: E402

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import dvmlang.torch as dt  # noqa: E402

LENGTHS = (17, 20, 24, 28, 32)


def model():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, use_cache=False)
    return LlamaForCausalLM(cfg).eval()


def run(lengths=LENGTHS, verbose=False):
    torch._dynamo.reset()  # what dynamo compiled earlier in this process (other examples, tests) is not counted
    m = model()
    compiled = torch.compile(m, backend="dvmlang", dynamic=True)
    dt.reset_stats()
    rows, records, plans = [], [], 0
    for n in lengths:
        ids = torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(n))
        before = dt.stats()
        seen = len(dt.launches())  # (the records of the latest calls: this call's are those after these)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = compiled(ids).logits
        host = time.perf_counter() - t0
        with torch.no_grad():
            torch.testing.assert_close(out, m(ids).logits, rtol=1e-3, atol=1e-5)
        s = dt.stats()
        records.extend(dt.launches()[seen:])
        plans = plans if rows else s["plans"]
        rows.append((n, s["builds"] - before["builds"], s["encodes"] - before["encodes"],
                     s["launches"] - before["launches"], s["simulated_us"] - before["simulated_us"], host))
    s = dt.stats()
    assert s["graphs"] == 1, "one dynamic graph for every length (dynamo never recompiled)"
    assert s["plans"] == plans, "fusion is planned once, at compile time"
    assert all(r[2] > 0 for r in rows), "every new length encodes"
    if verbose:
        print(f"{'length':>6} {'builds':>6} {'encodes':>7} {'launches':>8} {'simulated':>10} {'host':>8}")
        for n, b, e, launches, us, host in rows:
            print(f"{n:>6} {b:>6} {e:>7} {launches:>8} {us:>8.1f}us {host * 1e3:>6.0f}ms")
        print("fallbacks (torch eager):", s["fallback_ops"])
    return records


if __name__ == "__main__":
    run(verbose=True)
