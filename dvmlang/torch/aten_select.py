"""More of the op table (``aten_ops.LOWERINGS``): ordering and counting (``sort``, ``topk``, ``histc``), the grouped
matmul of mixture-of-experts layers (torch's ``_grouped_mm`` and transformers' CPU ``grouped_mm_fallback`` with
its backward), uninitialised allocations, a recurrent layer (``mkldnn_rnn_layer``: ``nn.LSTM``), searches, and bags
and distances (``embedding_bag``, ``cdist``).

The sorted values are the ISA's ``VSORT`` (the fuser's ``sort`` graph op: a whole row in one tile). The
indices are ranks, written as comparisons (no data-dependent stores): along the sorted dim, element ``i``'s rank
is the number of elements ordered before it (smaller, or equal and earlier: a stable sort; NaN is the largest,
as torch), and position ``j`` takes the index whose rank is ``j``. That is an ``n x n`` tile per row on the
vector unit: right for the rows a router or a top-k sampler sorts (experts, candidates), not for long rows. The grouped matmul runs every expert's product on the cube, batched over the
experts, and keeps each row's own expert's.
"""

from __future__ import annotations

import torch

from .. import dtypes as dt
from ..fuser import ops
from .aten_ops import _Meta, lowers
from .lower import Unsupported, const, dvm_dtype, meta_shape, number, plain, result

aten = torch.ops.aten
BY_NAME: dict = {}  # "namespace::op" -> lowering, for ops of libraries that register themselves late


def lowers_by_name(*names):
    def deco(fn):
        for n in names:
            BY_NAME[n] = fn
        return fn
    return deco


def _last(v, d):
    if d == v.ndim - 1:
        return v, None
    perm = tuple(k for k in range(v.ndim) if k != d) + (d,)
    return ops.permute(v, perm), tuple(perm.index(k) for k in range(v.ndim))


def _before(a, b, descending: bool):
    """Whether ``a`` orders strictly before ``b`` (NaN the largest)."""
    if descending:
        a, b = b, a
    lt = ops.lt(a, b)
    if a.dtype.is_float:
        lt = ops.logical_or(lt, ops.logical_and(ops.ne(b, b), ops.eq(a, a)))
    return lt


def _same(a, b):
    eq = ops.eq(a, b)
    if a.dtype.is_float:
        eq = ops.logical_or(eq, ops.logical_and(ops.ne(a, a), ops.ne(b, b)))
    return eq


def _ranks(r, v, descending: bool):
    """Each element's position in the stable order of its row (the last dim): (..., n) int32."""
    if v.ndim > 3:
        raise Unsupported("a sort of a tensor of rank > 3 (ranks are an n x n tile per row)")
    n = v.shape[-1]
    a = ops.unsqueeze(v, -1)  # element i  (..., n, 1)
    b = ops.unsqueeze(v, -2)  # element j  (..., 1, n)
    i = r.g.node("iota", [], (n, 1), dt.int32, {"axis": 0})
    j = r.g.node("iota", [], (1, n), dt.int32, {"axis": 1})
    earlier = ops.logical_or(_before(b, a, descending), ops.logical_and(_same(a, b), ops.lt(j, i)))
    return ops.sum(ops.cast(earlier, dt.int32), -1)  # (..., n)


def _pick(r, v, rank, k):
    """Positions 0..k-1 of the order: the values and the indices whose rank is each position (the values by
    comparisons too; the lowering takes them from ``VSORT``)."""
    n = v.shape[-1]
    pos = r.g.node("iota", [], (1, k), dt.int32, {"axis": 1})
    hit = ops.eq(ops.unsqueeze(rank, -1), pos)  # (..., n, k)
    zero = const(r, 0, v.dtype) if not v.dtype.is_float else const(r, 0.0, v.dtype)
    vals = ops.sum(ops.where(hit, ops.unsqueeze(v, -1), zero), -2)
    if v.dtype.is_float:  # a NaN element lands only where it is picked (the other rows hold 0)
        vals = ops.cast(vals, v.dtype)
    idx = ops.sum(ops.where(hit, r.g.node("iota", [], (n, 1), dt.int32, {"axis": 0}), const(r, 0, dt.int32)), -2)
    return vals, idx


def _rows(r, x, dim):
    """``x`` (all its elements when ``dim`` is None) with ``dim`` moved last, the permutation back, the dim, and
    the rows' length (a sort's rows have a static length: each is one tile)."""
    v = plain(r, r.operand(x))
    if dim is None:
        v, dim = ops.reshape(v, (-1,)), 0
    if v.ndim == 0:
        raise Unsupported("a sort of a scalar")
    d = dim % v.ndim
    v, back = _last(v, d)
    n = v.shape[-1]
    if not isinstance(n, int):
        raise Unsupported("a sort along a symbolic dim")
    return v, back, d, n


def _ordered(r, node, x, dim, descending, k=None):
    v, back, _, n = _rows(r, x, dim)
    k = n if k is None else k
    _, idx = _pick(r, v, _ranks(r, v, descending), k)
    vals = ops.sort_values(v, -1, descending)  # the values: one VSORT per row (a graph op in row mode)
    if k != n:
        vals = ops.slice(vals, -1 % vals.ndim, 0, k)
    if back is not None:
        vals, idx = ops.permute(vals, back), ops.permute(idx, back)
    mv, mi = node.meta["val"][:2]
    return result(r, _Meta(mv), vals), result(r, _Meta(mi), idx)


def _kth(r, node, x, dim, keepdim, k_of, nan_wins: bool):
    """The ``k_of(n)``-th smallest value along ``dim`` (0-based, NaN the largest, as ``sort``), from the sorted row;
    with ``nan_wins`` a row holding a NaN gives NaN (``median``). Only the values: which index torch reports
    among equal values is unspecified, so a use of the indices runs eagerly."""
    v, back, d, n = _rows(r, x, dim)
    k = k_of(n)
    if not 0 <= k < n:
        raise Unsupported(f"a k-th value out of range (k = {k + 1} of {n})")
    vals = ops.slice(ops.sort_values(v, -1), -1 % v.ndim, k, k + 1)  # (..., 1)
    if nan_wins and v.dtype.is_float:
        nan = ops.gt(ops.max(ops.cast(ops.ne(v, v), dt.float32), -1, keepdims=True), 0)
        vals = ops.where(nan, const(r, float("nan"), v.dtype), vals)
    if back is not None:
        vals = ops.permute(vals, back)
    if not keepdim:
        vals = ops.reshape(vals, tuple(e for i, e in enumerate(vals.shape) if i != d))
    metas = node.meta["val"]
    if isinstance(metas, (tuple, list)):
        return result(r, _Meta(metas[0]), vals), None
    return result(r, node, vals)


@lowers(aten.kthvalue.default)
def _kthvalue(r, node, x, k, dim=-1, keepdim=False):
    return _kth(r, node, x, dim, keepdim, lambda n: number(k) - 1, False)


@lowers(aten.median.dim)
def _median_dim(r, node, x, dim, keepdim=False):
    return _kth(r, node, x, dim, keepdim, lambda n: (n - 1) // 2, True)  # (the lower of two middles, as torch)


@lowers(aten.median.default)
def _median(r, node, x):
    return _kth(r, node, x, None, False, lambda n: (n - 1) // 2, True)


@lowers(aten.sort.default)
def _sort(r, node, x, dim=-1, descending=False):
    return _ordered(r, node, x, dim, bool(descending))


@lowers(aten.sort.stable)
def _sort_stable(r, node, x, *, stable=None, dim=-1, descending=False):
    return _ordered(r, node, x, dim, bool(descending))


@lowers(aten.topk.default)
def _topk(r, node, x, k, dim=-1, largest=True, sorted=True):
    return _ordered(r, node, x, dim, bool(largest), number(k))


@lowers(aten.histc.default)
def _histc(r, node, x, bins=100, min=0, max=0):
    """Counts of ``x`` in ``bins`` equal bins over [min, max] (the top edge in the last bin; values outside not
    counted), as torch's histc with explicit bounds."""
    lo, hi, bins = float(number(min)), float(number(max)), number(bins)
    if not lo < hi:
        raise Unsupported("histc with min >= max (bounds from the data)")
    v = plain(r, r.operand(x))
    flat = ops.reshape(v, (-1,)) if v.ndim != 1 else v
    f = ops.cast(flat, dt.float32)
    b = ops.cast(ops.floor(ops.mul(ops.sub(f, lo), bins / (hi - lo))), dt.int32)
    b = ops.where(ops.eq(f, hi), bins - 1, b)
    inside = ops.logical_and(ops.ge(f, lo), ops.le(f, hi))
    b = ops.where(inside, b, -1)
    edges = r.g.node("iota", [], (1, bins), dt.int32, {"axis": 1})
    counts = ops.sum(ops.cast(ops.eq(ops.unsqueeze(b, -1), edges), dt.float32), 0)
    return result(r, node, ops.cast(counts, dvm_dtype(node.meta["val"].dtype)))


@lowers(aten.empty_permuted.default, aten.empty.memory_format, aten.empty_strided.default)
def _empty(r, node, *a, **kw):
    """An allocation whose contents are undefined until written: zeros are one of its values."""
    shape = [r.dim(e) for e in meta_shape(node)]
    return result(r, node, const(r, 0, dvm_dtype(node.meta["val"].dtype), tuple(shape)) if shape else
                  const(r, 0, dvm_dtype(node.meta["val"].dtype)))


# ---- grouped matmul (mixture of experts) -------------------------------------------------------------------

def _expert_of(r, offs, s):
    """Each row's expert: the number of group ends at or before it (rows past the last end: none, ``E``)."""
    o = ops.cast(plain(r, r.operand(offs)), dt.int32)  # (E,)
    rows = r.g.node("iota", [], (s, 1), dt.int32, {"axis": 0})
    return ops.sum(ops.cast(ops.le(ops.unsqueeze(o, 0), rows), dt.int32), -1)  # (S,)


def _mask(r, eid, e):
    experts = r.g.node("iota", [], (e, 1, 1), dt.int32, {"axis": 0})
    return ops.eq(ops.reshape(eid, (1, eid.shape[0], 1)), experts)  # (E, S, 1)


@lowers(aten._grouped_mm.default)
def _grouped_mm_aten(r, node, a, b, offs=None, bias=None, out_dtype=None):
    if offs is None or bias is not None or plain(r, r.operand(a)).ndim != 2 or plain(r, r.operand(b)).ndim != 3:
        raise Unsupported("_grouped_mm other than (S, K) rows grouped by offsets against (E, K, N) weights")
    return _grouped_mm(r, node, a, b, offs)


@lowers_by_name("transformers::grouped_mm_fallback")
def _grouped_mm(r, node, x, w, offs):
    """``out[s] = x[s] @ w[e(s)]``, ``e(s)`` the group of row ``s`` by the cumulative ``offs``."""
    xv, wv = plain(r, r.operand(x)), plain(r, r.operand(w))
    e, s = wv.shape[0], xv.shape[0]
    wv = ops.cast(wv, xv.dtype)
    every = ops.matmul(ops.unsqueeze(xv, 0), wv)  # (E, S, N): each expert's product, on the cube
    keep = _mask(r, _expert_of(r, offs, s), e)
    return result(r, node, ops.sum(ops.where(keep, every, 0.0), 0))


@lowers_by_name("transformers::grouped_mm_fallback_backward")
def _grouped_mm_backward(r, node, x, w, offs, grad_out):
    xv, wv, go = (plain(r, r.operand(t)) for t in (x, w, grad_out))
    e, s = wv.shape[0], xv.shape[0]
    keep = _mask(r, _expert_of(r, offs, s), e)  # (E, S, 1)
    gi = ops.sum(ops.where(keep, ops.matmul(ops.unsqueeze(go, 0), ops.transpose(wv, 1, 2)), 0.0), 0)
    xm = ops.where(keep, ops.unsqueeze(xv, 0), 0.0)  # (E, S, K): each expert's own rows
    gw = ops.matmul(ops.transpose(xm, 1, 2), ops.broadcast_to(ops.unsqueeze(go, 0), (e,) + tuple(go.shape)))
    mi, mw = node.meta["val"]
    return result(r, _Meta(mi), gi), result(r, _Meta(mw), gw)


# ---- a recurrent layer -------------------------------------------------------------------------------------

@lowers(aten.mkldnn_rnn_layer.default)
def _lstm_layer(r, node, x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers,
                has_biases, bidirectional, batch_first, train):
    """One LSTM layer, one direction (``nn.LSTM`` on CPU): the input projection of every step as one matmul, then
    per step ``h @ W_hh^T`` (the cube) and the gates (i, f, g, o: torch's order) on the vector unit. The steps
    are unrolled: the sequence length must be static."""
    if batch_sizes:
        raise Unsupported("a packed sequence")
    xv = plain(r, r.operand(x))  # (L, B, I) (or (B, L, I) batch_first)
    if batch_first:
        xv = ops.permute(xv, (1, 0, 2))
    steps, h = xv.shape[0], number(hidden_size)
    if not isinstance(steps, int):
        raise Unsupported("an LSTM over a symbolic number of steps (the steps are unrolled)")
    wi, wh = plain(r, r.operand(w_ih)), plain(r, r.operand(w_hh))
    proj = ops.matmul(xv, ops.transpose(wi, 0, 1))  # (L, B, 4H)
    if has_biases:
        proj = ops.add(proj, ops.add(plain(r, r.operand(b_ih)), plain(r, r.operand(b_hh))))
    hv = ops.reshape(plain(r, r.operand(hx)), (xv.shape[1], h))
    cv = ops.reshape(plain(r, r.operand(cx)), (xv.shape[1], h))
    whT = ops.transpose(wh, 0, 1)
    outs = [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        gates = ops.add(ops.select(proj, 0, t), ops.matmul(hv, whT))  # (B, 4H)
        i, f, g, o = (ops.slice(gates, 1, k * h, (k + 1) * h) for k in range(4))
        cv = ops.add(ops.mul(ops.sigmoid(f), cv), ops.mul(ops.sigmoid(i), ops.tanh(g)))
        hv = ops.mul(ops.sigmoid(o), ops.tanh(cv))
        outs[t] = hv
    y = ops.stack(outs, 0)  # (L, B, H)
    if batch_first:
        y = ops.permute(y, (1, 0, 2))
    metas = node.meta["val"]
    res = [result(r, _Meta(metas[0]), y), result(r, _Meta(metas[1]), ops.unsqueeze(hv, 0)),
           result(r, _Meta(metas[2]), ops.unsqueeze(cv, 0))]
    ws = [r.dim(e_) for e_ in meta_shape(_Meta(metas[3]))]
    res.append(result(r, _Meta(metas[3]), const(r, 0, dvm_dtype(metas[3].dtype), tuple(ws)) if ws else
                      const(r, 0, dvm_dtype(metas[3].dtype))))
    return tuple(res)


@lowers(aten.bucketize.Tensor)
def _bucketize(r, node, x, boundaries, out_int32=False, right=False):
    return _insertion_points(r, node, boundaries, x, right)


@lowers(aten.searchsorted.Tensor)
def _searchsorted(r, node, seq, x, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        raise Unsupported("searchsorted with a sorter")
    return _insertion_points(r, node, seq, x, right or side == "right")


def _insertion_points(r, node, seq, x, right: bool):
    """Where each value of ``x`` goes in the sorted ``seq`` (1-d, or rows matching ``x``'s leading dims): the count
    of entries the binary search passes, ``not (s >= v)`` (``not (s > v)`` with ``right``), so a NaN value goes
    to the end as torch's search sends it (a NaN inside ``seq`` is not searched as torch does)."""
    sv, xv = plain(r, r.operand(seq)), plain(r, r.operand(x))
    if sv.ndim != 1 and sv.ndim != xv.ndim:
        raise Unsupported("searchsorted with a sequence that is neither 1-d nor one row per row of the values")
    xe = ops.reshape(xv, tuple(xv.shape) + (1,))
    se = sv if sv.ndim == 1 else ops.reshape(sv, tuple(sv.shape[:-1]) + (1, sv.shape[-1]))
    before = ops.logical_not((ops.gt if right else ops.ge)(se, xe))
    return result(r, node, ops.sum(ops.cast(before, dt.int32), -1))


# ---- bags and distances --------------------------------------------------------------------------------------

@lowers(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(r, node, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """``EmbeddingBag`` with 1-d indices and offsets: index ``j`` belongs to bag ``b`` when ``offsets[b] <= j <
    offsets[b + 1]``; each bag sums (mode 0), averages (1) or takes the maximum (2) of its rows, an empty bag is
    zeros, an index equal to ``padding_idx`` is left out (of the count too); with ``include_last_offset`` the last
    offset ends the last bag (indices after it, which torch's modes treat differently, are left out). Sum and mean
    are the bags' one-hot matrix times the rows, on the cube. Only the output is computed (the other results feed
    the backward, which runs eagerly)."""
    w, iv, ov = (plain(r, r.operand(t)) for t in (weight, indices, offsets))
    mode, padding_idx = number(mode), number(padding_idx)
    if iv.ndim != 1 or ov.ndim != 1:
        raise Unsupported("embedding_bag with 2-d indices (bags of equal size: use embedding and a reduction)")
    if per_sample_weights is not None and mode != 0:
        raise Unsupported("embedding_bag with per-sample weights and mode other than sum")
    n = iv.shape[0]
    pos = r.g.node("iota", [], (1, n), dt.int32, {"axis": 1})
    starts = ops.reshape(ops.cast(ov, dt.int32), (ov.shape[0], 1))  # (B', 1)
    # index j's bag is the last offset <= j: of (offsets[b] <= j), the bags starting at or before j, minus one
    started = ops.le(starts, pos)  # (B', n)
    nxt = ops.slice(started, 0, 1, None)  # bag b ends where bag b + 1 starts (the last bag runs to the end)
    member = ops.logical_and(ops.slice(started, 0, 0, -1), ops.logical_not(nxt))
    last = ops.reshape(ops.slice(started, 0, ov.shape[0] - 1 if isinstance(ov.shape[0], int) else -1, None), (1, n))
    if include_last_offset:
        onehot = member  # (B, n): the last offset only closes the last bag
    else:
        onehot = ops.cat([member, last], 0)  # (B, n)
    if padding_idx is not None and padding_idx >= 0:
        onehot = ops.logical_and(onehot, ops.ne(ops.reshape(ops.cast(iv, dt.int32), (1, n)), padding_idx))
    rows = ops.embedding(w, iv)  # (n, D)
    if per_sample_weights is not None:
        pw = plain(r, r.operand(per_sample_weights))
        rows = ops.mul(rows, ops.reshape(ops.cast(pw, rows.dtype), (n, 1)))
    if mode in (0, 1):
        out = ops.matmul(ops.cast(onehot, rows.dtype), rows)  # (B, D)
        if mode == 1:
            count = ops.sum(ops.cast(onehot, dt.int32), 1, keepdims=True)
            out = ops.div(out, ops.cast(ops.maximum(count, 1), out.dtype))
    elif mode == 2:
        ident = float("-inf") if rows.dtype.is_float else int(-(2 ** (rows.dtype.bits - 1)))
        masked = ops.where(ops.unsqueeze(onehot, -1), ops.unsqueeze(rows, 0), const(r, ident, rows.dtype))
        out = ops.max(masked, 1)
        hit = ops.gt(ops.sum(ops.cast(onehot, dt.int32), 1, keepdims=True), 0)
        out = ops.where(hit, out, const(r, 0, rows.dtype))
    else:
        raise Unsupported(f"embedding_bag with mode {mode}")
    metas = node.meta["val"]
    return (result(r, _Meta(metas[0]), out), None, None, None)


@lowers(aten._cdist_forward.default)
def _cdist(r, node, x1, x2, p, compute_mode=None):
    """``cdist``: the p-norm distance of every row of ``x1`` (..., P, M) to every row of ``x2`` (..., R, M), the
    differences on the vector unit (a (P, R, M) tile per batch; torch's matrix-product form for p = 2 rounds
    differently, within float32's precision of the distances)."""
    a, b = plain(r, r.operand(x1)), plain(r, r.operand(x2))
    p = number(p)
    if a.ndim not in (2, 3) or b.ndim != a.ndim:
        raise Unsupported("cdist of operands of rank other than 2 or 3")
    diff = ops.abs(ops.sub(ops.unsqueeze(a, -2), ops.unsqueeze(b, -3)))  # (..., P, R, M)
    if p == 2:
        out = ops.sqrt(ops.sum(ops.mul(diff, diff), -1))
    elif p == 1:
        out = ops.sum(diff, -1)
    elif p == float("inf"):
        out = ops.max(diff, -1)
    elif p == 0:
        out = ops.sum(ops.cast(ops.ne(diff, 0), diff.dtype), -1)
    elif p > 0:
        out = ops.pow(ops.sum(ops.pow(diff, float(p)), -1), 1.0 / p)
    else:
        raise Unsupported(f"cdist with p={p}")
    return result(r, node, out)


# ---- running products and extremes ---------------------------------------------------------------------------

@lowers(aten.cumprod.default)
def _cumprod(r, node, x, dim, dtype=None):
    v = plain(r, r.operand(x))
    if not 1 <= v.ndim <= 4:
        raise Unsupported(f"a running product of a tensor of rank {v.ndim}")
    return result(r, node, ops.cumprod(v, dim % v.ndim, dtype=dvm_dtype(node.meta["val"].dtype)))


@lowers(aten.cummax.default, aten.cummin.default)
def _cummax(r, node, x, dim):
    """The running maximum (minimum) and its index: the last position so far holding the running value (the
    value itself is the running extreme only where it updated it; torch's index moves on ties, and to each
    NaN once one is met)."""
    v = plain(r, r.operand(x))
    if not 1 <= v.ndim <= 4:
        raise Unsupported(f"a running maximum of a tensor of rank {v.ndim}")
    d = dim % v.ndim
    vals = (ops.cummax if node.target is aten.cummax.default else ops.cummin)(v, d)
    hit = ops.eq(v, vals)
    if v.dtype.is_float:
        hit = ops.logical_or(hit, ops.logical_and(ops.ne(v, v), ops.ne(vals, vals)))
    pos = r.g.node("iota", [], tuple(v.shape[k] if k == d else 1 for k in range(v.ndim)), dt.int32, {"axis": d})
    idx = ops.cummax(ops.where(hit, pos, -1), d)
    metas = node.meta["val"]
    return (result(r, _Meta(metas[0]), vals), result(r, _Meta(metas[1]), ops.cast(idx, dvm_dtype(metas[1].dtype))))

