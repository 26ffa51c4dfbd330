"""The DVM paper's evaluation on the simulated NPU: operators, subgraphs and models over a stream of requests
with dynamic lengths, against per-op eager, shape-generic bucketed kernels and TorchInductor's compile cost.

    python benchmarks/paper/run.py [--quick] [--out DIR] [--executor SPEC [--budget S] [--model-requests N]]

``--executor`` (``local[:N]``, ``ray://local[:N]``, ``ray://HOST:PORT``; dvmlang/tuning/executor.py) runs the
workloads as tasks side by side: one per operator/subgraph workload and one per (model, system), each bounded by
``--budget`` seconds (a task past it is stopped and reported, and the results leave it out); the model level then
runs the first ``--model-requests`` requests of the stream (default: all of them).

Writes into DIR (default ./paper-results): instances.csv (one row per workload, system and request),
summary.csv (per workload), levels.csv (per level: the headline figures), stream.csv (the request stream end to
end), sensitivity.csv (speedups against the launch overhead and the calibration knobs) and four PNG plots.
Device times are simulated (dvmlang's 910B2-like profile); compile and host times are measured on this host.
docs/evaluation.md explains every figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# a first call builds: what an earlier run left in the disk cache is not read (benchmarks/compile_cost.py measures
# the first call of a structure built before)
os.environ.setdefault("DVMLANG_CACHE_DIR", "off")

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "paper"

import numpy as np  # noqa: E402

import dvmlang  # noqa: E402

from . import common, ops, plots  # noqa: E402

QUICK_INDUCTOR = ("softmax",)  # the workloads whose Inductor compiles --quick measures (each takes seconds)
KNOBS = {  # calibration knobs of docs/device.md, each turned off alone
    "calibrated": {},
    "no program dispatch": {"program_dispatch_cycles": 0},
    "no L2 across launches": {"l2_across_launches": False},
    "nominal HBM (efficiency 1.0)": {"hbm_efficiency": 1.0},
    "alignment ignored": {"unaligned_efficiency": 1.0},
    "direct L0C -> UB": {"l0c_to_ub": True},
}


def summarise(rows: list[dict]) -> list[dict]:
    """Per workload: speedups over per-op eager (device time, one value per distinct length), the bucketed
    kernels' padding cost, and the compile figures of each system."""
    out = []
    for (level, name) in dict.fromkeys((r["level"], r["workload"]) for r in rows):
        rs = [r for r in rows if r["workload"] == name]
        dev = {}
        for r in rs:
            if r["device_us"] == r["device_us"]:
                dev.setdefault(r["system"], {})[r["length"]] = r["device_us"]
        lengths = sorted(set(dev.get("dvmlang", {})) & set(dev.get("per-op eager", {})))
        sp = [dev["per-op eager"][L] / dev["dvmlang"][L] for L in lengths]
        sb = [dev["per-op eager"][L] / dev["bucketed"][L] for L in lengths if L in dev.get("bucketed", {})]
        pad = [dev["bucketed"][L] / dev["dvmlang"][L] - 1 for L in lengths if L in dev.get("bucketed", {})]
        s = {"level": level, "workload": name, "lengths": len(lengths),
             "median_speedup": common.median(sp), "best_speedup": max(sp, default=float("nan")),
             "median_speedup_bucketed": common.median(sb), "median_padding_cost": common.median(pad)}
        for system in ("dvmlang", "inductor-static", "inductor-dynamic"):
            c = [r["compile_s"] for r in rs if r["system"] == system and r["compile_s"] == r["compile_s"]
                 and r["compile_s"] > 0]
            key = system.replace("-", "_")
            s[f"{key}_compile_median_s"] = common.median(c)
            s[f"{key}_compile_max_s"] = max(c, default=float("nan"))
        first = [r["compile_s"] for r in rs if r["system"] == "dvmlang" and r["request"] == 0]
        s["dvmlang_first_call_s"] = first[0] if first else float("nan")
        later = [r["compile_s"] for r in rs if r["system"] == "dvmlang" and r["request"] > 0 and r["compile_s"] > 0]
        s["dvmlang_encode_median_s"] = common.median(later)  # a new shape after the first call: encode only
        s["dvmlang_encode_max_s"] = max(later, default=float("nan"))
        out.append(s)
    return out


def levels(summary: list[dict]) -> list[dict]:
    out = []
    for level in dict.fromkeys(s["level"] for s in summary):
        ss = [s for s in summary if s["level"] == level]
        out.append({"level": level, "workloads": len(ss),
                    "best_speedup": max(s["best_speedup"] for s in ss),
                    "median_speedup": common.median([s["median_speedup"] for s in ss]),
                    "max_compile_ratio_static": _ratio(ss, "inductor_static", "dvmlang_compile_max_s"),
                    "max_compile_ratio_dynamic": _ratio(ss, "inductor_dynamic", "dvmlang_compile_max_s"),
                    "max_compile_ratio_static_vs_encode": _ratio(ss, "inductor_static", "dvmlang_encode_max_s"),
                    "max_compile_ratio_dynamic_vs_encode": _ratio(ss, "inductor_dynamic", "dvmlang_encode_max_s")})
    return out


def _ratio(ss, key, dv_key) -> float:
    """Inductor's maximum compile time over dvmlang's maximum, ``dv_key``: every call that compiled something
    (the first call's build included, ``dvmlang_compile_max_s``) or the new shapes after it (encode only,
    ``dvmlang_encode_max_s``)."""
    ind = max((s[f"{key}_compile_max_s"] for s in ss if s[f"{key}_compile_max_s"] == s[f"{key}_compile_max_s"]),
              default=float("nan"))
    dv = max((s[dv_key] for s in ss if s[dv_key] == s[dv_key]), default=float("nan"))
    return ind / dv if dv == dv and dv > 0 else float("nan")


def stream_table(rows: list[dict], n: int) -> tuple[list[dict], dict]:
    """The request stream end to end for one level, its workloads served in turn for each request: each call's
    host time (``host_s``: dvmlang's build, encode or replay; per-op eager's torch dispatch; the bucketed
    kernels' replay; where it was measured) or, where there is none, its compile stall, plus device time.
    Inductor's kernels are taken to be as fast as dvmlang's fused ones on this device and are charged their
    compile stalls alone (their per-call host time is not: that favours them). A new length whose compile was not measured (marked as estimated in the CSV)
    costs what the measured new lengths cost: for static, the median of all of them (each recompiles); for
    dynamic, the median of those after the workload's first compile (the symbolic graph is compiled once,
    later lengths recompile only when a guard fails)."""
    systems = ("dvmlang", "per-op eager", "bucketed", "inductor-static", "inductor-dynamic")
    fused = {(r["workload"], r["request"]): r["device_us"] for r in rows if r["system"] == "dvmlang"}
    med = {}
    for r in sorted(rows, key=lambda r: r["request"]):
        c = r["compile_s"]
        if r["system"].startswith("inductor") and c == c and c > 0:  # 0: a repeated length
            med.setdefault((r["workload"], r["system"]), []).append(c)
    med = {k: _unmeasured(k[1], v) for k, v in med.items()}
    per = {s: np.zeros(n) for s in systems}
    estimated = np.zeros(n, bool)
    for r in rows:
        s, i = r["system"], r["request"]
        if s not in per or i >= n:
            continue
        c = r["compile_s"]
        if s.startswith("inductor"):
            if c != c:
                c = med.get((r["workload"], s), 0.0)
                estimated[i] = True
            dev = fused.get((r["workload"], i), float("nan"))
        else:
            dev = r["device_us"]
            h = r.get("host_s", float("nan"))
            if r["level"] != "model" and h == h:  # (the model level's host_s includes the simulator's run)
                c = h
        per[s][i] += c + (dev * 1e-6 if dev == dev else 0.0)
    cum = {s: np.cumsum(v).tolist() for s, v in per.items() if v.any()}
    table = [{"request": i, **{s: cum[s][i] for s in cum}, "inductor_estimated": bool(estimated[i])}
             for i in range(n)]
    return table, cum


def _unmeasured(system: str, measured: list[float]) -> float:
    """The compile time counted for a new length Inductor was not measured at (``stream_table``), from the
    measured new lengths' compile times in arrival order."""
    later = measured if system == "inductor-static" else measured[1:]
    return common.median(later) if later else 0.0


def sensitivity(rows: list[dict], knob_rows: list[dict]) -> list[dict]:
    out = []
    for x in common.OVERHEADS_US:
        adj = []
        for r in rows:
            if r["device_us"] == r["device_us"]:
                r2 = dict(r)
                r2["device_us"] = common.with_overhead(r["device_us"], r["launches"], r["launch_overhead_us"], x)
                adj.append(r2)
        for lv in levels(summarise(adj)):
            out.append({"knob": f"launch overhead {x:g} us", "level": lv["level"], "launch_overhead_us": x,
                        "median_speedup": lv["median_speedup"], "best_speedup": lv["best_speedup"]})
    for knob in dict.fromkeys(r["knob"] for r in knob_rows):
        for lv in levels(summarise([r for r in knob_rows if r["knob"] == knob])):
            out.append({"knob": knob, "level": lv["level"], "launch_overhead_us": 3.0,
                        "median_speedup": lv["median_speedup"], "best_speedup": lv["best_speedup"]})
    return out


def knob_rows(lengths: list[int], names: list[str], log) -> list[dict]:
    """dvmlang and per-op eager at a few lengths with each calibration knob turned off alone."""
    out = []
    base = dvmlang.npu.get_profile(None)
    keep = ops.WORKLOADS
    try:
        ops.WORKLOADS = [w for w in keep if w.name in names]
        for knob, change in KNOBS.items():
            with dvmlang.npu.Device(base.with_(**change)):
                for r in ops.run(True, lengths, 0, log=lambda *a: None):
                    if r["system"] != "bucketed":
                        out.append({**r, "knob": knob})
            log(f"  knob {knob}: done")
    finally:
        ops.WORKLOADS = keep
    return out


def _task(item):
    """One task of ``run_tasks``: ("ops", quick, workload, stream) or ("model", quick, model, system, stream,
    requests): its rows."""
    import dataclasses
    kind, quick = item[0], item[1]
    log = lambda *a: None  # noqa: E731 - a task's progress lines would interleave
    if kind == "ops":
        name, reqs = item[2], item[3]
        keep = ops.WORKLOADS
        try:
            ops.WORKLOADS = [w for w in keep if w.name == name]
            return ops.run(quick, reqs, 1 if quick else 4, log=log,
                           inductor_workloads=QUICK_INDUCTOR if quick else None)
        finally:
            ops.WORKLOADS = keep
    from . import models
    name, system, reqs, n, budget = item[2], item[3], item[4], item[5], item[6]
    base = models.SETTINGS["quick" if quick else "full"]
    s = dataclasses.replace(base, requests=n, models=(name,))
    # a simulated system stops starting requests before the task's time bound, so its rows so far come back
    deadline = time.monotonic() + 0.9 * budget if budget else None
    return models.run(quick, reqs, log=log, settings=s, systems=(system,), deadline=deadline)


def run_tasks(args, reqs) -> list[dict]:
    """Every workload as a task on ``args.executor``: one per operator/subgraph workload, one per (model,
    system); a task that fails or passes ``args.budget`` is reported and left out."""
    from dvmlang.tuning.executor import get_executor
    items = [("ops", args.quick, w.name, reqs) for w in ops.WORKLOADS]
    if not args.no_models:
        try:
            from . import models
        except ImportError as e:
            print(f"model level left out: {e}")
        else:
            s = models.SETTINGS["quick" if args.quick else "full"]
            n = args.model_requests or (s.requests if args.quick else len(reqs))
            # the longest tasks first, so that the short ones fill the workers at the end
            items = [("model", args.quick, m, system, reqs, n, args.budget) for m in s.models
                     for system in models.SYSTEMS
                     if not (system.startswith("inductor") and s.inductor_models is not None
                             and m not in s.inductor_models)] + items
    executor = get_executor(args.executor)
    print(f"{len(items)} tasks on {executor.name} ({executor.workers} workers), each bounded by "
          f"{args.budget or 'no'} s")
    t0 = time.perf_counter()
    try:
        outs = executor.map(_task, items, timeout=args.budget, progress=True, label="paper tasks")
    finally:
        executor.close()
    rows = []
    for it, o in zip(items, outs):
        what = it[2] if it[0] == "ops" else f"{it[2]} / {it[3]} ({it[5]} requests)"
        if o.ok:
            rows += o.value
            got = len({r["request"] for r in o.value})
            print(f"  done   {what:48s} {o.seconds:7.1f} s, {len(o.value)} rows, {got} requests")
        else:
            print(f"  FAILED {what:48s} {o.error}")
    print(f"tasks: {sum(o.ok for o in outs)} of {len(items)} done in {time.perf_counter() - t0:.0f} s")
    # the model level's stream is the prefix of requests every simulated (model, system) task reached
    done = {}
    for r in rows:
        if r["level"] == "model" and r["system"] in ("dvmlang", "per-op eager"):
            done.setdefault((r["workload"], r["system"]), set()).add(r["request"])
    if done:
        reached = min(len(v) for v in done.values())
        print(f"model level: the first {reached} requests of the stream reached by every model and system "
              f"({', '.join(f'{w}/{s}: {len(v)}' for (w, s), v in sorted(done.items()))})")
        rows = [r for r in rows if r["level"] != "model" or r["request"] < reached]
    return rows


def _print_table(title, rows, cols):
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("level", "workload", "knob") else "right")
    for r in rows:
        t.add_row(*(_fmt(r.get(c)) for c in cols))
    Console(width=200).print(t)


def _fmt(v):
    if isinstance(v, float):
        return "nan" if v != v else (f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}")
    return str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short stream and fewer Inductor compiles (< 3 min)")
    ap.add_argument("--out", default="paper-results", help="the results folder")
    ap.add_argument("--no-models", action="store_true", help="leave out the model level (transformers)")
    ap.add_argument("--executor", default=None, help="run the workloads as tasks on this executor (local[:N], "
                                                     "ray://local[:N], ray://HOST:PORT)")
    ap.add_argument("--budget", type=float, default=None, help="seconds one task may take (with --executor)")
    ap.add_argument("--model-requests", type=int, default=None,
                    help="requests of the stream the model level runs (default: 12, or all with --executor)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    t0 = time.perf_counter()
    n = 4 if args.quick else 200
    reqs = common.stream(n)
    print(f"request stream: {n} requests, lengths {min(reqs)}..{max(reqs)}, median {int(np.median(reqs))}, "
          f"{len(set(reqs))} distinct (log-normal, median 64, sigma 1.2, clipped to 1..2048, seed {common.SEED})")
    if args.executor:
        rows = run_tasks(args, reqs)
    else:
        rows = ops.run(args.quick, reqs, 1 if args.quick else 4, log=print,
                       inductor_workloads=QUICK_INDUCTOR if args.quick else None)
    if not args.no_models and not args.executor:
        try:
            from . import models
        except ImportError as e:  # torch or transformers not installed
            print(f"model level left out: {e}")
        else:
            rows += models.run(args.quick, reqs if not args.quick else reqs[:4], log=print)
    common.write_csv(out / "instances.csv", rows, common.FIELDS)
    summary = summarise(rows)
    common.write_csv(out / "summary.csv", summary)
    lv = levels(summary)
    common.write_csv(out / "levels.csv", lv)
    tables, cums = [], {}
    for level in dict.fromkeys(r["level"] for r in rows):
        lrows = [r for r in rows if r["level"] == level]
        table, cums[level] = stream_table(lrows, 1 + max(r["request"] for r in lrows))
        tables += [{"level": level, **t} for t in table]
    common.write_csv(out / "stream.csv", tables, ["level", "request", "dvmlang", "per-op eager", "bucketed",
                                                  "inductor-static", "inductor-dynamic", "inductor_estimated"])
    shown = "model" if "model" in cums else "subgraph"
    kn = knob_rows([256] if args.quick else [16, 256, 2048],
                   ["softmax", "attention"] if args.quick else ["softmax", "layernorm", "swiglu mlp", "decoder block"],
                   print)
    sens = sensitivity(rows, kn)
    common.write_csv(out / "sensitivity.csv", sens)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plots left out: matplotlib is not installed (pip install -e '.[bench]')")
    else:
        plots.compile_times(rows, out / "compile_time.png")
        plots.speedups(summary, out / "speedup.png")
        plots.stream(cums[shown], out / "stream.png", shown)
        plots.sensitivity([s for s in sens if s["knob"].startswith("launch overhead")], out / "sensitivity.png")
    _print_table("Per workload (device time: simulated; compile: this host)", summary,
                 ["level", "workload", "lengths", "median_speedup", "best_speedup", "median_speedup_bucketed",
                  "median_padding_cost", "dvmlang_compile_median_s", "dvmlang_compile_max_s",
                  "inductor_static_compile_median_s", "inductor_static_compile_max_s",
                  "inductor_dynamic_compile_max_s"])
    _print_table("Per level", lv, ["level", "workloads", "best_speedup", "median_speedup",
                                   "max_compile_ratio_static", "max_compile_ratio_dynamic",
                                   "max_compile_ratio_static_vs_encode", "max_compile_ratio_dynamic_vs_encode"])
    _print_table("The stream end to end (seconds after the last request: host time + device time)",
                 [{"level": lvl, "system": s, "seconds": v[-1]} for lvl, c in cums.items() for s, v in c.items()],
                 ["level", "system", "seconds"])
    _print_table("Sensitivity", sens, ["knob", "level", "median_speedup", "best_speedup"])
    print(f"wrote {out}/ in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
