"""The core of ``dvmlang.ops`` (``ops.py`` gathers it with ``ops_index`` and ``ops_make``): tensor operations for ``@dvmlang.graph`` functions (and ``dvmlang.tensor`` values).

Elementwise math, comparisons, ``where``, ``cast``, shape views, reductions, ``matmul``, and composites
built from them (``softmax``, ``layer_norm``, ``rms_norm``, ``gelu``, ``silu``, ``swiglu``,
``scaled_dot_product_attention``). Python operators on graph values call these. Composites decompose
into primitives at capture time, so the fuser sees (and fuses) their parts.

Every operation builds on the backend of its operands (``backend.Backend``: the graph being captured, or the
lazy session of ``dvmlang.tensor`` values). The module lives in the fuser; ``dvmlang/ops.py`` installs it as
``dvmlang.ops``, and it installs itself as the ``TensorOperators`` that Python operators on values call.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes as dt
from .. import opdefs
from ..runtime import Kernel
from . import dims
from .backend import Backend
from .graph import COMPARISONS, GraphError, GraphValue, ScalarArg, Sym, Tracer, ValueNeeded
from .operators import TensorOperators

__all__ = [  # and one elementwise function per op vocabulary row with a tensor name (below)
    "where", "cast", "broadcast_to", "reshape",
    "transpose", "permute", "sum", "prod", "max", "min", "mean", "var", "matmul", "softmax", "log_softmax",
    "layer_norm", "rms_norm", "gelu", "silu", "swiglu", "scaled_dot_product_attention", "custom",
]


# ---- plumbing ----------------------------------------------------------------------------------------------


def _graph(*values) -> Backend:
    """The backend an operation on ``values`` builds on: a graph value's graph (it wins over lazy tensors, which
    it cannot take), else a lazy tensor's session, else the graph being captured."""
    found = None
    for v in values:
        if isinstance(v, TensorOperators):
            b = v.__dvm_backend__
            if b.captures:
                return b
            if found is None:
                found = b
    if found is not None:
        return found
    if Tracer.graph is not None:
        return Tracer.graph
    raise GraphError("dvmlang.ops work on graph values (inside a @dvmlang.graph function) or on dvmlang.tensor "
                     "values; wrap numpy arrays with dvmlang.tensor(x) to compute eagerly")


def _node(g: Backend, kind, inputs, shape, dtype, **attrs):
    return g.node(kind, inputs, tuple(shape), dtype, attrs)


def _value(g: Backend, x, like: dt.DType | None = None):
    """A value of ``g`` from one of its tensors or a Python number (numbers adopt the other operand's dtype)."""
    v = g.value(x)
    if v is not None:
        return v
    if x.__class__ is ScalarArg:  # a float argument known per call: the constant its value would be, bound to it
        bound = getattr(g, "scalar_args", None)
        if bound is None:
            raise ValueNeeded(f"argument `{x.name}` of a captured function cannot be used outside its capture")
        c = _value(g, x.value, like)
        bound.append((c.node, x.pos))
        return c
    if isinstance(x, (bool, int, float, np.generic)):
        x = x.item() if isinstance(x, np.generic) else x
        if like is None:
            d = dt.scalar_dtype_of_python(x)
        elif isinstance(x, float) and not like.is_float:
            d = dt.float32
        else:
            d = like
        return _node(g, "const", [], (), d, value=x)
    if isinstance(x, Sym):  # a size used as a number (x / x.shape[-1]): a float32 per call
        return _node(g, "dim", [], (), dt.float32, sym=g.syms.find(x))
    if isinstance(x, np.ndarray):
        if getattr(g, "captures", False):
            return g.closure(x)  # a weight closed over from the enclosing scope
        raise GraphError("expected a tensor or a number, got a numpy array")
    raise GraphError(f"expected a tensor or a number, got {type(x).__name__}")


def _broadcast(g, a: tuple, b: tuple, why: str) -> tuple:
    syms = g.syms
    out = []
    for i in range(1, builtins.max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        x, y = syms.find(x), syms.find(y)
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        else:
            eq = syms.equal(x, y)
            if eq is False:
                raise GraphError(f"{why}: shapes {g.shape_text(a)} and {g.shape_text(b)} do not broadcast "
                                 f"(dimension {len(out)} from the end: {x} vs {y})")
            out.append(x if eq else syms.unify(x, y, why))
    return tuple(reversed(out))


def _result_dtype(a: dt.DType, b: dt.DType, op: str) -> dt.DType:
    r = dt.promote_tensors(a, b)
    rule = opdefs.BINARY[op].rule if op in opdefs.BINARY else "num"
    if rule == "float" and not r.is_float:
        return dt.float32  # (integers divide, and take C's two-operand math, as float32)
    if rule in ("int", "intbool") and (r.is_float or (rule == "int" and r.is_bool)):
        raise GraphError(f"{opdefs.BINARY[op].tensor or op} needs integer{' or bool' if rule == 'intbool' else ''} "
                         f"operands, got {a.name} and {b.name}")
    return r


def _pair(a, b, op):
    g = _graph(a, b)
    if not isinstance(a, TensorOperators):
        b = _value(g, b)
        a = _value(g, a, b.dtype)
    else:
        a = _value(g, a)
        b = _value(g, b, a.dtype)
    return g, a, b


def _binary(op, a, b):
    g, a, b = _pair(a, b, op)
    shape = _broadcast(g, _shape(a), _shape(b), f"operands of {op}")
    if op in COMPARISONS:
        d = dt.bool_
        common = dt.promote_tensors(a.dtype, b.dtype)
        a, b = cast(a, common), cast(b, common)
    elif op in ("and", "or") and a.dtype is dt.bool_ and b.dtype is dt.bool_:
        d = dt.bool_
    else:
        d = _result_dtype(a.dtype, b.dtype, op)
        a, b = cast(a, d), cast(b, d)
    return _node(g, op, [a, b], shape, d)


def _unary(op, x):
    g = _graph(x)
    x = _value(g, x)
    if opdefs.UNARY[op].rule == "intbool" and x.dtype.is_float:
        raise GraphError(f"{opdefs.UNARY[op].tensor or op} needs integer or bool operands, got {x.dtype.name}")
    if opdefs.UNARY[op].float_only and not x.dtype.is_float:
        if "int_identity" in opdefs.UNARY[op].traits:
            return x
        x = cast(x, dt.float32)
    return _node(g, op, [x], _shape(x), x.dtype)


def _shape(x):
    return x.node.shape if isinstance(x, GraphValue) else x.shape


# ---- elementwise: one function per row of the op vocabulary with a tensor name (dvmlang/opdefs.py) ----------


def _elementwise(op: opdefs.OpDef):
    if op.arity == 1:
        def fn(x):
            return _unary(op.name, x)
        doc = op.dl or f"{op.symbol}x, elementwise."
    else:
        def fn(a, b):
            return _binary(op.name, a, b)
        doc = f"Elementwise {op.name}" if op.spelling.isalpha() else f"a {op.symbol} b, elementwise"
        doc += " (numpy broadcasting; Python numbers adopt the tensor's dtype"
        doc += "; a bool result)." if "compare" in op.traits else \
            "; integers divide as float32)." if op.float_only else ")."
    fn.__name__ = fn.__qualname__ = op.tensor
    fn.__doc__ = doc
    return fn


_EW = {op.tensor: _elementwise(op) for op in opdefs.ELEMENTWISE.values() if op.tensor}
globals().update(_EW)
__all__ += [name for name in _EW if name not in __all__]
# the composites below call these by name
add, sub, mul, div, ge, ne, exp, log, rsqrt, tanh, erf, sigmoid = (
    _EW[n] for n in ("add", "sub", "mul", "div", "ge", "ne", "exp", "log", "rsqrt", "tanh", "erf", "sigmoid"))


def where(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``."""
    g = _graph(cond, a, b)
    c = _value(g, cond)
    if isinstance(a, TensorOperators):
        a = _value(g, a)
        b = _value(g, b, a.dtype)
    else:
        b = _value(g, b)
        a = _value(g, a, b.dtype)
    d = dt.promote_tensors(a.dtype, b.dtype)
    a, b = cast(a, d), cast(b, d)
    if c.dtype is not dt.bool_:
        c = ne(c, 0)
    shape = _broadcast(g, _shape(c), _broadcast(g, _shape(a), _shape(b), "where"), "where")
    return _node(g, "where", [c, a, b], shape, d)


def cast(x, dtype):
    """Convert to ``dtype`` (a dvmlang dtype, numpy dtype or name). A cast to ``x``'s own dtype returns ``x`` itself
    (as torch's ``.to`` does, unlike numpy's copying ``astype``): a later in-place write to ``x`` shows through it."""
    g = _graph(x)
    x = _value(g, x)
    d = dt.lookup(dtype)
    if d is None:
        raise GraphError(f"{dtype!r} is not a dtype")
    if d is x.dtype:
        return x
    return _node(g, "cast", [x], _shape(x), d)


# ---- shape -------------------------------------------------------------------------------------------------


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape``. Nothing is copied until something computes with it, but the result is a value
    of its own, not an alias of ``x``: a later in-place write to ``x`` does not change it (unlike numpy's view)."""
    g = _graph(x)
    x = _value(g, x)
    shape = tuple(shape)
    out = _broadcast(g, _shape(x), shape, "broadcast_to")
    if len(out) != len(shape):
        raise GraphError(f"cannot broadcast {g.shape_text(_shape(x))} to {g.shape_text(shape)}")
    return _node(g, "broadcast_to", [x], out, x.dtype)


def reshape(x, shape):
    """The same elements in a new shape (row-major). One dimension may be -1. Dims may be symbols and shape
    arithmetic on them (``(x.shape[0] * x.shape[1], -1)``, ``(b, s, h, x.shape[-1] // h)``): a size that is only
    right when it divides evenly is checked at every call (``GraphError`` when it does not)."""
    g = _graph(x)
    x = _value(g, x)
    shape = tuple(_dim_arg(g, d, "reshape") for d in shape)
    old = tuple(g.syms.find(d) for d in _shape(x))
    if any(isinstance(d, int) and d < 0 and d != -1 for d in shape):
        raise GraphError(f"reshape: negative size in {shape}")
    if -1 in [d for d in shape if isinstance(d, int)]:
        if [d for d in shape if isinstance(d, int)].count(-1) != 1:
            raise GraphError("reshape takes at most one -1")
        shape = tuple(_infer_dim(g, old, shape) if isinstance(d, int) and d == -1 else d for d in shape)
    if not _same_numel(g, old, shape):
        if any(dims.is_derived(g.syms, d) for d in shape + old) and g.captures:
            g.syms.checks.append(("eq", dims.product(g.syms, old), dims.product(g.syms, shape),
                                  f"reshape {g.shape_text(old)} -> {g.shape_text(shape)}"))
        else:
            hint = ""
            if any(not isinstance(d, int) for d in old) and all(isinstance(d, int) for d in shape):
                hint = ("; the input's dims are symbols (one per call), so a reshape to numbers cannot be proven: "
                        "use -1 and the input's dims (x.shape[0], ...), or declare the dims static "
                        "(dvmlang.graph(fn, static={'x': (0, 1)}))")
            raise GraphError(f"cannot reshape {g.shape_text(old)} to {g.shape_text(shape)}: the sizes differ or "
                             f"cannot be proven equal{hint}")
    return _node(g, "reshape", [x], shape, x.dtype)


def _dim_arg(g, d, where):
    """A size argument: an int, a dim of ``g`` (a symbol or shape arithmetic on symbols)."""
    if isinstance(d, (np.integer,)):
        d = int(d)
    if isinstance(d, Sym):
        if getattr(g, "captures", False) and d.table is not g.syms:
            raise GraphError(f"{where}: {d} is a dim of another graph")
        return g.syms.find(d)
    if isinstance(d, bool) or not isinstance(d, int):
        raise GraphError(f"{where}: sizes must be ints or dims (x.shape[i] and arithmetic on them), got {d!r}")
    return d


def _infer_dim(g, old, shape):
    """The size that -1 stands for in ``reshape(x, shape)``: the elements of ``old`` divided by the other dims,
    exactly when the symbols cancel (a product of symbols is a dim too), else a quotient checked per call."""
    syms = g.syms
    known = dims.product(syms, [d for d in shape if not (isinstance(d, int) and d == -1)])
    total = dims.product(syms, old)
    if list(known) == [()] and list(total) == [()]:
        if known[()] == 0 or total[()] % known[()]:
            raise GraphError(f"cannot reshape {g.shape_text(old)} to {shape}: the sizes differ")
        return total[()] // known[()]
    if not known:
        raise GraphError(f"reshape {g.shape_text(old)} -> {shape}: -1 next to a size 0 is ambiguous")
    if not g.captures:
        raise GraphError(f"cannot reshape {g.shape_text(old)} to {shape}")
    return dims.arith(syms, "//", dims.dim_of(syms, total), dims.dim_of(syms, known))


def _same_numel(g, a, b) -> bool:
    """Whether two shapes have the same number of elements, proven symbol by symbol."""
    return dims.product(g.syms, a) == dims.product(g.syms, b)


def permute(x, *dims):
    """Reorder dimensions (a view)."""
    g = _graph(x)
    x = _value(g, x)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    r = len(_shape(x))
    dims = tuple(d % r for d in dims)
    if sorted(dims) != list(range(r)):
        raise GraphError(f"{dims} is not a permutation of {r} dimensions")
    return _node(g, "permute", [x], tuple(_shape(x)[d] for d in dims), x.dtype, perm=dims)


def transpose(x, dim0=-2, dim1=-1):
    """Swap two dimensions (the last two by default)."""
    r = len(_shape(x))
    if r < 2:
        return x
    perm = list(range(r))
    perm[dim0 % r], perm[dim1 % r] = perm[dim1 % r], perm[dim0 % r]
    return permute(x, tuple(perm))


# ---- reductions ----------------------------------------------------------------------------------------------


def _axes(x, axis):
    r = len(_shape(x))
    if axis is None:
        return tuple(range(r))
    if isinstance(axis, int):
        axis = (axis,)
    out = []
    for a in axis:
        if not -r <= a < r:
            raise GraphError(f"axis {a} is out of range for a tensor of rank {r}")
        out.append(a % r)
    return tuple(sorted(set(out)))


def _reduce(op, x, axis, keepdims):
    g = _graph(x)
    x = _value(g, x)
    axes = _axes(x, axis)
    shape = []
    for i, d in enumerate(_shape(x)):
        if i in axes:
            if keepdims:
                shape.append(1)
        else:
            shape.append(d)
    d = x.dtype
    if op in ("sum", "prod") and (d.is_bool or (d.is_int and d.bits < 32)):
        x = cast(x, dt.int32)
        d = dt.int32
    return _node(g, "reduce", [x], tuple(shape), d, op=op, axes=axes, keepdims=bool(keepdims))


def sum(x, axis=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (an int, a tuple, or None for all)."""
    return _reduce("sum", x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    """Product over ``axis`` (an int, a tuple, or None for all); bools and integers narrower than 32 bits multiply
    in int32, as ``sum`` adds them."""
    return _reduce("prod", x, axis, keepdims)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    return _reduce("min", x, axis, keepdims)


def _count(x, axis):
    g = _graph(x)
    # dvmlang.lazy() captures concrete sizes; a count that is a runtime value (a "dim" node) keeps the compiled
    # kernels shape-generic, so the next flush with new sizes only encodes
    n = 1
    syms = []
    for a in _axes(x, axis):
        d = g.syms.find(_shape(x)[a])
        if isinstance(d, int) and not (g.runtime_sizes and d > 1):
            n *= d
        else:
            syms.append(d)
    if not syms:
        return float(n)
    v = _node(g, "dim", [], (), dt.float32, sym=syms[0])
    for s in syms[1:]:
        v = mul(v, _node(g, "dim", [], (), dt.float32, sym=s))
    return mul(v, float(n)) if n != 1 else v


def _drop_axes(v, x, axis, keepdims):
    """``v`` (a keepdims reduction of ``x``) without the reduced axes unless ``keepdims``. The arithmetic on a
    reduction is done with keepdims, so it fuses with the reduction; the view comes last."""
    if keepdims:
        return v
    axes = _axes(x, axis)
    return reshape(v, tuple(d for i, d in enumerate(_shape(v)) if i not in axes))


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis``."""
    g = _graph(x)
    x = _value(g, x)
    if not x.dtype.is_float:
        x = cast(x, dt.float32)
    return _drop_axes(_in_dtype_of(x, div(sum(x, axis, True), _count(x, axis))), x, axis, keepdims)


def _in_dtype_of(x, v):
    """``v`` in ``x``'s dtype: a mean or variance of float16/bfloat16 divides by a float32 count (a runtime size in
    lazy mode) and keeps the input's dtype, as numpy and PyTorch do."""
    return v if v.dtype is x.dtype else cast(v, x.dtype)


def var(x, axis=None, keepdims=False, correction=0):
    """Variance over ``axis`` (population variance by default; ``correction=1`` for the sample variance)."""
    g = _graph(x)
    x = _value(g, x)
    if not x.dtype.is_float:
        x = cast(x, dt.float32)
    d = sub(x, mean(x, axis, keepdims=True))
    s = sum(mul(d, d), axis, True)
    n = _count(x, axis)
    if correction:
        n = n - correction if isinstance(n, float) else sub(n, correction)  # a static count is a Python number
    return _drop_axes(_in_dtype_of(x, div(s, n)), x, axis, keepdims)


# ---- matrix ----------------------------------------------------------------------------------------------


def matmul(a, b):
    """Batched matrix product on the cube unit: (..., M, K) @ (..., K, N) -> (..., M, N). fp16/bf16 inputs
    accumulate in fp32 and return their own dtype; fp32 stays fp32."""
    g = _graph(a, b)
    a, b = _value(g, a), _value(g, b)
    sa, sb = _shape(a), _shape(b)
    if len(sa) < 2 or len(sb) < 2:
        raise GraphError("matmul needs operands of rank >= 2")
    g.syms.unify(sa[-1], sb[-2], "inner dimensions of matmul")
    batch = _broadcast(g, sa[:-2], sb[:-2], "batch dimensions of matmul")
    d = dt.promote_tensors(a.dtype, b.dtype)
    a, b = cast(a, d), cast(b, d)
    return _node(g, "matmul", [a, b], batch + (sa[-2], sb[-1]), d)


# ---- composites ------------------------------------------------------------------------------------------


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along ``axis``."""
    m = max(x, axis, keepdims=True)
    e = exp(sub(x, m))
    return div(e, sum(e, axis, keepdims=True))


def log_softmax(x, axis=-1):
    m = max(x, axis, keepdims=True)
    s = sub(x, m)
    return sub(s, log(sum(exp(s), axis, keepdims=True)))


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Normalise over the last dimension, then scale by ``weight`` and shift by ``bias``."""
    mu = mean(x, -1, keepdims=True)
    d = sub(x, mu)
    v = mean(mul(d, d), -1, keepdims=True)
    y = mul(d, rsqrt(add(v, eps)))
    if weight is not None:
        y = mul(y, weight)
    if bias is not None:
        y = add(y, bias)
    return y


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    y = mul(x, rsqrt(add(mean(mul(x, x), -1, keepdims=True), eps)))
    return mul(y, weight) if weight is not None else y


def gelu(x, approximate="none"):
    """GELU: exact erf form by default; ``approximate="tanh"`` uses the tanh approximation (as PyTorch)."""
    if approximate == "tanh":
        inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    if approximate != "none":
        raise GraphError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return mul(mul(x, 0.5), add(erf(mul(x, 1.0 / math.sqrt(2.0))), 1.0))


def silu(x):
    """x * sigmoid(x)."""
    return mul(x, sigmoid(x))


def swiglu(x, gate=None):
    """silu(gate) * x; with one argument, the last dimension is split in two halves (x, gate)."""
    if gate is None:
        raise GraphError("swiglu(x) with a single packed tensor is not supported; pass swiglu(x, gate)")
    return mul(silu(gate), x)


def scaled_dot_product_attention(q, k, v, causal=False, scale=None, attn_mask=None):
    """softmax(q @ k^T * scale [+ causal mask] [+ attn_mask]) @ v over the last two dimensions. ``attn_mask`` as
    torch's: a bool mask keeps the scores where it is true (-inf elsewhere), a float mask is added to them."""
    g = _graph(q, k, v)
    q, k, v = _value(g, q), _value(g, k), _value(g, v)
    dk = g.syms.find(_shape(q)[-1])
    if scale is None:
        # a symbolic head size: the scale is computed per call, in q's dtype (like a Python number would be)
        scale = 1.0 / math.sqrt(dk) if isinstance(dk, int) else \
            cast(rsqrt(_node(g, "dim", [], (), dt.float32, sym=dk)), q.dtype)
    s = mul(matmul(q, transpose(k)), scale)
    if causal:
        shape = _shape(s)
        rows = _node(g, "iota", [], shape, dt.int32, axis=len(shape) - 2)
        cols = _node(g, "iota", [], shape, dt.int32, axis=len(shape) - 1)
        s = where(ge(rows, cols), s, float("-inf"))
    if attn_mask is not None:
        m = _value(g, attn_mask)
        s = where(m, s, float("-inf")) if m.dtype is dt.bool_ else add(s, cast(m, s.dtype))
    return matmul(softmax(s, -1), v)


def custom(kernel, grid, out_shapes, *args, **constexprs):
    """Call a ``@dvmlang.kernel`` inside a graph. ``out_shapes`` is a list of (shape, dtype) for the arrays the
    kernel writes; the kernel receives the ``args`` (graph values, dims such as ``x.shape[1]``, or numbers)
    followed by the outputs.
    ``grid`` is a tuple or a function of the concrete argument shapes. Returns the outputs."""
    if not isinstance(kernel, Kernel):
        raise GraphError(f"ops.custom needs a @dvmlang.kernel, got {kernel!r}")
    g = _graph(*args)
    ins = []
    consts = []
    for a in args:
        if isinstance(a, TensorOperators):
            ins.append(a)
            consts.append(None)
        elif isinstance(a, (bool, int, float, Sym)):
            consts.append(a)  # a Sym (a dim such as x.shape[1]) is passed as its size in each call
        else:
            raise GraphError(f"ops.custom arguments must be graph values, dims or numbers, got {type(a).__name__}")
    outs = []
    if not isinstance(out_shapes, list):
        out_shapes = [out_shapes]
    call = _node(g, "custom", ins, (), dt.int32, kernel=kernel, grid=grid, consts=tuple(consts),
                 constexprs=dict(constexprs), outs=tuple((tuple(s), dt.lookup(d)) for s, d in out_shapes))
    for i, (shape, d) in enumerate(out_shapes):
        d2 = dt.lookup(d)
        if d2 is None:
            raise GraphError(f"{d!r} is not a dtype")
        outs.append(_node(g, "custom_out", [call], tuple(shape), d2, index=i))
    return outs[0] if len(outs) == 1 else tuple(outs)
