"""Tensor graphs with symbolic dimensions: what ``@dvmlang.graph`` captures and the fuser works on.

Every input dimension is a symbol (``s0``, ``s1``, ...) unless it is 1 or declared static. Operations that
need two dimensions to be equal (elementwise operands, matmul inner dimensions) *deduce* it: the two
symbols are unified, and each call checks the deduced equalities before anything runs. Shapes are tuples
of ``Dim`` (an int, or a symbol class resolved through the graph's union-find).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import dtypes as dt
from .. import opdefs
from ..errors import _PACKAGE_DIR, DvmError, user_loc
from . import dims
from .backend import Backend
from .operators import TensorOperators


class GraphError(DvmError, ValueError):
    """A tensor program is malformed: shapes that cannot match, an unknown operation, a bad argument."""


class Sym:
    """A symbolic dimension: the size of some input dimension, known only per call, or a size derived from
    others with ``+ - * // %`` (``x.shape[1] // 2``; ``expr`` says how, see ``dims``). Arithmetic on symbols
    (with ints or other symbols of the same graph) gives dims that ``reshape``, slicing and every shape
    argument accept; each call computes them from the arguments' sizes."""

    __slots__ = ("id", "name", "origin", "table", "expr")

    def __init__(self, id: int, name: str, origin: str, table=None, expr=None):
        self.id = id
        self.name = name
        self.origin = origin  # e.g. "x.shape[0]"
        self.table = table
        self.expr = expr  # None for an input dimension

    def __repr__(self) -> str:
        return self.name

    def _arith(self, op, a, b):
        for v in (a, b):
            if not isinstance(v, (int, Sym)) or isinstance(v, bool):
                return NotImplemented
            if isinstance(v, Sym) and v.table is not self.table:
                raise GraphError("dims of two different graphs cannot be combined")
        return dims.arith(self.table, op, a, b)

    def __add__(self, o):
        return self._arith("+", self, o)

    def __radd__(self, o):
        return self._arith("+", o, self)

    def __sub__(self, o):
        return self._arith("-", self, o)

    def __rsub__(self, o):
        return self._arith("-", o, self)

    def __mul__(self, o):
        return self._arith("*", self, o)

    def __rmul__(self, o):
        return self._arith("*", o, self)

    def __floordiv__(self, o):
        return self._arith("//", self, o)

    def __rfloordiv__(self, o):
        return self._arith("//", o, self)

    def __mod__(self, o):
        return self._arith("%", self, o)

    def __rmod__(self, o):
        return self._arith("%", o, self)

    def __neg__(self):
        return self._arith("-", 0, self)

    def __eq__(self, o):
        # a function comparing a size with a number while it is captured may choose its operations by it: the
        # generic capture (size-1 dims as symbols) cannot then serve a call with a dim of 1 (api._program)
        if o.__class__ is int and self.table is not None and \
                not sys._getframe(1).f_code.co_filename.startswith(_PACKAGE_DIR):
            self.table.compared = True
        return self is o

    def __ne__(self, o):
        return not self.__eq__(o)

    __hash__ = object.__hash__

    def __truediv__(self, o):
        raise GraphError(f"{self.name} / {o!r}: a dimension divides with // (an exact size), not / (a float)")

    def __index__(self):
        raise GraphError(f"{self.name} ({self.origin}) is a symbolic size, known only per call: it cannot be used "
                         "as a Python int (in range(), as a list index, ...); pass it to dvmlang.ops (reshape, "
                         "slicing, full, arange) or declare the dim static (dvmlang.graph(fn, static={...}))")


Dim = int | Sym


class ValueNeeded(GraphError):
    """A capture used a runtime float argument (``ScalarArg``) as a Python number."""


def _needs_value(name: str):
    def op(self, *other):
        if name in _REFLECTED and other and isinstance(other[0], TensorOperators):
            return NotImplemented  # (the tensor's reflected operator makes it a runtime scalar of the kernels)
        raise ValueNeeded(f"argument `{self.name}` is a float known per call while the function is captured; "
                          f"`{name}` needs its value (the capture is made again with the call's floats as "
                          "constants of the capture)")
    op.__name__ = name
    return op


_REFLECTED = frozenset(("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                        "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
                        "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__rand__",
                        "__or__", "__ror__", "__matmul__", "__rmatmul__"))


class ScalarArg:
    """A ``float`` argument of a ``@dvmlang.graph`` function while it is captured: a number known only per call.
    ``dvmlang.ops`` take it wherever they take a number, and it becomes what any number there becomes, a constant
    node (``const``, the number's dtype by the same rules): a runtime scalar parameter of the kernels, bound to
    this argument at every call (``Graph.scalar_args``), so another value is neither a capture nor a build. Using
    it as a Python number (arithmetic with other numbers, comparisons, ``float()``, ``math``) needs the value:
    it raises ``ValueNeeded``, and the function is captured again with its floats as constants of the capture
    (keyed by value, as ints are)."""

    __slots__ = ("name", "value", "pos")

    def __init__(self, name: str, value: float, pos: int):
        self.name, self.value, self.pos = name, value, pos

    def __repr__(self) -> str:
        return f"<float argument {self.name}, known per call>"

    __hash__ = object.__hash__


for _name in (*_REFLECTED, "__neg__", "__pos__", "__abs__", "__bool__", "__float__", "__int__", "__index__",
              "__round__", "__trunc__", "__floor__", "__ceil__", "__complex__", "__divmod__", "__rdivmod__"):
    setattr(ScalarArg, _name, _needs_value(_name))
del _name


class Deduction(NamedTuple):
    """An equality deduced while capturing: symbol ``sym`` equals ``other`` (a symbol or a number) because of
    ``why``."""

    sym: Sym
    other: Dim
    why: str


class SymTable:
    """Union-find over symbols, plus the equalities deduced while capturing (each a guard at call time)."""

    def __init__(self, graph_name: str = ""):
        self.syms: list[Sym] = []
        self.parent: dict[int, int] = {}
        self.deductions: list[Deduction] = []
        self.derived: dict = {}  # canonical expression -> its symbol (dims.dim_of)
        self.checks: list = []  # (polynomial, polynomial, message): sizes that must be equal at every call
        self.graph_name = graph_name
        self.compared = False  # user code compared a symbol with a number while capturing (Sym.__eq__)

    def new(self, origin: str, expr=None, name: str | None = None) -> Sym:
        s = Sym(len(self.syms), name or f"s{len(self.syms)}", origin, self, expr)
        self.syms.append(s)
        self.parent[s.id] = s.id
        return s

    def find(self, d: Dim) -> Dim:
        if isinstance(d, int):
            return d
        i = d.id
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return self.syms[i]

    def equal(self, a: Dim, b: Dim) -> bool | None:
        """True when proven equal, False when proven different, None when unknown."""
        a, b = self.find(a), self.find(b)
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if a is b:
            return True
        if (getattr(a, "expr", None) is not None or getattr(b, "expr", None) is not None):
            pa, pb = dims.poly(self, a), dims.poly(self, b)
            if pa == pb:
                return True
            if not pa or not pb or list(pa) == [()] or list(pb) == [()]:
                return None
        return None

    def unify(self, a: Dim, b: Dim, why: str) -> Dim:
        """Record that ``a`` and ``b`` must be equal (checked at every call)."""
        a, b = self.find(a), self.find(b)
        if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
            return a
        if isinstance(a, int) and isinstance(b, int):
            raise GraphError(f"{why}: dimensions {a} and {b} differ")
        if isinstance(a, int) or (not isinstance(b, int) and a.expr is not None and b.expr is None):
            a, b = b, a  # the root of a class is an input symbol where there is one (derived ones refer to them)
        # a is a symbol; b is a symbol or an int
        self.deductions.append(Deduction(a, b, why))
        if isinstance(b, int):
            return a  # a guard checks a == b at call time; the symbol stays
        self.parent[b.id] = a.id
        return a

    def fail(self, message: str):
        """Raise the GraphError of a shape computation (``dims`` raises through here)."""
        raise GraphError(message)

    def text(self, d: Dim) -> str:
        d = self.find(d)
        return str(d)


@dataclass(eq=False)
class Node:
    """One tensor operation. ``shape`` holds Dims; ``attrs`` the static parameters."""

    op: str
    inputs: list["Node"]
    shape: tuple
    dtype: dt.DType
    attrs: dict = field(default_factory=dict)
    name: str = ""
    id: int = 0
    loc: object = None  # the user's call site (errors.SourceLoc) that made it: fused kernels map instructions here

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"%{self.id}={self.op}"


COMPARISONS = tuple(opdefs.COMPARE)


class Graph(Backend):
    """A captured tensor program: inputs, nodes in topological order, outputs. As a backend it builds the nodes
    of ``dvmlang.ops`` calls on its values while a ``@dvmlang.graph`` function is captured."""

    captures = True

    def __init__(self, name: str):
        self.name = name
        self.syms = SymTable(name)
        self.nodes: list[Node] = []
        self.inputs: list[Node] = []
        self.outputs: list[Node] = []
        self.output_tuple = False
        self.closures: dict = {}  # input node -> the numpy array the function closes over
        self.scalar_args: list = []  # (const node, argument position): numbers bound to a float argument per call

    def closure(self, arr) -> "GraphValue":
        """The graph input for a numpy array met while capturing (a weight closed over from the enclosing scope):
        static sizes, read by reference at every call."""
        for node, a in self.closures.items():
            if a is arr:
                return GraphValue(node, self)
        d = dt.from_numpy(arr.dtype)
        if d is None:
            raise GraphError(f"a closed-over array has dtype {arr.dtype}, which dvmlang does not support")
        name = f"<closed-over array #{len(self.closures)} {tuple(arr.shape)}>"
        n = self.add(Node("input", [], tuple(int(s) for s in arr.shape), d, {"name": name}, name))
        self.inputs.append(n)
        self.closures[n] = arr
        return GraphValue(n, self)

    def add(self, node: Node) -> Node:
        node.id = len(self.nodes)
        self.nodes.append(node)
        return node

    def node(self, kind, inputs, shape, dtype, attrs) -> "GraphValue":
        n = Node(kind, [i.node for i in inputs], tuple(shape), dtype, attrs)
        n.loc = self.loc if self.loc is not None else user_loc()
        return GraphValue(self.add(n), self)

    def value(self, x) -> "GraphValue | None":
        if isinstance(x, GraphValue):
            if x.graph is not self:
                raise GraphError("values from two different graphs cannot be combined")
            return x
        return None

    def prune(self) -> None:
        """Drop the operations no output depends on (a rewrite such as ``ops.cat``'s can leave some behind);
        inputs and user kernels stay. A constant bound to a float argument that is dropped is bound no more."""
        live = set()
        stack = [o for o in self.outputs] + [n for n in self.nodes if n.op in ("input", "custom")]
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(n.inputs)
        if len(live) != len(self.nodes):
            self.nodes = [n for n in self.nodes if id(n) in live]
            for i, n in enumerate(self.nodes):
                n.id = i
        if self.scalar_args:  # (a dropped node keeps its old id, which may now name another node)
            self.scalar_args = [(n, pos) for n, pos in self.scalar_args if id(n) in live]

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i.id].append(n)
        return out

    def shape_text(self, shape) -> str:
        return "(" + ", ".join(self.syms.text(d) for d in shape) + ")"

    def dump(self) -> str:
        lines = [f"graph {self.name}"]
        for n in self.nodes:
            args = ", ".join(f"%{i.id}" for i in n.inputs)
            attrs = "".join(f" {k}={v}" for k, v in n.attrs.items() if k not in ("kernel",))
            lines.append(f"  %{n.id} = {n.op}({args}){attrs} : {self.shape_text(n.shape)} {n.dtype.name}")
        lines.append("  return " + ", ".join(f"%{o.id}" for o in self.outputs))
        return "\n".join(lines)


class Tracer:
    """The capture in progress: ``Tracer.graph`` is the graph a ``@dvmlang.graph`` function is being captured into
    (an operation whose operands are all numbers builds there); one capture at a time."""

    graph: Graph | None = None


class GraphValue(TensorOperators):
    """A tensor inside ``@dvmlang.graph``: shape (with symbols) and dtype, no data."""

    __array_priority__ = 1000

    def __init__(self, node: Node, graph: Graph):
        self.node = node
        self.graph = graph

    @property
    def __dvm_backend__(self) -> Graph:
        return self.graph

    @property
    def shape(self):
        return tuple(self.graph.syms.find(d) for d in self.node.shape)

    @property
    def dtype(self) -> dt.DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return self.node.rank

    def __repr__(self) -> str:
        return f"<graph value {self.graph.shape_text(self.node.shape)} {self.dtype.name}>"

    def __getitem__(self, key):
        return self._ops.getitem(self, key)

    def __len__(self):
        d = self.graph.syms.find(self.node.shape[0]) if self.node.shape else None
        if not isinstance(d, int):
            raise GraphError("len() of a graph value needs a static first dim; use x.shape[0] (a dim)")
        return d

    def __iter__(self):
        n = len(self)
        return iter([self[i] for i in range(n)])

    def size(self, axis=None):
        return self.shape if axis is None else self.shape[axis]

    def __bool__(self):
        raise GraphError("a graph value has no truth value while the graph is captured; use ops.where for "
                         "data-dependent choices")
