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

import hashlib
import inspect
import os
import re
import sys
import textwrap

from ... import dtypes as dt
from ...errors import ArgumentError, DvmError
from ...runtime import Kernel



class KernelInterface:
    """Triton's base of launchable kernels (``JITFunction``, ``Autotuner``, ``Heuristics``, and packages' own
    wrappers that derive from it): ``kernel[grid](*args, **kwargs)`` is ``kernel.run(*args, grid=grid,
    warmup=False, **kwargs)``, and ``warmup(*args, grid=...)`` is ``run(..., warmup=True)``."""

    def run(self, *args, grid, warmup, **kwargs):
        raise NotImplementedError("run not implemented")

    def warmup(self, *args, grid, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class KernelParam:
    """Triton's record of one parameter of a ``@jit`` function (``JITFunction.params``)."""

    def __init__(self, num: int, param: inspect.Parameter, do_not_specialize: bool,
                 do_not_specialize_on_alignment: bool):
        self.num = num
        self._param = param
        self.name = param.name
        self.do_not_specialize = do_not_specialize
        self.do_not_specialize_on_alignment = do_not_specialize_on_alignment

    @property
    def annotation(self) -> str:
        a = self._param.annotation
        if a is inspect.Parameter.empty or not a:
            return ""
        return a if isinstance(a, str) else getattr(a, "__name__", None) or repr(a)

    @property
    def is_constexpr(self) -> bool:
        return "constexpr" in self.annotation

    @property
    def is_const(self) -> bool:
        return not self.is_constexpr and "const" in self.annotation

    @property
    def default(self):
        return self._param.default

    @property
    def has_default(self) -> bool:
        return self._param.default is not inspect.Parameter.empty

    def __repr__(self) -> str:
        return f"KernelParam({self.num}, {self.name!r}{', constexpr' if self.is_constexpr else ''})"


class JITFunction(Kernel, KernelInterface):
    """A ``@triton.jit`` kernel: a ``dvmlang.Kernel`` with Triton's attributes and entry points.

    * ``fn`` (the Python function), ``arg_names``, ``params`` (``KernelParam``: ``num``, ``name``,
      ``is_constexpr``, ``do_not_specialize``, ``default``...), ``signature``, ``src`` (the source from ``def``,
      read at decoration), ``starting_line_number``, ``cache_key`` (a hash of the source and the options),
      ``constexprs`` (the indices of the constexpr parameters), ``do_not_specialize``, ``__name__``,
      ``__globals__``, ``module``.
    * ``kernel[grid](...)`` launches and returns the ``LaunchRecord`` (dvmlang's), as ``dvmlang.Kernel`` does.
    * ``run(*args, grid=..., warmup=False, **kwargs)`` is Triton's entry point (what ``Autotuner``,
      ``Heuristics`` and packages' wrappers call): it launches (unless ``warmup``) and returns the
      ``CompiledKernel`` of the launch. ``run(grid, *args, ...)`` without a ``grid`` keyword is dvmlang's.
    * ``warmup(*args, grid=...)`` encodes one instance without running it: a ``CompiledKernel``.
    """

    def __init__(self, fn, version=None, do_not_specialize=None, do_not_specialize_on_alignment=None, debug=None,
                 noinline=None, repr=None, launch_metadata=None, strict_loads=False,
                 strict_tiles=False):  # noqa: A002 - Triton's names
        super().__init__(fn)
        self.strict_loads = bool(strict_loads)
        self.split_tiles = not strict_tiles  # GPU-sized blocks run strip-mined (vm/lower/split.py)
        if isinstance(self.captured, Exception):  # Triton reads the source at decoration, and refuses there
            raise DvmError(f"@triton.jit cannot read the source of `{fn.__name__}` ({self.captured}): kernels must "
                           "be defined in a Python file")
        self.signature = inspect.signature(fn)
        names = list(self.signature.parameters)

        def indices(given):
            return {names.index(d) if isinstance(d, str) else d for d in (given or ()) if not isinstance(d, str)
                    or d in names}

        dns, dnsa = indices(do_not_specialize), indices(do_not_specialize_on_alignment)
        self.do_not_specialize = sorted(dns)
        self.do_not_specialize_on_alignment = sorted(dnsa)
        self.params = [KernelParam(i, p, i in dns, i in dnsa) for i, p in enumerate(self.signature.parameters.values())]
        self.arg_names = names
        self.constexprs = [p.num for p in self.params if p.is_constexpr]
        self.version = version
        self.debug = debug
        self.noinline = noinline
        self.launch_metadata = launch_metadata
        self.module = fn.__module__
        self.__globals__ = fn.__globals__
        self.file_name = fn.__code__.co_filename
        self.raw_src, self.starting_line_number = self.captured.lines, self.captured.first_line
        text = textwrap.dedent("".join(self.raw_src))
        at = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
        self._src = text[at.start():] if at else text
        self.hash = None
        self.used_global_vals: dict = {}

    @property
    def src(self) -> str:
        """The function's source from its ``def`` line (decorators dropped), as read at decoration."""
        return self._src

    @property
    def cache_key(self) -> str:
        """A hash of the kernel's source, its starting line and its options (Triton's key of a kernel's
        compiled binaries; dvmlang's own caches are keyed by the build specs)."""
        if self.hash is None:
            h = hashlib.sha256(self._src.encode())
            h.update(repr((self.starting_line_number, self.version, self.do_not_specialize)).encode())
            self.hash = h.hexdigest()
        return self.hash

    def run(self, *args, grid=None, warmup=False, **kwargs):
        if grid is None:  # dvmlang's spelling: run(grid, *args, ...)
            return super().run(*args, **kwargs)
        kwargs.pop("stream", None)  # Triton's launch stream: launches run in program order here
        compiled = self.warmup(*args, grid=grid, **kwargs)
        if not warmup:
            compiled.launch = self._launch(grid, *args, **kwargs)
        return compiled

    def __getitem__(self, grid):
        return Kernel.__getitem__(self, grid)

    def _encode(self, build, ikey, runtime, grid):
        bc = super()._encode(build, ikey, runtime, grid)
        # GPU load semantics (npu/poison.py): a load lane outside its tensor reads poison instead of faulting,
        # unless triton.jit(strict_loads=True) or DVMLANG_STRICT_LOADS=1 keeps dvmlang's fault
        bc.gpu_loads = not (self.strict_loads or os.environ.get("DVMLANG_STRICT_LOADS", "") not in ("", "0"))
        return bc

    def warmup(self, *args, grid, device=None, **kwargs):
        """Bind, build and encode one launch without running it (Triton's ``warmup``): a ``CompiledKernel``
        whose ``n_regs``, ``n_spills`` and ``metadata.shared`` are the bytecode's."""
        from ...args import LAUNCH_OPTIONS
        from ..compiler.compiler import CompiledKernel
        kwargs.pop("warmup", None)
        bc = Kernel.warmup(self, *args, grid=grid, device=device, **kwargs)
        src = self.source
        given = dict(zip(src.params, args), **kwargs)
        constexprs = {n: getattr(given[n], "value", given[n]) for n in src.constexpr_params if n in given}
        for n in src.constexpr_params:
            if n not in constexprs and n in src.defaults:
                constexprs[n] = getattr(src.defaults[n], "value", src.defaults[n])
        options = {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS and k not in src.params}
        return CompiledKernel(self, bc, constexprs, options)


class MockTensor:
    """Triton's stand-in for a tensor in ``kernel.warmup(MockTensor(torch.float32), ...)``: here an empty-strided
    array of that dtype (``warmup`` binds dtypes and ranks; it reads no data)."""

    @staticmethod
    def wrap_dtype(arg):
        if arg.__class__.__name__ == "dtype" and arg.__module__ == "torch":
            return MockTensor(arg)
        return arg

    def __new__(cls, dtype, shape=None):
        import numpy as np
        d = dt.lookup(dtype)
        if d is None:
            raise ArgumentError(f"MockTensor: {dtype!r} is not a dtype")
        return np.empty(shape or [1], dtype=d.np)


def constexpr_function(fn):
    """Triton's ``@triton.constexpr_function``: a Python function a kernel calls with compile-time arguments. A
    kernel evaluates any Python function whose arguments are all compile-time values while it compiles, so this
    returns ``fn`` itself (callable on the host too)."""
    fn.__triton_constexpr_function__ = True
    return fn


def version_key() -> str:
    """Triton's version key of its compiler: dvmlang's version (a part of Triton's cache keys)."""
    from ... import __version__
    return f"dvmlang-{__version__}"


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


__all__ = ["JITFunction", "KernelInterface", "KernelParam", "MockTensor", "TensorWrapper", "reinterpret",
           "type_canonicalisation_dict", "version_key", "constexpr_function"]
