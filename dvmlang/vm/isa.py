"""The instruction set: one table, from which the encoder, validator, decoder, disassembler, cost model
and ``docs/isa.md`` are all derived. The elementwise rows come from the op vocabulary (``opdefs``); the
validation rule of each row's family is its record in ``families``.

Every instruction is a head word followed by 0-7 operand words, all little-endian 64-bit.

Head word::

    bits  0-15  opcode            bits 29     wait flag
    bits 16-18  pipe              bits 30-32  wait: source pipe
    bits 19-21  length - 1        bits 33-35  wait: event id
    bit  22     set flag          bits 36-39  dtype code
    bits 23-25  set: target pipe  bits 40-63  payload (the row's head fields)
    bits 26-28  set: event id

Operand fields are packed in declaration order into the operand words, low bits first; a field never
straddles two words, and 64-bit fields take a whole word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from .. import opdefs


class Pipe(IntEnum):
    SCALAR = 0
    MTE2 = 1
    VECTOR = 2
    CUBE = 3
    MTE1 = 4
    FIXPIPE = 5
    MTE3 = 6


PIPE_NAMES = {Pipe.SCALAR: "SCALAR", Pipe.MTE2: "MTE2", Pipe.VECTOR: "VECTOR", Pipe.CUBE: "CUBE",
              Pipe.MTE1: "MTE1", Pipe.FIXPIPE: "FIXP", Pipe.MTE3: "MTE3"}
N_PIPES = 7
N_EVENTS = 8

# ---- head word layout ------------------------------------------------------------------------------------
OPCODE_BITS, PIPE_SHIFT, LEN_SHIFT = 16, 16, 19
SET_FLAG_SHIFT, SET_PIPE_SHIFT, SET_EVENT_SHIFT = 22, 23, 26
WAIT_FLAG_SHIFT, WAIT_PIPE_SHIFT, WAIT_EVENT_SHIFT = 29, 30, 33
DTYPE_SHIFT, PAYLOAD_SHIFT, PAYLOAD_BITS = 36, 40, 24
MAX_WORDS = 8

# ---- operand field kinds -----------------------------------------------------------------------------
# kind: (bits, description)
FIELD_KINDS = {
    "reg": (8, "scalar register index"),
    "tile": (32, "on-chip tile: address in 32-byte units (bits 0-15) and layout index (bits 16-31)"),
    "sop": (32, "scalar operand: bit 31 set = register (bits 0-7), clear = signed 31-bit immediate"),
    "sop16": (16, "short scalar operand: bit 15 set = register (bits 0-7), clear = signed 15-bit immediate"),
    "u4": (4, "small unsigned integer"),
    "u8": (8, "unsigned integer"),
    "u16": (16, "unsigned integer"),
    "target": (32, "branch target: word index in the kernel's code"),
    "imm64": (64, "raw 64-bit immediate (the bits of the register's dtype)"),
    "gm": (64, "global-memory address (patched through the relocation table)"),
    "flag": (1, "boolean flag"),
    "pipe": (3, "pipe id"),
    "event": (3, "event id"),
    "perm": (8, "axis permutation, 2 bits per axis"),
    "cc": (3, "comparison: 0 lt, 1 le, 2 gt, 3 ge, 4 eq, 5 ne"),
}

SOP_REG_BIT = 1 << 31
SOP_IMM_MIN, SOP_IMM_MAX = -(1 << 30), (1 << 30) - 1
SOP16_REG_BIT = 1 << 15
SOP16_IMM_MIN, SOP16_IMM_MAX = -(1 << 14), (1 << 14) - 1
SOP_FORMS = {"sop": (32, SOP_REG_BIT, SOP_IMM_MIN, SOP_IMM_MAX), "sop16": (16, SOP16_REG_BIT, SOP16_IMM_MIN,
                                                                             SOP16_IMM_MAX)}
"""Each scalar-operand kind: (bits, register flag, smallest and largest immediate)."""
MAX_DMA_RANK = 5
TILE_ADDR_UNIT = 32
CC_NAMES = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclass(frozen=True)
class Cost:
    """A cost formula, evaluated by the device's ``npu.timing.COSTS[kind]`` with its profile. ``kind`` names the
    formula; ``k`` is its per-row coefficient (cycles per 256-byte repeat for vector rows)."""

    kind: str
    k: float = 1.0

    def describe(self) -> str:
        return {
            "scalar": f"{self.k:g} cycle(s) on the scalar unit",
            "branch": f"{self.k:g} cycles on the scalar unit (taken or not)",
            "vector": f"vector_startup + {self.k:g} x ceil(bytes / 256)",
            "reduce": f"vector_startup + {self.k:g} x ceil(bytes / 256) + log2(n) x tree_step",
            "dma": "dma_latency + bursts x burst_overhead + bytes x (1 + unaligned part x (1 / unaligned_efficiency - 1)) "
                   "/ rate (rate: the per-core L2 or HBM rate, at most L2 or HBM / active cores)",
            "gather": "dma_latency + elements x gather_per_element + bytes / rate",
            "atomic": "dma_latency + elements x atomic_per_element",
            "mte1": "mte1_startup + bytes / mte1_bytes_per_cycle",
            "cube": "B x (cube_startup + ceil(M/16) x ceil(N/16) x ceil(K/16) x dtype factor), B the batch (1 "
                    "for 2-D tiles)",
            "fill": "cube_startup (the init of an MMAD)",
            "handoff": "fixpipe_startup + bytes / handoff_bytes_per_cycle, then dma_latency + handoff_flag_cycles "
                       "until the other core sees it (through a GM workspace; with l0c_to_ub, the fixpipe cost)",
            "sync": "1 cycle (events complete in the pipe's order)",
            "scalar_gm": "scalar_gm_latency (the scalar unit reads global memory)",
            "print": "0 cycles (a debug aid the hardware does not have)",
            "remote": "bytes / rate, the core pushing the data out at its DMA rate (at most the link's); the link "
                      "carries the transfers of all cores in turn at its sustained rate, and a signal reaches the peer "
                      "dma_latency + the link's latency after the program's earlier stores there have been carried",
            "wait": "until the awaited signal arrives (0 cycles when it already has)",
        }[self.kind]


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    head: bool = False  # packed into the head word's payload rather than an operand word
    space: str = ""  # a tile operand's memory space: ub, l1, l0a, l0b, l0c
    writes: bool = False  # the instruction writes this operand (dst, rd); it reads the others

    @property
    def bits(self) -> int:
        return FIELD_KINDS[self.kind][0]


@dataclass(frozen=True)
class Instr:
    """One row of the ISA table."""

    name: str
    opcode: int
    pipe: Pipe
    fields: tuple[Field, ...]
    cost: Cost
    doc: str
    family: str  # which decoder handler and validator rule apply
    fn: object = None  # numpy implementation for elementwise rows
    dtypes: str = "any"  # "float", "int", "intbool", "num", "any", "none"
    extra: dict = field(default_factory=dict)
    layout: tuple = ()  # computed: per field (word, shift) where word 0 is the head

    def __post_init__(self):
        # derived once per row: the encoder packs thousands of instructions per build
        object.__setattr__(self, "words", 1 + max((w for w, _ in self.layout), default=0))
        object.__setattr__(self, "packing", tuple((f.name, w, shift, (1 << f.bits) - 1)
                                                  for f, (w, shift) in zip(self.fields, self.layout)))
        # the memory space of each tile operand, by field name
        object.__setattr__(self, "spaces", {f.name: f.space for f in self.fields if f.kind == "tile"})
        # the kind of each field, by name
        object.__setattr__(self, "kinds", {f.name: f.kind for f in self.fields})


def _layout(fields: tuple[Field, ...]) -> tuple[tuple[int, int], ...]:
    out = []
    head_bit = PAYLOAD_SHIFT
    word, bit = 0, 64  # operand word counter, bit position (64 = need a fresh word)
    for f in fields:
        if f.head:
            if head_bit + f.bits > 64:
                raise AssertionError(f"head fields overflow the payload in {fields}")
            out.append((0, head_bit))
            head_bit += f.bits
            continue
        if bit + f.bits > 64:
            word += 1
            bit = 0
        out.append((word, bit))
        bit += f.bits
    return tuple(out)


TABLE: list[Instr] = []
BY_NAME: dict[str, Instr] = {}
BY_OPCODE: dict[int, Instr] = {}


def _row(name, opcode, pipe, fields, cost, doc, family, fn=None, dtypes="any", **extra):
    fs = tuple(fields)
    ins = Instr(name, opcode, pipe, fs, cost, doc, family, fn, dtypes, extra, _layout(fs))
    if ins.words > MAX_WORDS:
        raise AssertionError(f"{name} needs {ins.words} words")
    if name in BY_NAME or opcode in BY_OPCODE:
        raise AssertionError(f"duplicate ISA row {name} / {opcode:#x}")
    TABLE.append(ins)
    BY_NAME[name] = ins
    BY_OPCODE[opcode] = ins
    return ins


def H(name, kind):
    return Field(name, kind, head=True, writes=name == "rd")


def F(name, kind, space="ub"):
    return Field(name, kind, space=space if kind == "tile" else "", writes=name in ("dst", "rd"))


# ---- elementwise rows come from the op vocabulary ------------------------------------------------------------
# name: (numpy fn, dtype rule, vector cycles per repeat), in row order (the opcodes follow it)
BINARY = {name: (op.ref, op.rule, op.cycles) for name, op in opdefs.BINARY.items()}
COMPARE = {name: op.ref for name, op in opdefs.COMPARE.items()}
UNARY = {name: (op.ref, op.rule, op.cycles) for name, op in opdefs.UNARY.items()}
# max and min ignore NaN (Triton's); max_nan and min_nan propagate it (numpy's and PyTorch's, for dvmlang.ops)
REDUCE_OPS = ("sum", "max", "min", "prod", "argmax", "argmin", "xor_sum", "or", "max_nan", "min_nan")
SCAN_OPS = ("sum", "prod", "max", "min")
ATOMIC_OPS = ("add", "max", "min", "xchg", "and", "or", "xor", "cas")

# ---- the table -------------------------------------------------------------------------------------------
S, V, M2, M3, M1, C, FX = Pipe.SCALAR, Pipe.VECTOR, Pipe.MTE2, Pipe.MTE3, Pipe.MTE1, Pipe.CUBE, Pipe.FIXPIPE

_row("NOP", 0x0000, S, [], Cost("scalar", 1), "Do nothing.", "nop", dtypes="none")
_row("END", 0x0001, S, [], Cost("scalar", 1), "End the program (every pipe drains first).", "end", dtypes="none")
_row("MOVI", 0x0002, S, [H("rd", "reg"), F("imm", "imm64")], Cost("scalar", 1),
     "rd = imm (raw bits of the row's dtype). Runtime scalar parameters are bound here.", "movi")
_row("MOV", 0x0003, S, [H("rd", "reg"), H("rs", "reg")], Cost("scalar", 1), "rd = rs.", "mov")
_row("PID", 0x0004, S, [H("rd", "reg"), H("axis", "u4")], Cost("scalar", 1), "rd = program id along axis.", "pid",
     dtypes="none")
_row("NPROG", 0x0005, S, [H("rd", "reg"), H("axis", "u4")], Cost("scalar", 1), "rd = grid size along axis.",
     "nprog", dtypes="none")
_row("TDIM", 0x0006, S, [H("rd", "reg"), H("tensor", "u8"), H("dim", "u4"), H("stride", "flag")], Cost("scalar", 1),
     "rd = size (or stride, in elements) of a tensor parameter's dimension.", "tdim", dtypes="none")
_row("JMP", 0x0007, S, [F("target", "target")], Cost("branch", 2), "Jump to target.", "jmp", dtypes="none")
_row("BRZ", 0x0008, S, [H("rc", "reg"), F("target", "target")], Cost("branch", 2),
     "Jump to target if rc is zero.", "br", dtypes="none", when=False)
_row("BRNZ", 0x0009, S, [H("rc", "reg"), F("target", "target")], Cost("branch", 2),
     "Jump to target if rc is not zero.", "br", dtypes="none", when=True)
_row("SSEL", 0x000A, S, [H("rd", "reg"), H("rc", "reg"), H("ra", "reg"), F("rb", "reg")], Cost("scalar", 1),
     "rd = rc ? ra : rb.", "ssel")
_row("SCAST", 0x000B, S, [H("rd", "reg"), H("ra", "reg"), H("bitcast", "flag"), H("rtz", "flag")], Cost("scalar", 1),
     "rd = ra converted to the row's dtype (bitcast reinterprets the bits; rtz rounds a narrowing float "
     "conversion toward zero).", "scast")
_row("SCMP", 0x000C, S, [H("rd", "reg"), H("ra", "reg"), H("cc", "cc"), F("rb", "reg")], Cost("scalar", 1),
     "rd (int1) = ra <cc> rb, compared in the row's dtype.", "scmp", dtypes="num")
_row("MOVTS", 0x000D, S, [H("rd", "reg"), F("src", "tile")], Cost("scalar_gm", 1),
     "rd = element 0 of a UB tile (the scalar unit reads UB; wait for VECTOR first).", "movts")
_row("LDG", 0x000E, S, [H("rd", "reg"), H("tensor", "u8"), F("gm", "gm"), F("offset", "sop")], Cost("scalar_gm", 1),
     "rd = global memory element at offset (bounds-checked).", "ldg")
_row("STG", 0x000F, S, [H("rs", "reg"), H("tensor", "u8"), F("gm", "gm"), F("offset", "sop")], Cost("scalar_gm", 1),
     "Store rs to global memory at offset (bounds-checked).", "stg")
_row("PRINT", 0x0010, S, [H("string", "u16"), H("hex", "flag"), F("value", "tile"), F("reg", "reg"),
                          F("kind", "u4")], Cost("print", 0),
     "Debug print: a string and a register (kind 1) or UB tile (kind 2), once per program.", "print",
     dtypes="any")
_row("SET", 0x0011, S, [H("src", "pipe"), H("dst", "pipe"), H("event", "event")], Cost("sync", 1),
     "set_flag(src -> dst, event) issued into the src pipe's queue.", "set", dtypes="none")
_row("WAIT", 0x0012, S, [H("src", "pipe"), H("dst", "pipe"), H("event", "event")], Cost("sync", 1),
     "wait_flag(src -> dst, event): the dst pipe waits for the latest matching set.", "wait", dtypes="none")
_row("BARRIER", 0x0013, S, [H("mask", "u8")], Cost("sync", 1),
     "Every pipe in the mask drains before later instructions start.", "barrier", dtypes="none")
_row("TRAP", 0x0014, S, [H("string", "u16")], Cost("scalar", 1), "Fault with a message (failed device assert).",
     "trap", dtypes="none")

_op = 0x0100
SCALAR_BINARY: dict[str, Instr] = {}
for _name, (_fn, _rule, _k) in BINARY.items():
    SCALAR_BINARY[_name] = _row(f"S{_name.upper()}", _op, S, [H("rd", "reg"), H("ra", "reg"), H("rb", "reg")],
                                Cost("scalar", 1), f"rd = ra {_name} rb (scalar).", "sbin", _fn, _rule, op=_name)
    _op += 1
_op = 0x0140
SCALAR_UNARY: dict[str, Instr] = {}
for _name, (_fn, _rule, _k) in UNARY.items():
    SCALAR_UNARY[_name] = _row(f"S{_name.upper()}", _op, S, [H("rd", "reg"), H("ra", "reg")],
                               Cost("scalar", 2 if _k == 1 else 8), f"rd = {_name}(ra) (scalar).", "sun", _fn, _rule,
                               op=_name)
    _op += 1

_op = 0x0200
VECTOR_BINARY: dict[str, Instr] = {}
VECTOR_BINARY_S: dict[str, Instr] = {}
for _name, (_fn, _rule, _k) in BINARY.items():
    VECTOR_BINARY[_name] = _row(f"V{_name.upper()}", _op, V, [F("dst", "tile"), F("a", "tile"), F("b", "tile")],
                                Cost("vector", _k), f"dst = a {_name} b, elementwise with broadcasting.", "vbin",
                                _fn, _rule, op=_name)
    VECTOR_BINARY_S[_name] = _row(f"V{_name.upper()}S", _op + 0x40, V,
                                  [H("rs", "reg"), H("rev", "flag"), F("dst", "tile"), F("a", "tile")],
                                  Cost("vector", _k), f"dst = a {_name} rs (rs {_name} a when rev).", "vbins",
                                  _fn, _rule, op=_name)
    _op += 1
_row("VCMP", 0x0280, V, [H("cc", "cc"), F("dst", "tile"), F("a", "tile"), F("b", "tile")], Cost("vector", 1),
     "dst (int1) = a <cc> b, elementwise.", "vcmp", dtypes="num")
_row("VCMPS", 0x0281, V, [H("cc", "cc"), H("rs", "reg"), H("rev", "flag"), F("dst", "tile"), F("a", "tile")],
     Cost("vector", 1), "dst (int1) = a <cc> rs (rs <cc> a when rev).", "vcmps", dtypes="num")
_op = 0x0300
VECTOR_UNARY: dict[str, Instr] = {}
for _name, (_fn, _rule, _k) in UNARY.items():
    VECTOR_UNARY[_name] = _row(f"V{_name.upper()}", _op, V, [F("dst", "tile"), F("a", "tile")], Cost("vector", _k),
                               f"dst = {_name}(a), elementwise.", "vun", _fn, _rule, op=_name)
    _op += 1
_row("VSEL", 0x0380, V, [F("dst", "tile"), F("c", "tile"), F("a", "tile"), F("b", "tile")], Cost("vector", 1),
     "dst = c ? a : b, elementwise with broadcasting.", "vsel")
_row("VCAST", 0x0381, V, [H("bitcast", "flag"), H("rtz", "flag"), F("dst", "tile"), F("a", "tile")],
     Cost("vector", 2), "dst = a converted to dst's dtype (round to nearest even, or toward zero with rtz on a "
     "narrowing float conversion; bitcast reinterprets).", "vcast")
_row("VDUP", 0x0382, V, [H("rs", "reg"), F("dst", "tile")], Cost("vector", 1), "Fill dst with a scalar register.",
     "vdup")
_row("VIOTA", 0x0383, V, [F("dst", "tile"), F("start", "sop")], Cost("vector", 1),
     "dst[i] = start + i (int32, 1-D).", "viota", dtypes="int")
_row("VCOPY", 0x0384, V, [F("dst", "tile"), F("a", "tile")], Cost("vector", 1),
     "dst = a broadcast to dst's shape (numpy rules).", "vcopy")
_row("VREDUCE", 0x0385, V, [H("op", "u4"), H("axis", "u4"), F("dst", "tile"), F("a", "tile")], Cost("reduce", 1),
     "dst = reduce(a, axis) with op in (sum, max, min, prod, argmax, argmin, xor_sum, or); fp16/bf16 accumulate in "
     "fp32.",
     "vreduce")
_row("VSCAN", 0x0386, V, [H("op", "u4"), H("axis", "u4"), H("reverse", "flag"), F("dst", "tile"), F("a", "tile")],
     Cost("reduce", 2), "dst = inclusive scan(a, axis) with op in (sum, prod, max, min).", "vscan")
_row("VPERM", 0x0387, V, [H("perm", "perm"), F("dst", "tile"), F("a", "tile")], Cost("vector", 2),
     "dst = a with its axes permuted (rank <= 4: 2 bits per axis).", "vperm", perm_bits=2)
_row("VSLICE", 0x0388, V, [F("dst", "tile"), F("a", "tile"), F("s0", "u16"), F("s1", "u16"), F("s2", "u16"),
                           F("s3", "u16")], Cost("vector", 1),
     "dst = a[s0:, s1:, ...] cut to dst's shape (rank <= 4).", "vslice", starts=4)
_row("VCAT", 0x0389, V, [H("axis", "u4"), F("dst", "tile"), F("a", "tile"), F("b", "tile")], Cost("vector", 1),
     "dst = concatenate(a, b, axis).", "vcat")
_row("VTAKE", 0x038B, V, [H("axis", "u4"), F("dst", "tile"), F("a", "tile"), F("index", "tile")], Cost("vector", 4),
     "dst = take_along_axis(a, index, axis): dst[..., i, ...] = a[..., index[..., i, ...], ...]; index's other "
     "dims are 1 or a's. An index outside [0, a.shape[axis]) faults.", "vtake")
_row("VSORT", 0x038C, V, [H("axis", "u4"), H("descending", "flag"), F("dst", "tile"), F("a", "tile")],
     Cost("reduce", 8), "dst = a sorted along axis, ascending (descending with the flag); NaN sorts as the largest "
     "value.", "vsort")
_row("VHIST", 0x038D, V, [H("masked", "flag"), F("dst", "tile"), F("a", "tile"), F("mask", "tile")], Cost("vector", 4),
     "dst[v] = the number of elements of the 1-D integer tile a equal to v, for v in [0, len(dst)); elements outside "
     "that range, or where the mask (when masked) is false, are not counted.", "vhist", dtypes="int")
_row("VFMA", 0x038A, V, [F("dst", "tile"), F("a", "tile"), F("b", "tile"), F("c", "tile")], Cost("vector", 2),
     "dst = a * b + c (rounded once per op in the dtype).", "vfma", dtypes="float")
_row("VPERM5", 0x038E, V, [H("perm", "u16"), F("dst", "tile"), F("a", "tile")], Cost("vector", 2),
     "dst = a with its axes permuted, for tiles of rank 5: 3 bits per axis.", "vperm", perm_bits=3)
_row("VSLICE5", 0x038F, V, [F("dst", "tile"), F("a", "tile"), F("s0", "u16"), F("s1", "u16"), F("s2", "u16"),
                            F("s3", "u16"), F("s4", "u16")], Cost("vector", 1),
     "dst = a[s0:, s1:, s2:, s3:, s4:] cut to dst's shape, for tiles of rank 5.", "vslice", starts=5)

# DMA: one row per rank, so every row has a fixed layout. Descriptor per dim: stride, lo, hi. Ranks 1-3 take a
# 32-bit scalar operand each; three of those per dim do not fit the 8 words of an instruction from rank 4 on, so
# ranks 4 and 5 take 16-bit ones (an immediate outside +-16K goes through its register). A descriptor has at
# most MAX_DMA_RANK dims (the lowering folds contiguous dims of a longer one).


def _dims(rank):
    k = "sop" if rank <= 3 else "sop16"
    fs = []
    for d in range(rank):
        fs += [F(f"stride{d}", k), F(f"lo{d}", k), F(f"hi{d}", k)]
    return fs


DMA_LOAD: dict[int, Instr] = {}
DMA_STORE: dict[int, Instr] = {}
for _r in range(1, MAX_DMA_RANK + 1):
    DMA_LOAD[_r] = _row(f"DMA_LOAD{_r}", 0x0400 + _r, M2,
                        [H("tensor", "u8"), H("pad_undef", "flag"), F("dst", "tile"), F("base", "sop"), F("gm", "gm"),
                         F("pad", "sop")] + _dims(_r) + [H("keep", "flag")],
                        Cost("dma"), f"GM -> UB, rank {_r}: dst[i] = gm[base + sum(i_d * stride_d)] inside the box "
                                     "lo_d <= i_d < hi_d, pad elsewhere (pad_undef: the kernel gave no `other`; debug "
                                     "mode fills those elements with poison; keep: elements outside the box keep dst's "
                                     "value, so a second DMA completes a tile whose rows wrap or clamp). Bursts along "
                                     "the last dim.", "dma_load",
                        rank=_r)
    DMA_STORE[_r] = _row(f"DMA_STORE{_r}", 0x0410 + _r, M3,
                         [H("tensor", "u8"), F("src", "tile"), F("base", "sop"), F("gm", "gm")] + _dims(_r),
                         Cost("dma"), f"UB -> GM, rank {_r}: gm[base + sum(i_d * stride_d)] = src[i] inside the box.",
                         "dma_store", rank=_r)
_row("GATHER", 0x0420, M2, [H("masked", "flag"), H("tensor", "u8"), F("dst", "tile"), F("offsets", "tile"),
                             F("gm", "gm"), F("mask", "tile"), F("pad", "sop")], Cost("gather"),
     "GM -> UB by an offsets tile (element-wise addresses); masked-off elements read pad.", "gather")
_row("SCATTER", 0x0421, M3, [H("masked", "flag"), H("tensor", "u8"), F("src", "tile"), F("offsets", "tile"),
                              F("gm", "gm"), F("mask", "tile")], Cost("gather"),
     "UB -> GM by an offsets tile; masked-off elements are not written.", "scatter")
_row("ATOMIC", 0x0422, M3, [H("op", "u4"), H("masked", "flag"), H("tensor", "u8"), H("has_cmp", "flag"),
                             H("want_old", "flag"), F("dst", "tile"), F("src", "tile"), F("offsets", "tile"),
                             F("mask", "tile"), F("gm", "gm"), F("cmp", "tile")], Cost("atomic"),
     "Atomic read-modify-write in GM, element by element in program order; dst receives the old values.",
     "atomic")

# Cube path: GM -> L1 (MTE2), L1 -> L0A/L0B (MTE1), MMAD into L0C (CUBE), L0C -> GM (FixPipe). The handoffs
# between a vector core's UB and the cube core (UB_TO_L1, FIX_L0C_TO_UB, UB_TO_L0C) are virtual instructions:
# 910B-class parts have no direct path, and the decoder moves the tile through a GM workspace with a cross-core
# flag (the "handoff" cost; profile.l0c_to_ub models a part with the direct path).
_row("UB_TO_L1", 0x0500, M3, [F("dst", "tile", "l1"), F("src", "tile")], Cost("handoff"),
     "Hand a UB tile to the cube core's L1: UB -> GM workspace (MTE3), cross-core flag, GM -> L1 (MTE2).",
     "copy_space")
_row("L1_TO_L0A", 0x0501, M1, [F("dst", "tile", "l0a"), F("src", "tile", "l1")], Cost("mte1"),
     "Copy an L1 tile into L0A.", "copy_space")
_row("L1_TO_L0B", 0x0502, M1, [F("dst", "tile", "l0b"), F("src", "tile", "l1")], Cost("mte1"),
     "Copy an L1 tile into L0B.", "copy_space")
_row("MMAD", 0x0503, C, [H("init", "flag"), F("dst", "tile", "l0c"), F("a", "tile", "l0a"), F("b", "tile", "l0b")],
     Cost("cube"),
     "L0C dst (+)= L0A a @ L0B b, accumulating in dst's dtype (fp32 for fp16/bf16 inputs); init clears dst. 3-D "
     "tiles are a batch: (B, M, K) @ (B, K, N) -> (B, M, N), B matrix products.",
     "mmad")
_row("FIX_L0C_TO_UB", 0x0504, FX, [F("dst", "tile"), F("src", "tile", "l0c")], Cost("handoff"),
     "Hand an L0C tile to the vector core's UB, converting to dst's dtype: FixPipe L0C -> GM workspace, full "
     "pipe barrier and cross-core flag, GM -> UB (MTE2).", "copy_space")
_row("UB_TO_L0C", 0x0505, FX, [F("dst", "tile", "l0c"), F("src", "tile")], Cost("handoff"),
     "Seed an L0C accumulator from a UB tile (bias / running accumulator): UB -> GM workspace, cross-core flag, "
     "GM -> L1 -> L0C.", "copy_space")
_row("L0C_FILL", 0x0506, C, [H("rs", "reg"), F("dst", "tile", "l0c")], Cost("fill"),
     "Fill an L0C accumulator with a scalar register (a K loop's zero init: the first MMAD's init bit).", "l0c_fill")
FIX_STORE: dict[int, Instr] = {}
for _r in (1, 2, 3):
    FIX_STORE[_r] = _row(f"FIX_STORE{_r}", 0x0440 + _r, FX,
                         [H("tensor", "u8"), F("src", "tile", "l0c"), F("base", "sop"), F("gm", "gm")] + _dims(_r),
                         Cost("dma"), f"L0C -> GM through FixPipe, rank {_r}: the DMA_STORE descriptor, converting "
                                      "the accumulator (float32 to the tensor's float dtype; int32 stays int32). "
                                      "How a dot's result leaves the cube core on 910B.", "fix_store", rank=_r)
DMA_LOAD_L1: dict[int, Instr] = {}
for _r in (1, 2, 3):
    DMA_LOAD_L1[_r] = _row(f"DMA_LOAD_L1_{_r}", 0x0430 + _r, M2,
                           [H("tensor", "u8"), H("pad_undef", "flag"), F("dst", "tile", "l1"), F("base", "sop"),
                            F("gm", "gm"), F("pad", "sop")] + _dims(_r) + [H("keep", "flag")], Cost("dma"),
                           f"GM -> L1, rank {_r}, the DMA_LOAD descriptor.", "dma_load", rank=_r)

# Communication between devices (SHMEM-style, docs/distributed.md): a kernel on one NPU of a system stores into,
# and signals, a symmetric buffer (the same parameter) on a peer NPU, and waits for the signals peers send it.
# Appended last: every opcode above keeps its bytes.
_row("REMOTE_STORE", 0x0600, M3, [H("masked", "flag"), H("tensor", "u8"), F("src", "tile"), F("offsets", "tile"),
                                   F("gm", "gm"), F("mask", "tile"), F("peer", "sop")], Cost("remote"),
     "UB -> the GM of device `peer`, by an offsets tile into the same (symmetric) tensor there; masked-off elements "
     "are not written.", "remote_store")
SIGNAL_OPS = ("set", "add")
_row("SIGNAL", 0x0601, M3, [H("op", "u4"), H("tensor", "u8"), F("gm", "gm"), F("offset", "sop"), F("peer", "sop"),
                             F("value", "sop")], Cost("remote"),
     "Set (or add to) element `offset` of the signal tensor on device `peer`, after this program's earlier remote "
     "stores (same pipe): the peer may read them once it sees the signal.", "signal")
_row("WAIT_SIGNAL", 0x0602, S, [H("cc", "cc"), H("tensor", "u8"), F("gm", "gm"), F("offset", "sop"),
                                 F("value", "sop")], Cost("wait"),
     "Wait until element `offset` of this device's signal tensor compares `cc` with `value` (ge: it reached the "
     "value); the instructions after it issue once it holds.", "wait_signal")
