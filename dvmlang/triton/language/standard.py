"""``triton.language.standard``: Triton's library functions written in the language (``cdiv``, ``softmax``,
``sum``, ``max``, ``argmax``, ``sort``, ...). dvmlang has each as a ``dl`` builtin of the same name."""

from ...language import *  # noqa: F403
from ...language import __all__ as _all

__all__ = list(_all)
