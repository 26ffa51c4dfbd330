"""Lower tile IR to an instruction template (the build phase's last step), as a chain of passes:

1. ``liveness``: number the ops in program order and compute live intervals; values used inside a loop
   but defined outside it stay live for the whole loop.
2. ``placement``: give every tile a place: UB by default; dot operands go GM/UB -> L1 -> L0A/L0B and
   accumulate in L0C. Views (reshape) share their source's buffer; loop-carried values and branch results get
   a *home*, and a value that only feeds a home is computed directly into it (phi coalescing).
3. ``alloc``: allocate each memory space with a linear scan (32-byte aligned); failure is a ``ResourceError``
   with the live buffers at the peak. Scalars get typed registers the same way.
4. ``select`` (with ``memory`` and ``control``): select instructions from the ISA table, one emitter per IR
   op kind, into a ``Code`` stream (``emit.Context`` is what the emitters share).
5. ``link`` (shared with the fuser's composed kernels, ``vm/compose``): ``sync`` inserts set/wait events for
   every dependency between pipes (twice over loop bodies, for hazards across iterations) and ``assemble``
   packs the words into a ``Template``.

The records the passes hand each other live in ``program``. The ``Template`` is what every launch instance of
the build shares; encoding an instance only patches scalar immediates and tensor addresses into it.
"""

from __future__ import annotations

from ...ir.core import Function
from .. import isa
from .alloc import Staging, allocate_memory, allocate_registers
from .assemble import encode_into
from .emit import Context
from .liveness import liveness
from .placement import place
from .program import Buffer, Code, Emitted, Label, Place, Template
from .link import link
from .select import EMITTERS, emit_prologue

__all__ = ["Buffer", "Emitted", "Label", "Place", "Template", "encode_into", "link", "lower"]


def lower(fn: Function, profile) -> Template:
    live = liveness(fn)
    plan = place(fn, profile, live)
    footprint = allocate_memory(plan, profile, fn.name)
    regs = allocate_registers(fn, live, plan)
    code = Code()
    biggest = max((b for b in plan.buffers if b.space == "ub" and b.loc is not None), key=lambda b: b.nbytes,
                  default=None)
    ctx = Context(plan, regs, Staging(footprint, profile, fn.name, biggest.loc if biggest else None), code, EMITTERS)
    emit_prologue(ctx, fn)
    ctx.emit_ops(fn.body.ops)
    code.out.append(code.end_label)
    ctx.emit(isa.BY_NAME["END"], {}, None, None)
    return link(fn.name, code, regs.types, ctx.staging.total_footprint(), plan.buffers)
