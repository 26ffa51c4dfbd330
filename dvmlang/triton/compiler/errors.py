"""``triton.compiler.errors``: dvmlang's compile errors."""

from ...errors import CompilationError, UnsupportedSyntaxError

CompileTimeAssertionFailure = CompilationError
UnsupportedLanguageConstruct = UnsupportedSyntaxError

__all__ = ["CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"]
