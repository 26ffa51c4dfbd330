"""benchmarks/paper/models.py: the model level's rows, on a tiny model (the simulated systems only; Inductor's
compile takes tens of seconds and is exercised by the paper run's quick mode)."""

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "paper"))

import models  # noqa: E402

KEYS = {"level", "workload", "system", "request", "length", "compile_s", "device_us", "host_s", "launches",
        "gm_bytes", "launch_overhead_us", "fallbacks", "note"}


def test_bert_rows_on_the_simulated_device():
    s = models.Settings(requests=3, layers=1, hidden=32, heads=4, vocab=64, inductor_compiles=1, models=("bert",))
    rows = models.run(True, [9, 13, 9, 40], log=lambda *a: None, settings=s, systems=("dvmlang", "per-op eager"))
    assert len(rows) == 6 and all(set(r) == KEYS for r in rows)
    by = {(r["system"], r["request"]): r for r in rows}
    for system in ("dvmlang", "per-op eager"):
        first, new, again = (by[(system, i)] for i in range(3))
        for r in (first, new, again):
            assert r["level"] == "model" and r["workload"] == "bert" and r["note"] == ""
            assert r["device_us"] > 0 and r["host_s"] > 0 and r["gm_bytes"] > 0 and r["launches"] >= 1
            assert r["launch_overhead_us"] > 0
        assert again["compile_s"] == 0.0 and first["compile_s"] > 0  # a repeated length compiles nothing
        assert not math.isnan(new["compile_s"])
    assert by[("dvmlang", 0)]["launches"] == 1  # the whole BERT: one fused region, one launch
    assert by[("per-op eager", 0)]["launches"] > 10  # one launch per aten op
    assert by[("per-op eager", 0)]["device_us"] > by[("dvmlang", 0)]["device_us"]


def test_unknown_model_and_system_are_clean_errors():
    with pytest.raises(ValueError, match="unknown model"):
        models.build("t5", models.SETTINGS["quick"])
    with pytest.raises(ValueError, match="unknown system"):
        models.run(True, [8], settings=models.SETTINGS["quick"], systems=("eager",))
