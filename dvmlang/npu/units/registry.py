"""The one table from ISA family to step builder: ``@builds("vbin")`` registers a builder, a function
(machine, decoded instruction) -> Step."""

from __future__ import annotations

BUILDERS: dict = {}  # ISA family -> builder


def builds(family: str):
    """Register the decorated builder for ``family`` (each family has exactly one builder)."""
    def register(fn):
        if family in BUILDERS:
            raise AssertionError(f"two step builders for ISA family {family!r}")
        BUILDERS[family] = fn
        return fn
    return register
