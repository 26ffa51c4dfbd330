"""Operations of the kernel language that combine the elements of a tile: reductions (built-in and with a
``@dvmlang.kernel`` combine function), scans, ``softmax``, sorting, ``topk``, ``histogram``, and ``dot``.
"""

from __future__ import annotations

from ..errors import KernelTypeError
from ..frontend import combine
from ..frontend.values import unwrap
from .core import bool_const, builtin
from .elementwise import PropagateNan, nan_op

def _reduction(name, doc):
    def fn(input, axis=None, keep_dims=False, dtype=None, _sem=None):
        return _sem.reduce(input, name, axis, keep_dims, dtype)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


sum = _reduction("sum", "Sum along ``axis`` (all elements when None). Small ints sum in int32; fp16/bf16 accumulate in fp32.")
prod = _reduction("prod", "Product along ``axis``.")
xor_sum = _reduction("xor_sum", "Bitwise xor along ``axis`` (integers and booleans).")


@builtin
def reduce_or(input, axis=None, keep_dims=False, _sem=None):
    """Bitwise or along ``axis`` (integers and booleans; on booleans, "any")."""
    return _sem.reduce(input, "or", axis, keep_dims)


def _max_min(name, doc):
    def fn(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False,
           propagate_nan=PropagateNan.NONE, _sem=None):
        bool_const(return_indices_tie_break_left, "return_indices_tie_break_left")
        nan = nan_op("maximum", propagate_nan) == "maximum"  # ALL: a NaN in the input gives NaN
        if nan and bool_const(return_indices, "return_indices"):
            raise KernelTypeError(f"dl.{name}(..., propagate_nan=dl.PropagateNan.ALL) returns no indices",
                                  hint=f"call dl.arg{name} for the indices (it ignores NaN, as in Triton)")
        value = _sem.reduce(input, name + "_nan" if nan else name, axis, keep_dims)
        if bool_const(return_indices, "return_indices"):
            return value, _sem.reduce(input, "arg" + name, axis, keep_dims)
        return value
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return builtin(fn)


max = _max_min("max", "Maximum along ``axis``, ignoring NaN as Triton does (NaN only if every value is NaN; "
                      "``propagate_nan=dl.PropagateNan.ALL``: NaN if any value is); with ``return_indices=True`` the "
                      "pair (maximum, index of its first occurrence).")
min = _max_min("min", "Minimum along ``axis``, ignoring NaN as Triton does (NaN only if every value is NaN; "
                      "``propagate_nan=dl.PropagateNan.ALL``: NaN if any value is); with ``return_indices=True`` the "
                      "pair (minimum, index of its first occurrence).")


@builtin
def argmax(input, axis=None, tie_break_left=True, keep_dims=False, _sem=None):
    """Index of the maximum along ``axis`` (the first one on ties, which ``tie_break_left=False`` allows too),
    as int32; with ``axis=None`` the index into the flattened tile."""
    bool_const(tie_break_left, "tie_break_left")
    return _sem.reduce(input, "argmax", axis, keep_dims)


@builtin
def argmin(input, axis=None, tie_break_left=True, keep_dims=False, _sem=None):
    """Index of the minimum along ``axis`` (the first one on ties, which ``tie_break_left=False`` allows too),
    as int32; with ``axis=None`` the index into the flattened tile."""
    bool_const(tie_break_left, "tie_break_left")
    return _sem.reduce(input, "argmin", axis, keep_dims)


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None, _sem=None):
    """Inclusive prefix sum along ``axis``; ``dtype`` converts the input first (and is the result's dtype)."""
    return _sem.scan(input, "sum", axis, reverse, dtype)


@builtin
def cumprod(input, axis=0, reverse=False, _sem=None):
    """Inclusive prefix product along ``axis``."""
    return _sem.scan(input, "prod", axis, reverse)


@builtin
def cummax(input, axis=0, reverse=False, _sem=None):
    """Inclusive running maximum along ``axis`` (NaN propagates: once a NaN is met, the rest are NaN)."""
    return _sem.scan(input, "max", axis, reverse)


@builtin
def cummin(input, axis=0, reverse=False, _sem=None):
    """Inclusive running minimum along ``axis`` (NaN propagates)."""
    return _sem.scan(input, "min", axis, reverse)


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False, _sem=None):
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (as in Triton, ``None`` means dimension 0). The result
    has ``x``'s shape; ``keep_dims`` and ``ieee_rounding`` are accepted and change nothing."""
    x = _sem.to_tensor(x)
    if not x.shape:
        raise KernelTypeError("dl.softmax needs a tile with at least one dimension, got a single value",
                              hint="the softmax of a single value is 1.0")
    d = 0 if unwrap(dim) is None else dim
    z = _sem.binary("sub", x, _sem.reduce(x, "max", d, True))
    num = _sem.unary("exp", z)
    return _sem.binary("truediv", num, _sem.reduce(num, "sum", d, True))


@builtin
def sort(x, dim=None, descending=False, _sem=None):
    """``x`` sorted along ``dim`` (the last dimension when None), ascending unless ``descending``; NaN sorts as
    the largest value."""
    return _sem.sort(x, dim, bool_const(descending, "descending"))


@builtin
def topk(x, k, dim=None, descending=True, _sem=None):
    """The ``k`` largest elements along ``dim`` (the last dimension when None), largest first; with
    ``descending=False`` the ``k`` smallest, smallest first (Triton's ``tl.topk``, torch's ``largest=``)."""
    return _sem.topk(x, k, dim, bool_const(descending, "descending"))


@builtin
def histogram(input, num_bins, mask=None, _sem=None):
    """The ``int32`` counts of the values ``0 .. num_bins - 1`` among the integer elements of ``input`` (any
    shape); other values, and elements where ``mask`` is false, are not counted."""
    return _sem.histogram(input, num_bins, mask)


@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _sem=None):
    """Reduce along ``axis`` with an associative ``combine_fn`` (a ``@dvmlang.kernel`` taking two values,
    or two tuples, and returning one). ``input`` may be a tuple of tiles of one shape."""
    return combine.reduce(_sem.codegen, input, axis, combine_fn, bool(unwrap(keep_dims)))


@builtin
def associative_scan(input, axis, combine_fn, reverse=False, _sem=None):
    """Inclusive scan along ``axis`` with an associative ``combine_fn`` (``reverse`` scans from the end)."""
    return combine.scan(_sem.codegen, input, axis, combine_fn, bool(unwrap(reverse)))


@builtin
def dot(input, other, acc=None, out_dtype=None, allow_tf32=None, input_precision=None, max_num_imprecise_acc=None,
        _sem=None):
    """Matrix product on the cube unit: fp16/bf16 inputs accumulate in fp32; ``acc`` is added. The precision
    hints are accepted and ignored (the cube unit accumulates every product exactly in fp32)."""
    return _sem.dot(input, other, acc, out_dtype)


__all__ = ["sum", "prod", "xor_sum", "reduce_or", "max", "min", "argmax", "argmin", "cumsum", "cumprod", "cummax",
           "cummin", "softmax", "sort", "topk", "histogram", "reduce", "associative_scan", "dot"]
