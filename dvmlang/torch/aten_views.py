"""More of the op table (``aten_ops.LOWERINGS``): views. A torch view is a fuser value with its dims grouped
(``lower.LVal``: each torch dim a run of the base's dims), so ``view``, ``permute``, ``expand``, ``unsqueeze`` and
``squeeze`` regroup, permute or broadcast the base, and ``slice``/``select``/``split`` are the fuser's slice views.
A view whose target no run of the base's dims gives is a real reshape (the fuser reads it through strides, or
copies it), and ``as_strided`` over a tensor torch stores contiguously is a reshape when it keeps the elements in
order, else a gather from the flat tensor at indices worked out from its static sizes and strides.
"""

from __future__ import annotations

import torch

from .. import dtypes as dt
from ..fuser import dims, ops
from .aten_ops import _identity, _Meta, lowers
from .lower import (MAX_RANK, LVal, Unsupported, _consecutive, _eq, _prod, expr_of, merge_parts, merged_runs, meta_shape,
                    number, parts_of, plain, rebase, result, run_sizes, torch_axes, view)

aten = torch.ops.aten


@lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(r, node, x, size):
    lv, target = r.operand(x), meta_shape(node)
    try:
        return result(r, node, *_lv(view(r, lv, target)))
    except Unsupported:  # (dims regrouped across the base's: rel_shift's (.., 17, 9) as (.., 9, 17)) a real reshape
        v = plain(r, lv)  # (copied when it is not a view: fuser/copies.py brings the copy's space to rank <= 4)
        return result(r, node, ops.reshape(v, tuple(r.dim(t) for t in target)))


def _lv(lv: LVal):
    return lv.v, lv.groups


@lowers(aten.permute.default)
def _permute(r, node, x, dims):
    lv = r.operand(x)
    dims = [d % lv.rank for d in dims]
    base = [a for d in dims for a in lv.groups[d]]
    v = ops.permute(lv.v, tuple(base)) if base != list(range(lv.v.ndim)) else lv.v
    return result(r, node, v, _consecutive([lv.groups[d] for d in dims]))


@lowers(aten.transpose.int)
def _transpose(r, node, x, d0, d1):
    rank = r.operand(x).rank
    perm = list(range(rank))
    perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return _permute(r, node, x, perm)


@lowers(aten.t.default)
def _t(r, node, x):
    return _permute(r, node, x, [1, 0]) if r.operand(x).rank == 2 else _identity(r, node, x)


@lowers(aten.unsqueeze.default)
def _unsqueeze(r, node, x, d):
    lv = r.operand(x)
    ps = parts_of(r, lv)
    d = d % (lv.rank + 1)
    return result(r, node, *_lv(rebase(r, lv, ps[:d] + [[]] + ps[d:])))


@lowers(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(r, node, x, dims=None):
    lv = r.operand(x)
    ps = parts_of(r, lv)
    ax = set(torch_axes(lv, dims)) if dims is not None else set(range(lv.rank))
    keep = [p for i, p in enumerate(ps) if not (i in ax and all(isinstance(e, int) and e == 1 for e in p))]
    return result(r, node, *_lv(rebase(r, lv, keep)))


@lowers(aten.expand.default)
def _expand(r, node, x, size, implicit=False):
    lv = r.operand(x)
    target = meta_shape(node)
    ps = parts_of(r, lv)
    ps = [[]] * (len(target) - len(ps)) + ps
    new = []
    for p, t in zip(ps, target):
        if all(isinstance(e, int) and e == 1 for e in p) and not (isinstance(t, int) and t == 1):
            new.append(merge_parts(r, [[t]])[0] if True else None)
        else:
            new.append(p)
    base = rebase(r, lv, [[1] * len(n) if all(isinstance(e, int) and e == 1 for e in p) else p
                          for p, n in zip(ps, new)], keep_units=True)
    shape = tuple(r.dim(e) for n in new for e in n)
    v = base.v if [r.g.syms.find(d) for d in base.v.shape] == [r.g.syms.find(d) for d in shape] else \
        ops.broadcast_to(base.v, shape) if len(shape) <= MAX_RANK else _merged_broadcast(r, base.v, shape)
    return result(r, node, v, _consecutive(new))


def _merged_broadcast(r, v, shape):
    """``v`` broadcast to ``shape`` of rank > ``MAX_RANK`` (the fuser computes on ranks <= 4): the runs of adjacent
    dims that all broadcast, or all do not, merged; the broadcast on that, viewed back (a repeat_interleave's
    rank-5 expand)."""
    find = r.g.syms.find
    runs = merged_runs([find(a) == 1 and find(b) != 1 for a, b in zip(v.shape, shape)],
                       f"an expand to rank {len(shape)} along alternating dims")
    out = ops.broadcast_to(ops.reshape(v, tuple(run_sizes(r.g.syms, v.shape, runs))),
                           tuple(run_sizes(r.g.syms, shape, runs)))
    return ops.reshape(out, tuple(shape))


def _bound(r, b, size):
    """A slice bound as the fuser takes it: None, an int (torch clamps to the dim: so do we where it is static) or
    a fuser dim for a SymInt."""
    if b is None:
        return None
    if isinstance(b, torch.fx.Node):
        return r.dim_expr(expr_of(b.meta["val"]))
    b = number(b)
    if isinstance(size, int):
        b = max(-size, min(b, size))
        return b + size if b < 0 else b
    return None if b >= 2 ** 62 else b


def _shape_of(lv, r):
    return [_prod(p) for p in parts_of(r, lv)]


@lowers(aten.slice.Tensor)
def _slice(r, node, x, dim=0, start=None, end=None, step=1):
    lv = r.operand(x)
    dim = dim % lv.rank
    size = _shape_of(lv, r)[dim]
    want = meta_shape(node)[dim]
    if step == 1 and not isinstance(size, int) and _eq(want, size):
        # torch clamped the bounds to the whole dim (a sliding window's x[s - 4096:] of a short x): no bound is
        # made a size (a derived size is evaluated at every call, and this one would be negative)
        return result(r, node, lv.v, lv.groups)
    b0, b1 = _bound(r, start, size), _bound(r, end, size)
    if b0 in (None, 0) and step == 1 and (b1 is None or (isinstance(size, int) and b1 == size)):
        return result(r, node, lv.v, lv.groups)
    if not isinstance(size, int) and isinstance(b0, int) and b0 < 0 and step == 1 and b1 is None and \
            not _eq(want, -b0):
        raise Unsupported(f"a slice from {b0} of a symbolic dim torch sizes {want} (a clamped bound)")
    v = plain(r, lv)
    return result(r, node, ops.slice(v, dim, b0, b1, number(step)))


@lowers(aten.select.int)
def _select(r, node, x, dim, index):
    lv = r.operand(x)
    return result(r, node, ops.select(plain(r, lv), dim % lv.rank, number(index)))


@lowers(aten.split_with_sizes.default, aten.split.Tensor)
def _split(r, node, x, sizes, dim=0):
    lv = r.operand(x)
    v = plain(r, lv)
    dim = dim % lv.rank
    outs, metas = [], node.meta["val"]
    lengths = [expr_of(m.shape[dim]) for m in metas]
    start = 0
    for m, n in zip(metas, lengths):
        stop = r.dim_expr(n) if isinstance(start, int) and start == 0 else \
            dims.arith(r.g.syms, "+", start, r.dim_expr(n))
        outs.append(result(r, _Meta(m), ops.slice(v, dim, start, stop)))
        start = stop
    return tuple(outs)


@lowers(aten.as_strided.default)
def _as_strided(r, node, x, size, stride, storage_offset=None):
    t = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(t, torch.Tensor) or not t.is_contiguous():
        raise Unsupported("as_strided of a tensor torch does not store contiguously")
    ints = [*size, *stride, t.numel(), t.storage_offset(), 0 if storage_offset is None else storage_offset]
    if not all(isinstance(v, int) for v in ints):
        raise Unsupported("as_strided with symbolic sizes, strides or offset")
    n, total = t.numel(), 1
    for s_ in size:
        total *= s_
    off = 0 if storage_offset is None else storage_offset - t.storage_offset()  # (from x's first element)
    last = off + sum((s_ - 1) * st for s_, st in zip(size, stride) if s_ > 0)
    first = off + sum((s_ - 1) * st for s_, st in zip(size, stride) if s_ > 0 and st < 0)
    if total == 0 or first < 0 or last >= n:
        raise Unsupported("as_strided reading outside the tensor, or of no element")
    return result(r, node, _strided_read(r, plain(r, r.operand(x)), n, size, stride, off))


def _strided_read(r, v, n: int, size, stride, off: int):
    """The elements of ``v`` (``n`` of them, in row-major order) at ``off + sum(i_k * stride_k)`` for every index of
    ``size`` (static): a reshape when they are all of them in order, else a gather from the flat value."""
    total = 1
    for s_ in size:
        total *= s_
    inner, in_order = 1, off == 0 and total == n
    for s_, st in reversed(list(zip(size, stride))):
        in_order = in_order and (s_ == 1 or st == inner)
        inner *= s_
    if in_order:  # (the elements in order: a view)
        return ops.reshape(v, tuple(size))
    q = r.g.node("iota", [], (total,), dt.int32, {"axis": 0})
    idx, inner = None, total
    for s_, st in zip(size, stride):
        inner //= s_
        if s_ == 1 or st == 0:
            continue
        term = ops.mul(ops.remainder(ops.floor_divide(q, inner), s_), st)
        idx = term if idx is None else ops.add(idx, term)
    idx = ops.add(ops.mul(q, 0), off) if idx is None else ops.add(idx, off) if off else idx
    return ops.reshape(ops.index_select(ops.reshape(v, (n,)), 0, idx), tuple(size))


@lowers(aten.diagonal.default)
def _diagonal(r, node, x, offset=0, dim1=0, dim2=1):
    """A diagonal of the value in row-major order (torch's view of it), at static sizes (``_strided_read``)."""
    shape = meta_shape(x)
    if not all(isinstance(d, int) for d in shape):
        raise Unsupported("a diagonal of a tensor of symbolic sizes")
    rank = len(shape)
    d1, d2 = dim1 % rank, dim2 % rank
    st, acc = [0] * rank, 1
    for k in reversed(range(rank)):
        st[k], acc = acc, acc * shape[k]
    out = meta_shape(node)
    keep = [k for k in range(rank) if k not in (d1, d2)]
    off = offset * st[d2] if offset >= 0 else -offset * st[d1]
    if out[-1] == 0 or acc == 0:
        raise Unsupported("an empty diagonal")
    return result(r, node, _strided_read(r, plain(r, r.operand(x)), acc, [shape[k] for k in keep] + [out[-1]],
                                         [st[k] for k in keep] + [st[d1] + st[d2]], off))
