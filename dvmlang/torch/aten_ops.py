"""The op table: one lowering per aten (or prims) overload dvmlang runs, ``LOWERINGS[overload] = fn``.

Each ``fn(region, node, *args, **kwargs)`` calls ``dvmlang.ops`` on the region's values and returns an ``LVal``
(or a tuple of them); it raises ``Unsupported`` with the reason for a case it cannot express. An overload not in
the table falls back to torch eager. docs/torch.md's coverage table is generated from this table (a test checks).
"""

from __future__ import annotations

import torch

from .. import dtypes as dt
from ..errors import DvmError
from ..fuser import dims, ops
from .lower import (LVal, Unsupported, _const_full, _eq, _prod, align, expr_of, plain, dvm_dtype, elementwise,
                    meta_shape, number, parts_of, rebase, reduction, result, unfolded_axis, view)

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS: dict = {}


def lowers(*overloads):
    def deco(fn):
        for o in overloads:
            LOWERINGS[o] = fn
        return fn
    return deco


# ---- elementwise -----------------------------------------------------------------------------------------

def _ew(fn, *overloads):
    lowers(*overloads)(elementwise(fn))


for _name, _ovs in {
    "mul": (aten.mul.Tensor, aten.mul.Scalar),
    "maximum": (aten.maximum.default,), "minimum": (aten.minimum.default,),
    "eq": (aten.eq.Tensor, aten.eq.Scalar), "ne": (aten.ne.Tensor, aten.ne.Scalar),
    "lt": (aten.lt.Tensor, aten.lt.Scalar), "le": (aten.le.Tensor, aten.le.Scalar),
    "gt": (aten.gt.Tensor, aten.gt.Scalar), "ge": (aten.ge.Tensor, aten.ge.Scalar),
    "pow": (aten.pow.Tensor_Tensor, aten.pow.Scalar),
}.items():
    _ew(getattr(ops, _name), *_ovs)

for _name in ("neg", "abs", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
              "tan", "tanh", "sigmoid", "erf", "erfc", "floor", "ceil", "trunc", "asin", "acos", "atan", "sinh",
              "cosh", "asinh", "acosh", "atanh", "lgamma"):
    _ew(getattr(ops, _name), getattr(aten, _name).default)


@lowers(aten.round.default, aten.round.decimals)
def _round(r, node, x, decimals=0):  # (half to even, as C's nearbyint; with decimals, torch's scaling by 10^d)
    d = number(decimals)
    if not node.meta["val"].dtype.is_floating_point:
        return elementwise(lambda v: ops.mul(v, 1))(r, node, x)
    if d == 0:
        return elementwise(ops.rint)(r, node, x)
    scale = 10.0 ** abs(d)
    if d > 0:
        return elementwise(lambda v: ops.div(ops.rint(ops.mul(v, scale)), scale))(r, node, x)
    return elementwise(lambda v: ops.mul(ops.rint(ops.div(v, scale)), scale))(r, node, x)


def _div_true(a, b):
    return ops.div(a, b)


_ew(_div_true, aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
_ew(lambda x: ops.div(1.0, x), aten.reciprocal.default)
_ew(lambda x: ops.maximum(x, 0), aten.relu.default)
_ew(lambda x: ops.where(ops.gt(x, 0), 1.0, ops.where(ops.lt(x, 0), -1.0, 0.0)) if x.dtype.is_float else
    ops.where(ops.gt(x, 0), 1, ops.where(ops.lt(x, 0), -1, 0)), aten.sign.default)
_ew(lambda a, b: ops.where(a, ops.ne(b, 0), False), aten.logical_and.default)
_ew(lambda a, b: ops.where(a, True, ops.ne(b, 0)), aten.logical_or.default)
_ew(lambda a, b: ops.ne(ops.ne(a, 0), ops.ne(b, 0)), aten.logical_xor.default)
_ew(lambda a: ops.eq(a, 0), aten.logical_not.default)
_ew(lambda c, a, b: ops.where(c, a, b), aten.where.self)
_ew(lambda x: ops.ne(x, x), aten.isnan.default)
_ew(lambda x: ops.eq(ops.abs(x), float("inf")), aten.isinf.default)
_ew(lambda a, b: ops.sub(a, ops.mul(ops.trunc(ops.div(a, b)), b)), aten.fmod.Scalar, aten.fmod.Tensor)


@lowers(aten.bitwise_not.default)
def _bitwise_not(r, node, x):
    if node.meta["val"].dtype is not torch.bool:
        return elementwise(ops.bitwise_not)(r, node, x)
    return elementwise(lambda a: ops.eq(a, 0))(r, node, x)


_ew(lambda x: ops.lt(ops.copysign(1.0, x), 0) if x.dtype.is_float else ops.lt(x, 0), aten.signbit.default)
_ew(ops.atan2, aten.atan2.default)
_ew(ops.hypot, aten.hypot.default)
_ew(ops.copysign, aten.copysign.Tensor, aten.copysign.Scalar)


@lowers(aten.elu.default)
def _elu(r, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    a, sc, si = number(alpha), number(scale), number(input_scale)
    return elementwise(lambda v: ops.mul(ops.where(ops.gt(v, 0), v, ops.mul(ops.expm1(ops.mul(v, si)), a)), sc)
                       if sc != 1 else ops.where(ops.gt(v, 0), v, ops.mul(ops.expm1(ops.mul(v, si)), a)))(r, node, x)


@lowers(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_or.Tensor, aten.bitwise_or.Scalar,
        aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def _bitwise(r, node, a, b):
    name = node.target.overloadpacket.__name__
    if node.meta["val"].dtype is not torch.bool:
        return elementwise(getattr(ops, name))(r, node, a, b)
    if name == "bitwise_xor":  # (of bools: as truth values, in the selections the fuser fuses)
        return elementwise(lambda x, y: ops.ne(ops.ne(x, 0), ops.ne(y, 0)))(r, node, a, b)
    if name == "bitwise_and":
        return elementwise(lambda x, y: ops.where(x, ops.ne(y, 0), False))(r, node, a, b)
    return elementwise(lambda x, y: ops.where(x, True, ops.ne(y, 0)))(r, node, a, b)


_ew(ops.left_shift, aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.__lshift__.Tensor,
    aten.__lshift__.Scalar)


def _right_shift(a, b):
    """torch's ``>>``: a shift by a negative amount or by the width or more fills with the sign (the kernel op,
    Triton's, shifts by at most width - 1 and by nothing for a negative amount)."""
    if isinstance(b, (int, float)):
        return ops.right_shift(a, b if b >= 0 else 63)
    return ops.right_shift(a, ops.where(ops.lt(b, 0), 63, b))


_ew(_right_shift, aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar, aten.__rshift__.Tensor,
    aten.__rshift__.Scalar)


@lowers(aten.add.Tensor, aten.add.Scalar)
def _add(r, node, a, b, alpha=1):
    return elementwise(lambda x, y: ops.add(x, y if alpha == 1 else ops.mul(y, alpha)))(r, node, a, b)


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def _sub(r, node, a, b, alpha=1):
    return elementwise(lambda x, y: ops.sub(x, y if alpha == 1 else ops.mul(y, alpha)))(r, node, a, b)


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(r, node, a, b, alpha=1):
    return elementwise(lambda x, y: ops.sub(y, x if alpha == 1 else ops.mul(x, alpha)))(r, node, a, b)


def _trunc_divide(a, b):
    """Integer division rounded toward zero: the floor quotient, one more where the division is inexact and the
    operands' signs differ."""
    q = ops.floor_divide(a, b)
    inexact = ops.ne(ops.sub(a, ops.mul(q, b)), 0)
    if isinstance(b, (int, float)):
        differ = ops.lt(a, 0) if b >= 0 else ops.ge(a, 0)
    elif isinstance(a, (int, float)):
        differ = ops.lt(b, 0) if a >= 0 else ops.ge(b, 0)
    else:
        differ = ops.ne(ops.lt(a, 0), ops.lt(b, 0))
    return ops.where(ops.logical_and(inexact, differ), ops.add(q, 1), q)


@lowers(aten.div.Tensor_mode)
def _div_mode(r, node, a, b, rounding_mode=None):
    if rounding_mode is None:
        return elementwise(_div_true)(r, node, a, b)
    if not node.meta["val"].dtype.is_floating_point:
        if rounding_mode == "floor":
            return elementwise(ops.floor_divide)(r, node, a, b)
        if rounding_mode == "trunc":
            return elementwise(_trunc_divide)(r, node, a, b)
        raise Unsupported(f"integer division with rounding_mode={rounding_mode!r}")
    f = ops.floor if rounding_mode == "floor" else ops.trunc
    return elementwise(lambda x, y: f(ops.div(x, y)))(r, node, a, b)


@lowers(aten.pow.Tensor_Scalar)
def _pow(r, node, x, e):
    e = number(e)

    def fn(v):
        if e == 1:
            return ops.mul(v, 1)
        if e == 2:
            return ops.mul(v, v)
        if e == 3:
            return ops.mul(ops.mul(v, v), v)
        if e == 0.5:
            return ops.sqrt(v)
        if e == -0.5:
            return ops.rsqrt(v)
        if e == -1:
            return ops.div(1.0, v)
        if isinstance(e, float) and not e.is_integer():
            return ops.pow(v, e)  # NaN for negative bases, as torch
        raise Unsupported(f"pow with exponent {e}")
    return elementwise(fn)(r, node, x)


def _bound_value(r, b):
    """A clamp bound: a number, or a SymInt's value at run time (``clamp(x, -n, n - 1)`` with a symbolic size:
    the symbols' sizes as runtime scalars, in float32, exact below 2^24)."""
    if not (isinstance(b, torch.fx.Node) and isinstance(b.meta.get("val"), torch.SymInt)):
        return number(b)

    def value(e):
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return r.g.node("dim", [], (), dt.float32, {"sym": r.dim(e)})
        terms = [value(a) for a in e.args]
        if type(e).__name__ not in ("Add", "Mul"):
            raise Unsupported(f"a clamp bound {e} that is not a polynomial of sizes")
        acc = terms[0]
        for t in terms[1:]:
            acc = (ops.add if type(e).__name__ == "Add" else ops.mul)(acc, t)
        return acc
    e = expr_of(b.meta["val"])
    return e if isinstance(e, int) else value(e)


@lowers(aten.clamp.default)
def _clamp(r, node, x, min=None, max=None):
    lo = None if min is None else _bound_value(r, min)
    hi = None if max is None else _bound_value(r, max)

    def fn(v):
        if lo is not None:
            v = ops.maximum(v, lo if isinstance(lo, (int, float)) else ops.cast(lo, v.dtype))
        if hi is not None:
            v = ops.minimum(v, hi if isinstance(hi, (int, float)) else ops.cast(hi, v.dtype))
        return v
    return elementwise(fn)(r, node, x)


@lowers(aten.clamp.Tensor)
def _clamp_tensor(r, node, x, min=None, max=None):  # (bounds that are tensors, broadcast with x)
    def fn(v, *bounds):
        b = iter(bounds)
        v = v if min is None else ops.maximum(v, next(b))
        return v if max is None else ops.minimum(v, next(b))
    return elementwise(fn)(r, node, x, *[b for b in (min, max) if b is not None])


lowers(aten.clamp_min.default)(lambda r, node, x, m: _clamp(r, node, x, min=m))
lowers(aten.hardtanh.default)(lambda r, node, x, lo=-1.0, hi=1.0: _clamp(r, node, x, min=lo, max=hi))
lowers(aten.clamp_max.default)(lambda r, node, x, m: _clamp(r, node, x, max=m))


@lowers(aten.gelu.default)
def _gelu(r, node, x, approximate="none"):
    return elementwise(lambda v: ops.gelu(v, approximate))(r, node, x)


_ew(ops.silu, aten.silu.default)


@lowers(aten.leaky_relu.default)
def _leaky(r, node, x, slope=0.01):
    return elementwise(lambda v: ops.where(ops.gt(v, 0), v, ops.mul(v, number(slope))))(r, node, x)


@lowers(prims.convert_element_type.default)
def _convert(r, node, x, dtype):
    return elementwise(lambda v: ops.cast(v, dvm_dtype(dtype)))(r, node, x)


@lowers(aten._to_copy.default)
def _to_copy(r, node, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"_to_copy to {device}")
    return elementwise(lambda v: ops.cast(v, dvm_dtype(dtype)) if dtype is not None else v)(r, node, x)


@lowers(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default)
def _identity(r, node, x, memory_format=None):
    lv = r.operand(x)
    return result(r, node, lv.v, lv.groups)


# ---- constants --------------------------------------------------------------------------------------------

@lowers(aten.full.default)
def _full(r, node, size, value, **kw):
    return _const_full(r, node, number(value))


@lowers(aten.full_like.default)
def _full_like(r, node, x, value, **kw):
    return _const_full(r, node, number(value))


@lowers(aten.scalar_tensor.default)
def _scalar_tensor(r, node, value, **kw):
    if isinstance(value, torch.fx.Node):  # a graph input (F.interpolate's scale_factor=2.0, a SymFloat)
        return result(r, node, ops.cast(r.operand(value).v, dvm_dtype(node.meta["val"].dtype)))
    return _const_full(r, node, number(value))


@lowers(aten.copy.default)
def _copy(r, node, dst, src, non_blocking=False):
    """The functional form of ``dst.copy_(src)`` (a slice assignment, functionalised): ``src`` in ``dst``'s dtype,
    broadcast to its shape."""
    shape = [r.dim(e) for e in meta_shape(node)]
    v = ops.cast(plain(r, r.operand(src)), dvm_dtype(node.meta["val"].dtype))
    if [r.g.syms.find(d) for d in v.shape] != [r.g.syms.find(d) for d in shape]:
        v = ops.broadcast_to(v, tuple(shape))
    else:
        v = ops.add(v, 0) if v.node.op in ("input", "reshape", "permute", "slice") else v  # a value of its own
    return result(r, node, v)


@lowers(aten.zeros.default, aten.zeros_like.default)
def _zeros(r, node, *a, **kw):
    return _const_full(r, node, 0)


@lowers(aten.ones.default, aten.ones_like.default)
def _ones(r, node, *a, **kw):
    return _const_full(r, node, 1)


@lowers(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(r, node, *a, **kw):
    (n,) = meta_shape(node)
    start, step = (a[0], a[2] if len(a) > 2 else 1) if len(a) >= 2 else (0, 1)
    if isinstance(start, torch.fx.Node) or isinstance(step, torch.fx.Node):
        raise Unsupported("arange with a symbolic start or step")
    i = r.g.node("iota", [], (r.dim(n),), dt.int32, {"axis": 0})  # the fuser's index tile (as sdpa's mask)
    v = ops.cast(i, dvm_dtype(node.meta["val"].dtype))
    if step != 1:
        v = ops.mul(v, step)
    if start != 0:
        v = ops.add(v, start)
    return result(r, node, v)


@lowers(aten.cat.default)
def _cat(r, node, tensors, dim=0):
    rank = len(meta_shape(node))
    # torch skips legacy empty 1-D operands (a KV cache that starts as torch.tensor([])) and adds nothing for an
    # operand of size 0 along the dim
    kept = [t for t in tensors if not (isinstance(t, torch.fx.Node) and
                                       (meta_shape(t) == [0] and rank != 1 or
                                        meta_shape(t)[dim % rank] == 0))]
    vals = [plain(r, r.operand(t)) for t in (kept or tensors[:1])]
    return result(r, node, ops.cat(vals, dim % len(meta_shape(node))))


@lowers(aten.embedding.default)
def _embedding(r, node, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return result(r, node, ops.embedding(plain(r, r.operand(weight)), plain(r, r.operand(ids))))


@lowers(aten.index_select.default)
def _index_select(r, node, x, dim, index):
    lv = r.operand(x)
    return result(r, node, ops.index_select(plain(r, lv), dim % lv.rank, plain(r, r.operand(index))))


@lowers(aten.gather.default)
def _gather(r, node, x, dim, index, sparse_grad=False):
    lv, li = r.operand(x), r.operand(index)
    d = dim % lv.rank
    if any(len(g) > 1 for g in lv.groups) and any(len(g) != 1 for g in li.groups):
        li = rebase(r, li, [p or [1] for p in parts_of(r, li)], keep_units=True)  # unit dims in place
    if any(len(g) > 1 for g in lv.groups) and li.groups == lv.groups and len(lv.groups[d]) == 1 and \
            all(str(a) == str(b) for k, (pa, pb) in enumerate(zip(parts_of(r, lv), parts_of(r, li))) if k != d
                for a, b in zip(pa, pb)):
        # both fold the other dims alike (a loss over logits.view(batch * seq, vocab)): gather on the bases
        return result(r, node, ops.gather(lv.v, lv.groups[d][0], li.v), lv.groups)
    return result(r, node, ops.gather(plain(r, lv), d, plain(r, li)))


@lowers(aten.cumsum.default)
def _cumsum(r, node, x, dim, dtype=None):
    lv = r.operand(x)
    v = plain(r, lv)
    d = dim % max(1, lv.rank)
    if v.ndim <= 4:
        return result(r, node, ops.cumsum(v, d))
    # rank > 4: the dims before and after the scanned one merged (an exact reshape), scanned, viewed back
    before, after = 1, 1
    for k in range(v.ndim):
        if k < d:
            before = dims.arith(r.g.syms, "*", before, v.shape[k])
        elif k > d:
            after = dims.arith(r.g.syms, "*", after, v.shape[k])
    c = ops.cumsum(ops.reshape(v, (before, v.shape[d], after)), 1)
    return result(r, node, ops.reshape(c, tuple(v.shape)))


@lowers(aten.argmax.default, aten.argmin.default)
def _argmax(r, node, x, dim=None, keepdim=False):
    lv = r.operand(x)
    fn = ops.argmax if node.target is aten.argmax.default else ops.argmin
    return result(r, node, fn(plain(r, lv), None if dim is None else dim % lv.rank, keepdims=keepdim))


_ew(ops.remainder, aten.remainder.Tensor, aten.remainder.Scalar)


# ---- reductions ---------------------------------------------------------------------------------------------

@lowers(aten.sum.dim_IntList)
def _sum(r, node, x, dims=None, keepdim=False, dtype=None):
    return reduction(r, node, x, dims, keepdim, lambda v, ax: ops.sum(v, ax, keepdims=True))


@lowers(aten.sum.default)
def _sum_all(r, node, x, dtype=None):
    return reduction(r, node, x, None, False, lambda v, ax: ops.sum(v, ax, keepdims=True))


@lowers(aten.prod.dim_int)
def _prod_dim(r, node, x, dim, keepdim=False, dtype=None):
    return reduction(r, node, _wide_int(r, node, x), [dim], keepdim, lambda v, ax: ops.prod(v, ax, keepdims=True))


@lowers(aten.prod.default)
def _prod_all(r, node, x, dtype=None):
    return reduction(r, node, _wide_int(r, node, x), None, False, lambda v, ax: ops.prod(v, ax, keepdims=True))


def _wide_int(r, node, x):
    """An integer product in torch's result dtype (int64), not wrapped at 32 bits first."""
    d = dvm_dtype(node.meta["val"].dtype)
    lv = r.operand(x)
    if isinstance(lv, LVal) and not d.is_float and lv.v.dtype is not d:
        return LVal(ops.cast(lv.v, d), lv.groups)
    return x


@lowers(aten.mean.dim)
def _mean(r, node, x, dims=None, keepdim=False, dtype=None):
    return reduction(r, node, x, dims, keepdim, lambda v, ax: ops.mean(v, ax, keepdims=True))


@lowers(aten.mean.default)
def _mean_all(r, node, x, dtype=None):
    return reduction(r, node, x, None, False, lambda v, ax: ops.mean(v, ax, keepdims=True))


@lowers(aten.max.default, aten.min.default)
def _max_all(r, node, x):
    f = ops.max if node.target is aten.max.default else ops.min
    return reduction(r, node, x, None, False, lambda v, ax: f(v, ax, keepdims=True))


@lowers(aten.linalg_vector_norm.default)
def _vector_norm(r, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    p = number(ord)
    if p == 2:
        fn = lambda v, ax: ops.sqrt(ops.sum(ops.mul(v, v), ax, keepdims=True))  # noqa: E731
    elif p == 1:
        fn = lambda v, ax: ops.sum(ops.abs(v), ax, keepdims=True)  # noqa: E731
    elif p == float("inf"):
        fn = lambda v, ax: ops.max(ops.abs(v), ax, keepdims=True)  # noqa: E731
    else:
        raise Unsupported(f"a vector norm of order {p}")
    return reduction(r, node, x, dim, keepdim, fn)


@lowers(aten.amax.default)
def _amax(r, node, x, dims=(), keepdim=False):
    return reduction(r, node, x, dims, keepdim, lambda v, ax: ops.max(v, ax, keepdims=True))


@lowers(aten.amin.default)
def _amin(r, node, x, dims=(), keepdim=False):
    return reduction(r, node, x, dims, keepdim, lambda v, ax: ops.min(v, ax, keepdims=True))


@lowers(aten.var.correction)
def _var(r, node, x, dims=None, correction=None, keepdim=False):
    c = 1 if correction is None else number(correction)
    return reduction(r, node, x, dims, keepdim, lambda v, ax: ops.var(v, ax, keepdims=True, correction=c))


@lowers(aten.var_mean.correction)
def _var_mean(r, node, x, dims=None, correction=None, keepdim=False):
    c = 1 if correction is None else number(correction)
    metas = node.meta["val"]
    return (reduction(r, _Meta(metas[0]), x, dims, keepdim, lambda v, ax: ops.var(v, ax, keepdims=True, correction=c)),
            reduction(r, _Meta(metas[1]), x, dims, keepdim, lambda v, ax: ops.mean(v, ax, keepdims=True)))


@lowers(aten.any.dim, aten.any.dims, aten.any.default)
def _any(r, node, x, dims=None, keepdim=False):
    return reduction(r, node, x, dims, keepdim,
                     lambda v, ax: ops.ne(ops.max(ops.cast(ops.ne(v, 0), dt.float32), ax, keepdims=True), 0))


@lowers(aten.all.dim, aten.all.dims, aten.all.default)
def _all(r, node, x, dims=None, keepdim=False):
    return reduction(r, node, x, dims, keepdim,
                     lambda v, ax: ops.ne(ops.min(ops.cast(ops.ne(v, 0), dt.float32), ax, keepdims=True), 0))


# ---- composites -----------------------------------------------------------------------------------------------

@lowers(aten._softmax.default, aten._log_softmax.default)
def _softmax(r, node, x, dim, half_to_float=False):
    lv = r.operand(x)
    fn = ops.softmax if node.target is aten._softmax.default else ops.log_softmax
    if len(lv.groups[dim % lv.rank]) != 1:  # along a folded (or unit) dim: on torch's exact shape
        return result(r, node, fn(plain(r, lv), dim % lv.rank))
    return result(r, node, fn(lv.v, unfolded_axis(lv, dim)), lv.groups)


@lowers(aten.native_layer_norm.default)
def _layer_norm(r, node, x, normalized_shape, weight, bias, eps):
    if len(normalized_shape) != 1:
        return _layer_norm_dims(r, node, x, len(normalized_shape), weight, bias, eps)
    lv = r.operand(x)
    if len(lv.groups[-1]) != 1:
        lv = LVal(plain(r, lv))  # normalised over a folded (or unit) last dim: on torch's exact shape
    ax = unfolded_axis(lv, -1)
    if ax != lv.v.ndim - 1:
        raise Unsupported("layer norm over a dimension that is not the base's last")
    v = lv.v
    mu = ops.mean(v, -1, keepdims=True)
    d = ops.sub(v, mu)
    rstd = ops.rsqrt(ops.add(ops.mean(ops.mul(d, d), -1, keepdims=True), number(eps)))
    y = ops.mul(d, rstd)
    out = LVal(y, lv.groups)
    for p, f in ((weight, ops.mul), (bias, ops.add)):
        if p is not None:
            vals, groups = align(r, _Meta(node.meta["val"][0]), [out, r.operand(p)])
            out = LVal(f(*vals), groups)
    metas = node.meta["val"]
    res = []
    for v2, groups, m in ((out.v, out.groups, metas[0]), (mu, lv.groups, metas[1]), (rstd, lv.groups, metas[2])):
        fake = _Meta(m)
        res.append(result(r, fake, v2, groups))
    return tuple(res)


def _layer_norm_dims(r, node, x, k: int, weight, bias, eps):
    """A layer norm over the last ``k`` dims (``LayerNorm([C, H, W])``): normalised over them merged into one (a
    view), the affine over their shape; mean and rstd keep them as 1s, as torch returns them."""
    xv = plain(r, r.operand(x))
    lead = tuple(xv.shape[:-k])
    n = 1
    for d in xv.shape[-k:]:
        n = dims.arith(r.g.syms, "*", n, d)
    v = ops.reshape(xv, lead + (n,))
    mu = ops.mean(v, -1, keepdims=True)
    d = ops.sub(v, mu)
    rstd = ops.rsqrt(ops.add(ops.mean(ops.mul(d, d), -1, keepdims=True), number(eps)))
    y = ops.reshape(ops.mul(d, rstd), tuple(xv.shape))
    for p, f in ((weight, ops.mul), (bias, ops.add)):
        if p is not None:
            y = f(y, ops.cast(plain(r, r.operand(p)), y.dtype))
    metas = node.meta["val"]
    ones = lead + (1,) * k
    return (result(r, _Meta(metas[0]), y), result(r, _Meta(metas[1]), ops.reshape(mu, ones)),
            result(r, _Meta(metas[2]), ops.reshape(rstd, ones)))


@lowers(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_eval(r, node, x, weight, bias, running_mean, running_var, momentum, eps):
    """Batch norm with running statistics (eval): per channel (dim 1) ``(x - mean) * rsqrt(var + eps) * w + b``.
    Only the normalised output is lowered (the saved statistics are empty in eval)."""
    lv = r.operand(x)
    if lv.rank < 2:
        raise Unsupported("batch norm of a tensor of rank < 2")
    c = _prod(parts_of(r, lv)[1])
    shape = [c] + [1] * (lv.rank - 2)

    def per_channel(a):
        return view(r, r.operand(a), shape)
    out = lv
    for a, f in ((running_mean, ops.sub), (running_var, None), (weight, ops.mul), (bias, ops.add)):
        if a is None:
            continue
        if f is None:  # the variance: multiply by 1 / sqrt(var + eps)
            pc = per_channel(a)
            inv = LVal(ops.rsqrt(ops.add(pc.v, number(eps))), pc.groups)
            vals, groups = align(r, _Meta(node.meta["val"][0]), [out, inv])
            out = LVal(ops.mul(*vals), groups)
            continue
        vals, groups = align(r, _Meta(node.meta["val"][0]), [out, per_channel(a)])
        out = LVal(f(*vals), groups)
    return (result(r, _Meta(node.meta["val"][0]), out.v, out.groups), None, None)


class _Meta:
    """A stand-in node carrying one output's metadata (for the checks of ``result``)."""

    def __init__(self, val):
        self.meta = {"val": val}
        self.name = "output"


# ---- matmul --------------------------------------------------------------------------------------------------

def _mm_folded_k(r, la, lb):
    """``A @ B`` whose inner dim torch folded from two (``A: [M, s0 * s1]``, a weight gradient over ``batch *
    seq``): a product batched over the outer fold (``[s0, M, s1] @ [s0, s1, N]``) summed over it."""
    if la.v.ndim != 3 or len(la.groups) != 2 or la.groups[0] != (0,) or la.groups[1] != (1, 2) or lb.rank != 2 \
            or any(len(g) != 1 for g in lb.groups):
        raise Unsupported("a matmul whose inner or right-hand dims are folded")
    s0, s1 = la.v.shape[1], la.v.shape[2]
    b = plain(r, lb)
    prod = dims.arith(r.g.syms, "*", s0, s1)
    if r.g.syms.equal(b.shape[0], prod) is not True:
        raise Unsupported("a matmul whose folded inner dim differs from the right-hand side's")
    v = ops.sum(ops.matmul(ops.permute(la.v, (1, 0, 2)), ops.reshape(b, (s0, s1, b.shape[1]))), 0)
    return v, ((0,), (1,))


def _mm(r, node, a, b):
    la, lb = r.operand(a), r.operand(b)
    if len(la.groups[-1]) == 2 and all(len(g) == 1 for g in lb.groups):
        return _mm_folded_k(r, la, lb)
    if len(la.groups[-1]) > 1 or la.v.ndim > 4:
        la = LVal(plain(r, la))  # torch's exact (M, K), the fold a derived dim
    elif any(len(g) == 0 for g in la.groups):
        # a unit M or K (a batch-1 decode step's (1, 1, K) activation viewed as (1, K)): kept as a dim of 1
        la = rebase(r, la, [p or [1] for p in parts_of(r, la)], keep_units=True)
    v = ops.matmul(la.v, plain(r, lb))
    k = la.v.ndim - 1
    return v, (tuple(range(k)), (k,))


@lowers(aten.mm.default)
def _mm_lower(r, node, a, b):
    return result(r, node, *_mm(r, node, a, b))


@lowers(aten.addmm.default)
def _addmm(r, node, bias, a, b, beta=1, alpha=1):
    v, groups = _mm(r, node, a, b)
    mm = LVal(v, groups)
    if alpha != 1:
        mm = LVal(ops.mul(mm.v, number(alpha)), mm.groups)
    lb = r.operand(bias)
    if beta != 1:
        lb = LVal(ops.mul(lb.v, number(beta)), lb.groups)
    vals, g2 = align(r, node, [mm, lb])
    return result(r, node, ops.add(*vals), g2)


@lowers(aten.bmm.default)
def _bmm(r, node, a, b):
    la, lb = r.operand(a), r.operand(b)
    if any(len(g) != 1 for g in la.groups[1:] + lb.groups[1:]):
        # matrix dims torch folded (an einsum's (b, l * h, d)) or unit dims: torch's exact shapes
        return result(r, node, ops.matmul(plain(r, la), plain(r, lb)))
    pa, pb = parts_of(r, la)[0], parts_of(r, lb)[0]
    if len(pa) != len(pb) and _eq(_prod(pa), _prod(pb)):  # one folds batch * heads, the other names the product
        try:
            if len(pa) > len(pb):
                lb = rebase(r, lb, [pa] + parts_of(r, lb)[1:])
            else:
                la = rebase(r, la, [pb] + parts_of(r, la)[1:])
        except DvmError as e:
            raise Unsupported(f"a bmm whose batch dims fold differently ({e})") from None
        pa, pb = parts_of(r, la)[0], parts_of(r, lb)[0]
    if len(pa) != len(pb) or len(pa) > 2:
        raise Unsupported("a bmm whose batch dims fold differently or more than two batch dims")
    v = ops.matmul(la.v, lb.v)
    k = len(pa)
    return result(r, node, v, (tuple(range(k)), (k,), (k + 1,)))

