"""What compiling costs dvmlang: the first call of a fused program, a new shape, a Dynamo recompile.

    python benchmarks/compile_cost.py [--quick] [--only SECTION ...]

Sections (each prints a table; figures are medians of thread CPU time, ``time.thread_time``, with the host's wall
time beside them; the simulation is stubbed out, so only the host's own work is measured):

* ``first``: the first call of a fused program never seen before (``@dvmlang.graph``: softmax, layernorm,
  rmsnorm, gelu, matmul + bias + gelu at (64, 1024); the decoder block of ``benchmarks/paper`` at 64 tokens),
  through the composed path (the default) and the text path (``DVMLANG_FUSER=text``, the design before), measured
  in the same run: their ratio is the speed-up.
* ``seen``: the first call of a structure built before, in this process (a new ``@graph`` of the same function)
  and in a later process (read from the disk cache).
* ``shape``: a new shape of a fused program (host time per call: bind, plan, encode; no simulation), warm (the
  calls one after another, their inputs made before, as on a host driving a real NPU) and cold (each call right
  after its inputs were generated on this CPU).
* ``torch``: ``torch.compile(backend="dvmlang", dynamic=True)`` of a 1-layer tiny Llama: dvmlang's share of the
  first call's CPU, and the kernels built again after a Dynamo recompile.
* ``stream``: builds after the first call over the paper's 200-request stream (``@graph`` attention and decoder,
  ``lazy`` decoder layer).
* ``number``: a call with a new value of a float argument (a softmax's temperature, a norm's ``eps``, a scale):
  a runtime scalar (the default), against the same function with its floats as constants of the capture (what
  a function that uses a float as a Python number gets), in the same run.

The machine's load average is printed: on a loaded machine read wall times as upper bounds.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("DVMLANG_CACHE_DIR", "off")

import dvmlang  # noqa: E402
from dvmlang.fuser import build as fbuild  # noqa: E402
from dvmlang.fuser import codegen  # noqa: E402
from dvmlang.npu import device as npu_device  # noqa: E402
from dvmlang.vm import validator  # noqa: E402
from paper import ops as pops  # noqa: E402
from paper.common import stream as request_stream  # noqa: E402

OPERATORS = ["softmax", "layernorm", "rmsnorm", "gelu", "matmul + bias + gelu"]


def _stub_simulation():
    """Replace the device's run with its fit check: only the host's work is timed."""
    def run_stack(self, stages, name=None, trace=None):
        for st in stages:
            for it in st:
                self._ready(it.bytecode)  # what a launch checks before it runs (the fit, the validation)
        return None
    npu_device.Device.run_stack = run_stack


def _workload(name):
    return next(w for w in pops.WORKLOADS if w.name == name)


def _forget_builds():
    """Nothing built before: the builds and the validator's verdicts on their code (a structure never seen has
    its code validated at its first launch)."""
    fbuild.settle()
    fbuild.forget()
    codegen._BUILT.clear()
    validator._VERDICTS.clear()


def _timed(fn, *args):
    t, c = time.perf_counter(), time.thread_time()
    fn(*args)
    return time.thread_time() - c, time.perf_counter() - t


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def _path(p):
    os.environ["DVMLANG_FUSER"] = p


def section_first(reps, names):
    print(f"\nfirst call of a never-seen fused program (ms; {reps} calls each, median; 'ahead': the background "
          "worker's CPU for what the call handed it, the split plan and the instance functions)")
    print(f"{'workload':24} {'composed cpu':>12} {'wall':>8} {'ahead':>7} {'text cpu':>10} {'wall':>8} "
          f"{'text/composed':>14}")
    out = {}
    for name in names:
        w = _workload(name)
        args = w.args(np.random.default_rng(0), 64)
        res = {}
        for p in ("compose", "text"):
            _path(p)
            dvmlang.graph(w.graph, static=w.static)(*args)  # imports and first-use caches of this path
            cpu, wall, ahead = [], [], []
            for _ in range(reps):
                _forget_builds()
                g = dvmlang.graph(w.graph, static=w.static)
                w0 = fbuild.worker_cpu()
                c, t = _timed(g, *args)
                fbuild.settle()
                cpu.append(c)
                wall.append(t)
                ahead.append(fbuild.worker_cpu() - w0)
            res[p] = (_med(cpu) * 1e3, _med(wall) * 1e3, _med(ahead) * 1e3)
        _path("compose")
        (cc, cw, ca), (tc, tw, _) = res["compose"], res["text"]
        out[name] = res
        print(f"{name:24} {cc:12.3f} {cw:8.3f} {ca:7.2f} {tc:10.3f} {tw:8.3f} {tc / cc:13.1f}x")
    return out


def section_seen(reps, names):
    print(f"\nfirst call of a structure built before (ms cpu, median of {reps}; wall in parentheses)")
    print(f"{'workload':24} {'this process':>16} {'a later process (disk)':>24}")
    for name in names:
        w = _workload(name)
        args = w.args(np.random.default_rng(0), 64)
        dvmlang.graph(w.graph, static=w.static)(*args)
        cpu, wall = [], []
        for _ in range(reps):
            g = dvmlang.graph(w.graph, static=w.static)
            c, t = _timed(g, *args)
            cpu.append(c)
            wall.append(t)
        disk = _later_process(name, reps)
        print(f"{name:24} {_med(cpu) * 1e3:9.3f} ({_med(wall) * 1e3:5.2f}) {disk:>24}")


_CHILD = r"""
import os, sys, time, statistics
sys.path.insert(0, {bench!r})
import numpy as np
import compile_cost as cc
cc._stub_simulation()
import dvmlang
from paper import ops as pops
w = cc._workload({name!r})
args = w.args(np.random.default_rng(0), 64)
warm = dvmlang.graph(lambda x: dvmlang.ops.exp(x) * 3.0 - 1.0)  # imports: another structure
warm(np.ones((3, 5), np.float32))
g = dvmlang.graph(w.graph, static=w.static)
c, t = cc._timed(g, *args)
(prog,) = g._captured.values()
info = [k.cache_info() for k in {{id(k): k for k in prog.kernels.values()}}.values()]
print(c, t, sum(i.builds for i in info), sum(i.loads for i in info))
"""


def _later_process(name, reps):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, DVMLANG_CACHE_DIR=d, DVMLANG_FUSER="compose")
        code = _CHILD.format(bench=str(ROOT / "benchmarks"), name=name)
        first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        if first.returncode:
            return "failed: " + first.stderr.strip().splitlines()[-1]
        cpu, wall, loads = [], [], []
        for _ in range(reps):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            c, t, b, ld = r.stdout.split()
            cpu.append(float(c))
            wall.append(float(t))
            loads.append((int(b), int(ld)))
        b, ld = loads[-1]
        return f"{_med(cpu) * 1e3:7.3f} ({_med(wall) * 1e3:5.2f}) {b} built, {ld} read"


def section_shape(reps, names):
    """Host time of a call at a new length. ``warm``: the calls made one after another, their inputs made before
    (as a host driving a real NPU runs: the inputs live on the device, nothing between two calls touches the
    host's caches); ``cold``: each call right after its inputs were generated on this CPU (megabytes of random
    numbers between two calls, which evict the interpreter's working set from the caches)."""
    print("\na new shape of a fused program, host time per call (us, median over new lengths; simulation stubbed)")
    print(f"{'workload':24} {'composed warm':>13} {'cold':>8} {'text warm':>10} {'cold':>8}")
    stream = [L for L in dict.fromkeys(request_stream(200))][1:1 + 10 * reps]
    for name in names:
        w = _workload(name)
        res = {}
        for p in ("compose", "text"):
            _path(p)
            rng = np.random.default_rng(0)
            half = len(stream) // 2
            warm_lengths, cold_lengths = stream[:half], stream[half:]
            g = dvmlang.graph(w.graph, static=w.static)
            g(*w.args(rng, 64))
            g(*w.args(rng, 65))  # (the second call writes the plan's instance function)
            inputs = [w.args(rng, L) for L in warm_lengths]
            warm = []
            for k in range(0, len(inputs) - 4, 5):  # batches of five calls (reading the thread's clock costs a few
                c0 = time.thread_time()  # microseconds itself)
                for args in inputs[k:k + 5]:
                    g(*args)
                warm.append((time.thread_time() - c0) / 5)
            del inputs
            cold = []
            for L in cold_lengths:
                args = w.args(rng, L)
                c0 = time.thread_time()
                g(*args)
                cold.append(time.thread_time() - c0)
            res[p] = (_med(warm) * 1e6, _med(cold) * 1e6)
        _path("compose")
        print(f"{name:24} {res['compose'][0]:13.1f} {res['compose'][1]:8.1f} {res['text'][0]:10.1f} "
              f"{res['text'][1]:8.1f}")


def section_torch(reps, names):
    """dvmlang's share of torch.compile's first call of a 1-layer tiny Llama (the paper's model level), and the
    kernels built again after a Dynamo recompile (a new 0/1 specialisation: length 1) and after a second
    compile of the same model (torch._dynamo.reset(), as a new process or serving restart would)."""
    try:
        import torch
        from paper import models
    except ImportError:
        print("\ntorch is not installed: the torch section is left out")
        return
    import importlib

    import dvmlang.torch as dtorch
    from dvmlang.torch import partition, reuse
    backend = importlib.import_module("dvmlang.torch.backend")  # (the package's `backend` is the function)
    torch.set_num_threads(1)
    spent = {"dvmlang": 0.0, "depth": 0, "gc": 0.0, "gc_start": 0.0}

    def timed(fn):
        def wrapper(*a, **k):
            spent["depth"] += 1
            c = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent["depth"] -= 1
                if not spent["depth"]:  # (the outermost of nested dvmlang calls)
                    spent["dvmlang"] += time.thread_time() - c

        return wrapper

    def collections(phase, info):
        """The cyclic collector's runs on this thread inside dvmlang's share: a torch process's heap is large, and
        a full collection (0.1-0.4 s) lands in whichever call's allocation starts it."""
        if spent["depth"] and threading.current_thread() is threading.main_thread():
            if phase == "start":
                spent["gc_start"] = time.thread_time()
            else:
                spent["gc"] += time.thread_time() - spent["gc_start"]

    gc.callbacks.append(collections)

    # a graph's compile (matching earlier graphs, or partitioning, lowering and planning) and its calls
    backend.compile_graph = timed(backend.compile_graph)
    partition.CompiledGraph.__call__ = timed(partition.CompiledGraph.__call__)
    reuse.Reused.__call__ = timed(reuse.Reused.__call__)
    s = models.SETTINGS["full"]
    print("\ntorch.compile(backend='dvmlang', dynamic=True) of a 1-layer tiny Llama (hidden 256), simulation stubbed")
    print("(dvmlang cpu ms: its share of the call's thread CPU; gc: the cyclic collector's runs within that share)")
    print(f"{'call':50} {'all cpu ms':>11} {'dvmlang cpu ms':>15} {'gc':>6} {'builds':>7} {'encodes':>8}")
    for label, length, reset in (("first call, length 40", 40, True),
                                 ("a new length (64)", 64, False),
                                 ("another new length (80)", 80, False),
                                 ("new lengths 81-100 (median cpu, counts summed)", range(81, 101), False),
                                 ("a length seen before (64)", 64, False),
                                 ("a Dynamo recompile (length 1)", 1, False),
                                 ("the model compiled again (dynamo reset)", 40, True)):
        if reset:
            torch._dynamo.reset()
            model = models.build("llama", s)
            compiled = torch.compile(model, backend="dvmlang", dynamic=True)
        before = dtorch.stats()
        if isinstance(length, range):  # (several calls, their inputs made before: the median call)
            inputs = [models.ids_for(L, s.vocab) for L in length]
            totals, ours, gcs = [], [], []
            for ids in inputs:
                spent["dvmlang"] = spent["gc"] = 0.0
                c = time.thread_time()
                with torch.no_grad():
                    compiled(ids)
                totals.append(time.thread_time() - c)
                ours.append(spent["dvmlang"])
                gcs.append(spent["gc"])
            total, spent["dvmlang"], spent["gc"] = _med(totals), _med(ours), _med(gcs)
        else:
            ids = models.ids_for(length, s.vocab)
            spent["dvmlang"] = spent["gc"] = 0.0
            c = time.thread_time()
            with torch.no_grad():
                compiled(ids)
            total = time.thread_time() - c
        after = dtorch.stats()
        print(f"{label:50} {total * 1e3:11.1f} {spent['dvmlang'] * 1e3:15.1f} {spent['gc'] * 1e3:6.1f} "
              f"{after['builds'] - before['builds']:7d} {after['encodes'] - before['encodes']:8d}")
    gc.callbacks.remove(collections)


def section_stream(reps, names):
    """Builds after the first call over the paper's 200-request stream."""
    stream = request_stream(200)
    print(f"\nbuilds over the 200-request stream ({len(set(stream))} lengths) after each program's first call")
    print(f"{'workload':24} {'builds at the first call':>25} {'built ahead':>12} {'builds a call waited for':>25}")
    for name in ("softmax", "layernorm", "attention", "decoder block"):
        w = _workload(name)
        # (work ahead done on this thread: counted at once, in stats.built_ahead, never by a call's builds)
        os.environ["DVMLANG_BUILD_AHEAD"] = "0"
        g = dvmlang.graph(w.graph, static=w.static)
        rng = np.random.default_rng(0)
        g(*w.args(rng, stream[0]))
        first = g.stats.builds
        for L in stream[1:]:
            g(*w.args(rng, L))
        os.environ.pop("DVMLANG_BUILD_AHEAD")
        print(f"{name:24} {first:25d} {g.stats.built_ahead:12d} {g.stats.builds - first:25d}")


NUMBERS = [  # (name, function of (x, number), the numbers a call passes)
    ("softmax(x / t)", lambda x, t: dvmlang.ops.softmax(x / t, axis=-1)),
    ("rms_norm(x, eps) * s", lambda x, eps: dvmlang.ops.rms_norm(x, eps=eps) * 2.0),
    ("gelu(x) * s + s", lambda x, s: dvmlang.ops.gelu(x) * s + s),
]


def section_number(reps, names):
    """Host time of a call with a new value of a float argument (simulation stubbed)."""
    print("\na call with a new value of a float argument, host time (us, median over new values; simulation stubbed)")
    print(f"{'workload':24} {'runtime scalar':>15} {'captures':>9} {'builds':>7} {'as constants':>13} {'captures':>9}"
          f" {'builds':>7} {'constants/runtime':>18}")
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    values = [0.5 + 0.01 * k for k in range(10 * reps + 2)]
    for name, fn in NUMBERS:
        res = []
        for runtime in (True, False):
            g = dvmlang.graph(fn)
            g._floats = runtime  # (False: every float a constant of the capture, keyed by value)
            g(x, values[0])
            g(x, values[1])  # (the second call writes the instance function)
            fbuild.settle()
            ts = []
            for v in values[2:]:
                c = time.thread_time()
                g(x, v)
                ts.append(time.thread_time() - c)
                fbuild.settle()  # (work handed to the background worker is not this call's)
            res.append((_med(ts) * 1e6, g.stats.captures, g.stats.builds))
        (rt, rc, rb), (ct, cc, cb) = res
        print(f"{name:24} {rt:15.1f} {rc:9d} {rb:7d} {ct:13.1f} {cc:9d} {cb:7d} {ct / rt:17.1f}x")


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


SECTIONS = {"first": section_first, "seen": section_seen, "shape": section_shape, "torch": section_torch,
            "stream": section_stream, "number": section_number}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="the sections to run (default: all)")
    a = ap.parse_args(argv)
    _stub_simulation()
    reps = 5 if a.quick else 15
    print(f"dvmlang compile cost; load average {_load():.2f} on {os.cpu_count()} cores")
    names = OPERATORS + ["decoder block"]
    for s in a.only or list(SECTIONS):
        SECTIONS[s](reps, names)
    print(f"\nload average at the end {_load():.2f}")


if __name__ == "__main__":
    main()
