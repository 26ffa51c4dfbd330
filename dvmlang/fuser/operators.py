"""Python operators and tensor methods shared by graph values (``@dvmlang.graph``) and lazy tensors.

Every operator calls a ``dvmlang.ops`` function; the two value types differ only in their backend (what the node
is attached to, ``backend.Backend``), which ``ops`` works out from the operands. This module does not import
``ops``: ``ops`` installs itself as ``TensorOperators._ops`` when it is imported.
"""
from __future__ import annotations

from ..errors import user_frames_methods


@user_frames_methods
class TensorOperators:
    """Arithmetic, comparison, matmul and reduction spelled as Python operators and methods. A subclass names its
    backend with the ``__dvm_backend__`` property."""

    __slots__ = ()
    _ops = None  # the dvmlang.ops module (it sets this when it is imported)

    def __add__(self, o):
        return self._ops.add(self, o)

    def __radd__(self, o):
        return self._ops.add(o, self)

    def __sub__(self, o):
        return self._ops.sub(self, o)

    def __rsub__(self, o):
        return self._ops.sub(o, self)

    def __mul__(self, o):
        return self._ops.mul(self, o)

    def __rmul__(self, o):
        return self._ops.mul(o, self)

    def __truediv__(self, o):
        return self._ops.div(self, o)

    def __rtruediv__(self, o):
        return self._ops.div(o, self)

    def __pow__(self, o):
        return self._ops.pow(self, o)

    def __rpow__(self, o):
        return self._ops.pow(o, self)

    def __matmul__(self, o):
        return self._ops.matmul(self, o)

    def __rmatmul__(self, o):
        return self._ops.matmul(o, self)

    def __neg__(self):
        return self._ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._ops.abs(self)

    def __lt__(self, o):
        return self._ops.lt(self, o)

    def __le__(self, o):
        return self._ops.le(self, o)

    def __gt__(self, o):
        return self._ops.gt(self, o)

    def __ge__(self, o):
        return self._ops.ge(self, o)

    # == and != are elementwise, as in numpy and torch (identity hashing stays)
    def __eq__(self, o):
        return self._ops.eq(self, o)

    def __ne__(self, o):
        return self._ops.ne(self, o)

    __hash__ = object.__hash__

    @property
    def T(self):
        return self._ops.transpose(self)

    def transpose(self, dim0=-2, dim1=-1):
        return self._ops.transpose(self, dim0, dim1)

    def permute(self, *dims):
        return self._ops.permute(self, *dims)

    def reshape(self, *shape):
        return self._ops.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def astype(self, dtype):
        return self._ops.cast(self, dtype)

    def sum(self, axis=None, keepdims=False):
        return self._ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return self._ops.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return self._ops.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return self._ops.min(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, keepdims=False, correction=0):
        return self._ops.var(self, axis=axis, keepdims=keepdims, correction=correction)

    def unsqueeze(self, axis):
        return self._ops.unsqueeze(self, axis)

    def squeeze(self, axis=None):
        return self._ops.squeeze(self, axis)

    def flatten(self, start_axis=0, end_axis=-1):
        return self._ops.flatten(self, start_axis, end_axis)

    def expand(self, *sizes):
        return self._ops.expand(self, *sizes)

    def narrow(self, axis, start, length):
        return self._ops.narrow(self, axis, start, length)

    def chunk(self, chunks, axis=0):
        return self._ops.chunk(self, chunks, axis)

    def split(self, split_size_or_sections, axis=0):
        return self._ops.split(self, split_size_or_sections, axis)

    def masked_fill(self, mask, value):
        return self._ops.masked_fill(self, mask, value)

    def cumsum(self, axis=-1):
        return self._ops.cumsum(self, axis)

    def argmax(self, axis=None, keepdims=False):
        return self._ops.argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return self._ops.argmin(self, axis, keepdims)

    # ``~ & | ^ << >>``: bitwise on integers, logical on bools, as numpy and torch (``& | ~`` of floats keep
    # their truth values: nonzero is true)
    def __invert__(self):
        return self._ops.logical_not(self) if self.dtype.is_float else self._ops.bitwise_not(self)

    def __and__(self, o):
        return self._ops.logical_and(self, o) if _floats(self, o) else self._ops.bitwise_and(self, o)

    def __rand__(self, o):
        return self._ops.logical_and(o, self) if _floats(self, o) else self._ops.bitwise_and(o, self)

    def __or__(self, o):
        return self._ops.logical_or(self, o) if _floats(self, o) else self._ops.bitwise_or(self, o)

    def __ror__(self, o):
        return self._ops.logical_or(o, self) if _floats(self, o) else self._ops.bitwise_or(o, self)

    def __xor__(self, o):
        return self._ops.bitwise_xor(self, o)

    def __rxor__(self, o):
        return self._ops.bitwise_xor(o, self)

    def __lshift__(self, o):
        return self._ops.left_shift(self, o)

    def __rlshift__(self, o):
        return self._ops.left_shift(o, self)

    def __rshift__(self, o):
        return self._ops.right_shift(self, o)

    def __rrshift__(self, o):
        return self._ops.right_shift(o, self)

    def __floordiv__(self, o):
        return self._ops.floor_divide(self, o)

    def __rfloordiv__(self, o):
        return self._ops.floor_divide(o, self)

    def __mod__(self, o):
        return self._ops.remainder(self, o)

    def __rmod__(self, o):
        return self._ops.remainder(o, self)


def _floats(a, o) -> bool:
    """Whether a ``&``/``|`` has a float operand (a Python float, or a tensor of floats)."""
    return a.dtype.is_float or isinstance(o, float) or bool(getattr(getattr(o, "dtype", None), "is_float", False))
