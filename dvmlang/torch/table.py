"""The whole op table, ``LOWERINGS[overload] = fn``: ``aten_ops`` (elementwise, views, reductions, matmul,
composites) and ``aten_scatter`` (scatters, padding, flips, flash attention), which adds to the same table.
Everything that lowers torch ops (the partitioner, lazy mode, the coverage table) reads it from here."""

from . import aten_scatter  # noqa: F401 - registers its lowerings in aten_ops.LOWERINGS
from .aten_ops import LOWERINGS

__all__ = ["LOWERINGS"]
