"""benchmarks/paper/run.py --quick: the paper evaluation's whole pipeline, as a user runs it, writes every CSV file
and plot, with a row for every level, workload and system (numbers are checked for sense, not for speed)."""

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")  # the `bench` extra, which the README's test command installs
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
CSVS = ["instances", "summary", "levels", "stream", "sensitivity"]
PLOTS = ["compile_time", "speedup", "stream", "sensitivity"]
OPERATORS = {"softmax", "layernorm", "rmsnorm", "gelu", "add/mul/cast chain", "reduction (row sum)", "matmul",
             "matmul + bias + gelu", "transpose", "rotary embedding"}
SUBGRAPHS = {"attention", "swiglu mlp", "decoder block"}


def _read(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(v: str) -> float:
    return float(v) if v not in ("", "nan") else math.nan


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache")}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "paper" / "run.py"), "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out, p.stdout


def test_every_csv_and_plot_is_written(results):
    out, stdout = results
    for name in CSVS:
        rows = _read(out / f"{name}.csv")
        assert rows, name
    for name in PLOTS:
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name  # a real image, not an empty figure
    assert f"wrote {out}/" in stdout and "Per level" in stdout


def test_instances_cover_every_workload_and_system(results):
    out, _ = results
    rows = _read(out / "instances.csv")
    seen = {(r["level"], r["workload"]) for r in rows}
    assert {w for lv, w in seen if lv == "operator"} == OPERATORS
    assert {w for lv, w in seen if lv == "subgraph"} == SUBGRAPHS
    assert {w for lv, w in seen if lv == "model"} == {"bert"}  # --quick: one model, one request
    for level, workload in seen:
        systems = {r["system"] for r in rows if r["workload"] == workload}
        assert {"dvmlang", "per-op eager"} <= systems, workload
        if level != "model":
            assert "bucketed" in systems, workload
    for r in rows:
        if r["system"] in ("dvmlang", "per-op eager", "bucketed"):  # simulated: every row ran on the device
            assert _num(r["device_us"]) > 0 and int(r["launches"]) >= 1 and int(r["gm_bytes"]) > 0, r
        if r["system"] == "dvmlang" and r["level"] != "model":
            assert int(r["launches"]) == 1, r  # one fused, specialised launch per instance
    # Inductor's compiles are measured (softmax and the model in --quick), each a real compile of seconds
    ind = [r for r in rows if r["system"].startswith("inductor")]
    assert {(r["workload"], r["system"]) for r in ind} >= {("softmax", "inductor-static"),
                                                         ("softmax", "inductor-dynamic"),
                                                         ("bert", "inductor-static"), ("bert", "inductor-dynamic")}
    assert all(_num(r["compile_s"]) > 0.1 for r in ind if r["request"] == "0")
    model = {r["system"]: r for r in rows if r["level"] == "model" and r["request"] == "0"}
    assert int(model["dvmlang"]["launches"]) == 1 and int(model["per-op eager"]["launches"]) > 10


def test_summary_levels_stream_and_sensitivity_agree_with_the_instances(results):
    out, _ = results
    rows = _read(out / "instances.csv")
    summary = {r["workload"]: r for r in _read(out / "summary.csv")}
    assert set(summary) == OPERATORS | SUBGRAPHS | {"bert"}
    # a speedup is per-op eager's device time over dvmlang's, at the same length
    sm = [r for r in rows if r["workload"] == "softmax"]
    dev = {(r["system"], r["length"]): _num(r["device_us"]) for r in sm}
    sp = [dev[("per-op eager", L)] / dev[("dvmlang", L)] for s, L in dev if s == "dvmlang"]
    assert _num(summary["softmax"]["best_speedup"]) == pytest.approx(max(sp), rel=1e-4)
    levels = {r["level"]: r for r in _read(out / "levels.csv")}
    assert set(levels) == {"operator", "subgraph", "model"}
    for lv in levels.values():
        assert _num(lv["best_speedup"]) >= _num(lv["median_speedup"]) > 0
    assert _num(levels["operator"]["max_compile_ratio_static_vs_encode"]) > 1  # Inductor compiles, dvmlang encodes
    stream = _read(out / "stream.csv")
    for level in ("operator", "subgraph", "model"):
        series = [_num(r["dvmlang"]) for r in stream if r["level"] == level]
        assert series and all(b >= a for a, b in zip(series, series[1:])), level  # cumulative time
    sens = _read(out / "sensitivity.csv")
    knobs = {r["knob"] for r in sens}
    assert {f"launch overhead {u} us" for u in (0, 1, 3, 5)} <= knobs
    assert {"calibrated", "no program dispatch", "no L2 across launches", "nominal HBM (efficiency 1.0)",
            "alignment ignored", "direct L0C -> UB"} <= knobs
    by = {(r["knob"], r["level"]): _num(r["median_speedup"]) for r in sens}
    # fusion saves launches, so its advantage grows with what a launch costs
    assert by[("launch overhead 0 us", "operator")] < by[("launch overhead 5 us", "operator")]


def test_an_unmeasured_inductor_length_costs_what_the_measured_new_lengths_cost():
    """The stream's estimate for a new length whose compile was not measured: a static compile costs the median of
    the measured ones; a dynamic one the median of those after the first compile of the symbolic graph."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from paper import run

    assert run._unmeasured("inductor-static", [10.0, 2.0, 3.0]) == 3.0
    assert run._unmeasured("inductor-dynamic", [10.0, 0.01, 0.03]) == 0.02
    assert run._unmeasured("inductor-dynamic", [10.0]) == 0.0  # one compile, and no later length recompiled


def test_the_stream_charges_each_call_its_host_time():
    """Operator and subgraph calls are charged their measured host time (dvmlang's build, encode or replay;
    per-op eager's dispatch) where there is one, else their compile stall, plus device time; Inductor its
    compile stalls alone; the model level its compile stalls (its host_s includes the simulator's run)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from paper import run
    from paper.common import row

    rows = [row("operator", "w", "dvmlang", 0, 8, compile_s=0.5, device_us=10.0, host_s=0.5),
            row("operator", "w", "dvmlang", 1, 8, compile_s=0.0, device_us=10.0, host_s=2e-5),
            row("operator", "w", "per-op eager", 0, 8, device_us=40.0, host_s=1e-5),
            row("operator", "w", "per-op eager", 1, 8, device_us=40.0, host_s=1e-5),
            row("operator", "w", "inductor-static", 0, 8, compile_s=3.0),
            row("operator", "w", "inductor-static", 1, 8, compile_s=0.0)]
    table, cum = run.stream_table(rows, 2)
    assert cum["dvmlang"] == pytest.approx([0.5 + 10e-6, 0.5 + 10e-6 + 2e-5 + 10e-6])
    assert cum["per-op eager"] == pytest.approx([1e-5 + 40e-6, 2 * (1e-5 + 40e-6)])
    assert cum["inductor-static"] == pytest.approx([3.0 + 10e-6, 3.0 + 20e-6])  # dvmlang's device time
    model = [dict(r, level="model", host_s=7.0) for r in rows[:2]]
    _, cum = run.stream_table(model, 2)
    assert cum["dvmlang"] == pytest.approx([0.5 + 10e-6, 0.5 + 20e-6])
