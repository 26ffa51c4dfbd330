"""Triton's host API on dvmlang: ``import dvmlang.triton as triton`` and ``import dvmlang.triton.language as tl``.

A Triton program runs with only its imports changed. Each name maps onto dvmlang (docs/triton.md has the
table): ``jit`` is ``dvmlang.kernel``, ``autotune``/``Config``/``heuristics`` are dvmlang's own (timed in
simulated cycles), the error classes are dvmlang's, and ``testing.do_bench`` reports simulated time.
Nothing here imports torch; tensors are duck-typed by the runtime.
"""

from __future__ import annotations

from ..autotune import Autotuner, Heuristics, autotune, heuristics
from ..errors import CompilationError, DvmError, ResourceError
from ..language.core import cdiv, next_power_of_2
from ..runtime import Kernel
from . import backends, compiler, knobs, language, runtime, testing, tools  # noqa: F401 - Triton's module layout
from .config import Config
from .errors import OutOfResources, TritonError
from .jit import JITFunction, jit
from .runtime.jit import TensorWrapper, reinterpret



def set_allocator(allocator) -> None:
    """Triton's allocator of global scratch memory for tensor descriptors made in kernels: accepted and never
    called (a dvmlang descriptor is a DMA descriptor; it needs no scratch memory). ``None`` or a callable
    ``(size, alignment, stream) -> tensor``."""
    if allocator is not None and not callable(allocator):
        raise DvmError(f"triton.set_allocator takes a callable (size, alignment, stream) -> tensor or None, got "
                       f"{type(allocator).__name__}")


__version__ = "3.4.0"  # the Triton release whose API this namespace follows

__all__ = ["jit", "JITFunction", "autotune", "Config", "heuristics", "Autotuner", "Heuristics", "cdiv",
           "next_power_of_2", "reinterpret", "TensorWrapper", "CompilationError", "OutOfResources", "TritonError",
           "language", "runtime", "testing", "compiler", "backends", "knobs", "tools", "__version__", "Kernel",
           "DvmError", "ResourceError", "set_allocator"]
