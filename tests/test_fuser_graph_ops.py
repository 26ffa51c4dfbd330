"""The fuser's structural op table (dvmlang/fuser/graph_ops.py) against the code that uses it, and the graph ops
built on the ISA's VSORT (ops.sort_values) against numpy."""

import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops
from dvmlang.fuser import fusion, graph_ops
from dvmlang.fuser.fragments import FRAGMENTS


def test_every_computed_graph_op_has_a_fragment_and_fusion_reads_the_table():
    for name, op in graph_ops.GRAPH_OPS.items():
        if op.kind in graph_ops.COMPUTED_KINDS:
            assert name in FRAGMENTS, f"graph op {name} ({op.kind}) has no fragment row"
            assert FRAGMENTS[name].kind == op.kind or op.kind == "free" or FRAGMENTS[name].kind == op.kind
    assert fusion.FREE == graph_ops.FREE and fusion.VIEWS == graph_ops.VIEWS
    assert set(fusion.MEMORY_READS) == graph_ops.MEMORY_READ_OPS and graph_ops.ROW_OPS <= fusion.VECTOR
    extra = set(FRAGMENTS) - set(graph_ops.GRAPH_OPS) - set(dvmlang.opdefs.FUSIBLE)
    assert not extra, f"fragments without a row in graph_ops: {extra}"


def _torch_order(x, axis, descending):
    """numpy's sort puts NaN last: the largest value, as torch; descending is its reverse (NaN first)."""
    s = np.sort(x, axis)
    return np.flip(s, axis) if descending else s


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n", [1, 7, 33, 300])
def test_sort_values_fused_with_its_neighbours(descending, n):
    @dvmlang.graph
    def f(x):
        return ops.sort_values(x * 2, -1, descending) + 1

    rng = np.random.default_rng(n)
    x = rng.standard_normal((5, n)).astype(np.float32)
    if n > 3:
        x[1, 2] = np.nan
        x[3, 0] = x[3, 1]
    got = f(x)
    want = _torch_order(x * 2, -1, descending) + 1
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_sort_values_of_ints_along_another_axis_and_a_new_length():
    @dvmlang.graph
    def f(x):
        return ops.sort_values(x, 0, descending=True)

    rng = np.random.default_rng(0)
    for rows in (6, 11):  # a symbolic length: the row-mode guard binds per call, no rebuild needed
        x = rng.integers(-50, 50, (rows, 4)).astype(np.int32)
        np.testing.assert_array_equal(f(x), -np.sort(-x, 0))


def test_docs_fusion_md_has_the_generated_graph_op_table():
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "fusion.md").read_text()
    for row in graph_ops.table_rows():
        assert row in text, f"docs/fusion.md misses {row!r}: run python -m dvmlang.torch.coverage"
