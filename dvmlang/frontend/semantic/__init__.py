"""Typed operations on kernel values: promotion, broadcasting, checks, and the IR they build.

``Semantic`` is the object the code generator and every ``dl`` builtin (as ``_sem``) build IR through, one
per build. Every method raises ``KernelTypeError`` / ``ConstexprError`` without a location; the code
generator attaches the source span of the expression being compiled.

It is one class assembled from one part per job because the jobs call each other freely on one object
(a load casts and broadcasts, a reduction reshapes, a cast makes constants): ``arith`` (conversions,
promotion, arithmetic), ``memory`` (pointers, loads, stores, atomics), ``shapes`` (creation and shape
operations), ``reductions`` (reductions, scans, sorting, ``dot``).
"""

from __future__ import annotations

from ...ir.builder import Builder
from .arith import ArithmeticOps
from .memory import MemoryOps
from .reductions import ReductionOps
from .shapes import ShapeOps


class Semantic(ArithmeticOps, MemoryOps, ShapeOps, ReductionOps):
    """Builds typed IR for one kernel build. ``params`` are the kernel's IR parameters."""

    def __init__(self, builder: Builder, params):
        self.b = builder
        self.params = params
        self.codegen = None  # the code generator compiling the current body (set by it)
