"""Host speed (issue 17): every figure of the issue's target table, beside its target and a reference measured
in the same run, medians over repeated samples.

* relaunch      ``add[(1,)](x, y, out, 16, BLOCK=16)`` with a cached instance, alternating two sets of arrays:
                the whole call on a plain device, and, on an instrumented one in turns of ten launches each,
                the time spent executing the programs and placing them on cores (encode_latency.py's split).
                dvmlang's overhead is the plain call's median less that time's median: everything but the simulated
                work (bind + lookup in ``Kernel.run``, ``Device.run``'s own part), and none of the
                instrumentation's wrappers, which make the instrumented call about 4 us longer (its own
                whole-minus-simulation is shown too). Two parts of it are shown, from the instrumented call:
                what ``Kernel.run`` takes before ``Device.run``, and the L2 model's settling after the launch
                (``L2Cache.settle``). Reference: numpy adding the same 16 elements.
* small grid    ``add[(8,)](x, y, out, 8192, BLOCK=1024)`` with a cached instance: 8 programs, as the lazy and torch
                paths launch (no target). Reference: numpy's add.
* first launch  ``add[(1,)](x, y, out, m, BLOCK=2048)`` with a new ``m`` each time (a new instance: no target in
                the issue; what a model whose shapes keep changing pays per kernel). Reference: numpy's add.
* encode        ``kernel.encode(grid, *args)`` for a shape never seen before (no rebuild; the container bytes
                are written when first asked for, so ``+ to_bytes`` is shown too, in a pass of its own), for the
                gallery layernorm (10 arguments; what an encode costs depends on the parameters and relocations,
                not on the arithmetic, so a GELU on its output would not change it) and the gallery softmax, the
                arrays views of one buffer (``encode_latency.Pool``, as a caching allocator hands out tensors;
                a pass with fresh numpy arrays per sample is shown too). Each pass runs twice, in two fresh
                processes with the same hash seed, over the same shapes in the same order (``--encode-child``).
                Median and worst of all samples; "w/o gc" leaves out the samples a garbage collection fell
                into; "recurring" is the worst of each sample's faster run: what dvmlang's own work costs at
                its worst (a collection, a cache evicting, anything the sequence of encodes causes, happens at
                the same sample in both runs), without the pauses this machine adds at random (a virtual
                machine's process stopped for 100-300 us, at about 1 in 1,000 samples of 10 us, measured here
                with the system calls of the timed loop traced: there were none). Reference:
                TorchInductor's recompile of ``gelu(layer_norm(x))`` for a new static shape, the median of
                three (``torch.compile(fn, dynamic=False)``, fresh ``TORCHINDUCTOR_CACHE_DIR``), when torch is
                importable.
* @graph        a fused ``layer_norm + gelu`` graph called on a new small shape (leading dimension): wall time
                minus ``Device.run_stack`` (fusion.py's ``encode_row``). Reference: numpy's layer norm + gelu
                on the same shape.
* simulator     cached launches of softmax and layernorm 8192x1024 fp32, vector add 16M fp32, matmul 1024^3
                fp16 -> fp32, against numpy doing the same work (sim_throughput.py's kernels), sampled in
                turn; the ratio is the median of each pair's.
* from_bytes    ``Bytecode.from_bytes`` of the gallery layernorm's and softmax's bytes, each sample a shape not
                read before (the build's shared sections and code verdict are reused; the instance's own
                sections are read and checked). Also shown: the first read of a build (nothing cached).
                Reference: ``zlib.crc32`` of the same bytes (the checksum alone, a floor for any safe reader).
* machine       a pure-Python loop, timed before each host figure: a shared or virtual machine's speed drifts by
                1.5-2x within minutes, and every host figure moves with it. And a loop of an encode's length
                timed 1,000 times in each encode process, as the encodes are: its worst is the machine's
                own pauses, its recurring worst what is left of them when the two runs are compared.

    python benchmarks/host_speed.py [--quick] [--no-inductor]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))

import encode_latency as EL  # noqa: E402
import fusion  # noqa: E402
import sim_throughput as ST  # noqa: E402
import softmax  # noqa: E402
import vector_add  # noqa: E402

import dvmlang  # noqa: E402
import dvmlang.language as dl  # noqa: E402
from dvmlang.vm import bytecode as bytecode_mod  # noqa: E402
from dvmlang.vm import validator  # noqa: E402


ENCODED = {"layernorm": (EL.layernorm.layernorm, EL.layernorm_args), "softmax": (softmax.softmax, EL.softmax_args)}


# ---- measurements -------------------------------------------------------------------------------------------


TURN = 10  # relaunch: launches per turn on each device


def relaunch(n: int) -> dict:
    rng = np.random.default_rng(1)
    sets = [(rng.random(16, dtype=np.float32), rng.random(16, dtype=np.float32), np.empty(16, np.float32))
            for _ in range(2)]
    plain, dev = dvmlang.npu.Device(), EL.TimedDevice()
    for x, y, o in sets:
        for d in (plain, dev):
            o[:] = 0
            vector_add.add[(1,)](x, y, o, 16, BLOCK=16, device=d)
            np.testing.assert_array_equal(o, x + y)
    whole, host, overhead, spent, settled = EL.Samples(), EL.Samples(), EL.Samples(), EL.Samples(), EL.Samples()
    hits = vector_add.add.cache_info().hits
    settle, in_settle = dev.l2.settle, [0.0]

    def timed_settle(*a):  # (the instrumented device's L2 model after each launch: a part of the overhead)
        t0 = time.perf_counter()
        try:
            return settle(*a)
        finally:
            in_settle[0] = time.perf_counter() - t0
    dev.l2.settle = timed_settle
    gc.collect()
    clock = EL.SimulationClock()
    for i in range(2 * n):  # (n samples each)
        # the whole call on a plain device; the split on an instrumented one (the wrappers cost a few us), in
        # turns of TURN launches: each device's launches follow one another, as in a user's loop (a launch
        # right after the other device's pays for its wrappers and objects: 1-2 us more), and both see the
        # same machine (a turn takes about half a millisecond)
        x, y, o = sets[i % 2]
        if i // TURN % 2 == 0:
            n0 = EL.GCWatch.runs
            t0 = time.perf_counter()
            vector_add.add[(1,)](x, y, o, 16, BLOCK=16, device=plain)
            whole.add(time.perf_counter() - t0, n0)
            continue
        with clock:
            clock.spent = 0.0
            n0 = EL.GCWatch.runs
            t0 = time.perf_counter()
            vector_add.add[(1,)](x, y, o, 16, BLOCK=16, device=dev)
            total = time.perf_counter() - t0
        host.add(total - dev.last_run, n0)
        overhead.add(total - clock.spent, n0)
        spent.add(clock.spent, n0)
        settled.add(in_settle[0], n0)
    assert vector_add.add.cache_info().hits - hits == 2 * n, "a relaunch missed the instance cache"
    x, y, o = sets[0]
    ref = EL.Samples()
    for _ in range(n):
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        np.add(x, y, out=o)
        ref.add(time.perf_counter() - t0, n0)
    return {"whole": whole, "host": host, "overhead": overhead, "spent": spent, "settle": settled, "numpy": ref}


def relaunch_grid(n: int, programs: int = 8) -> dict:
    """A cached relaunch of the gallery vector add on ``programs`` programs of 1,024 (a small grid, as the lazy
    and torch paths launch), and numpy adding the same elements."""
    rng = np.random.default_rng(2)
    m = programs * 1024
    x, y, o = rng.random(m, dtype=np.float32), rng.random(m, dtype=np.float32), np.empty(m, np.float32)
    dev = dvmlang.npu.Device()
    vector_add.add[(programs,)](x, y, o, m, BLOCK=1024, device=dev)
    np.testing.assert_array_equal(o, x + y)
    whole, ref = EL.Samples(), EL.Samples()
    gc.collect()
    for _ in range(n):
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        vector_add.add[(programs,)](x, y, o, m, BLOCK=1024, device=dev)
        whole.add(time.perf_counter() - t0, n0)
    for _ in range(n):
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        np.add(x, y, out=o)
        ref.add(time.perf_counter() - t0, n0)
    return {"whole": whole, "numpy": ref}


def first_launch(n: int) -> dict:
    """``add[(1,)](x, y, out, m, BLOCK=2048)`` with a new ``m`` (105, 106, ...) each time: a new instance, so an
    encode, a launch base, new DMA descriptors and new arrays for the L2 model, as a model whose shapes keep
    changing pays per kernel. Reference: numpy adding the same elements."""
    rng = np.random.default_rng(3)
    sets = [(rng.random(m, dtype=np.float32), rng.random(m, dtype=np.float32), np.empty(m, np.float32), m)
            for m in range(100, 105 + n)]
    dev = dvmlang.npu.Device()
    for x, y, o, m in sets[:5]:
        vector_add.add[(1,)](x, y, o, m, BLOCK=2048, device=dev)
    whole, ref = EL.Samples(), EL.Samples()
    gc.collect()
    for x, y, o, m in sets[5:]:
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        vector_add.add[(1,)](x, y, o, m, BLOCK=2048, device=dev)
        whole.add(time.perf_counter() - t0, n0)
        np.testing.assert_array_equal(o, x + y)
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        np.add(x, y, out=o)
        ref.add(time.perf_counter() - t0, n0)
    return {"whole": whole, "numpy": ref}


def encode(name: str, n: int) -> dict:
    """Encodes of shapes never seen before, with the kernel's instance cache full (each encode's instance takes
    the place of the oldest, as in a model whose shapes keep changing), three passes over different shapes:
    ``encode`` (the arrays from a pool, ``EL.Pool``), ``encode + to_bytes`` (the container bytes written after
    each encode, from the pool too; writing them between the encodes also slows the encodes themselves, so the
    first pass leaves them out) and ``encode, fresh arrays`` (new numpy arrays per sample)."""
    kernel, make = ENCODED[name]
    rng = np.random.default_rng(2024)
    g, a, m = make(8, 700, rng)
    kernel.encode(g, *a, **m)  # the build
    warm = dvmlang.runtime.MAX_INSTANCES  # shapes that fill the kernel's instance cache before timing
    seen, shapes = {(8, 700)}, []
    while len(shapes) < 3 * n + warm:
        r, c = int(rng.integers(1, 4097)), int(rng.integers(513, 1025))
        if (r, c) not in seen:
            seen.add((r, c))
            shapes.append((r, c))
    builds = kernel.cache_info().builds
    pool = EL.Pool()
    for r, c in shapes[3 * n:]:
        g, a, m = make(r, c, rng, fill=False, pool=pool)
        kernel.encode(g, *a, **m)
    out = {}
    for k, part in enumerate(("encode", "encode + to_bytes", "encode, fresh arrays")):
        samples = out[part] = EL.Samples()
        gc.collect()
        for r, c in shapes[k * n:(k + 1) * n]:
            # every shape is new: each encode adds an instance to the kernel's cache, which, full, drops its
            # oldest (the steady state of a model whose shapes keep changing)
            g, a, m = make(r, c, rng, fill=False, pool=None if k == 2 else pool)
            n0 = EL.GCWatch.runs
            t0 = time.perf_counter()
            bc = kernel.encode(g, *a, **m)
            if k == 1:
                bc.to_bytes()
            samples.add(time.perf_counter() - t0, n0)
    assert kernel.cache_info().builds == builds, "a new shape rebuilt the kernel"
    return out


def encode_twice(name: str, n: int) -> dict:
    """``encode(name, n)`` and ``machine_pauses(n)`` (as "machine"), each run in two fresh processes with the
    same hash seed: part -> (seconds, whether a collection fell in) per sample, for both runs."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, __file__, "--encode-child", name, "--samples", str(n)], env=env,
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return {part: [run[part] for run in runs] for part in runs[0]}


def _encode_child(name: str, n: int) -> None:
    parts = dict(encode(name, n), machine=machine_pauses(n))
    print(json.dumps({part: [list(s), s.with_gc] for part, s in parts.items()}))


def twice_stats(runs) -> dict:
    """Median and worst over both runs' samples, the worst without the samples a collection fell into, and the
    recurring worst: the worst of each sample's faster run."""
    (a, ga), (b, gb) = runs
    quiet = [x for x, g in zip(a + b, ga + gb) if not g]
    return {"median": statistics.median(a + b), "worst": max(a + b), "quiet": max(quiet) if quiet else float("nan"),
            "recurring": max(map(min, a, b)), "over": sum(x > 1e-4 for x in a + b)}


def from_bytes(name: str, n: int) -> dict:
    kernel, make = ENCODED[name]
    rng = np.random.default_rng(7)
    blobs = []
    for i in range(n + 1):
        g, a, m = make(3 + i, 513 + i % 500, rng, fill=False)
        blobs.append(kernel.encode(g, *a, **m).to_bytes())
    for cache in (getattr(validator, "_VERDICTS", None), getattr(bytecode_mod, "_STATIC", None)):  # (absent before issue 17)
        if cache is not None:
            cache.clear()
    t0 = time.perf_counter()
    dvmlang.Bytecode.from_bytes(blobs[0])
    first = time.perf_counter() - t0
    warm, ref = EL.Samples(), EL.Samples()
    gc.collect()
    for data in blobs[1:]:
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        dvmlang.Bytecode.from_bytes(data)
        warm.add(time.perf_counter() - t0, n0)
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        zlib.crc32(data)
        ref.add(time.perf_counter() - t0, n0)
    return {"from_bytes": warm, "first": first, "crc": ref, "size": len(blobs[0])}


def graph_call(n_shapes: int) -> dict:
    rng = np.random.default_rng(3)
    # from 2: a leading dim of 1 is captured apart (dims of 1 are part of the signature), not a new shape
    sizes = [int(s) for s in rng.permutation(np.arange(2, 4 * n_shapes + 2))[:2 * n_shapes]]
    r = fusion.encode_row(fusion.layer_norm_gelu, lambda g, rows, cols: fusion._norm_args(g, rows, cols, 2),
                          lambda k: (k, 256), sizes, rng, simulate=True)
    x, w, b = fusion._norm_args(rng, sizes[-1], 256, 2)

    def ref():
        mu = x.mean(axis=1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * w + b
        return 0.5 * y * (1.0 + np.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))
    return {"host": r["median"], "measured": r["measured"], "builds": r["builds"], "numpy": ST.median_time(ref, 50)}


def simulator(quick: bool) -> list:
    rows = []
    for name, size, fn, ref, _ in ST.workloads(quick):
        if name == "vector add":  # the size: 16M, a quarter of sim_throughput's default
            fn, ref, size = _vector_add(16 * 1024 * 1024)
        fn()
        ref()
        rows.append((name, size) + _alternating(fn, ref, 3 if quick else 7))
    return rows


def _alternating(fn, ref, repeat: int) -> tuple[float, float, float]:
    """(median seconds of ``fn``, of ``ref``, median of their ratio), sampled in turn (``fn`` first in every
    other pair), so that both see the same phase of a machine whose speed drifts."""
    ours, theirs = [], []
    for i in range(repeat):
        for f, times in ((fn, ours), (ref, theirs)) if i % 2 == 0 else ((ref, theirs), (fn, ours)):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(theirs), statistics.median(a / b for a, b in zip(ours, theirs))


def _vector_add(n: int):
    rng = np.random.default_rng(0)
    a, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    o = np.empty_like(a)

    def fn():
        return vector_add.add[(dl.cdiv(n, 8192),)](a, c, o, n, BLOCK=8192)

    def ref():
        np.add(a, c, out=o)
    return fn, ref, f"{n // (1024 * 1024)}M fp32"


def inductor_recompile(shapes: int = 3) -> float | None:
    """Seconds TorchInductor takes to recompile gelu(layer_norm(x)) for a new static shape (the median of
    ``shapes`` new shapes, each a recompile), or None."""
    examples = str(HERE.parent / "examples")
    sys.path[:] = [p for p in sys.path if p != examples]  # examples/triton is not the triton torch looks for
    for mod in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        if examples in (getattr(sys.modules[mod], "__file__", None) or ""):
            del sys.modules[mod]
    try:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-host-speed-")
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None

    def fn(x, w, b):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))

    compiled = torch.compile(fn, dynamic=False)
    w, b = torch.randn(1024), torch.randn(1024)
    compiled(torch.randn(8, 1024), w, b)  # the first compile: loads Inductor, not what is measured
    times = []
    for rows in (37, 53, 71)[:shapes]:
        x = torch.randn(rows, 1024)
        t0 = time.perf_counter()
        compiled(x, w, b)  # a new static shape: a recompile
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_speed() -> float:
    """Seconds a pure-Python loop of 20,000 additions takes (best of 5): how fast this machine runs Python
    right now. Shared and virtual machines drift by a factor of 1.5-2 within minutes; the host figures above
    move with it, so the table prints this, measured before each of them."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        acc = 0
        for i in range(20_000):
            acc += i
        best = min(best, time.perf_counter() - t0)
    return best


def machine_pauses(n: int, loop: int = 500) -> "EL.Samples":
    """A pure-Python loop (``loop`` additions, about an encode's time) timed ``n`` times, as the encodes are: the
    worst of these is what this machine alone does to a sample (the process paused by the system or the
    hypervisor, or a garbage collection), the floor under the encode's worst."""
    out = EL.Samples()
    gc.collect()
    for _ in range(n):
        n0 = EL.GCWatch.runs
        t0 = time.perf_counter()
        acc = 0
        for i in range(loop):
            acc += i
        out.add(time.perf_counter() - t0, n0)
    return out


# ---- the table ------------------------------------------------------------------------------------------------


def us(s: float) -> str:
    return EL._fmt(s).strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, smaller simulator problems")
    ap.add_argument("--no-inductor", action="store_true", help="skip the TorchInductor reference")
    ap.add_argument("--encode-child", metavar="KERNEL", help=argparse.SUPPRESS)  # one run of encode_twice
    ap.add_argument("--samples", type=int, default=1000, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.encode_child:
        _encode_child(opts.encode_child, opts.samples)
        return 0
    n = 200 if opts.quick else 1000
    print(f"dvmlang {dvmlang.__version__} ({Path(dvmlang.__file__).parent}), Python {sys.version.split()[0]}, "
          f"numpy {np.__version__}, {os.cpu_count()} cpus; medians of repeated samples")
    rows = []  # (figure, measured, target, reference)

    sim = simulator(opts.quick)  # measured first, in a fresh process (printed in the order below)
    speed = [machine_speed()]
    r = relaunch(n)
    rows.append(("cached relaunch, 1-program tiny kernel, whole call", us(statistics.median(r["whole"])),
                 "<= 100 us", f"numpy add of 16: {us(statistics.median(r['numpy']))}"))
    own = statistics.median(r["whole"]) - statistics.median(r["spent"])
    rows.append(("  dvmlang overhead (bind, lookup, device setup)", f"{us(own)} ({us(statistics.median(r['overhead']))} "
                 "inside the instrumented call)", "<= 20 us",
                 f"simulated work: {us(statistics.median(r['spent']))}"))
    rows.append(("    of which Kernel.run before Device.run", us(statistics.median(r["host"])), "", ""))
    rows.append(("    of which the L2 model after the launch", us(statistics.median(r["settle"])), "", ""))
    g = relaunch_grid(n)
    rows.append(("cached relaunch, 8 programs of 1,024 (no target)", us(statistics.median(g["whole"])), "",
                 f"numpy add of the same: {us(statistics.median(g['numpy']))}"))
    f = first_launch(n // 2)
    rows.append(("first launch of a new shape, 1 program (no target)", us(statistics.median(f["whole"])), "",
                 f"numpy add of the same: {us(statistics.median(f['numpy']))}"))

    pending = []  # (row, encode median): the Inductor reference is measured last (it imports torch)
    machine = []
    for name in ENCODED:
        speed.append(machine_speed())
        for part, runs in encode_twice(name, n).items():
            st = twice_stats(runs)
            if part == "machine":
                machine.append(st)
                continue
            if part == "encode":
                pending.append((len(rows), st["median"]))
            rows.append((f"encode, new shape: {name} ({part})",
                         f"{us(st['median'])} median, {us(st['recurring'])} worst recurring ({us(st['worst'])} "
                         f"worst, {us(st['quiet'])} w/o gc)",
                         "median <= 15 us, worst <= 100 us (>= 100,000x Inductor)" if part == "encode" else "", ""))

    speed.append(machine_speed())
    gr = graph_call(10 if opts.quick else 30)
    rows.append(("@graph call, new small shape (n x 256), host", us(gr["host"]), "<= 300 us",
                 f"numpy: {us(gr['numpy'])} ({gr['measured']} shapes, {gr['builds']} built)"))

    for name, size, ours, theirs, ratio in sim:
        target = "<= 2.0x numpy fp32 matmul" if name == "matmul" else "<= 1.0x numpy"
        rows.append((f"simulator: {name} {size}", f"{ours * 1e3:.1f} ms = {ratio:.2f}x numpy", target,
                     f"numpy: {theirs * 1e3:.1f} ms (ratio: median of pairs)"))

    for name in ("layernorm", "softmax"):
        speed.append(machine_speed())
        fb = from_bytes(name, n // 4)
        rows.append((f"from_bytes, gallery {name} ({fb['size']} bytes)", us(statistics.median(fb["from_bytes"])),
                     "<= 200 us", f"zlib.crc32 of the bytes: {us(statistics.median(fb['crc']))}"))
        rows.append(("  first read of its build (nothing cached)", us(fb["first"]), "", ""))

    t = None if opts.no_inductor else inductor_recompile()
    for i, med in pending:
        rows[i] = rows[i][:3] + (f"Inductor static recompile: {t:.2f} s = {t / med:,.0f}x" if t else
                                 "Inductor: not measured",)
    rows.append(("machine: a Python loop of 20,000 additions", f"{us(statistics.median(speed))} median "
                 f"({us(min(speed))}-{us(max(speed))})", "", "before each host figure; they scale with it"))
    for name, st in zip(ENCODED, machine):
        rows.append((f"machine: a {us(st['median'])} Python loop, {n} times, twice", f"{us(st['recurring'])} worst "
                     f"recurring ({us(st['worst'])} worst, {st['over']} over 100 us)", "",
                     f"as the {name} encodes are timed, in the same processes"))
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    heads = ("figure", "measured", "target", "reference (same run)")
    width = [max(w, len(h)) for w, h in zip(width, heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, width)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, width)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
