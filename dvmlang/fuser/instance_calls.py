"""What a plan's generated instance function (``fuser/instance.py``) calls at run time: a new instance of a
group's kernel, the program's intermediate buffers and the flat views it keeps across calls, the instances a
generic run encoded given to the function."""

from __future__ import annotations

import time
import weakref

import numpy as np

from .build import MAX_INSTANCES
from .captured_args import exact
from .graph import GraphError

_SIZED = 256  # the sizes whose instances a program keeps (the oldest goes first)


def seed(fn, sizes: dict, consts, bcs) -> None:
    """Give ``fn`` (an instance function) the instances a generic run of its plan encoded at ``sizes`` (root
    symbol id -> size): a call at those sizes then encodes nothing. Only for a run the function would have
    served the same way (its caller checks: C-contiguous inputs over buffers of their own)."""
    cache = fn.instances
    if cache is None or len(bcs) != fn.kernels or any(r not in sizes for r in fn.roots):
        return
    key = tuple([sizes[r] for r in fn.roots]) + (None if consts is None else _consts_key(consts),)
    if key not in cache and len(cache) < _SIZED:
        cache[key] = tuple(bcs)


def _consts_key(consts: dict) -> tuple:
    """A lazy program's constants as a key: each by its bits (``captured_args.exact``)."""
    return tuple([(k, exact(v)) for k, v in consts.items()])


def _encode(gk, build, args, grid, ikey, arrays):
    """A new instance of a group's kernel (the generic ``GroupKernel.prepare`` miss, with its int32 check).
    ``arrays``: the tensor arguments (parameter index -> flat array)."""
    for i in build.int_args:
        if not -(1 << 31) <= args[i] < 1 << 31:
            raise GraphError(f"kernel `{gk.name}`: the size argument {gk.sig.params[i]} = {args[i]} does not fit "
                             "int32")
    keys = [None] * len(args)  # per tensor argument (dtype, shape, strides), as ``Encoder.encode_values`` takes them
    for i, a in arrays.items():
        keys[i] = (a.dtype, a.shape, a.strides)
    t0 = time.perf_counter()
    bc = build.encoder.encode_values(args, grid, tuple(keys))
    bc.encode_s = time.perf_counter() - t0
    gk.stats.encodes += 1
    if gk.sink is not None:
        gk.sink.encodes += 1
    inst = gk._instances
    inst[ikey] = bc
    if len(inst) > MAX_INSTANCES:
        inst.popitem(last=False)
    return bc


def _instance(gk, build, inst, ikey, args, grid, arrays):
    """A group's instance for these sizes: from the kernel's instances, else encoded."""
    bc = inst.get(ikey)
    if bc is None:
        bc = _encode(gk, build, args, grid, ikey, arrays)
    else:
        gk.stats.hits += 1
    gk.stats.launches += 1
    return bc


def _flat(pool, k: int, a):
    """The entry of input ``a``'s flat view in slot ``k`` of a call's pool: (a weak reference to ``a``, its flat
    view, its pieces by offset), kept while ``a`` lives when the view does not hold ``a`` itself (``a`` a view of
    another array, as the torch backend passes its tensors), so the next call that passes ``a`` gets the same
    arrays; an array that owns its memory gets a new view (holding it would keep it alive)."""
    flat = a.reshape(-1)
    if flat.base is a:
        return _ONCE, flat, {}

    def gone(ref, pool=pool, k=k):  # (``a`` freed: its entry goes with it, not at the next collection)
        e = pool[k]
        if e is not None and e[0] is ref:
            pool[k] = None
    e = pool[k] = (weakref.ref(a, gone), flat, {})
    return e


def _ONCE():
    return None


def _piece(pieces: dict, flat, off: int):
    """``flat[off:]``, the same array for every call with the entry (``_flat``)."""
    v = pieces.get(off)
    if v is None:
        v = pieces[off] = flat[off:]
    return v


def _take(pool, k, n, dtype):
    """An intermediate's flat array: the first ``n`` elements of the program's buffer ``k`` (grown when a call needs
    more). The pool keeps the piece it handed out last (its ``base`` the buffer), and a call of the same size gets
    that very array again (``pool[k]``, tested where it is called), as the device's L2 model then finds it: one
    lookup, not a new view's root and address at every call."""
    b = pool[k]
    if b.base is not None:
        b = b.base
    if b.size < n:
        b = np.empty(n + (n >> 2), dtype)
    v = pool[k] = b[:n]
    return v
