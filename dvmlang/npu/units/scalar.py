"""Scalar-unit step builders: registers, scalar arithmetic, control flow, events and barriers, scalar reads of
UB and GM, device prints and traps."""

from __future__ import annotations

import numpy as np

from ...errors import DeviceError, MemoryFault
from ...vm import isa
from .. import poison
from ..bounds import check_bounds
from ..convert import cast, cast_rtz
from ..dma import store_scalars
from ..state import materialise_views
from .registry import builds


def _op(m, d, fn, kind="op", **kw):
    """A step costing its row's formula (no sizes: scalar, branch, sync, scalar_gm and print rows)."""
    return m.step(d, fn, m.formula(d)(), kind, **kw)


def _pure(m, d, fn):
    """``_op`` of a step that only sets a register from registers, immediates, the program's coordinates and
    the instance's fixed facts (its grid and parameter table): ``Step.pure``, see ``Machine.prefix``."""
    return _op(m, d, fn, pure=True)


def _nothing(b, L):
    return None


@builds("nop")
def nop(m, d):
    return _pure(m, d, _nothing)


@builds("end")
def end(m, d):
    return _op(m, d, _nothing, "end")


@builds("movi")
def movi(m, d):
    rd = d.vals["rd"]
    npdt = d.dtype.np
    pc = d.pc

    def fn(b, L):
        b.regs[rd] = L.imm(pc + 1, npdt)
    return _pure(m, d, fn)


@builds("mov")
def mov(m, d):
    rd, rs = d.vals["rd"], d.vals["rs"]

    def fn(b, L):
        b.regs[rd] = b.regs[rs]
    return _pure(m, d, fn)


@builds("pid")
def pid(m, d):
    rd, axis = d.vals["rd"], d.vals["axis"]

    def fn(b, L):
        c = b.coords[axis]
        b.regs[rd] = c if b.n > 1 else np.int32(c[0])
    return _pure(m, d, fn)


@builds("nprog")
def nprog(m, d):
    rd, axis = d.vals["rd"], d.vals["axis"]

    def fn(b, L):
        b.regs[rd] = np.int32(L.kernel.grid[axis])  # the launch's grid: decoders are shared by instances
    return _pure(m, d, fn)


@builds("tdim")
def tdim(m, d):
    rd, t, dim, stride = d.vals["rd"], d.vals["tensor"], d.vals["dim"], d.vals["stride"]

    def fn(b, L):
        p = L.bc.params[t]
        v = p.strides[dim] if stride else p.shape[dim]
        b.regs[rd] = np.array(v).astype(np.int32)[()]
    return _pure(m, d, fn)


@builds("jmp")
def jmp(m, d):
    return _op(m, d, _nothing, "jmp", target=d.vals["target"])


@builds("br")
def br(m, d):
    rc = d.vals["rc"]

    def fn(b, L):
        return b.regs[rc]
    return _op(m, d, fn, "br_nz" if d.ins.extra["when"] else "br_z", target=d.vals["target"])


@builds("ssel")
def ssel(m, d):
    rd, rc, ra, rb = (d.vals[k] for k in ("rd", "rc", "ra", "rb"))

    def fn(b, L):
        b.regs[rd] = np.where(b.regs[rc], b.regs[ra], b.regs[rb])
    return _pure(m, d, fn)


@builds("scast")
def scast(m, d):
    rd, ra, bitcast = d.vals["rd"], d.vals["ra"], d.vals["bitcast"]
    npdt = d.dtype.np
    conv = cast_rtz if d.vals["rtz"] else cast

    def fn(b, L):
        v = np.asarray(b.regs[ra])
        b.regs[rd] = v.view(npdt) if bitcast else conv(v, npdt)
    return _pure(m, d, fn)


@builds("scmp")
def scmp(m, d):
    rd, ra, rb = d.vals["rd"], d.vals["ra"], d.vals["rb"]
    f = isa.COMPARE[isa.CC_NAMES[d.vals["cc"]]]

    def fn(b, L):
        b.regs[rd] = f(b.regs[ra], b.regs[rb])
    return _pure(m, d, fn)


@builds("sbin")
def sbin(m, d):
    rd, ra, rb = d.vals["rd"], d.vals["ra"], d.vals["rb"]
    f = d.ins.fn
    npdt = d.dtype.np

    def fn(b, L):
        r = f(np.asarray(b.regs[ra]), np.asarray(b.regs[rb]))
        b.regs[rd] = np.asarray(r).astype(npdt, copy=False)
    return _pure(m, d, fn)


@builds("sun")
def sun(m, d):
    rd, ra = d.vals["rd"], d.vals["ra"]
    f = d.ins.fn
    npdt = d.dtype.np

    def fn(b, L):
        r = f(np.asarray(b.regs[ra]))
        b.regs[rd] = np.asarray(r).astype(npdt, copy=False)
    return _pure(m, d, fn)


@builds("movts")
def movts(m, d):
    rd = d.vals["rd"]
    read = m.reader(d.vals["src"])

    def fn(b, L):
        arr = read(b, L)
        flat = arr.reshape(arr.shape[0], -1)[:, 0]
        b.regs[rd] = flat[0] if flat.shape[0] == 1 else flat.copy()
    return _op(m, d, fn)


def _element(m, d):
    """A function (batch, launch) -> (tensor, offset) of a scalar GM access, the offset (one, or one per
    program) checked against the tensor."""
    t = d.vals["tensor"]
    off = m.sop(d.vals["offset"])
    pc = d.pc

    def locate(b, L):
        g = L.arrays[t]
        idx = np.asarray(off(b)).astype(np.int64)
        check_bounds(L, b, t, idx, pc)
        return g, idx
    return locate


@builds("ldg")
def ldg(m, d):
    rd = d.vals["rd"]
    locate = _element(m, d)
    t = d.vals["tensor"]
    off = m.sop(d.vals["offset"])

    def fn(b, L):
        try:
            g, idx = locate(b, L)
            v = g[idx]
        except MemoryFault:
            if not poison.enabled(L, t):
                raise
            g = L.arrays[t]  # GPU load semantics: the value is poison
            v = poison.scalar_read(L, b, t, np.asarray(off(b)).astype(np.int64), d.pc)
        b.bytes_read += g.itemsize
        b.regs[rd] = v if np.ndim(v) else v
    return _op(m, d, fn)


@builds("stg")
def stg(m, d):
    rs, t = d.vals["rs"], d.vals["tensor"]
    locate = _element(m, d)

    def fn(b, L):
        g, idx = locate(b, L)
        materialise_views(b, L, t)
        if L.races is not None:
            L.races.record_elements(b, t, np.broadcast_to(idx, (b.n,))[:, None], np.ones((b.n, 1), bool))
        store_scalars(g, idx, b.regs[rs], b.n)
        b.bytes_written += g.itemsize
    return _op(m, d, fn)


@builds("print")
def print_(m, d):
    sid, kind, hexa = d.vals["string"], d.vals["kind"], d.vals["hex"]
    reg = d.vals["reg"]
    read = m.reader(d.vals["value"]) if kind == 2 else None
    npdt = d.dtype.np

    def fn(b, L):
        prefix = L.bc.strings[sid]
        if kind == 0:
            vals = [None] * b.n
        elif kind == 1:
            v = np.broadcast_to(np.asarray(b.regs[reg]), (b.n,))
            vals = list(v)
        else:
            arr = read(b, L)
            arr = np.broadcast_to(arr, (b.n,) + arr.shape[1:])
            vals = [arr[i] for i in range(b.n)]
        seq = np.broadcast_to(b.print_seq, (b.n,))
        L.add_prints([(int(b.pids[i]), int(seq[i]), prefix, vals[i], bool(hexa), npdt) for i in range(b.n)])
        b.print_seq = b.print_seq + 1
    return _op(m, d, fn)


@builds("set")
def set_(m, d):
    return _op(m, d, _nothing, "set", pipe=d.vals["src"], sync=((d.vals["dst"], d.vals["event"]), None))


@builds("wait")
def wait(m, d):
    return _op(m, d, _nothing, "wait", pipe=d.vals["dst"], sync=(None, (d.vals["src"], d.vals["event"])))


@builds("barrier")
def barrier(m, d):
    mask = d.vals["mask"]
    drain = [q for q in range(isa.N_PIPES) if mask >> q & 1] or list(range(isa.N_PIPES))
    return _op(m, d, _nothing, "barrier", drain=drain)


@builds("trap")
def trap(m, d):
    sid = d.vals["string"]
    pc = d.pc

    def fn(b, L):
        raise DeviceError(f"kernel `{L.name}` trapped in programs {b.pids[:8].tolist()}: {L.bc.strings[sid]}"
                          + L.where(pc))
    return _op(m, d, fn)
