"""``triton.compiler``: importable, as torch and some programs probe it. dvmlang compiles at the first launch
(``dvmlang.Kernel.encode`` gives the bytecode ahead of time)."""

from ..errors import CompilationError
from . import compiler, errors  # noqa: F401

__all__ = ["CompilationError", "compiler", "errors"]
