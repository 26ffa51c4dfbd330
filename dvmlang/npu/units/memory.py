"""Memory-transfer step builders (MTE1/MTE2/MTE3, FixPipe): DMA loads and stores by descriptor, gathers and
scatters by offset tiles, atomics, and copies between on-chip memory spaces.

A transfer's cycles depend on each batch (bytes, bursts, elements): its step has no fixed cost and its
closure returns the cycles its row's formula gives for the batch."""

from __future__ import annotations

import numpy as np

from ...vm import isa
from ...vm.decode import sop_parts
from ...errors import MemoryFault
from ...vm import semantics as sem
from ...vm.semantics import lift
from .. import poison
from ..bounds import check_elements
from ..direct import direct_plan, padding
from ..dma import Windows, compute_into, descriptor, descriptor_key, dma_read, dma_write, pending_windows, \
    store_view
from ..elements import atomic
from ..state import materialise_views, poison_value, prod
from ..timing import _total
from .registry import builds


def _descriptor(m, d):
    """(base, strides, lo, hi, the ones that read a register): the descriptor fields of a DMA row as functions
    batch -> value (an immediate's is the same for every batch: the step's descriptors are told apart by the
    register fields alone)."""
    rank = d.ins.extra["rank"]
    kinds = d.ins.kinds
    names = ["base"] + [f"{what}{i}" for what in ("stride", "lo", "hi") for i in range(rank)]
    fns = {n: m.sop(d.vals[n], kinds[n]) for n in names}
    varying = tuple(fns[n] for n in names if sop_parts(d.vals[n], kinds[n])[0])
    return (fns["base"], [fns[f"stride{i}"] for i in range(rank)], [fns[f"lo{i}"] for i in range(rank)],
            [fns[f"hi{i}"] for i in range(rank)], varying)


def _elements(m, d, shape):
    """A function (batch, launch) -> (tensor, offsets, mask) of a gather, scatter or atomic, per element,
    the offsets the mask keeps checked against the tensor."""
    ro = m.reader(d.vals["offsets"])
    rm = m.reader(d.vals["mask"]) if d.vals["masked"] else None
    t = d.vals["tensor"]
    pc = d.pc
    shape = tuple(shape)

    def read(b, L, loading=False):
        g = L.arrays[t]
        off = np.broadcast_to(ro(b, L), (b.n,) + shape).astype(np.int64)
        msk = np.broadcast_to(rm(b, L), off.shape) if rm is not None else np.ones(off.shape, bool)
        try:
            check_elements(L, b, t, off, msk, pc, g.size)
        except MemoryFault:
            if not (loading and poison.enabled(L, t)):
                raise
            return g, off, msk, poison.element_read(L, b, t, off, msk, pc)  # GPU load semantics
        return g, off, msk
    return read


def _moved(b, g, msk):
    """(elements, bytes) each program moves: the elements its mask keeps (the bytes are what the trace
    records for the step)."""
    cnt = msk.reshape(b.n, -1).sum(axis=1)
    b.last_bytes = nbytes = cnt * g.itemsize
    return cnt, nbytes


def _transfer(L, b, cost, desc, g, pc, t, write, to_l1=False):
    """A DMA's bytes counted and its cycles for a batch; the time lost to bursts off their alignment boundary
    is counted for the summary and the trace (``Rates.note``). ``to_l1``: a cube operand, read along its
    stored rows."""
    figures = desc.figures(g.itemsize, L.profile.gm_align_bytes, to_l1)
    nbytes, bursts, un = figures
    n = b.n
    # (rate, figures, formula, cycles, the bytes and the unaligned bytes all programs move) kept with the
    # descriptor: the same for the same figures, formula and rate
    known = desc.cycles
    if known is None or known[1] is not figures or known[2] is not cost:
        known = None
        moved, off = _total(nbytes, n), _total(nbytes * un, n)
    else:
        moved, off = known[4], known[5]
    rates = L.rates
    if write:
        b.bytes_written += nbytes
        rate = rates.write(t, moved)
    else:
        b.bytes_read += nbytes
        rate = rates.read(t, moved)
    b.last_bytes = nbytes
    rates.note(pc, t, write, off, rate)
    if known is None or known[0] != rate:
        cycles = cost(bursts=bursts, nbytes=nbytes, rate=rate, unaligned=un)
        same = None
        if cycles.__class__ is np.ndarray:
            cycles.flags.writeable = False  # (returned again for this descriptor: no one may write into it)
            first = cycles.flat[0]
            if cycles.size > 1 and (cycles == first).all():
                same = first.item()
        known = desc.cycles = (rate, figures, cost, cycles, moved, off, same)
    # programs sharing one clock (Batch.scalar) that all take the same cycles: the one number _execute would
    # take from the array
    return known[6] if b.scalar and known[6] is not None else known[3]


@builds("dma_load")
def dma_load(m, d):
    _, dd, shape = m.layout(d.vals["dst"])
    w = m.writer(d.vals["dst"], d.ins.spaces["dst"])
    t = d.vals["tensor"]
    fields, memo = _descriptor(m, d), {}
    pad_reg, pad_v = sop_parts(d.vals["pad"])
    npdt = dd.np
    shape = tuple(shape)
    pc = d.pc
    cost = m.formula(d)
    undef = d.vals.get("pad_undef", 0)
    keep = d.vals.get("keep", 0)
    prev = m.reader(d.vals["dst"], d.ins.spaces["dst"]) if keep else None
    poisoned = poison_value(npdt)
    to_l1 = d.ins.spaces["dst"] == "l1"

    def fn(b, L):
        g = L.arrays[t]
        try:
            desc = descriptor(memo, L, b, t, fields, shape, pc)
        except MemoryFault:
            if not poison.enabled(L, t):
                raise
            # GPU load semantics: out-of-range lanes are poison. (descriptor() kept the new descriptor, unchecked, in
            # the memo before its check raised: the last entry)
            desc = memo[next(reversed(memo))]
            pad = b.regs[pad_v] if pad_reg else pad_v
            old = np.broadcast_to(prev(b, L), (b.n,) + shape) if keep else None
            arr = poison.box_read(L, b, t, desc, shape, npdt, 0 if keep else pad, pc)
            w(b, np.where(_box_mask(desc, shape, b.n), arr, old) if keep else arr)
            return _transfer(L, b, cost, desc, g, pc, t, False, to_l1)
        pad = b.regs[pad_v] if pad_reg else pad_v
        if undef and L.debug:
            pad = poisoned  # masked-off elements the kernel gave no value for
        if keep:  # only the box is written: the rest of dst keeps its value (a wrapped or clamped tile's 2nd part)
            old = np.broadcast_to(prev(b, L), (b.n,) + shape)
            if bool(np.all(desc.empty)):
                w(b, old)
            else:
                arr, _ = dma_read(g, desc, shape, npdt, 0, b.n)
                w(b, np.where(_box_mask(desc, shape, b.n), arr, old))
        else:
            arr, gm_view = dma_read(g, desc, shape, npdt, pad, b.n, pending=True)
            if arr.__class__ is Windows:
                w.lazy(b, arr, [(arr.inverse, None)])  # gathered when read (units/cube.py reads the windows)
            else:
                w(b, arr, L.alias[t] if gm_view else None)
        return None if L.untimed else _transfer(L, b, cost, desc, g, pc, t, False, to_l1)

    def resolve(b):
        """This step in an untimed launch for batch ``b``'s register values (npu/replay.py): the descriptor
        ``fn`` just used, found once. It reads as ``fn`` does; a tensor of another size than the one the
        descriptor's box was checked for goes through ``fn`` (which checks it), and so does a load whose padding
        the debug mode poisons, in debug mode. None for a load that keeps part of its destination."""
        desc = memo.get(descriptor_key(b, fields[4]))
        if desc is None or keep:
            return None

        def resolved(b, L):
            g = L.arrays[t]
            if desc.checked != g.size or (undef and L.debug):
                return fn(b, L)
            arr, gm_view = dma_read(g, desc, shape, npdt, b.regs[pad_v] if pad_reg else pad_v, b.n, pending=True)
            if arr.__class__ is Windows:
                w.lazy(b, arr, [(arr.inverse, None)])
            else:
                w(b, arr, L.alias[t] if gm_view else None)

        def value(b, L, store: bool):
            """What ``resolved`` stores, as the tile's reader gives it (the writer's finished array), stored only
            when ``store`` (npu/replay.py: a tile no later step reads from the buffer lives in a local variable).
            A tensor of another size, or a pending gather, is stored by the step and read back."""
            g = L.arrays[t]
            if desc.checked != g.size or (undef and L.debug):
                fn(b, L)
                return read_back(b, L)
            arr, gm_view = dma_read(g, desc, shape, npdt, b.regs[pad_v] if pad_reg else pad_v, b.n, pending=True)
            if arr.__class__ is Windows:
                w.lazy(b, arr, [(arr.inverse, None)])
                return read_back(b, L)
            arr = finish(arr)
            if store:
                w(b, arr, L.alias[t] if gm_view else None)
            return arr
        resolved.value = value
        # (what a replay reads the box as, straight from the tensor: npu/replay.py)
        plan = direct_plan(desc, b.n, shape, False)
        if plan is not None and plan[4] and not all(x.start == 0 and x.stop == e for x, e in zip(plan[4], shape)):
            # a box smaller than the tile: put in a copy of the padding (a replay sets the register it may come
            # from to this value, as here; poison in debug mode)
            plan = plan + (padding(plan[1][0], shape, npdt, b.regs[pad_v] if pad_reg else pad_v), undef)
        resolved.direct = (t, desc.checked, plan, finish, w)
        return resolved
    fn.resolve = resolve
    finish = w.finish
    read_back = m.reader(d.vals["dst"], d.ins.spaces["dst"])
    return m.step(d, fn, None)


def _box_mask(desc, shape, n):
    """(n, *shape) bools: the elements inside each program's box ``lo_d <= i_d < hi_d``."""
    m = np.ones((n,) + tuple(1 for _ in shape), bool)
    for d, s in enumerate(shape):
        i = np.arange(s).reshape((1,) + tuple(s if e == d else 1 for e in range(len(shape))))
        lo = np.broadcast_to(desc.lo[d], (n,)).reshape((n,) + (1,) * len(shape))
        hi = np.broadcast_to(desc.hi[d], (n,)).reshape((n,) + (1,) * len(shape))
        m = m & (i >= lo) & (i < hi)
    return np.broadcast_to(m, (n,) + tuple(shape))


@builds("dma_store")
@builds("fix_store")
def dma_store(m, d):
    """UB -> GM (DMA_STORE), or L0C -> GM through FixPipe (FIX_STORE, converting to the tensor's dtype)."""
    space = d.ins.spaces["src"]
    src_addr, src_dt, shape = m.layout(d.vals["src"])
    r = m.reader(d.vals["src"], space)
    t = d.vals["tensor"]
    fields, memo = _descriptor(m, d), {}
    shape = tuple(shape)
    pc = d.pc
    cost = m.formula(d)
    src_bytes = prod(shape) * src_dt.itemsize

    def fn(b, L):
        g = L.arrays[t]
        return store(b, L, g, descriptor(memo, L, b, t, fields, shape, pc))

    def store(b, L, g, desc):
        materialise_views(b, L, t)
        slot = b.mem["ub"].get(src_addr) if space == "ub" else None  # lazy tiles live in UB
        view = box = None
        if slot is not None and slot.lazy is not None and slot.nbytes == src_bytes and \
                getattr(L, "poison_from", None) is None and \
                isinstance(slot.lazy[0], np.ufunc) and slot.dtype == g.dtype and tuple(slot.shape) == shape:
            view, box = store_view(g, desc, shape, b.n, whole=slot.keep)
        if view is not None and compute_into(slot, view, box):
            if box is None:  # the whole tile went to GM: later readers read it there
                slot.arr = view
                slot.gm = frozenset((L.alias[t],))
        else:
            src = r(b, L)
            if getattr(L, "poison_from", None) is not None:
                poison.check_store(L, b, t, np.broadcast_to(src, (b.n,) + shape), pc, _box_mask(desc, shape, b.n))
            dma_write(g, desc, shape, src, b.n)
        if L.races is not None:
            L.races.record_dma(b, t, desc)
        return None if L.untimed else _transfer(L, b, cost, desc, g, pc, t, True)

    def resolve(b):
        """This step in an untimed launch for batch ``b``'s register values (npu/replay.py): the descriptor
        ``fn`` just used, found once (a tensor of another size than the one it was checked for: ``fn``)."""
        desc = memo.get(descriptor_key(b, fields[4]))
        if desc is None:
            return None

        def resolved(b, L):
            g = L.arrays[t]
            if desc.checked != g.size:
                return fn(b, L)
            store(b, L, g, desc)
        # (what a replay writes a value it holds as, straight into the tensor: npu/replay.py)
        resolved.direct = (t, desc.checked, direct_plan(desc, b.n, shape, True), space, src_addr, src_bytes,
                           src_dt.np)
        resolved.desc, resolved.shape = desc, shape  # (dma_write's arguments, when the plan is not one view)
        return resolved
    fn.resolve = resolve
    return m.step(d, fn, None)


@builds("gather")
def gather(m, d):
    _, dd, shape = m.layout(d.vals["dst"])
    shape = tuple(shape)
    w = m.writer(d.vals["dst"])
    elements = _elements(m, d, shape)
    t = d.vals["tensor"]
    pad_reg, pad_v = sop_parts(d.vals["pad"])
    cost = m.formula(d)
    npdt = dd.np

    def fn(b, L):
        got = elements(b, L, True)
        g, off, msk = got[:3]
        pad = lift(b.regs[pad_v] if pad_reg else pad_v, len(shape), npdt)
        if len(got) == 4:  # GPU load semantics: out-of-range lanes read poison (npu/poison.py)
            w(b, np.where(msk, got[3], pad).astype(npdt, copy=False))
        else:
            w(b, sem.gathered(g, off, msk, pad, npdt))
        if L.untimed:
            return None
        cnt, nbytes = _moved(b, g, msk)
        b.bytes_read += nbytes
        return cost(elements=cnt, nbytes=nbytes, rate=L.rates.read(t, _total(nbytes, b.n)))

    def value(b, L, off, msk):
        """What ``fn`` writes, for a replay (npu/replay.py) holding the offsets (and the mask) it read: the
        gathered tile when every offset the mask keeps is inside the tensor, which is no pointer-table heap and
        has the tile's dtype (then ``fn``'s mask and padding leave its elements as they are); else None, and the
        step runs as itself (its check and fault, GPU load semantics)."""
        g = L.arrays[t]
        if g.dtype != npdt or g.__class__ is not np.ndarray and getattr(g, "dvm_segments", None) is not None:
            return None
        full = (b.n,) + shape
        if off.shape != full:
            off = np.broadcast_to(off, full)
        if msk is not None and msk.all():  # (then ``gathered`` gives the elements at the offsets, as without one)
            msk = None
        if msk is None:
            if off.size and (off.min() < 0 or off.max() >= g.size):
                return None
            return g[off]
        if msk.shape != full:
            msk = np.broadcast_to(msk, full)
        if (((off < 0) | (off >= g.size)) & msk).any():
            return None
        return sem.gathered(g, off, msk, lift(b.regs[pad_v] if pad_reg else pad_v, len(shape), npdt), npdt)
    fn.value = value
    return m.step(d, fn, None)


@builds("scatter")
def scatter(m, d):
    _, _, shape = m.layout(d.vals["src"])
    rs = m.reader(d.vals["src"])
    elements = _elements(m, d, shape)
    t = d.vals["tensor"]
    cost = m.formula(d)

    def fn(b, L):
        g, off, msk = elements(b, L)
        materialise_views(b, L, t)
        src = np.broadcast_to(rs(b, L), off.shape)
        if getattr(L, "poison_from", None) is not None:
            poison.check_store(L, b, t, src, d.pc, msk)
        sem.scattered(g, off, msk, src)
        if L.races is not None:
            L.races.record_elements(b, t, off, msk)
        if L.untimed:
            return None
        cnt, nbytes = _moved(b, g, msk)
        b.bytes_written += nbytes
        return cost(elements=cnt, nbytes=nbytes, rate=L.rates.write(t, _total(nbytes, b.n)))
    return m.step(d, fn, None)


@builds("atomic")
def atomic_rmw(m, d):
    _, _, shape = m.layout(d.vals["src"])
    rs = m.reader(d.vals["src"])
    elements = _elements(m, d, shape)
    rc = m.reader(d.vals["cmp"]) if d.vals["has_cmp"] else None
    want = d.vals["want_old"]
    w = m.writer(d.vals["dst"]) if want else None
    t = d.vals["tensor"]
    op = isa.ATOMIC_OPS[d.vals["op"]]
    cost = m.formula(d)

    def fn(b, L):
        g, off, msk = elements(b, L)
        materialise_views(b, L, t)
        src = np.broadcast_to(rs(b, L), off.shape)
        cmp = np.broadcast_to(rc(b, L), off.shape) if rc is not None else None
        old = atomic(g, op, off, msk, src, cmp, want)
        if want:
            w(b, old)
        cnt, nbytes = _moved(b, g, msk)
        b.bytes_written += nbytes
        b.bytes_read += nbytes
        total = _total(nbytes, b.n)
        L.rates.read(t, total)
        L.rates.write(t, total)
        return cost(elements=cnt)
    return m.step(d, fn, None)


@builds("copy_space")
def copy_space(m, d):
    r = m.reader(d.vals["src"], d.ins.spaces["src"])
    w = m.writer(d.vals["dst"], d.ins.spaces["dst"])
    _, dd, shape = m.layout(d.vals["dst"])
    npdt = dd.np
    shape = tuple(shape)
    nb = prod(shape) * dd.itemsize
    cost = m.formula(d)

    def fn(b, L):
        src, _ = r.source(b, L)
        slot = pending_windows(src)
        if slot is not None and slot.dtype == npdt and tuple(slot.shape) == shape:
            w.slot(b, slot)  # a pending gather of shared windows moves on pending (units/cube.py)
        else:
            w(b, (src if src.__class__ is not tuple else r(b, L)).astype(npdt, copy=False))
    return m.step(d, fn, cost(nbytes=nb))
