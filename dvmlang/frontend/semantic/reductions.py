"""Operations that combine the elements of a tile: reductions, scans, sorting, ``topk``, ``histogram``, and
the matrix product ``dot``.
"""

from __future__ import annotations

from ... import dtypes as dt
from ...errors import ConstexprError, KernelTypeError
from ...ir.builder import broadcast_shapes
from ..values import tensor, unwrap
from .shapes import shape_text


class ReductionOps:
    """The ``Semantic``'s reductions, scans, sorts and ``dot``."""

    # ---- reductions -----------------------------------------------------------------------------------
    def _axis(self, x: tensor, axis) -> int | None:
        axis = unwrap(axis)
        if axis is None:
            return None
        if not isinstance(axis, int):
            raise ConstexprError("the reduction axis must be a compile-time integer")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise KernelTypeError(f"axis {axis} is out of range for a tile of shape {shape_text(x.shape)}",
                                  hint=f"axes run from 0 to {rank - 1}; negative axes count from the end")
        return axis % rank

    def reduce(self, x, opname: str, axis=None, keep_dims=False, dtype=None):
        x = self.to_tensor(x)
        keep_dims = bool(unwrap(keep_dims))
        if x.is_scalar:
            x = self.reshape(x, (1,))
        ax = self._axis(x, axis)
        if ax is None:
            rank = len(x.shape)
            flat = self.reshape(x, (x.numel,)) if rank != 1 else x
            r = self.reduce(flat, opname, 0, False, dtype)
            if keep_dims:
                r = self.reshape(r, (1,) * rank)
            return r
        res = x.dtype
        if opname in ("xor_sum", "or") and x.dtype.is_float:
            what = "dl.xor_sum" if opname == "xor_sum" else "dl.reduce_or"
            raise KernelTypeError(f"{what} needs an integer or boolean tile, got {x.dtype}",
                                  hint="compare first (x != 0), or reinterpret the bits with x.to(dl.int32, bitcast=True)")
        if opname in ("argmax", "argmin"):
            res = dt.int32
        elif opname in ("sum", "prod"):
            if dtype is not None:
                res = self.dtype_arg(dtype)
                x = self.cast(x, res)
            elif x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32):
                res = dt.int32
                x = self.cast(x, res)
        return tensor(self.b.reduce(x.handle, opname, ax, keep_dims, res))

    def scan(self, x, opname: str, axis=0, reverse=False, dtype=None):
        x = self.to_tensor(x)
        if x.is_scalar:
            raise KernelTypeError("a scan needs a tile")
        ax = self._axis(x, axis)
        if dtype is not None:
            d = self.dtype_arg(dtype)
            if d.is_bool:
                raise KernelTypeError("a scan cannot accumulate in int1", hint="pass dtype=dl.int32")
            x = self.cast(x, d)
        elif opname in ("sum", "prod") and (x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32)):
            x = self.cast(x, dt.int32)
        return tensor(self.b.scan(x.handle, opname, ax, bool(unwrap(reverse))))

    def sort(self, x, dim=None, descending=False):
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.sort needs a tile with at least one dimension, got a single value",
                                  hint="a single value is already sorted")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        if x.shape[ax] == 1:
            return x
        return tensor(self.b.sort(x.handle, ax, bool(descending)))

    def topk(self, x, k, dim=None, descending=True):
        x = self.to_tensor(x)
        if not x.shape:
            raise KernelTypeError("dl.topk needs a tile with at least one dimension, got a single value")
        ax = len(x.shape) - 1 if unwrap(dim) is None else self._axis(x, dim)
        k = unwrap(k)
        if not isinstance(k, int) or isinstance(k, bool):
            raise ConstexprError(f"dl.topk's k must be a compile-time integer, got {k!r}",
                                 hint="pass a literal or a dl.constexpr parameter")
        if not 1 <= k <= x.shape[ax]:
            raise KernelTypeError(f"dl.topk's k = {k} must lie in [1, {x.shape[ax]}] for a tile of shape {x.shape} "
                                  f"along dimension {ax}", hint="sort with dl.sort(x, descending=True) for all of them")
        s = self.sort(x, ax, descending)
        return s if k == x.shape[ax] else self.slice(s, (0,) * len(x.shape),
                                                      tuple(k if d == ax else n for d, n in enumerate(x.shape)))

    def histogram(self, x, num_bins, mask=None):
        x = self.to_tensor(x)
        if not x.dtype.is_int:
            raise KernelTypeError(f"dl.histogram counts integer values, got {x.dtype}",
                                  hint="compute bin indices first, for example dl.floor(v * scale).to(dl.int32)")
        num_bins = unwrap(num_bins)
        if not isinstance(num_bins, int) or isinstance(num_bins, bool) or num_bins < 1:
            raise ConstexprError(f"dl.histogram's num_bins must be a positive compile-time integer, got {num_bins!r}",
                                 hint="pass a literal or a dl.constexpr parameter")
        self._numel_check((num_bins,))
        m = unwrap(mask)
        if m is not None and not isinstance(m, tensor):
            if not m:
                return self.full((num_bins,), 0, dt.int32)
            m = None
        shape = x.shape if x.shape else (1,)
        if m is not None:
            m = self.truth(m)
            if m.shape != shape and broadcast_shapes(m.shape, shape) != shape:
                raise KernelTypeError(f"dl.histogram mask shape {shape_text(m.shape)} does not broadcast to the "
                                      f"input shape {shape}", hint="give the mask the input's shape")
            m = self.reshape(self.broadcast_to(m, shape), (x.numel,))
        x = self.reshape(x, (x.numel,))
        return tensor(self.b.histogram(x.handle, m.handle if m is not None else None, num_bins))

    # ---- matrix ---------------------------------------------------------------------------------------
    def dot(self, a, b, acc=None, out_dtype=None):
        a, b = self.to_tensor(a), self.to_tensor(b)
        if len(a.shape) not in (2, 3) or len(b.shape) != len(a.shape):
            raise KernelTypeError(f"dl.dot needs two 2-D tiles, or two 3-D tiles (a batch of matrices), got shapes "
                                  f"{shape_text(a.shape)} and {shape_text(b.shape)}",
                                  hint="(M, K) @ (K, N) -> (M, N), or (B, M, K) @ (B, K, N) -> (B, M, N)")
        if a.shape[-1] != b.shape[-2]:
            raise KernelTypeError(f"dl.dot shapes {a.shape} @ {b.shape} do not chain: {a.shape[-1]} != "
                                  f"{b.shape[-2]}",
                                  hint="the inner dimensions must match; transpose with dl.trans if needed")
        if a.shape[:-2] != b.shape[:-2]:
            raise KernelTypeError(f"dl.dot batch sizes differ: {a.shape} @ {b.shape} ({a.shape[0]} != {b.shape[0]})",
                                  hint="a batched dot multiplies matrix i of a by matrix i of b; broadcast the "
                                       "smaller batch first (dl.broadcast_to)")
        if a.dtype is not b.dtype:
            res = dt.promote(a.dtype, b.dtype)
            a, b = self.cast(a, res), self.cast(b, res)
        if a.dtype.is_int or a.dtype.is_bool:
            od = dt.int32  # as Triton: integer inputs accumulate in and give int32, whatever out_dtype says
        elif out_dtype is not None:
            od = self.dtype_arg(out_dtype)
        else:
            od = dt.float32
        shape = a.shape[:-1] + b.shape[-1:]
        acc = unwrap(acc)
        if acc is not None:
            acc = self.to_tensor(acc)
            if acc.shape != shape:
                raise KernelTypeError(f"dl.dot accumulator shape {shape_text(acc.shape)} does not match the "
                                      f"product shape {shape}")
            od = acc.dtype if out_dtype is None and not od.is_int else od
            acc = self.cast(acc, od)
        return tensor(self.b.dot(a.handle, b.handle, acc.handle if acc is not None else None, od))
