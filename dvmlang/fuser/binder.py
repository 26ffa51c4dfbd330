"""Binding a captured graph's symbols to one call's sizes: ``Binder`` resolves the symbol classes once, then a
call reads its arrays' sizes, computes the derived sizes, checks every deduced equality and size check, and
gets an ``Env`` (each symbol class's size), or a ``GraphError`` that names the argument and the deduction."""

from __future__ import annotations

from . import dims as _dims
from .graph import Graph, GraphError


class Env:
    """Concrete sizes of one call."""

    __slots__ = ("g", "values", "roots")

    def __init__(self, g: Graph, values: dict[int, int], roots: dict[int, int]):
        self.g = g
        self.values = values  # root symbol id -> size
        self.roots = roots  # symbol id -> root symbol id

    def value(self, d) -> int:
        if isinstance(d, int):
            return d
        return self.values[self.roots[d.id]]


class _Poly:
    """A polynomial (``dims``) as ``dims.evaluate`` takes a derived symbol."""

    __slots__ = ("expr", "name")

    def __init__(self, p):
        self.expr = ("poly", tuple(p.items()))
        self.name = ""


class Binder:
    """Binds a graph's symbols to the sizes of one call's arrays and checks the deduced equalities; the
    symbol classes are resolved once, so a call only reads sizes and compares."""

    def __init__(self, g: Graph):
        self.g = g
        syms = g.syms
        self.roots = {s.id: syms.find(s).id for s in syms.syms}
        self.inputs = []  # per input: (name, rank, [(axis, static size or None, symbol or None)])
        for n in g.inputs:
            self.inputs.append((n.attrs["name"], n.rank, [(axis, d if isinstance(d, int) else None,
                                                           None if isinstance(d, int) else d)
                                                          for axis, d in enumerate(n.shape)]))
        # equalities with numbers (symbol classes are equal by construction; a conflict shows while binding)
        self.derived = [s for s in syms.syms if s.expr is not None]
        self.numbers = [(self.roots[a.id], b, a, why) for a, b, why in syms.deductions if isinstance(b, int)]

    def _set(self, values: dict, sym, size: int, when: str) -> None:
        """Bind ``sym``'s class to ``size``, or check it against the size the class already has."""
        g, root = self.g, self.roots[sym.id]
        prev = values.get(root)
        if prev is None:
            values[root] = size
        elif prev != size:
            raise GraphError(f"`{g.name}`: {sym.origin} is {size}{when} but it must equal "
                             f"{g.syms.syms[root].origin} = {prev} (deduced while capturing: {_why(g, sym)})")

    def bind(self, arrays) -> Env:
        g = self.g
        roots = self.roots
        values: dict[int, int] = {}
        for (name, rank, dims), arr in zip(self.inputs, arrays):
            shape = arr.shape
            if len(shape) != rank:
                raise GraphError(f"argument `{name}` must have rank {rank}, got {len(shape)}")
            for axis, static, sym in dims:
                size = shape[axis]
                if sym is None:
                    if size != static:
                        raise GraphError(f"`{g.name}`: argument `{name}` has shape {shape}; dimension of size "
                                         f"{static} expected")
                    continue
                self._set(values, sym, size, "")
        for s in self.derived:  # sizes derived with shape arithmetic (x.shape[1] // 2), in creation order
            size = _dims.evaluate(g.syms, s, lambda a: values[roots[a]])
            if size < 0:
                raise GraphError(f"`{g.name}`: the size {s.name} ({s.origin}) is {size} at this call; sizes cannot "
                                 "be negative")
            self._set(values, s, size, " at this call")
        for kind, a, b, message in g.syms.checks:
            va = _dims.evaluate(g.syms, _Poly(a), lambda x: values[roots[x]])
            vb = _dims.evaluate(g.syms, _Poly(b), lambda x: values[roots[x]])
            if kind == "eq" and va != vb:
                raise GraphError(f"`{g.name}`: {message}: at this call {va} vs {vb} (a size that does not divide "
                                 "evenly?)")
            if kind == "le" and va > vb:
                raise GraphError(f"`{g.name}`: {message}: at this call {va} > {vb}")
        for root, number, sym, why in self.numbers:
            size = values.get(root)
            if size is not None and size != number:
                raise GraphError(f"`{g.name}`: {sym.origin} = {size} but {why} requires it to equal {number}")
        return Env(g, values, roots)


def _why(g: Graph, sym) -> str:
    """The deduction that tied ``sym`` to its class (the first one naming it)."""
    for a, b, why in g.syms.deductions:
        if a is sym or b is sym:
            return why
    return "equal sizes"
