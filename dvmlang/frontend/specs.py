"""Parameter specs: what one build of a kernel is specialised on, per parameter.

A tensor parameter by its dtype and rank, a runtime scalar by its dtype, a ``dl.constexpr`` by its value, a host
tensor descriptor by its base's dtype and rank, its block shape and padding.
Runtime values and shapes are not part of a spec: a new one only encodes. The specs of all parameters, in
order, are the build key; each spec compares and hashes by its fields (and its class), so equal specs name
the same build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..dtypes import DType


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """An array parameter: the kernel sees a pointer to ``dtype`` elements of an array of rank ``rank``."""

    dtype: DType
    rank: int


@dataclass(frozen=True, slots=True)
class ScalarSpec:
    """A runtime scalar parameter of ``dtype``."""

    dtype: DType


@dataclass(frozen=True, slots=True)
class ConstexprSpec:
    """A ``dl.constexpr`` parameter bound to ``value``. The value's type is part of the key: ``True``, ``1``
    and ``1.0`` are equal in Python but compile differently."""

    type_name: str = field(init=False)  # first, so specs of different types compare unequal before their values
    value: object

    def __post_init__(self):
        object.__setattr__(self, "type_name", type(self.value).__name__)


@dataclass(frozen=True, slots=True)
class DescriptorSpec:
    """A host tensor descriptor parameter (``triton.tools.tensor_descriptor.TensorDescriptor``). It binds as
    its base (a tensor parameter of ``dtype`` and ``rank``: the rank of the array as bound, 1 for a strided
    view bound as its flat span), then its shape and its strides (``len(block_shape)`` runtime scalars each,
    of ``index``: int32, or int64 when a value needs it). ``block_shape`` and ``padding`` ("zero" or "nan")
    are compile-time, like a constexpr: a new block shape builds, a new shape or stride only encodes."""

    dtype: DType
    rank: int
    block_shape: tuple
    padding: str
    index: DType


class DescriptorArgs(NamedTuple):
    """The runtime values one host descriptor argument binds: its spec, the base array (a numpy array sharing
    the tensor's memory), and its shape and strides as Python ints (in elements)."""

    spec: DescriptorSpec
    base: object
    shape: tuple
    strides: tuple

    @property
    def block_shape(self) -> list:  # what a grid function reads, as of the TensorDescriptor
        return list(self.spec.block_shape)


ParamSpec = TensorSpec | ScalarSpec | ConstexprSpec | DescriptorSpec
