"""dvmlang.triton.profiler (proton): launches recorded with their simulated time under the scopes around them,
written as a .hatchet tree and read back by the viewer (tutorial 09's use)."""

import json

import numpy as np
import pytest

import dvmlang
import dvmlang.triton as triton
import dvmlang.triton.language as tl
import dvmlang.triton.profiler as proton
import dvmlang.triton.profiler.viewer as viewer


@triton.jit
def _add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_scopes_launches_and_the_viewer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(x)
    proton.start("prof", hook="triton")
    proton.deactivate()
    _add[(4,)](x, out, 1000, BLOCK=256)  # not recorded: the profile is paused
    proton.activate(0)
    with dvmlang.trace(summary_only=True) as t:
        with proton.scope("outer", {"flops16": 2000.0, "bytes": 8000}):
            a = _add[(4,)](x, out, 1000, BLOCK=256)
            b = _add[(4,)](x, out, 1000, BLOCK=256)
        with proton.scope("host"):
            pass
    proton.deactivate(0)
    path = proton.finalize()
    assert len(t.launches) == 2  # a trace around the profile still sees its launches
    tree = json.load(open(tmp_path / path))[0]
    outer = next(c for c in tree["children"] if c["frame"]["name"] == "outer")
    assert outer["metrics"]["count"] == 2 and outer["metrics"]["flops16"] == 2000.0
    kern = outer["children"][0]
    assert kern["frame"]["name"] == "_add"
    assert kern["metrics"]["time (ns)"] == pytest.approx((a.time_us + b.time_us) * 1e3)
    host = next(c for c in tree["children"] if c["frame"]["name"] == "host")
    assert host["metrics"]["count"] == 0
    tree2, metrics = viewer.parse(["time/ms", "tflop16/s"], path)
    viewer.print_tree(tree2, metrics)
    text = capsys.readouterr().out
    assert "outer" in text and "_add" in text
    want = 2000.0 * 1e-12 / ((a.time_us + b.time_us) * 1e-6)
    assert f"{want:.3f}" in text
    with pytest.raises(dvmlang.DvmError, match="no metric"):
        viewer.parse(["warps/s"], path)


def test_only_the_tree_profile_exists():
    with pytest.raises(dvmlang.DvmError, match="tree"):
        proton.start("p", data="trace")
