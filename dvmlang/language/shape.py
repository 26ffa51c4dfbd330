"""Shape operations of the kernel language: reshapes, broadcasting, dimension insertion and removal,
transposes, concatenation, ``join``/``split``/``interleave``, ``flip`` and ``gather``.
"""

from __future__ import annotations

from ..errors import KernelTypeError
from ..ir.builder import broadcast_shapes
from ..frontend.values import unwrap
from .core import int_const, builtin

def _shape_args(shape):
    """``f(x, (2, 3))`` and ``f(x, 2, 3)`` both work, as in Triton."""
    if len(shape) == 1 and isinstance(unwrap(shape[0]), (tuple, list)):
        return tuple(unwrap(shape[0]))
    return tuple(shape)


@builtin
def reshape(x, *shape, can_reorder=False, _sem=None):
    """The same elements in a new shape (row-major): ``dl.reshape(x, (2, 3))`` or ``x.reshape(2, 3)``."""
    return _sem.reshape(x, _shape_args(shape))


view = reshape


@builtin
def broadcast_to(x, *shape, _sem=None):
    """``x`` broadcast to ``shape`` (numpy rules); the shape may also be given as separate sizes."""
    return _sem.broadcast_to(x, _shape_args(shape))


@builtin
def broadcast(a, b, _sem=None):
    """Both operands broadcast to their common shape."""
    a, b = _sem.pair(a, b)
    s = broadcast_shapes(a.shape, b.shape)
    if s is None:
        raise KernelTypeError(f"shapes {a.shape} and {b.shape} do not broadcast")
    return _sem.broadcast_to(a, s), _sem.broadcast_to(b, s)


@builtin
def expand_dims(x, axis, _sem=None):
    """Insert a unit dimension at ``axis`` (same as ``x[:, None]`` for axis 1)."""
    return _sem.expand_dims(x, axis)


@builtin
def trans(x, *dims, _sem=None):
    """Transpose: swap the last two dims, or permute by ``dims``."""
    if len(dims) == 1 and isinstance(unwrap(dims[0]), (tuple, list)):
        dims = tuple(unwrap(dims[0]))
    return _sem.trans(x, dims or None)


@builtin
def permute(x, *dims, _sem=None):
    """Reorder dimensions."""
    if len(dims) == 1 and isinstance(unwrap(dims[0]), (tuple, list)):
        dims = tuple(unwrap(dims[0]))
    return _sem.permute(x, dims)


@builtin
def cat(a, b, dim=0, can_reorder=False, _sem=None):
    """Concatenate two tiles along ``dim``."""
    return _sem.cat(a, b, dim)


@builtin
def join(a, b, _sem=None):
    """Stack two tiles along a new last dimension."""
    return _sem.join(a, b)


@builtin
def ravel(x, can_reorder=False, _sem=None):
    """The tile flattened to one dimension (row-major; ``can_reorder`` is accepted, the order is always kept)."""
    x = _sem.to_tensor(x)
    return _sem.reshape(x, (x.numel,))


@builtin
def squeeze(x, dim, _sem=None):
    """Remove the unit dimension ``dim``."""
    x = _sem.to_tensor(x)
    d, rank = int_const(dim, "squeeze dim"), len(x.shape)
    if not -rank <= d < rank:
        raise KernelTypeError(f"invalid axis {d}. Expected {-rank} <= axis < {rank}")
    d %= rank
    if x.shape[d] != 1:
        raise KernelTypeError(f"dl.squeeze: dimension {d} of shape {x.shape} is not 1",
                              hint="only a dimension of size 1 can be removed; use dl.reshape to change sizes")
    return _sem.reshape(x, x.shape[:d] + x.shape[d + 1:])


@builtin
def unsqueeze(x, dim, _sem=None):
    """Insert a unit dimension at ``dim`` (same as expand_dims)."""
    return _sem.expand_dims(x, dim)


@builtin
def split(a, _sem=None):
    """The inverse of ``dl.join``: split a tile whose last dimension is 2 into two tiles."""
    a = _sem.to_tensor(a)
    if not a.shape or a.shape[-1] != 2:
        raise KernelTypeError(f"dl.split needs a last dimension of 2, got shape {a.shape}",
                              hint="dl.split undoes dl.join; reshape to (..., 2) first, or slice with x[..., :k]")
    r = len(a.shape)
    outs = []
    for j in (0, 1):
        part = _sem.slice(a, (0,) * (r - 1) + (j,), a.shape[:-1] + (1,))
        outs.append(_sem.reshape(part, a.shape[:-1]) if r > 1 else _sem.as_scalar(part))
    return tuple(outs)


@builtin
def interleave(a, b, _sem=None):
    """The elements of ``a`` and ``b`` alternating along the last dimension, which doubles (both broadcast to
    one shape first); two scalars give a tile of 2."""
    return _sem.interleave(a, b)


@builtin
def flip(x, dim=None, _sem=None):
    """``x`` reversed along ``dim`` (the last dimension when None)."""
    return _sem.flip(x, dim)


@builtin
def gather(src, index, axis, _sem=None):
    """``out[..., i, ...] = src[..., index[..., i, ...], ...]`` along ``axis``: ``index`` has ``src``'s rank and
    shape except along ``axis``; the result has ``index``'s shape. An index outside ``[0, src.shape[axis])``
    stops the launch with ``DeviceError``."""
    return _sem.gather(src, index, axis)


__all__ = ["reshape", "broadcast_to", "broadcast", "expand_dims", "trans", "permute", "cat", "join", "ravel", "squeeze",
           "unsqueeze", "split", "interleave", "flip", "gather"]
