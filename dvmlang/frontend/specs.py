"""Parameter specs: what one build of a kernel is specialised on, per parameter.

A tensor parameter by its dtype and rank, a runtime scalar by its dtype, a ``dl.constexpr`` by its value.
Runtime values and shapes are not part of a spec: a new one only encodes. The specs of all parameters, in
order, are the build key; each spec compares and hashes by its fields (and its class), so equal specs name
the same build.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


ParamSpec = TensorSpec | ScalarSpec | ConstexprSpec
