"""The records the lowering passes hand to each other, and the built ``Template``.

``liveness`` yields a ``Liveness``; ``placement`` a ``Placement`` (where every tile lives, the homes of
loop-carried and branch values); ``alloc`` gives the buffers their addresses and the scalars a ``Registers``
map; the emitters fill a ``Code`` (the instruction stream of ``Emitted`` items and ``Label``s plus the layout
and string tables it indexes); ``sync`` adds events to it and ``assemble`` turns it into the ``Template``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ... import dtypes as dt
from ...errors import ResourceError, SourceLoc
from ...ir.core import Op, Value
from .. import isa

MAX_REGS = 256


class Label:
    """A position in the instruction stream; its ``pc`` is known once the stream is assembled."""

    __slots__ = ("pc", "name")

    def __init__(self, name=""):
        self.pc = None
        self.name = name


class Emitted:
    """One selected instruction: its field values and what it reads and writes (for the events). (A class with
    slots: a kernel's link makes and reads one per instruction.)"""

    __slots__ = ("ins", "vals", "dtype", "loc", "reads", "writes", "set", "wait", "pc", "extra_waits", "extra_sets",
                 "target", "reloc_param", "scalar_param")

    def __init__(self, ins: isa.Instr, vals: dict, dtype: dt.DType | None, loc: SourceLoc | None,
                 reads: list | None = None, writes: list | None = None):
        self.ins = ins
        self.vals = vals
        self.dtype = dtype
        self.loc = loc
        self.reads = [] if reads is None else reads  # (space, start, end)
        self.writes = [] if writes is None else writes
        self.set: tuple | None = None  # (dst pipe, event)
        self.wait: tuple | None = None  # (src pipe, event)
        self.pc = 0
        self.extra_waits: list | None = None  # events beyond the head word's: standalone WAIT/SET (sync)
        self.extra_sets: list | None = None
        self.target: Label | None = None  # branches and jumps
        self.reloc_param: int | None = None  # the tensor parameter whose address goes in the `gm` field
        self.scalar_param: int | None = None  # the scalar parameter whose value goes in the `imm` field

    def __repr__(self) -> str:
        return f"<{self.ins.name} {self.vals}>"


@dataclass
class Place:
    """Where a tile lives: a memory space, a byte address and a layout (dtype, shape)."""

    space: str
    buf: "Buffer"
    shape: tuple[int, ...]
    dtype: dt.DType


@dataclass
class Buffer:
    """A range of one memory space live from ``start`` to ``end`` (op positions); ``addr`` once allocated."""

    space: str
    nbytes: int
    start: int
    end: int
    name: str
    loc: SourceLoc | None
    addr: int = -1


@dataclass
class Template:
    """A built kernel, ready to be encoded for any launch instance."""

    name: str
    words: array
    layouts: list[tuple[dt.DType, tuple[int, ...]]]
    reg_types: list[dt.DType]
    footprint: dict[str, int]
    buffers: list[Buffer]
    relocs: list[tuple[int, int, int]]  # (word index, kind 0=gm address, param index)
    scalar_slots: list[tuple[int, int, dt.DType]]  # (word index of the imm64, param index, dtype)
    debug: list[tuple[int, SourceLoc]]
    strings: list[str]
    kind: str
    double_buffer: bool = False
    decoded: list | None = None  # per instruction, its ``decode.Decoded`` (the assembler's record; None: read back)


def nbytes(shape, dtype: dt.DType) -> int:
    """Bytes of a tile, rounded up to the 32-byte alignment of every buffer."""
    n = 1
    for s in shape:
        n *= s
    nb = max(1, n) * dtype.itemsize
    return (nb + 31) // 32 * 32


@dataclass
class Liveness:
    """Op positions in program order (even numbers; an op's regions lie between its position and its end) and
    each value's live interval; a value used inside a loop but defined outside it lives until the loop ends."""

    pos: dict[int, int]       # op id -> position
    op_end: dict[int, int]    # op id -> position after its regions
    def_pos: dict[int, int]   # value id -> position of the op (or region) defining it
    last_use: dict[int, int]  # value id -> position of its last use

    def interval(self, v: Value) -> tuple[int, int]:
        d = self.def_pos.get(v.id, 0)
        return d, max(self.last_use.get(v.id, d), d)


@dataclass
class Placement:
    """Where every tile lives, and the homes that loop-carried values and branch results share."""

    places: dict[int, Place]         # value id -> place
    buffers: list[Buffer]            # every buffer to allocate, in the order they were made
    users: dict[int, list[Op]]       # value id -> the ops using it
    homes: dict[int, list]           # loop/branch op id -> each result's home: a Buffer or ("reg", dtype)
    scalar_homes: dict[int, tuple]   # value id -> key ("home", op id, i) of the register home it shares
    home_spans: dict[tuple, tuple]   # register home key -> (start, end, dtype)
    alt: dict[int, Buffer]           # id(buffer) -> its alternate in the second copy of an unrolled loop body
    unrolled: set[int]               # ids of loops emitted twice per trip (double-buffered)
    l0c_shadow: dict[int, list]      # loop id -> [(L0C home, UB copy, result)] made at the loop exit
    l0c_fills: set = field(default_factory=set)  # ids of `full` tiles only used to init L0C homes (L0C_FILL)

    def shares(self, buf: Buffer, vid: int) -> bool:
        """Whether a value other than ``vid`` is placed in ``buf``."""
        return any(p.buf is buf for k, p in self.places.items() if k != vid)


class Registers:
    """Typed scalar registers: by value id, and by key for what is not one value (register homes
    ``("home", op id, i)``, constants ``("const", dtype code, value, type name)``, loop conditions)."""

    __slots__ = ("kernel", "of_value", "of_key", "types", "consts")

    def __init__(self, kernel: str, consts: dict):
        self.kernel = kernel
        self.of_value: dict[int, int] = {}
        self.of_key: dict = {}
        self.types: list[dt.DType] = []
        self.consts = consts  # (dtype code, value, type name) -> the const values sharing one register

    def extra(self, d: dt.DType) -> int:
        """A register of its own, for a temporary the emitters need."""
        r = len(self.types)
        if r >= MAX_REGS:
            raise ResourceError(f"kernel `{self.kernel}` needs more than {MAX_REGS} scalar registers")
        self.types.append(d)
        return r


class Code:
    """The instruction stream being emitted (``Emitted`` items and ``Label``s) and the tables it indexes."""

    __slots__ = ("out", "layouts", "layout_list", "strings", "string_ids", "uses_cube", "end_label")

    def __init__(self):
        self.out: list = []
        self.layouts: dict = {}
        self.layout_list: list = []
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}
        self.uses_cube = False
        self.end_label = Label("end")

    def layout(self, dtype: dt.DType, shape) -> int:
        key = (dtype.code, tuple(shape))
        idx = self.layouts.get(key)
        if idx is None:
            idx = len(self.layout_list)
            if idx >= 1 << 16:
                raise ResourceError("too many distinct tile layouts in one kernel")
            self.layouts[key] = idx
            self.layout_list.append((dtype, tuple(shape)))
        return idx

    def string(self, s: str) -> int:
        idx = self.string_ids.get(s)
        if idx is None:
            idx = self.string_ids[s] = len(self.strings)
            self.strings.append(s)
        return idx
