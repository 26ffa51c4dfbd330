"""Host speed, before and after: the host figures of host_speed.py for two checkouts, in alternating processes,
each figure scaled to the machine's Python speed measured around it.

A shared or virtual machine's speed drifts by 1.5-2x within minutes, and a whole process can land in a slow or
a fast phase, so two single runs of host_speed.py cannot show a 20 % change. This runs the relaunch, encode,
@graph and from_bytes figures of ``BEFORE`` (another checkout's directory, e.g. a ``git worktree`` of an older
commit) and of this checkout in turn, ``--pairs`` times, and scales every figure to what it would be with the
pure-Python loop of ``host_speed.machine_speed`` taking 600 us (its time on the quiet development machine).
Both sides run this checkout's benchmark code (host_speed.py), so only dvmlang differs. Prints each side's
median and minimum over the pairs.

    git worktree add /tmp/before <commit>
    python benchmarks/host_speed_ab.py /tmp/before [--pairs 6] [--only relaunch,encode]

``--in-process`` instead imports both checkouts' dvmlang into one process (as two packages, with the
gallery's vector add, softmax and layernorm kernels defined once for each) and times them in alternating
blocks, so both see every phase of the machine alike; it prints each side's median and the median of the
rounds' after/before ratios with its 10th and 90th percentiles, which resolves changes of a few per cent.
It checks first that both sides give the same results and cycles. Workloads (``--only``): relaunch,
overhead (the relaunch's time outside executing its programs: host_speed.py's "dvmlang overhead"), relaunch8
(the gallery vector add on 8 programs of 1,024), first_launch (host_speed.py's: the gallery vector add on one
program with a new n each time), encode (the gallery layernorm on new shapes), softmax and layernorm 8192x1024
(the gallery's), layernorm_row (sim_throughput.py's, host_speed.py's simulator row), vadd (16M), matmul (1024^3
fp16 -> fp32, sim_throughput.py's); the simulator ones also time numpy's version. Each round takes the sides in
one of the six orders in turn.

    python benchmarks/host_speed_ab.py /tmp/before --in-process --only relaunch,vadd [--rounds 40]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
QUIET_LOOP = 600e-6  # seconds the machine_speed loop takes on the quiet development machine


FIGURES = ("relaunch", "encode", "graph", "from_bytes")
ORDERS = list(itertools.permutations(("before", "after", "numpy")))
IN_PROCESS = ("relaunch", "overhead", "relaunch8", "first_launch", "encode", "softmax", "layernorm", "layernorm_row",
              "vadd", "matmul")
GALLERY = ("vector_add", "softmax", "layernorm")  # examples/ modules whose kernels each side defines
BENCH_KERNELS = ("layernorm_row", "matmul")  # sim_throughput.py's kernels each side defines (host_speed.py's rows)


def measure(which=FIGURES) -> dict:
    """This process's figures (us at the quiet machine's speed), with whichever dvmlang it imports: the groups
    in ``which``."""
    sys.path.insert(0, str(HERE))
    import host_speed as H

    out = {}

    def scaled(name, fn):
        before = H.machine_speed()
        v = fn()
        loop = (before + H.machine_speed()) / 2
        out[name] = v * 1e6 * QUIET_LOOP / loop
        return v

    rel = {}

    def relaunch():
        rel.update(H.relaunch(600))
        return statistics.median(rel["whole"])
    if "relaunch" in which:
        whole = scaled("relaunch, whole call", relaunch)
        own = statistics.median(rel["whole"]) - statistics.median(rel["spent"])  # (host_speed.py's figure)
        out["  dvmlang overhead"] = own / whole * out["relaunch, whole call"]
    if "encode" in which:
        for name in ("layernorm", "softmax"):
            scaled(f"encode, new shape: {name}", lambda: statistics.median(H.encode(name, 600)["encode"]))
    if "graph" in which:
        scaled("@graph call, new small shape, host", lambda: H.graph_call(15)["host"])
    if "from_bytes" in which:
        scaled("from_bytes, gallery layernorm",
               lambda: statistics.median(H.from_bytes("layernorm", 150)["from_bytes"]))
    return out


def run_side(dvmlang_root: Path | None, which) -> dict:
    env = dict(os.environ)
    if dvmlang_root is not None:
        env["PYTHONPATH"] = str(dvmlang_root) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, __file__, "--measure", "--only", ",".join(which)], env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


# ---- both checkouts in one process -------------------------------------------------------------------------


def _load_sides(before: Path) -> dict:
    """side -> {module name: that side's copy of the gallery module}: each checkout's dvmlang copied into a
    temporary directory as its own package, and the gallery modules with their imports pointed at it."""
    tmp = Path(tempfile.mkdtemp(prefix="dvmlang-ab-"))
    sys.path.insert(0, str(tmp))
    sides = {}
    for side, root in (("before", before), ("after", HERE.parent)):
        pkg = f"dvmlang_{side}"
        shutil.copytree(root / "dvmlang", tmp / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        mods = {}
        for name in GALLERY:
            text = (HERE.parent / "examples" / f"{name}.py").read_text()
            text = text.replace("import dvmlang.language as dl", f"import {pkg}.language as dl")
            text = text.replace("import dvmlang\n", f"import {pkg} as dvmlang\n")
            (tmp / f"{name}_{side}.py").write_text(text)
            mods[name] = importlib.import_module(f"{name}_{side}")
        import sim_throughput
        (tmp / f"bench_kernels_{side}.py").write_text(
            f"import {pkg} as dvmlang\nimport {pkg}.language as dl\n\n\n" +
            "\n\n".join(inspect.getsource(getattr(sim_throughput, k).fn) for k in BENCH_KERNELS))
        mods["bench"] = importlib.import_module(f"bench_kernels_{side}")
        mods["dvmlang"] = importlib.import_module(pkg)
        sides[side] = mods
    return sides


def _workload(name: str, rng):
    """(call(modules, device) -> record or None, block: calls per timed sample, numpy's version or None, the
    output array both sides' results are compared by)."""
    if name in ("relaunch", "overhead"):
        x, y, o = (rng.random(16, dtype=np.float32) for _ in range(3))
        return lambda m, d: m["vector_add"].add[(1,)](x, y, o, 16, BLOCK=16, device=d), 200, None, o
    if name == "relaunch8":  # a small grid: 8 programs of 1,024 (what the lazy and torch paths launch often)
        x, y, o = (rng.random(8192, dtype=np.float32) for _ in range(3))
        return lambda m, d: m["vector_add"].add[(8,)](x, y, o, 8192, BLOCK=1024, device=d), 100, None, o
    if name == "first_launch":  # host_speed.py's first launch: one program of 2,048 with a new n (a new instance)
        sets = [(rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32), np.empty(n, np.float32), n)
                for n in range(100, 2100)]
        made = {}  # each side's launches so far: both go through the same n's

        def first(m, d):
            k = m["vector_add"].add
            if len(k._instances) >= 200:
                k._instances.clear()
            i = made[id(k)] = made.get(id(k), -1) + 1
            x, y, o, n = sets[i % len(sets)]
            return k[(1,)](x, y, o, n, BLOCK=2048, device=d)
        return first, 50, None, None
    if name == "vadd":
        n = 16 << 20
        x, y, o = (rng.random(n, dtype=np.float32) for _ in range(3))
        return (lambda m, d: m["vector_add"].add[(n // 8192,)](x, y, o, n, BLOCK=8192, device=d), 2,
                lambda: np.add(x, y, out=o), o)
    if name == "encode":
        buf = np.empty(4096 * 1024, np.float32)
        w, b, mean, rstd = (np.empty(4096, np.float32) for _ in range(4))
        shapes = iter([(int(r), int(c)) for r, c in zip(rng.integers(1, 4097, 1 << 16), rng.integers(513, 1025, 1 << 16))])

        def enc(m, d):
            k = m["layernorm"].layernorm
            if len(k._instances) >= 200:
                k._instances.clear()
            r, c = next(shapes)
            x = buf[:r * c].reshape(r, c)
            k.encode((r,), x, x, w[:c], b[:c], mean[:r], rstd[:r], c, c, 1e-5, BLOCK=1024, device=d)
        return enc, 50, None, None
    if name == "matmul":  # host_speed.py's simulator row: 1024^3 fp16 -> fp32, 128^3 tiles
        a, b = (rng.random((1024, 1024), dtype=np.float32).astype(np.float16) for _ in range(2))
        c = np.empty((1024, 1024), np.float32)
        return (lambda m, d: m["bench"].matmul[(8, 8)](a, b, c, 1024, 1024, 1024, BM=128, BN=128, BK=128, device=d),
                2, lambda: a.astype(np.float32) @ b.astype(np.float32), c)
    x = rng.standard_normal((8192, 1024), dtype=np.float32)
    o = np.empty_like(x)
    if name == "softmax":
        def sm():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            e /= e.sum(axis=1, keepdims=True)
        return (lambda m, d: m["softmax"].softmax[(8192,)](o, x, 1024, 1024, 1024, BLOCK=1024, device=d), 2, sm, o)
    w, b = rng.standard_normal(1024, dtype=np.float32), rng.standard_normal(1024, dtype=np.float32)
    mean, rstd = np.empty(8192, np.float32), np.empty(8192, np.float32)

    def ln():
        mu = x.mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * w + b
    if name == "layernorm_row":  # host_speed.py's simulator row: one row per program, one tile
        return (lambda m, d: m["bench"].layernorm_row[(8192,)](x, o, w, b, 1024, 1024, 1e-5, BLOCK=1024, device=d),
                2, ln, o)
    return (lambda m, d: m["layernorm"].layernorm[(8192,)](x, o, w, b, mean, rstd, 1024, 1024, 1e-5, BLOCK=1024,
                                                            device=d), 2, ln, o)


def in_process(before: Path, which, rounds: int) -> int:
    sys.path.insert(0, str(HERE))
    from encode_latency import SimulationClock
    sides = _load_sides(before)
    for name in which:
        call, block, ref, out = _workload(name, np.random.default_rng(1))
        devices = {side: m["dvmlang"].npu.Device() for side, m in sides.items()}
        seen = {}
        for side, m in sides.items():
            for _ in range(3):
                rec = call(m, devices[side])
            seen[side] = (None if out is None else out.copy(), getattr(rec, "cycles", None))
        (ob, cb), (oa, ca) = seen["before"], seen["after"]
        if cb != ca or (ob is not None and not np.array_equal(ob, oa)):
            print(f"{name}: the two checkouts disagree (cycles {cb} / {ca}); not timed")
            continue
        times = {"before": [], "after": [], "numpy": []}
        # "overhead": the relaunch's time outside executing programs and placing them (host_speed.py's figure)
        clocks = {side: SimulationClock(m["dvmlang"].npu.device) for side, m in sides.items()} \
            if name == "overhead" else {}
        gc.collect()
        for r in range(rounds):
            order = ORDERS[r % len(ORDERS)]  # (each side in each place as often: the one after a large workload pays)
            for side in order:
                if side == "numpy" and ref is None:
                    continue
                f = ref if side == "numpy" else (lambda m=sides[side], d=devices[side]: call(m, d))
                clock = clocks.get(side)
                if clock is not None:
                    with clock:
                        clock.spent = 0.0
                        t0 = time.perf_counter()
                        for _ in range(block):
                            f()
                        times[side].append((time.perf_counter() - t0 - clock.spent) / block)
                    continue
                t0 = time.perf_counter()
                for _ in range(block):
                    f()
                times[side].append((time.perf_counter() - t0) / block)
        ratios = sorted(a / b for a, b in zip(times["after"], times["before"]))
        line = (f"{name:10s} before {_fmt(statistics.median(times['before']))}  after "
                f"{_fmt(statistics.median(times['after']))}  after/before {statistics.median(ratios):.3f} "
                f"(10%: {ratios[len(ratios) // 10]:.3f}, 90%: {ratios[9 * len(ratios) // 10]:.3f})")
        if times["numpy"]:
            vs = [statistics.median(s / n for s, n in zip(times[side], times["numpy"])) for side in ("before", "after")]
            line += f"  x numpy: {vs[0]:.2f} -> {vs[1]:.2f}"
        print(line, flush=True)
    return 0


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:9.2f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?", help="the other checkout's directory (its dvmlang/ is imported)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--only", help=f"comma-separated figure groups to compare (default: all of {', '.join(FIGURES)}; "
                                   f"in process: {', '.join(IN_PROCESS)})")
    ap.add_argument("--in-process", action="store_true", help="both checkouts in one process, alternating blocks")
    ap.add_argument("--rounds", type=int, default=30, help="alternating blocks per workload (--in-process)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    groups = IN_PROCESS if opts.in_process else FIGURES
    which = tuple(w.strip() for w in (opts.only or ",".join(groups)).split(",") if w.strip())
    unknown = [w for w in which if w not in groups]
    if unknown or not which:
        ap.error(f"--only takes some of {', '.join(groups)}, got {opts.only!r}")
    if opts.measure:
        print(json.dumps(measure(which)))
        return 0
    if not opts.before or not (Path(opts.before) / "dvmlang" / "__init__.py").exists():
        ap.error("give the directory of another checkout (one that holds dvmlang/)")
    if opts.in_process:
        return in_process(Path(opts.before).resolve(), which, opts.rounds)
    sides = {"before": [], "after": []}
    for i in range(opts.pairs):
        sides["before"].append(run_side(Path(opts.before).resolve(), which))
        sides["after"].append(run_side(None, which))
        print(f"pair {i + 1}/{opts.pairs} done", file=sys.stderr)
    names = list(sides["after"][0])
    width = max(len(n) for n in names)
    print(f"{'figure (us at a 600 us Python loop)':{width}}  before: median (min)   after: median (min)")
    for n in names:
        b = [s[n] for s in sides["before"]]
        a = [s[n] for s in sides["after"]]
        print(f"{n:{width}}  {statistics.median(b):8.1f} ({min(b):7.1f})    {statistics.median(a):8.1f} ({min(a):7.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
