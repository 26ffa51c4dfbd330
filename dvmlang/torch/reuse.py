"""A Dynamo recompile reuses a graph compiled before, when the new graph is that graph at the new sizes.

At a size of 1 (dynamo's 0/1 specialisation: a length of 1 after a symbolic length, a batch of 1 after a batch of
2), a second ``torch.compile`` of the model or any other recompile, AOTAutograd hands the backend a new FX graph. When that
graph is node for node an earlier one with each of the earlier graph's symbols replaced by a size (a number, or a
symbol of the new graph), the earlier ``CompiledGraph`` runs it: its regions were planned for every value of their
symbols and only encode for the new sizes. Nothing is lowered, planned or built again.

**Why it is sound.** ``match`` proves, for an earlier graph ``G`` and the new graph ``H``, a substitution ``σ`` of
``G``'s symbols such that ``H`` is ``σ(G)``:

* the placeholders (parameters, buffers, activations) line up one for one: dtype, rank, ``requires_grad``, and the
  sizes and strides of ``σ(G)``'s are ``H``'s (``σ`` is read off these sizes, and every symbol of ``G`` is bound);
* after dropping the views that are the identity at the new sizes (an ``alias``, a slice from 0 to the end, a
  view, reshape or expand to the shape it already has, a clone: torch drops these when it traces at static sizes), the
  nodes line up one for one: the same op, the same arguments (numbers equal, size arguments equal after ``σ``,
  tensors the corresponding nodes), and results of the same dtype and ``σ``-substituted shape;
* the outputs are the corresponding values.

An aten op's result is a function of its arguments alone, so ``σ(G)`` computes what ``H`` computes, value for
value. A size-1 dim that an op broadcasts is a literal 1 in ``G`` as well (torch assumes a symbol is not 1, so a
broadcast it traced is of a dim it knew to be 1), and stays one; a symbol that ``σ`` makes 1 was broadcast by no op
of ``G``. An op whose meaning changes at a size of 1 (``squeeze`` of that dim) gives ``H`` another shape, and the
match fails. Where anything differs the new graph is compiled as always: a failed match never costs correctness,
only the reuse.

Graphs are kept while something else holds them (dynamo's cache entry of the graph's frame), at most the ``_TRIES``
latest of one placeholder signature, and until ``torch._dynamo.reset()``, which dynamo documents as a fresh start,
as if in a new process.
"""

from __future__ import annotations

import math
import os
import weakref

import sympy
import torch

from . import stats as st

aten = torch.ops.aten
_IDENTITY_CANDIDATES = {aten.alias.default, aten.slice.Tensor, aten.view.default, aten._unsafe_view.default,
                        aten.reshape.default, aten.expand.default, aten.clone.default}
_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)
_TRIES = 8  # earlier graphs tried per compile (the most recent first)
# (kind, placeholders' dtypes and ranks) -> [weak reference to a CompiledGraph], oldest first, at most _TRIES: held
# weakly, so a graph dynamo dropped is freed with its programs, kernels and the simulator's steps for them (held
# strongly, a process kept every graph it ever compiled)
_REGISTRY: dict = {}


def enabled() -> bool:
    """``DVMLANG_TORCH_REUSE=0`` compiles every graph afresh."""
    return os.environ.get("DVMLANG_TORCH_REUSE", "1") != "0"


class NoMatch(Exception):
    """The new graph is not an earlier one at other sizes (the message says where they differ)."""


def _is_scalar(node) -> bool:
    return isinstance(node.meta.get("val"), _SCALARS)


def _expr(v):
    """A size, SymInt, SymFloat or number as an int, float, bool or sympy expression."""
    if v.__class__ in (int, float, bool):
        return v
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        e = v.node.expr
        if e.is_Integer:
            return int(e)
        if e.is_Boolean and e.is_Atom:
            return bool(e)
        if e.is_Float or e.is_Rational:
            return float(e)
        return e
    return v


def _key(kind: str, placeholders) -> tuple:
    out = [kind]
    for p in placeholders:
        if _is_scalar(p):
            continue
        val = p.meta.get("val")
        out.append((val.dtype, val.dim()) if isinstance(val, torch.Tensor) else type(val).__name__)
    return tuple(out)


def _epoch(*_args) -> None:
    """A dynamo compile-start callback that does nothing: ``torch._dynamo.reset()`` clears dynamo's callbacks, so
    its absence says dynamo was reset since the graphs were registered."""


def _since_reset() -> None:
    """Forget the graphs compiled before the latest ``torch._dynamo.reset()``: a reset is a fresh start, as if in a
    new process (kernels built before it are still found by content, docs/fusion.md)."""
    try:
        from torch._dynamo.callback import callback_handler
        if _epoch not in callback_handler.start_callbacks:
            _REGISTRY.clear()
            callback_handler.register_start_callback(_epoch)
    except (ImportError, AttributeError):  # (a torch without compile callbacks: graphs are kept across resets)
        pass


def register(cg, kind: str) -> None:
    """Keep ``cg`` (a ``CompiledGraph``) as a graph later compiles may reuse."""
    if enabled():
        _since_reset()
        refs = _REGISTRY.setdefault(_key(kind, cg.placeholders), [])
        refs[:] = [r for r in refs[-(_TRIES - 1):] if r() is not None] + [weakref.ref(cg)]


def find(gm: torch.fx.GraphModule, kind: str, name: str):
    """A ``Reused`` runner of an earlier graph that ``gm`` is at other sizes, or None."""
    if not enabled():
        return None
    _since_reset()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for ref in reversed(_REGISTRY.get(_key(kind, placeholders), [])):
        cg = ref()
        if cg is None:
            continue
        try:
            arg_map = match(cg.gm, gm)
        except NoMatch:
            continue
        return Reused(cg, name, arg_map, gm)
    return None


class Reused:
    """A new graph run by an earlier ``CompiledGraph``: the new graph's arguments are mapped onto the earlier
    graph's placeholders (a symbol's placeholder gets its size at this call)."""

    def __init__(self, graph, name: str, arg_map: list, gm=None):
        self.graph = graph  # the earlier CompiledGraph
        self.gm = gm  # the new graph (not run: kept for inspection)
        self.name = name
        self.arg_map = arg_map  # per earlier placeholder: ("arg", i) | ("size", n) | ("dim", i, axis)
        st.STATS.graphs += 1
        st.STATS.reused += 1

    @property
    def steps(self):
        return self.graph.steps

    @property
    def fallbacks(self):
        return self.graph.fallbacks

    def __call__(self, args: list):
        mapped = []
        for m in self.arg_map:
            k = m[0]
            if k == "arg":
                mapped.append(args[m[1]])
            elif k == "size":
                mapped.append(m[1])
            else:
                mapped.append(int(args[m[1]].shape[m[2]]) if k == "dim" else int(args[m[1]]))
        return self.graph(mapped)


# ---- the match ------------------------------------------------------------------------------------------------

class _Subst:
    """``σ``: the earlier graph's symbols -> the new graph's sizes (ints or sympy expressions in its symbols)."""

    def __init__(self):
        self.map: dict = {}
        self._memo: dict = {}

    def __call__(self, e):
        if not isinstance(e, sympy.Basic):
            return e
        r = self._memo.get(e)
        if r is None:
            r = e.xreplace(self.map)
            if r in (sympy.true, sympy.false):
                r = bool(r)
            elif getattr(r, "is_number", False):
                r = int(r) if r.is_Integer else float(r)
            self._memo[e] = r
        return r


def _same(a, b) -> bool:
    """Two sizes (ints, floats, bools or sympy expressions) equal for every value of the symbols."""
    if a.__class__ is int and b.__class__ is int:
        return a == b
    if not isinstance(a, sympy.Basic) and not isinstance(b, sympy.Basic):
        if isinstance(a, float) or isinstance(b, float):
            return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        return type(a) is type(b) and a == b
    if isinstance(a, sympy.Basic) and isinstance(b, sympy.Basic):
        if a == b:
            return True
        if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
            return sympy.expand(a - b) == 0
    return False


class _Matcher:
    def __init__(self, old: torch.fx.GraphModule, new: torch.fx.GraphModule):
        self.old, self.new = old, new
        self.sub = _Subst()
        self.pair: dict = {}  # earlier graph's tensor node -> the new graph's
        self.resolved_old: dict = {}
        self.resolved_new: dict = {}
        self.shapes_old: dict = {}
        self.shapes_new: dict = {}

    # -- values of nodes ---------------------------------------------------------------------------------------
    def old_value(self, n):
        return self.sub(_expr(n.meta["val"]))

    @staticmethod
    def new_value(n):
        return _expr(n.meta["val"])

    def shape(self, val, old: bool):
        memo = self.shapes_old if old else self.shapes_new
        r = memo.get(id(val))
        if r is None:
            r = tuple([_expr(s) for s in val.shape])
            if old:
                r = tuple([self.sub(e) for e in r])
            memo[id(val)] = (r, val)  # (the value kept alive: its id stays its own)
            return r
        return r[0]

    # -- placeholders --------------------------------------------------------------------------------------------
    def placeholders(self) -> list:
        old = [n for n in self.old.graph.nodes if n.op == "placeholder"]
        new = [n for n in self.new.graph.nodes if n.op == "placeholder"]
        old_t = [n for n in old if not _is_scalar(n)]
        new_t = [n for n in new if not _is_scalar(n)]
        if len(old_t) != len(new_t):
            raise NoMatch("placeholders differ in number")
        deferred = []
        for a, b in zip(old_t, new_t):
            va, vb = a.meta.get("val"), b.meta.get("val")
            if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
                raise NoMatch(f"placeholder {a.name} is not a tensor")
            if va.dtype != vb.dtype or va.dim() != vb.dim() or va.requires_grad != vb.requires_grad or \
                    va.device != vb.device:
                raise NoMatch(f"placeholder {a.name}: dtype, rank or device")
            for sa, sb in zip(va.shape, vb.shape):
                ea, eb = _expr(sa), _expr(sb)
                if isinstance(ea, sympy.Symbol):
                    have = self.sub.map.get(ea)
                    if have is None:
                        self.sub.map[ea] = eb
                    elif not _same(have, eb):
                        raise NoMatch(f"placeholder {a.name}: {ea} is {have} and {eb}")
                else:
                    deferred.append((ea, eb))
            for sa, sb, size in zip(va.stride(), vb.stride(), vb.shape):
                if _expr(size) != 1:
                    deferred.append((_expr(sa), _expr(sb)))
            self.pair[a] = b
        for a in old:
            if _is_scalar(a):
                e = _expr(a.meta["val"])
                if isinstance(e, sympy.Basic) and not e.free_symbols <= set(self.sub.map):
                    raise NoMatch(f"placeholder {a.name}: a size no tensor has")
        for ea, eb in deferred:
            if not _same(self.sub(ea), eb):
                raise NoMatch(f"a placeholder's size or stride {ea} is not {eb}")
        # how each earlier placeholder is passed: a new argument, a number, or a size read from a new argument
        index = {n: i for i, n in enumerate(new)}
        dims = {}
        for i, n in enumerate(new):
            val = n.meta.get("val")
            if isinstance(val, torch.SymInt) and isinstance(_expr(val), sympy.Symbol):
                dims.setdefault(_expr(val), ("int", i))
            elif isinstance(val, torch.Tensor):
                for ax, s in enumerate(val.shape):
                    e = _expr(s)
                    if isinstance(e, sympy.Symbol):
                        dims.setdefault(e, ("dim", i, ax))
        arg_map = []
        for a in old:
            if not _is_scalar(a):
                arg_map.append(("arg", index[self.pair[a]]))
                continue
            v = self.old_value(a)
            if isinstance(v, int):
                arg_map.append(("size", v))
            elif isinstance(v, sympy.Symbol) and v in dims:
                arg_map.append(dims[v])
            else:
                raise NoMatch(f"placeholder {a.name}: its size {v} is not read from the new arguments")
        return arg_map

    # -- identity views ------------------------------------------------------------------------------------------
    def resolve(self, n, old: bool):
        """The node whose value ``n`` is: ``n`` itself, or what an identity view of it reads."""
        memo = self.resolved_old if old else self.resolved_new
        r = memo.get(n)
        if r is None:
            r = n
            if n.op == "call_function" and n.target in _IDENTITY_CANDIDATES and self._identity(n, old):
                r = self.resolve(n.args[0], old)
            memo[n] = r
        return r

    def _identity(self, n, old: bool) -> bool:
        src = n.args[0] if n.args else None
        if not isinstance(src, torch.fx.Node):
            return False
        vo, vi = n.meta.get("val"), src.meta.get("val")
        if not isinstance(vo, torch.Tensor) or not isinstance(vi, torch.Tensor) or vo.dtype != vi.dtype:
            return False
        if not all(_same(a, b) for a, b in zip(self.shape(vo, old), self.shape(vi, old))) or vo.dim() != vi.dim():
            return False
        if n.target is aten.slice.Tensor:
            start = n.args[2] if len(n.args) > 2 else n.kwargs.get("start")
            step = n.args[4] if len(n.args) > 4 else n.kwargs.get("step", 1)
            if start is not None and self.scalar(start, old) != 0:
                return False
            if self.scalar(step, old) != 1:
                return False
        return True

    def scalar(self, a, old: bool):
        if isinstance(a, torch.fx.Node):
            if not _is_scalar(a):
                return None
            return self.old_value(a) if old else self.new_value(a)
        return self.sub(_expr(a)) if old else _expr(a)

    # -- nodes -----------------------------------------------------------------------------------------------------
    def computing(self, gm, old: bool) -> list:
        """The nodes that compute a value (not placeholders, sizes or identity views), and the output node."""
        out = []
        for n in gm.graph.nodes:
            if n.op == "placeholder" or _is_scalar(n):
                continue
            if n.op == "call_function" and n.target in _IDENTITY_CANDIDATES and self.resolve(n, old) is not n:
                continue
            out.append(n)
        return out

    def same_arg(self, a, b) -> bool:
        if a.__class__ is int and b.__class__ is int:
            return a == b
        if isinstance(a, torch.fx.Node) and not _is_scalar(a):
            if not isinstance(b, torch.fx.Node) or _is_scalar(b):
                return False
            return self.pair.get(self.resolve(a, True)) is self.resolve(b, False)
        if isinstance(b, torch.fx.Node) and not _is_scalar(b):
            return False
        if isinstance(a, (list, tuple)):
            return isinstance(b, (list, tuple)) and type(a) is type(b) and len(a) == len(b) and \
                all(self.same_arg(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(self.same_arg(a[k], b[k]) for k in a)
        if isinstance(a, torch.fx.Node) or isinstance(b, torch.fx.Node) or isinstance(a, _SCALARS) or \
                isinstance(b, _SCALARS):
            if not isinstance(a, (torch.fx.Node, *_SCALARS)) or not isinstance(b, (torch.fx.Node, *_SCALARS)):
                return False
            return _same(self.scalar(a, True), self.scalar(b, False))
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return False  # (a tensor constant inlined into the arguments: not compared, not reused)
        return type(a) is type(b) and a == b

    def same_val(self, a, b) -> bool:
        va, vb = a.meta.get("val"), b.meta.get("val")
        if isinstance(va, torch.Tensor):
            return isinstance(vb, torch.Tensor) and va.dtype == vb.dtype and va.dim() == vb.dim() and \
                all(_same(x, y) for x, y in zip(self.shape(va, True), self.shape(vb, False)))
        if isinstance(va, (list, tuple)):
            if not isinstance(vb, (list, tuple)) or len(va) != len(vb):
                return False
            return all((x is None and y is None) or
                       (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype and
                        x.dim() == y.dim() and all(_same(p, q) for p, q in zip(self.shape(x, True),
                                                                             self.shape(y, False))))
                       for x, y in zip(va, vb))
        return va is None and vb is None

    def nodes(self) -> None:
        old, new = self.computing(self.old, True), self.computing(self.new, False)
        if len(old) != len(new):
            raise NoMatch(f"{len(old)} computing nodes against {len(new)}")
        for a, b in zip(old, new):
            if a.op != b.op or a.target != b.target:
                raise NoMatch(f"{a.name} ({a.target}) against {b.name} ({b.target})")
            if a.op == "output":
                if not self.same_arg(a.args, b.args):
                    raise NoMatch("the outputs differ")
                continue
            if a.op == "get_attr":
                if not _same_attr(self.old, a.target, self.new, b.target):
                    raise NoMatch(f"constant {a.target} differs")
            elif a.op != "call_function":
                raise NoMatch(f"{a.op} nodes are not compared")
            elif not self.same_arg(a.args, b.args) or not self.same_arg(a.kwargs, b.kwargs):
                raise NoMatch(f"{a.name}'s arguments differ from {b.name}'s")
            if not self.same_val(a, b):
                raise NoMatch(f"{a.name}'s result differs from {b.name}'s")
            self.pair[a] = b


def _same_attr(gm_a, name_a, gm_b, name_b) -> bool:
    def get(gm, name):
        obj = gm
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj
    a, b = get(gm_a, name_a), get(gm_b, name_b)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b))
    return a is b


def match(old: torch.fx.GraphModule, new: torch.fx.GraphModule) -> list:
    """How to run ``new`` with ``old``'s compiled form: per placeholder of ``old``, ("arg", i) (the new graph's
    argument i), ("size", n) (a number), ("dim", i, axis) or ("int", i) (a size read from argument i). Raises
    ``NoMatch`` unless ``new`` is ``old`` at other sizes, node for node (the module's docstring)."""
    m = _Matcher(old, new)
    arg_map = m.placeholders()
    m.nodes()
    return arg_map
