"""The whole op table, ``LOWERINGS[overload] = fn``: ``aten_ops`` (elementwise, views, reductions, matmul,
composites) and ``aten_scatter`` (scatters, padding, flips, flash attention), which adds to the same table.
Everything that lowers torch ops (the partitioner, lazy mode, the coverage table) reads it from here."""

from . import aten_conv, aten_scatter  # noqa: F401 - register their lowerings in aten_ops.LOWERINGS
from .aten_ops import LOWERINGS

CUSTOM_OPS: set = set()  # ops made by dvmlang.torch.custom_op: they launch dvmlang kernels, never a fallback

__all__ = ["LOWERINGS", "CUSTOM_OPS"]
