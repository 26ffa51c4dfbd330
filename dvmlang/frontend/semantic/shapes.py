"""Creating and reshaping tiles: ``arange``, ``full``, broadcasting, reshapes, dimension insertion,
permutations, concatenation, ``join``/``interleave``, ``flip``, ``gather``, static slices; and the limit on
a tile's element count.
"""

from __future__ import annotations

import math

from ... import dtypes as dt
from ...errors import ConstexprError, KernelTypeError
from ...ir.builder import broadcast_shapes
from ..values import pointer, tensor, unwrap

MAX_TILE_ELEMS = 1 << 22


def shape_text(shape) -> str:
    return "scalar" if shape == () else str(tuple(shape))


class ShapeOps:
    """The ``Semantic``'s creation and shape operations."""

    # ---- creation -------------------------------------------------------------------------------------
    def shape_arg(self, shape, what="shape") -> tuple[int, ...]:
        shape = unwrap(shape)
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(shape, list):
            shape = tuple(shape)
        if not isinstance(shape, tuple) or not all(isinstance(unwrap(s), int) for s in shape):
            raise ConstexprError(f"{what} must be a tuple of compile-time integers, got {shape!r}",
                                 hint="mark the sizes as dl.constexpr parameters")
        shape = tuple(unwrap(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise KernelTypeError(f"{what} {shape} has a dimension that is not positive")
        self._numel_check(shape)
        return shape

    def arange(self, start, end):
        start, end = unwrap(start), unwrap(end)
        if not isinstance(start, int) or not isinstance(end, int):
            raise ConstexprError("dl.arange bounds must be compile-time integers",
                                 hint="sizes must be integers known at compile time: pass an int to a `dl.constexpr` parameter")
        if end <= start:
            raise KernelTypeError(f"dl.arange({start}, {end}) is empty: end must be greater than start")
        self._numel_check((end - start,))
        return tensor(self.b.arange(start, end))

    def full(self, shape, value, dtype=None):
        shape = self.shape_arg(shape)
        value = unwrap(value)
        d = self.dtype_arg(dtype) if dtype is not None else None
        if isinstance(value, tensor):
            s = self.as_scalar(value, "the fill value")
            if d is not None:
                s = self.cast(s, d)
        else:
            if d is None:
                d = dt.scalar_dtype_of_python(value)
            s = self.const(value, d)
        return tensor(self.b.full(shape, s.handle))

    def splat(self, x: tensor, shape) -> tensor:
        if x.is_tile:
            return self.broadcast_to(x, shape)
        return tensor(self.b.full(tuple(shape), x.handle))

    # ---- shape ----------------------------------------------------------------------------------------
    def broadcast_to(self, x, shape):
        shape = self.shape_arg(shape)
        x = unwrap(x)
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.broadcast_to(off, shape))
        x = self.to_tensor(x)
        if x.is_scalar:
            return tensor(self.b.full(shape, x.handle))
        if x.shape == shape:
            return x
        if broadcast_shapes(x.shape, shape) != shape:
            raise KernelTypeError(f"cannot broadcast shape {x.shape} to {shape}")
        return tensor(self.b.broadcast(x.handle, shape))

    def reshape(self, x, shape):
        shape = unwrap(shape)
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(unwrap(s) for s in shape)
        x = unwrap(x)
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.reshape(off, shape))
        x = self.to_tensor(x)
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            shape = tuple(x.numel // known if s == -1 else s for s in shape)
        shape = self.shape_arg(shape) if shape else ()
        n = math.prod(shape)
        if n != x.numel:
            raise KernelTypeError(f"cannot reshape a tile of shape {shape_text(x.shape)} ({x.numel} elements) "
                                  f"to {shape} ({n} elements)")
        if x.is_scalar:
            return tensor(self.b.full(shape, x.handle))
        if shape == x.shape:
            return x
        return tensor(self.b.reshape(x.handle, shape))

    def expand_dims(self, x, axis):
        x = unwrap(x)
        axes = unwrap(axis)
        axes = [unwrap(a) for a in axes] if isinstance(axes, (tuple, list)) else [axes]
        if isinstance(x, pointer):
            return self.ptr_with(x, lambda off: self.expand_dims(off, tuple(axes)))
        x = self.to_tensor(x)
        rank = len(x.shape) + len(axes)  # as Triton: negative axes count from the end of the result
        for a in axes:
            if not isinstance(a, int):
                raise ConstexprError("expand_dims axis must be a compile-time integer")
            if not -rank <= a < rank:
                raise KernelTypeError(f"invalid axis {a}. Expected {-rank} <= axis < {rank} (the result has rank "
                                      f"{rank})")
        norm = [a % rank for a in axes]
        if len(set(norm)) != len(norm):
            raise KernelTypeError(f"expand_dims received duplicate axes, normalized axes = {norm}")
        shape = list(x.shape)
        for a in sorted(norm):
            shape.insert(a, 1)
        if x.is_scalar:
            return tensor(self.b.full(tuple(shape), x.handle))
        return tensor(self.b.reshape(x.handle, tuple(shape)))

    def permute(self, x, perm):
        x = self.to_tensor(x)
        perm = tuple(unwrap(p) for p in (unwrap(perm) if isinstance(unwrap(perm), (tuple, list)) else (perm,)))
        if sorted(perm) != list(range(len(x.shape))):
            raise KernelTypeError(f"permutation {perm} does not fit a tile of rank {len(x.shape)}")
        if perm == tuple(range(len(perm))):
            return x
        return tensor(self.b.permute(x.handle, perm))

    def trans(self, x, dims=None):
        x = self.to_tensor(x)
        if dims is None or dims == ():
            if len(x.shape) < 2:
                return x
            perm = tuple(range(len(x.shape) - 2)) + (len(x.shape) - 1, len(x.shape) - 2)
            return self.permute(x, perm)
        return self.permute(x, dims)

    def cat(self, a, b, axis=0):
        a, b = self.pair(a, b)
        axis = unwrap(axis)
        if a.dtype is not b.dtype:
            res = dt.promote(a.dtype, b.dtype)
            a, b = self.cast(a, res), self.cast(b, res)
        if len(a.shape) != len(b.shape) or not a.shape:
            raise KernelTypeError(f"dl.cat needs two tiles of the same rank, got {a.shape} and {b.shape}")
        axis = axis % len(a.shape)
        if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis):
            raise KernelTypeError(f"dl.cat shapes {a.shape} and {b.shape} differ outside axis {axis}")
        return tensor(self.b.cat(a.handle, b.handle, axis))

    def join(self, a, b):
        a, b = self.pair(a, b)
        if a.shape != b.shape:
            s = broadcast_shapes(a.shape, b.shape)
            if s is None:
                raise KernelTypeError(f"dl.join shapes {a.shape} and {b.shape} do not broadcast")
            a, b = self.broadcast_to(a, s), self.broadcast_to(b, s)
        r = len(a.shape)
        return self.cat(self.expand_dims(a, r), self.expand_dims(b, r), axis=r)

    def flip(self, x, dim=None):
        """``x`` reversed along ``dim`` (the last dimension when None): a take with a descending index."""
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.flip needs a tile with at least one dimension, got a single value",
                                  hint="a single value is its own flip")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        n = x.shape[ax]
        if n == 1:
            return x
        rev = self.binary("sub", n - 1, self.arange(0, n))
        idx = self.reshape(rev, tuple(n if d == ax else 1 for d in range(len(x.shape))))
        return tensor(self.b.take(x.handle, idx.handle, ax))

    def interleave(self, a, b):
        """The elements of ``a`` and ``b`` alternating along the last dimension."""
        c = self.join(a, b)
        if len(c.shape) == 1:
            return c
        return self.reshape(c, c.shape[:-2] + (2 * c.shape[-2],))

    def gather(self, src, index, axis):
        """Triton's ``tl.gather``: ``out[..., i, ...] = src[..., index[..., i, ...], ...]`` along ``axis``."""
        src, index = self.to_tensor(src), self.to_tensor(index)
        if not src.shape or len(index.shape) != len(src.shape):
            raise KernelTypeError(f"dl.gather needs a tile and an index tile of the same rank, got shapes "
                                  f"{shape_text(src.shape)} and {shape_text(index.shape)}",
                                  hint="add unit dimensions to the index with idx[:, None] or dl.expand_dims")
        if not index.dtype.is_int:
            raise KernelTypeError(f"dl.gather indices must be integers, got {index.dtype}",
                                  hint="convert them with .to(dl.int32)")
        ax = self._axis(src, axis)
        for d in range(len(src.shape)):
            if d != ax and index.shape[d] != src.shape[d]:
                raise KernelTypeError(f"dl.gather index shape {index.shape} must match the source shape {src.shape} "
                                      f"in every dimension but the axis {ax}", hint="broadcast the index first")
        return tensor(self.b.take(src.handle, index.handle, ax))

    def slice(self, x: tensor, starts, sizes) -> tensor:
        return tensor(self.b.slice(x.handle, tuple(starts), tuple(sizes)))

    # ---- limits ---------------------------------------------------------------------------------------
    def _numel_check(self, shape):
        n = math.prod(shape)
        if n > MAX_TILE_ELEMS:
            raise KernelTypeError(f"a tile of shape {shape} has {n} elements, more than the limit {MAX_TILE_ELEMS}",
                                  hint="use a smaller BLOCK and loop over the data")
