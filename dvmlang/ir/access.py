"""Access analysis: turn pointer-tile loads and stores into DMA descriptors where the offsets are affine.

An offset tile built from ``arange``, scalars, broadcasts and ``+ - *`` by uniform values is affine:
``base + sum_d i_d * stride_d`` over the tile's index space. A mask built from ``&`` of comparisons
between one such index and a uniform bound is a box ``lo_d <= i_d < hi_d``. An access with both
becomes ``dma_load`` / ``dma_store`` (contiguous bursts, tails by box); anything else stays a
``gather`` / ``scatter`` and the frontend warns with the source line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from .builder import Builder
from .core import Block, Function, Op, ScalarType, TileType, Value

Term = int | Value  # a uniform (per-program) integer: a constant or a scalar IR value


@dataclass
class Affine:
    base: Term
    coeffs: list[Term]  # one per tile dim; 0 where the offset does not vary along that dim


class _NotAffine(Exception):
    pass


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
        mapping = _dim_map(src.type.shape, vshape)
        coeffs = [0] * rank
        for a, c in enumerate(inner.coeffs):
            if src.type.shape[a] != 1:
                coeffs[lead + mapping[a]] = c
        return Affine(inner.base, coeffs)
    if k in ("binary",):
        name = op.attrs["op"]
        a, b = op.operands
        if name in ("add", "sub"):
            fa, fb = _affine(a, shape, em), _affine(b, shape, em)
            f = em.add if name == "add" else em.sub
            return Affine(f(fa.base, fb.base), [f(x, y) for x, y in zip(fa.coeffs, fb.coeffs)])
        if name == "mul":
            fa, fb = _affine(a, shape, em), _affine(b, shape, em)
            if all(c == 0 for c in fb.coeffs):
                s = fb.base
                return Affine(em.mul(fa.base, s), [em.mul(c, s) for c in fa.coeffs])
            if all(c == 0 for c in fa.coeffs):
                s = fa.base
                return Affine(em.mul(fb.base, s), [em.mul(c, s) for c in fb.coeffs])
    raise _NotAffine


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


def analyse_accesses(fn: Function, on_gather=None) -> None:
    """Rewrite ``load``/``store`` into ``dma_load``/``dma_store`` where the access is affine, and into
    ``gather``/``scatter`` otherwise (calling ``on_gather(op, reason)`` for each of those)."""
    _walk(fn.body, fn, on_gather)


def _walk(block: Block, fn: Function, on_gather) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        for r in op.regions:
            _walk(r, fn, on_gather)
        if op.kind in ("load", "store"):
            new_ops = _rewrite(op, fn, on_gather)
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
        aff = _affine(offsets, shape, em)
        box = Box([None] * len(shape), [None] * len(shape))
        if mask is not None:
            try:
                _mask_box(mask, shape, em, box)
            except _NotAffine:
                reason = "its mask is not a box of index bounds"
                raise
    except _NotAffine:
        if reason is None and shape:
            reason = "its offsets are not affine in the tile indices"
        scratch.ops.clear()
        kind = "scatter" if is_store else "gather"
        new = Op(kind, list(op.operands), [r.type for r in op.results], dict(op.attrs), loc=op.loc)
        new.results = op.results
        for r in new.results:
            r.op = new
        if shape and on_gather is not None:
            on_gather(op, reason)
        return [new]
    lo = [x if x is not None else 0 for x in box.lo]
    hi = [x if x is not None else s for x, s in zip(box.hi, shape)]
    operands = [em.val(aff.base)] + [em.val(c) for c in aff.coeffs] + [em.val(x) for x in lo] + \
               [em.val(x) for x in hi]
    attrs = {"tensor": op.attrs["tensor"], "shape": shape, "rank": len(shape), "has_other": other is not None}
    if is_store:
        new = Op("dma_store", operands + [value], [], attrs, loc=op.loc)
    else:
        if other is not None:
            operands.append(other)
        new = Op("dma_load", operands, [r.type for r in op.results], attrs, loc=op.loc)
        new.results = op.results
        for r in new.results:
            r.op = new
    return scratch.ops + [new]
