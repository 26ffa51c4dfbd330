"""torch.compile of a small Llama (transformers, random weights) over five sequence lengths: dvmlang against
TorchInductor, in one run.

dvmlang (``backend="dvmlang", dynamic=True``): per length, the kernel builds and bytecode encodes the call made,
its launches, its simulated time on the 910B2-like NPU, and its host time (the first length includes dynamo's
and AOTAutograd's trace and dvmlang's planning; later lengths only bind, encode and simulate). Fallback ops
(torch eager between the fused regions) are listed once.

TorchInductor (CPU, ``TORCHINDUCTOR_CACHE_DIR`` set to a fresh temporary directory so nothing is reused from
earlier runs), per length, the host time of the first call at that length: with ``dynamic=False`` every new
length recompiles (dynamo, AOTAutograd, Inductor codegen and the C++ compile); with ``dynamic=True`` one
symbolic compile serves all lengths after the first (as long as dynamo's guards hold). Its steady-state time
per call is measured too (median of 5 calls at the last length).

    python benchmarks/torch_llama.py [--lengths 17 20 24 28 32] [--layers 2] [--hidden 64] [--no-inductor]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="dvmlang_inductor_"))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import dvmlang.torch as dt  # noqa: E402


def model(layers: int, hidden: int):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, use_cache=False)
    return LlamaForCausalLM(cfg).eval()


def ids_for(n: int):
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(n))


def timed(fn, *a):
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fn(*a)
    return out, time.perf_counter() - t0


def bench_dvmlang(m, lengths):
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    dt.reset_stats()
    rows = []
    for n in lengths:
        ids = ids_for(n)
        before = dt.stats()
        out, host = timed(c, ids)
        with torch.no_grad():
            torch.testing.assert_close(out.logits, m(ids).logits, rtol=1e-3, atol=1e-5)
        s = dt.stats()
        _, again = timed(c, ids)  # the same length again: bytecode reused, no encode
        rows.append(dict(n=n, builds=s["builds"] - before["builds"], encodes=s["encodes"] - before["encodes"],
                         launches=s["launches"] - before["launches"], sim_us=s["simulated_us"] - before["simulated_us"],
                         host=host, again=again, plans=s["plans"], graphs=s["graphs"]))
    return rows, dt.stats()["fallback_ops"]


def bench_inductor(m, lengths, dynamic):
    torch._dynamo.reset()
    c = torch.compile(m, backend="inductor", dynamic=dynamic)
    firsts = []
    for n in lengths:
        _, t = timed(c, ids_for(n))
        firsts.append(t)
    steady = statistics.median(timed(c, ids_for(lengths[-1]))[1] for _ in range(5))
    return firsts, steady


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[17, 20, 24, 28, 32])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args(argv)
    m = model(args.layers, args.hidden)
    rows, fallbacks = bench_dvmlang(m, args.lengths)
    ind = {}
    if not args.no_inductor:
        for dyn in (False, True):
            ind[dyn] = bench_inductor(m, args.lengths, dyn)
    print(f"Llama: {args.layers} layer(s), hidden {args.hidden}, batch 1; TORCHINDUCTOR_CACHE_DIR="
          f"{os.environ['TORCHINDUCTOR_CACHE_DIR']}")
    head = ["length", "builds", "encodes", "launches", "simulated", "host 1st call", "host again"]
    if ind:
        head += ["inductor 1st call (static)", "inductor 1st call (dynamic)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for i, r in enumerate(rows):
        cells = [str(r["n"]), str(r["builds"]), str(r["encodes"]), str(r["launches"]), f"{r['sim_us']:.1f} us",
                 f"{r['host'] * 1e3:,.0f} ms", f"{r['again'] * 1e3:,.0f} ms"]
        if ind:
            cells += [f"{ind[False][0][i] * 1e3:,.0f} ms", f"{ind[True][0][i] * 1e3:,.0f} ms"]
        print("| " + " | ".join(cells) + " |")
    print(f"dvmlang: {rows[-1]['graphs']} FX graph(s), {rows[-1]['plans']} fused region(s) planned once; "
          f"fallbacks (torch eager, executions over all calls): {fallbacks}")
    if ind:
        print(f"inductor steady state at length {args.lengths[-1]}: static {ind[False][1] * 1e3:.2f} ms, "
              f"dynamic {ind[True][1] * 1e3:.2f} ms per call (CPU)")


if __name__ == "__main__":
    main()
