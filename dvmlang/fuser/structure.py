"""Plans by structure: two captures of one program share one canonical graph and fusion plan.

A second ``@dvmlang.graph`` of the same function, a Dynamo recompile that lowers the same region again, a lazy
flush whose program left its cache: each captures a graph equal, node for node, to one planned before. Its
canonical rewrite and its plan are the same too (both are functions of the graph, the fuser's path and the
profile), so ``Program`` takes them from here instead of computing them again (DVM plans a fused operator
once per structure; issue 35's "structure built before").

The key is the whole captured graph before any rewrite: every node's operation, dtype, shape (symbols by
their number in the capture), operands, attributes, name and source line; the outputs; every symbol's name,
origin, expression and union-find root, the equalities deduced while capturing and the size checks. Anything
else a node or graph carries makes the graph unkeyed (planned as before). Objects that are not plain values
(a user kernel) are keyed by identity: the cached graph holds them, so the identity cannot be reused. A graph
that closes over arrays is not cached (its entry would keep the arrays alive).

Callers address a program's inputs and outputs by position (``program.graph.inputs``/``outputs``), never by
the node objects of the graph they captured: a program from here has the first capture's nodes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .. import dtypes as dt
from ..errors import SourceLoc
from .graph import Graph, Node, Sym

MAX_PLANS = 256
_PLANS: OrderedDict = OrderedDict()  # key -> (canonical graph, plan)
_LOCK = threading.Lock()
_GRAPH_FIELDS = frozenset({"name", "syms", "nodes", "inputs", "outputs", "output_tuple", "closures", "loc",
                           "flush_consts", "scalar_args"})
_NODE_FIELDS = frozenset({"op", "inputs", "shape", "dtype", "attrs", "name", "id", "loc"})
_PLAIN = (str, int, float, bool, type(None))


class _Unkeyed(Exception):
    pass


def _val(v):
    """``v`` as a hashable value that two equal captures share (``_Unkeyed`` for what cannot be keyed)."""
    c = v.__class__
    if c is float:
        return ("f", v.hex())  # (-0.0 and 0.0 differ; a nan equals itself)
    if c in _PLAIN:
        return (c.__name__, v)
    if c is Sym:
        return ("S", v.id)
    if c is tuple or c is list:
        return (c.__name__, tuple(_val(x) for x in v))
    if c is dict:
        return ("d", tuple((_val(k), _val(x)) for k, x in v.items()))
    if c is dt.DType:
        return ("t", v.code)
    if c is SourceLoc:
        return ("l", v.file, v.line, v.col, v.end_line, v.end_col, v.func)
    if c is Node:
        return ("n", v.id)
    if c.__module__ == "numpy" and c.__name__ != "ndarray":  # a numpy scalar
        return ("np", str(v.dtype), v.tobytes())
    try:
        hash(v)
    except TypeError:
        raise _Unkeyed from None
    return ("o", id(v))  # an object by identity (a user kernel): the cached graph keeps it alive


def key(g: Graph, *context) -> tuple | None:
    """The structural key of ``g`` (before any rewrite) with ``context`` (what else the plan depends on), or None
    when ``g`` cannot be keyed."""
    if g.closures or not _GRAPH_FIELDS.issuperset(vars(g)):
        return None
    syms = g.syms
    try:
        parts = [context, g.name, g.output_tuple, tuple(o.id for o in g.outputs), tuple(i.id for i in g.inputs),
                 tuple(n.id for n in getattr(g, "flush_consts", ())), tuple((n.id, p) for n, p in g.scalar_args),
                 syms.compared, syms.graph_name]
        for s in syms.syms:
            parts.append((s.name, s.origin, _val(s.expr), _val(syms.find(s))))
        for d in syms.deductions:
            parts.append((d.sym.id, _val(d.other), d.why))
        parts.append(_val(syms.checks))
        for i, n in enumerate(g.nodes):
            if n.id != i:
                return None
            fields = vars(n)
            extra = () if len(fields) == len(_NODE_FIELDS) else \
                tuple((k, _val(fields[k])) for k in sorted(fields.keys() - _NODE_FIELDS))
            loc = n.loc
            # (a shape's symbols by ~number; a source location as itself: a frozen record, equal by value)
            parts.append((n.op, n.dtype.code, tuple([d if d.__class__ is int else ~d.id if d.__class__ is Sym else _val(d) for d in n.shape]),
                          tuple([x.id for x in n.inputs]), _val(n.attrs) if n.attrs else (), n.name,
                          loc if loc is None or loc.__class__ is SourceLoc else _val(loc), extra))
    except _Unkeyed:
        return None
    return tuple(parts)


def get(k):
    """The (canonical graph, plan) planned for key ``k``, or None."""
    with _LOCK:
        hit = _PLANS.get(k)
        if hit is not None:
            _PLANS.move_to_end(k)
        return hit


def put(k, graph: Graph, plan) -> None:
    with _LOCK:
        _PLANS[k] = (graph, plan)
        while len(_PLANS) > MAX_PLANS:
            _PLANS.popitem(last=False)


def forget() -> None:
    """Drop every remembered plan (benchmarks measuring a first plan)."""
    with _LOCK:
        _PLANS.clear()
