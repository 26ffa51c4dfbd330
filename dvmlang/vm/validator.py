"""Validation of decoded bytecode, always run before anything executes.

A single pass per kernel, in the spirit of WebAssembly's validator: every register is typed by the
kernel's register table, every tile operand names a layout and an address range inside the declared
footprint, branch targets land on instruction boundaries, every wait has a matching set, every
global-memory address is relocated to a tensor parameter of the right dtype, and the shapes each
instruction combines fit together. Failures are ``InvalidBytecodeError`` naming kernel, pc, expected
and found.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import InvalidBytecodeError
from ..ir.builder import broadcast_shapes
from . import isa
from .decode import Decoded, decode_kernel, sop_parts, tile_parts


def _nbytes(dtype, shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return max(1, n) * dtype.itemsize


class _KernelValidator:
    def __init__(self, bc, kernel, code_decoded: list[Decoded]):
        self.bc = bc
        self.k = kernel
        self.instrs = code_decoded
        self.starts = {d.pc for d in code_decoded}
        self.regs = kernel.reg_types
        self.gm_fields: dict[int, int] = {}  # word index -> tensor param expected
        self.imm_words: dict[int, dt.DType] = {}

    def fail(self, d: Decoded | None, msg, expected=None, found=None):
        where = f"kernel {self.k.name}"
        off = d.pc * 8 if d is not None else None
        name = f"{d.ins.name} at pc {d.pc}: " if d is not None else ""
        raise InvalidBytecodeError(name + msg, section=f"code ({where})", offset=off, expected=expected, found=found)

    # ---- operand checks -------------------------------------------------------------------------------
    def reg(self, d, name, want: dt.DType | str | None = None) -> dt.DType:
        r = d.vals[name]
        if r >= len(self.regs):
            self.fail(d, f"register r{r} ({name}) does not exist", f"< {len(self.regs)}", str(r))
        t = self.regs[r]
        if isinstance(want, dt.DType) and t is not want:
            self.fail(d, f"register r{r} ({name}) has type {t.name}", want.name, t.name)
        if want == "int" and not (t.is_int or t.is_bool):
            self.fail(d, f"register r{r} ({name}) must hold an integer", "an integer type", t.name)
        return t

    def sop_register_bits(self, d, name):
        """A register scalar operand uses bits 0-7 and the flag bit 31; bits 8-30 must be 0."""
        raw = d.vals[name]
        if raw & isa.SOP_REG_BIT and raw & 0x7FFFFF00:
            self.fail(d, f"scalar operand {name} names a register but sets reserved bits 8-30", "0",
                      f"{raw & 0x7FFFFF00:#x}")

    def sop(self, d, name):
        self.sop_register_bits(d, name)
        is_reg, v = sop_parts(d.vals[name])
        if is_reg:
            if v >= len(self.regs):
                self.fail(d, f"register r{v} ({name}) does not exist", f"< {len(self.regs)}", str(v))
            t = self.regs[v]
            if not (t.is_int or t.is_bool):
                self.fail(d, f"scalar operand {name} must be an integer register", "integer", t.name)

    def tile(self, d, name, space="ub"):
        addr, li = tile_parts(d.vals[name])
        if li >= len(self.bc.layouts):
            self.fail(d, f"tile operand {name} names layout {li}, which does not exist",
                      f"< {len(self.bc.layouts)}", str(li))
        dtype, shape = self.bc.layouts[li]
        end = addr + _nbytes(dtype, shape)
        cap = self.k.footprint.get(space, 0)
        if end > cap:
            self.fail(d, f"tile operand {name} [{addr}, {end}) overflows the kernel's {space.upper()} footprint",
                      f"end <= {cap}", str(end))
        return dtype, shape

    def tensor(self, d, name="tensor") -> dt.DType:
        t = d.vals[name]
        if t >= len(self.bc.params) or self.bc.params[t].kind != "tensor":
            self.fail(d, f"operand {name} names parameter {t}, which is not a tensor")
        return self.bc.params[t].dtype

    def gm(self, d, tensor_index):
        w = d.pc + _field_word(d.ins, "gm")
        self.gm_fields[w] = tensor_index

    def target(self, d):
        t = d.vals["target"]
        lo, hi = self.k.code_start, self.k.code_start + self.k.code_words
        if not lo <= t < hi:
            self.fail(d, "branch target outside the kernel's code", f"[{lo}, {hi})", str(t))
        if t not in self.starts:
            self.fail(d, "branch into the middle of an instruction", "an instruction boundary", str(t))

    def rtz(self, d, src, dst):
        """Rounding toward zero applies to a float conversion to a narrower float, never to a bitcast."""
        if d.vals["rtz"] and (d.vals["bitcast"] or not (src.is_float and dst.is_float and dst.bits < src.bits)):
            self.fail(d, "rtz rounding needs a conversion from a float to a narrower float",
                      "a narrowing float conversion", f"{src.name} -> {dst.name}")

    def same(self, d, what, a, b):
        if a != b:
            self.fail(d, what, str(b), str(a))

    # ---- the pass ---------------------------------------------------------------------------------------------
    def run(self):
        if not self.instrs:
            self.fail(None, "kernel has no code")
        last = self.instrs[-1]
        if last.ins.name not in ("END", "JMP"):
            self.fail(last, "execution can run past the end of the kernel", "END or JMP last", last.ins.name)
        sets = set()
        waits = []
        for d in self.instrs:
            if d.set is not None:
                sets.add((int(d.ins.pipe), d.set[0], d.set[1]))
            if d.wait is not None:
                waits.append((d, (d.wait[0], int(d.ins.pipe), d.wait[1])))
            if d.set is not None and d.set[0] >= isa.N_PIPES or d.wait is not None and d.wait[0] >= isa.N_PIPES:
                self.fail(d, "event names a pipe that does not exist", "0-6")
            if d.ins.family == "set":
                sets.add((d.vals["src"], d.vals["dst"], d.vals["event"]))
            if d.ins.family == "wait":
                waits.append((d, (d.vals["src"], d.vals["dst"], d.vals["event"])))
            self.check(d)
        for d, key in waits:
            if key not in sets:
                self.fail(d, "wait without a matching set", f"a set of event {key[2]} from pipe "
                          f"{key[0]} to pipe {key[1]}", "none")
        self.exits()
        return self.gm_fields, self.imm_words

    def exits(self):
        """Every instruction reachable from the entry must be able to reach END (or TRAP): a loop with no
        way out is rejected here. Loops whose exit depends on run-time values are bounded by the device's
        watchdog instead."""
        instrs = self.instrs
        index = {d.pc: i for i, d in enumerate(instrs)}
        n = len(instrs)
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[tuple[int, ...]] = []
        for i, d in enumerate(instrs):
            fam = d.ins.family
            if fam in ("end", "trap"):
                s = ()
            elif fam == "jmp":
                s = (index[d.vals["target"]],)
            elif fam == "br":
                s = (index[d.vals["target"]], i + 1)
            else:
                s = (i + 1,)
            succs.append(s)
            for j in s:
                preds[j].append(i)
        live = [False] * n
        todo = [i for i, d in enumerate(instrs) if d.ins.family in ("end", "trap")]
        for i in todo:
            live[i] = True
        while todo:
            for j in preds[todo.pop()]:
                if not live[j]:
                    live[j] = True
                    todo.append(j)
        seen = [False] * n
        seen[0] = True
        todo = [0]
        stuck = []
        while todo:
            i = todo.pop()
            if not live[i]:
                stuck.append(i)
            for j in succs[i]:
                if not seen[j]:
                    seen[j] = True
                    todo.append(j)
        if stuck:
            # report the backward jump that closes the loop (every endless path takes one)
            back = sorted(i for i in stuck if instrs[i].ins.family in ("jmp", "br") and
                          instrs[i].vals["target"] <= instrs[i].pc)
            d = instrs[back[0] if back else min(stuck)]
            head = d.vals.get("target", d.pc)
            self.fail(d, "unbounded loop: no path from here reaches END", "a path to END or TRAP",
                      f"a loop from pc {head} to pc {d.pc} with no exit")

    def check(self, d: Decoded):
        fam = d.ins.family
        v = d.vals
        ty = d.dtype
        rule = d.ins.dtypes
        if rule == "float" and not ty.is_float or rule == "int" and not ty.is_int or \
                rule == "intbool" and ty.is_float or rule == "num" and ty.is_bool and fam not in ("scmp", "vcmp", "vcmps"):
            if fam not in ("viota",):
                self.fail(d, f"{d.ins.name} is not defined on {ty.name}", rule, ty.name)
        if fam in ("nop", "end", "barrier"):
            return
        if fam == "movi":
            self.reg(d, "rd", ty)
            self.imm_words[d.pc + 1] = ty
        elif fam == "mov":
            self.reg(d, "rd", ty)
            self.reg(d, "rs", ty)
        elif fam in ("pid", "nprog"):
            self.reg(d, "rd", dt.int32)
            if v["axis"] > 2:
                self.fail(d, "grid axis out of range", "0-2", str(v["axis"]))
        elif fam == "tdim":
            self.reg(d, "rd", dt.int32)
            self.tensor(d)
            if v["dim"] >= self.bc.params[v["tensor"]].rank:
                self.fail(d, "dimension out of range for the tensor", f"< {self.bc.params[v['tensor']].rank}",
                          str(v["dim"]))
        elif fam == "jmp":
            self.target(d)
        elif fam == "br":
            self.reg(d, "rc", "int")
            self.target(d)
        elif fam == "ssel":
            self.reg(d, "rd", ty)
            self.reg(d, "ra", ty)
            self.reg(d, "rb", ty)
            self.reg(d, "rc", dt.bool_)
        elif fam == "scast":
            self.reg(d, "rd", ty)
            src = self.reg(d, "ra")
            if v["bitcast"] and src.itemsize != ty.itemsize:
                self.fail(d, "bitcast between types of different sizes")
            self.rtz(d, src, ty)
        elif fam == "scmp":
            self.reg(d, "rd", dt.bool_)
            self.reg(d, "ra", ty)
            self.reg(d, "rb", ty)
            if v["cc"] >= 6:
                self.fail(d, "unknown comparison", "0-5", str(v["cc"]))
        elif fam == "sbin":
            self.reg(d, "rd", ty)
            self.reg(d, "ra", ty)
            self.reg(d, "rb", ty)
        elif fam == "sun":
            self.reg(d, "rd", ty)
            self.reg(d, "ra", ty)
        elif fam == "movts":
            self.reg(d, "rd", ty)
            sdt, _ = self.tile(d, "src")
            self.same(d, "MOVTS source dtype", sdt, ty)
        elif fam in ("ldg", "stg"):
            tdt = self.tensor(d)
            self.reg(d, "rd" if fam == "ldg" else "rs", tdt)
            self.sop(d, "offset")
            self.gm(d, v["tensor"])
        elif fam == "print":
            if v["string"] >= len(self.bc.strings):
                self.fail(d, "print string does not exist", f"< {len(self.bc.strings)}", str(v["string"]))
            if v["kind"] == 1:
                self.reg(d, "reg")
            elif v["kind"] == 2:
                self.tile(d, "value")
            elif v["kind"] != 0:
                self.fail(d, "unknown print operand kind", "0-2", str(v["kind"]))
        elif fam in ("set", "wait"):
            if v["src"] >= isa.N_PIPES or v["dst"] >= isa.N_PIPES or v["src"] == v["dst"]:
                self.fail(d, "event between invalid pipes", "two different pipes 0-6", f"{v['src']}->{v['dst']}")
        elif fam == "trap":
            if v["string"] >= len(self.bc.strings):
                self.fail(d, "trap message does not exist")
        elif fam == "vbin":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            bd, bs = self.tile(d, "b")
            for x in (dd, ad, bd):
                self.same(d, "operand dtype", x, ty)
            self.same(d, "result shape", ds, broadcast_shapes(as_, bs))
        elif fam == "vbins":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.reg(d, "rs", ty)
            self.same(d, "operand dtype", dd, ty)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "result shape", ds, as_)
        elif fam == "vcmp":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            bd, bs = self.tile(d, "b")
            self.same(d, "result dtype", dd, dt.bool_)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "operand dtype", bd, ty)
            self.same(d, "result shape", ds, broadcast_shapes(as_, bs))
            if v["cc"] >= 6:
                self.fail(d, "unknown comparison", "0-5", str(v["cc"]))
        elif fam == "vcmps":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.reg(d, "rs", ty)
            self.same(d, "result dtype", dd, dt.bool_)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "result shape", ds, as_)
            if v["cc"] >= 6:
                self.fail(d, "unknown comparison", "0-5", str(v["cc"]))
        elif fam == "vun":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.same(d, "operand dtype", dd, ty)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "result shape", ds, as_)
        elif fam == "vsel":
            dd, ds = self.tile(d, "dst")
            cd, cs = self.tile(d, "c")
            ad, as_ = self.tile(d, "a")
            bd, bs = self.tile(d, "b")
            self.same(d, "condition dtype", cd, dt.bool_)
            for x in (dd, ad, bd):
                self.same(d, "operand dtype", x, ty)
            s = broadcast_shapes(cs, as_)
            s = broadcast_shapes(s, bs) if s is not None else None
            self.same(d, "result shape", ds, s)
        elif fam == "vfma":
            dd, ds = self.tile(d, "dst")
            s = ()
            for n in ("a", "b", "c"):
                x, xs = self.tile(d, n)
                self.same(d, "operand dtype", x, ty)
                s = broadcast_shapes(s, xs) if s is not None else None
            self.same(d, "operand dtype", dd, ty)
            self.same(d, "result shape", ds, s)
        elif fam == "vcast":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.same(d, "result dtype", dd, ty)
            self.same(d, "result shape", ds, as_)
            if v["bitcast"] and dd.itemsize != ad.itemsize:
                self.fail(d, "bitcast between types of different sizes")
            self.rtz(d, ad, dd)
        elif fam == "vdup":
            dd, _ = self.tile(d, "dst")
            self.same(d, "result dtype", dd, ty)
            self.reg(d, "rs", ty)
        elif fam == "viota":
            dd, ds = self.tile(d, "dst")
            self.same(d, "result dtype", dd, dt.int32)
            if len(ds) != 1:
                self.fail(d, "VIOTA writes a 1-D tile", "rank 1", str(len(ds)))
            is_reg, _ = sop_parts(v["start"])
            if is_reg:
                self.fail(d, "VIOTA start must be an immediate")
        elif fam == "vcopy":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.same(d, "operand dtype", ad, dd)
            if broadcast_shapes(as_, ds) != ds:
                self.fail(d, "source does not broadcast to the destination", str(ds), str(as_))
        elif fam in ("vreduce", "vscan"):
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            n_ops = len(isa.REDUCE_OPS) if fam == "vreduce" else len(isa.SCAN_OPS)
            if v["op"] >= n_ops:
                self.fail(d, "unknown reduction", f"< {n_ops}", str(v["op"]))
            ax = v["axis"]
            if ax >= len(as_):
                self.fail(d, "axis out of range", f"< {len(as_)}", str(ax))
            if fam == "vscan":
                self.same(d, "result shape", ds, as_)
                self.same(d, "result dtype", dd, ad)
            else:
                keep = as_[:ax] + (1,) + as_[ax + 1:]
                drop = as_[:ax] + as_[ax + 1:]
                if ds not in (keep, drop):
                    self.fail(d, "reduction result shape", f"{drop} or {keep}", str(ds))
                op = isa.REDUCE_OPS[v["op"]]
                if op in ("argmax", "argmin"):
                    self.same(d, "result dtype", dd, dt.int32)
                else:
                    self.same(d, "result dtype", dd, ad)
                if op in ("xor_sum", "or") and ad.is_float:
                    self.fail(d, f"{op} needs integers or booleans")
        elif fam == "vperm":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            r = len(as_)
            perm = tuple((v["perm"] >> (2 * i)) & 3 for i in range(r))
            if r > 4 or sorted(perm) != list(range(r)):
                self.fail(d, "invalid permutation", f"a permutation of {r} axes", str(perm))
            self.same(d, "result shape", ds, tuple(as_[p] for p in perm))
            self.same(d, "result dtype", dd, ad)
        elif fam == "vslice":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            if len(ds) != len(as_) or len(as_) > 4:
                self.fail(d, "slice rank mismatch")
            for i, (n, m) in enumerate(zip(ds, as_)):
                if v[f"s{i}"] + n > m:
                    self.fail(d, "slice outside the source", f"<= {m}", str(v[f's{i}'] + n))
            self.same(d, "result dtype", dd, ad)
        elif fam == "vtake":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            idd, is_ = self.tile(d, "index")
            ax = v["axis"]
            if not idd.is_int:
                self.fail(d, "VTAKE index must be an integer tile", "an integer dtype", idd.name)
            if len(as_) != len(is_) or len(ds) != len(as_) or ax >= len(as_):
                self.fail(d, "VTAKE ranks or axis out of range")
            want = tuple(is_[i] if i == ax else as_[i] for i in range(len(as_)))
            if any(is_[i] not in (1, as_[i]) for i in range(len(as_)) if i != ax):
                self.fail(d, "VTAKE index dims off the axis must be 1 or the source's", str(as_), str(is_))
            self.same(d, "result shape", ds, want)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "operand dtype", dd, ty)
        elif fam == "vsort":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            if v["axis"] >= len(as_):
                self.fail(d, "axis out of range", f"< {len(as_)}", str(v["axis"]))
            self.same(d, "result shape", ds, as_)
            self.same(d, "operand dtype", ad, ty)
            self.same(d, "operand dtype", dd, ty)
        elif fam == "vhist":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            self.same(d, "result dtype", dd, dt.int32)
            self.same(d, "row dtype", ty, dt.int32)
            if len(ds) != 1 or len(as_) != 1 or not ad.is_int:
                self.fail(d, "VHIST counts a 1-D integer tile into a 1-D tile", "1-D", f"{as_} {ad.name} -> {ds}")
            if v["masked"]:
                md, ms = self.tile(d, "mask")
                self.same(d, "mask dtype", md, dt.bool_)
                self.same(d, "mask shape", ms, as_)
        elif fam == "vcat":
            dd, ds = self.tile(d, "dst")
            ad, as_ = self.tile(d, "a")
            bd, bs = self.tile(d, "b")
            ax = v["axis"]
            if ax >= len(as_) or len(as_) != len(bs) or len(ds) != len(as_):
                self.fail(d, "concatenation axis or ranks out of range")
            want = list(as_)
            want[ax] += bs[ax]
            if any(as_[i] != bs[i] for i in range(len(as_)) if i != ax):
                self.fail(d, "concatenated shapes differ outside the axis")
            self.same(d, "result shape", ds, tuple(want))
            self.same(d, "operand dtype", ad, dd)
            self.same(d, "operand dtype", bd, dd)
        elif fam in ("dma_load", "dma_store"):
            rank = d.ins.extra["rank"]
            space = d.ins.extra.get("space", "ub")
            tdt = self.tensor(d)
            ld, ls = self.tile(d, "dst" if fam == "dma_load" else "src", space)
            if len(ls) != rank:
                self.fail(d, "tile rank does not match the DMA rank", str(rank), str(len(ls)))
            self.same(d, "tile dtype", ld, tdt)
            self.sop(d, "base")
            for i in range(rank):
                for n in (f"stride{i}", f"lo{i}", f"hi{i}"):
                    self.sop(d, n)
            if fam == "dma_load":
                self.sop_register_bits(d, "pad")
                is_reg, r = sop_parts(v["pad"])
                if is_reg:
                    if r >= len(self.regs) or self.regs[r] is not tdt:
                        self.fail(d, "pad register must hold the tensor's dtype", tdt.name,
                                  self.regs[r].name if r < len(self.regs) else f"r{r}")
            self.gm(d, v["tensor"])
        elif fam in ("gather", "scatter"):
            tdt = self.tensor(d)
            main = "dst" if fam == "gather" else "src"
            md, ms = self.tile(d, main)
            od, os_ = self.tile(d, "offsets")
            self.same(d, "tile dtype", md, tdt)
            if not od.is_int:
                self.fail(d, "offsets must be integers", "an integer dtype", od.name)
            self.same(d, "offsets shape", os_, ms)
            if v["masked"]:
                kd, ks = self.tile(d, "mask")
                self.same(d, "mask dtype", kd, dt.bool_)
                self.same(d, "mask shape", ks, ms)
            if fam == "gather":
                self.sop_register_bits(d, "pad")
                is_reg, r = sop_parts(v["pad"])
                if is_reg and (r >= len(self.regs) or self.regs[r] is not tdt):
                    self.fail(d, "pad register must hold the tensor's dtype")
            self.gm(d, v["tensor"])
        elif fam == "atomic":
            tdt = self.tensor(d)
            if v["op"] >= len(isa.ATOMIC_OPS):
                self.fail(d, "unknown atomic op", f"< {len(isa.ATOMIC_OPS)}", str(v["op"]))
            sd, ss = self.tile(d, "src")
            od, os_ = self.tile(d, "offsets")
            self.same(d, "value dtype", sd, tdt)
            if not od.is_int:
                self.fail(d, "offsets must be integers")
            self.same(d, "offsets shape", os_, ss)
            if v["want_old"]:
                dd, ds = self.tile(d, "dst")
                self.same(d, "result dtype", dd, tdt)
                self.same(d, "result shape", ds, ss)
            if v["masked"]:
                kd, ks = self.tile(d, "mask")
                self.same(d, "mask dtype", kd, dt.bool_)
                self.same(d, "mask shape", ks, ss)
            if v["has_cmp"]:
                cd, cs = self.tile(d, "cmp")
                self.same(d, "compare dtype", cd, tdt)
                self.same(d, "compare shape", cs, ss)
            op = isa.ATOMIC_OPS[v["op"]]
            if (op == "cas") != bool(v["has_cmp"]):
                self.fail(d, "only atomic cas takes a compare operand")
            if op in ("and", "or", "xor") and tdt.is_float:
                self.fail(d, f"atomic {op} needs integers")
            self.gm(d, v["tensor"])
        elif fam == "copy_space":
            dst_space, src_space = d.ins.extra["spaces"]
            dd, ds = self.tile(d, "dst", dst_space)
            sd, ss = self.tile(d, "src", src_space)
            self.same(d, "shape", ds, ss)
            if d.ins.name not in ("FIX_L0C_TO_UB", "UB_TO_L0C"):
                self.same(d, "dtype", dd, sd)
        elif fam == "mmad":
            dd, ds = self.tile(d, "dst", "l0c")
            ad, as_ = self.tile(d, "a", "l0a")
            bd, bs = self.tile(d, "b", "l0b")
            if len(as_) != 2 or len(bs) != 2 or as_[1] != bs[0] or ds != (as_[0], bs[1]):
                self.fail(d, "matrix shapes do not chain", "(M,K) @ (K,N) -> (M,N)", f"{as_} @ {bs} -> {ds}")
            self.same(d, "operand dtype", ad, bd)
            if dd not in (dt.float32, dt.int32):
                self.fail(d, "L0C accumulates in float32 or int32", "float32/int32", dd.name)
        else:  # pragma: no cover - every family in the table is handled above
            self.fail(d, f"no validation rule for family {fam}")


def _field_word(ins, name) -> int:
    for f, (w, _) in zip(ins.fields, ins.layout):
        if f.name == name:
            return 0 if f.head else w
    raise KeyError(name)


def validate(bc) -> list[list[Decoded]]:
    """Validate every kernel of ``bc``; return the decoded instructions per kernel."""
    out = []
    n = len(bc.code)
    gm_words: dict[int, int] = {}
    imm_words: dict[int, dt.DType] = {}
    target = bc.target
    caps = {"ub": target.ub_bytes, "l1": target.l1_bytes, "l0a": target.l0a_bytes, "l0b": target.l0b_bytes,
            "l0c": target.l0c_bytes}
    for k in bc.kernels:
        if k.code_start + k.code_words > n or k.code_words == 0:
            raise InvalidBytecodeError(f"kernel {k.name}: code range outside the code section", section="kernels",
                                       expected=f"within {n} words", found=f"[{k.code_start}, "
                                                                           f"{k.code_start + k.code_words})")
        for space, need in k.footprint.items():
            bank = 2 * need if (k.double_buffer and space == "ub") else need
            if bank > caps[space]:
                raise InvalidBytecodeError(f"kernel {k.name}: {space.upper()} footprint exceeds the target",
                                           section="kernels", expected=f"<= {caps[space]}", found=str(bank))
        if any(g < 1 for g in k.grid):
            raise InvalidBytecodeError(f"kernel {k.name}: grid dimensions must be at least 1", section="kernels",
                                       found=str(k.grid))
        decoded = decode_kernel(bc.code, k.code_start, k.code_words)
        kv = _KernelValidator(bc, k, decoded)
        g, im = kv.run()
        gm_words.update(g)
        imm_words.update(im)
        out.append(decoded)
    seen = set()
    for w, kind, p in bc.relocs:
        if w >= n:
            raise InvalidBytecodeError("relocation outside the code", section="relocs", expected=f"< {n}", found=str(w))
        if p >= len(bc.params):
            raise InvalidBytecodeError("relocation names a parameter that does not exist", section="relocs",
                                       expected=f"< {len(bc.params)}", found=str(p))
        if kind == 0:
            if gm_words.get(w) != p:
                raise InvalidBytecodeError("relocation does not patch the address operand of an access to that "
                                           "tensor", section="relocs", offset=w * 8,
                                           expected=f"tensor {gm_words.get(w)}", found=f"tensor {p}")
        elif kind == 1:
            prm = bc.params[p]
            if prm.kind != "scalar" or imm_words.get(w) is not prm.dtype:
                raise InvalidBytecodeError("scalar binding does not patch a MOVI of the parameter's dtype",
                                           section="relocs", offset=w * 8)
        else:
            raise InvalidBytecodeError("unknown relocation kind", section="relocs", expected="0 or 1", found=str(kind))
        if (w, kind) in seen:
            raise InvalidBytecodeError("duplicate relocation", section="relocs", offset=w * 8)
        seen.add((w, kind))
    missing = set(gm_words) - {w for w, kind, _ in bc.relocs if kind == 0}
    if missing:
        w = min(missing)
        raise InvalidBytecodeError("global-memory address without a relocation", section="relocs", offset=w * 8,
                                   expected="a relocation entry", found="none")
    return out
