"""Tile IR: typed SSA values, operations with structured regions, and functions.

Values are scalars (held in scalar registers) or tiles (held in on-chip buffers) with a static shape
and an element dtype. Control flow is structured: ``for``, ``while`` and ``if`` carry their values
explicitly, and the exit operations ``break``, ``continue`` and ``return`` name the construct they
leave. Every operation carries the source location it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from ..dtypes import DType
from ..errors import SourceLoc


@dataclass(frozen=True, slots=True)
class ScalarType:
    dtype: DType

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True, slots=True)
class TileType:
    shape: tuple[int, ...]
    dtype: DType

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        return f"tile<{dims + 'x' if dims else ''}{self.dtype.name}>"


Type = ScalarType | TileType


class Value:
    """An SSA value: the result of an op or the argument of a block."""

    __slots__ = ("type", "op", "name", "id")
    _counter = 0

    def __init__(self, type: Type, op: "Op | None" = None, name: str = ""):
        self.type = type
        self.op = op
        self.name = name
        Value._counter += 1
        self.id = Value._counter

    @property
    def is_tile(self) -> bool:
        return isinstance(self.type, TileType)

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name or self.id}:{self.type}"


class Block:
    """A straight-line list of ops with block arguments (loop induction variable, carried values)."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, args: list[Value] | None = None):
        self.args = args or []
        self.ops: list[Op] = []
        self.parent: Op | None = None

    def append(self, op: "Op") -> "Op":
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> "Op | None":
        return self.ops[-1] if self.ops and self.ops[-1].kind in TERMINATORS else None


class Op:
    """An operation. ``kind`` names it; ``attrs`` holds static data (shapes, axis, op names)."""

    __slots__ = ("kind", "operands", "results", "attrs", "regions", "loc", "parent")

    def __init__(self, kind: str, operands: list[Value], result_types: list[Type], attrs: dict | None = None,
                 regions: list[Block] | None = None, loc: SourceLoc | None = None):
        self.kind = kind
        self.operands = list(operands)
        self.results = [Value(t, self) for t in result_types]
        self.attrs = attrs or {}
        self.regions = regions or []
        for r in self.regions:
            r.parent = self
        self.loc = loc
        self.parent: Block | None = None

    @property
    def result(self) -> Value:
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        """This op and every op nested in its regions, in pre-order."""
        yield self
        for r in self.regions:
            for op in r.ops:
                yield from op.walk()

    def __repr__(self) -> str:
        return f"<Op {self.kind} at {self.loc}>"


# Ops that end a block: ``yield`` passes values to the enclosing construct; the exits leave it early.
TERMINATORS = frozenset({"yield", "break", "continue", "return"})
EXITS = frozenset({"break", "continue", "return"})


def ends_in_exit(block: Block) -> bool:
    """Control never reaches the end of ``block``: it ends in an exit, or in an ``if`` whose branches both
    end in one (``if c: continue`` / ``else: continue``), after which nothing else is compiled."""
    if not block.ops:
        return False
    last = block.ops[-1]
    return last.kind in EXITS or (last.kind == "if" and all(ends_in_exit(r) for r in last.regions))


def defined_in(blocks) -> set[int]:
    """The ids of the values defined inside ``blocks`` (op results and block arguments, nested regions
    included): none of them is visible after the construct that owns the blocks."""
    ids: set[int] = set()
    for block in blocks:
        for top in block.ops:
            for op in top.walk():
                ids.update(v.id for v in op.results)
                for r in op.regions:
                    ids.update(a.id for a in r.args)
    return ids


@dataclass
class Param:
    """A kernel parameter as the device sees it: a tensor in global memory or a runtime scalar."""

    name: str
    kind: str  # "tensor" | "scalar"
    dtype: DType
    rank: int = 0
    value: Value | None = None  # for scalars: the block argument that holds it


@dataclass
class Function:
    """A kernel after the frontend: parameters, a body, and where it came from."""

    name: str
    params: list[Param]
    body: Block
    loc: SourceLoc | None = None
    source_file: str = ""
    source_lines: tuple[int, int] = (0, 0)  # first and last line of the kernel's source
    meta: dict = field(default_factory=dict)

    def walk(self) -> Iterator[Op]:
        for op in self.body.ops:
            yield from op.walk()

    @property
    def tensor_params(self) -> list[Param]:
        return [p for p in self.params if p.kind == "tensor"]

    @property
    def scalar_params(self) -> list[Param]:
        return [p for p in self.params if p.kind == "scalar"]


def uses(block: Block) -> dict[int, list[Op]]:
    """Map each value id to the ops that use it, over ``block`` and everything nested in it."""
    result: dict[int, list[Op]] = {}
    stack = [block]
    while stack:
        b = stack.pop()
        for op in b.ops:
            for v in op.operands:
                result.setdefault(v.id, []).append(op)
            stack.extend(op.regions)
    return result
