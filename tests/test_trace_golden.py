"""Golden tests: every view rendered by a recording console at a fixed width without colour, compared with
the files in tests/golden/.

When a change to the compiler or the cycle model moves the numbers on purpose, regenerate them with

    DVMLANG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_trace_golden.py

and review the diff like any other change.
"""

import io
import os
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import dvmlang
import dvmlang.language as dl
import dvmlang.npu
from dvmlang.trace.views import render

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("DVMLANG_UPDATE_GOLDEN") == "1"


@dvmlang.kernel
def softmax(out_ptr, in_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    x = dl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - dl.max(x, axis=0)
    num = dl.exp(x)
    dl.store(out_ptr + row * n_cols + cols, num / dl.sum(num, axis=0), mask=cols < n_cols)


@dvmlang.kernel
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) + dl.load(y_ptr + offs, mask=mask), mask=mask)


def _device():
    """Two vector cores, so six programs run in three waves and the timeline shows all of them."""
    return dvmlang.npu.Device(profile={"vector_cores": 2, "cube_cores": 1})


@pytest.fixture(scope="module")
def softmax_trace():
    x = np.random.default_rng(0).standard_normal((6, 200), dtype=np.float32)
    with dvmlang.trace() as t:
        softmax[(6,)](np.empty_like(x), x, 200, BLOCK=256, device=_device())
    return t


@pytest.fixture(scope="module")
def add_pair():
    n = 5000
    rng = np.random.default_rng(1)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    with dvmlang.trace() as t:
        for block in (512, 1024):
            add[(dl.cdiv(n, block),)](x, y, np.empty_like(x), n, BLOCK=block, device=_device())
    return t


def render_text(launches, view: str, width: int = 100, **options) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True, force_terminal=False,
                      legacy_windows=False)
    render(launches, view, console=console, **options)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"missing golden file {path}; create it with DVMLANG_UPDATE_GOLDEN=1")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        import difflib
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), f"golden/{name}.txt",
                                            "rendered", n=1))
        pytest.fail(f"view differs from {path.name} (if intended: DVMLANG_UPDATE_GOLDEN=1 pytest "
                    f"tests/test_trace_golden.py)\n{diff}")


@pytest.mark.parametrize("view", ["summary", "source", "timeline", "disasm", "table"])
def test_softmax_views(softmax_trace, view):
    check_golden(f"softmax_{view}", render_text(softmax_trace.launches, view))


def test_timeline_of_one_core_and_a_cycle_range(softmax_trace):
    check_golden("softmax_timeline_core1_200-900",
                 render_text(softmax_trace.launches, "timeline", cores=[1], cycles=(200, 900)))


def test_table_at_80_columns_puts_source_on_its_own_rows(softmax_trace):
    check_golden("softmax_table_80", render_text(softmax_trace.launches, "table", width=80))


def test_disasm_at_80_columns_puts_operands_on_their_own_lines(softmax_trace):
    check_golden("softmax_disasm_80", render_text(softmax_trace.launches, "disasm", width=80))


def test_compare_block_512_with_1024(add_pair):
    check_golden("add_compare_512_1024",
                 render_text(add_pair.launches, "compare", labels=("BLOCK=512", "BLOCK=1024")))


def test_rendering_twice_gives_the_same_text(softmax_trace):
    assert render_text(softmax_trace.launches, "all") == render_text(softmax_trace.launches, "all")
