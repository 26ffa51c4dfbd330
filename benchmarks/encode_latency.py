"""Host-side latency of the bytecode path for the gallery's softmax and layernorm kernels.

For each kernel it prints the median / p99 / max of

* build        — a new specialisation from scratch: AST -> tile IR -> passes -> instruction template ->
                 encoder (static sections serialised, template validated). The kernel's source is parsed
                 once per kernel object and is not part of a build.
* encode       — ``kernel.encode(grid, *args)`` for a shape never seen before (no rebuild): argument binding,
                 build-cache lookup, instance-cache miss and ``Encoder.encode`` (patch words, write the
                 parameter table, grid and checksum). Also shown: the ``Encoder.encode`` part alone.
* relaunch     — ``kernel[grid](*args)`` with a cached instance, alternating two sets of arrays of the same
                 shape. Split into
                   host          everything ``Kernel.run`` does before handing the bytecode to the device
                                 (bind via the launch key, cache lookup, writeable check, aliasing),
                   device setup  ``Device.run`` minus program execution and core placement (validation
                                 check, resource check, decoder lookup, launch state, launch record),
                   overhead      host + device setup: dvmlang's own per-launch cost,
                   simulation    executing the programs and placing them on cores (the simulated work;
                                 shown for scale, not part of the overhead).
* validation   — what safety costs for bytes from outside: ``Bytecode.from_bytes`` (parse + validate) of
                 the kernel's encoded bytes, and the two halves separately.

Every sample runs with the garbage collector on. A collection pauses the whole process (tens to hundreds of
microseconds here) whenever anyone's allocations cross its threshold, so the table also shows the maximum
over the samples no collection fell into, and how many samples one did.

Shapes: rows and columns drawn from a fixed seed with columns in (512, 1024], so the gallery's
``BLOCK = next_power_of_2(n_cols)`` is 1024 for all of them and every shape is an encode, never a build.

    python benchmarks/encode_latency.py [--shapes N] [--builds N] [--relaunches N]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import layernorm  # noqa: E402
import softmax  # noqa: E402

import dvmlang  # noqa: E402
import dvmlang.npu.device as device_mod  # noqa: E402
from dvmlang.vm import bytecode as bytecode_mod  # noqa: E402
from dvmlang.vm.validator import validate  # noqa: E402

BLOCK = 1024


class Pool:
    """Arrays for encode samples handed out as views of one buffer per dtype, as a caching allocator (PyTorch's)
    hands out tensors: a fresh multi-megabyte numpy array per sample is a new memory mapping, and mapping and
    unmapping one per sample (system calls, TLB flushes) slowed the encode timed right after it by about 1.5x
    on the development machine, which is the harness's cost, not dvmlang's. Encoding reads shapes, never data.
    Handing out a view is a slice and a reshape (heavier numpy calls here slow the timed encode too)."""

    def __init__(self, elements: int = 3 * 4096 * 1024):
        self.elements = elements
        self.bufs: dict = {}  # dtype -> (buffer, next free element)

    def empty(self, shape, dtype) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else shape
        n = math.prod(shape)
        buf, off = self.bufs.get(dtype) or (np.empty(self.elements, dtype), 0)
        if off + n > len(buf):
            off = 0
        self.bufs[dtype] = (buf, off + n + 16)
        return buf[off:off + n].reshape(shape)


def _empty(shape, dtype, pool):
    return np.empty(shape, dtype) if pool is None else pool.empty(shape, dtype)


def softmax_args(rows, cols, rng, fill=True, pool=None):
    """``pool``: take the arrays from it (``fill`` must be False: their values are whatever the buffer holds)."""
    x = rng.standard_normal((rows, cols), dtype=np.float32) if fill else _empty((rows, cols), np.float32, pool)
    out = _empty(x.shape, np.float32, pool)
    return (rows,), (out, x, x.shape[1], out.shape[1], cols), {"BLOCK": BLOCK}


def layernorm_args(rows, cols, rng, fill=True, pool=None):
    if fill:
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        w = rng.standard_normal(cols, dtype=np.float32)
        b = rng.standard_normal(cols, dtype=np.float32)
    else:
        x, w, b = (_empty(s, np.float32, pool) for s in ((rows, cols), (cols,), (cols,)))
    y = _empty(x.shape, np.float32, pool)
    mean = _empty(rows, np.float32, pool)
    rstd = _empty(rows, np.float32, pool)
    return (rows,), (x, y, w, b, mean, rstd, x.shape[1], cols, 1e-5), {"BLOCK": BLOCK}


KERNELS = {"softmax": (softmax.softmax, softmax_args), "layernorm": (layernorm.layernorm, layernorm_args)}


class GCWatch:
    """Counts the garbage collector's runs, so a sample can say whether a collection happened inside it (a
    collection is a pause of the whole process, triggered by anyone's allocations, not by one phase)."""

    runs = 0

    @classmethod
    def callback(cls, phase, info):
        if phase == "start":
            cls.runs += 1


gc.callbacks.append(GCWatch.callback)


class Samples(list):
    """Seconds per sample, with the samples during which the garbage collector ran."""

    def __init__(self):
        super().__init__()
        self.with_gc = []

    def add(self, seconds: float, gc_before: int):
        self.append(seconds)
        self.with_gc.append(GCWatch.runs != gc_before)


class TimedDevice(dvmlang.npu.Device):
    """The default device, with the wall time of each ``run`` recorded (instrumentation only)."""

    last_run = 0.0

    def run(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().run(*args, **kwargs)
        finally:
            self.last_run = time.perf_counter() - t0


class SimulationClock:
    """Accumulates the wall time spent executing programs (``execute``: the step-by-step and compiled paths; a
    replayed relaunch, ``npu/replay.py``, runs apart from it) and placing them on cores (``_compose``) inside
    ``Device.run``, by wrapping those two functions of the device module."""

    def __init__(self, module=device_mod):
        self.spent = 0.0
        self.module = module  # the device module whose functions are wrapped (another checkout's, for A/B)
        self._execute = module.execute
        self._compose = module._compose

    def __enter__(self):
        clock = self
        execute, compose = self._execute, self._compose

        def timed_execute(*a, **k):
            gen = execute(*a, **k)
            while True:
                t0 = time.perf_counter()
                try:
                    item = next(gen)
                except StopIteration:
                    clock.spent += time.perf_counter() - t0
                    return
                clock.spent += time.perf_counter() - t0
                yield item

        def timed_compose(*a, **k):
            t0 = time.perf_counter()
            try:
                return compose(*a, **k)
            finally:
                clock.spent += time.perf_counter() - t0

        self.module.execute = timed_execute
        self.module._compose = timed_compose
        return self

    def __exit__(self, *exc):
        self.module.execute = self._execute
        self.module._compose = self._compose
        return False


def _stats(samples):
    s = sorted(samples)
    p99 = s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]
    return statistics.median(s), p99, s[-1]


def _fmt(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us / 1000:8.2f} ms" if us >= 1000 else f"{us:8.1f} us"


def _fresh(kernel):
    kernel._builds.clear()
    kernel._instances.clear()
    kernel._plans.clear()
    kernel._last = None


PHASES = ("build", "encode", "relaunch", "validate")


def measure(name: str, n_shapes: int, n_builds: int, n_relaunch: int, phases=PHASES) -> list[tuple[str, list[float]]]:
    kernel, make = KERNELS[name]
    rng = np.random.default_rng(2024)
    rows = []
    gc.collect()

    # ---- build ----------------------------------------------------------------------------------------
    grid, args, meta = make(8, 700, rng)
    kernel.encode(grid, *args, **meta)  # parse the kernel's source once (per kernel, not per build)
    builds = Samples()
    gc.collect()
    for _ in range(n_builds if "build" in phases else 0):
        _fresh(kernel)
        n0 = GCWatch.runs
        t0 = time.perf_counter()
        kernel.build_for(*args, **meta)
        builds.add(time.perf_counter() - t0, n0)
    if builds:
        rows.append(("build", builds))

    if "encode" in phases:
        rows += _encode_phase(kernel, make, rng, grid, args, meta, n_shapes)
    if "relaunch" in phases:
        rows += _relaunch_phase(kernel, make, rng, n_relaunch)
    if "validate" in phases:
        rows += _validate_phase(kernel, make, rng, n_shapes)
    return rows


def _encode_phase(kernel, make, rng, grid, args, meta, n_shapes):
    rows = []
    _fresh(kernel)
    kernel.encode(grid, *args, **meta)
    seen = {(8, 700)}
    shapes = []
    while len(shapes) < n_shapes:
        r, c = int(rng.integers(1, 4097)), int(rng.integers(513, 1025))
        if (r, c) not in seen:
            seen.add((r, c))
            shapes.append((r, c))
    before = kernel.cache_info().builds, kernel.cache_info().encodes
    encodes, inner = Samples(), Samples()
    gc.collect()
    for r, c in shapes:
        g, a, m = make(r, c, rng, fill=False)  # encoding reads shapes, never data: leave the pages untouched
        if len(kernel._instances) >= 200:  # stay below the instance cache size: every shape must encode
            kernel._instances.clear()
        n0 = GCWatch.runs
        t0 = time.perf_counter()
        bc = kernel.encode(g, *a, **m)
        encodes.add(time.perf_counter() - t0, n0)
        inner.add(bc.encode_s, n0)
    info = kernel.cache_info()
    assert info.builds == before[0], "a new shape rebuilt the kernel"
    assert info.encodes - before[1] == n_shapes, "a new shape did not encode"
    rows.append(("encode (new shape)", encodes))
    rows.append(("  of which Encoder.encode", inner))
    return rows


def _relaunch_phase(kernel, make, rng, n_relaunch):
    rows = []
    dev = TimedDevice()
    g, a1, m = make(2, 700, rng)
    _, a2, _ = make(2, 700, rng)
    kernel[g](*a1, device=dev, **m)
    kernel[g](*a2, device=dev, **m)
    hits0 = kernel.cache_info().hits
    host, setup, overhead, sim = Samples(), Samples(), Samples(), Samples()
    gc.collect()
    with SimulationClock() as clock:
        for i in range(n_relaunch):
            a = a1 if i % 2 else a2
            clock.spent = 0.0
            n0 = GCWatch.runs
            t0 = time.perf_counter()
            kernel[g](*a, device=dev, **m)
            total = time.perf_counter() - t0
            h = total - dev.last_run
            d = dev.last_run - clock.spent
            host.add(h, n0)
            setup.add(d, n0)
            overhead.add(h + d, n0)
            sim.add(clock.spent, n0)
    assert kernel.cache_info().hits - hits0 == n_relaunch, "a relaunch missed the instance cache"
    rows.append(("relaunch: host (bind + lookup)", host))
    rows.append(("relaunch: device setup", setup))
    rows.append(("relaunch: dvmlang overhead", overhead))
    rows.append(("relaunch: simulation (reference)", sim))
    return rows


def _validate_phase(kernel, make, rng, n_shapes):
    rows = []
    g, a, m = make(37, 900, rng)
    data = kernel.encode(g, *a, **m).to_bytes()
    parse, val, full = Samples(), Samples(), Samples()
    gc.collect()
    for _ in range(n_shapes):
        n0 = GCWatch.runs
        t0 = time.perf_counter()
        bc = bytecode_mod._parse(data, bytecode_mod.C.LIMITS)
        t1 = time.perf_counter()
        validate(bc)
        t2 = time.perf_counter()
        dvmlang.Bytecode.from_bytes(data)
        t3 = time.perf_counter()
        parse.add(t1 - t0, n0)
        val.add(t2 - t1, n0)
        full.add(t3 - t2, n0)
    rows.append((f"from_bytes ({len(data)} bytes)", full))
    rows.append(("  parse", parse))
    rows.append(("  validate", val))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=200, help="different shapes to encode (default 200)")
    ap.add_argument("--builds", type=int, default=100, help="builds to time (default 100)")
    ap.add_argument("--relaunches", type=int, default=500, help="relaunches to time (default 500)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {', '.join(PHASES)}")
    args = ap.parse_args(argv)
    phases = tuple(p.strip() for p in args.phases.split(","))
    unknown = set(phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    print(f"dvmlang {dvmlang.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}")
    print(f"{'kernel':<10} {'phase':<34} {'n':>5} {'median':>11} {'p99':>11} {'max':>11}   {'max w/o gc':>11} "
          f"{'gc':>4}")
    for name in KERNELS:
        for phase, samples in measure(name, args.shapes, args.builds, args.relaunches, phases):
            med, p99, mx = _stats(samples)
            quiet = [x for x, g in zip(samples, samples.with_gc) if not g]
            qmax = _fmt(max(quiet)) if quiet else f"{'-':>11}"
            print(f"{name:<10} {phase:<34} {len(samples):>5} {_fmt(med)} {_fmt(p99)} {_fmt(mx)}   {qmax} "
                  f"{sum(samples.with_gc):>4}")
    print("max w/o gc: the largest sample during which the garbage collector did not run; gc: the number of "
          "samples it ran in")
    return 0


if __name__ == "__main__":
    sys.exit(main())
