"""``triton.language.core``: the language's core names (dtypes, ``constexpr``, ``tensor``, builtins), which
``tl`` itself re-exports, and the helpers packages and torch's Inductor import from it (``view``,
``_unwrap_if_constexpr``)."""

from ...language import *  # noqa: F403
from ...language import __all__ as _all
from ...language import builtin, constexpr, dtype, tensor, view  # noqa: F401


def _unwrap_if_constexpr(o):
    """A ``constexpr``'s value, anything else itself (Triton's helper)."""
    return o.value if isinstance(o, constexpr) else o


__all__ = [*_all, "view", "_unwrap_if_constexpr"]
