"""What the parts of the code generator share: the state of one build (shared by the generators of a kernel
and of everything it inlines), the internal signals that end a block early, the contexts of the enclosing
loops and of an inlined kernel's returns, and which values are only known at run time.
"""

from __future__ import annotations

import ast
import contextlib
from typing import NamedTuple

from ..ir.core import Block, Op
from .blockptr import tensor_descriptor
from .values import block_pointer, pointer, tensor, unwrap


class CellNamespace:
    """A closure's cell read as a namespace of its one name (``GlobalRead.namespace``): ``get`` gives what the cell
    holds now (``default`` once it is empty)."""

    __slots__ = ("cell",)

    def __init__(self, cell):
        self.cell = cell

    def get(self, name, default=None):
        try:
            return self.cell.cell_contents
        except ValueError:
            return default


class GlobalRead(NamedTuple):
    """A global the kernel read as a compile-time constant: the build is valid while it keeps its value."""

    namespace: dict
    name: str
    value: object


class BuildContext:
    """Per-build state shared by the code generators of a kernel and everything it inlines."""

    def __init__(self):
        self.dry_depth = 0
        self.unrolled = 0  # body copies dl.static_range has unrolled so far (dry runs not counted)
        self.unrolling: list[int] = []  # the iteration counts of the static_range loops being unrolled
        self.global_reads: dict[tuple, GlobalRead] = {}  # (id(namespace), name) -> what was read
        self.callees: dict[int, object] = {}  # id -> the KernelSource of every kernel inlined (calls, combines)
        self.warnings: list[tuple] = []  # (message, file, line) of the performance warnings the build raised
        self.static_prints: list[str] = []

    @contextlib.contextmanager
    def dry(self):
        self.dry_depth += 1
        try:
            yield
        finally:
            self.dry_depth -= 1


class BlockExit(Exception):
    """Internal: the rest of a block is unreachable (after ``break``, ``continue`` or ``return``)."""


class NeedScope(Exception):
    """Internal: an inlined kernel returns from inside runtime control flow, so its body needs a scope op."""


class LoopContext:
    """The loop a ``break`` or ``continue`` leaves: its op (None during a dry run) and carried names."""

    def __init__(self, op: Op | None, names: list[str], templates: list, kind: str):
        self.op = op
        self.names = names
        self.templates = templates  # per carried name: a value whose type every exit must give
        self.kind = kind
        self.exit_values: list[dict] = []  # dry run: {name: value} at each break/continue


class ReturnExit(NamedTuple):
    """One way out of an inlined kernel's body: the value it returns (None for none) from ``block``."""

    value: object
    block: Block


class ReturnContext:
    """The returns of an inlined kernel whose body became a scope op."""

    def __init__(self):
        self.exits: list[ReturnExit] = []


RUNTIME_VALUES = (tensor, pointer, block_pointer, tensor_descriptor)


def is_runtime_value(v) -> bool:
    """Whether ``v`` is known only at run time: a value, a pointer, a block pointer or a tensor descriptor
    (``values.is_runtime``, which the language uses, leaves descriptors out and does not unwrap)."""
    return isinstance(unwrap(v), RUNTIME_VALUES)


def assigned_names(stmts) -> list[str]:
    """Names a list of statements may (re)bind, in first-assignment order."""
    found: list[str] = []

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store) and node.id not in found:
                found.append(node.id)

        def visit_FunctionDef(self, node):
            pass

        visit_Lambda = visit_FunctionDef

    for s in stmts:
        V().visit(s)
    return found
