"""Differential generator of bytecode programs, built field by field from the ISA table.

Every program is a random instruction sequence: each instruction is a row of ``dvmlang.vm.isa.TABLE``
whose fields are filled from their kinds and names — registers of the dtype the row wants, tiles naming
layouts of the right dtype and shape at 32-byte aligned addresses inside the footprint, tensors of the
right dtype and rank, branch targets on instruction boundaries (backward ones make loops), waits matching
earlier sets, counted loops whose trip count differs between programs (so batches split) — and a
controlled fraction of fields (``BAD``) get an arbitrary value of their width. The
program is wrapped in a container (``Bytecode(...).serialise()``) and checked:

* ``Bytecode.from_bytes`` accepts it or raises a ``BytecodeError``, nothing else;
* an accepted program re-serialises to the same bytes, and both disassemblers list it without error;
* it runs on the device to completion or raises a documented ``DeviceError`` (a memory fault, the
  watchdog, a trap) — never another exception, and never for long: the device's watchdog budget per
  program is small;
* the batched device compiled and step by step give the same outputs, cycles and fault (the same message);
* the batched and the one-program-at-a-time device both complete or both fault; a run that completes gives
  the same outputs and cycles on both (programs that wait on each other's atomics excepted: how often they
  spin depends on which programs run together), and a tensor no instruction stores to is never modified (a
  faulted run included).

The tests in tests/test_fuzz_bytecode.py mutate real programs' bytes; this one reaches instruction mixes
the compiler never emits. ``DVMLANG_FUZZ_SCALE`` (tests/fuzzing.py) runs it longer.
"""

from __future__ import annotations

import io
import random
from array import array

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from rich.console import Console

import dvmlang
from dvmlang import dtypes as dt
from dvmlang.npu import Device
from dvmlang.trace.views import render
from dvmlang.vm import container as C
from dvmlang.vm import isa
from dvmlang.vm.bytecode import scalar_bits
from dvmlang.vm.dump import disassemble_bytes
from dvmlang.vm.lower import encode_into
from fuzzing import budget
from test_bytecode_samples import small_args

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning", "ignore::dvmlang.DvmWarning")

BAD = 0.02  # the fraction of fields given an arbitrary value of their width
WATCHDOG = 1500  # the instruction budget per program: a generated loop that does not end stops quickly
DTYPES = (dt.float32, dt.float16, dt.int32, dt.bool_)
SHAPES = ((64,), (16,), (8,), (1,), (8, 8), (1, 8), (8, 1), (2, 4, 8), (2, 2, 2, 8), (2, 2, 2, 2, 4))
DMA_SHAPES = {1: (64,), 2: (8, 8), 3: (2, 4, 8), 4: (2, 2, 2, 8), 5: (2, 2, 2, 2, 4)}  # a DMA row's tile, by rank
LAYOUTS = [(d, s) for d in DTYPES for s in SHAPES]
FOOTPRINT = 4096  # bytes of every on-chip space (UB, L1, L0A/B/C): 16 tiles of 256 bytes, overlapping at will
SLOT = 256  # the largest tile (64 elements of float32)
TARGET = C.TargetInfo("910B2-like", 48, 24, 192 << 10, 512 << 10, 64 << 10, 64 << 10, 128 << 10)
EDGES = (0, -1, 63, 64, 65, 1 << 30, -(1 << 30), (1 << 31) - 1, -(1 << 31), 1 << 40, -(1 << 62))  # immediates
STRINGS = ["k", "x", "y", "n", "message {}", "gen.py"]
STORES = ("dma_store", "fix_store", "scatter", "atomic", "stg")  # the families that write global memory
RANDOM_TARGET = object()  # a branch to any instruction of the program, drawn once its length is known
OPS = {"vreduce": len(isa.REDUCE_OPS), "vscan": len(isa.SCAN_OPS), "atomic": len(isa.ATOMIC_OPS)}
ROW_DTYPES = {"float": (dt.float32, dt.float16), "int": (dt.int32,), "intbool": (dt.int32, dt.bool_),
              "num": (dt.float32, dt.float16, dt.int32), "any": DTYPES, "none": (None,)}


class Program:
    """Builds one program from ``draw(lo, hi)`` (an integer in [lo, hi]; hypothesis or ``random``)."""

    def __init__(self, draw):
        self.draw = draw
        self.params = [C.ParamInfo("tensor", "x", self.pick(DTYPES), 1, (64,), (1,)),
                       C.ParamInfo("tensor", "y", self.pick(DTYPES), 2, (8, 8), (8, 1)),
                       C.ParamInfo("scalar", "n", dt.int32)]
        self.regs = [dt.int32] * 4 + [dt.float32, dt.float32, dt.bool_, dt.bool_, dt.float16, dt.float16]
        self.loop_regs = len(self.regs)  # counter, limit, one (int32) and condition (int1) of counted loops
        self.regs += [dt.int32, dt.int32, dt.int32, dt.bool_]
        self.sets: list[tuple[int, int, int]] = []  # (source pipe, target pipe, event) set so far

    # ---- drawing -----------------------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.draw(0, 999) < p * 1000

    def pick(self, options):
        return options[self.draw(0, len(options) - 1)]

    def reg(self, want):
        """A register of dtype ``want`` (any register when ``want`` is None or no register has it)."""
        free = self.regs[:self.loop_regs]  # random instructions leave the counted loops' registers alone
        fits = [i for i, d in enumerate(free) if want is None or d is want]
        return self.pick(fits or list(range(len(free))))

    def tile(self, dtype, shape) -> int:
        """A tile field naming a layout of ``dtype`` and ``shape`` at an aligned address inside the footprint."""
        want = [i for i, (d, s) in enumerate(LAYOUTS) if (dtype is None or d is dtype) and s == shape]
        li = self.pick(want or list(range(len(LAYOUTS))))
        d, s = LAYOUTS[li]
        nbytes = int(np.prod(s)) * d.itemsize
        if self.chance(0.8):  # one of 16 slots of 256 bytes: instructions read what earlier ones wrote
            return (self.draw(0, FOOTPRINT // SLOT - 1) * SLOT // isa.TILE_ADDR_UNIT) | (li << 16)
        return self.draw(0, (FOOTPRINT - max(nbytes, 32)) // isa.TILE_ADDR_UNIT) | (li << 16)

    def sop(self, lo=-2, hi=70, register=True, kind="sop") -> int:
        """A scalar operand of ``kind`` (``sop`` or ``sop16``): an int32 register, or (always, without
        ``register``) a small immediate."""
        bits, reg_bit, _, _ = isa.SOP_FORMS[kind]
        if register and self.chance(0.2):
            return reg_bit | self.reg(dt.int32)
        if self.chance(0.05):
            return self.pick(EDGES) & (reg_bit - 1)
        return self.draw(lo, hi) & (reg_bit - 1)

    # ---- one instruction -------------------------------------------------------------------------------------------
    def instruction(self):
        """(row, field values, dtype, set, wait, target) of one random instruction; a branch's target is
        ``RANDOM_TARGET`` (any instruction of the finished program) or an instruction's ordinal."""
        ins = self.pick(isa.TABLE)
        ty = self.pick(ROW_DTYPES[ins.dtypes])
        fam = ins.family
        rank = ins.extra.get("rank", self.draw(1, 3))
        tensor = rank - 1 if fam.startswith("dma") and rank < 3 else self.draw(0, 1)  # x is 1-D, y 2-D
        tdt, trank = self.params[tensor].dtype, self.params[tensor].rank
        if fam.startswith("dma"):
            shape = DMA_SHAPES[rank]
        else:
            shape = (8,) if fam == "vcat" else self.pick(SHAPES)  # VCAT joins two (8,) tiles into a (16,) one
        axis = self.draw(0, len(shape) - 1)
        op = self.draw(0, OPS.get(fam, 16) - 1)
        vals, target = {}, None
        for f in ins.fields:
            vals[f.name] = self.field(ins, f, ty, tensor, tdt, trank, shape, axis, op)
            if f.kind == "target":
                target = RANDOM_TARGET
        if fam == "atomic":
            vals["has_cmp"] = int(isa.ATOMIC_OPS[op] == "cas") if not self.chance(BAD) else vals["has_cmp"]
        if fam in ("set", "wait") and vals["src"] == vals["dst"] and not self.chance(BAD):
            vals["dst"] = (vals["src"] + self.draw(1, isa.N_PIPES - 1)) % isa.N_PIPES  # two different pipes
        if fam == "wait" and self.sets and not self.chance(BAD):
            vals["src"], vals["dst"], vals["event"] = self.pick(self.sets)
        if fam == "set":
            self.sets.append((vals["src"], vals["dst"], vals["event"]))
        set_ = wait = None
        if self.chance(0.1):
            set_ = (self.draw(0, isa.N_PIPES - 1), self.draw(0, isa.N_EVENTS - 1))
            self.sets.append((int(ins.pipe), *set_))
        mine = [(s, e) for s, d, e in self.sets if d == int(ins.pipe)]
        if mine and self.chance(0.2):
            wait = self.pick(mine)
        if self.chance(BAD):
            ty = dt.BY_CODE.get(self.draw(0, 15), ty)  # a dtype the row may not take
        return ins, vals, ty, set_, wait, target

    def field(self, ins, f, ty, tensor, tdt, trank, shape, axis, op) -> int:
        """The value of field ``f``: mostly what the row's rule wants, sometimes (``BAD``) anything."""
        if self.chance(BAD):
            return self.draw(0, (1 << f.bits) - 1)
        fam, name, k = ins.family, f.name, f.kind
        if k == "reg":
            if fam in ("ldg", "stg"):
                return self.reg(tdt)
            if fam in ("pid", "nprog", "tdim") or (fam == "br" and self.chance(0.5)):
                return self.reg(dt.int32)
            if (fam == "ssel" and name == "rc") or (fam == "scmp" and name == "rd") or fam == "br":
                return self.reg(dt.bool_)
            return self.reg(None if fam in ("scast", "print") and name != "rd" else ty)
        if k == "tile":
            return self.tile(*self.tile_want(ins, name, ty, tdt, shape, axis, op))
        if k in ("sop", "sop16"):
            if fam == "viota" or name == "pad":
                return self.sop(0, 10, register=False)
            return self.descriptor(name, tensor, shape, k) if fam in ("dma_load", "dma_store") else self.sop()
        if k == "imm64":
            return _bits(self.pick(EDGES) if self.chance(0.15) else self.draw(-3, 12), ty)
        if k in ("gm", "target"):
            return 0  # relocated / resolved once the layout of the code is known
        if k == "cc":
            return self.draw(0, 5)
        if k == "pipe":
            return self.draw(0, isa.N_PIPES - 1)
        if k == "event":
            return self.draw(0, isa.N_EVENTS - 1)
        if name == "perm":  # VPERM (2 bits per axis) and VPERM5 (3 bits)
            perm = list(range(len(shape)))
            random.Random(self.draw(0, 99)).shuffle(perm)
            bits = ins.extra["perm_bits"]
            return sum(p << (bits * i) for i, p in enumerate(perm)) & ((1 << f.bits) - 1)
        if k == "flag":
            return int(self.chance(0.1)) if name in ("rtz", "bitcast") else self.draw(0, 1)
        if name == "tensor":
            return tensor
        if name == "string":
            return self.draw(0, len(STRINGS) - 1)
        if name == "op":
            return op
        if name == "axis":
            return axis if fam not in ("pid", "nprog") else self.draw(0, 2)
        if name == "dim":
            return self.draw(0, trank - 1)
        if name == "kind":
            return self.draw(0, 2)
        if name.startswith("s") and name[1:].isdigit():  # VSLICE starts
            return self.draw(0, 2)
        return self.draw(0, min(255, (1 << f.bits) - 1))

    def descriptor(self, name: str, tensor: int, shape, kind="sop") -> int:
        """A DMA descriptor operand: mostly the box that moves the whole tile to the tensor's first elements."""
        if self.chance(0.3):
            return self.sop(kind=kind)
        d = int(name[-1]) if name[-1].isdigit() else 0
        if name == "base":
            return self.draw(0, 2)
        if name.startswith("stride"):
            return int(np.prod(shape[d + 1:]))
        return 0 if name.startswith("lo") else shape[d] if d < len(shape) else 1

    def tile_want(self, ins, name, ty, tdt, shape, axis, op):
        """(dtype, shape) a tile field of ``ins`` should name for the row's rule to hold (None: any)."""
        fam = ins.family
        if fam in ("dma_load", "dma_store", "gather", "scatter", "atomic"):
            if name in ("offsets",):
                return dt.int32, shape
            if name == "mask":
                return dt.bool_, shape
            return tdt, shape
        if fam == "mmad":
            return (dt.float32 if name == "dst" else dt.float16), (8, 8)
        if fam in ("vcmp", "vcmps") and name == "dst" or fam in ("vsel", "vhist") and name in ("c", "mask"):
            return dt.bool_, shape
        if fam == "vhist":
            return dt.int32, (64,) if name == "a" else (8,)
        if fam == "vcat":
            return ty, (16,) if name == "dst" else (8,)
        if fam == "vreduce" and name == "dst":
            kept = shape[:axis] + ((1,) if self.chance(0.5) else ()) + shape[axis + 1:]
            return (dt.int32 if isa.REDUCE_OPS[op] in ("argmax", "argmin") else ty), kept or (1,)
        if fam in ("vtake",) and name == "index":
            return dt.int32, shape
        if fam == "viota":
            return dt.int32, (64,)
        if fam in ("vcast", "print"):
            return (ty if name == "dst" else None), shape
        return ty, shape

    # ---- the container -------------------------------------------------------------------------------------------
    def counted_loop(self, at: int) -> list:
        """The instructions of ``for c in range(pid + 1): <1-4 random instructions>`` starting at ordinal
        ``at``: a loop that ends, after a number of trips that differs between programs (their batch splits)."""
        c, lim, one, cond = range(self.loop_regs, self.loop_regs + 4)
        row = isa.BY_NAME
        head = [(row["PID"], {"rd": lim, "axis": 0}, None, None, None, None),
                (row["MOVI"], {"rd": one, "imm": 1}, dt.int32, None, None, None),
                (row["SADD"], {"rd": lim, "ra": lim, "rb": one}, dt.int32, None, None, None),
                (row["MOVI"], {"rd": c, "imm": 0}, dt.int32, None, None, None)]
        body = [self.instruction() for _ in range(self.draw(1, 4))]
        tail = [(row["SADD"], {"rd": c, "ra": c, "rb": one}, dt.int32, None, None, None),
                (row["SCMP"], {"rd": cond, "ra": c, "cc": isa.CC_NAMES.index("lt"), "rb": lim}, dt.int32, None, None,
                 None),
                (row["BRNZ"], {"rc": cond}, None, None, None, at + len(head))]
        return head + body + tail

    def build(self) -> bytes:
        instrs = []
        for _ in range(self.draw(1, 10)):
            if self.chance(0.15):
                instrs += self.counted_loop(len(instrs))
            else:
                instrs.append(self.instruction())
        if not self.chance(BAD):
            instrs.append((isa.BY_NAME["END"], {}, None, None, None, None))
        pcs = []
        pc = 0
        for ins, *_ in instrs:
            pcs.append(pc)
            pc += ins.words
        code = array("Q", bytes(8 * pc))
        relocs = []
        for (ins, vals, ty, set_, wait, target), at in zip(instrs, pcs):
            if target is not None:
                vals["target"] = pcs[self.draw(0, len(pcs) - 1) if target is RANDOM_TARGET else target]
            encode_into(code, at, ins, vals, ty, set_, wait)
            for f, (w, _) in zip(ins.fields, ins.layout):
                if f.kind == "gm":
                    relocs.append((at + w, 0, vals["tensor"]))
            if ins.family == "movi" and ty is dt.int32 and self.chance(0.3):
                relocs.append((at + 1, 1, 2))  # bind the scalar parameter `n`
        fp = {s: FOOTPRINT for s in C.SPACES}
        grid = (self.draw(1, 4), self.draw(1, 2), 1)
        kernels = [C.KernelInfo("k", grid, 0, pc, self.regs, fp, bool(self.draw(0, 1)), bool(self.draw(0, 1)))]
        if self.chance(0.2):  # a second kernel sharing the code (validated again, run after the first)
            kernels.append(C.KernelInfo("x", (self.draw(1, 3), 1, 1), 0, pc, self.regs, fp))
        debug = C.DebugInfo(["gen.py"], [(0, 0, 1, 0)], {0: (1, "def k(x, y, n):\n")})
        bc = dvmlang.Bytecode(major=C.VERSION_MAJOR, minor=C.VERSION_MINOR, flags=C.FLAG_CHECKSUM | C.FLAG_SOURCES,
                              target=TARGET, strings=STRINGS, params=self.params, layouts=LAYOUTS, kernels=kernels,
                              code=code, relocs=sorted(relocs), debug=debug)
        return bc.serialise()


def _bits(value: int, d) -> int:
    """The raw bits of ``value`` as a MOVI immediate of dtype ``d`` (integers wrap; floats round)."""
    if d is None:  # an arbitrary (BAD) dtype code
        return value & ((1 << 64) - 1)
    with np.errstate(over="ignore"):
        return scalar_bits(float(value) if d.is_float else value, d)


def _stored_tensors(bc) -> set[int]:
    return {d.vals["tensor"] for decoded in bc.decoded for d in decoded if d.ins.family in STORES}


def _run(bc, device, args, trace=False):
    """(outputs, error, cycles) of running ``bc`` on copies of ``args``; with ``trace``, the trace views of a
    completed run are rendered too (they must not fail on any program either)."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        launch = dvmlang.run(bc, *args, device=device, trace=trace)
    except dvmlang.DeviceError as e:
        return args, e, None
    except dvmlang.LaunchError as e:  # a kernel that communicates needs a device of a System (dl.remote_store)
        assert "dvmlang.npu.System" in str(e), e
        return args, e, None
    if trace:
        render([launch], "all", console=Console(file=io.StringIO(), width=120, color_system=None))
    return args, None, launch.cycles


def check(data: bytes, trace: bool = False) -> str:
    """The property for one generated container; returns what happened to it."""
    try:
        bc = dvmlang.Bytecode.from_bytes(data)
    except dvmlang.BytecodeError as e:
        assert e.reason
        assert not disassemble_bytes(data).ok
        return type(e).__name__
    assert bc.serialise() == data
    assert disassemble_bytes(data).ok and "k(" in bc.disassemble()
    args = small_args(bc, np.random.default_rng(7))
    out, err, cycles = _run(bc, Device(watchdog=WATCHDOG, compiled=False), args, trace=trace)
    for i in set(range(2)) - _stored_tensors(bc):
        assert out[i].tobytes() == args[i].tobytes(), f"tensor {bc.params[i].name} changed but nothing stores to it"
    seq, serr, seq_cycles = _run(bc, Device(watchdog=WATCHDOG, sequential=True), args)
    assert (err is None) == (serr is None), f"batched: {err!r}; sequential: {serr!r}"
    # (under the same trace flag: a traced launch runs the parts of a split batch one after another to their ends,
    # so a trap after a divergent loop names the first part's programs alone, where an untraced one names all)
    comp, cerr, comp_cycles = _run(bc, Device(watchdog=WATCHDOG, compiled="always"), args, trace=trace)
    assert type(cerr) is type(err) and str(cerr) == str(err), f"step by step: {err!r}; compiled: {cerr!r}"
    assert comp_cycles == cycles and all(a.tobytes() == b.tobytes() for a, b in zip(out, comp)
                                         if isinstance(a, np.ndarray)), "the compiled device differs"
    if err is not None:
        return type(err).__name__
    for a, b in zip(out, seq):
        if isinstance(a, np.ndarray):
            assert a.tobytes() == b.tobytes(), "batched and sequential runs stored different values"
    if not any(d.ins.family == "atomic" for decoded in bc.decoded for d in decoded):
        assert cycles == seq_cycles, f"batched: {cycles} cycles; sequential: {seq_cycles}"
    return "ran"


@budget(500)
@given(st.data())
def test_generated_programs_are_refused_or_run_safely(data):
    draw = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731 - the one drawing primitive
    event(check(Program(draw).build(), trace=data.draw(st.integers(0, 4)) == 0))  # --hypothesis-show-statistics


def test_the_generator_reaches_every_outcome():
    """Not vacuous: a fixed sample of generated programs is partly refused, partly run, partly faulted."""
    rng = random.Random(11)
    seen: dict[str, int] = {}
    for _ in range(150):
        outcome = check(Program(rng.randint).build(), trace=rng.random() < 0.2)
        seen[outcome] = seen.get(outcome, 0) + 1
    assert seen.get("ran", 0) >= 15, seen
    assert seen.get("InvalidBytecodeError", 0) >= 15, seen
    assert sum(v for k, v in seen.items() if k not in ("ran", "InvalidBytecodeError")) >= 5, seen
