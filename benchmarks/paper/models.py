"""Model level of the paper evaluation (issue 16): Llama-, GPT-2- and BERT-style models from ``transformers``
(random weights, eval, batch 1) over the request stream, on four systems.

* ``dvmlang``: ``torch.compile(model, backend="dvmlang", dynamic=True)`` on the simulated NPU.
* ``per-op eager``: one launch per aten op on the simulated NPU. The dvmlang backend has no switch that turns
  fusion off, so this is ``dvmlang.torch.lazy()`` run on the eager model with the pending graph flushed after
  every aten op (``_FlushEachOp``): each op is lowered with the backend's own table and runs as its own launch,
  its result stored to GM, as PyTorch eager and MindSpore O0 do (a composite such as softmax or SDPA stays one
  op, fused inside itself, as eager's kernel for it is). ``lazy(fuse=False)`` would instead launch one kernel
  per *fuser node* (a softmax is five), more launches than any eager framework makes.
* ``inductor-static`` / ``inductor-dynamic``: ``torch.compile(model, backend="inductor", dynamic=False/True)``
  on this host's CPU, a fresh ``TORCHINDUCTOR_CACHE_DIR`` per (model, system); ``device_us`` is NaN.

Every request starts from a cold L2. Every output is checked against torch eager on the CPU (``RTOL``/``ATOL``);
a request whose result is wrong, or that raises, keeps its row with NaN measurements and says why in ``note``.

Compile time (``compile_s``), measured on this host:

* dvmlang and per-op eager: the call's host time outside the simulator (the launch records' and flush records'
  simulation wall time) minus the same for a call that compiles nothing (median of the calls that encoded and
  built nothing, one extra warm call included), for calls that traced, built or encoded something; 0 otherwise.
  ``host_s`` is the call's wall time minus ``compile_s``.
* Inductor: the first call at a new length minus the median of three repeat calls (``host_s``). Only the first
  ``inductor_compiles`` compiles of each (model, system) are measured (static: the first new lengths of the
  stream; dynamic: new lengths until that many dynamo compiles happened); later new lengths are not run and keep
  ``compile_s`` = ``host_s`` = NaN with note ``not measured`` (lengths already compiled are still run).

Besides the keys run.py documents, each row has ``fallbacks`` (aten op executions in torch eager, plus region
calls dvmlang ran eagerly at those sizes) and ``note``.

The host cannot simulate the whole stream at useful model sizes in the time budget, so the model level runs the
first ``requests`` requests of the stream (``SETTINGS``), in order, on every system.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dvmlang.torch as dt
from dvmlang.errors import DvmError
from dvmlang.npu import default_device

RTOL, ATOL = 1e-3, 1e-4  # fp32, against torch eager on the CPU
NAN = float("nan")
SYSTEMS = ("dvmlang", "per-op eager", "inductor-static", "inductor-dynamic")


@dataclass(frozen=True)
class Settings:
    requests: int  # the first this many requests of the stream
    layers: int
    hidden: int
    heads: int
    vocab: int
    inductor_compiles: int  # measured compiles per (model, inductor system)
    models: tuple = ("llama", "gpt2", "bert")
    inductor_models: tuple | None = None  # the models Inductor runs on (None: all)


# chosen from measured host times on the shared 2-core machine: full ~8 min (2 layers x hidden 128 took 2-4 s per
# simulated request and 80 s per Inductor compile), quick ~1 min
# (BERT only: its dvmlang first call is the cheapest, 11-15 s against Llama's 20-38 s)
SETTINGS = {
    "full": Settings(requests=12, layers=1, hidden=256, heads=4, vocab=1024, inductor_compiles=3),
    "quick": Settings(requests=1, layers=1, hidden=64, heads=4, vocab=256, inductor_compiles=1,
                      models=("bert",)),
}


# ---- models -------------------------------------------------------------------------------------------------

def build(name: str, s: Settings, max_len: int = 2048) -> torch.nn.Module:
    """A ``transformers`` model with random weights (seeded), eval mode."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    h = s.hidden
    if name == "llama":
        m = LlamaForCausalLM(LlamaConfig(vocab_size=s.vocab, hidden_size=h, intermediate_size=4 * h,
                                         num_hidden_layers=s.layers, num_attention_heads=s.heads,
                                         num_key_value_heads=s.heads, max_position_embeddings=max_len,
                                         use_cache=False))
    elif name == "gpt2":
        m = GPT2LMHeadModel(GPT2Config(vocab_size=s.vocab, n_positions=max_len, n_embd=h, n_layer=s.layers,
                                       n_head=s.heads, use_cache=False, bos_token_id=0, eos_token_id=0))
    elif name == "bert":
        m = BertModel(BertConfig(vocab_size=s.vocab, hidden_size=h, num_hidden_layers=s.layers,
                                 num_attention_heads=s.heads, intermediate_size=4 * h,
                                 max_position_embeddings=max_len))
    else:
        raise ValueError(f"unknown model {name!r}: expected one of llama, gpt2, bert")
    return m.eval()


def ids_for(n: int, vocab: int) -> torch.Tensor:
    """The request's token ids: seeded by its length, so a repeated length is the same input."""
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))


class _Refs:
    """torch eager's output per length (computed once each)."""

    def __init__(self, model, vocab):
        self.model, self.vocab, self.cache = model, vocab, {}

    def __call__(self, n: int) -> torch.Tensor:
        if n not in self.cache:
            with torch.no_grad():
                self.cache[n] = self.model(ids_for(n, self.vocab))[0]
        return self.cache[n]


def _wrong(out, ref) -> str:
    """'' when ``out`` matches eager's ``ref``, else why not."""
    out = out.materialise() if isinstance(out, dt.LazyTorchTensor) else out
    try:
        torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL)
        return ""
    except AssertionError as e:
        return "wrong result: " + " ".join(str(e).split())[:160]


def _row(workload, system, i, n, **kw) -> dict:
    r = {"level": "model", "workload": workload, "system": system, "request": i, "length": n, "compile_s": NAN,
         "device_us": NAN, "host_s": NAN, "launches": 0, "gm_bytes": 0,
         "launch_overhead_us": default_device().profile.launch_overhead_us, "fallbacks": 0, "note": ""}
    r.update(kw)
    return r


# ---- the simulated device: dvmlang and per-op eager ----------------------------------------------------------

class _FlushEachOp(TorchDispatchMode):
    """Inside ``dvmlang.torch.lazy()``: every aten op is passed on to the lazy mode, then the pending graph is
    flushed, so each op is its own launch (views and host-side ops flush nothing)."""

    def __init__(self, session):
        super().__init__()
        self.session = session

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.session.flush()
        return out


def _dvmlang_call(compiled):
    def call(ids):
        out = compiled(ids)[0]
        recs = dt.launches()
        return out, sum(r.wall_s for r in recs), sum(r.bytes_read + r.bytes_written for r in recs)
    return call


def _per_op_call(model):
    def call(ids):
        with dt.lazy() as session, _FlushEachOp(session):
            out = model(ids)[0]
            out = out.materialise() if isinstance(out, dt.LazyTorchTensor) else out
        fl = session.stats.flushes
        return out, sum(f.sim_s for f in fl), sum(f.bytes_read + f.bytes_stored for f in fl)
    return call


def _simulated(workload, system, call, reqs, refs, vocab, log, deadline=None) -> list[dict]:
    """One row per request: the call on the simulated device, timed, checked; compile_s attributed at the end.
    ``deadline`` (``time.monotonic()``): no request starts after it (the rows stop there)."""
    raw = []
    for i, n in enumerate(reqs):
        if deadline is not None and time.monotonic() > deadline:
            log(f"  {workload} {system}: stopped at the deadline after {i} of {len(reqs)} requests")
            break
        default_device().l2.flush()  # every request starts cold (inputs and weights in HBM)
        dt.reset_stats()
        note, out = "", None
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                out, sim_s, gm = call(ids_for(n, vocab))
        except DvmError as e:
            note = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        wall = time.perf_counter() - t0
        s = dt.stats()
        fb = sum(s["fallback_ops"].values()) + s["runtime_fallbacks"]
        r = _row(workload, system, i, n, fallbacks=fb, launches=s["launches"])
        if out is not None:
            note = _wrong(out, refs(n))
        if note:
            log(f"  {workload} {system} request {i} (length {n}): {note}")
        else:
            r.update(device_us=s["simulated_us"], gm_bytes=gm)
            if s["fallback_ops"] or s["runtime_fallbacks"]:
                r["note"] = "fallbacks: " + ", ".join(f"{k} x{v}" for k, v in sorted(s["fallback_ops"].items()))
                if s["runtime_fallbacks"]:
                    r["note"] += f"; regions run eagerly: {s['runtime_reasons']}"
        r["note"] = note or r["note"]
        fresh = bool(s["builds"] or s["encodes"] or s["graphs"] or s["plans"])
        raw.append((r, wall, wall - sim_s if out is not None else NAN, fresh))
    # the host time outside the simulator of a call that compiles nothing: repeat calls, plus one warm call of the
    # shortest request that ran
    ok = [(r["length"]) for r, _, _, _ in raw if not math.isnan(r["device_us"])]
    warm = []
    if ok:
        n = min(ok)
        with torch.no_grad():
            for _ in range(2):
                dt.reset_stats()
                t0 = time.perf_counter()
                _, sim_s, _ = call(ids_for(n, vocab))
                warm.append(time.perf_counter() - t0 - sim_s)
    steady = statistics.median([x for _, _, x, fresh in raw if not fresh and not math.isnan(x)] + warm[-1:]) \
        if warm else NAN
    for r, wall, nonsim, fresh in raw:
        if math.isnan(r["device_us"]):
            continue
        r["compile_s"] = max(0.0, nonsim - steady) if fresh else 0.0
        r["host_s"] = wall - r["compile_s"]
    return [r for r, _, _, _ in raw]


# ---- TorchInductor on the CPU -----------------------------------------------------------------------------------

def _graphs() -> int:
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def _inductor(workload, model, dynamic, reqs, refs, vocab, budget, log) -> list[dict]:
    system = "inductor-dynamic" if dynamic else "inductor-static"
    cache = tempfile.mkdtemp(prefix="dvmlang-paper-inductor-")
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    rows, seen, compiles = [], set(), 0
    try:
        torch._dynamo.reset()
        with torch._dynamo.config.patch(recompile_limit=max(8, budget + 2)):
            compiled = torch.compile(model, backend="inductor", dynamic=dynamic)
            for i, n in enumerate(reqs):
                ids = ids_for(n, vocab)
                if n not in seen and compiles >= budget:
                    rows.append(_row(workload, system, i, n, launches=NAN, gm_bytes=NAN, launch_overhead_us=NAN,
                                     note="not measured (compile budget spent)"))
                    continue
                before = _graphs()
                with torch.no_grad():
                    out, first = _timed(compiled, ids)
                    if n in seen:
                        host, comp = first, 0.0
                    else:
                        host = statistics.median(_timed(compiled, ids)[1] for _ in range(3))
                        comp = max(0.0, first - host)
                new = _graphs() - before
                compiles += new
                seen.add(n)
                note = _wrong(out, refs(n))
                if note:
                    log(f"  {workload} {system} request {i} (length {n}): {note}")
                    rows.append(_row(workload, system, i, n, note=note))
                    continue
                if comp:
                    log(f"  {workload} {system} length {n}: first call {first:.2f} s, steady {host * 1e3:.1f} ms"
                        f"{f', {new} dynamo compile(s)' if new else ''}")
                rows.append(_row(workload, system, i, n, compile_s=comp, host_s=host, launches=NAN,
                                 gm_bytes=NAN, launch_overhead_us=NAN, note=f"dynamo compiles: {new}" if new else ""))
    finally:
        torch._dynamo.reset()
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
        shutil.rmtree(cache, ignore_errors=True)
    return rows


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)[0]
    return out, time.perf_counter() - t0


# ---- the level --------------------------------------------------------------------------------------------------

def run(quick: bool, stream: list[int], log=print, settings: Settings | None = None,
        systems: tuple = SYSTEMS, deadline: float | None = None) -> list[dict]:
    """Model-level evaluation: one row per (model, system, request) over the first ``settings.requests``
    requests of ``stream`` (keys as run.py documents, plus ``fallbacks`` and ``note``). ``deadline``
    (``time.monotonic()``): the simulated systems start no request after it."""
    s = settings or SETTINGS["quick" if quick else "full"]
    reqs = [int(n) for n in stream[:s.requests]]
    if not reqs or min(reqs) < 1:
        raise ValueError(f"the model level needs request lengths >= 1, got {reqs[:8]}")
    max_len = max(2048, max(reqs))
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown system(s) {sorted(unknown)}: expected some of {SYSTEMS}")
    log(f"model level: {', '.join(s.models)}; {s.layers} layer(s), hidden {s.hidden}, {s.heads} heads, vocab "
        f"{s.vocab}, batch 1; the first {len(reqs)} requests of the stream: {reqs}")
    rows = []
    for name in s.models:
        model = build(name, s, max_len)
        refs = _Refs(model, s.vocab)
        for system in systems:
            if system.startswith("inductor") and s.inductor_models is not None and name not in s.inductor_models:
                continue
            t0 = time.perf_counter()
            if system == "dvmlang":
                torch._dynamo.reset()
                compiled = torch.compile(model, backend="dvmlang", dynamic=True)
                got = _simulated(name, system, _dvmlang_call(compiled), reqs, refs, s.vocab, log, deadline)
                torch._dynamo.reset()
            elif system == "per-op eager":
                got = _simulated(name, system, _per_op_call(model), reqs, refs, s.vocab, log, deadline)
            else:
                got = _inductor(name, model, system == "inductor-dynamic", reqs, refs, s.vocab,
                                s.inductor_compiles, log)
            rows += got
            log(f"  {name:5s} {system:16s} {time.perf_counter() - t0:6.1f} s host; " + _summary(got))
    return rows


def _summary(rows) -> str:
    dev = [r["device_us"] for r in rows if not math.isnan(r["device_us"])]
    comp = [r["compile_s"] for r in rows if not math.isnan(r["compile_s"])]
    host = [r["host_s"] for r in rows if not math.isnan(r["host_s"])]
    parts = [f"compile max {max(comp):.2f} s" if comp else "no compile measured",
             f"host median {statistics.median(host) * 1e3:.0f} ms" if host else ""]
    if dev:
        parts.append(f"device median {statistics.median(dev):.1f} us")
    bad = sum(1 for r in rows if r["note"].startswith(("error", "wrong")))
    fb = sum(r["fallbacks"] for r in rows)
    return ", ".join(p for p in parts if p) + (f", {fb} fallback(s)" if fb else "") + (f", {bad} FAILED" if bad else "")


if __name__ == "__main__":
    import argparse
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import stream as make_stream  # noqa: E402
    ap = argparse.ArgumentParser(description="the model level of the paper evaluation alone")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    a = ap.parse_args()
    st = SETTINGS["quick" if a.quick else "full"]
    if a.requests:
        from dataclasses import replace
        st = replace(st, requests=a.requests)
    for r in run(a.quick, make_stream(200), settings=st, systems=tuple(a.systems)):
        print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items() if k not in ("level",)})
