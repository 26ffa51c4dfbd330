"""Instruction selection for communication between devices (``dl.remote_store``, ``dl.signal``, ``dl.wait``):
REMOTE_STORE by an offsets tile (any pointer tile: a peer's tensor is reached element by element, as a scatter
is), SIGNAL and WAIT_SIGNAL on one flag. A remote store declares a write of its tensor (it may be this device's own
copy), so the synchronisation pass orders the kernel's later accesses after it; a signal follows the stores on
their pipe, and a wait holds the scalar unit, so everything after it issues once it is over: neither needs an
event."""

from __future__ import annotations

from ...errors import CompilationError
from ...vm import isa
from ...vm.isa import BY_NAME


def _remote_store(ctx, op):
    offsets, value, peer = op.operands[:3]
    mask = op.operands[3] if op.attrs["has_mask"] else None
    t = op.attrs["tensor"]
    if not value.is_tile:
        raise CompilationError("internal: dl.remote_store of a scalar was not made a one-element tile", op.loc)
    reads = [ctx.rng(offsets), ctx.rng(value)] + ([ctx.rng(mask)] if mask is not None else [])
    vals = {"masked": int(mask is not None), "tensor": t, "src": ctx.tile(value), "offsets": ctx.tile(offsets),
            "gm": 0, "mask": ctx.tile(mask) if mask is not None else 0, "peer": ctx.sop(peer)}
    e = ctx.emit(BY_NAME["REMOTE_STORE"], vals, value.dtype, op.loc, reads=reads, writes=[("gm", t, 0)])
    e.reloc_param = t


def _signal(ctx, op):
    offset, peer, value = op.operands
    t = op.attrs["tensor"]
    vals = {"op": isa.SIGNAL_OPS.index(op.attrs["op"]), "tensor": t, "gm": 0, "offset": ctx.sop(offset),
            "peer": ctx.sop(peer), "value": ctx.sop(value)}
    e = ctx.emit(BY_NAME["SIGNAL"], vals, offset.dtype, op.loc)
    e.reloc_param = t


def _wait(ctx, op):
    offset, value = op.operands
    t = op.attrs["tensor"]
    vals = {"cc": isa.CC_NAMES.index(op.attrs["cc"]), "tensor": t, "gm": 0, "offset": ctx.sop(offset),
            "value": ctx.sop(value)}
    e = ctx.emit(BY_NAME["WAIT_SIGNAL"], vals, offset.dtype, op.loc)
    e.reloc_param = t


EMITTERS = {"remote_store": _remote_store, "signal": _signal, "wait_signal": _wait}
