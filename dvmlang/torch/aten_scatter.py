"""More of the op table (``aten_ops.LOWERINGS``): the ops torch's backward graphs and decompositions produce —
scatters, ``index_put``, ``slice_scatter``, ``flip``, constant padding, ``max``/``min`` with indices — and the CPU
flash-attention forward and backward that a training graph keeps whole.

Scatters are written as comparisons, not as stores to computed positions: along the scattered dim, position
``j`` of the result takes the sources whose index is ``j`` (``index[..., k] == j``, a tile of k x n per row),
summed for ``scatter_add`` and an accumulating ``index_put`` (a one-hot matmul), or the last one for ``scatter``
(torch's CPU order). No two programs write one element, so the result does not depend on the schedule.

Also here: ``index.Tensor`` with index tensors on any dims (one gather over the indexed dims merged), ``copy``
(a functionalised slice assignment), ``repeat``, and ``grid_sampler_2d`` (bilinear or nearest sampling at the
grid's points: a gather per corner).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import dtypes as dt
from ..fuser import dims, ops
from .aten_ops import _Meta, lowers
from .aten_views import _bound, _shape_of
from .lower import Unsupported, const, expr_of, number, plain, result

aten = torch.ops.aten


def _iota(r, n, rank: int = 1, axis: int = 0):
    """The int32 tile 0..n-1 along ``axis`` of a ``rank``-d shape of ones elsewhere."""
    shape = tuple(n if i == axis else 1 for i in range(rank))
    return r.g.node("iota", [], shape, dt.int32, {"axis": axis})


def _to_last(v, d: int):
    """``v`` with dim ``d`` moved last, and the permutation that moves it back."""
    rank = v.ndim
    if d == rank - 1:
        return v, None
    perm = [i for i in range(rank) if i != d] + [d]
    back = [perm.index(i) for i in range(rank)]
    return ops.permute(v, tuple(perm)), tuple(back)


def _back(v, back):
    return v if back is None else ops.permute(v, back)


def _same(r, a, b, why: str = "") -> bool:
    """Whether dims ``a`` and ``b`` are equal: proven, or (with ``why``) assumed and checked at every call (a call
    where they differ runs eagerly)."""
    eq = r.g.syms.equal(a, b)
    if eq is None and why:
        r.g.syms.unify(a, b, why)
        return True
    return eq is True


def _scatter(r, node, base, dim, index, src, how: str):
    """``how``: "add" (scatter_add), "src" (scatter of a tensor, the last source wins), "value" (of a number) or
    (reduce, include_self) (``scatter_reduce``)."""
    b = plain(r, r.operand(base))
    rank = b.ndim
    if rank == 0 or rank > 3:
        raise Unsupported(f"a scatter into a tensor of rank {rank} (dvmlang scatters ranks 1 to 3)")
    d = dim % rank
    i = plain(r, r.operand(index))
    if i.ndim != rank or not all(_same(r, i.shape[k], b.shape[k], "a scatter's index and result")
                                 for k in range(rank) if k != d):
        raise Unsupported("a scatter whose index differs from the result outside the scattered dim")
    bl, back = _to_last(b, d)
    il, _ = _to_last(i, d)
    eq = ops.eq(ops.unsqueeze(ops.cast(il, dt.int32), -1), _iota(r, bl.shape[-1], 1))  # [..., k, n]
    if how == "value":
        hit = ops.gt(ops.max(ops.cast(eq, dt.float32), -2), 0)
        out = ops.where(hit, const(r, number(src), bl.dtype), bl)
        return result(r, node, _back(out, back))
    s = plain(r, r.operand(src))
    if s.ndim != rank:
        raise Unsupported("a scatter source of another rank than its index")
    for k in range(rank):
        if not _same(r, s.shape[k], i.shape[k]):
            if not (isinstance(s.shape[k], int) and isinstance(i.shape[k], int)):
                raise Unsupported("a scatter source larger than its index along a symbolic dim")
            s = ops.slice(s, k, 0, i.shape[k])
    sl, _ = _to_last(ops.cast(s, bl.dtype), d)
    if how == "add":
        out = ops.add(bl, ops.sum(ops.where(eq, ops.unsqueeze(sl, -1), 0), -2))
        return result(r, node, _back(out, back))
    if isinstance(how, tuple):
        return result(r, node, _back(_reduced(r, bl, eq, ops.unsqueeze(sl, -1), *how), back))
    last = ops.max(ops.where(eq, _iota(r, il.shape[-1], 2, 0), -1), -2)  # [..., n]: the last k that hits
    out = ops.where(ops.ge(last, 0), ops.gather(sl, -1, ops.maximum(last, 0)), bl)
    return result(r, node, _back(out, back))


def _reduced(r, bl, eq, src, reduce: str, include_self: bool):
    """``scatter_reduce``: per result position, the sources that hit it (``eq`` [..., k, n]; ``src`` [..., k, 1])
    reduced with ``reduce``, and with the position's own value when ``include_self`` (a position no source hits
    keeps its value either way)."""
    d = bl.dtype
    count = ops.sum(ops.cast(eq, dt.int32), -2)
    hit = ops.gt(count, 0)
    if reduce in ("sum", "mean"):
        acc = ops.sum(ops.where(eq, src, const(r, 0, d)), -2)
    elif reduce == "prod":
        acc = ops.prod(ops.where(eq, src, const(r, 1, d)), -2)
    elif reduce in ("amax", "amin"):
        if d.is_float:
            ident = float("-inf") if reduce == "amax" else float("inf")
        else:
            info = np.iinfo(d.np)
            ident = int(info.min if reduce == "amax" else info.max)
        f = ops.max if reduce == "amax" else ops.min
        acc = f(ops.where(eq, src, const(r, ident, d)), -2)
    else:
        raise Unsupported(f"scatter_reduce with reduce={reduce!r}")
    if include_self:
        if reduce in ("sum", "mean"):
            acc = ops.add(acc, bl)
        elif reduce == "prod":
            acc = ops.mul(acc, bl)
        else:
            acc = (ops.maximum if reduce == "amax" else ops.minimum)(acc, bl)
    if reduce == "mean":
        n = ops.cast(ops.add(count, 1) if include_self else ops.maximum(count, 1), d)
        acc = ops.div(acc, n) if d.is_float else ops.floor_divide(acc, n)  # (torch floors an integer mean)
    return ops.where(hit, acc, bl)


@lowers(aten.scatter_reduce.two)
def _scatter_reduce(r, node, base, dim, index, src, reduce, include_self=True):
    return _scatter(r, node, base, dim, index, src, (reduce, bool(include_self)))


@lowers(aten.scatter_add.default)
def _scatter_add(r, node, base, dim, index, src):
    return _scatter(r, node, base, dim, index, src, "add")


@lowers(aten.scatter.src)
def _scatter_src(r, node, base, dim, index, src):
    return _scatter(r, node, base, dim, index, src, "src")


@lowers(aten.scatter.value)
def _scatter_value(r, node, base, dim, index, value):
    return _scatter(r, node, base, dim, index, value, "value")


@lowers(aten.index_put.default)
def _index_put(r, node, base, indices, values, accumulate=False):
    """``base[..., idx, ...] = values`` (or ``+=``) with one integer index tensor, on any dim ``d``: per position
    ``v`` along ``d``, the values whose index is ``v``. Accumulating, a one-hot matmul (``onehot(idx)^T @
    values``; a 2-d index, as an embedding's backward has, on dim 0 of a matrix); otherwise the last value whose
    index is ``v`` (a 1-d index)."""
    tens = [k for k, t in enumerate(indices) if t is not None]
    if not tens:
        raise Unsupported("index_put without an index tensor")
    b = plain(r, r.operand(base))
    vals = ops.cast(plain(r, r.operand(values)), b.dtype)
    shape = tuple(b.shape)
    if len(tens) > 1:
        # several index tensors (the backward of interpolation's x[:, :, ih, iw]) on adjacent dims: those dims
        # merged into one, indexed at the row-major position, the index and the values' index dims flattened
        if tens != list(range(tens[0], tens[0] + len(tens))):
            raise Unsupported("index_put with index tensors on dims that are not adjacent")
        d = tens[0]
        ivs = [plain(r, r.operand(indices[k])) for k in tens]
        if any(i.dtype.is_bool or i.dtype.is_float for i in ivs):
            raise Unsupported("index_put with a bool or float index")
        lin, merged = None, 1
        for k, iv in zip(tens, ivs):
            n = b.shape[k]
            iv = ops.cast(iv, dt.int32)
            iv = ops.where(ops.lt(iv, 0), ops.add(iv, _size(r, n)), iv)
            lin = iv if lin is None else ops.add(ops.mul(lin, _size(r, n)), iv)
            merged = dims.arith(r.g.syms, "*", merged, n)
        bshape = lin.shape
        nb = len(bshape)
        # (the values broadcast to what b[..., i0, i1, ...] selects: a number set at index pairs, as Speech2Text
        # marks each sequence's last frame)
        want = tuple(b.shape[:d]) + tuple(bshape) + tuple(b.shape[d + len(tens):])
        if len(vals.shape) != len(want) or any(r.g.syms.equal(a, c) is not True for a, c in zip(vals.shape, want)):
            vals = ops.broadcast_to(vals, want)
        count = 1
        for x in bshape:
            count = dims.arith(r.g.syms, "*", count, x)
        lin = ops.broadcast_to(lin, tuple(vals.shape[d:d + nb])) if nb else lin
        idx = ops.reshape(lin, (count,))
        vals = ops.reshape(vals, tuple(vals.shape[:d]) + (count,) + tuple(vals.shape[d + nb:]))
        b = ops.reshape(b, tuple(b.shape[:d]) + (merged,) + tuple(b.shape[d + len(tens):]))
    else:
        d = tens[0]
        idx = plain(r, r.operand(indices[d]))
        if idx.dtype.is_bool or idx.dtype.is_float:
            raise Unsupported("index_put with a bool or float index")
    if vals.ndim != b.ndim - 1 + idx.ndim or b.ndim > 3 or idx.ndim > 2 or (idx.ndim == 2 and (d or b.ndim != 2)):
        raise Unsupported("index_put other than by a 1-d index (or a 2-d one into the rows of a matrix)")
    rows = b.shape[d]
    if d:  # the indexed dim first, in the result and in the values (whose dim d is the index's)
        perm = (d,) + tuple(k for k in range(b.ndim) if k != d)
        b, vals = ops.permute(b, perm), ops.permute(vals, perm)
    idx = ops.cast(idx, dt.int32)
    idx = ops.where(ops.lt(idx, 0), ops.add(idx, rows), idx)
    eq = ops.eq(ops.unsqueeze(idx, -1), _iota(r, rows, 1))  # idx.shape + (rows,)
    if accumulate:
        onehot = ops.cast(eq, dt.float32 if b.dtype.itemsize >= 4 else b.dtype)
        w = ops.cast(vals, onehot.dtype)
        if idx.ndim == 2:
            acc = ops.sum(ops.matmul(ops.transpose(onehot, 1, 2), w), 0)
        elif b.ndim == 3:  # [N, A, B] values: per a, onehot^T @ values[:, a, :]
            oh = ops.broadcast_to(ops.unsqueeze(ops.transpose(onehot, 0, 1), 0), (w.shape[1], rows, idx.shape[0]))
            acc = ops.permute(ops.matmul(oh, ops.permute(w, (1, 0, 2))), (1, 0, 2))
        else:
            acc = ops.matmul(ops.transpose(onehot, 0, 1), w if w.ndim == 2 else ops.unsqueeze(w, -1))
            acc = acc if b.ndim == 2 else ops.squeeze(acc, -1)
        out = ops.add(b, ops.cast(acc, b.dtype))
    else:
        if idx.ndim != 1:
            raise Unsupported("index_put (not accumulating) with a 2-d index")
        last = ops.max(ops.where(eq, _iota(r, idx.shape[0], 2, 0), -1), 0)  # [rows]
        picked = ops.index_select(vals, 0, ops.maximum(last, 0))
        hit = ops.ge(last, 0)
        out = ops.where(ops.reshape(hit, (rows,) + (1,) * (b.ndim - 1)), picked, b)
    if d:
        out = ops.permute(out, tuple(perm.index(k) for k in range(b.ndim)))
    if tuple(out.shape) != shape:
        out = ops.reshape(out, shape)
    return result(r, node, out)


@lowers(aten.slice_scatter.default)
def _slice_scatter(r, node, base, src, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise Unsupported("slice_scatter with a step")
    b = plain(r, r.operand(base))
    d = dim % b.ndim
    size = _shape_of(r.operand(base), r)[d]
    b0, b1 = _bound(r, start, size), _bound(r, end, size)
    parts = []
    if b0 not in (None, 0):
        parts.append(ops.slice(b, d, 0, b0))
    parts.append(ops.cast(plain(r, r.operand(src)), b.dtype))
    if b1 is not None and not (isinstance(size, int) and b1 == size):
        parts.append(ops.slice(b, d, b1, None))
    return result(r, node, ops.cat(parts, d) if len(parts) > 1 else parts[0])


@lowers(aten.flip.default)
def _flip(r, node, x, dims):
    v = plain(r, r.operand(x))
    for d in {d % v.ndim for d in dims}:
        n = v.shape[d]
        v = ops.index_select(v, d, ops.cast(ops.sub(ops.sub(n, _iota(r, n)), 1), dt.int32))  # n - 1 - i
    return result(r, node, v)


@lowers(aten.repeat_interleave.self_int)
def _repeat_interleave(r, node, x, repeats, dim=None, output_size=None):
    """Each element ``repeats`` times along ``dim``: a gather of index ``i // repeats`` (rewrite.py makes this
    of grouped-query attention's repeat_kv)."""
    if dim is None or not isinstance(repeats, int):
        raise Unsupported("repeat_interleave without a dim or with a symbolic repeat count")
    v = plain(r, r.operand(x))
    d = dim % v.ndim
    n = r.dim(expr_of(node.meta["val"].shape[d]))
    return result(r, node, ops.index_select(v, d, ops.floor_divide(_iota(r, n), repeats)))


@lowers(aten.constant_pad_nd.default)
def _pad(r, node, x, pad, value=0):
    v = plain(r, r.operand(x))
    if len(pad) % 2 or len(pad) // 2 > v.ndim:
        raise Unsupported("a pad list that is not pairs for the last dims")
    for p in range(len(pad) // 2):
        d = v.ndim - 1 - p
        lo, hi = number(pad[2 * p]), number(pad[2 * p + 1])
        if lo < 0:
            v = ops.slice(v, d, -lo, None)
        if hi < 0:
            v = ops.slice(v, d, 0, dims.arith(r.g.syms, "+", v.shape[d], hi))
        parts = []
        for width in (lo, hi):
            if width > 0:
                shape = tuple(width if k == d else v.shape[k] for k in range(v.ndim))
                parts.append(const(r, number(value), v.dtype, shape))
            else:
                parts.append(None)
        pieces = [q for q in (parts[0], v, parts[1]) if q is not None]
        v = ops.cat(pieces, d) if len(pieces) > 1 else v
    return result(r, node, v)


@lowers(aten.max.dim, aten.min.dim)
def _max_dim(r, node, x, dim, keepdim=False):
    lv = r.operand(x)
    v = plain(r, lv)
    d = dim % max(1, v.ndim)
    big = node.target is aten.max.dim
    red = (ops.max if big else ops.min)(v, d, keepdims=keepdim)
    arg = (ops.argmax if big else ops.argmin)(v, d, keepdims=keepdim)
    vals, idx = node.meta["val"]
    return result(r, _Meta(vals), red), result(r, _Meta(idx), arg)


# ---- CPU flash attention (kept whole in training graphs: backend._TRAIN_KEEPS) ---------------------------------

def _scores(r, q, k, is_causal, attn_mask, scale):
    """``q @ k^T * scale`` with the causal mask (top-left aligned, as torch) and ``attn_mask`` applied."""
    s = ops.mul(ops.matmul(q, ops.transpose(k, -2, -1)), scale)
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = ops.le(_iota(r, lk, 2, 1), _iota(r, lq, 2, 0))
        s = ops.where(keep, s, -math.inf)
    if attn_mask is not None:
        m = plain(r, r.operand(attn_mask))
        s = ops.where(m, s, -math.inf) if m.dtype.is_bool else ops.add(s, ops.cast(m, s.dtype))
    return s


def _scale_of(r, q, scale):
    """The softmax scale: ``scale``, else ``1 / sqrt(E)`` (a runtime value when the head dim E is symbolic)."""
    e = q.shape[-1]
    if scale is not None:
        return number(scale)
    if isinstance(e, int):
        return 1.0 / math.sqrt(e)
    return ops.rsqrt(r.g.node("dim", [], (), dt.float32, {"sym": e}))


def _kv_heads(r, qv, kv):
    """Grouped-query attention (``enable_gqa``): each key/value head serves ``Hq / Hkv`` query heads in turn, a
    gather of head ``i // (Hq / Hkv)`` along the head dim."""
    hq, hk = qv.shape[-3] if qv.ndim >= 3 else 1, kv.shape[-3] if kv.ndim >= 3 else 1
    if r.g.syms.equal(hq, hk) is True or not (isinstance(hq, int) and isinstance(hk, int)) or hq % hk:
        return kv
    i = _iota(r, hq)
    return ops.index_select(kv, kv.ndim - 3, ops.floor_divide(i, hq // hk))


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_fwd(r, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p:
        raise Unsupported("attention with dropout")
    qv, kv, vv = (ops.cast(plain(r, r.operand(t)), dt.float32) for t in (q, k, v))
    kv, vv = _kv_heads(r, qv, kv), _kv_heads(r, qv, vv)
    s = _scores(r, qv, kv, is_causal, attn_mask, _scale_of(r, qv, scale))
    m = ops.max(s, -1, keepdims=True)
    lse = ops.add(m, ops.log(ops.sum(ops.exp(ops.sub(s, m)), -1, keepdims=True)))
    out = ops.matmul(ops.exp(ops.sub(s, lse)), vv)
    o_meta, l_meta = node.meta["val"]
    return result(r, _Meta(o_meta), out), result(r, _Meta(l_meta), ops.squeeze(lse, -1))


@lowers(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _flash_bwd(r, node, grad_out, q, k, v, out, logsumexp, dropout_p=0.0, is_causal=False, *, attn_mask=None,
               scale=None):
    """The attention backward from the saved logsumexp: ``P = exp(S - lse)``, ``dV = P^T dO``,
    ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = dS K * scale``, ``dK = dS^T Q * scale``."""
    if dropout_p:
        raise Unsupported("attention with dropout")
    do, qv, kv, vv, ov = (ops.cast(plain(r, r.operand(t)), dt.float32) for t in (grad_out, q, k, v, out))
    sc = _scale_of(r, qv, scale)
    lse = ops.unsqueeze(plain(r, r.operand(logsumexp)), -1)
    p = ops.exp(ops.sub(_scores(r, qv, kv, is_causal, attn_mask, sc), lse))
    dv = ops.matmul(ops.transpose(p, -2, -1), do)
    dp = ops.matmul(do, ops.transpose(vv, -2, -1))
    ds = ops.mul(p, ops.sub(dp, ops.sum(ops.mul(do, ov), -1, keepdims=True)))
    dq = ops.mul(ops.matmul(ds, kv), sc)
    dk = ops.mul(ops.matmul(ops.transpose(ds, -2, -1), qv), sc)
    metas = node.meta["val"]
    return tuple(result(r, _Meta(m), g) for m, g in zip(metas, (dq, dk, dv)))


# ---- indexing by several tensors, repeat ---------------------------------------------------------------------

def _size(r, n):
    """A size as an int32 value: the number, or the symbol's size at run time (exact below 2^24)."""
    n = r.g.syms.find(n)
    return n if isinstance(n, int) else ops.cast(r.g.node("dim", [], (), dt.float32, {"sym": n}), dt.int32)


@lowers(aten.index.Tensor)
def _index(r, node, x, indices):
    """``x[..., i0, i1, ...]`` with integer index tensors on any dims (``None`` where a dim is sliced whole), as
    torch: the index tensors broadcast together to ``B``; adjacent indexed dims are replaced by ``B`` in place,
    others put ``B`` first. The indexed dims are merged into one (a view) and read at the row-major position
    ``(i0 * n1 + i1) * n2 + ...`` (negative indices from the end): one gather."""
    v = plain(r, r.operand(x))
    indices = list(indices) + [None] * (v.ndim - len(indices))
    pos = [k for k, i in enumerate(indices) if i is not None]
    if not pos:
        return result(r, node, v)
    idx = []
    for k in pos:
        iv = plain(r, r.operand(indices[k]))
        if iv.dtype.is_float or iv.dtype.is_bool:
            raise Unsupported("indexing with a float or bool index tensor (a mask's positions depend on the data)")
        idx.append(iv)
    if pos != list(range(pos[0], pos[0] + len(pos))):  # not adjacent: torch puts the index dims first
        v = ops.permute(v, tuple(pos) + tuple(k for k in range(v.ndim) if k not in pos))
        pos = list(range(len(pos)))
    sizes = [v.shape[k] for k in pos]
    lin = None
    for iv, n in zip(idx, sizes):
        iv = ops.cast(iv, dt.int32)
        iv = ops.where(ops.lt(iv, 0), ops.add(iv, _size(r, n)), iv)
        lin = iv if lin is None else ops.add(ops.mul(lin, _size(r, n)), iv)
    p0 = pos[0]
    if len(pos) > 1:
        merged = sizes[0]
        for n in sizes[1:]:
            merged = dims.arith(r.g.syms, "*", merged, n)
        v = ops.reshape(v, tuple(v.shape[:p0]) + (merged,) + tuple(v.shape[p0 + len(pos):]))
    return result(r, node, ops.index_select(v, p0, lin))


@lowers(aten.repeat.default)
def _repeat(r, node, x, repeats):
    """``x.repeat(*repeats)``: leading dims of 1 added, then along each repeated dim a gather of ``i % n``."""
    v = plain(r, r.operand(x))
    repeats = [number(k) for k in repeats]
    if len(repeats) < v.ndim:
        raise Unsupported("repeat with fewer repeats than dims")
    if len(repeats) > v.ndim:
        v = ops.reshape(v, (1,) * (len(repeats) - v.ndim) + tuple(v.shape))
    for d, k in enumerate(repeats):
        if k == 1:
            continue
        n = v.shape[d]
        total = dims.arith(r.g.syms, "*", n, k)
        i = r.g.node("iota", [], (total,), dt.int32, {"axis": 0})
        v = ops.index_select(v, d, ops.remainder(i, _size(r, n)))
    return result(r, node, v)


@lowers(aten.grid_sampler_2d.default)
def _grid_sample(r, node, x, grid, interpolation_mode, padding_mode, align_corners):
    """``F.grid_sample`` (bilinear or nearest; zeros or border padding): each output point reads the input at the
    grid's point, unnormalised as torch does (``align_corners``: -1 and 1 are the corner pixels' centres, else
    their outer edges); bilinear weighs its four corners, each a gather over the flattened positions, a corner
    outside the input counting 0 (zeros) or the coordinate clipped first (border). Nearest rounds half to even,
    as torch's ``nearbyint``."""
    xv, gv = plain(r, r.operand(x)), plain(r, r.operand(grid))
    mode, pad = number(interpolation_mode), number(padding_mode)
    if xv.ndim != 4 or gv.ndim != 4:
        raise Unsupported("grid_sample of a tensor that is not (N, C, H, W)")
    if mode not in (0, 1) or pad not in (0, 1):
        raise Unsupported(f"grid_sample with interpolation mode {mode} and padding mode {pad} (bilinear or "
                          "nearest, zeros or border)")
    n, c, h, w = xv.shape
    ho, wo = gv.shape[1], gv.shape[2]
    f = dt.float32
    g = ops.cast(gv, f)
    hs, ws = (_size_value(r, d, f) for d in (h, w))
    coords = []
    for k, size in ((0, ws), (1, hs)):
        v = ops.reshape(ops.slice(g, 3, k, k + 1), (n, 1, ho, wo))
        if align_corners:
            v = ops.mul(ops.div(ops.add(v, 1.0), 2.0), ops.sub(size, 1.0))
        else:
            v = ops.div(ops.sub(ops.mul(ops.add(v, 1.0), size), 1.0), 2.0)
        if pad == 1:
            v = ops.minimum(ops.maximum(v, 0.0), ops.sub(size, 1.0))
        coords.append(v)
    ix, iy = coords
    flat = ops.reshape(xv, (n, c, -1))
    wi, hi = (_size_value(r, d, dt.int32) for d in (w, h))

    def corner(cx, cy):
        """The input at integer coordinates (float tiles), 0 outside."""
        xi, yi = ops.cast(cx, dt.int32), ops.cast(cy, dt.int32)
        inside = ops.logical_and(ops.logical_and(ops.ge(xi, 0), ops.lt(xi, wi)),
                                 ops.logical_and(ops.ge(yi, 0), ops.lt(yi, hi)))
        lin = ops.add(ops.mul(ops.minimum(ops.maximum(yi, 0), ops.sub(hi, 1)), wi),
                      ops.minimum(ops.maximum(xi, 0), ops.sub(wi, 1)))
        hw = dims.arith(r.g.syms, "*", ho, wo)
        got = ops.gather(flat, 2, ops.broadcast_to(ops.reshape(lin, (n, 1, -1)), (n, c, hw)))
        got = ops.reshape(got, (n, c, ho, wo))
        return ops.where(inside, got, const(r, 0.0, got.dtype))

    if mode == 1:
        out = corner(ops.rint(ix), ops.rint(iy))
    else:
        x0, y0 = ops.floor(ix), ops.floor(iy)
        x1, y1 = ops.add(x0, 1.0), ops.add(y0, 1.0)
        out = None
        for cx, cy, wx, wy in ((x0, y0, ops.sub(x1, ix), ops.sub(y1, iy)), (x1, y0, ops.sub(ix, x0), ops.sub(y1, iy)),
                               (x0, y1, ops.sub(x1, ix), ops.sub(iy, y0)), (x1, y1, ops.sub(ix, x0), ops.sub(iy, y0))):
            term = ops.mul(ops.cast(corner(cx, cy), f), ops.mul(wx, wy))
            out = term if out is None else ops.add(out, term)
    return result(r, node, ops.cast(out, xv.dtype))


def _size_value(r, d, dtype):
    """A size as a graph value of ``dtype`` (``_size``'s number as a constant)."""
    v = _size(r, d)
    return const(r, v, dtype) if isinstance(v, int) else ops.cast(v, dtype)


@lowers(aten.masked_scatter.default)
def _masked_scatter(r, node, base, mask, source):
    """``masked_scatter``: where ``mask`` holds (broadcast to the result), the next element of ``source`` in row-major
    order: element ``p`` takes ``source.flatten()[count of true mask elements before p]`` (a running sum over the
    flattened mask, then a gather)."""
    b, m, src = (plain(r, r.operand(t)) for t in (base, mask, source))
    m = ops.broadcast_to(ops.ne(m, 0) if m.dtype is not dt.bool_ else m, tuple(b.shape))
    mf = ops.reshape(m, (1, -1))
    before = ops.sub(ops.cumsum(ops.cast(mf, dt.int32), -1), ops.cast(mf, dt.int32))
    flat_src = ops.reshape(ops.cast(src, b.dtype), (1, -1))
    n = _size(r, flat_src.shape[1])
    got = ops.gather(flat_src, 1, ops.minimum(before, n - 1 if isinstance(n, int) else ops.sub(n, 1)))
    return result(r, node, ops.where(m, ops.reshape(got, tuple(b.shape)), b))

