"""``triton.language.core``: the language's core names (dtypes, ``constexpr``, ``tensor``, builtins), which
``tl`` itself re-exports."""

from ...language import *  # noqa: F403
from ...language import __all__ as _all
from ...language import builtin, constexpr, dtype, tensor  # noqa: F401

__all__ = list(_all)
