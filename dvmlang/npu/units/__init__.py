"""Step builders, one module per unit of the core: ``scalar`` (registers, control flow, events, scalar GM
access, prints), ``vector``, ``memory`` (DMA, gather, scatter, atomics, copies between memory spaces) and
``cube`` (MMAD). ``BUILDERS`` maps every ISA family to its builder; importing this package checks that the
table covers the ISA exactly."""

from __future__ import annotations

from ...vm import isa
from . import cube, memory, remote, scalar, vector  # noqa: F401 - each module registers its builders
from .registry import BUILDERS


def check() -> None:
    """Every family of the ISA table has a builder, and every builder builds a family of the table."""
    families = {ins.family for ins in isa.TABLE}
    missing = families - BUILDERS.keys()
    orphans = BUILDERS.keys() - families
    if missing or orphans:
        raise AssertionError(f"step builders: no builder for {sorted(missing)}; builders for no ISA family "
                             f"{sorted(orphans)}")


check()
