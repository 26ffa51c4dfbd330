"""The instruction families: one record per family, holding the validator's typing rule for it.

Every ISA row (``isa.TABLE``) names its family. A family's record says how control leaves an instruction
(``flow``), whether the row's dtype rule applies (``typed``; ``compare`` rows accept int1 under ``num``),
what the validator checks in words (``checks``, rendered into ``docs/isa.md``), and the rule itself: a short
function ``rule(v, d)`` over the kernel validator ``v`` (its operand checks ``reg``, ``tile`` (in the memory
space the row's field declares), ``sop``,
``tensor``, ``gm``, ``target``, ``rtz``, ``same``, ``fail``) and the decoded instruction ``d``, in the spirit of
WebAssembly's validator (one typing rule per instruction). The other halves of a family live in their own
layers: the device step each family builds is registered per family by ``dvmlang/npu`` (the VM executes
nothing), and each row's cost formula is its ``isa.Cost``, which the device's timing model evaluates.

Adding an instruction family is one record here, one step builder in ``npu`` and its rows in ``isa``
(``docs/architecture.md``, "Add an instruction").
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from ..ir.builder import broadcast_shapes
from . import isa
from .decode import sop_parts


@dataclass(frozen=True)
class Family:
    name: str
    rule: object
    checks: str
    flow: str = "next"  # "next" (falls through), "jump", "branch" (jumps or falls through), "exit"
    typed: bool = True
    compare: bool = False


# ---- the typing rules ---------------------------------------------------------------------------------------

def _nop_end_barrier(v, d):
    """Nothing to check."""


def _movi(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    v.imm_words[d.pc + 1] = ty


def _mov(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    v.reg(d, "rs", ty)


def _pid_nprog(v, d):
    o = d.vals
    v.reg(d, "rd", dt.int32)
    if o["axis"] > 2:
        v.fail(d, "grid axis out of range", "0-2", str(o["axis"]))


def _tdim(v, d):
    o = d.vals
    v.reg(d, "rd", dt.int32)
    v.tensor(d)
    if o["dim"] >= v.bc.params[o["tensor"]].rank:
        v.fail(d, "dimension out of range for the tensor", f"< {v.bc.params[o['tensor']].rank}",
               str(o["dim"]))


def _jmp(v, d):
    v.target(d)


def _br(v, d):
    v.reg(d, "rc", "int")
    v.target(d)


def _ssel(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    v.reg(d, "ra", ty)
    v.reg(d, "rb", ty)
    v.reg(d, "rc", dt.bool_)


def _scast(v, d):
    o = d.vals
    ty = d.dtype
    v.reg(d, "rd", ty)
    src = v.reg(d, "ra")
    if o["bitcast"] and src.itemsize != ty.itemsize:
        v.fail(d, "bitcast between types of different sizes")
    v.rtz(d, src, ty)


def _scmp(v, d):
    o = d.vals
    ty = d.dtype
    v.reg(d, "rd", dt.bool_)
    v.reg(d, "ra", ty)
    v.reg(d, "rb", ty)
    if o["cc"] >= 6:
        v.fail(d, "unknown comparison", "0-5", str(o["cc"]))


def _sbin(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    v.reg(d, "ra", ty)
    v.reg(d, "rb", ty)


def _sun(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    v.reg(d, "ra", ty)


def _movts(v, d):
    ty = d.dtype
    v.reg(d, "rd", ty)
    sdt, _ = v.tile(d, "src")
    v.same(d, "MOVTS source dtype", sdt, ty)


def _ldg_stg(v, d):
    o = d.vals
    fam = d.ins.family
    tdt = v.tensor(d)
    v.reg(d, "rd" if fam == "ldg" else "rs", tdt)
    v.sop(d, "offset")
    v.gm(d, o["tensor"])


def _print(v, d):
    o = d.vals
    if o["string"] >= len(v.bc.strings):
        v.fail(d, "print string does not exist", f"< {len(v.bc.strings)}", str(o["string"]))
    if o["kind"] == 1:
        v.reg(d, "reg")
    elif o["kind"] == 2:
        v.tile(d, "value")
    elif o["kind"] != 0:
        v.fail(d, "unknown print operand kind", "0-2", str(o["kind"]))


def _set_wait(v, d):
    o = d.vals
    if o["src"] >= isa.N_PIPES or o["dst"] >= isa.N_PIPES or o["src"] == o["dst"]:
        v.fail(d, "event between invalid pipes", "two different pipes 0-6", f"{o['src']}->{o['dst']}")


def _trap(v, d):
    o = d.vals
    if o["string"] >= len(v.bc.strings):
        v.fail(d, "trap message does not exist")


def _vbin(v, d):
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    bd, bs = v.tile(d, "b")
    for x in (dd, ad, bd):
        v.same(d, "operand dtype", x, ty)
    v.same(d, "result shape", ds, broadcast_shapes(as_, bs))


def _vbins(v, d):
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.reg(d, "rs", ty)
    v.same(d, "operand dtype", dd, ty)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "result shape", ds, as_)


def _vcmp(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    bd, bs = v.tile(d, "b")
    v.same(d, "result dtype", dd, dt.bool_)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "operand dtype", bd, ty)
    v.same(d, "result shape", ds, broadcast_shapes(as_, bs))
    if o["cc"] >= 6:
        v.fail(d, "unknown comparison", "0-5", str(o["cc"]))


def _vcmps(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.reg(d, "rs", ty)
    v.same(d, "result dtype", dd, dt.bool_)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "result shape", ds, as_)
    if o["cc"] >= 6:
        v.fail(d, "unknown comparison", "0-5", str(o["cc"]))


def _vun(v, d):
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.same(d, "operand dtype", dd, ty)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "result shape", ds, as_)


def _vsel(v, d):
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    cd, cs = v.tile(d, "c")
    ad, as_ = v.tile(d, "a")
    bd, bs = v.tile(d, "b")
    v.same(d, "condition dtype", cd, dt.bool_)
    for x in (dd, ad, bd):
        v.same(d, "operand dtype", x, ty)
    s = broadcast_shapes(cs, as_)
    s = broadcast_shapes(s, bs) if s is not None else None
    v.same(d, "result shape", ds, s)


def _vfma(v, d):
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    s = ()
    for n in ("a", "b", "c"):
        x, xs = v.tile(d, n)
        v.same(d, "operand dtype", x, ty)
        s = broadcast_shapes(s, xs) if s is not None else None
    v.same(d, "operand dtype", dd, ty)
    v.same(d, "result shape", ds, s)


def _vcast(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.same(d, "result dtype", dd, ty)
    v.same(d, "result shape", ds, as_)
    if o["bitcast"] and dd.itemsize != ad.itemsize:
        v.fail(d, "bitcast between types of different sizes")
    v.rtz(d, ad, dd)


def _vdup(v, d):
    ty = d.dtype
    dd, _ = v.tile(d, "dst")
    v.same(d, "result dtype", dd, ty)
    v.reg(d, "rs", ty)


def _l0c_fill(v, d):
    dd, _ = v.tile(d, "dst")
    if dd not in (dt.float32, dt.int32):
        v.fail(d, "an L0C accumulator is float32 or int32", "float32 or int32", dd.name)
    v.same(d, "result dtype", dd, d.dtype)
    v.reg(d, "rs", d.dtype)


def _viota(v, d):
    o = d.vals
    dd, ds = v.tile(d, "dst")
    v.same(d, "result dtype", dd, dt.int32)
    if len(ds) != 1:
        v.fail(d, "VIOTA writes a 1-D tile", "rank 1", str(len(ds)))
    is_reg, _ = sop_parts(o["start"])
    if is_reg:
        v.fail(d, "VIOTA start must be an immediate")


def _vcopy(v, d):
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.same(d, "operand dtype", ad, dd)
    if broadcast_shapes(as_, ds) != ds:
        v.fail(d, "source does not broadcast to the destination", str(ds), str(as_))


def _vreduce_vscan(v, d):
    o = d.vals
    fam = d.ins.family
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    n_ops = len(isa.REDUCE_OPS) if fam == "vreduce" else len(isa.SCAN_OPS)
    if o["op"] >= n_ops:
        v.fail(d, "unknown reduction", f"< {n_ops}", str(o["op"]))
    ax = o["axis"]
    if ax >= len(as_):
        v.fail(d, "axis out of range", f"< {len(as_)}", str(ax))
    if fam == "vscan":
        v.same(d, "result shape", ds, as_)
        v.same(d, "result dtype", dd, ad)
    else:
        keep = as_[:ax] + (1,) + as_[ax + 1:]
        drop = as_[:ax] + as_[ax + 1:]
        if ds not in (keep, drop):
            v.fail(d, "reduction result shape", f"{drop} or {keep}", str(ds))
        op = isa.REDUCE_OPS[o["op"]]
        if op in ("argmax", "argmin"):
            v.same(d, "result dtype", dd, dt.int32)
        else:
            v.same(d, "result dtype", dd, ad)
        if op in ("xor_sum", "or") and ad.is_float:
            v.fail(d, f"{op} needs integers or booleans")


def _vperm(v, d):
    o = d.vals
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    r = len(as_)
    bits = d.ins.extra["perm_bits"]
    perm = tuple((o["perm"] >> (bits * i)) & ((1 << bits) - 1) for i in range(r))
    if r * bits > isa.FIELD_KINDS[d.ins.kinds["perm"]][0] or sorted(perm) != list(range(r)):
        v.fail(d, "invalid permutation", f"a permutation of {r} axes", str(perm))
    v.same(d, "result shape", ds, tuple(as_[p] for p in perm))
    v.same(d, "result dtype", dd, ad)


def _vslice(v, d):
    o = d.vals
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    if len(ds) != len(as_) or len(as_) > d.ins.extra["starts"]:
        v.fail(d, "slice rank mismatch")
    for i, (n, m) in enumerate(zip(ds, as_)):
        if o[f"s{i}"] + n > m:
            v.fail(d, "slice outside the source", f"<= {m}", str(o[f"s{i}"] + n))
    v.same(d, "result dtype", dd, ad)


def _vtake(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    idd, is_ = v.tile(d, "index")
    ax = o["axis"]
    if not idd.is_int:
        v.fail(d, "VTAKE index must be an integer tile", "an integer dtype", idd.name)
    if len(as_) != len(is_) or len(ds) != len(as_) or ax >= len(as_):
        v.fail(d, "VTAKE ranks or axis out of range")
    want = tuple(is_[i] if i == ax else as_[i] for i in range(len(as_)))
    if any(is_[i] not in (1, as_[i]) for i in range(len(as_)) if i != ax):
        v.fail(d, "VTAKE index dims off the axis must be 1 or the source's", str(as_), str(is_))
    v.same(d, "result shape", ds, want)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "operand dtype", dd, ty)


def _vsort(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    if o["axis"] >= len(as_):
        v.fail(d, "axis out of range", f"< {len(as_)}", str(o["axis"]))
    v.same(d, "result shape", ds, as_)
    v.same(d, "operand dtype", ad, ty)
    v.same(d, "operand dtype", dd, ty)


def _vhist(v, d):
    o = d.vals
    ty = d.dtype
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    v.same(d, "result dtype", dd, dt.int32)
    v.same(d, "row dtype", ty, dt.int32)
    if len(ds) != 1 or len(as_) != 1 or not ad.is_int:
        v.fail(d, "VHIST counts a 1-D integer tile into a 1-D tile", "1-D", f"{as_} {ad.name} -> {ds}")
    if o["masked"]:
        md, ms = v.tile(d, "mask")
        v.same(d, "mask dtype", md, dt.bool_)
        v.same(d, "mask shape", ms, as_)


def _vcat(v, d):
    o = d.vals
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    bd, bs = v.tile(d, "b")
    ax = o["axis"]
    if ax >= len(as_) or len(as_) != len(bs) or len(ds) != len(as_):
        v.fail(d, "concatenation axis or ranks out of range")
    want = list(as_)
    want[ax] += bs[ax]
    if any(as_[i] != bs[i] for i in range(len(as_)) if i != ax):
        v.fail(d, "concatenated shapes differ outside the axis")
    v.same(d, "result shape", ds, tuple(want))
    v.same(d, "operand dtype", ad, dd)
    v.same(d, "operand dtype", bd, dd)


def _dma_load_dma_store(v, d):
    o = d.vals
    fam = d.ins.family
    rank = d.ins.extra["rank"]
    tdt = v.tensor(d)
    ld, ls = v.tile(d, "dst" if fam == "dma_load" else "src")
    if len(ls) != rank:
        v.fail(d, "tile rank does not match the DMA rank", str(rank), str(len(ls)))
    v.same(d, "tile dtype", ld, tdt)
    v.sop(d, "base")
    for i in range(rank):
        for n in (f"stride{i}", f"lo{i}", f"hi{i}"):
            v.sop(d, n)
    if fam == "dma_load":
        v.sop_register_bits(d, "pad")
        is_reg, r = sop_parts(o["pad"])
        if is_reg:
            if r >= len(v.regs) or v.regs[r] is not tdt:
                v.fail(d, "pad register must hold the tensor's dtype", tdt.name,
                       v.regs[r].name if r < len(v.regs) else f"r{r}")
    v.gm(d, o["tensor"])


def _fix_store(v, d):
    rank = d.ins.extra["rank"]
    tdt = v.tensor(d)
    sd, ss = v.tile(d, "src")
    if len(ss) != rank:
        v.fail(d, "tile rank does not match the DMA rank", str(rank), str(len(ss)))
    ok = tdt in (dt.float32, dt.float16, dt.bfloat16) if sd is dt.float32 else (sd is dt.int32 and tdt is dt.int32)
    if not ok:
        v.fail(d, "FixPipe converts a float32 accumulator to float32/float16/bfloat16, or stores int32 as int32",
               "float32 -> float, int32 -> int32", f"{sd.name} -> {tdt.name}")
    v.sop(d, "base")
    for i in range(rank):
        for n in (f"stride{i}", f"lo{i}", f"hi{i}"):
            v.sop(d, n)
    v.gm(d, d.vals["tensor"])


def _gather_scatter(v, d):
    o = d.vals
    fam = d.ins.family
    tdt = v.tensor(d)
    main = "dst" if fam == "gather" else "src"
    md, ms = v.tile(d, main)
    od, os_ = v.tile(d, "offsets")
    v.same(d, "tile dtype", md, tdt)
    if not od.is_int:
        v.fail(d, "offsets must be integers", "an integer dtype", od.name)
    v.same(d, "offsets shape", os_, ms)
    if o["masked"]:
        kd, ks = v.tile(d, "mask")
        v.same(d, "mask dtype", kd, dt.bool_)
        v.same(d, "mask shape", ks, ms)
    if fam == "gather":
        v.sop_register_bits(d, "pad")
        is_reg, r = sop_parts(o["pad"])
        if is_reg and (r >= len(v.regs) or v.regs[r] is not tdt):
            v.fail(d, "pad register must hold the tensor's dtype")
    if fam == "remote_store":
        v.sop(d, "peer")
    v.gm(d, o["tensor"])


def _atomic(v, d):
    o = d.vals
    tdt = v.tensor(d)
    if o["op"] >= len(isa.ATOMIC_OPS):
        v.fail(d, "unknown atomic op", f"< {len(isa.ATOMIC_OPS)}", str(o["op"]))
    sd, ss = v.tile(d, "src")
    od, os_ = v.tile(d, "offsets")
    v.same(d, "value dtype", sd, tdt)
    if not od.is_int:
        v.fail(d, "offsets must be integers")
    v.same(d, "offsets shape", os_, ss)
    if o["want_old"]:
        dd, ds = v.tile(d, "dst")
        v.same(d, "result dtype", dd, tdt)
        v.same(d, "result shape", ds, ss)
    if o["masked"]:
        kd, ks = v.tile(d, "mask")
        v.same(d, "mask dtype", kd, dt.bool_)
        v.same(d, "mask shape", ks, ss)
    if o["has_cmp"]:
        cd, cs = v.tile(d, "cmp")
        v.same(d, "compare dtype", cd, tdt)
        v.same(d, "compare shape", cs, ss)
    op = isa.ATOMIC_OPS[o["op"]]
    if (op == "cas") != bool(o["has_cmp"]):
        v.fail(d, "only atomic cas takes a compare operand")
    if op in ("and", "or", "xor") and tdt.is_float:
        v.fail(d, f"atomic {op} needs integers")
    v.gm(d, o["tensor"])


def _copy_space(v, d):
    dd, ds = v.tile(d, "dst")
    sd, ss = v.tile(d, "src")
    v.same(d, "shape", ds, ss)
    if d.ins.name not in ("FIX_L0C_TO_UB", "UB_TO_L0C"):
        v.same(d, "dtype", dd, sd)


def _mmad(v, d):
    dd, ds = v.tile(d, "dst")
    ad, as_ = v.tile(d, "a")
    bd, bs = v.tile(d, "b")
    if len(as_) not in (2, 3) or len(bs) != len(as_) or as_[-1] != bs[-2] or as_[:-2] != bs[:-2] or \
            ds != as_[:-1] + bs[-1:]:
        v.fail(d, "matrix shapes do not chain", "(M,K) @ (K,N) -> (M,N) or (B,M,K) @ (B,K,N) -> (B,M,N)",
               f"{as_} @ {bs} -> {ds}")
    v.same(d, "operand dtype", ad, bd)
    if dd not in (dt.float32, dt.int32):
        v.fail(d, "L0C accumulates in float32 or int32", "float32/int32", dd.name)


def _signal_wait(v, d):
    o = d.vals
    tdt = v.tensor(d)
    if not tdt.is_int:
        v.fail(d, "signal tensors hold integers", "an integer tensor", tdt.name)
    if d.ins.name == "SIGNAL" and o["op"] >= len(isa.SIGNAL_OPS):
        v.fail(d, "unknown signal op", f"< {len(isa.SIGNAL_OPS)}", str(o["op"]))
    if d.ins.name == "WAIT_SIGNAL" and o["cc"] >= len(isa.CC_NAMES):
        v.fail(d, "unknown comparison", f"< {len(isa.CC_NAMES)}", str(o["cc"]))
    for n in ("offset", "value") + (("peer",) if d.ins.name == "SIGNAL" else ()):
        v.sop(d, n)
    v.gm(d, o["tensor"])


# ---- the records ----------------------------------------------------------------------------------------------

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("nop", _nop_end_barrier, "nothing"),
    Family("end", _nop_end_barrier, "nothing; every path through a kernel must be able to reach an END (or a "
                                    "TRAP)", flow="exit"),
    Family("barrier", _nop_end_barrier, "nothing (any mask)"),
    Family("movi", _movi, "`rd` exists and has the row's dtype; the immediate word is where scalar relocations "
                          "may point"),
    Family("mov", _mov, "`rd` and `rs` exist and both have the row's dtype"),
    Family("pid", _pid_nprog, "`rd` is int32; `axis` is 0, 1 or 2"),
    Family("nprog", _pid_nprog, "`rd` is int32; `axis` is 0, 1 or 2"),
    Family("tdim", _tdim, "`rd` is int32; `tensor` names a tensor parameter; `dim` is below its rank"),
    Family("jmp", _jmp, "the target lies inside the kernel's code and starts an instruction", flow="jump"),
    Family("br", _br, "`rc` is an integer or int1 register; the target lies inside the kernel and starts an "
                      "instruction", flow="branch"),
    Family("ssel", _ssel, "`rd`, `ra`, `rb` have the row's dtype; `rc` is int1"),
    Family("scast", _scast, "`rd` has the row's dtype; `ra` exists; a bitcast needs equal sizes; `rtz` needs a "
                            "float converted to a narrower float (and no bitcast)"),
    Family("scmp", _scmp, "`rd` is int1; `ra`, `rb` have the row's dtype; `cc` is 0-5", compare=True),
    Family("sbin", _sbin, "`rd`, `ra`, `rb` have the row's dtype, which the dtype rule allows"),
    Family("sun", _sun, "`rd`, `ra` have the row's dtype, which the dtype rule allows"),
    Family("movts", _movts, "`rd` has the row's dtype; the source tile has it too and lies inside the UB "
                            "footprint"),
    Family("ldg", _ldg_stg, "`tensor` names a tensor parameter whose dtype `rd` has; `offset` is an integer "
                            "operand; the address word has a relocation to that tensor"),
    Family("stg", _ldg_stg, "`tensor` names a tensor parameter whose dtype `rs` has; `offset` is an integer "
                            "operand; the address word has a relocation to that tensor"),
    Family("print", _print, "`string` names a symbol; `kind` is 0 (none), 1 (register `reg` exists) or 2 (tile "
                            "`value` inside the UB footprint)"),
    Family("set", _set_wait, "`src` and `dst` are two different pipes 0-6"),
    Family("wait", _set_wait, "`src` and `dst` are two different pipes 0-6; some instruction of the kernel sets "
                              "the same (src, dst, event)"),
    Family("trap", _trap, "`string` names a symbol", flow="exit"),
    Family("vbin", _vbin, "three UB tiles inside the footprint, all of the row's dtype; dst's shape is the "
                          "broadcast of a's and b's"),
    Family("vbins", _vbins, "two UB tiles of the row's dtype with equal shapes; `rs` has the row's dtype"),
    Family("vcmp", _vcmp, "dst is int1, a and b have the row's dtype; dst's shape is their broadcast; `cc` is "
                          "0-5", compare=True),
    Family("vcmps", _vcmps, "dst is int1, a has the row's dtype, equal shapes; `rs` has the row's dtype; `cc` is "
                            "0-5", compare=True),
    Family("vun", _vun, "two UB tiles of the row's dtype with equal shapes"),
    Family("vsel", _vsel, "c is int1; dst, a, b have the row's dtype; dst's shape is the broadcast of c, a, b"),
    Family("vfma", _vfma, "four tiles of the row's dtype; dst's shape is the broadcast of a, b, c"),
    Family("vcast", _vcast, "dst has the row's dtype and a's shape; a bitcast needs equal element sizes; `rtz` "
                            "needs a float converted to a narrower float (and no bitcast)"),
    Family("vdup", _vdup, "dst has the row's dtype; `rs` has it too"),
    Family("l0c_fill", _l0c_fill, "dst in L0C is float32 or int32, the row's dtype; `rs` has it too"),
    Family("viota", _viota, "dst is a 1-D int32 tile; `start` is an immediate", typed=False),
    Family("vcopy", _vcopy, "same dtypes; a broadcasts to dst's shape"),
    Family("vreduce", _vreduce_vscan, "`op` < 8 and `axis` < a's rank; dst's shape drops the axis or keeps it as "
                                      "1; dst has a's dtype (int32 for argmax/argmin); xor_sum and or need "
                                      "integers or booleans"),
    Family("vscan", _vreduce_vscan, "`op` < 4 and `axis` < a's rank; dst has a's shape and dtype"),
    Family("vperm", _vperm, "`perm` is a permutation of a's axes (rank <= 4 in VPERM's 8 bits, <= 5 in VPERM5's "
                            "16); dst has the permuted shape and a's dtype"),
    Family("vslice", _vslice, "equal ranks, at most the row's number of starts (4, or 5 for VSLICE5); every "
                              "start plus dst's extent fits inside a; same dtypes"),
    Family("vtake", _vtake, "`axis` < rank; a, index and dst have one rank; index is an integer tile whose dims "
                            "off the axis are 1 or a's; dst has a's dims off the axis and index's on it, and the "
                            "row's dtype, as a has"),
    Family("vsort", _vsort, "`axis` < a's rank; dst has a's shape; both have the row's dtype"),
    Family("vhist", _vhist, "dst is a 1-D int32 tile and the row's dtype is int32; a is a 1-D integer tile; a "
                            "mask (when `masked`) is int1 of a's shape"),
    Family("vcat", _vcat, "`axis` < rank; equal ranks; a and b agree off the axis; dst's extent on the axis is "
                          "their sum"),
    Family("dma_load", _dma_load_dma_store, "`tensor` names a tensor parameter of the tile's dtype; the tile's "
                                            "rank equals the row's rank and lies inside the footprint of its "
                                            "memory space; base, strides and box bounds are integer operands; a "
                                            "register pad has the tensor's dtype; the address word has a "
                                            "relocation"),
    Family("dma_store", _dma_load_dma_store, "`tensor` names a tensor parameter of the tile's dtype; the tile's "
                                             "rank equals the row's rank; base, strides and box bounds are "
                                             "integer operands; the address word has a relocation"),
    Family("fix_store", _fix_store, "`tensor` names a tensor parameter; the L0C tile is float32 and the tensor "
                                    "float32, float16 or bfloat16, or both are int32; the tile's rank equals the "
                                    "row's rank; base, strides and box bounds are integer operands; the address "
                                    "word has a relocation"),
    Family("gather", _gather_scatter, "dst has the tensor's dtype; offsets is an integer tile of dst's shape; a "
                                      "mask (when `masked`) is int1 of that shape; a register pad has the "
                                      "tensor's dtype; the address word has a relocation"),
    Family("scatter", _gather_scatter, "src has the tensor's dtype; offsets is an integer tile of src's shape; a "
                                       "mask (when `masked`) is int1 of that shape; the address word has a "
                                       "relocation"),
    Family("atomic", _atomic, "`op` < 8; src has the tensor's dtype, offsets is an integer tile of its shape; dst "
                              "(when `want_old`), mask (when `masked`) and cmp (when `has_cmp`, only for cas) "
                              "match; bitwise ops need integers; the address word has a relocation"),
    Family("copy_space", _copy_space, "both tiles inside the footprints of their memory spaces, equal shapes "
                                      "(equal dtypes for the plain copies)"),
    Family("remote_store", _gather_scatter, "src has the tensor's dtype; offsets is an integer tile of src's shape; "
                                          "a mask (when `masked`) is int1 of that shape; `peer` is an integer "
                                          "operand; the address word has a relocation"),
    Family("signal", _signal_wait, "`tensor` names an integer tensor parameter; `op` is 0 (set) or 1 (add); offset, "
                                   "peer and value are integer operands; the address word has a relocation",
           typed=False),
    Family("wait_signal", _signal_wait, "`tensor` names an integer tensor parameter; `cc` is 0-5; offset and value "
                                        "are integer operands; the address word has a relocation", typed=False),
    Family("mmad", _mmad, "a in L0A is (M, K), b in L0B is (K, N), dst in L0C is (M, N), or all three carry "
                          "one leading batch dim B; a and b share a dtype; dst is float32 or int32"),
)}
