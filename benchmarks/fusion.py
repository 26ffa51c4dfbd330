"""What fusion buys on the simulated NPU, and what a new shape costs the host.

For rms_norm, layer_norm + gelu, softmax, a SwiGLU MLP and attention, at several shapes, the first table
compares ``@dvmlang.graph`` (fused: one stacked launch) with ``dvmlang.graph(fn, fuse=False)`` (one kernel
per op, each its own launch paying the launch overhead):

* cycles      simulated cycles of the whole call, launch overheads included,
* launches    device launches per call,
* GM bytes    bytes read + written in global memory by every kernel of the call,
* HBM bytes   the part of them that crossed HBM (the rest hit L2; both calls start with a cold L2),
* kernels     fused: generated kernels (groups) in the plan chosen for the shape.

The second table is the host cost of calling a fused graph with a shape it has not seen: the shapes vary
the leading (token) dimension like an LLM's sequence length. ``--shapes`` shapes warm the tile sizes up
(a new tile size builds its kernel once), then as many *different* shapes are measured; a measured call
that still built a kernel is counted in ``builds`` and left out of the medians. Host time is measured
twice: back to back on a device that skips the simulation (the host's cost with warm caches, as it would be
with a real device), and interleaved with the simulation (wall time minus ``Device.run_stack``; the
simulation leaves the host's caches cold). The first is split into

* call        the rest: ``GraphFunction.__call__`` (arguments, signature lookup), ``Program.run``'s own
              bookkeeping and the returned outputs,
* bind        binding the symbols to the sizes and checking the deduced equalities (guards),
* plan        choosing the fused plan or its split fallback (the row guard),
* tiling      the auto-tiler (vector groups) and cube tile sizes (matmul groups),
* encode      ``Kernel.prepare``: argument binding, instance lookup and ``Encoder.encode`` (bytecode),
* glue        the rest of preparing each group: output arrays, strides and offsets, argument lists,

and ``per kernel`` = host / kernels, the figure design §10 budgets (median <= 30 us per kernel). The
garbage collector is off during each measured call (and runs before it); the instrumentation (a timing
wrapper around each part) adds about a microsecond per part.

    python benchmarks/fusion.py [--shapes N] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser import tiling


# ---- workloads ----------------------------------------------------------------------------------------------


def rms_norm(x, w):
    return ops.rms_norm(x, w)


def layer_norm_gelu(x, w, b):
    return ops.gelu(ops.layer_norm(x, w, b))


def softmax(x):
    return ops.softmax(x)


def swiglu_mlp(x, w1, w3, w2):
    return ops.swiglu(x @ w3, x @ w1) @ w2


def attention(q, k, v):
    return ops.scaled_dot_product_attention(q, k, v, causal=True)


def _array(rng, shape, dtype, scale=1.0):
    """Random values; with ``rng=None`` an uninitialised array (for host-only timing, nothing reads it)."""
    if rng is None:
        return np.empty(shape, dtype)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _norm_args(rng, rows, cols, weights):
    return (_array(rng, (rows, cols), np.float32),) + tuple(_array(rng, cols, np.float32) for _ in range(weights))


def _mlp_args(rng, tokens, d, f):
    x = _array(rng, (tokens, d), np.float16)
    w1, w3 = (_array(rng, (d, f), np.float16, d ** -0.5) for _ in range(2))
    return x, w1, w3, _array(rng, (f, d), np.float16, f ** -0.5)


def _attn_args(rng, heads, seq, d):
    return tuple(_array(rng, (heads, seq, d), np.float16) for _ in range(3))


# name, function, memory bound?, args(rng, *shape), shapes for the cycle table, (shape from the dynamic size)
WORKLOADS = [
    ("rms_norm", rms_norm, True, lambda rng, r, c: _norm_args(rng, r, c, 1),
     [(1024, 1024), (4096, 1024), (512, 8192)], lambda n: (n, 1024)),
    ("layer_norm + gelu", layer_norm_gelu, True, lambda rng, r, c: _norm_args(rng, r, c, 2),
     [(1024, 1024), (4096, 1024), (512, 8192)], lambda n: (n, 1024)),
    ("softmax", softmax, True, lambda rng, r, c: _norm_args(rng, r, c, 0),
     [(1024, 1024), (4096, 1024), (128, 32768)], lambda n: (n, 1024)),
    ("swiglu mlp (fp16)", swiglu_mlp, False, _mlp_args,
     [(128, 512, 1024), (512, 512, 1024), (2048, 512, 1024)], lambda n: (n, 512, 1024)),
    ("causal attention (fp16)", attention, False, _attn_args,
     [(8, 128, 64), (16, 256, 64), (8, 1024, 64)], lambda n: (8, n, 64)),
]


# ---- instrumentation (the benchmark's own; the library is unchanged) ----------------------------------------


class Buckets(dict):
    def add(self, key: str, seconds: float):
        self[key] = self.get(key, 0.0) + seconds


class TimedDevice(dvmlang.npu.Device):
    """The default device, with the wall time of ``run_stack`` (the simulation) recorded."""

    def __init__(self, buckets: Buckets, **kw):
        super().__init__(**kw)
        self.buckets = buckets

    def run_stack(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().run_stack(*args, **kwargs)
        finally:
            self.buckets.add("simulate", time.perf_counter() - t0)


def _timed(buckets: Buckets, key: str, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            buckets.add(key, time.perf_counter() - t0)
    return wrapper


class Instrumented:
    """Times the parts of a fused graph's call by wrapping the Program's methods, the tiler's functions and
    each generated kernel's ``prepare`` (instance attributes and module attributes, restored on exit)."""

    def __init__(self, gf, buckets: Buckets):
        self.gf = gf
        self.buckets = buckets
        self.saved = []

    def __enter__(self):
        b = self.buckets
        for prog in self.gf._captured.values():
            for name, key in (("bind", "bind"), ("choose", "plan"), ("prepare_group", "prepare")):
                if hasattr(prog, name):
                    self._wrap(prog, name, key)
            for kt in prog.kernels.values():  # (a composed kernel's GroupKernel; the text path's @kernel)
                self._wrap(kt if kt.kernel is None else kt.kernel, "prepare", "encode")
        for name in ("choose", "choose_matmul"):
            self._wrap(tiling, name, "tiling")
        self.buckets = b
        return self

    def _wrap(self, obj, name, key):
        had = name in vars(obj)
        old = getattr(obj, name)
        self.saved.append((obj, name, had, old))
        setattr(obj, name, _timed(self.buckets, key, old))

    def __exit__(self, *exc):
        for obj, name, had, old in reversed(self.saved):
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)
        return False


# ---- measurements -------------------------------------------------------------------------------------------


def cycles_row(name, fn, args):
    fused, unfused = dvmlang.graph(fn, name=name), dvmlang.graph(fn, fuse=False, name=name)
    l2 = dvmlang.npu.default_device().l2
    l2.flush()  # both start cold: the inputs are in HBM (within a call, L2 keeps what fits: device.md)
    out_f = fused(*args)
    l2.flush()
    out_u = unfused(*args)
    np.testing.assert_allclose(np.asarray(out_f, np.float32), np.asarray(out_u, np.float32), rtol=2e-2, atol=2e-2)
    lf, lu = fused.last_launch, unfused.last_launch
    report = fused.explain(*args)
    return {
        "cycles_f": lf.cycles, "cycles_u": lu.cycles, "launches_f": 1, "launches_u": lu.launches,
        "bytes_f": lf.bytes_read + lf.bytes_written, "bytes_u": lu.bytes_read + lu.bytes_written,
        "hbm_f": lf.hbm_bytes, "hbm_u": lu.hbm_bytes,
        "kernels": len(report.groups), "split": report.plan.split_reductions,
    }


class HostOnlyDevice(TimedDevice):
    """A device that skips the simulation: ``run_stack`` returns an empty record (instrumentation only — the
    outputs are not computed). Back-to-back calls then show the host's own cost with warm caches, as with a
    real device, where the host does not execute the kernels."""

    def run_stack(self, stages, *, name, trace=None):
        from dvmlang.npu.device import LaunchRecord
        rec = LaunchRecord(name=name, grid=(), cycles=0, bytes_read=0, bytes_written=0, profile=self.profile)
        rec.stages = [len(stage) for stage in stages]
        return rec


def encode_row(fn, make_args, shape_of, sizes, rng, simulate: bool):
    """Host time of new-shape calls of a fused graph (see the module docstring)."""
    buckets = Buckets()
    device = TimedDevice(buckets) if simulate else HostOnlyDevice(buckets)
    gf = dvmlang.graph(fn)
    half = len(sizes) // 2
    src = rng if simulate else None
    for n in sizes[:half]:  # warm-up: builds every tile size these shapes need
        gf(*make_args(src, *shape_of(n)), device=device)
    (prog,) = gf._captured.values()
    samples, per_kernel, parts, builds, kernels = [], [], [], 0, 0
    gc.collect()
    gc.disable()  # a collection would land in whichever call it happens to interrupt
    try:
        for n in sizes[half:]:
            args = make_args(src, *shape_of(n))
            before = sum(kt.cache_info().builds for kt in prog.kernels.values())
            buckets.clear()
            with Instrumented(gf, buckets):
                t0 = time.perf_counter()
                out = gf(*args, device=device)  # kept until timed: freeing big outputs is not the call's cost
                wall = time.perf_counter() - t0
            del out, args
            after = sum(kt.cache_info().builds for kt in prog.kernels.values())
            if after != before:
                builds += 1
                continue
            kernels = sum(gf.last_launch.stages) or 1
            host = wall - buckets.get("simulate", 0.0)
            prepare = buckets.get("prepare", 0.0)
            split = {
                "bind": buckets.get("bind", 0.0),
                "plan": buckets.get("plan", 0.0),
                "tiling": buckets.get("tiling", 0.0),
                "encode": buckets.get("encode", 0.0),
                "glue": prepare - buckets.get("tiling", 0.0) - buckets.get("encode", 0.0),
            }
            split["call"] = max(0.0, host - sum(split.values()))  # the rest: arguments, outputs, bookkeeping
            samples.append(host)
            per_kernel.append(host / kernels)
            parts.append(split)
    finally:
        gc.enable()
    med = {k: statistics.median(p[k] for p in parts) for k in parts[0]} if parts else {}
    return {
        "median": statistics.median(samples) if samples else float("nan"),
        "p90": float(np.percentile(samples, 90)) if samples else float("nan"),
        "per_kernel": statistics.median(per_kernel) if per_kernel else float("nan"),
        "kernels": kernels, "parts": med, "measured": len(samples), "builds": builds,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=40, help="new shapes measured per workload (and as many for "
                                                          "warm-up)")
    ap.add_argument("--quick", action="store_true", help="the first two shapes of each workload only")
    opts = ap.parse_args(argv)
    rng = np.random.default_rng(7)
    console = Console(width=max(170, Console().width))

    t = Table(title="Fused vs unfused on the simulated 910B2-like NPU (one call)")
    for col in ("workload", "shape", "cycles fused", "cycles unfused", "speed-up", "launches f/u", "GM MB f/u",
                "HBM MB f/u", "kernels"):
        t.add_column(col, justify="left" if col in ("workload", "shape") else "right")
    for name, fn, memory_bound, make_args, shapes, _ in WORKLOADS:
        for shape in shapes[:2] if opts.quick else shapes:
            r = cycles_row(name, fn, make_args(rng, *shape))
            speed = r["cycles_u"] / r["cycles_f"]
            mark = "" if not memory_bound else (" ok" if speed >= 2 else " < 2x")
            t.add_row(name, "x".join(map(str, shape)), f"{r['cycles_f']:,}", f"{r['cycles_u']:,}",
                      f"{speed:.1f}x{mark}", f"{r['launches_f']}/{r['launches_u']}",
                      f"{r['bytes_f'] / 1e6:.1f}/{r['bytes_u'] / 1e6:.1f}",
                      f"{r['hbm_f'] / 1e6:.1f}/{r['hbm_u'] / 1e6:.1f}",
                      f"{r['kernels']}" + (" (split)" if r["split"] else ""))
    console.print(t)

    e = Table(title=f"Host time of a fused call with a new shape (median of {opts.shapes} new shapes, in us)")
    for col in ("workload", "shapes", "kernels", "per kernel", "host/call", "p90", "call", "bind", "plan",
                "tiling", "encode", "glue", "per kernel (sim)", "builds"):
        e.add_column(col, justify="left" if col in ("workload", "shapes") else "right")
    us = lambda s: f"{s * 1e6:.0f}"  # noqa: E731
    for name, fn, _, make_args, _, shape_of in WORKLOADS:
        lo, hi = (200, 2000) if "attention" not in name and "mlp" not in name else (64, 512)
        sizes = [int(s) for s in rng.choice(np.arange(lo, hi), size=2 * opts.shapes, replace=False)]
        r = encode_row(fn, make_args, shape_of, sizes, rng, simulate=False)
        sim = encode_row(fn, make_args, shape_of, sizes, rng, simulate=True)
        p = r["parts"]
        e.add_row(name, "x".join(str(d) for d in _describe(shape_of, lo, hi)), str(r["kernels"]),
                  us(r["per_kernel"]), us(r["median"]), us(r["p90"]),
                  *(us(p.get(k, float("nan"))) for k in ("call", "bind", "plan", "tiling", "encode", "glue")),
                  us(sim["per_kernel"]), f"{r['builds'] + sim['builds']}/{2 * opts.shapes}")
    console.print(e)
    console.print("per kernel = host time of the call / kernels, with back-to-back calls on a device that skips "
                  "the simulation (warm host caches, as with a real device); 'per kernel (sim)' = (wall time - "
                  "simulation) / kernels when every call also simulates (the host's caches go cold in between). "
                  "Design §10 budgets a median <= 30 us per kernel for encoding a new shape. 'encode' is "
                  "Kernel.prepare (argument binding, instance lookup, Encoder.encode); 'builds' counts measured "
                  "calls that still built a kernel (left out of the medians).")


def _describe(shape_of, lo, hi):
    a, b = shape_of(lo), shape_of(hi)
    return tuple(f"{x}..{y}" if x != y else x for x, y in zip(a, b))


if __name__ == "__main__":
    main()
