"""``triton.tools.tensor_descriptor.TensorDescriptor``: a host-side tensor descriptor, passed to a kernel as an
argument.

``TensorDescriptor(base, shape, strides, block_shape, padding="zero")`` or ``TensorDescriptor.from_tensor(t,
block_shape)``. In the kernel the parameter is the same ``tensor_descriptor`` value ``tl.make_tensor_descriptor``
gives: ``desc.load([i, j])``, ``desc.store([i, j], v)``, ``desc.shape``, ``desc.strides``, ``desc.block_shape``,
``desc.dtype``. A launch binds it as its base (a tensor parameter: every access is bounds-checked against the
base's memory and aliasing is tracked, as for any array argument), its shape and strides (runtime scalars: a new
shape only encodes) and its block shape and padding (compile-time, part of the build key, like a constexpr).

The base is a torch tensor, a numpy array or any array a launch takes (``dvmlang.args.to_numpy``); a strided
view binds as the flat span of its memory, so the descriptor's strides (in elements, from the first element)
address it. Checked as Triton checks (at construction and again at each launch, since an autotune ``pre_hook``
may set ``block_shape``): matching ranks of 1 to 5, a block shape of powers of 2, the last stride 1, the other
strides 16-byte aligned, padding "zero" or "nan" (NaN only for a floating-point base). A failed check is an
``ArgumentError`` with Triton's text and what to change. Triton also needs ``base.data_ptr() % 16 == 0``; here
any element address works, so that is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...args import is_foreign_array, strided_as_flat, to_numpy
from ...errors import ArgumentError
from ...frontend.specs import DescriptorArgs, DescriptorSpec


@dataclass
class TensorDescriptor:
    base: Any
    shape: list
    strides: list
    block_shape: list
    padding: str = "zero"

    def __post_init__(self):
        self._check("TensorDescriptor", None)

    @staticmethod
    def from_tensor(tensor: Any, block_shape, padding="zero"):
        """A descriptor of the whole of ``tensor`` (torch or numpy), with its own shape and strides."""
        strides = _strides_of(tensor)
        return TensorDescriptor(tensor, list(tensor.shape), strides, block_shape, padding)

    @property
    def dtype(self):
        return self.base.dtype

    def _check(self, where: str, array) -> None:
        shape, strides, block = _ints(where, "shape", self.shape), _ints(where, "strides", self.strides), None
        rank = len(shape)
        if not isinstance(self.block_shape, (list, tuple)):
            raise ArgumentError(f"{where}: block_shape must be a list of ints, got {self.block_shape!r}")
        block = list(self.block_shape)
        if len(strides) != rank or len(block) != rank:
            raise ArgumentError(f"{where}: rank mismatch: shape {shape}, strides {strides}, block_shape {block}; give "
                                "one entry per dimension in each")
        if not 1 <= rank <= 5:
            raise ArgumentError(f"{where}: rank must not be zero" if rank == 0 else
                                f"{where}: rank cannot be more than 5 (got {rank})")
        for i, d in enumerate(block):
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
                raise ArgumentError(f"{where}: Shape element {i} must have type `constexpr[int]`, got "
                                    f"{type(d).__name__} (block_shape {block})")
            if d < 1 or int(d) & (int(d) - 1):
                raise ArgumentError(f"{where}: Shape element {i} must be a power of 2 (block_shape {block})")
        if any(s < 0 for s in shape):
            raise ArgumentError(f"{where}: shape {shape} has a negative size")
        if strides[-1] != 1:
            raise ArgumentError(f"{where}: Last dimension must be contiguous (strides {strides}); pass a tensor whose "
                                "last stride is 1 (x.contiguous()) or transpose the loaded block in the kernel")
        itemsize = _itemsize(where, self.base if array is None else array)
        for s in strides[:-1]:
            if (s * itemsize) % 16:
                raise ArgumentError(f"{where}: strides must be 16-byte aligned (strides {strides} of {itemsize}-byte "
                                    "elements); Triton requires it. Pad the rows of the tensor to a multiple of "
                                    f"{16 // np.gcd(16, itemsize)} elements")
        if self.padding not in ("zero", "nan"):
            raise ArgumentError(f"{where}: Illegal value for padding: {self.padding!r}; use \"zero\" or \"nan\"")
        if self.padding == "nan" and array is not None and not dt.from_numpy(array.dtype).is_float:
            raise ArgumentError(f"{where}: Padding option `nan` is only supported for floating point tensors "
                                f"(the base is {array.dtype})")

    def __dvm_descriptor__(self, kname: str, name: str) -> DescriptorArgs:
        """What a launch binds (``runtime.Kernel._bind``): checked again, since a pre_hook may have changed it."""
        where = f"argument `{name}` of `{kname}` (a TensorDescriptor)"
        a = self.base
        if isinstance(a, np.ndarray):
            a = strided_as_flat(where, a.view(np.ndarray) if a.__class__ is not np.ndarray else a)
        elif is_foreign_array(a):
            a = to_numpy(kname, f"{name}.base", a)
        else:
            raise ArgumentError(f"{where}: its base must be a tensor or an array, got {type(a).__name__}")
        d = dt.from_numpy(a.dtype)
        if d is None:
            raise ArgumentError(f"{where}: its base has dtype {a.dtype}, which dvmlang does not support; use one of "
                                f"{', '.join(x.name for x in dt.ARRAY_DTYPES)}")
        self._check(where, a)
        shape, strides = tuple(_ints(where, "shape", self.shape)), tuple(_ints(where, "strides", self.strides))
        index = dt.int32 if all(dt.int_fits(v, dt.int32) for v in shape + strides) else dt.int64
        spec = DescriptorSpec(d, a.ndim, tuple(int(b) for b in self.block_shape), self.padding, index)
        return DescriptorArgs(spec, a, shape, strides)


def _ints(where, what, values) -> list[int]:
    try:
        out = list(values)
    except TypeError:
        raise ArgumentError(f"{where}: {what} must be a list of ints, got {values!r}") from None
    for v in out:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) and type(v).__name__ != "SymInt":
            raise ArgumentError(f"{where}: {what} must be a list of ints, got {out!r}")
    return [int(v) for v in out]


def _itemsize(where, base) -> int:
    d = getattr(base, "dtype", None)
    size = getattr(d, "itemsize", None)
    if not isinstance(size, int):
        raise ArgumentError(f"{where}: its base must be a tensor or an array (with a dtype), got {type(base).__name__}")
    return size


def _strides_of(t) -> list[int]:
    if isinstance(t, np.ndarray):
        if any(s % t.itemsize for s in t.strides):
            raise ArgumentError(f"TensorDescriptor.from_tensor: strides {t.strides} are not whole elements of "
                                f"{t.itemsize} bytes; pass np.ascontiguousarray(x)")
        return [s // t.itemsize for s in t.strides]
    if callable(getattr(t, "stride", None)):
        return list(t.stride())
    raise ArgumentError(f"TensorDescriptor.from_tensor needs a torch tensor or a numpy array, got {type(t).__name__}")


__all__ = ["TensorDescriptor"]
