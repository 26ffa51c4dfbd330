"""A seeded sample of Triton's own unit tests passes at the measured rate (tests/triton_conformance.py runs them
all: see docs/triton.md). The floor sits a few points under the full run's 99.3% (the sample passes 99.1%), so
a change that breaks Triton programs fails here; raise it as conformance improves."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # Triton's tests build their inputs with torch

ROOT = Path(__file__).resolve().parent.parent
FLOOR = 0.96


def test_a_sample_of_tritons_unit_tests_passes(tmp_path):
    out = tmp_path / "conformance.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "triton_conformance.py"), "--files",
                           "test_core,test_standard", "--sample", "300", "--seed", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = json.loads(out.read_text())["counts"]
    passed = sum(c.get("passed", 0) for c in counts.values())
    failed = sum(c.get("failed", 0) for c in counts.values())
    assert passed + failed >= 200, counts  # the sample really ran (most of it is not skipped)
    assert passed / (passed + failed) >= FLOOR, proc.stdout[-3000:]
