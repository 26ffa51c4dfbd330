"""Communication between devices inside a kernel, in the style of SHMEM (and of Triton-distributed and Ascend
SHMEM): a kernel running on every NPU of a ``dvmlang.npu.System`` stores into the same tensor on a peer
(``remote_store``), tells the peer it may read it (``signal``), and waits for its own signals (``wait``).

The tensors are symmetric: each rank passes its own array of one ``system.symmetric(...)`` buffer, and a remote
store to ``ptr + offs`` on ``peer`` writes those elements of the peer's array. Ranks and peers are kernel
arguments (``rank``, ``world``) or values computed from them. See docs/distributed.md.
"""

from __future__ import annotations

from ..errors import KernelTypeError
from ..frontend.values import pointer as _pointer
from ..frontend.values import tensor as _tensor
from ..frontend.values import unwrap
from .core import builtin

_CMPS = ("lt", "le", "gt", "ge", "eq", "ne")


def _peer(_sem, peer, what):
    p = _sem.as_scalar(peer, what)
    if not (p.dtype.is_int or p.dtype.is_bool):
        raise KernelTypeError(f"{what} must be an integer rank, got {p.dtype}")
    return _sem.cast(p, _sem.dtype_arg("int32"))


def _scalar_pointer(_sem, ptr, fn):
    ptr = unwrap(ptr)
    if not isinstance(ptr, _pointer):
        raise KernelTypeError(f"dl.{fn} expects a pointer to a flag, got {type(ptr).__name__}",
                              hint="pass a tensor parameter plus an index, for example sig_ptr + rank")
    if ptr.shape != ():
        raise KernelTypeError(f"dl.{fn} takes one flag (a scalar pointer), got a pointer tile {ptr.shape}",
                              hint="signal or wait for one flag per call: sig_ptr + i, not sig_ptr + dl.arange(...)")
    if not ptr.dtype.is_int:
        raise KernelTypeError(f"dl.{fn}: signal flags are integers, got a {ptr.dtype} tensor",
                              hint="make the signal buffer int32 (system.symmetric(n, 'int32'))")
    return ptr


@builtin
def remote_store(pointer, value, peer, mask=None, _sem=None):
    """Store ``value`` (broadcast to the pointer's shape, cast to its dtype) into the elements ``pointer`` addresses,
    in the same tensor on device ``peer``; masked-off elements are not written. The stores of a program reach the
    peer before any signal the program sends it afterwards."""
    ptr = unwrap(pointer)
    if not isinstance(ptr, _pointer):
        raise KernelTypeError(f"dl.remote_store expects a pointer, got {type(ptr).__name__}",
                              hint="pass a tensor parameter plus offsets, for example out_ptr + offs")
    value = unwrap(value)
    if isinstance(value, _pointer):
        raise KernelTypeError("cannot store a pointer", hint="store a loaded or computed value")
    v = _sem.cast(value, ptr.dtype)
    m = unwrap(mask)
    if ptr.shape == ():  # one element: a one-element tile
        ptr = _sem._one_element(ptr)
        v = _sem._one(v) if v.numel == 1 else v
        if isinstance(m, _tensor):
            m = _sem._one(m, mask=True)
    shape = _sem._mem_shapes(ptr, v, m if isinstance(m, _tensor) else None)
    offs = _sem._offsets(ptr, shape)
    if shape and v.shape != shape:
        v = _sem.broadcast_to(v, shape)
    mk = _sem._mask(m, shape)
    p = _peer(_sem, peer, "the peer of dl.remote_store")
    operands = [offs.handle, v.handle, p.handle] + ([mk.handle] if mk is not None else [])
    _sem.b.op("remote_store", operands, [], {"tensor": ptr.param, "has_mask": mk is not None})


@builtin
def signal(pointer, peer, value=1, op="set", _sem=None):
    """Set (``op="set"``) or add to (``op="add"``) the flag ``pointer`` addresses on device ``peer``, once this
    program's earlier remote stores have reached it."""
    ptr = _scalar_pointer(_sem, pointer, "signal")
    op = unwrap(op)
    if op not in ("set", "add"):
        raise KernelTypeError(f"dl.signal op must be 'set' or 'add', got {op!r}")
    off = _sem.cast(_sem.as_scalar(_sem.ptr_offsets(ptr), "the flag's offset"), _sem.dtype_arg("int32"))
    p = _peer(_sem, peer, "the peer of dl.signal")
    v = _sem.cast(_sem.as_scalar(value, "the signal value"), _sem.dtype_arg("int32"))
    _sem.b.op("signal", [off.handle, p.handle, v.handle], [], {"tensor": ptr.param, "op": op})


@builtin
def wait(pointer, value=1, cmp="ge", _sem=None):
    """Wait until this device's flag ``pointer`` addresses compares ``cmp`` (``"ge"``: has reached) with
    ``value``; what follows runs after. A kernel that waits must run all its programs at once (grid at most the
    cores), and the ranks that signal it must run beside it (``system.spmd``)."""
    ptr = _scalar_pointer(_sem, pointer, "wait")
    cmp = unwrap(cmp)
    if cmp not in _CMPS:
        raise KernelTypeError(f"dl.wait cmp must be one of {', '.join(_CMPS)}, got {cmp!r}")
    off = _sem.cast(_sem.as_scalar(_sem.ptr_offsets(ptr), "the flag's offset"), _sem.dtype_arg("int32"))
    v = _sem.cast(_sem.as_scalar(value, "the awaited value"), _sem.dtype_arg("int32"))
    _sem.b.op("wait_signal", [off.handle, v.handle], [], {"tensor": ptr.param, "cc": cmp})


__all__ = ["remote_store", "signal", "wait"]
