"""The op coverage table of docs/torch.md, generated from the op table (``python -m dvmlang.torch.coverage``
prints it; tests/test_torch_compile.py checks the doc has every row)."""

from __future__ import annotations

from .table import LOWERINGS
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
    return [f"| `{p}` | {', '.join(sorted(v))} |" for p, v in sorted(by_packet.items())]


def table() -> str:
    return "\n".join(["| aten op | overloads lowered |", "|---|---|", *coverage_rows()])


if __name__ == "__main__":
    print(table())
