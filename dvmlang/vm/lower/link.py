"""The link step: what both build paths share after selection.

A build hands the link an instruction stream (``Code``: ``Emitted`` items and ``Label``s) whose tile operands
are either placed already (the kernel path: ``placement`` and ``alloc`` ran before selection, whose staging
decisions need the footprint) or still *virtual* (the fuser's composed fragments, ``vm/compose``: a ``Slot``
per tile, allocated here by the same linear scan). The link then

1. allocates the virtual slots of each memory space (``alloc.allocate_memory``'s scan) and writes their
   addresses into the operand fields and access ranges that name them;
2. inserts the events between pipes (``sync``);
3. assembles the words, relocations, scalar-parameter slots and line table (``assemble``): the ``Template``.
"""

from __future__ import annotations

from .assemble import assemble
from .program import Code, Template
from .sync import insert_sync


def link(name: str, code: Code, reg_types: list, footprint: dict[str, int], buffers: list) -> Template:
    """The ``Template`` of an instruction stream whose tiles all have addresses (see ``vm/compose`` for the
    stream of virtual slots, which resolves them and then calls this)."""
    insert_sync(code.out)
    return assemble(name, code, reg_types, footprint, buffers)
