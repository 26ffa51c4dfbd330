"""Shape arithmetic on symbolic dimensions: ``x.shape[1] // 2``, ``s0 * s1``, ``s1 - s1 // 2``.

A derived dimension is a polynomial with integer coefficients over *atoms*: input symbols, and the results of
``//`` and ``%`` that do not divide exactly (each an atom of its own, defined by its operands). Polynomials are
kept in a canonical form (monomial -> coefficient, atoms named by their union-find root), so ``(s - s // 2) +
s // 2`` is ``s`` again, ``(2 * s) // 2`` is ``s`` and ``s0 * s1`` is the same symbol however it was spelt. Each
distinct polynomial is one ``Sym`` of the graph's table (hash-consed): two spellings of one size are proven
equal. A call computes every derived symbol from the bound input sizes (``evaluate``), checks the deduced
equalities and size checks (a reshape that is only right when a size divides evenly), and raises
``GraphError`` on a mismatch instead of computing anything.
"""

from __future__ import annotations

Poly = dict  # monomial (sorted tuple of atom ids) -> int coefficient; {} is 0


def poly(table, d) -> Poly:
    """``d`` (an int or a Sym) as a canonical polynomial over the atoms' current roots."""
    d = table.find(d)
    if isinstance(d, int):
        return {(): d} if d else {}
    if d.expr is not None and d.expr[0] == "poly":
        out: Poly = {}
        for mono, c in d.expr[1]:
            term = {(): c}
            for a in mono:
                term = _mul(term, _atom_poly(table, a))
            out = _add(out, term)
        return out
    return {(d.id,): 1}


def _atom_poly(table, a: int) -> Poly:
    """An atom of a polynomial by its current root: a number or an input symbol; an atom whose class is rooted
    at a derived symbol stays itself (expanding it again could recurse)."""
    r = table.find(table.syms[a])
    if isinstance(r, int):
        return {(): r} if r else {}
    return {(r.id,): 1} if r.expr is None or r.expr[0] != "poly" else {(a,): 1}


def _accumulate(out: Poly, m: tuple, c: int) -> None:
    """``out[m] += c``, dropping the monomial when its coefficient becomes zero."""
    v = out.get(m, 0) + c
    if v:
        out[m] = v
    else:
        out.pop(m, None)


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        _accumulate(out, m, sign * c)
    return out


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            _accumulate(out, tuple(sorted(ma + mb)), ca * cb)
    return out


def _key(p: Poly) -> tuple:
    return tuple(sorted(p.items()))


def text(table, p: Poly) -> str:
    parts = []
    for m, c in sorted(p.items(), key=lambda mc: (-len(mc[0]), mc[0])):
        names = [table.syms[a].name for a in m]
        body = "*".join(([str(abs(c))] if abs(c) != 1 or not names else []) + names)
        parts.append(("-" if c < 0 else "+") + body)
    s = "".join(parts) or "0"
    return s[1:] if s[0] == "+" else s


def dim_of(table, p: Poly, origin: str = ""):
    """The Dim of a polynomial: an int, an existing symbol, or the (hash-consed) derived symbol for it."""
    if not p:
        return 0
    if list(p) == [()]:
        return p[()]
    if len(p) == 1:
        (m, c), = p.items()
        if c == 1 and len(m) == 1:
            return table.syms[m[0]]
    key = ("poly", _key(p))
    s = table.derived.get(key)
    if s is None:
        s = table.new(origin or text(table, p), expr=key, name=text(table, p))
        table.derived[key] = s
    return s


def _atom(table, kind: str, a: Poly, b: Poly, origin: str):
    key = (kind, _key(a), _key(b))
    s = table.derived.get(key)
    if s is None:
        name = f"({text(table, a)}{' // ' if kind == 'floordiv' else ' % '}{text(table, b)})"
        s = table.new(origin or name, expr=key, name=name)
        table.derived[key] = s
    return s


def _exact_quotient(a: Poly, b: Poly) -> Poly | None:
    """``a / b`` when ``b`` is one monomial dividing every term of ``a`` exactly (else None)."""
    if len(b) != 1:
        return None
    (mb, cb), = b.items()
    if cb == 0:
        return None
    out: Poly = {}
    for ma, ca in a.items():
        if ca % cb:
            return None
        rest = list(ma)
        for x in mb:
            if x not in rest:
                return None
            rest.remove(x)
        out[tuple(rest)] = ca // cb
    return out


def arith(table, op: str, a, b):
    """``a op b`` for dims (ints or Syms of ``table``): ``+ - * // %``."""
    pa, pb = poly(table, a), poly(table, b)
    if op == "+":
        return dim_of(table, _add(pa, pb))
    if op == "-":
        return dim_of(table, _add(pa, pb, -1))
    if op == "*":
        return dim_of(table, _mul(pa, pb))
    if not pb:
        table.fail(f"shape arithmetic: {table.text(a)} {op} 0 divides by zero")
    if list(pa) in ([], [()]) and list(pb) == [()]:
        x, y = pa.get((), 0), pb[()]
        return x // y if op == "//" else x % y
    q = _exact_quotient(pa, pb)
    if q is not None:
        return dim_of(table, q) if op == "//" else 0
    return _atom(table, "floordiv" if op == "//" else "mod", pa, pb, "")


def evaluate(table, s, value) -> int:
    """The size of derived symbol ``s`` given ``value(atom id) -> int`` for the symbols it is made of."""
    def ev(items) -> int:
        total = 0
        for m, c in items:
            t = c
            for a in m:
                t *= value(a)
            total += t
        return total

    kind = s.expr[0]
    if kind == "poly":
        return ev(s.expr[1])
    x, y = ev(s.expr[1]), ev(s.expr[2])
    if y == 0:
        table.fail(f"`{table.graph_name}`: the size {s.name} divides by zero at this call")
    return x // y if kind == "floordiv" else x % y


def product(table, dims):
    """The product of ``dims`` as a polynomial."""
    out: Poly = {(): 1}
    for d in dims:
        out = _mul(out, poly(table, d))
    return out


def is_derived(table, d) -> bool:
    d = table.find(d)
    return not isinstance(d, int) and d.expr is not None
