"""The whole op table, ``LOWERINGS[overload] = fn``: ``aten_ops`` (elementwise, reductions, matmul, composites),
``aten_views`` (views, ``as_strided``), ``aten_scatter`` (scatters, padding, flips, flash attention), ``aten_conv`` (convolutions, pooling,
batch norm in training) and ``aten_select`` (sort, top-k, histograms, grouped matmul, recurrent layers), which
add to the same table. Everything that lowers torch ops (the partitioner, lazy mode, the coverage table) reads it
from here (``lowering``)."""

from . import aten_conv, aten_scatter, aten_views  # noqa: F401 - register their lowerings in aten_ops.LOWERINGS
from .aten_ops import LOWERINGS
from .aten_select import BY_NAME

CUSTOM_OPS: set = set()  # ops made by dvmlang.torch.custom_op: they launch dvmlang kernels, never a fallback


def lowering(target):
    """The lowering of an op (an aten overload, or a library's op such as transformers' grouped matmul, found by
    its qualified name), or None."""
    fn = LOWERINGS.get(target)
    if fn is None and hasattr(target, "_schema"):
        fn = BY_NAME.get(target._schema.name)
    return fn


__all__ = ["LOWERINGS", "BY_NAME", "CUSTOM_OPS", "lowering"]
