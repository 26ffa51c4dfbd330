"""``triton.runtime.jit``: ``JITFunction`` (dvmlang's ``Kernel``), ``TensorWrapper`` and ``reinterpret``.

``JITFunction`` is what ``@triton.jit`` makes: a ``dvmlang.Kernel`` whose ``warmup`` returns Triton's
``CompiledKernel`` (``triton.compiler.compiler``: registers, UB bytes, a launcher) instead of the bare
``Bytecode`` that ``dvmlang.Kernel.warmup`` returns.

``reinterpret(x, tl.uint32)`` gives a ``TensorWrapper``: ``x``'s memory read as another dtype of the same size.
``TensorWrapper.view()`` is that view as an array of the base's kind (a numpy array, or a torch tensor through
``Tensor.view(dtype)``). A kernel launch takes a wrapper as a pointer to ``dtype`` over the base's memory
(through ``__array_interface__``), as Triton does. Nothing here imports torch.
"""

from __future__ import annotations

import sys

from ... import dtypes as dt
from ...errors import ArgumentError
from ...runtime import Kernel



class JITFunction(Kernel):
    """A ``@triton.jit`` kernel: a ``dvmlang.Kernel`` with Triton's ``warmup``."""

    def warmup(self, *args, grid, device=None, **kwargs):
        """Bind, build and encode one launch without running it (Triton's ``warmup``): a ``CompiledKernel``
        whose ``n_regs``, ``n_spills`` and ``metadata.shared`` are the bytecode's."""
        from ...args import LAUNCH_OPTIONS
        from ..compiler.compiler import CompiledKernel
        bc = super().warmup(*args, grid=grid, device=device, **kwargs)
        src = self.source
        given = dict(zip(src.params, args), **kwargs)
        constexprs = {n: getattr(given[n], "value", given[n]) for n in src.constexpr_params if n in given}
        options = {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS and k not in src.params}
        return CompiledKernel(self, bc, constexprs, options)


# Triton's canonical dtype names (numpy/torch spelling -> Triton's short name)
type_canonicalisation_dict = {
    "bool": "i1", "float8e5": "fp8e5", "float8e5b16": "fp8e5b16", "float8e4nv": "fp8e4nv",
    "float8e4b8": "fp8e4b8", "float8e4b15": "fp8e4b15", "float8_e4m3fn": "fp8e4nv", "float8e4b8_fnuz": "fp8e4b8",
    "float8_e5m2": "fp8e5", "float8e5b16_fnuz": "fp8e5b16", "half": "fp16", "float16": "fp16", "bfloat16": "bf16",
    "float": "fp32", "float32": "fp32", "double": "fp64", "float64": "fp64", "int8": "i8", "int16": "i16",
    "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "void": "void",
}

# dvmlang dtype name -> torch attribute name, for viewing a torch tensor without importing torch
_TORCH_NAMES = {"int1": "bool", "float8e4nv": "float8_e4m3fn", "float8e5": "float8_e5m2"}


class TensorWrapper:
    """A tensor's memory read as ``dtype`` (Triton's ``reinterpret``). ``base`` is the original tensor."""

    def __init__(self, base, dtype):
        d = dt.lookup(dtype)
        if d is None:
            raise ArgumentError(f"reinterpret: {dtype!r} is not a dtype")
        self.base = base
        self.dtype = d
        self.shape = tuple(base.shape)
        self.device = getattr(base, "device", "cpu")
        self.data = base
        self._np = None

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self):
        return self.base.data_ptr() if hasattr(self.base, "data_ptr") else self.base.ctypes.data

    def stride(self, *args):
        return self.base.stride(*args)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def view(self):
        """The base's memory as an array of ``dtype``: ``numpy.ndarray.view`` or ``torch.Tensor.view(dtype)``."""
        base = self.base
        if hasattr(base, "__array_interface__") and hasattr(base, "view") and not hasattr(base, "data_ptr"):
            return base.view(self.dtype.np)  # numpy
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(base, "data_ptr"):
            raise ArgumentError(f"reinterpret: cannot view a {type(base).__name__} as {self.dtype.name}")
        return base.view(getattr(torch, _TORCH_NAMES.get(self.dtype.name, self.dtype.name)))

    def numpy_view(self):
        """The base's memory as a numpy array of ``dtype`` (zero-copy; a torch CPU tensor through the runtime's
        own conversion)."""
        if self._np is None:
            import numpy as np
            from ...args import to_numpy
            base = self.base if isinstance(self.base, np.ndarray) else to_numpy("reinterpret", "base", self.base)
            self._np = base.view(self.dtype.np)
        return self._np

    __dvm_numpy__ = numpy_view  # how a launch reads a wrapper: any dtype, bfloat16 and fp8 included

    @property
    def __array_interface__(self):
        """Other libraries read a ``TensorWrapper`` through this (dvmlang launches use ``__dvm_numpy__``). The
        interface cannot name bfloat16 or the fp8 dtypes (numpy reads them as raw bytes), so a wrapper of one of
        those raises here rather than hand out the wrong element type."""
        view = self.numpy_view()
        if view.dtype.kind == "V" or view.dtype.char not in "?bBhHiIlLqQefdg":
            torch_name = _TORCH_NAMES.get(self.dtype.name, self.dtype.name)
            instead = f"x.view(torch.{torch_name})" if hasattr(self.base, "data_ptr") else "x.view(ml_dtypes dtype)"
            raise ArgumentError(f"a tensor reinterpreted as {self.dtype.name} has no __array_interface__ (it cannot "
                                f"name that dtype); use wrapper.numpy_view() or {instead}")
        return view.__array_interface__

    def __str__(self) -> str:
        return f"TensorWrapper[{self.dtype}]({self.base})"


def reinterpret(tensor, dtype):
    """``tensor``'s memory as ``dtype`` (of the same size): a ``TensorWrapper``; reinterpreting a wrapper as its
    base's own dtype gives the base back."""
    if isinstance(tensor, TensorWrapper):
        base_dt = dt.lookup(getattr(tensor.base, "dtype", None)) if not hasattr(tensor.base, "data_ptr") else None
        if base_dt is not None and base_dt is dt.lookup(dtype):
            return tensor.base
        return TensorWrapper(tensor.base, dtype)
    d = dt.lookup(dtype)
    if d is None:
        raise ArgumentError(f"reinterpret: {dtype!r} is not a dtype")
    size = getattr(tensor, "itemsize", None) or (tensor.element_size() if hasattr(tensor, "element_size") else None)
    if size is not None and size != d.itemsize:
        raise ArgumentError(f"reinterpret: {d.name} is {d.itemsize} bytes, the tensor's elements are {size}")
    return TensorWrapper(tensor, d)


__all__ = ["JITFunction", "TensorWrapper", "reinterpret", "type_canonicalisation_dict"]
