"""The layout rules of docs/architecture.md, checked: no import cycles, imports flow one way between the rooms,
torch stays optional, and no module grows past the size the doc allows."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "dvmlang"
MAX_LINES = 700


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every dvmlang module ``name`` imports, at module level or inside a function."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from . import x` names a submodule when x is one
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == []


# room -> rooms it must never import (data flows one way: frontend -> ir -> vm -> npu -> trace)
FORBIDDEN = {
    "dvmlang.opdefs": ("dvmlang.",),
    "dvmlang.special": ("dvmlang.",),
    "dvmlang.dtypes": ("dvmlang.",),
    "dvmlang.ir": ("dvmlang.frontend", "dvmlang.vm", "dvmlang.npu", "dvmlang.fuser", "dvmlang.runtime",
                   "dvmlang.language", "dvmlang.trace"),
    "dvmlang.vm": ("dvmlang.frontend", "dvmlang.npu", "dvmlang.fuser", "dvmlang.runtime", "dvmlang.language",
                   "dvmlang.trace"),
    "dvmlang.npu": ("dvmlang.frontend", "dvmlang.fuser", "dvmlang.runtime", "dvmlang.language", "dvmlang.ir",
                    "dvmlang.vm.lower"),
    "dvmlang.frontend": ("dvmlang.runtime", "dvmlang.fuser", "dvmlang.npu", "dvmlang.vm", "dvmlang.trace"),
    "dvmlang.trace": ("dvmlang.frontend", "dvmlang.fuser", "dvmlang.runtime", "dvmlang.vm.lower"),
    "dvmlang.torch": ("dvmlang.frontend", "dvmlang.ir", "dvmlang.vm", "dvmlang.language", "dvmlang.triton"),
}
ALLOWED_BASE = {"dvmlang.opdefs": ("dvmlang.special",), "dvmlang.dtypes": ("dvmlang.errors",)}
# documentation generators sit above their room: npu/docgen traces a real kernel for docs/device.md
TOOLS = ("dvmlang.npu.docgen", "dvmlang.vm.docgen")


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_imports_flow_one_way(room):
    bad = []
    for name, deps in GRAPH.items():
        if name != room and not name.startswith(room + ".") or name in TOOLS:
            continue
        for d in deps:
            if d in ALLOWED_BASE.get(room, ()):
                continue
            if any(d == f or d.startswith(f if f.endswith(".") else f + ".") or d == f.rstrip(".")
                   for f in FORBIDDEN[room]):
                bad.append(f"{name} imports {d}")
    assert bad == []


def test_core_modules_do_not_import_torch():
    for name, path in MODULES.items():
        if name.startswith("dvmlang.torch"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] in ("torch", "transformers") for a in node.names), name
            elif isinstance(node, ast.ImportFrom) and not node.level:
                assert (node.module or "").split(".")[0] not in ("torch", "transformers"), name


def test_modules_stay_small():
    big = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"
