"""``triton.compiler.compiler``: Triton's compile entry points have no meaning here (kernels compile at their
first launch); ``compile`` raises saying so."""

from ...errors import CompilationError, DvmError

ASTSource = None


def compile(*_args, **_kwargs):  # noqa: A001 - Triton's name
    raise DvmError("triton.compiler.compile has no dvmlang equivalent: a kernel compiles at its first launch; "
                   "use kernel.encode(grid, *args) for its bytecode ahead of time")


__all__ = ["CompilationError", "compile"]
