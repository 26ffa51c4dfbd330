"""``triton.runtime.errors``: dvmlang's error classes under Triton's names (see ``dvmlang.triton.errors``)."""

from ..errors import InterpreterError, OutOfResources

__all__ = ["InterpreterError", "OutOfResources"]
