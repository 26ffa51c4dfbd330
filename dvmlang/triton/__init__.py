"""Triton's host API on dvmlang: ``import dvmlang.triton as triton`` and ``import dvmlang.triton.language as tl``.

A Triton program runs with only its imports changed. Each name maps onto dvmlang (docs/triton.md has the
table): ``jit`` is ``dvmlang.kernel``, ``autotune``/``Config``/``heuristics`` are dvmlang's own (timed in
simulated cycles), the error classes are dvmlang's, and ``testing.do_bench`` reports simulated time.
Nothing here imports torch; tensors are duck-typed by the runtime.
"""

from __future__ import annotations

from ..errors import CompilationError, DvmError, ResourceError
from ..language.core import cdiv, next_power_of_2
from ..runtime import Kernel
from . import backends, compiler, knobs, language, runtime, testing, tools  # noqa: F401 - Triton's module layout
from .binding import bind, unbind
from .config import Config
from .errors import InterpreterError, OutOfResources, TritonError
from .jit import JITFunction, jit
from .runtime.autotuner import Autotuner, Heuristics, autotune, heuristics
from .compiler.compiler import compile  # noqa: A004 - Triton's name (it raises: kernels compile at launch)
from .language.core import must_use_result
from .runtime.jit import KernelInterface, MockTensor, TensorWrapper, constexpr_function, reinterpret


def set_allocator(allocator) -> None:
    """Triton's allocator of global scratch memory for tensor descriptors made in kernels: accepted and never
    called (a dvmlang descriptor is a DMA descriptor; it needs no scratch memory). ``None`` or a callable
    ``(size, alignment, stream) -> tensor``."""
    if allocator is not None and not callable(allocator):
        raise DvmError(f"triton.set_allocator takes a callable (size, alignment, stream) -> tensor or None, got "
                       f"{type(allocator).__name__}")


# The Triton release whose host API this namespace follows: packages gate kernels and code paths on it (fla on
# >= 3.4 and >= 3.5.1, FlagGems' launch of compiled kernels on 3.3 to 3.6). docs/triton.md lists the API.
__version__ = "3.6.0"

__all__ = ["jit", "JITFunction", "autotune", "Config", "heuristics", "Autotuner", "Heuristics", "cdiv",
           "next_power_of_2", "reinterpret", "TensorWrapper", "CompilationError", "OutOfResources", "TritonError",
           "language", "runtime", "testing", "compiler", "backends", "knobs", "tools", "__version__", "Kernel",
           "DvmError", "ResourceError", "set_allocator", "bind", "unbind", "KernelInterface", "MockTensor",
           "InterpreterError", "compile", "constexpr_function", "must_use_result"]
