"""Tracing records every executed virtual instruction and prints with rich."""

import io

import numpy as np
from rich.console import Console

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def scale(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    dl.store(out_ptr + offs, x * 2.0, mask=offs < n)


def test_trace_true_records_every_instruction():
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    launch = scale[(4,)](x, out, 100, BLOCK=32, trace=True)
    tr = launch.trace
    assert tr is not None
    per_program = len(scale.encode((4,), x, out, 100, BLOCK=32).decoded[0])
    assert len(tr) == 4 * per_program  # straight-line code: every instruction once per program
    assert set(tr.pid.tolist()) == {0, 1, 2, 3}
    rows = list(tr.rows())
    assert {r["opcode"] for r in rows} >= {"DMA_LOAD1", "VMULS", "DMA_STORE1", "END"}
    assert all(r["dur"] >= 0 for r in rows)
    lines = {r["line"] for r in rows if r["opcode"] == "DMA_LOAD1"}
    assert lines == {15}


def test_trace_context_collects_launches_and_prints():
    x = np.arange(10, dtype=np.float32)
    out = np.zeros_like(x)
    with dvmlang.trace() as t:
        scale[(1,)](x, out, 10, BLOCK=16)
        scale[(1,)](x, out, 10, BLOCK=16)
    assert len(t.launches) == 2 and all(launch.trace is not None for launch in t.launches)
    buf = io.StringIO()
    t.print(view="all", console=Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    assert "cycles" in text and "DMA_LOAD1" in text and "x = dl.load(x_ptr + offs, mask=offs < n)" in text
    assert "bound by" in text
