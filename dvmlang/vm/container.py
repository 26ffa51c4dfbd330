"""The ``.dvmb`` container: reading and writing bytes, with WebAssembly-style safety.

Layout: a 12-byte header (magic, major, minor, flags, header CRC-32), then sections ``id (u8) | size
(LEB128) | payload`` in a fixed order; custom sections (id 0) may appear anywhere and are skipped.
Everything is checked against the bytes that remain before anything is allocated, varints must be
canonical, and every failure is a ``MalformedBytecodeError`` naming section and offset.
``docs/bytecode.md`` is the full specification.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from .. import dtypes as dt
from ..errors import DvmError, MalformedBytecodeError, VersionError

MAGIC = b"\x00dvm"
VERSION_MAJOR = 1
VERSION_MINOR = 1  # 1.1: canonical form required (see docs/bytecode.md, "Versions"); 1.0 files still load
HEADER_SIZE = 12
FLAG_CHECKSUM = 1
FLAG_SOURCES = 2

SECTION_IDS = {"custom": 0, "target": 1, "symbols": 2, "params": 3, "layouts": 4, "kernels": 5, "code": 6,
               "relocs": 7, "debug": 8, "checksum": 9}
SECTION_NAMES = {v: k for k, v in SECTION_IDS.items()}
REQUIRED = ("target", "symbols", "params", "layouts", "kernels", "code", "relocs")


@dataclass(frozen=True)
class Limits:
    """Implementation limits applied to every container read from outside. Exceeding one is a
    ``MalformedBytecodeError`` naming the limit; pass your own ``Limits`` to ``Bytecode.from_bytes`` to
    tighten them for untrusted input. The run-time limit on loop trip counts is the device's watchdog
    (``dvmlang.npu.Device(watchdog=N)``, instructions per kernel launch)."""

    max_file_bytes: int = 64 << 20        # whole container
    max_sections: int = 64                # sections, custom ones included
    max_code_words: int = 1 << 20         # 64-bit words in the code section, and in all kernels' ranges together
    max_strings: int = 1 << 16            # symbol table entries
    max_string_bytes: int = 1 << 16       # one symbol (embedded source text: max_source_bytes)
    max_source_bytes: int = 1 << 24       # one embedded source file
    max_params: int = 255                 # tensor and scalar parameters (an instruction names one in 8 bits)
    max_layouts: int = 1 << 16            # tile layouts (an operand names one in 16 bits)
    max_rank: int = 8                     # dimensions of a tensor parameter or a layout
    max_layout_bytes: int = 1 << 24       # one tile
    max_kernels: int = 16
    max_registers: int = 256              # an operand names a register in 8 bits
    max_relocs: int = 1 << 20
    max_debug_entries: int = 1 << 20
    max_dim: int = 1 << 40                # one tensor dimension, in elements
    max_grid: int = 1 << 24               # programs per kernel (the device runs at most 2**24 per launch)


LIMITS = Limits()


@dataclass(slots=True)
class ParamInfo:
    kind: str  # "tensor" | "scalar"
    name: str
    dtype: dt.DType
    rank: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()


@dataclass(slots=True)
class KernelInfo:
    name: str
    grid: tuple[int, int, int]
    code_start: int
    code_words: int
    reg_types: list[dt.DType]
    footprint: dict[str, int]
    double_buffer: bool = False
    mix: bool = False


@dataclass
class TargetInfo:
    name: str
    vector_cores: int
    cube_cores: int
    ub_bytes: int
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int


@dataclass
class DebugInfo:
    files: list[str] = field(default_factory=list)
    lines: list[tuple[int, int, int, int]] = field(default_factory=list)  # (pc, file index, line, col)
    sources: dict[int, tuple[int, str]] = field(default_factory=dict)  # file index -> (first line, text)
    present: bool = True  # whether the container has a debug section at all
    _split: dict = field(default_factory=dict, compare=False, repr=False)  # file index -> (text, its lines)

    def line_text(self, file: str, line: int) -> str:
        """Line ``line`` of ``file`` as the embedded source text has it, or "" when it is not embedded. Only
        the container's own bytes are consulted: the file a loaded container names is never opened (it
        may be any host file, or a FIFO)."""
        fi = self.files.index(file) if file in self.files else None
        if fi not in self.sources:
            return ""
        first, text = self.sources[fi]
        split = self._split.get(fi)
        if split is None or split[0] is not text:  # split each text once (a listing asks line by line)
            split = self._split[fi] = (text, text.splitlines())
        i = line - first
        return split[1][i] if 0 <= i < len(split[1]) else ""


SPACES = ("ub", "l1", "l0a", "l0b", "l0c")


# ---- writing -----------------------------------------------------------------------------------------------


_SMALL = [bytes([i]) for i in range(128)]
_BY_CODE = dt.BY_CODE


def uleb(n: int) -> bytes:
    """Unsigned LEB128 (canonical: the fewest bytes)."""
    if 0 <= n < 128:
        return _SMALL[n]
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(n: int) -> bytes:
    """Signed LEB128 (canonical: the fewest bytes)."""
    if 0 <= n < 64:
        return _SMALL[n]
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return uleb(len(raw)) + raw


def section(name: str, payload: bytes) -> bytes:
    return bytes([SECTION_IDS[name]]) + uleb(len(payload)) + payload


def custom_section(name: str, payload: bytes) -> bytes:
    return section("custom", string(name) + payload)


def header(flags: int, major: int = VERSION_MAJOR, minor: int = VERSION_MINOR) -> bytes:
    first = MAGIC + struct.pack("<BBH", major, minor, flags)
    return first + struct.pack("<I", zlib.crc32(first))


def encode_target(t: TargetInfo) -> bytes:
    return string(t.name) + b"".join(uleb(x) for x in (t.vector_cores, t.cube_cores, t.ub_bytes, t.l1_bytes,
                                                       t.l0a_bytes, t.l0b_bytes, t.l0c_bytes))


def encode_symbols(strings: list[str]) -> bytes:
    return uleb(len(strings)) + b"".join(string(s) for s in strings)


def encode_params(params: list[ParamInfo], sid: dict[str, int]) -> bytes:
    out = [uleb(len(params))]
    for p in params:
        out.append(bytes([0 if p.kind == "tensor" else 1]) + uleb(sid[p.name]) + bytes([p.dtype.code, p.rank]))
        if p.kind == "tensor":
            out.extend(uleb(d) for d in p.shape)
            out.extend(sleb(s) for s in p.strides)
    return b"".join(out)


def encode_layouts(layouts) -> bytes:
    out = [uleb(len(layouts))]
    for d, shape in layouts:
        out.append(bytes([d.code, len(shape)]) + b"".join(uleb(x) for x in shape))
    return b"".join(out)


def encode_kernels(kernels: list[KernelInfo], sid: dict[str, int]) -> bytes:
    out = [uleb(len(kernels))]
    for k in kernels:
        out.append(uleb(sid[k.name]) + b"".join(uleb(g) for g in k.grid) + uleb(k.code_start) + uleb(k.code_words))
        out.append(uleb(len(k.reg_types)) + bytes(d.code for d in k.reg_types))
        out.append(b"".join(uleb(k.footprint.get(s, 0)) for s in SPACES))
        out.append(bytes([int(k.double_buffer) | (int(k.mix) << 1)]))
    return b"".join(out)


def encode_relocs(relocs) -> bytes:
    return uleb(len(relocs)) + b"".join(uleb(w) + bytes([kind]) + uleb(p) for w, kind, p in relocs)


def encode_debug(info: DebugInfo, sid: dict[str, int], with_sources: bool) -> bytes:
    out = [uleb(len(info.files))]
    out.extend(uleb(sid[f]) for f in info.files)
    out.append(uleb(len(info.lines)))
    last = 0
    for pc, fi, line, col in info.lines:
        out.append(uleb(pc - last) + uleb(fi) + uleb(line) + uleb(col))
        last = pc
    if with_sources:
        out.append(uleb(len(info.sources)))
        for fi, (first, text) in sorted(info.sources.items()):
            out.append(uleb(fi) + uleb(first) + string(text))
    return b"".join(out)


def checksum_section(data: bytes) -> bytes:
    return section("checksum", struct.pack("<I", zlib.crc32(data)))


# ---- reading -------------------------------------------------------------------------------------------------


class Reader:
    """Bounds-checked reading of one section's payload."""

    __slots__ = ("data", "pos", "end", "section", "base")

    def __init__(self, data: bytes, start: int, end: int, section: str):
        self.data = data
        self.pos = start
        self.end = end
        self.section = section
        self.base = start

    def fail(self, msg, expected=None, found=None):
        raise MalformedBytecodeError(msg, section=self.section, offset=self.pos, expected=expected, found=found)

    def byte(self) -> int:
        if self.pos >= self.end:
            self.fail("unexpected end of section", "1 more byte", "none")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self, max_bits: int = 64) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 0x80:  # one byte: the common case
                self.pos = pos + 1
                return b
        result = shift = 0
        start = pos
        max_bytes = -(-max_bits // 7)
        for i in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                if i == max_bytes - 1 and max_bits % 7 and b >> (max_bits % 7):
                    self.pos = start
                    self.fail("integer too large", f"at most {max_bits} bits", f"byte {b:#x}")
                if i > 0 and b == 0:
                    self.pos = start
                    self.fail("non-canonical LEB128 (trailing zero byte)")
                return result
        self.pos = start
        self.fail("LEB128 integer is too long", f"at most {max_bytes} bytes", "more")

    def sleb(self, max_bits: int = 64) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 0x80:  # one byte (always canonical, and within any max_bits >= 7): the common case
                self.pos = pos + 1
                return b - 0x80 if b & 0x40 else b
        result = shift = 0
        start = self.pos
        max_bytes = -(-max_bits // 7)
        for _ in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                if b & 0x40:
                    result -= 1 << shift
                if not -(1 << (max_bits - 1)) <= result < 1 << (max_bits - 1):
                    self.pos = start
                    self.fail("signed integer too large", f"at most {max_bits} bits", str(result))
                if self.pos - start > 1 and len(sleb(result)) != self.pos - start:
                    self.pos = start
                    self.fail("non-canonical signed LEB128 (redundant sign bytes)")
                return result
        self.pos = start
        self.fail("signed LEB128 integer is too long", f"at most {max_bytes} bytes", "more")

    def count(self, limit: int, what: str, min_item_bytes: int = 1) -> int:
        n = self.uleb(32)
        if n > limit:
            self.fail(f"too many {what}", f"at most {limit}", str(n))
        if n * min_item_bytes > self.end - self.pos:
            self.fail(f"{what} count exceeds the section", f"at most {(self.end - self.pos) // max(1, min_item_bytes)}",
                      str(n))
        return n

    def string(self, limit: int) -> str:
        n = self.uleb(32)
        if n > limit:
            self.fail("string too long", f"at most {limit} bytes", str(n))
        if self.pos + n > self.end:
            self.fail("string runs past the end of the section", f"{n} bytes", f"{self.end - self.pos}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.pos -= n
            self.fail("string is not valid UTF-8")

    def dtype(self) -> dt.DType:
        code = self.byte()
        d = dt.BY_CODE.get(code)
        if d is None:
            self.pos -= 1
            self.fail("unknown dtype code", "0-14", str(code))
        return d

    def dtypes(self, n: int) -> list[dt.DType]:
        """``n`` dtype codes in a row (a kernel's register table): read at once when they are all known,
        else one by one, so that the first unknown code is reported as ``dtype`` reports it."""
        pos = self.pos
        raw = self.data[pos:min(pos + n, self.end)]
        out = [_BY_CODE.get(c) for c in raw]
        if len(out) == n and None not in out:
            self.pos = pos + n
            return out
        return [self.dtype() for _ in range(n)]

    def done(self):
        if self.pos != self.end:
            self.fail("section has trailing bytes", "end of section", f"{self.end - self.pos} more bytes")


@dataclass
class Layout:
    """Where everything is in a container that passed the structural checks."""

    major: int
    minor: int
    flags: int
    sections: dict[str, tuple[int, int]]  # name -> (payload start, payload end)
    customs: list[tuple[int, str, int, int]]  # (id of the known section before it, name, data start, end)
    data: bytes


def check_header(data: bytes, verify: bool = True) -> tuple[int, int, int]:
    """Magic, version and header CRC; returns ``(major, minor, flags)``. ``verify=False`` skips the CRC
    (the disassembler uses it to show what a corrupted file says)."""
    if len(data) < HEADER_SIZE:
        raise MalformedBytecodeError("truncated header", section="header", offset=len(data),
                                     expected=f"{HEADER_SIZE} bytes", found=f"{len(data)}")
    if data[:4] != MAGIC:
        raise MalformedBytecodeError("bad magic: not a dvmlang bytecode file", section="header", offset=0,
                                     expected=repr(MAGIC), found=repr(bytes(data[:4])))
    major, minor, flags = struct.unpack_from("<BBH", data, 4)
    (crc,) = struct.unpack_from("<I", data, 8)
    want = zlib.crc32(data[:8])
    if verify and want != crc:
        raise MalformedBytecodeError(f"header CRC mismatch (the header reads version {major}.{minor}, flags "
                                     f"{flags:#x}; the file is corrupted)", section="header", offset=8,
                                     expected=f"{want:#010x}", found=f"{crc:#010x}")
    if major != VERSION_MAJOR:
        ours = f"{VERSION_MAJOR}.{VERSION_MINOR}"
        if major > VERSION_MAJOR:
            msg = (f"this file is bytecode version {major}.{minor}, newer than this dvmlang reads (version "
                   f"{ours}); upgrade dvmlang to load it")
        else:
            msg = (f"this file is bytecode version {major}.{minor}, older than this dvmlang reads (version "
                   f"{ours}); re-export it with this dvmlang")
        raise VersionError(msg, section="header", offset=4, expected=f"major version {VERSION_MAJOR}",
                           found=f"{major}.{minor}")
    if flags & ~(FLAG_CHECKSUM | FLAG_SOURCES):
        raise MalformedBytecodeError("unknown header flags", section="header", offset=6,
                                     expected="bits 0-1 only", found=f"{flags:#06x}")
    return major, minor, flags


def split_sections(data, limits: Limits = LIMITS, verify: bool = True) -> Layout:
    """Check the header and the section structure; locate every section's payload. ``verify=False`` skips
    the header CRC and the checksum (never used on the way to running anything)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedBytecodeError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > limits.max_file_bytes:
        raise MalformedBytecodeError("file too large", expected=f"at most {limits.max_file_bytes} bytes",
                                     found=str(len(data)))
    major, minor, flags = check_header(data, verify)
    pos = HEADER_SIZE
    sections: dict[str, tuple[int, int]] = {}
    customs: list[tuple[int, str, int, int]] = []
    last_id = 0
    n = 0
    checksum_at = None
    size_of = len(data)
    while pos < size_of:
        n += 1
        if n > limits.max_sections:
            raise MalformedBytecodeError("too many sections", offset=pos, expected=f"at most {limits.max_sections}",
                                         found="more")
        if checksum_at is not None:
            raise MalformedBytecodeError("bytes after the checksum section", section="checksum", offset=pos,
                                         expected="end of file", found=f"{size_of - pos} more bytes")
        sid = data[pos]
        if sid not in SECTION_NAMES:
            raise MalformedBytecodeError("unknown section id", offset=pos, expected="0-9", found=str(sid))
        name = SECTION_NAMES[sid]
        r = Reader(data, pos + 1, size_of, name)
        size = r.uleb(32)
        start = r.pos
        end = start + size
        if end > size_of:
            raise MalformedBytecodeError("section runs past the end of the file", section=name, offset=pos,
                                         expected=f"{size} bytes", found=f"{size_of - start}")
        if sid != 0:
            if sid <= last_id:
                raise MalformedBytecodeError("sections out of order or repeated", section=name, offset=pos,
                                             expected=f"a section after `{SECTION_NAMES[last_id]}`", found=name)
            last_id = sid
            sections[name] = (start, end)
            if sid == SECTION_IDS["checksum"]:
                checksum_at = pos
        else:
            cr = Reader(data, start, end, "custom")
            cname = cr.string(limits.max_string_bytes)
            customs.append((last_id, cname, cr.pos, end))
        pos = end
    for name in REQUIRED:
        if name not in sections:
            raise MalformedBytecodeError(f"missing required section `{name}`", offset=size_of,
                                         expected=f"section id {SECTION_IDS[name]}", found="end of file")
    if flags & FLAG_SOURCES and "debug" not in sections:
        raise MalformedBytecodeError("header flag `sources` is set but there is no debug section", section="header",
                                     offset=6, expected="a debug section", found="none")
    if flags & FLAG_CHECKSUM:
        if checksum_at is None:
            raise MalformedBytecodeError("header promises a checksum section but there is none", offset=size_of,
                                         expected="a checksum section", found="end of file")
        s, e = sections["checksum"]
        if e - s != 4:
            raise MalformedBytecodeError("checksum section must hold 4 bytes", section="checksum", offset=s,
                                         expected="4", found=str(e - s))
        (want,) = struct.unpack_from("<I", data, s)
        got = zlib.crc32(memoryview(data)[:checksum_at])
        if verify and want != got:
            raise MalformedBytecodeError("checksum mismatch: the file is corrupted", section="checksum", offset=s,
                                         expected=f"{got:#010x}", found=f"{want:#010x}")
    elif checksum_at is not None:
        raise MalformedBytecodeError("checksum section present but the header flag is not set", section="checksum",
                                     offset=checksum_at, expected="no checksum section", found="one")
    return Layout(major, minor, flags, sections, customs, data)


# ---- the sections' contents ------------------------------------------------------------------------------------
# One function per section, in the order ``bytecode._parse`` runs them (the order the reader has always checked
# them in, so the first fault a container has is the one reported).


def read_target(r: Reader, limits: Limits) -> TargetInfo:
    target = TargetInfo(r.string(limits.max_string_bytes), *(r.uleb(40) for _ in range(7)))
    r.done()
    return target


def read_symbols(r: Reader, limits: Limits) -> list[str]:
    n = r.count(limits.max_strings, "strings")
    strings = []
    seen: set[str] = set()
    for _ in range(n):
        at = r.pos
        s = r.string(limits.max_string_bytes)
        if s in seen:
            r.pos = at
            r.fail("duplicate string in the symbol table", "each string once", repr(s[:40]))
        seen.add(s)
        strings.append(s)
    r.done()
    return strings


def _symbol(rd: Reader, strings: list[str]) -> str:
    at = rd.pos
    i = rd.uleb(32)
    if i >= len(strings):
        rd.pos = at
        rd.fail("string index out of range", f"< {len(strings)}", str(i))
    return strings[i]


def read_params(r: Reader, limits: Limits, strings: list[str]) -> list[ParamInfo]:
    n = r.count(limits.max_params, "parameters", 4)
    params = []
    for _ in range(n):
        kind = r.byte()
        if kind not in (0, 1):
            r.pos -= 1
            r.fail("unknown parameter kind", "0 (tensor) or 1 (scalar)", str(kind))
        name = _symbol(r, strings)
        d = r.dtype()
        rank = r.byte()
        if rank > limits.max_rank or (kind == 1 and rank):
            r.pos -= 1
            r.fail("parameter rank out of range", "0 for a scalar" if kind else f"<= {limits.max_rank}", str(rank))
        if kind == 0:
            shape = []
            for _ in range(rank):
                at = r.pos
                x = r.uleb(48)
                if x > limits.max_dim:
                    r.pos = at
                    r.fail("dimension too large", f"<= {limits.max_dim}", str(x))
                shape.append(x)
            strides = tuple(r.sleb(48) for _ in range(rank))
            params.append(ParamInfo("tensor", name, d, rank, tuple(shape), strides))
        else:
            params.append(ParamInfo("scalar", name, d))
    r.done()
    return params


def read_layouts(r: Reader, limits: Limits) -> list:
    n = r.count(limits.max_layouts, "layouts", 2)
    layouts = []
    for _ in range(n):
        at = r.pos
        d = r.dtype()
        rank = r.byte()
        if rank > limits.max_rank:
            r.pos -= 1
            r.fail("layout rank out of range", f"<= {limits.max_rank}", str(rank))
        shape = tuple(r.uleb(32) for _ in range(rank))
        if any(s == 0 for s in shape):
            r.pos = at
            r.fail("layout has an empty dimension", "every dimension >= 1", str(shape))
        numel = 1
        for s in shape:
            numel *= s
        if numel * d.itemsize > limits.max_layout_bytes:
            r.pos = at
            r.fail("layout larger than any on-chip memory", f"<= {limits.max_layout_bytes} bytes",
                   str(numel * d.itemsize))
        layouts.append((d, shape))
    r.done()
    return layouts


def read_code(data: bytes, s: int, e: int, limits: Limits) -> array:
    if (e - s) % 8:
        raise MalformedBytecodeError("code section is not a whole number of 64-bit words", section="code", offset=s,
                                     expected="a multiple of 8 bytes", found=str(e - s))
    if (e - s) // 8 > limits.max_code_words:
        raise MalformedBytecodeError("too many instruction words", section="code", offset=s,
                                     expected=f"<= {limits.max_code_words}", found=str((e - s) // 8))
    code = array("Q")
    code.frombytes(data[s:e])
    if sys.byteorder != "little":
        code.byteswap()
    return code


def read_kernels(r: Reader, limits: Limits, strings: list[str], kernels_at: int) -> list[KernelInfo]:
    n = r.count(limits.max_kernels, "kernels", 10)
    kernels = []
    for _ in range(n):
        name = _symbol(r, strings)
        at = r.pos
        grid = tuple(r.uleb(32) for _ in range(3))
        g = grid[0] * grid[1] * grid[2]
        if g > limits.max_grid:
            r.pos = at
            r.fail("grid too large", f"<= {limits.max_grid} programs", str(g))
        start = r.uleb(32)
        words = r.uleb(32)
        nregs = r.count(limits.max_registers, "registers")
        regs = r.dtypes(nregs)
        fp = {sp: r.uleb(32) for sp in SPACES}
        fl = r.byte()
        if fl & ~3:
            r.pos -= 1
            r.fail("unknown kernel flags", "bits 0-1", f"{fl:#x}")
        kernels.append(KernelInfo(name, grid, start, words, regs, fp, bool(fl & 1), bool(fl & 2)))
    r.done()
    covered = sum(k.code_words for k in kernels)
    if covered > limits.max_code_words:  # each kernel's range is validated: shared code must not multiply the work
        r.pos = kernels_at
        r.fail(f"the {len(kernels)} kernels' code ranges cover {covered} words together; each range is validated, so "
               "together they may cover at most max_code_words", f"<= {limits.max_code_words}", str(covered))
    return kernels


def read_relocs(r: Reader, limits: Limits) -> list:
    n = r.count(limits.max_relocs, "relocations", 3)
    relocs = []
    for _ in range(n):
        w = r.uleb(32)
        kind = r.byte()
        p = r.uleb(32)
        relocs.append((w, kind, p))
    r.done()
    return relocs


def read_debug(r: Reader, limits: Limits, strings: list[str], ncode: int, flags: int) -> DebugInfo:
    debug = DebugInfo()
    nf = r.count(limits.max_strings, "files")
    debug.files = [_symbol(r, strings) for _ in range(nf)]
    ne = r.count(limits.max_debug_entries, "line entries", 4)
    pc = 0
    for _ in range(ne):
        at = r.pos
        pc += r.uleb(32)
        if pc >= ncode:
            r.pos = at
            r.fail("line entry beyond the end of the code", f"pc < {ncode}", str(pc))
        at = r.pos
        fi = r.uleb(32)
        if fi >= nf:
            r.pos = at
            r.fail("line entry names a file that does not exist", f"< {nf}", str(fi))
        debug.lines.append((pc, fi, r.uleb(32), r.uleb(32)))
    if flags & FLAG_SOURCES:
        ns = r.count(nf, "sources", 2)
        last = -1
        for _ in range(ns):
            at = r.pos
            fi = r.uleb(32)
            if fi >= nf or fi <= last:
                r.pos = at
                r.fail("source entries must name existing files in increasing order", f"{last} < index < {nf}",
                       str(fi))
            last = fi
            first = r.uleb(32)
            debug.sources[fi] = (first, r.string(limits.max_source_bytes))
    r.done()
    return debug


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_file(path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. Anything else (a FIFO, a device, a
    directory) is refused before a byte is read, so a path from outside can neither block the reader nor feed
    it without end. Refusals are ``MalformedBytecodeError``; a file that cannot be opened is a ``DvmError``."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # opening a FIFO must not wait for a writer
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
            raise MalformedBytecodeError(f"cannot read {path}: not a regular file ({kind}); bytecode is read only "
                                         "from regular files")
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise DvmError(f"cannot read {path}: {e.strerror}") from None
    if len(data) > limit:
        raise MalformedBytecodeError(f"{path} is too large", expected=f"at most {limit} bytes", found="more")
    return data
