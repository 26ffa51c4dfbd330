"""``dvmlang.ops`` that make tensors and masks, and the index reductions and scans: ``full``/``zeros``/``ones``
(``*_like``), ``arange``, ``tril``/``triu``, ``masked_fill``, ``argmax``/``argmin``, ``cumsum``, and the losses
built from them (``nll_loss``, ``cross_entropy``).

Sizes may be symbols and shape arithmetic (``ops.arange(x.shape[1])``, ``ops.full((b, s // 2), 0.0)``). Index
tiles (``iota`` nodes) and constants are computed inside every kernel that uses them; one that is returned or
read through a view is computed by a copy kernel of its own (canonical.canonicalize).
"""

from __future__ import annotations

import builtins
import math

from .. import dtypes as dt
from . import dims
from .graph import GraphError, ScalarArg, Sym
from .ops_core import _binary, floor
from .ops_core import (_axes, _dim_arg, _drop_axes, _graph, _node, _shape, _value, add, broadcast_to, cast, div, eq, le,
                  ge, log_softmax, max, mean, min, mul, ne, permute, reshape, sub, sum, where)
from .ops_index import gather

__all__ = ["full", "zeros", "ones", "full_like", "zeros_like", "ones_like", "arange", "tril", "triu",
           "masked_fill", "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin", "sort_values", "nll_loss",
           "cross_entropy", "logical_and", "logical_or", "logical_not", "floor_divide", "remainder"]


def _dtype(d, default):
    if d is None:
        return default
    r = dt.lookup(d)
    if r is None:
        raise GraphError(f"{d!r} is not a dtype")
    return r


def full(shape, value, dtype=None):
    """A tensor of ``shape`` (ints or dims) filled with ``value`` (a number, ``float("-inf")`` too); the dtype
    is ``dtype`` or the number's (float32, int32, bool)."""
    g = _graph()
    if isinstance(shape, (int, Sym)):
        shape = (shape,)
    shape = tuple(_dim_arg(g, d, "full") for d in shape)
    if isinstance(value, (Sym, ScalarArg)):
        c = _value(g, value)
    elif isinstance(value, (bool, int, float)):
        c = _node(g, "const", [], (), dt.scalar_dtype_of_python(value), value=value)
    else:
        raise GraphError(f"full: the fill value must be a number, got {type(value).__name__}")
    c = cast(c, _dtype(dtype, c.dtype))
    return broadcast_to(c, shape)


def zeros(shape, dtype=dt.float32):
    return full(shape, 0, dtype)


def ones(shape, dtype=dt.float32):
    return full(shape, 1, dtype)


def full_like(x, value, dtype=None):
    g = _graph(x)
    x = _value(g, x)
    return full(_shape(x), value, _dtype(dtype, x.dtype))


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    return full_like(x, 1, dtype)


def arange(start, end=None, step=1, dtype=None):
    """``start, start + step, ...`` below ``end`` (one argument: ``0 .. start - 1``). Bounds are ints or dims
    (``x.shape[1]``, ``x.shape[1] // 2``); with a dim the step must be 1. int32 unless a bound is a float or
    ``dtype`` says otherwise."""
    g = _graph()
    if end is None:
        start, end = 0, start
    if any(isinstance(v, float) for v in (start, end, step)):
        if not all(isinstance(v, (int, float)) for v in (start, end, step)):
            raise GraphError("arange: float bounds must all be numbers")
        n = builtins.max(0, math.ceil((end - start) / step)) if step else None
        if n is None:
            raise GraphError("arange: step must not be zero")
        i = cast(_node(g, "iota", [], (n,), dt.int32, axis=0), dt.float32)
        return cast(add(mul(i, float(step)), float(start)), _dtype(dtype, dt.float32))
    if not isinstance(step, int) or isinstance(step, bool) or step == 0:
        raise GraphError(f"arange: step must be a non-zero int, got {step!r}")
    start, end = _dim_arg(g, start, "arange start"), _dim_arg(g, end, "arange end")
    if isinstance(start, int) and isinstance(end, int):
        n = builtins.max(0, -(-(end - start) // step))
    elif step == 1:
        n = dims.arith(g.syms, "-", end, start)
        if g.captures and not isinstance(n, int):
            g.syms.checks.append(("le", {}, dims.poly(g.syms, n), f"arange({start}, {end}): end before start"))
    else:
        n = dims.arith(g.syms, "//", dims.arith(g.syms, "+", dims.arith(g.syms, "-", end, start), step - 1), step)
    v = _node(g, "iota", [], (n,), dt.int32, axis=0)
    if step != 1:
        v = mul(v, step)
    if not (isinstance(start, int) and start == 0):
        v = add(v, start if isinstance(start, int) else cast(_value(g, start), dt.int32))
    return cast(v, _dtype(dtype, dt.int32))


def _tri(x, k, keep_lower: bool):
    g = _graph(x)
    x = _value(g, x)
    shape = _shape(x)
    r = len(shape)
    if r < 2:
        raise GraphError(f"tril/triu need a tensor of rank >= 2, got rank {r}")
    if not isinstance(k, int) or isinstance(k, bool):
        raise GraphError(f"tril/triu: the diagonal must be an int, got {k!r}")
    rows = _node(g, "iota", [], shape, dt.int32, axis=r - 2)
    cols = _node(g, "iota", [], shape, dt.int32, axis=r - 1)
    d = sub(cols, rows)
    keep = le(d, k) if keep_lower else ge(d, k)
    return where(keep, x, 0)


def tril(x, k=0):
    """``x`` with the elements above diagonal ``k`` of its last two dims zeroed (torch.tril)."""
    return _tri(x, k, True)


def triu(x, k=0):
    """``x`` with the elements below diagonal ``k`` of its last two dims zeroed (torch.triu)."""
    return _tri(x, k, False)


def masked_fill(x, mask, value):
    """``value`` where ``mask`` holds, else ``x``; the result keeps ``x``'s dtype (``float("-inf")`` for attention
    masks)."""
    g = _graph(x, mask)
    x = _value(g, x)
    v = _value(g, value, x.dtype)
    m = _value(g, mask)
    if m.dtype is not dt.bool_:
        m = ne(m, 0)
    return cast(where(m, cast(v, x.dtype), x), x.dtype)


def _arg(op, x, axis, keepdims):
    g = _graph(x)
    x = _value(g, x)
    if axis is None:
        flat = reshape(x, (dims.dim_of(g.syms, dims.product(g.syms, _shape(x))),))
        out = _arg(op, flat, 0, False)
        return reshape(out, (1,) * len(_shape(x))) if keepdims else out
    (a,) = _axes(x, axis)
    shape = _shape(x)
    m = (max if op == "argmax" else min)(x, a, keepdims=True)
    hit = eq(x, m)
    if x.dtype.is_float:
        hit = where(ne(x, x), True, hit)  # a NaN is the extreme value (numpy and torch): its first position
    pos = _node(g, "iota", [], shape, dt.int32, axis=a)
    big = _node(g, "const", [], (), dt.int32, value=2 ** 31 - 1)
    idx = min(where(hit, pos, big), a, keepdims=True)
    return _drop_axes(idx, x, a, keepdims)


def argmax(x, axis=None, keepdims=False):
    """The position (int32) of the largest element along ``axis`` (of the flattened tensor for None); the first
    on ties, and the first NaN if there is one (as numpy and torch)."""
    return _arg("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """The position (int32) of the smallest element along ``axis``; the first on ties or NaN."""
    return _arg("argmin", x, axis, keepdims)


def _along_last(x, a: int, op):
    """``op`` (an operation along the last dim) applied along axis ``a`` of ``x``: ``a`` moved last through views,
    and back."""
    r = len(_shape(x))
    perm = tuple(i for i in range(r) if i != a) + (a,)
    return permute(op(permute(x, perm)), tuple(perm.index(i) for i in range(r)))


def cumsum(x, axis=-1, dtype=None):
    """Inclusive running sum along ``axis``. Integers and bools accumulate in int32 (unless ``dtype``). A scan
    over the last dim runs in the kernel of its producer (carried across column blocks); another axis is
    moved last through views."""
    return _scan(x, axis, "sum", dtype)


def cumprod(x, axis=-1, dtype=None):
    """Inclusive running product along ``axis`` (integers and bools multiply in int32, as ``cumsum`` adds)."""
    return _scan(x, axis, "prod", dtype)


def cummax(x, axis=-1):
    """Inclusive running maximum along ``axis``, in ``x``'s dtype (NaN propagates, as torch's)."""
    return _scan(x, axis, "max", None)


def cummin(x, axis=-1):
    """Inclusive running minimum along ``axis``, in ``x``'s dtype (NaN propagates, as torch's)."""
    return _scan(x, axis, "min", None)


def _scan(x, axis, op: str, dtype):
    g = _graph(x)
    x = _value(g, x)
    r = len(_shape(x))
    if r == 0:
        return x
    (a,) = _axes(x, axis)
    wide = op in ("sum", "prod") and (x.dtype.is_bool or x.dtype.is_int)
    d = _dtype(dtype, dt.int32 if wide else x.dtype)
    x = cast(x, d)
    if a != r - 1:
        return _along_last(x, a, lambda v: _scan(v, -1, op, None))
    if r > 4:
        raise GraphError(f"cum{op} supports tensors of rank <= 4, got rank {r}")
    return _node(g, "cumsum", [x], _shape(x), d, **({} if op == "sum" else {"op": op}))


def sort_values(x, axis=-1, descending=False):
    """``x`` sorted along ``axis`` (values only; NaN sorts as the largest, as torch and numpy): one ``VSORT`` per
    row on the vector unit, a whole row in one tile (a row longer than UB holds is refused when the call binds
    its sizes). Another axis is moved last through views."""
    g = _graph(x)
    x = _value(g, x)
    r = len(_shape(x))
    if r == 0:
        return x
    (a,) = _axes(x, axis)
    if a != r - 1:
        return _along_last(x, a, lambda v: sort_values(v, -1, descending))
    if r > 4:
        raise GraphError(f"sort supports tensors of rank <= 4, got rank {r}")
    return _node(g, "sort", [x], _shape(x), x.dtype, descending=bool(descending))


def nll_loss(logp, target, reduction="mean", ignore_index=-100, weight=None):
    """The negative log likelihood of ``target`` (int class ids, shape ``logp.shape[:-1]``) under ``logp``
    (classes along the last dim), as torch's ``nll_loss``: targets equal to ``ignore_index`` count neither in
    the sum nor in the mean; ``reduction`` is "mean", "sum" or "none"."""
    if weight is not None:
        raise GraphError("nll_loss: class weights are not supported")
    if reduction not in ("mean", "sum", "none"):
        raise GraphError(f"nll_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    g = _graph(logp, target)
    lp, t = _value(g, logp), _value(g, target)
    if len(_shape(t)) != len(_shape(lp)) - 1:
        raise GraphError(f"nll_loss: the target must have the shape of the log probabilities without the class dim; "
                         f"got {g.shape_text(_shape(t))} for {g.shape_text(_shape(lp))}")
    t = cast(t, dt.int32)
    valid = ne(t, ignore_index)
    safe = where(valid, t, 0)
    picked = gather(lp, -1, reshape(safe, tuple(_shape(t)) + (1,)))
    picked = reshape(picked, _shape(t))
    loss = where(valid, sub(0.0, picked), 0.0)
    if reduction == "none":
        return loss
    total = sum(loss)
    if reduction == "sum":
        return total
    return div(total, cast(sum(valid), lp.dtype))


def cross_entropy(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    """``nll_loss(log_softmax(logits, -1), target)`` (classes along the last dim, as torch's cross_entropy for
    (N, C) logits); ``label_smoothing`` mixes in the mean of ``-log_softmax`` over the classes."""
    lp = log_softmax(logits, -1)
    loss = nll_loss(lp, target, reduction, ignore_index)
    if not label_smoothing:
        return loss
    g = _graph(logits, target)
    t = cast(_value(g, target), dt.int32)
    valid = ne(t, ignore_index)
    smooth = where(valid, sub(0.0, mean(lp, -1)), 0.0)
    if reduction == "mean":
        smooth = div(sum(smooth), cast(sum(valid), lp.dtype))
    elif reduction == "sum":
        smooth = sum(smooth)
    return add(mul(loss, 1.0 - label_smoothing), mul(smooth, label_smoothing))


def _truth(g, x):
    x = _value(g, x)
    return x if x.dtype is dt.bool_ else ne(x, 0)


def logical_and(a, b):
    """``a and b`` elementwise (nonzero is true): a bool tensor (also ``a & b`` on bool tensors)."""
    g = _graph(a, b)
    return _binary("and", _truth(g, a), _truth(g, b))


def logical_or(a, b):
    """``a or b`` elementwise (nonzero is true): a bool tensor (also ``a | b`` on bool tensors)."""
    g = _graph(a, b)
    return _binary("or", _truth(g, a), _truth(g, b))


def logical_not(x):
    """``not x`` elementwise (nonzero is true): a bool tensor (also ``~x`` on a bool tensor)."""
    g = _graph(x)
    return eq(_truth(g, x), False)


def floor_divide(a, b):
    """``a // b`` rounded toward minus infinity, as torch and numpy (``-7 // 2 == -4``). Integers divide exactly in
    float64-free arithmetic only up to 2^24 (they go through float32); floats give ``floor(a / b)``."""
    g = _graph(a, b)
    q = floor(div(a, b))
    ds = [_value(g, v).dtype for v in (a, b) if not isinstance(v, (bool, int, float))]
    d = ds[0] if len(ds) == 1 else dt.promote_tensors(*ds)
    if isinstance(a, float) or isinstance(b, float):
        d = dt.promote_tensors(d, dt.float32)
    return cast(q, d)


def remainder(a, b):
    """``a - floor_divide(a, b) * b``: the sign of the divisor, as torch.remainder and numpy's ``%``."""
    return sub(a, mul(floor_divide(a, b), b))
