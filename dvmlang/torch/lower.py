"""aten FX nodes -> ``dvmlang.ops`` calls inside one fuser graph (a region of the partition).

A region is captured into a ``fuser.graph.Graph`` exactly as a ``@dvmlang.graph`` function is: its inputs are
graph inputs whose dimensions are fuser symbols (one per torch ``SymInt`` expression, so a new sequence length or
batch size only binds the symbols anew), and every supported node calls ``dvmlang.ops`` on graph values. The
fuser then plans the region once (``fuser.api.Program``).

Torch folds dimensions that dvmlang cannot name: ``x.view(B * S, H)`` before a ``mm``. A fuser dimension is a
number or one symbol, never a product, so a lowered value (``LVal``) keeps its *base* (the fuser value, with
the unfolded dims) and, per torch dimension, the group of base axes whose product it is. Elementwise ops,
reductions over unfolded dims, ``mm``/``bmm`` and views that fold or unfold again work on the base; anything
else on a folded dimension is unsupported (a fallback). A region's output is reshaped to torch's shape by torch.
"""

from __future__ import annotations

import sympy
import torch

from .. import dtypes as dt
from ..fuser import dims, ops
from ..fuser.graph import Graph, GraphValue, Node

aten = torch.ops.aten
prims = torch.ops.prims

MAX_RANK = 4  # the fuser's vector groups iterate over at most 4 dims (docs/fusion.md, Limits)
VIEW_RANK = 6  # views (reshape, permute, slice) compute nothing: a kernel reads through a chain of them by strides
VIEW_OPS = ("reshape", "permute", "slice", "input")


class Unsupported(Exception):
    """A node this lowering cannot express; the message is the reason a fallback records."""


def dvm_dtype(tdtype) -> dt.DType:
    d = dt.lookup(str(tdtype).removeprefix("torch."))
    if d is None or d.name in ("float8e4nv", "float8e5"):
        raise Unsupported(f"dtype {tdtype} has no dvmlang equivalent")
    return d


def expr_of(s):
    """The sympy expression (or int) of a torch size."""
    if isinstance(s, int):
        return s
    if isinstance(s, torch.SymInt):
        e = s.node.expr
        return int(e) if e.is_number else e
    raise Unsupported(f"size {s!r} is not an int or SymInt")


def _atomized(*es):
    """``es`` (sympy size expressions or ints) as polynomials: every part that is not (a floor division, a
    remainder) replaced by a symbol of its own, the same part by the same symbol, and the map back."""
    subs: dict = {}

    def walk(e):
        if e.is_Number or e.is_Symbol:
            return e
        if isinstance(e, (sympy.Add, sympy.Mul)):
            return e.func(*[walk(a) for a in e.args])
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return sympy.Pow(walk(e.base), e.exp)
        if e not in subs:
            subs[e] = sympy.Dummy(f"atom{len(subs)}", integer=True, positive=True)
        return subs[e]
    out = [e if isinstance(e, int) else walk(sympy.sympify(e)) for e in es]
    return out, {v: k for k, v in subs.items()}


def _eq(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a is b or a == b:  # (structurally equal: the common case, without expanding)
        return True
    if all(isinstance(x, (int, sympy.Symbol)) for x in (a, b)):
        return False  # two different symbols, or a symbol and a number: never equal as polynomials
    (x, y), _ = _atomized(a, b)
    return sympy.expand(sympy.sympify(x) - sympy.sympify(y)) == 0


def _div(a, b):
    """a / b when b divides a (as numbers or polynomials, floor divisions as atoms: ``(s//8)**2 / (s//8)``),
    else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    (x, y), back = _atomized(a, b)
    q = sympy.cancel(sympy.sympify(x) / sympy.sympify(y))
    num, den = sympy.fraction(q)
    if den != 1 or not q.is_polynomial():
        return None
    q = sympy.expand(q)
    if q.is_number:
        return int(q)
    return q.xreplace(back) if back else q


def _prod(xs):
    out = 1
    for x in xs:
        out = out * x
    return int(out) if not isinstance(out, int) and out.is_number else out


class Late(Exception):
    """The node reads a value an eager step computes after the region starts: it must start a new region."""


class LVal:
    """A lowered torch tensor: ``v`` (a fuser graph value, the base) and, per torch dim, the base axes it folds
    (none for a size-1 dim the base does not have: torch's unit dims cost no rank in the fuser)."""

    __slots__ = ("v", "groups")

    def __init__(self, v: GraphValue, groups=None):
        self.v = v
        self.groups = tuple((i,) for i in range(v.ndim)) if groups is None else tuple(map(tuple, groups))

    @property
    def folded(self) -> bool:
        return any(len(g) != 1 for g in self.groups)

    @property
    def rank(self) -> int:
        return len(self.groups)


def _negative_term(a) -> bool:
    """Whether a term of a sympy sum has a negative coefficient (``-3*x``)."""
    return isinstance(a, sympy.Mul) and a.args[0].is_Number and a.args[0].is_negative is True or \
        (a.is_Number and a.is_negative is True)


class Region:
    """One dvmlang program under construction: its fuser graph, inputs and lowered values."""

    def __init__(self, name: str, sources: dict):
        self.g = Graph(name)
        self.name = name
        self.env: dict = {}  # fx node -> LVal | tuple | python scalar (a node lowered in this region)
        self.nodes: list = []  # fx nodes lowered here, in order
        self.inputs: list = []  # (fx node or ('dim', expr), fuser input Node, kind)
        self.by_input: dict = {}
        self.sym_of: dict = {}  # str(sympy expr) -> fuser Sym
        self.expr_of_sym: dict = {}  # fuser sym id -> sympy expr
        self.sources = sources  # sympy symbol -> how to find its size at run time (backend.SymbolSources)
        self.position = None  # index of the region's step in the plan
        self.env_input: dict = {}  # fuser input node id -> its LVal
        self.made_at: dict = {}  # fx node -> index of the step computing it (shared with the partitioner)
        self.aliases: list = []  # (expr, expr): sizes torch names differently that the region unified

    def same(self, a, b) -> bool:
        """Whether torch sizes ``a`` and ``b`` are equal: as polynomials, or unified by ``_assume_equal``."""
        if _eq(a, b):
            return True
        return any((_eq(a, x) and _eq(b, y)) or (_eq(a, y) and _eq(b, x)) for x, y in self.aliases)

    def alias_of(self, e):
        """Another name of size ``e`` the region unified with it, or None."""
        for x, y in self.aliases:
            if _eq(e, x):
                return y
            if _eq(e, y):
                return x
        return None

    # ---- transactions: a failed lowering leaves nothing behind ---------------------------------------------
    def snapshot(self):
        s = self.g.syms
        return (len(self.g.nodes), len(s.syms), dict(s.parent), len(s.deductions), len(self.inputs),
                dict(self.by_input), dict(self.sym_of), dict(self.expr_of_sym), dict(self.env_input),
                dict(s.derived), len(s.checks), list(self.aliases))

    def rollback(self, snap):
        """Undo a failed lowering: its nodes, inputs and every symbol it made, including the hash-consed derived
        sizes (``SymTable.derived``: a later lowering must never find a symbol that no longer exists) and the
        size checks it recorded."""
        n, ns, parent, nd, ni, by_input, sym_of, expr_of_sym, env_input, derived, nc, self.aliases = snap
        s = self.g.syms
        del self.g.nodes[n:]
        del s.syms[ns:]
        s.parent = parent
        del s.deductions[nd:]
        s.derived = derived
        del s.checks[nc:]
        del self.inputs[ni:]
        self.g.inputs = [x[1] for x in self.inputs]
        self.by_input, self.sym_of, self.expr_of_sym, self.env_input = by_input, sym_of, expr_of_sym, env_input

    # ---- dims ----------------------------------------------------------------------------------------------
    def dim(self, e, create: bool = True):
        """The fuser Dim of a torch size expression: a number, or the region's symbol for it. A symbol no input
        binds gets a binding input of its own (a zero-stride array of that length)."""
        if isinstance(e, int):
            return e
        key = str(e)
        s = self.sym_of.get(key)
        if s is not None:
            return s
        if not create:
            return None
        if not isinstance(e, sympy.Symbol):
            return self.dim_expr(e)  # arithmetic on symbols: a derived dim of the fuser
        if e not in self.sources:
            raise Unsupported(f"the size {e} is a symbol that no input of the region has")
        return self._bind_input(e)

    def _new_sym(self, e, origin: str):
        s = self.g.syms.new(origin)
        self.sym_of[str(e)] = s
        self.expr_of_sym[s.id] = e
        return s

    def _bind_input(self, e):
        s = self._new_sym(e, f"size {e}")
        n = self.g.add(Node("input", [], (s,), dt.int8, {"name": f"size_{e}"}, f"size_{e}"))
        self._add_input(("dim", e), n, "dim")
        return s

    def _add_input(self, key, n, kind):
        self.inputs.append((key, n, kind))
        self.g.inputs.append(n)
        self.by_input[key] = len(self.inputs) - 1

    def base_exprs(self, v: GraphValue) -> list:
        out = []
        for d in v.shape:
            d = self.g.syms.find(d)
            out.append(d if isinstance(d, int) else self.expr_of_sym.get(d.id) or self._derived_expr(d))
        return out

    def _derived_expr(self, d):
        """The sympy expression of a dim the fuser derived (``stop - start`` of a slice, ``(s0 - 1) // 2``): its
        polynomial over the region's symbols, a floor division or remainder as torch's ``FloorDiv``/``PythonMod``."""
        table = self.g.syms
        total = 0
        for mono, c in dims.poly(table, d).items():
            term = c
            for a in mono:
                term = term * self._atom_expr(table.find(table.syms[a]), table, d)
            total = total + term
        total = sympy.expand(total)
        if total.is_number:
            return int(total)
        self.expr_of_sym[d.id] = total
        return total

    def _atom_expr(self, atom, table, whole):
        e = self.expr_of_sym.get(atom.id) if not isinstance(atom, int) else atom
        if e is not None:
            return e
        if atom.expr is not None and atom.expr[0] in ("floordiv", "mod"):
            from torch.utils._sympy.functions import FloorDiv, PythonMod

            def of(items):
                t = 0
                for mono, c in items:
                    term = c
                    for a in mono:
                        term = term * self._atom_expr(table.find(table.syms[a]), table, whole)
                    t = t + term
                return sympy.expand(t)
            a, b = of(atom.expr[1]), of(atom.expr[2])
            e = (FloorDiv if atom.expr[0] == "floordiv" else PythonMod)(a, b)
            self.expr_of_sym[atom.id] = e
            return e
        if atom.expr is not None:
            return self._derived_expr(atom)
        raise Unsupported(f"a size the fuser derived ({table.text(whole)}) that torch does not name")

    def dim_expr(self, e):
        """A fuser Dim for a torch size expression that may be arithmetic on symbols (``s0 - 1``, ``2 * s1``,
        ``(s0 + 3) // 4``)."""
        if isinstance(e, int):
            return e
        if str(e) in self.sym_of or isinstance(e, sympy.Symbol):
            return self.dim(e)
        if e.is_Integer:
            return int(e)
        ops_ = {sympy.Add: "+", sympy.Mul: "*"}
        op = ops_.get(type(e)) or {"FloorDiv": "//", "CleanDiv": "//", "PythonMod": "%", "Mod": "%"}.get(
            type(e).__name__)
        args = e.args
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            op, args = "*", [e.base] * int(e.exp)  # (s // 8) ** 2: a product
        if op is None:
            raise Unsupported(f"the size {e} is not a polynomial of the region's symbols")
        acc = None
        if op == "+":  # positive terms first, negative ones subtracted: no intermediate size is negative
            args = sorted(args, key=_negative_term)
        for a in args:
            if op == "+" and acc is not None and _negative_term(a):
                acc = dims.arith(self.g.syms, "-", acc, self.dim_expr(-a))
                continue
            d = self.dim_expr(int(a) if a.is_Integer else a)
            acc = d if acc is None else dims.arith(self.g.syms, op, acc, d)
        if not isinstance(acc, int):
            self.expr_of_sym.setdefault(self.g.syms.find(acc).id, e)
        return acc

    # ---- operands ------------------------------------------------------------------------------------------
    def input(self, node: torch.fx.Node) -> LVal:
        """The region input for an fx value computed outside (a placeholder, a constant or another step)."""
        idx = self.by_input.get(node)
        if idx is not None:
            n = self.inputs[idx][1]
            return self.env_input[n.id]
        if self.made_at.get(node, -1) > self.position:
            raise Late(node.name)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            d = dvm_dtype(val.dtype)
            shape = []
            for i, s in enumerate(val.shape):
                e = expr_of(s)
                if isinstance(e, int):
                    shape.append(e)
                elif str(e) not in self.sym_of and not isinstance(e, sympy.Symbol) and \
                        e.is_polynomial(*e.free_symbols) and \
                        all(f in self.sources or str(f) in self.sym_of for f in e.free_symbols):
                    shape.append(self.dim_expr(e))  # a product of symbols (a backward graph's s0 * s1): derived
                else:
                    sym = self.sym_of.get(str(e)) or self._new_sym(e, f"{node.name}.shape[{i}]")
                    shape.append(sym)
            if len(shape) > VIEW_RANK:
                raise Unsupported(f"rank {len(shape)} > {VIEW_RANK}")
            n = self.g.add(Node("input", [], tuple(shape), d, {"name": node.name}, node.name))
            self._add_input(node, n, "tensor")
            lv = LVal(GraphValue(n, self.g))
        elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
            d = dt.float64 if isinstance(val, (torch.SymFloat, float)) else \
                dt.bool_ if isinstance(val, (torch.SymBool, bool)) else dt.int64
            n = self.g.add(Node("input", [], (), d, {"name": node.name}, node.name))
            self._add_input(node, n, "scalar")
            lv = LVal(GraphValue(n, self.g))
        else:
            raise Unsupported(f"input {node.name} is a {type(val).__name__}")
        self.env_input[n.id] = lv
        return lv

    def operand(self, a):
        """A lowered operand: an LVal for tensors (and runtime scalars), the number itself for constants."""
        if isinstance(a, torch.fx.Node):
            if a in self.env:
                return self.env[a]
            return self.input(a)
        if isinstance(a, (bool, int, float, LVal)):
            return a  # (an LVal: an operand a lowering converted first)
        raise Unsupported(f"operand {a!r} ({type(a).__name__})")


# ---- shape helpers ---------------------------------------------------------------------------------------


def meta_shape(node) -> list:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{node.name} has no tensor metadata")
    return [expr_of(s) for s in val.shape]


def _unit(e) -> bool:
    return isinstance(e, int) and e == 1


def rebase(r: Region, lv: LVal, parts: list, keep_units: bool = False) -> LVal:
    """``lv`` with a new base: ``parts`` gives, per torch dim, the base sizes (exprs) it folds. Unit dims are
    dropped from the base unless ``keep_units`` (an operand about to broadcast keeps them where they align)."""
    if not keep_units:
        parts = [[e for e in p if not _unit(e)] for p in parts]
    shape, groups = [], []
    for p in parts:
        groups.append(tuple(range(len(shape), len(shape) + len(p))))
        shape.extend(r.dim(e) for e in p)
    if len(shape) > VIEW_RANK:
        raise Unsupported(f"a value of rank {len(shape)} (> {VIEW_RANK}) after unfolding torch's folded dims")
    old = [r.g.syms.find(d) for d in lv.v.shape]
    v = lv.v if old == [r.g.syms.find(d) for d in shape] else ops.reshape(lv.v, tuple(shape))
    return LVal(v, groups)


def parts_of(r: Region, lv: LVal) -> list:
    base = r.base_exprs(lv.v)
    return [[base[i] for i in g] for g in lv.groups]


def merge_parts(r: Region, parts: list) -> list:
    """Fold groups back into one base dim where the fuser can name their product (numbers, or a known symbol)."""
    out = []
    for p in parts:
        if len(p) > 1:
            q = _prod(p)
            if isinstance(q, int) or str(q) in r.sym_of:
                p = [q]
        out.append(p)
    return out


def view(r: Region, lv: LVal, target: list) -> LVal:
    """``lv`` viewed as ``target`` (torch exprs): refine the base so that every target dim is a run of base dims."""
    src = [e for e in sum(parts_of(r, lv), []) if not (isinstance(e, int) and e == 1)]
    i, parts, renamed = 0, [], set()
    for t in target:
        if isinstance(t, int) and t == 1:
            parts.append([])  # a size-1 torch dim needs no base dim
            continue
        rem, p = t, []
        while not (isinstance(rem, int) and rem == 1):
            if i >= len(src):
                raise Unsupported(f"cannot view {src} as {target}")
            b = src[i]
            if _eq(b, rem):
                p.append(b)
                i += 1
                rem = 1
            elif (q := _div(rem, b)) is not None:
                p.append(b)
                i += 1
                rem = q
            elif (q := _div(b, rem)) is not None:
                p.append(rem)
                src[i] = q
                rem = 1
            elif (alt := r.alias_of(b)) is not None and (i, str(alt)) not in renamed:
                renamed.add((i, str(b)))
                src[i] = alt  # the same size as torch names it elsewhere (unified, checked per call)
            else:
                raise Unsupported(f"cannot view {src} as {target}")
        parts.append(p)
    if i != len(src):
        raise Unsupported(f"cannot view {src} as {target}")
    return rebase(r, lv, merge_parts(r, parts))


def align(r: Region, node, operands: list):
    """The operands of an elementwise op on a common base (fuser values or numbers) and the result's groups."""
    tens = [o for o in operands if isinstance(o, LVal)]
    if not any(t.folded for t in tens):
        return [o.v if isinstance(o, LVal) else o for o in operands], None
    out = meta_shape(node)
    rank = len(out)
    decomp = [None] * rank
    unit = [False] * rank  # a dim of 1 some operand's base has as an axis of its own
    for t in tens:
        ps = parts_of(r, t)
        for j, p in enumerate(ps):
            i = rank - len(ps) + j
            if all(isinstance(e, int) and e == 1 for e in p):
                unit[i] = unit[i] or len(p) == 1
                continue
            if decomp[i] is None or len(p) > len(decomp[i]):
                decomp[i] = p
    # (a dim of 1 that is an axis of an operand's base stays one in the result's: a row value (L, 1) keeps its
    # shape through `var + eps` and `rsqrt`, instead of a reshape to (L,) and back that keeps them apart in
    # fusion)
    decomp = [d if d is not None else [1] if u else [] for d, u in zip(decomp, unit)]
    vals = []
    for o in operands:
        if not isinstance(o, LVal):
            vals.append(o)
            continue
        ps = parts_of(r, o)
        new = []
        for i in range(rank):
            j = i - (rank - len(ps))
            p = ps[j] if j >= 0 else []
            if all(isinstance(e, int) and e == 1 for e in p):
                new.append([1] * len(decomp[i]))
            elif len(p) == len(decomp[i]) and all(_eq(a, b) for a, b in zip(p, decomp[i])):
                new.append(p)
            elif r.same(_prod(p), _prod(decomp[i])):  # the same size folded another way (4 * s0 vs s0, 4)
                new.append(decomp[i])
            else:
                raise Unsupported(f"operands fold their dims differently ({p} vs {decomp[i]})")
        vals.append(rebase(r, o, new, keep_units=True).v)
    groups, k = [], 0
    for d in decomp:
        groups.append(tuple(range(k, k + len(d))))
        k += len(d)
    return vals, groups


def result(r: Region, node, v, groups=None) -> LVal:
    """An op's result, checked against torch's metadata (rank, static sizes) and cast to torch's dtype."""
    if not isinstance(v, GraphValue):
        raise Unsupported("the result is not a tensor")
    lv = LVal(v, groups)
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        want = dvm_dtype(val.dtype)
        if lv.v.dtype is not want:
            lv = LVal(ops.cast(lv.v, want), lv.groups)
        shape = meta_shape(node)
        got = parts_of(r, lv)
        if len(got) != len(shape):
            raise Unsupported(f"internal: lowered shape {got} differs from torch's {shape}")
        for p, s in zip(got, shape):
            if not _eq(_prod(p), s):
                _assume_equal(r, lv, p, s, got, shape)
    if lv.v.ndim > (VIEW_RANK if lv.v.node.op in VIEW_OPS else MAX_RANK):
        raise Unsupported(f"rank {lv.v.ndim} > {MAX_RANK}")
    return lv


def check_ranks(r: Region, first: int) -> None:
    """The nodes a lowering added from ``first`` on: a computation (anything but a view) reads and makes values of
    rank <= ``MAX_RANK`` (the fuser's iteration spaces); views of rank up to ``VIEW_RANK`` only pass through."""
    for n in r.g.nodes[first:]:
        if n.op in VIEW_OPS:
            continue
        for x in (n, *n.inputs):
            if len(x.shape) > MAX_RANK:
                raise Unsupported(f"a {n.op} of a value of rank {len(x.shape)} (the fuser computes on ranks <= "
                                  f"{MAX_RANK}; views of rank up to {VIEW_RANK} pass through)")


def _assume_equal(r: Region, lv: LVal, part, want, got, shape) -> None:
    """Torch names a size with other symbols than the lowering derived (a loss's labels ``(s38 * s97)`` against its
    logits' ``(s3 * s88)``, equal whenever torch's op is valid): the two are unified in the fuser, a deduction
    checked at every call (a call where they differ runs eagerly, where torch raises its own error)."""
    if isinstance(want, int) and all(isinstance(e, int) for e in part):
        raise Unsupported(f"internal: lowered shape {got} differs from torch's {shape}")
    free = getattr(sympy.sympify(want), "free_symbols", set())
    if any(f not in r.sources and str(f) not in r.sym_of for f in free):
        raise Unsupported(f"internal: lowered shape {got} differs from torch's {shape}")
    mine = dims.dim_of(r.g.syms, dims.product(r.g.syms, [r.dim(e) for e in part]))
    r.aliases.append((sympy.expand(sympy.sympify(_prod(part))), sympy.sympify(want)))
    r.g.syms.unify(r.dim(want), mine, f"torch's size {want} of a value the lowering sized {_prod(part)}")


def plain(r: Region, lv: LVal) -> GraphValue:
    """``lv`` as a fuser value of exactly torch's shape (unit dims in place). A dim torch folded from several
    becomes one fuser dim, their product (a derived dim where the parts are symbols: a reshape, a view of a stored
    value)."""
    if any(len(g) > 1 for g in lv.groups):
        return rebase(r, lv, [[_prod(p)] if p else [1] for p in parts_of(r, lv)], keep_units=True).v
    if all(len(g) == 1 for g in lv.groups):
        return lv.v
    return rebase(r, lv, [p or [1] for p in parts_of(r, lv)], keep_units=True).v


def elementwise(fn):
    def lower(r, node, *args, **kwargs):
        vals, groups = align(r, node, [r.operand(a) for a in args])
        if max((v.ndim for v in vals if isinstance(v, GraphValue)), default=0) > MAX_RANK:
            return result(r, node, _merged(r, fn, vals, kwargs), groups)
        return result(r, node, fn(*vals, **kwargs), groups)
    return lower


def _merged(r: Region, fn, vals, kwargs):
    """An elementwise op on values of rank > ``MAX_RANK`` as an exact reshape: adjacent dims along which every
    operand either varies or broadcasts alike are merged (rank <= 4), the op runs on that, and the result is
    viewed back in the full shape (a state-space scan's rank-5 intermediates)."""
    rank = max(v.ndim for v in vals if isinstance(v, GraphValue))
    syms = r.g.syms
    tens = [ops.reshape(v, (1,) * (rank - v.ndim) + tuple(v.shape)) if isinstance(v, GraphValue) and v.ndim < rank
            else v for v in vals]
    full, pattern = [], []
    for k in range(rank):
        d = 1
        for v in tens:
            if isinstance(v, GraphValue) and not (isinstance(syms.find(v.shape[k]), int) and syms.find(v.shape[k]) == 1):
                d = v.shape[k]
        full.append(d)
        pattern.append(tuple(isinstance(v, GraphValue) and not (isinstance(syms.find(v.shape[k]), int) and
                                                              syms.find(v.shape[k]) == 1) for v in tens))
    runs = merged_runs(pattern, f"an elementwise op on rank {rank} whose operands broadcast along alternating dims")
    merged = [ops.reshape(v, tuple(run_sizes(syms, [full[k] if pattern[k][j] else 1 for k in range(rank)], runs)))
              if isinstance(v, GraphValue) else v for j, v in enumerate(tens)]
    out = fn(*merged, **kwargs)
    return ops.reshape(out, tuple(full))


def merged_runs(keys, why: str) -> list:
    """The runs of adjacent dims whose ``keys`` are equal (each a list of dim indices); ``Unsupported(why)`` when
    there are more than ``MAX_RANK`` (the fuser computes on ranks <= 4)."""
    runs: list = []
    for k, key in enumerate(keys):
        if runs and keys[runs[-1][0]] == key:
            runs[-1].append(k)
        else:
            runs.append([k])
    if len(runs) > MAX_RANK:
        raise Unsupported(why)
    return runs


def run_sizes(syms, sizes, runs) -> list:
    """Each run's size: the product of its dims' ``sizes``."""
    out = []
    for run in runs:
        n = 1
        for k in run:
            n = dims.arith(syms, "*", n, sizes[k])
        out.append(n)
    return out


def torch_axes(lv: LVal, dims) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = range(lv.rank)
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % lv.rank if lv.rank else 0 for d in dims})


def reduction(r: Region, node, x, dims, keepdim, fn):
    lv = r.operand(x)
    if not isinstance(lv, LVal):
        raise Unsupported("reduction of a number")
    tax = torch_axes(lv, dims)
    bax = tuple(a for t in tax for a in lv.groups[t])
    if not bax:  # only size-1 dims: nothing to reduce
        return result(r, node, *_reduced_units(r, lv, tax, keepdim))
    v = fn(lv.v, bax) if lv.v.ndim <= MAX_RANK else _reduce_merged(r, lv.v, bax, fn)  # keepdims on the base
    if keepdim:
        return result(r, node, v, lv.groups)
    kept = LVal(v, lv.groups)
    out = rebase(r, kept, [p for t, p in enumerate(parts_of(r, kept)) if t not in tax])
    return result(r, node, out.v, out.groups)  # rebase's groups: it drops the unit dims of the parts


def _reduce_merged(r: Region, v, bax, fn):
    """A reduction of a value of rank > ``MAX_RANK`` (a view: the backward of grouped-query attention's rank-5
    expand sums over its repeat dim), as an exact reshape: runs of adjacent dims that are all kept or all reduced
    merged into one, the reduction on that, the keepdims shape restored by a view."""
    red = set(bax)
    runs = merged_runs([a in red for a in range(v.ndim)],
                       f"a reduction of a value of rank {v.ndim} whose kept and reduced dims alternate")
    shape = run_sizes(r.g.syms, v.shape, runs)
    out = fn(ops.reshape(v, tuple(shape)), tuple(i for i, run in enumerate(runs) if run[0] in red))
    return ops.reshape(out, tuple(1 if a in red else v.shape[a] for a in range(v.ndim)))


def _reduced_units(r, lv, tax, keepdim):
    if keepdim:
        return lv.v, lv.groups
    out = rebase(r, lv, [p for t, p in enumerate(parts_of(r, lv)) if t not in tax])
    return out.v, out.groups


def _consecutive(parts) -> list:
    groups, k = [], 0
    for p in parts:
        groups.append(tuple(range(k, k + len(p))))
        k += len(p)
    return groups


def unfolded_axis(lv: LVal, dim: int) -> int:
    g = lv.groups[dim % lv.rank]
    if len(g) != 1:
        raise Unsupported("an op along a dimension torch folded from several")
    return g[0]


def number(x) -> float | int | bool:
    if isinstance(x, (bool, int, float)):
        return x
    raise Unsupported(f"expected a constant, got {x!r}")


def const(r, value, d: dt.DType, shape=()):
    """A constant of dtype ``d`` broadcast to ``shape`` (fuser dims), a node of the region's graph (``ops`` alone
    cannot tell which graph a Python number belongs to)."""
    c = r.g.node("const", [], (), d, {"value": d.np.type(value).item() if not d.is_bool else bool(value)})
    return ops.broadcast_to(c, tuple(shape)) if shape else c


def _const_full(r, node, value):
    """A constant of torch's shape; its size-1 dims are not base dims (a rank-5 ``zeros`` of a batch-1 backward)."""
    shape = meta_shape(node)
    d = dvm_dtype(node.meta["val"].dtype)
    if not any(_unit(e) for e in shape):
        return result(r, node, const(r, value, d, tuple(r.dim(e) for e in shape)))
    big = [e for e in shape if not _unit(e)]
    c = const(r, value, d, tuple(r.dim(e) for e in big))
    return result(r, node, c, _consecutive([[] if _unit(e) else [e] for e in shape]))

