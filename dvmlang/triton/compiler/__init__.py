"""``triton.compiler``: importable, as torch and some programs probe it. dvmlang compiles at the first launch
(``kernel.warmup(...)`` gives a ``CompiledKernel``, ``dvmlang.Kernel.encode`` the bytecode, ahead of time)."""

from ..errors import CompilationError
from . import compiler, errors  # noqa: F401
from .compiler import CompiledKernel

__all__ = ["CompilationError", "CompiledKernel", "compiler", "errors"]
