"""Markdown tables of a paper run's CSV files, for docs/evaluation.md. The per-workload and per-level tables
are recomputed from instances.csv (run.summarise), so they follow the current definitions.

    python benchmarks/paper/report.py DIR
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(v: str, digits: int = 3) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v or ""
    if x != x:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_num(r.get(k, "")) for k, _ in cols) + " |")
    return "\n".join(out)


def instances(d: Path) -> list[dict]:
    """instances.csv with its numbers as numbers."""
    out = []
    for r in _rows(d / "instances.csv"):
        r = dict(r)
        for k in ("request", "length", "launches", "gm_bytes"):
            r[k] = int(float(r[k])) if r[k] not in ("", "nan") else 0
        for k in ("compile_s", "device_us", "host_s", "launch_overhead_us"):
            r[k] = float(r[k])
        out.append(r)
    return out


def report(d: Path) -> str:
    from .run import levels as level_table, stream_table, summarise
    rows = instances(d)
    parts = []
    summary = summarise(rows)
    levels = level_table(summary)
    parts += ["### Per level", "", table(levels, [
        ("level", "level"), ("workloads", "workloads"), ("best_speedup", "best speedup over per-op eager"),
        ("median_speedup", "median speedup"), ("max_compile_ratio_static", "max compile: Inductor static / dvmlang"),
        ("max_compile_ratio_dynamic", "max compile: Inductor dynamic / dvmlang"),
        ("max_compile_ratio_static_vs_encode", "Inductor static / dvmlang encode"),
        ("max_compile_ratio_dynamic_vs_encode", "Inductor dynamic / dvmlang encode")]), ""]
    parts += ["### Per workload", "", table(summary, [
        ("level", "level"), ("workload", "workload"), ("lengths", "lengths"),
        ("median_speedup", "median speedup"), ("best_speedup", "best"),
        ("median_speedup_bucketed", "bucketed: median speedup"), ("median_padding_cost", "bucketed: padding cost"),
        ("dvmlang_first_call_s", "dvmlang first call (build) s"),
        ("dvmlang_encode_median_s", "dvmlang new shape s (median)"), ("dvmlang_encode_max_s", "max"), ("inductor_static_compile_median_s", "Inductor static s (median)"),
        ("inductor_static_compile_max_s", "max"), ("inductor_dynamic_compile_max_s", "Inductor dynamic s (max)")]), ""]
    last = {}
    for level in dict.fromkeys(r["level"] for r in rows):  # recomputed, as the summary is
        lrows = [r for r in rows if r["level"] == level]
        table_rows, _ = stream_table(lrows, 1 + max(r["request"] for r in lrows))
        last[level] = {"level": level, **table_rows[-1]}
    systems = ["dvmlang", "per-op eager", "bucketed", "inductor-static", "inductor-dynamic"]
    parts += ["### The request stream end to end (seconds after the last request: host time + device time; Inductor "
              "and the model level: compile stalls + device time)", "",
              table(list(last.values()), [("level", "level")] + [(s, s) for s in systems]), ""]
    sens = _rows(d / "sensitivity.csv")
    parts += ["### Sensitivity", "", table(sens, [("knob", "knob"), ("level", "level"),
                                                  ("median_speedup", "median speedup"), ("best_speedup", "best")]), ""]
    return "\n".join(parts)


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        __package__ = "paper"
    print(report(Path(sys.argv[1] if len(sys.argv) > 1 else "paper-results")))
