"""More of the op table (``aten_ops.LOWERINGS``): convolutions and their backward, pooling and its backward, and
batch norm in training mode.

A convolution is an explicit im2col on the fuser's ops followed by one matmul on the cube: the input is padded
(a ``cat`` with constants), each kernel offset is a strided slice of it (a view), the offsets are joined along
the channels (one ``cat``: the column matrix ``(N, KK * C, L)``, ``L`` the output positions) and the weight
``(O, KK * C)`` multiplies it. Depthwise convolutions (one input channel per group) are a sum of the offsets'
slices times their weights on the vector unit; other groupings are one im2col and matmul per group.

The backward products are the same pieces: the weight gradient is ``gO @ cols^T`` summed over the batch (the
cube); the input gradient is ``W^T @ gO`` (the cube) scattered back to the input positions (``col2im``), written
as a gather: input position ``h`` takes, for each kernel offset ``k``, the column of output position
``(h + pad - k * dilation) / stride`` where that divides exactly and lands inside the output. No two programs
write one element. Max pooling's backward is the same gather, keeping the gradient where the saved index is
the position.

A transposed convolution is its convolution's input gradient (x in the output gradient's place); its backward is
the convolution's with the roles of the input and the output gradient swapped.
"""

from __future__ import annotations

import itertools
import math

import torch

from .. import dtypes as dt
from ..fuser import dims, ops
from .aten_ops import _Meta, lowers
from .aten_scatter import _size
from .lower import Unsupported, const, meta_shape, number, plain, result

aten = torch.ops.aten


def _ints(v, n: int, what: str) -> list:
    v = [number(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    if len(v) == 1:
        v = v * n
    if len(v) != n or not all(isinstance(x, int) for x in v):
        raise Unsupported(f"{what} {v} for {n} spatial dims")
    return v


def _pad(r, v, axis: int, lo: int, hi: int, value):
    """``v`` padded along ``axis`` with ``lo``/``hi`` elements of ``value`` (a cat with constants; negative
    widths cut)."""
    if lo < 0:
        v = ops.slice(v, axis, -lo, None)
    if hi < 0:
        v = ops.slice(v, axis, 0, dims.arith(r.g.syms, "+", v.shape[axis], hi))
    parts = []
    for width, where_ in ((lo, 0), (hi, 1)):
        if width > 0:
            shape = tuple(width if k == axis else v.shape[k] for k in range(v.ndim))
            parts.append((where_, const(r, value, v.dtype, shape)))
    if not parts:
        return v
    pieces = [p for w, p in parts if w == 0] + [v] + [p for w, p in parts if w == 1]
    return ops.cat(pieces, axis)


def _windows(r, x, out_sizes, kernel, stride, padding, dilation, value, extra_hi=None):
    """The strided slices of ``x`` (N, C, *spatial), padded with ``value``, one per kernel offset (row-major): each
    (N, C, *out_sizes)."""
    nd = len(kernel)
    v = x
    for i in range(nd):
        hi = padding[i] + (extra_hi[i] if extra_hi else 0)
        v = _pad(r, v, 2 + i, padding[i], hi, value)
    out = []
    for offs in itertools.product(*[range(k) for k in kernel]):
        p = v
        for i, k in enumerate(offs):
            start = k * dilation[i]
            span = dims.arith(r.g.syms, "+", dims.arith(r.g.syms, "*", dims.arith(r.g.syms, "-", out_sizes[i], 1),
                                                        stride[i]), start + 1)
            p = ops.slice(p, 2 + i, start, span, stride[i])
        out.append(p)
    return out


CHUNK = 8  # kernel offsets per kernel: each reads its own view or gather (a few scalar registers each)


def _sum_terms(terms):
    """The sum of ``terms`` (equal shapes), at most ``CHUNK`` per kernel: the partial sums are joined by a ``cat``
    (which reads them from memory, so each chunk is a kernel of its own) and reduced (a 7 x 7 kernel's 49 offsets
    would need more scalar registers than one kernel has)."""
    if len(terms) <= CHUNK:
        acc = terms[0]
        for t in terms[1:]:
            acc = ops.add(acc, t)
        return acc
    parts = [_sum_terms(terms[i:i + CHUNK]) for i in range(0, len(terms), CHUNK)]
    shape = tuple(parts[0].shape)
    g = parts[0].graph
    n = 1
    for d in shape:
        n = dims.arith(g.syms, "*", n, d)
    flat = [ops.reshape(p, (1, n)) for p in parts]  # views of the stored partial sums
    return ops.reshape(ops.sum(ops.cat(flat, 0), 0), shape)


def _cat_chunks(pieces, axis):
    """``cat(pieces, axis)`` with at most ``CHUNK`` parts per kernel (a cat of cats)."""
    if len(pieces) <= CHUNK:
        return ops.cat(pieces, axis) if len(pieces) > 1 else ops.add(pieces[0], 0.0)
    return _cat_chunks([_cat_chunks(pieces[i:i + CHUNK], axis) for i in range(0, len(pieces), CHUNK)], axis)


def _flat(r, v, lead: int):
    """``v`` with its dims from ``lead`` on merged into one (a view of a stored value)."""
    if v.ndim == lead + 1:
        return v
    n = 1
    for d in v.shape[lead:]:
        n = dims.arith(r.g.syms, "*", n, d)
    return ops.reshape(v, tuple(v.shape[:lead]) + (n,))


def _weight_matrix(w, nd: int):
    """A weight (O, C, *K) as the matrix (O, KK * C) whose columns follow the im2col rows: offset-major."""
    perm = (0,) + tuple(range(2, 2 + nd)) + (1,)
    o = w.shape[0]
    return ops.reshape(ops.permute(w, perm), (o, -1)) if nd else w


def _cols(r, x, out_sizes, kernel, stride, padding, dilation):
    """The column matrix (N, KK * C, L) of ``x`` (offset-major rows)."""
    nd = len(kernel)
    if all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(padding):
        return _flat(r, x, 2)
    pieces = _windows(r, x, out_sizes, kernel, stride, padding, dilation, 0.0)
    c = _cat_chunks(pieces, 1)
    return _flat(r, c, 2) if nd else c


def _conv(r, x, w, out_sizes, stride, padding, dilation, groups):
    """The convolution (N, O, L) of x (N, C, *S) with w (O, C / groups, *K), positions flattened."""
    nd = x.ndim - 2
    kernel = [w.shape[2 + i] for i in range(nd)]
    if not all(isinstance(k, int) for k in kernel):
        raise Unsupported("a convolution with a symbolic kernel size")
    c, o = x.shape[1], w.shape[0]
    if not isinstance(c, int) or not isinstance(o, int):
        raise Unsupported("a convolution with a symbolic channel count")
    cg = c // groups
    if groups > 1 and cg == 1:
        # depthwise: output channel j reads input channel j // m; the sum over offsets on the vector unit
        m = o // groups
        xv = x if m == 1 else ops.index_select(x, 1, ops.floor_divide(r.g.node("iota", [], (o,), dt.int32,
                                                                                 {"axis": 0}), m))
        pieces = _windows(r, xv, out_sizes, kernel, stride, padding, dilation, 0.0)
        wk = ops.reshape(w, (o, -1))  # (O, KK)
        terms = [ops.mul(p, ops.reshape(ops.slice(wk, 1, k, k + 1), (o,) + (1,) * nd)) for k, p in enumerate(pieces)]
        return _flat(r, _sum_terms(terms), 2)
    outs = []
    og = o // groups
    for gi in range(groups):
        xg = x if groups == 1 else ops.slice(x, 1, gi * cg, (gi + 1) * cg)
        wg = w if groups == 1 else ops.slice(w, 0, gi * og, (gi + 1) * og)
        cols = _cols(r, xg, out_sizes, kernel, stride, padding, dilation)
        outs.append(ops.matmul(_weight_matrix(wg, nd), cols))  # (Og, K) @ (N, K, L): the cube
    return outs[0] if groups == 1 else ops.cat(outs, 1)


def _spatial(r, node, nd):
    return [r.dim(e) for e in meta_shape(node)[2:2 + nd]]


@lowers(aten.convolution.default)
def _convolution(r, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    xv, wv = plain(r, r.operand(x)), plain(r, r.operand(weight))
    nd = xv.ndim - 2
    if nd not in (1, 2):
        raise Unsupported(f"a convolution over {nd} spatial dims (dvmlang lowers 1-d and 2-d)")
    wv = ops.cast(wv, xv.dtype)
    st, pd, dl = (_ints(v, nd, n) for v, n in ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    out_sizes = _spatial(r, node, nd)
    if transposed:  # the input gradient of the convolution it transposes, x in the output gradient's place
        y = _input_grad(r, _flat(r, xv, 2), wv, out_sizes, list(xv.shape[2:]), st, pd, dl, number(groups))
    else:
        y = _conv(r, xv, wv, out_sizes, st, pd, dl, number(groups))
    y = ops.reshape(y, (y.shape[0], y.shape[1]) + tuple(out_sizes))
    if bias is not None:
        b = plain(r, r.operand(bias))
        y = ops.add(y, ops.reshape(ops.cast(b, y.dtype), (b.shape[0],) + (1,) * nd))
    return result(r, node, y)


def _k(r, value, d=dt.int32):
    """One constant node per value in a region (a kernel's constants are scalar parameters: shared, not repeated
    per kernel offset)."""
    cache = r.__dict__.setdefault("_conv_consts", {})
    key = (value, d.name)
    if key not in cache:
        cache[key] = const(r, value, d)
    return cache[key]


def _col2im(r, pieces, in_sizes, out_sizes, kernel, stride, padding, dilation, take=None):
    """The sum, at each input position, of the pieces (one per kernel offset, each (N, C, L) over the output
    positions, flattened) at the output position that offset maps it to: a gather per offset, masked where the
    position is not on the stride's grid or falls outside the output. ``take(k, lin, pos)`` may refine the mask
    (max pooling keeps a gradient where the saved index is the position). Per dim and offset along it the output
    coordinate and its validity are computed once, and shared by the offsets that use them."""
    nd = len(kernel)
    total = 1
    for s in in_sizes:
        total = dims.arith(r.g.syms, "*", total, s)
    pos = r.g.node("iota", [], (1, 1, total), dt.int32, {"axis": 2})
    coords, rest = [], pos
    for i in reversed(range(nd)):  # the input coordinates of each flat position
        n = _size(r, in_sizes[i])
        n = _k(r, n) if isinstance(n, int) else n
        coords.insert(0, ops.remainder(rest, n) if i else rest)
        rest = ops.floor_divide(rest, n)
    per_dim = []  # per dim, per offset along it: (valid, clamped output coordinate)
    for i in range(nd):
        osz = _size(r, out_sizes[i])
        osz_c = _k(r, osz) if isinstance(osz, int) else osz
        last = _k(r, osz - 1) if isinstance(osz, int) else ops.sub(osz, 1)
        row = []
        for off in range(kernel[i]):
            q = ops.sub(coords[i], _k(r, off * dilation[i] - padding[i]))  # h + pad - k * dilation
            o = ops.floor_divide(q, _k(r, stride[i])) if stride[i] != 1 else q
            ok = ops.logical_and(ops.ge(q, _k(r, 0)), ops.lt(o, osz_c))
            if stride[i] != 1:
                ok = ops.logical_and(ok, ops.eq(ops.remainder(q, _k(r, stride[i])), _k(r, 0)))
            row.append((ok, ops.cast(ops.minimum(ops.maximum(o, _k(r, 0)), last), dt.int32)))
        per_dim.append((row, osz_c))
    zero = None
    terms = []
    for k, offs in enumerate(itertools.product(*[range(kk) for kk in kernel])):
        valid, lin = None, None
        for i, off in enumerate(offs):
            ok, oc = per_dim[i][0][off]
            valid = ok if valid is None else ops.logical_and(valid, ok)
            lin = oc if lin is None else ops.add(ops.mul(lin, per_dim[i][1]), oc)
        lin = ops.cast(lin, dt.int32)
        p = pieces[k]
        g = ops.gather(p, 2, ops.broadcast_to(lin, (p.shape[0], p.shape[1], total)))
        if take is not None:
            valid = ops.logical_and(valid, take(k, lin, pos))
        zero = zero if zero is not None else _k(r, 0.0, g.dtype)
        terms.append(ops.where(valid, g, zero))
    return _sum_terms(terms)


@lowers(aten.convolution_backward.default)
def _convolution_backward(r, node, grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    go, xv, wv = (plain(r, r.operand(t)) for t in (grad_out, x, weight))
    nd = xv.ndim - 2
    if nd not in (1, 2):
        raise Unsupported(f"a convolution over {nd} spatial dims")
    groups = number(groups)
    st, pd, dl = (_ints(v, nd, n) for v, n in ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    kernel = [wv.shape[2 + i] for i in range(nd)]
    if not all(isinstance(v, int) for v in kernel + [wv.shape[0], wv.shape[1]]):
        raise Unsupported("a convolution with symbolic channels or kernel")
    go = ops.cast(go, xv.dtype)
    metas = node.meta["val"]
    res = [None, None, None]
    if output_mask[2]:
        res[2] = result(r, _Meta(metas[2]), ops.sum(_flat(r, go, 2), (0, 2)))
    x_sizes, go_sizes = list(xv.shape[2:]), list(go.shape[2:])
    # a transposed convolution's backward is its convolution's with the roles of the input and the output
    # gradient swapped: the weight gradient correlates the output gradient's windows with the input, and the
    # input gradient is the (untransposed) convolution of the output gradient
    if output_mask[1]:
        src, grad, sizes = (go, xv, x_sizes) if transposed else (xv, go, go_sizes)
        res[1] = result(r, _Meta(metas[1]), _weight_grad(r, src, grad, wv, sizes, st, pd, dl, groups))
    if output_mask[0]:
        if transposed:
            gi_ = _conv(r, go, wv, x_sizes, st, pd, dl, groups)
        else:
            gi_ = _input_grad(r, _flat(r, go, 2), wv, x_sizes, go_sizes, st, pd, dl, groups)
        res[0] = result(r, _Meta(metas[0]), ops.reshape(gi_, tuple(xv.shape)))
    return tuple(res)


def _weight_grad(r, xv, go, wv, out_sizes, st, pd, dl, groups):
    """The gradient (O, C / groups, *K) of a convolution's weight ``wv``: its input ``xv`` (N, C, *S) and output
    gradient ``go`` (N, O, *out_sizes)."""
    nd = len(out_sizes)
    kernel = [wv.shape[2 + i] for i in range(nd)]
    o, cg = wv.shape[0], wv.shape[1]
    og = o // groups
    if groups > 1 and cg == 1 and og == 1:  # depthwise (with a channel multiplier: the grouped products below)
        pieces = _windows(r, xv, out_sizes, kernel, st, pd, dl, 0.0)
        cols = [ops.reshape(ops.sum(ops.mul(p, go), (0,) + tuple(range(2, 2 + nd))), (o, 1)) for p in pieces]
        return ops.reshape(ops.cat(cols, 1) if len(cols) > 1 else cols[0], (o, 1) + tuple(kernel))
    go2 = _flat(r, go, 2)  # (N, O, L)
    parts = []
    for gi in range(groups):
        xg = xv if groups == 1 else ops.slice(xv, 1, gi * cg, (gi + 1) * cg)
        gg = go2 if groups == 1 else ops.slice(go2, 1, gi * og, (gi + 1) * og)
        cols = _cols(r, xg, out_sizes, kernel, st, pd, dl)  # (N, KK * Cg, L)
        gwm = ops.sum(ops.matmul(gg, ops.transpose(cols, 1, 2)), 0)  # (Og, KK * Cg)
        perm = (0, 1 + nd) + tuple(range(1, 1 + nd))
        parts.append(ops.permute(ops.reshape(gwm, (og,) + tuple(kernel) + (cg,)), perm))
    return parts[0] if groups == 1 else ops.cat(parts, 0)


def _input_grad(r, go2, wv, in_sizes, out_sizes, st, pd, dl, groups):
    """The gradient (N, C, positions flattened) of a convolution's input (spatial ``in_sizes``): its output
    gradient ``go2`` (N, O, L over ``out_sizes``) and weight ``wv`` (O, C / groups, *K). ``W^T @ gO`` on the cube,
    then ``col2im``; depthwise, the offsets' products on the vector unit."""
    nd = len(in_sizes)
    kernel = [wv.shape[2 + i] for i in range(nd)]
    o, cg = wv.shape[0], wv.shape[1]
    og = o // groups
    kk = math.prod(kernel)
    if groups > 1 and cg == 1 and og == 1:  # depthwise (with a channel multiplier: the grouped products below)
        wk = ops.reshape(wv, (o, kk))
        pieces = [ops.mul(go2, ops.reshape(ops.slice(wk, 1, k, k + 1), (o, 1))) for k in range(kk)]
        return _col2im(r, pieces, in_sizes, out_sizes, kernel, st, pd, dl)
    outs = []
    for gi in range(groups):
        wg = wv if groups == 1 else ops.slice(wv, 0, gi * og, (gi + 1) * og)
        gg = go2 if groups == 1 else ops.slice(go2, 1, gi * og, (gi + 1) * og)
        colg = ops.matmul(ops.transpose(_weight_matrix(wg, nd), 0, 1), gg)  # (N, KK * Cg, L): the cube
        pieces = [ops.slice(colg, 1, k * cg, (k + 1) * cg) for k in range(kk)]
        outs.append(_col2im(r, pieces, in_sizes, out_sizes, kernel, st, pd, dl))
    return outs[0] if groups == 1 else ops.cat(outs, 1)


# ---- pooling -----------------------------------------------------------------------------------------------

def _pool_args(r, xv, kernel_size, stride, padding, dilation, out_sizes, ceil_mode):
    nd = 2
    ks = _ints(kernel_size, nd, "kernel_size")
    st = _ints(stride, nd, "stride") if stride not in (None, [], ()) else list(ks)
    pd = _ints(padding, nd, "padding")
    dl = _ints(dilation, nd, "dilation")
    # ceil_mode: the last window may run past the padded input; padding by stride - 1 more covers it (each slice
    # reads only the positions its output needs)
    extra = [st[i] - 1 if ceil_mode else 0 for i in range(nd)]
    return ks, st, pd, dl, extra


@lowers(aten.max_pool2d_with_indices.default)
def _max_pool2d(r, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    xv = plain(r, r.operand(x))
    if xv.ndim != 4:
        raise Unsupported("a max pool of a tensor that is not (N, C, H, W)")
    out_sizes = [r.dim(e) for e in meta_shape(_Meta(node.meta["val"][0]))[2:]]
    ks, st, pd, dl, extra = _pool_args(r, xv, kernel_size, stride, padding, dilation, out_sizes, ceil_mode)
    if not xv.dtype.is_float:
        raise Unsupported("a max pool of integers")
    low = -math.inf
    pieces = _windows(r, xv, out_sizes, ks, st, pd, dl, low, extra)
    wdim = xv.shape[3]
    oh = r.g.node("iota", [], (1, 1, out_sizes[0], 1), dt.int32, {"axis": 2})
    ow = r.g.node("iota", [], (1, 1, 1, out_sizes[1]), dt.int32, {"axis": 3})
    best, idx = None, None
    for (kh, kw), p in zip(itertools.product(range(ks[0]), range(ks[1])), pieces):
        h = ops.add(ops.mul(oh, st[0]), kh * dl[0] - pd[0])
        w = ops.add(ops.mul(ow, st[1]), kw * dl[1] - pd[1])
        pos = ops.add(ops.mul(h, _size(r, wdim)), w)
        if best is None:
            best, idx = p, ops.broadcast_to(pos, tuple(p.shape))
            continue
        take = ops.gt(p, best)
        if p.dtype.is_float:  # a NaN wins (torch's max pooling propagates it)
            take = ops.logical_or(take, ops.logical_and(ops.ne(p, p), ops.eq(best, best)))
        best = ops.where(take, p, best)
        idx = ops.where(take, pos, idx)
    vals, inds = node.meta["val"]
    return result(r, _Meta(vals), best), result(r, _Meta(inds), idx)


@lowers(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(r, node, x, output_size):
    """The maximum over torch's adaptive windows (rows ``[floor(i * H / oh), ceil((i + 1) * H / oh))``, the columns
    alike) and its flat index ``h * W + w``: per offset into the largest window, the rows and columns it reads (a
    gather each) where the window has it, then max pooling's scan (the first maximum in row-major order)."""
    xv = plain(r, r.operand(x))
    out = _ints(output_size, 2, "output_size")
    hw = list(xv.shape[2:])
    if xv.ndim != 4 or not all(isinstance(n, int) for n in hw):
        raise Unsupported("an adaptive max pool of a tensor that is not (N, C, H, W) with static H and W")
    if not xv.dtype.is_float:
        raise Unsupported("a max pool of integers")
    kh, kw = (max(-(-((i + 1) * n) // o) - (i * n) // o for i in range(o)) for n, o in zip(hw, out))  # longest
    (sh, eh), (sw, ew) = (_window(r, n, o, (o,), 0) for n, o in zip(hw, out))
    low = const(r, -math.inf, xv.dtype)
    best, idx = None, None
    for a, b in itertools.product(range(kh), range(kw)):
        rows = ops.minimum(ops.add(sh, _k(r, a)), ops.sub(eh, _k(r, 1)))  # (oh,): the row offset a reads
        cols = ops.minimum(ops.add(sw, _k(r, b)), ops.sub(ew, _k(r, 1)))
        p = ops.index_select(ops.index_select(xv, 2, rows), 3, cols)
        pos = ops.add(ops.mul(ops.reshape(rows, (1, 1, out[0], 1)), _k(r, hw[1])), ops.reshape(cols, (1, 1, 1, out[1])))
        ok = ops.logical_and(ops.reshape(ops.gt(ops.sub(eh, sh), _k(r, a)), (1, 1, out[0], 1)),
                             ops.reshape(ops.gt(ops.sub(ew, sw), _k(r, b)), (1, 1, 1, out[1])))
        p = ops.where(ok, p, low)  # (an offset past a shorter window reads nothing)
        if best is None:
            best, idx = p, ops.broadcast_to(pos, tuple(p.shape))
            continue
        take = ops.logical_or(ops.gt(p, best), ops.logical_and(ops.ne(p, p), ops.eq(best, best)))  # (a NaN wins)
        best = ops.where(take, p, best)
        idx = ops.where(take, pos, idx)
    vals, inds = node.meta["val"]
    return result(r, _Meta(vals), best), result(r, _Meta(inds), idx)


@lowers(aten.adaptive_max_pool2d_backward.default)
def _adaptive_max_pool2d_backward(r, node, grad_out, x, indices):
    """Each input position sums the gradients of the outputs whose saved index is the position."""
    xv = plain(r, r.operand(x))
    go = _flat(r, ops.cast(plain(r, r.operand(grad_out)), xv.dtype), 2)  # (N, C, L)
    iv = _flat(r, ops.cast(plain(r, r.operand(indices)), dt.int32), 2)
    total = 1
    for d in xv.shape[2:]:
        total = dims.arith(r.g.syms, "*", total, d)
    pos = r.g.node("iota", [], (1, 1, total, 1), dt.int32, {"axis": 2})
    hit = ops.eq(ops.unsqueeze(iv, 2), pos)  # (N, C, HW, L)
    gi = ops.sum(ops.where(hit, ops.unsqueeze(go, 2), _k(r, 0.0, go.dtype)), -1)
    return result(r, node, ops.reshape(gi, tuple(xv.shape)))


@lowers(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(r, node, grad_out, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    xv = plain(r, r.operand(x))
    go = ops.cast(plain(r, r.operand(grad_out)), xv.dtype)
    iv = ops.cast(plain(r, r.operand(indices)), dt.int32)
    out_sizes = list(go.shape[2:])
    ks, st, pd, dl, _ = _pool_args(r, xv, kernel_size, stride, padding, dilation, out_sizes, ceil_mode)
    in_sizes = list(xv.shape[2:])
    go2, iv2 = _flat(r, go, 2), _flat(r, iv, 2)
    kk = ks[0] * ks[1]
    saved = {}

    def take(k, lin, pos):  # the output position that offset k maps to chose this input position
        g = ops.gather(iv2, 2, ops.broadcast_to(lin, (iv2.shape[0], iv2.shape[1], pos.shape[2])))
        saved[k] = g
        return ops.eq(g, pos)
    gi = _col2im(r, [go2] * kk, in_sizes, out_sizes, ks, st, pd, dl, take)
    return result(r, node, ops.reshape(gi, tuple(xv.shape)))


@lowers(aten.avg_pool2d.default)
def _avg_pool2d(r, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    xv = plain(r, r.operand(x))
    if xv.ndim != 4:
        raise Unsupported("an average pool of a tensor that is not (N, C, H, W)")
    out_sizes = _spatial(r, node, 2)
    ks, st, pd, dl, extra = _pool_args(r, xv, kernel_size, stride, padding, 1, out_sizes, ceil_mode)
    total = _sum_terms(_windows(r, xv, out_sizes, ks, st, pd, dl, 0.0, extra))
    if divisor_override or not (ceil_mode or any(pd) and not count_include_pad):
        return result(r, node, ops.div(total, float(divisor_override or ks[0] * ks[1])))
    # each window's divisor, as torch counts it: the elements it covers inside the input, and inside the padding
    # too when counted (never past it: ceil_mode's last windows), the windows of a (1, 1, H, W) tile of ones
    ones = const(r, 1.0, xv.dtype, (1, 1) + tuple(xv.shape[2:]))
    if count_include_pad:
        ones = _pad(r, _pad(r, ones, 2, pd[0], pd[0], 1.0), 3, pd[1], pd[1], 1.0)
    counts = _sum_terms(_windows(r, ones, out_sizes, ks, st, [0, 0] if count_include_pad else pd, dl, 0.0, extra))
    return result(r, node, ops.div(total, counts))


@lowers(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(r, node, grad_out, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override):
    xv = plain(r, r.operand(x))
    go = ops.cast(plain(r, r.operand(grad_out)), xv.dtype)
    if ceil_mode or (any(_ints(padding, 2, "padding")) and not count_include_pad and divisor_override is None):
        raise Unsupported("an average pool's backward with ceil_mode or uncounted padding")
    out_sizes = list(go.shape[2:])
    ks, st, pd, dl, _ = _pool_args(r, xv, kernel_size, stride, padding, 1, out_sizes, False)
    g = _flat(r, ops.div(go, float(divisor_override or ks[0] * ks[1])), 2)
    gi = _col2im(r, [g] * (ks[0] * ks[1]), list(xv.shape[2:]), out_sizes, ks, st, pd, dl)
    return result(r, node, ops.reshape(gi, tuple(xv.shape)))


@lowers(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(r, node, grad_out, x):
    xv = plain(r, r.operand(x))
    go = ops.cast(plain(r, r.operand(grad_out)), xv.dtype)
    out = list(go.shape[2:])
    hw = list(xv.shape[2:])
    if not all(isinstance(n, int) and isinstance(o, int) and n % o == 0 for n, o in zip(hw, out)):
        # windows of different sizes (or sizes known at run time): the pool's transposed averaging matrices
        nc = ops.reshape(go, (-1,) + tuple(out))  # (N * C, oh, ow)
        u = ops.matmul(_averaging(r, hw[0], out[0], go.dtype), nc)  # (N * C, H, ow)
        gi = ops.matmul(ops.reshape(u, (-1, out[1])), _averaging(r, hw[1], out[1], go.dtype, transposed=True))
        return result(r, node, ops.reshape(gi, tuple(xv.shape)))
    ks = [n // o for n, o in zip(hw, out)]
    g = _flat(r, ops.div(go, float(ks[0] * ks[1])), 2)
    gi = _col2im(r, [g] * (ks[0] * ks[1]), hw, out, ks, ks, [0, 0], [1, 1])
    return result(r, node, ops.reshape(gi, tuple(xv.shape)))


@lowers(aten.native_group_norm.default)
def _group_norm(r, node, x, weight, bias, n, c, hw, groups, eps):
    """Group norm: the channels in ``groups`` groups, each normalised over its channels and positions (a view
    (N, G, C / G * HW)), then the per-channel affine. Returns torch's (out, mean, rstd), the last two (N, G)."""
    xv = plain(r, r.operand(x))
    g = number(groups)
    nb, ch = xv.shape[0], xv.shape[1]
    if not isinstance(ch, int) or ch % g:
        raise Unsupported("a group norm with a symbolic channel count")
    rest = 1
    for d in xv.shape[2:]:
        rest = dims.arith(r.g.syms, "*", rest, d)
    v = ops.reshape(ops.cast(xv, dt.float32), (nb, g, dims.arith(r.g.syms, "*", ch // g, rest)))
    mean = ops.mean(v, -1, keepdims=True)
    d = ops.sub(v, mean)
    rstd = ops.rsqrt(ops.add(ops.mean(ops.mul(d, d), -1, keepdims=True), number(eps)))
    y = ops.reshape(ops.mul(d, rstd), tuple(xv.shape))
    cshape = (ch,) + (1,) * (xv.ndim - 2)
    for p, f in ((weight, ops.mul), (bias, ops.add)):
        if p is not None:
            y = f(y, ops.reshape(ops.cast(plain(r, r.operand(p)), dt.float32), cshape))
    metas = node.meta["val"]
    return (result(r, _Meta(metas[0]), y), result(r, _Meta(metas[1]), ops.reshape(mean, (nb, g))),
            result(r, _Meta(metas[2]), ops.reshape(rstd, (nb, g))))


@lowers(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(r, node, x, output_size):
    xv = plain(r, r.operand(x))
    out = _ints(output_size, 2, "output_size")
    hw = xv.shape[2:]
    if out == [1, 1]:
        return result(r, node, ops.mean(xv, (2, 3), keepdims=True))
    if not all(isinstance(n, int) and n % o == 0 for n, o in zip(hw, out)):
        # windows of different sizes (or sizes known at run time): the mean over a window is separable, the
        # mean over its columns then over its rows, each a product with an averaging matrix on the cube
        t = ops.matmul(ops.reshape(xv, (-1, hw[1])), _averaging(r, hw[1], out[1], xv.dtype))  # (N * C * H, ow)
        t = ops.reshape(t, (-1, hw[0], out[1]))  # (N * C, H, ow)
        y = ops.matmul(_averaging(r, hw[0], out[0], xv.dtype, transposed=True), t)  # (N * C, oh, ow)
        return result(r, node, ops.reshape(y, tuple(xv.shape[:2]) + tuple(out)))
    ks = [n // o for n, o in zip(hw, out)]
    pieces = _windows(r, xv, out, ks, ks, [0, 0], [1, 1], 0.0)
    return result(r, node, ops.div(_sum_terms(pieces), float(ks[0] * ks[1])))


def _window(r, n, o, shape, axis: int):
    """Torch's adaptive windows along a dim of ``n`` pooled to ``o``: (start, end) of window ``i``, ``[floor(i * n /
    o), ceil((i + 1) * n / o))``, as int32 tiles of ``shape`` with ``i`` along ``axis``."""
    i = r.g.node("iota", [], shape, dt.int32, {"axis": axis})
    ns = _size(r, n)
    nk = _k(r, ns) if isinstance(ns, int) else ns
    start = ops.floor_divide(ops.mul(i, nk), _k(r, o))
    end = ops.floor_divide(ops.add(ops.mul(ops.add(i, _k(r, 1)), nk), _k(r, o - 1)), _k(r, o))
    return start, end


def _averaging(r, n, o, d, transposed: bool = False):
    """The (n, o) matrix of an adaptive pool along a dim of ``n`` to ``o`` (``transposed``: (o, n)): column ``i``
    is ``1 / len`` over its window (``_window``), 0 elsewhere."""
    pos = r.g.node("iota", [], (n, 1) if not transposed else (1, n), dt.int32, {"axis": 0 if not transposed else 1})
    start, end = _window(r, n, o, (1, o) if not transposed else (o, 1), 1 if not transposed else 0)
    inside = ops.logical_and(ops.ge(pos, start), ops.lt(pos, end))
    w = ops.div(_k(r, 1.0, dt.float32), ops.cast(ops.sub(end, start), dt.float32))
    return ops.cast(ops.where(inside, w, _k(r, 0.0, dt.float32)), d)


# ---- batch norm in training mode ---------------------------------------------------------------------------

@lowers(aten._native_batch_norm_legit_functional.default, aten._native_batch_norm_legit.no_stats)
def _batch_norm_train(r, node, x, weight, bias, running_mean=None, running_var=None, training=True,
                      momentum=0.1, eps=1e-5):
    """Batch norm over (N, *spatial) per channel: the batch's mean and biased variance normalise; the running
    statistics are updated with the unbiased variance (the functional form returns them; the graph's ``copy_``
    writes them back into the buffers). The in-place form (``_native_batch_norm_legit.default``, which writes the
    buffers itself) is not lowered: functionalised graphs never have it, and lowering it would drop the writes."""
    if node.target is aten._native_batch_norm_legit.no_stats:  # (x, w, b, training, momentum, eps)
        training, momentum, eps = running_mean, running_var, training
        running_mean = running_var = None
    if not training:
        raise Unsupported("batch norm with training=False through the training op")
    xv = plain(r, r.operand(x))
    if xv.ndim < 2:
        raise Unsupported("batch norm of a tensor of rank < 2")
    xf = ops.cast(xv, dt.float32)
    axes = (0,) + tuple(range(2, xv.ndim))
    c = xv.shape[1]
    bshape = (c,) + (1,) * (xv.ndim - 2)
    mean = ops.mean(xf, axes, keepdims=True)
    d = ops.sub(xf, mean)
    var = ops.mean(ops.mul(d, d), axes, keepdims=True)
    rstd = ops.rsqrt(ops.add(var, number(eps)))
    y = ops.mul(d, rstd)
    for p, f in ((weight, ops.mul), (bias, ops.add)):
        if p is not None:
            y = f(y, ops.reshape(ops.cast(plain(r, r.operand(p)), dt.float32), bshape))
    metas = node.meta["val"]
    flat_mean, flat_rstd = ops.reshape(mean, (c,)), ops.reshape(rstd, (c,))
    out = [result(r, _Meta(metas[0]), y), result(r, _Meta(metas[1]), flat_mean),
           result(r, _Meta(metas[2]), flat_rstd)]
    if node.target is aten._native_batch_norm_legit_functional.default:
        m = number(momentum)
        n = 1
        for k in axes:
            n = dims.arith(r.g.syms, "*", n, xv.shape[k])
        nv = float(n) if isinstance(n, int) else ops.cast(r.g.node("dim", [], (), dt.float32, {"sym": n}), dt.float32)
        unbiased = ops.mul(ops.reshape(var, (c,)), ops.div(nv, ops.sub(nv, 1.0)) if not isinstance(nv, float)
                           else nv / max(nv - 1.0, 1.0))
        for stat, new, meta in ((running_mean, flat_mean, metas[3]), (running_var, unbiased, metas[4])):
            old = ops.cast(plain(r, r.operand(stat)), dt.float32)
            out.append(result(r, _Meta(meta), ops.add(ops.mul(old, 1.0 - m), ops.mul(new, m))))
    return tuple(out)

