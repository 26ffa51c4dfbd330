"""Whole models on the simulated NPU against torch eager on this CPU, in one run (issue 38's targets).

* models     the torch models of the test suite and the examples (tests/test_torch_compile.py,
             tests/test_torch_blocks.py, the model zoo of tests/test_torch_zoo.py, examples/torch_*.py) and three
             larger ones, forward in eval under
             ``torch.compile(model, backend="dvmlang")``: the median host time of a steady call (after three
             warm calls) against torch eager's, calls taken in turn (``--calls N``: N back to back per round,
             each side alike, the time per call). Eager is timed with torch's own threads and
             with one thread, and the faster of the two is the reference. The ratio's target: at most 5x over the
             median of the models, at most 2x for a model whose eager call takes 5 ms or more. ``--inductor``
             times TorchInductor's steady call too (what another compiled backend's call costs on this CPU).
* generate   ``model.generate`` of a tiny Llama (vocab 256, hidden 64, 2 layers) with its forward compiled
             (``dynamic=True``), greedy, a prompt of 8 tokens and 32 new ones, after one warm run: host time per
             new token (target <= 10 ms), against eager's.
* collatz    the Collatz step count of 2,048 programs, each a data-dependent ``while`` loop (tens to hundreds of
             trips): host time of the launch (target <= 1 s), checked against Python.
* ctrl-c     how long after a SIGINT a launch that would run for hours stops (``KeyboardInterrupt``).
* warmup     the calls before the steady one: a fresh compile's second to fourth calls of six models against their
             steady call, and a dynamic-shape Llama's first three calls at new lengths (``bench_warmup``).

Times are ``time.perf_counter`` (wall: torch's threads work in parallel) and ``time.thread_time``; the machine's
load is printed with them.

    python benchmarks/model_speed.py [--quick] [--rounds 7] [--only models,generate,collatz,ctrl-c,warmup] [--inductor]
                                     [--models llama,mlp] [--calls 1]
"""

from __future__ import annotations

import _thread
import argparse
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dvmlang.torch as dt  # noqa: E402
from dvmlang.npu import Device  # noqa: E402

F = torch.nn.functional


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---- the models ----------------------------------------------------------------------------------------------


def _transformers(kind: str, hidden: int = 32, layers: int = 1, vocab: int = 64, heads: int = 4):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                            num_hidden_layers=layers, num_attention_heads=heads,
                                            num_key_value_heads=heads // 2 if hidden == 32 else heads,
                                            max_position_embeddings=256, use_cache=False)).eval()
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=256, n_embd=hidden, n_layer=layers,
                                          n_head=heads, use_cache=False, bos_token_id=0, eos_token_id=0)).eval()
    return BertModel(BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                intermediate_size=4 * hidden, max_position_embeddings=256)).eval()


def _ids(batch: int, n: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(n))


def models(quick: bool) -> dict:
    """name -> (a function of the inputs, the inputs, what to compare of its output)."""
    from test_torch_blocks import CASES
    from test_torch_compile import _Block
    torch.manual_seed(0)
    out = {}
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
    out["mlp"] = (mlp, (torch.randn(5, 16),))
    out["norm_gelu_silu_block"] = (_Block().eval(), (torch.randn(2, 6, 32),))
    torch.backends.mha.set_fastpath_enabled(False)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    out["multihead_attention"] = (lambda a: mha(a, a, a)[0], (torch.randn(2, 5, 32),))
    out["transformer_encoder_layer"] = (torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                                         batch_first=True).eval(),
                                        (torch.randn(2, 5, 32),))
    bn = torch.nn.Sequential(torch.nn.BatchNorm1d(12), torch.nn.Linear(12, 12)).eval()
    out["batchnorm_linear"] = (bn, (torch.randn(4, 12),))
    torch.manual_seed(0)
    train = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.SiLU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
    out["train_mlp_forward"] = (train, (torch.randn(16, 32),))
    for name in ("softmaxes_max_var", "norms_linear_activations", "rotary_chunk_split", "sdpa_causal_and_bool_mask",
                 "embedding_index_select_gather", "cumsum_flip_pad_tril"):
        f, args, _ = CASES[name]
        out[f"block_{name}"] = (f, args)
    for kind in ("llama", "gpt2", "bert"):
        out[f"{kind}_tiny"] = (_transformers(kind), (_ids(1, 9, 64),))
    out["llama_example"] = (_transformers("llama", 32, 1, 128), (_ids(1, 32, 128),))
    out["llama_2x64_batch2x40"] = (_transformers("llama", 64, 2, 256), (_ids(2, 40, 256),))
    from test_torch_zoo import FORWARD  # the test suite's model zoo (forward; transformers models need the extra)
    for name, (make, inputs, _) in FORWARD.items():
        torch.manual_seed(0)
        out[f"zoo_{name}"] = (make(), inputs())
    if not quick:  # larger: eager takes milliseconds
        out["llama_h256_l2_s128"] = (_transformers("llama", 256, 2, 1024), (_ids(1, 128, 1024),))
        out["gpt2_h256_l2_s128"] = (_transformers("gpt2", 256, 2, 1024), (_ids(1, 128, 1024),))
        out["bert_h256_l2_s128"] = (_transformers("bert", 256, 2, 1024), (_ids(1, 128, 1024),))
    return out


def _first(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        return _first(x[0])
    for key in ("logits", "last_hidden_state"):
        if hasattr(x, key):
            return getattr(x, key)
    raise TypeError(type(x))


def _timed(fn, *args, calls: int = 1) -> tuple[float, float]:
    """(wall, thread CPU) of one call of ``fn``: of ``calls`` back to back, per call."""
    w, c = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - w) / calls, (time.thread_time() - c) / calls


def bench_models(quick: bool, rounds: int, inductor: bool = False, only=None, calls: int = 1) -> list:
    rows = []
    threads = torch.get_num_threads()
    for name, (fn, args) in models(quick).items():
        if only and not any(o in name for o in only):
            continue
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="dvmlang")
        with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=True):  # (the zoo's LSTM and GRU, not left to eager)
            ref = _first(fn(*args))
            for _ in range(3):
                got = _first(compiled(*args))
            torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-4)
            dv, ea, e1 = [], [], []
            for _ in range(rounds):
                dv.append(_timed(compiled, *args, calls=calls))
                ea.append(_timed(fn, *args, calls=calls))
                torch.set_num_threads(1)
                e1.append(_timed(fn, *args, calls=calls))
                torch.set_num_threads(threads)
        d = statistics.median(w for w, _ in dv)
        e = min(statistics.median(w for w, _ in ea), statistics.median(w for w, _ in e1))
        s = dt.stats()
        rows.append((name, d, e, statistics.median(c for _, c in dv), s["fallback_ops"]))
        ind = ""
        if inductor:  # TorchInductor's steady call on this CPU: what a compiled backend's call costs here
            torch._dynamo.reset()
            ic = torch.compile(fn, backend="inductor")
            with torch.no_grad():
                for _ in range(3):
                    ic(*args)
                ind = statistics.median(_timed(ic, *args)[0] for _ in range(rounds))
            ind = f"  inductor {ind * 1e3:7.3f} ms ({ind / e:.1f}x)"
        print(f"{name:34s} dvmlang {d * 1e3:8.2f} ms  eager {e * 1e3:7.3f} ms  {d / e:6.1f}x  "
              f"(cpu {rows[-1][3] * 1e3:.2f} ms){ind}"
              f"{'  fallbacks ' + str(s['fallback_ops']) if s['fallback_ops'] else ''}", flush=True)
    ratios = [d / e for _, d, e, _, _ in rows]
    big = [(n, d / e) for n, d, e, _, _ in rows if e >= 5e-3]
    print(f"median dvmlang/eager over {len(rows)} models: {statistics.median(ratios):.1f}x (target <= 5x); "
          f"eager >= 5 ms: {', '.join(f'{n} {r:.1f}x' for n, r in big) or 'none'} (target <= 2x)  [{load()}]")
    return rows


# ---- generate ---------------------------------------------------------------------------------------------------


def bench_generate(new: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    m = LlamaForCausalLM(cfg).eval()
    ids = _ids(1, 8, 256)
    kw = dict(max_new_tokens=new, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        eager_out = m.generate(ids, **kw)
        eager = []
        for _ in range(3):
            w = time.perf_counter()
            m.generate(ids, **kw)
            eager.append(time.perf_counter() - w)
        eager = statistics.median(eager)
        torch._dynamo.reset()
        forward = m.forward
        m.forward = torch.compile(forward, backend="dvmlang", dynamic=True)
        try:
            out = m.generate(ids, **kw)  # (traces, builds and encodes every length)
            assert torch.equal(out, eager_out), "generate differs from eager"
            runs = []
            for _ in range(3):
                w = time.perf_counter()
                m.generate(ids, **kw)
                runs.append(time.perf_counter() - w)
        finally:
            m.forward = forward
    d = statistics.median(runs)
    print(f"generate: {d / new * 1e3:.2f} ms per new token (target <= 10 ms), eager {eager / new * 1e3:.2f} ms; "
          f"{d / eager:.1f}x  [{load()}]", flush=True)
    return d / new, eager / new


# ---- warm-up: the calls before the steady one ---------------------------------------------------------------------

WARM = ("multihead_attention", "transformer_encoder_layer", "llama_tiny", "gpt2_tiny", "bert_tiny", "zoo_moe_decoder")


def bench_warmup(quick: bool, lengths: int = 10):
    """Host time of the calls before a model is steady. Static shapes: a fresh ``torch.compile`` of each of
    ``WARM``, its second, third and fourth calls (the first compiles; the device times a new instance's first launch,
    records its path at the second, replays it from the third) against its steady call. New lengths: the paper's
    1-layer Llama (hidden 256) under ``dynamic=True``, each of ``lengths`` new lengths called three times in turn
    (the first pass at new lengths, then the same lengths again twice), the median call of each pass against the
    steady call at one length and eager's (wall time; dvmlang's calls thread CPU)."""
    from paper import models as pmodels
    zoo = models(quick)
    print("warm-up, static shapes (host ms per call; calls 2-4 of a fresh compile, then the steady call)", flush=True)
    for name in WARM:
        fn, args = zoo[name]
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="dvmlang")
        ts = []
        with torch.no_grad():
            for _ in range(9):
                c = time.thread_time()
                compiled(*args)
                ts.append(time.thread_time() - c)
        steady = statistics.median(ts[5:])
        print(f"  {name:34} " + " ".join(f"{t * 1e3:7.1f}" for t in ts[1:4]) + f"   steady {steady * 1e3:6.2f}  "
              f"(call 2 / steady {ts[1] / steady:5.1f}x)", flush=True)
    s = pmodels.SETTINGS["full"]
    torch._dynamo.reset()
    model = pmodels.build("llama", s)
    compiled = torch.compile(model, backend="dvmlang", dynamic=True)
    with torch.no_grad():
        for L in (40, 41, 42):  # (the compile, the dynamic recompile, the instance functions)
            compiled(pmodels.ids_for(L, s.vocab))
        passes = []
        for _ in range(3):
            ts = []
            for L in range(43, 43 + lengths):
                ids = pmodels.ids_for(L, s.vocab)
                c = time.thread_time()
                compiled(ids)
                ts.append(time.thread_time() - c)
            passes.append(statistics.median(ts))
        ids = pmodels.ids_for(43, s.vocab)
        steady = statistics.median(_timed(compiled, ids)[1] for _ in range(7))
        eager = statistics.median(_timed(model, ids)[0] for _ in range(7))  # (wall: torch's threads)
    print(f"warm-up, new lengths (1-layer Llama, hidden 256, {lengths} lengths): a new length "
          f"{passes[0] * 1e3:.1f} ms, its second call {passes[1] * 1e3:.1f} ms, its third {passes[2] * 1e3:.1f} ms; "
          f"steady {steady * 1e3:.1f} ms, eager {eager * 1e3:.1f} ms  [{load()}]", flush=True)
    return passes, steady, eager


# ---- collatz and ctrl-c -------------------------------------------------------------------------------------------


def bench_collatz(programs: int = 2048):
    from test_device_budget import _collatz_reference, collatz
    x = (np.arange(programs, dtype=np.int32) * 7 + 3)
    want = _collatz_reference(x)
    out = np.zeros(programs, np.int32)
    dev = Device()
    w, c = time.perf_counter(), time.thread_time()
    rec = collatz[(programs,)](x, out, device=dev)
    w, c = time.perf_counter() - w, time.thread_time() - c
    assert np.array_equal(out, want)
    print(f"collatz: {programs} programs, {int(want.min())}-{int(want.max())} trips, {w:.3f} s wall, {c:.3f} s cpu "
          f"(target <= 1 s); {rec.cycles:,} cycles, {rec.instructions:,} instructions  [{load()}]", flush=True)
    return w


def bench_ctrl_c():
    from test_device_budget import spin
    delays = []
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (run in a shell's background, SIGINT is ignored)
    for compiled in (True, False):
        dev = Device(watchdog=1 << 50, compiled=compiled)
        out = np.zeros(1, np.int32)
        fired = []
        timer = threading.Timer(0.5, lambda: (fired.append(time.perf_counter()), _thread.interrupt_main()))
        timer.start()
        try:
            spin[(64,)](out, 10, device=dev)
        except KeyboardInterrupt:
            delays.append(time.perf_counter() - fired[0])
    print(f"ctrl-c: a launch stops {', '.join(f'{d * 1e3:.1f} ms' for d in delays)} after SIGINT "
          f"(compiled, step by step)  [{load()}]", flush=True)
    return delays


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="models,generate,collatz,ctrl-c,warmup")
    ap.add_argument("--inductor", action="store_true", help="also time TorchInductor's steady call of each model")
    ap.add_argument("--models", default="", help="comma-separated substrings of the model names to run")
    ap.add_argument("--calls", type=int, default=1,
                    help="calls back to back per round, each side alike (1: the calls taken in turn, one each: a "
                         "dvmlang call right after eager's, its data and code cold; more: a serving loop's)")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    print(f"[{load()}; torch threads {torch.get_num_threads()}]", flush=True)
    if "ctrl-c" in only:
        bench_ctrl_c()
    if "collatz" in only:
        bench_collatz()
    if "generate" in only:
        bench_generate()
    if "warmup" in only:
        bench_warmup(a.quick)
    if "models" in only:
        bench_models(a.quick, a.rounds, a.inductor, [m for m in a.models.split(",") if m], a.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
