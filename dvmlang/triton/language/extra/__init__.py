"""``triton.language.extra``: ``libdevice`` (``tl.extra.libdevice`` and ``tl.extra.cuda.libdevice`` are the same
module)."""

from . import cuda, libdevice  # noqa: F401

__all__ = ["libdevice", "cuda"]
