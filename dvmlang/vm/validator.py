"""Validation of decoded bytecode, always run before anything executes.

A single pass per kernel, in the spirit of WebAssembly's validator: every register is typed by the
kernel's register table, every tile operand names a layout and an address range inside the declared
footprint, branch targets land on instruction boundaries, every wait has a matching set, every
global-memory address is relocated to a tensor parameter of the right dtype, and the shapes each
instruction combines fit together. This module is the pass (kernel ranges, events, reachability of END,
relocations); the typing rule of each instruction family is its record in ``families.py``. Failures are
``InvalidBytecodeError`` naming kernel, pc, expected and found.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import InvalidBytecodeError
from . import isa
from .decode import Decoded, decode_kernel, sop_parts, tile_parts
from .families import FAMILIES


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
        """A register scalar operand uses bits 0-7 and the flag bit (31, or 15 in a ``sop16``); the bits
        between must be 0."""
        raw = d.vals[name]
        bits, reg_bit, _, _ = isa.SOP_FORMS[d.ins.kinds[name]]
        reserved = (reg_bit - 1) & ~0xFF
        if raw & reg_bit and raw & reserved:
            self.fail(d, f"scalar operand {name} names a register but sets reserved bits 8-{bits - 2}", "0",
                      f"{raw & reserved:#x}")

    def sop(self, d, name):
        self.sop_register_bits(d, name)
        is_reg, v = sop_parts(d.vals[name], d.ins.kinds[name])
        if is_reg:
            if v >= len(self.regs):
                self.fail(d, f"register r{v} ({name}) does not exist", f"< {len(self.regs)}", str(v))
            t = self.regs[v]
            if not (t.is_int or t.is_bool):
                self.fail(d, f"scalar operand {name} must be an integer register", "integer", t.name)

    def tile(self, d, name):
        """A tile operand's layout (dtype, shape), inside the footprint of the space its field declares."""
        space = d.ins.spaces[name]
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
            flow = FAMILIES[d.ins.family].flow
            if flow == "exit":
                s = ()
            elif flow == "jump":
                s = (index[d.vals["target"]],)
            elif flow == "branch":
                s = (index[d.vals["target"]], i + 1)
            else:
                s = (i + 1,)
            succs.append(s)
            for j in s:
                preds[j].append(i)
        live = [False] * n
        todo = [i for i, d in enumerate(instrs) if FAMILIES[d.ins.family].flow == "exit"]
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
            back = sorted(i for i in stuck if FAMILIES[instrs[i].ins.family].flow in ("jump", "branch") and
                          instrs[i].vals["target"] <= instrs[i].pc)
            d = instrs[back[0] if back else min(stuck)]
            head = d.vals.get("target", d.pc)
            self.fail(d, "unbounded loop: no path from here reaches END", "a path to END or TRAP",
                      f"a loop from pc {head} to pc {d.pc} with no exit")

    def check(self, d: Decoded):
        """The row's dtype rule, then its family's typing rule (``families.FAMILIES``)."""
        fam = FAMILIES[d.ins.family]
        ty, rule = d.dtype, d.ins.dtypes
        if fam.typed and (rule == "float" and not ty.is_float or rule == "int" and not ty.is_int or
                          rule == "intbool" and ty.is_float or rule == "num" and ty.is_bool and not fam.compare):
            self.fail(d, f"{d.ins.name} is not defined on {ty.name}", rule, ty.name)
        fam.rule(self, d)


def _field_word(ins, name) -> int:
    for f, (w, _) in zip(ins.fields, ins.layout):
        if f.name == name:
            return 0 if f.head else w
    raise KeyError(name)


def validate(bc) -> list[list[Decoded]]:
    """Validate every kernel of ``bc``; return the decoded instructions per kernel.

    The verdict on the code is cached (``_VERDICTS``) under everything it reads (``_verdict_key``), with the
    words the relocation table patches masked out: an instance of the same build with other shapes or
    scalars is then not decoded again. Only the checks outside that key (footprints against the target,
    the grid) run again; a key that differs in any byte the verdict reads is validated afresh, so damaged
    bytes meet the same checks, in the same order, as without the cache."""
    key = _verdict_key(bc)
    hit = _VERDICTS.get(key) if key is not None else None
    if hit is None:
        out = _validate(bc)
        if key is not None:
            entry = _verdict_entry(bc, out)
            if entry is not None:
                if len(_VERDICTS) >= _MAX_VERDICTS:
                    _VERDICTS.clear()  # (one call: safe against another thread reading at the same time)
                _VERDICTS[key] = entry
        return out
    for k in bc.kernels:  # the key holds the code ranges; not the target and the grid
        _check_kernel_meta(bc.target, k)
    decoded, patches = hit
    if not patches:
        return decoded
    code = bc.code
    out = list(decoded)
    copied = set()
    for ki, i, name, w, shift, mask in patches:
        if ki not in copied:
            out[ki] = list(out[ki])
            copied.add(ki)
        d = out[ki][i]
        vals = dict(d.vals)
        vals[name] = (code[w] >> shift) & mask
        out[ki][i] = Decoded(d.pc, d.ins, vals, d.dtype, d.set, d.wait, d.head)
    return out


def _check_kernel_meta(target, k):
    caps = {"ub": target.ub_bytes, "l1": target.l1_bytes, "l0a": target.l0a_bytes, "l0b": target.l0b_bytes,
            "l0c": target.l0c_bytes}
    for space, need in k.footprint.items():
        bank = 2 * need if (k.double_buffer and space == "ub") else need
        if bank > caps[space]:
            raise InvalidBytecodeError(f"kernel {k.name}: {space.upper()} footprint exceeds the target",
                                       section="kernels", expected=f"<= {caps[space]}", found=str(bank))
    if any(g < 1 for g in k.grid):
        raise InvalidBytecodeError(f"kernel {k.name}: grid dimensions must be at least 1", section="kernels",
                                   found=str(k.grid))


# ---- the verdict cache -------------------------------------------------------------------------------------
# A field of one of these kinds fills its operand word (64 bits) and no typing rule reads its value: the word
# may hold anything. Relocations patch exactly such words (an address, a scalar parameter's bits), so two
# containers that differ only there get the same verdict, and the same decoding but for those values.
FREE_KINDS = ("gm", "imm64")
_FREE = {ins.opcode: tuple((name, w, shift, mask) for name, w, shift, mask in ins.packing
                           if w and ins.kinds[name] in FREE_KINDS and shift == 0 and mask == (1 << 64) - 1)
         for ins in isa.TABLE}
_VERDICTS: dict = {}
_MAX_VERDICTS = 256


def _verdict_key(bc):
    """Everything the code's verdict depends on, with relocated words zeroed; None when the relocation
    table names a word outside the code (that container is refused, and never cached)."""
    code = bc.code
    n = len(code)
    words = {w for w, _, _ in bc.relocs}
    if words and max(words) >= n:
        return None
    masked = code.__copy__()
    for w in words:
        masked[w] = 0
    kernels = tuple((k.code_start, k.code_words, tuple(k.reg_types), tuple(k.footprint.items())) for k in bc.kernels)
    params = tuple((p.kind, p.dtype, p.rank) for p in bc.params)
    return (masked.tobytes(), kernels, tuple(bc.layouts), params, len(bc.strings), tuple(bc.relocs))


def _verdict_entry(bc, decoded):
    """(decoded, patches) for a validated container: ``patches`` says where each relocated word's value
    sits in the decoding (kernel, instruction, field, word, shift, mask). None, and no caching, unless
    every relocated word is a free operand word (``FREE_KINDS``) in every kernel whose range holds it."""
    words = {w for w, _, _ in bc.relocs}
    patches = []
    for ki, (k, instrs) in enumerate(zip(bc.kernels, decoded)):
        free = set()
        for i, d in enumerate(instrs):
            for name, w, shift, mask in _FREE[d.ins.opcode]:
                if d.pc + w in words:
                    free.add(d.pc + w)
                    patches.append((ki, i, name, d.pc + w, shift, mask))
        inside = {w for w in words if k.code_start <= w < k.code_start + k.code_words}
        if inside - free:
            return None
    return decoded, tuple(patches)


def _validate(bc) -> list[list[Decoded]]:
    out = []
    n = len(bc.code)
    gm_words: dict[int, int] = {}
    imm_words: dict[int, dt.DType] = {}
    for k in bc.kernels:
        if k.code_start + k.code_words > n or k.code_words == 0:
            raise InvalidBytecodeError(f"kernel {k.name}: code range outside the code section", section="kernels",
                                       expected=f"within {n} words", found=f"[{k.code_start}, "
                                                                           f"{k.code_start + k.code_words})")
        _check_kernel_meta(bc.target, k)
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
