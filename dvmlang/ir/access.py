"""Access analysis: turn pointer-tile loads and stores into DMA descriptors where the offsets are affine.

An offset tile built from ``arange``, scalars, broadcasts and ``+ - *`` by uniform values is affine:
``base + sum_d i_d * stride_d`` over the tile's index space. A mask built from ``&`` of comparisons
between one such index and a uniform bound is a box ``lo_d <= i_d < hi_d``. An access with both
becomes ``dma_load`` / ``dma_store`` (contiguous bursts, tails by box); anything else stays a
``gather`` / ``scatter`` and the frontend warns with the source line, naming the expression that is not
affine and the rewrite.

Wrapped and clamped edges are affine in pieces. Triton's ``(pid * BLOCK + arange(0, BLOCK)) % M`` (tutorial
03's row offsets), ``tl.where(offs < M, offs, 0)``, ``tl.minimum(offs, M - 1)`` and ``tl.maximum(offs, 0)``
are an affine index along one dim up to a split point and another affine index after it (a *piece*: from
``i_d >= split`` on, the offset changes by another affine form). An access with pieces is one DMA per piece
of the box: the first writes the tile (``other`` outside its box), each next one writes only its own box
into the same tile (``dma_load`` with ``into``; ``DMA_LOAD*`` with ``keep``). Exactly the same elements are
read: a wrapped row really reads row ``i % M``. A wrap is two pieces only when the index starts at or above
0 and wraps at most once (``r0 + c * (n - 1) < 2 * M`` for ``r0 = start % M``), which holds for any block
of a matrix of at least ``n`` rows; otherwise (a runtime ``if``) the access is the gather it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtypes as dt
from ..errors import source_line
from .builder import Builder
from .core import Block, Function, Op, ScalarType, TileType, Value

Term = int | Value  # a uniform (per-program) integer: a constant or a scalar IR value
MAX_PIECES = 2  # split dims per access (2**MAX_PIECES DMAs)


@dataclass
class Piece:
    """From ``i_dim >= split`` on, the offset is the access's affine form plus ``base + sum_d coeffs[d] * i_d``."""

    dim: int
    split: Term
    base: Term
    coeffs: list[Term]


@dataclass
class Affine:
    base: Term
    coeffs: list[Term]  # one per tile dim; 0 where the offset does not vary along that dim
    pieces: list[Piece] = field(default_factory=list)
    guards: list[Value] = field(default_factory=list)  # scalar conditions the pieces need (else: gather)


class _NotAffine(Exception):
    """``op``: the expression that is not affine (None: the offsets as a whole); ``why``: what it does and
    the rewrite, for the warning."""

    def __init__(self, op: Op | None = None, why: str = ""):
        super().__init__(why)
        self.op = op
        self.why = why


class _Emitter:
    """Scalar arithmetic on terms, folded when constant, emitted before the access otherwise."""

    def __init__(self, builder: Builder, dtype: dt.DType):
        self.b = builder
        self.dtype = dtype

    def val(self, t: Term) -> Value:
        if isinstance(t, int):
            return self.b.const(t, self.dtype)
        if t.dtype is not self.dtype:
            return self.b.cast(t, self.dtype)
        return t

    def add(self, x: Term, y: Term) -> Term:
        if isinstance(x, int) and isinstance(y, int):
            return x + y
        if x == 0:
            return y
        if y == 0:
            return x
        return self.b.binary("add", self.val(x), self.val(y), self.dtype)

    def sub(self, x: Term, y: Term) -> Term:
        if isinstance(x, int) and isinstance(y, int):
            return x - y
        if y == 0:
            return x
        return self.b.binary("sub", self.val(x), self.val(y), self.dtype)

    def mul(self, x: Term, y: Term) -> Term:
        if isinstance(x, int) and isinstance(y, int):
            return x * y
        if x == 0 or y == 0:
            return 0
        if x == 1:
            return y
        if y == 1:
            return x
        return self.b.binary("mul", self.val(x), self.val(y), self.dtype)

    def minimum(self, x: Term | None, y: Term) -> Term:
        if x is None:
            return y
        if isinstance(x, int) and isinstance(y, int):
            return min(x, y)
        return self.b.binary("minimum", self.val(x), self.val(y), self.dtype)

    def maximum(self, x: Term | None, y: Term) -> Term:
        if x is None:
            return y
        if isinstance(x, int) and isinstance(y, int):
            return max(x, y)
        return self.b.binary("maximum", self.val(x), self.val(y), self.dtype)

    def cdiv(self, x: Term, c: int) -> Term:
        if isinstance(x, int):
            return -(-x // c)
        if c == 1:
            return x
        return self.b.binary("floordiv", self.val(self.add(x, c - 1)), self.val(c), self.dtype)


def _align(shape: tuple[int, ...], rank: int) -> int:
    return rank - len(shape)


def _affine(v: Value, shape: tuple[int, ...], em: _Emitter) -> Affine:
    """The affine form of ``v`` broadcast to ``shape`` (raises _NotAffine)."""
    try:
        return _affine_form(v, shape, em)
    except _NotAffine:
        if isinstance(v.type, TileType) and all(s == 1 for s in v.type.shape) and \
                (v.dtype.is_int or v.dtype.is_bool) and len(v.type.shape) <= len(shape):
            # a one-element tile (a reduction result, say) is the same for every element: read it into a
            # scalar register and address with that
            one = v if v.type.shape == () else em.b.reshape(v, ())
            return Affine(em.b.to_scalar(one), [0] * len(shape))
        raise


def _uniform(f: Affine) -> bool:
    return not f.pieces and all(c == 0 for c in f.coeffs)


def _scale(f: Affine, s: Term, em: _Emitter) -> Affine:
    return Affine(em.mul(f.base, s), [em.mul(c, s) for c in f.coeffs],
                  [Piece(p.dim, p.split, em.mul(p.base, s), [em.mul(c, s) for c in p.coeffs]) for p in f.pieces],
                  f.guards)


def _combine(fa: Affine, fb: Affine, name: str, em: _Emitter) -> Affine:
    """``fa + fb`` or ``fa - fb`` with their pieces (a dim split at two different points is not affine)."""
    f = em.add if name == "add" else em.sub
    pieces = list(fa.pieces)
    for p in fb.pieces:
        q = p if name == "add" else Piece(p.dim, p.split, em.sub(0, p.base), [em.sub(0, c) for c in p.coeffs])
        same = next((i for i, x in enumerate(pieces) if x.dim == q.dim), None)
        if same is None:
            pieces.append(q)
            continue
        x = pieces[same]
        if x.split is not q.split and not (isinstance(x.split, int) and x.split == q.split):
            raise _NotAffine(None, "two wrapped or clamped indices split the same tile dim at different points")
        pieces[same] = Piece(x.dim, x.split, em.add(x.base, q.base), [em.add(a, b) for a, b in zip(x.coeffs, q.coeffs)])
    if len(pieces) > MAX_PIECES:
        raise _NotAffine(None, f"more than {MAX_PIECES} tile dims have wrapped or clamped indices")
    return Affine(f(fa.base, fb.base), [f(x, y) for x, y in zip(fa.coeffs, fb.coeffs)], pieces,
                  fa.guards + fb.guards)


def _one_dim(f: Affine, op: Op, what: str) -> tuple[int, int]:
    """(dim, positive constant coefficient) of an index that varies along one dim and has no pieces."""
    varying = [d for d, c in enumerate(f.coeffs) if c != 0]
    if f.pieces or len(varying) != 1 or not isinstance(f.coeffs[varying[0]], int) or f.coeffs[varying[0]] <= 0:
        raise _NotAffine(op, f"{what} of an index that is not `start + c * arange(...)` along one dim (c a "
                             "positive constant)")
    return varying[0], f.coeffs[varying[0]]


def _wrap(op: Op, v: Value, shape, em: _Emitter) -> Affine:
    """``(start + c*i) % m``: ``r0 + c*i`` below the split ``cdiv(m - r0, c)``, ``r0 + c*i - m`` from it on."""
    a, b = op.operands
    fa, fm = _affine(a, shape, em), _affine(b, shape, em)
    if not _uniform(fm):
        raise _NotAffine(op, "`%` by a divisor that varies across the tile; compute it per program (a scalar)")
    d, c = _one_dim(fa, op, "`%`")
    m = fm.base
    r0 = em.b.binary("mod", em.val(fa.base), em.val(m), em.dtype)
    n = shape[d]
    ok = em.b.binary("and", em.b.compare("ge", em.val(fa.base), em.val(0)), em.b.compare("gt", em.val(m), em.val(0)),
                     dt.bool_)
    last = em.add(r0, c * (n - 1))
    ok = em.b.binary("and", ok, em.b.compare("lt", em.val(em.sub(last, m)), em.val(m)), dt.bool_)  # wraps once
    split = em.cdiv(em.sub(m, r0), c)
    coeffs = [0] * len(shape)
    coeffs[d] = c
    zeros = [0] * len(shape)
    return Affine(r0, coeffs, [Piece(d, split, em.sub(0, m), zeros)], fa.guards + fm.guards + [ok])


def _clamp_select(op: Op, shape, em: _Emitter) -> Affine:
    """``where(cond, x, y)`` with ``cond`` one bound on one dim: ``x`` on one side of the split, ``y`` on the other."""
    cond, x, y = op.operands
    fx, fy = _affine(x, shape, em), _affine(y, shape, em)
    if fx.pieces or fy.pieces:
        raise _NotAffine(op, "`where` of indices that already wrap or clamp")
    box = Box([None] * len(shape), [None] * len(shape))
    try:
        _mask_box(cond, shape, em, box)
    except _NotAffine:
        raise _NotAffine(op, "`where` whose condition is not a bound on one index (`offs < n`, `offs >= 0`)") \
            from None
    bounds = [(d, lo, hi) for d, (lo, hi) in enumerate(zip(box.lo, box.hi)) if lo is not None or hi is not None]
    if len(bounds) != 1 or (bounds[0][1] is not None and bounds[0][2] is not None):
        raise _NotAffine(op, "`where` whose condition bounds the index on both sides or along several dims")
    d, lo, hi = bounds[0]
    if hi is not None:  # x below hi, y from it on
        first, second, split = fx, fy, hi
    else:  # y below lo, x from it on
        first, second, split = fy, fx, lo
    delta = Piece(d, split, em.sub(second.base, first.base), [em.sub(q, p) for p, q in zip(first.coeffs, second.coeffs)])
    return Affine(first.base, first.coeffs, [delta], fx.guards + fy.guards)


def _clamp_minmax(op: Op, shape, em: _Emitter) -> Affine:
    """``minimum(x, u)`` / ``maximum(x, u)`` of an index ``x = b + c*i`` (one dim) and a uniform ``u``."""
    name = _MINMAX[op.attrs["op"]]
    a, b = op.operands
    fa, fb = _affine(a, shape, em), _affine(b, shape, em)
    if _uniform(fa) and not _uniform(fb):
        fa, fb = fb, fa
    if not _uniform(fb):
        raise _NotAffine(op, f"`{name}` of two indices that both vary across the tile")
    d, c = _one_dim(fa, op, f"`{name}`")
    u = fb.base
    gap = em.sub(u, fa.base)  # x <= u  <=>  c*i <= gap
    zeros = [0] * len(shape)
    neg = [0] * len(shape)
    neg[d] = -c
    if name == "minimum":  # x up to floor(gap / c), then u
        split = _floordiv(em, gap, c, plus=1)
        return Affine(fa.base, fa.coeffs, [Piece(d, split, gap, neg)], fa.guards + fb.guards)
    split = em.cdiv(gap, c)  # u below cdiv(gap, c), then x
    return Affine(u, zeros, [Piece(d, split, em.sub(0, gap), [-x for x in neg])], fa.guards + fb.guards)


def _affine_form(v: Value, shape: tuple[int, ...], em: _Emitter) -> Affine:
    rank = len(shape)
    if isinstance(v.type, ScalarType):
        if not (v.dtype.is_int or v.dtype.is_bool):
            raise _NotAffine
        return Affine(v, [0] * rank)
    op = v.op
    if op is None:
        raise _NotAffine
    vshape = v.type.shape
    lead = _align(vshape, rank)
    if lead < 0:
        raise _NotAffine
    k = op.kind
    if k == "arange":
        coeffs = [0] * rank
        if vshape[0] != 1:
            coeffs[lead] = 1
        return Affine(op.attrs["start"], coeffs)
    if k == "full":
        return _affine(op.operands[0], shape, em)
    if k == "cast" and not op.attrs["bitcast"] and v.dtype.is_int and op.operands[0].dtype.is_int:
        return _affine(op.operands[0], shape, em) if op.operands[0].is_tile else Affine(op.operands[0], [0] * rank)
    if k in ("broadcast", "reshape"):
        src = op.operands[0]
        inner = _affine(src, src.type.shape, em)
        try:
            mapping = _dim_map(src.type.shape, vshape)
        except _NotAffine:
            raise _NotAffine(op, "a reshape that does more than add or drop unit dims") from None

        def spread(cs):
            out = [0] * rank
            for a, c in enumerate(cs):
                if src.type.shape[a] != 1:
                    out[lead + mapping[a]] = c
            return out
        pieces = []
        for p in inner.pieces:
            if src.type.shape[p.dim] == 1:
                raise _NotAffine(op, "a wrapped or clamped unit dim")
            pieces.append(Piece(lead + mapping[p.dim], p.split, p.base, spread(p.coeffs)))
        return Affine(inner.base, spread(inner.coeffs), pieces, inner.guards)
    if k == "select":
        return _clamp_select(op, shape, em)
    if k in ("binary",):
        name = op.attrs["op"]
        a, b = op.operands
        if name in ("add", "sub"):
            return _combine(_affine(a, shape, em), _affine(b, shape, em), name, em)
        if name == "mul":
            fa, fb = _affine(a, shape, em), _affine(b, shape, em)
            if _uniform(fb):
                return _scale(fa, fb.base, em)
            if _uniform(fa):
                return _scale(fb, fa.base, em)
            raise _NotAffine(op, "`*` of two values that both vary across the tile")
        if name == "mod":
            return _wrap(op, v, shape, em)
        if name in _MINMAX:
            return _clamp_minmax(op, shape, em)
        raise _NotAffine(op, _HINTS.get(name, f"the integer op `{name}` on the index"))
    if k in ("load", "gather", "dma_load"):
        raise _NotAffine(op, "offsets loaded from memory (an indirect access: a gather by design)")
    raise _NotAffine(op, f"`{k}` on the index")


_MINMAX = {"minimum": "minimum", "fmin": "minimum", "maximum": "maximum", "fmax": "maximum"}  # same on integers
_HINTS = {
    "div": "`//` of the index (a row/column split): index with two aranges, `rows[:, None] * stride + cols[None, :]`",
    "floordiv": "`//` of the index: index with two aranges, `rows[:, None] * stride + cols[None, :]`",
    "and": "`&` on the index; mask instead (`mask=offs < n`)",
    "shl": "`<<` on the index; multiply by a power of 2 instead",
}


def _dim_map(src: tuple[int, ...], view: tuple[int, ...]) -> dict[int, int]:
    """Where each non-unit dim of ``src`` lands in ``view`` for a broadcast (right-aligned) or a reshape
    that only inserts or removes unit dims (raises _NotAffine for anything else)."""
    off = len(view) - len(src)
    if off >= 0 and all(s == 1 or view[off + i] == s for i, s in enumerate(src)):
        return {i: off + i for i, s in enumerate(src) if s != 1}
    src_dims = [i for i, s in enumerate(src) if s != 1]
    view_dims = [i for i, s in enumerate(view) if s != 1]
    if [src[i] for i in src_dims] != [view[i] for i in view_dims]:
        raise _NotAffine
    return dict(zip(src_dims, view_dims))


@dataclass
class Box:
    lo: list[Term | None]
    hi: list[Term | None]


def _mask_box(m: Value, shape: tuple[int, ...], em: _Emitter, box: Box) -> None:
    """Narrow ``box`` by mask ``m`` (raises _NotAffine when the mask is not a box)."""
    rank = len(shape)
    if isinstance(m.type, ScalarType):
        _uniform_predicate(m, shape, em, box)
        return
    op = m.op
    if op is None:
        raise _NotAffine
    k = op.kind
    if k == "binary" and op.attrs["op"] == "and":
        _mask_box(op.operands[0], shape, em, box)
        _mask_box(op.operands[1], shape, em, box)
        return
    if k == "full":
        _uniform_predicate(op.operands[0], shape, em, box)
        return
    if k in ("broadcast", "reshape"):
        src = op.operands[0]
        sub = Box([None] * len(src.shape), [None] * len(src.shape))
        _mask_box(src, src.shape, em, sub)
        view = m.type.shape
        lead = rank - len(view)
        if lead < 0:
            raise _NotAffine
        mapping = _dim_map(src.shape, view)
        for a, s in enumerate(src.shape):
            if sub.lo[a] is None and sub.hi[a] is None:
                continue
            if s == 1:
                # a unit dimension that is masked on or off masks the whole tile on or off
                lo = sub.lo[a] if sub.lo[a] is not None else 0
                hi = sub.hi[a] if sub.hi[a] is not None else 1
                if isinstance(lo, int) and isinstance(hi, int):
                    if not lo <= 0 < hi:
                        _merge(box, 0, None, 0, em)
                    continue
                ok = em.b.binary("and", em.b.compare("le", em.val(lo), em.val(0)),
                                 em.b.compare("gt", em.val(hi), em.val(0)), dt.bool_)
                _merge(box, 0, None, em.b.select(ok, em.val(shape[0]), em.val(0)), em)
                continue
            _merge(box, lead + mapping[a], sub.lo[a], sub.hi[a], em)
        return
    if k == "compare":
        a, b = op.operands
        cc = op.attrs["op"]
        fa = _affine(a, shape, em)
        fb = _affine(b, shape, em)
        if fa.pieces or fb.pieces or fa.guards or fb.guards:
            raise _NotAffine(op, "a mask on a wrapped or clamped index; mask the unwrapped index instead")
        varying = [i for i in range(rank) if fa.coeffs[i] != 0 or fb.coeffs[i] != 0]
        if not varying:
            _uniform_predicate(em.b.compare(cc, em.val(fa.base), em.val(fb.base)), shape, em, box)
            return
        if len(varying) != 1:
            raise _NotAffine
        d = varying[0]
        # Normalise to  base + c*i  <cc>  0  with c a positive constant.
        c = em.sub(fa.coeffs[d], fb.coeffs[d])
        if not isinstance(c, int) or c == 0:
            raise _NotAffine
        # the condition is  c*i <cc> neg  with  neg = b.base - a.base
        if c > 0:
            neg = em.sub(fb.base, fa.base)
        else:
            c, neg = -c, em.sub(fa.base, fb.base)
            cc = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}[cc]
        if cc == "lt":
            _merge(box, d, None, em.cdiv(neg, c), em)
        elif cc == "le":
            _merge(box, d, None, em.cdiv(em.add(neg, 1), c), em)
        elif cc == "gt":
            # c*i > neg  <=>  i >= floor(neg / c) + 1
            _merge(box, d, _floordiv(em, neg, c, plus=1), None, em)
        elif cc == "ge":
            _merge(box, d, em.cdiv(neg, c), None, em)
        else:
            raise _NotAffine
        return
    raise _NotAffine


def _floordiv(em: _Emitter, x: Term, c: int, plus: int = 0) -> Term:
    if isinstance(x, int):
        return x // c + plus
    q = x if c == 1 else em.b.binary("floordiv", em.val(x), em.val(c), em.dtype)
    return em.add(q, plus)


def _uniform_predicate(m: Value, shape, em: _Emitter, box: Box) -> None:
    """A scalar condition that masks the whole tile on or off (folded into the bound of dim 0)."""
    if not shape or isinstance(m.type, TileType):
        raise _NotAffine
    if m.op is not None and m.op.kind == "const":
        if not m.op.attrs["value"]:
            _merge(box, 0, None, 0, em)
        return
    _merge(box, 0, None, em.b.select(m, em.val(shape[0]), em.val(0)), em)


def _merge(box: Box, d: int, lo: Term | None, hi: Term | None, em: _Emitter) -> None:
    if lo is not None:
        box.lo[d] = em.maximum(box.lo[d], lo)
    if hi is not None:
        box.hi[d] = em.minimum(box.hi[d], hi)


def analyse_accesses(fn: Function, on_gather=None) -> int:
    """Rewrite ``load``/``store`` into ``dma_load``/``dma_store`` where the access is affine, and into
    ``gather``/``scatter`` otherwise (calling ``on_gather(op, reason)`` for each of those). Returns how many
    accesses became guarded DMAs: each recomputes its fallback gather's offsets inside the fallback branch,
    so the originals are dead and must be removed (DCE) before CSE would merge the copies back into them."""
    guarded = [0]
    _walk(fn.body, fn, on_gather, guarded)
    return guarded[0]


def _walk(block: Block, fn: Function, on_gather, guarded) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        for r in op.regions:
            _walk(r, fn, on_gather, guarded)
        if op.kind in ("load", "store"):
            new_ops = _rewrite(op, fn, on_gather)
            guarded[0] += any(o.kind == "if" for o in new_ops)
            block.ops[i:i + 1] = new_ops
            for o in new_ops:
                o.parent = block
            i += len(new_ops)
            continue
        i += 1


def _rewrite(op: Op, fn: Function, on_gather) -> list[Op]:
    scratch = Block()
    b = Builder(scratch)
    b.loc = op.loc
    offsets = op.operands[0]
    is_store = op.kind == "store"
    rest = op.operands[1:]
    value = rest[0] if is_store else None
    if is_store:
        rest = rest[1:]
    mask = rest[0] if op.attrs["has_mask"] else None
    other = None
    if not is_store and op.attrs.get("has_other"):
        other = rest[1] if mask is not None else rest[0]
    if isinstance(offsets.type, ScalarType):
        shape: tuple[int, ...] = ()
    else:
        shape = offsets.type.shape
    odt = offsets.dtype if offsets.dtype.is_int else dt.int32
    em = _Emitter(b, dt.int64 if odt is dt.int64 or odt is dt.uint64 else dt.int32)
    reason = None
    try:
        if not shape:
            raise _NotAffine
        try:
            aff = _affine(offsets, shape, em)
        except _NotAffine as e:
            reason = _offsets_reason(e)
            raise
        box = Box([None] * len(shape), [None] * len(shape))
        if mask is not None:
            try:
                _mask_box(mask, shape, em, box)
            except _NotAffine as e:
                reason = _mask_reason(e)
                raise
    except _NotAffine:
        scratch.ops.clear()
        if shape and on_gather is not None:
            on_gather(op, reason)
        return [_as_gather(op, list(op.operands))]
    regions = _regions(aff, box, shape, em)
    if not aff.guards:
        dmas = _dma_ops(op, regions, value, other, em, shape, op.results)
        return scratch.ops + dmas
    # the pieces are exact only under their guards (a wrap that starts below 0 or wraps twice): else the gather
    ok = aff.guards[0]
    for g in aff.guards[1:]:
        ok = b.binary("and", ok, g, dt.bool_)
    then_b, else_b = Block(), Block()
    inner = Builder(then_b)
    inner.loc = op.loc
    em_in = _Emitter(inner, em.dtype)
    results = [Value(r.type) for r in op.results]
    dmas = _dma_ops(op, regions, value, other, em_in, shape, results)
    then_b.ops.extend(dmas)
    for o in then_b.ops:
        o.parent = then_b
    inner.yield_(results)
    memo: dict[int, Value] = {}
    gb = Builder(else_b)
    gb.loc = op.loc
    g = gb.block.append(_as_gather(op, [_clone(v, gb, memo) for v in op.operands], fresh=True))
    gb.yield_(list(g.results))
    iff = Op("if", [ok], [r.type for r in op.results], regions=[then_b, else_b], loc=op.loc)
    iff.results = op.results
    for r in iff.results:
        r.op = iff
    return scratch.ops + [iff]


def _as_gather(op: Op, operands: list[Value], fresh: bool = False) -> Op:
    kind = "scatter" if op.kind == "store" else "gather"
    new = Op(kind, operands, [r.type for r in op.results], dict(op.attrs), loc=op.loc)
    if not fresh:
        new.results = op.results
        for r in new.results:
            r.op = new
    return new


_CLONABLE = frozenset({"binary", "compare", "select", "arange", "full", "broadcast", "reshape", "cast", "unary"})


def _clone(v: Value, b: Builder, memo: dict) -> Value:
    """``v`` recomputed in ``b``'s block when it is a tile of pure index arithmetic (so the fast path does not
    compute the gather's offsets); any other value is used as it is."""
    op = v.op
    if not isinstance(v.type, TileType) or op is None or op.kind not in _CLONABLE or op.regions:
        return v
    got = memo.get(v.id)
    if got is None:
        new = b.block.append(Op(op.kind, [_clone(x, b, memo) for x in op.operands], [v.type], dict(op.attrs),
                                loc=op.loc))
        got = memo[v.id] = new.result
    return got


def _regions(aff: Affine, box: Box, shape, em: _Emitter) -> list[tuple[Box, Affine]]:
    """One (box, affine form) per piece of the access: every element of the mask's box is in exactly one."""
    out = [(box, Affine(aff.base, list(aff.coeffs)))]
    for p in aff.pieces:
        nxt = []
        for bx, f in out:
            below = Box(list(bx.lo), list(bx.hi))
            _merge(below, p.dim, None, p.split, em)
            above = Box(list(bx.lo), list(bx.hi))
            _merge(above, p.dim, p.split, None, em)
            nxt.append((below, f))
            nxt.append((above, Affine(em.add(f.base, p.base), [em.add(x, y) for x, y in zip(f.coeffs, p.coeffs)])))
        out = nxt
    return out


def _dma_ops(op: Op, regions, value, other, em: _Emitter, shape, results) -> list[Op]:
    """The DMA of each region (the scalar arithmetic they need is appended to ``em``'s block, to go first)."""
    is_store = op.kind == "store"
    ops: list[Op] = []
    prev = None
    for n, (box, aff) in enumerate(regions):
        lo = [x if x is not None else 0 for x in box.lo]
        hi = [x if x is not None else s for x, s in zip(box.hi, shape)]
        operands = [em.val(aff.base)] + [em.val(c) for c in aff.coeffs] + [em.val(x) for x in lo] + \
                   [em.val(x) for x in hi]
        attrs = {"tensor": op.attrs["tensor"], "shape": shape, "rank": len(shape), "has_other": False}
        if is_store:
            ops.append(Op("dma_store", operands + [value], [], attrs, loc=op.loc))
            continue
        last = n == len(regions) - 1
        if prev is None:
            attrs["has_other"] = other is not None
            if other is not None:
                operands.append(other)
        else:
            attrs["into"] = True
            operands.append(prev)
        new = Op("dma_load", operands, [r.type for r in results], attrs, loc=op.loc)
        if last:
            new.results = results
            for r in results:
                r.op = new
        prev = new.result
        ops.append(new)
    return ops


def _expr(op: Op | None) -> str:
    """The source text of ``op``'s expression, quoted, or "" when its location has no single-line span."""
    loc = op.loc if op is not None else None
    if loc is None or loc.end_line != loc.line or loc.end_col is None:
        return ""
    text = source_line(loc.file, loc.line)[loc.col:loc.end_col].strip()
    return f"`{text}` (line {loc.line}) " if text else ""


def _offsets_reason(e: _NotAffine) -> str:
    if not e.why:
        return "its offsets are not affine in the tile indices"
    return f"its offsets are not affine in the tile indices: {_expr(e.op)}is {e.why}"


def _mask_reason(e: _NotAffine) -> str:
    if not e.why:
        return "its mask is not a box of index bounds"
    return f"its mask is not a box of index bounds: {_expr(e.op)}is {e.why}"
