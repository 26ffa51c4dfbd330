"""The op coverage table of docs/torch.md, generated from the op table, and the fuser's graph-op table of
docs/fusion.md, generated from ``fuser/graph_ops.py`` (``python -m dvmlang.torch.coverage`` prints both;
tests/test_torch_compile.py and tests/test_fuser_graph_ops.py check the docs have every row)."""

from __future__ import annotations

from ..fuser.graph_ops import table_rows
from .table import BY_NAME, LOWERINGS
from .partition import op_name


def _name(overload) -> str:
    class _N:  # op_name reads a node's target
        target = overload
    return op_name(_N)


def coverage_rows() -> list[str]:
    """One markdown row per aten overload packet: the overloads dvmlang lowers."""
    by_packet: dict[str, list[str]] = {}
    for ov in LOWERINGS:
        if not hasattr(ov, "_schema"):
            continue
        name = _name(ov)
        packet, _, over = name.partition(".")
        by_packet.setdefault(packet, []).append(over)
    for name in BY_NAME:  # ops of other libraries, lowered by qualified name
        by_packet.setdefault(name, []).append("default")
    return [f"| `{p}` | {', '.join(sorted(v))} |" for p, v in sorted(by_packet.items())]


def table() -> str:
    return "\n".join(["| aten op | overloads lowered |", "|---|---|", *coverage_rows()])


def graph_op_table() -> str:
    """docs/fusion.md's table of the fuser's structural graph ops (fuser/graph_ops.py)."""
    return "\n".join(table_rows())


if __name__ == "__main__":
    print(table())
    print()
    print(graph_op_table())
