"""``dvmlang.Bytecode``: one encoded launch instance — the contract between host and device.

``Encoder`` turns a built ``Template`` into instances: it serialises everything that depends only on
the build once, and per instance writes just the parameter table (shapes, strides), the grid, the code
with scalar immediates and tensor addresses patched in, and a checksum.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from pathlib import Path

from .. import dtypes as dt
from ..errors import BytecodeError, DvmError, MalformedBytecodeError
from . import container as C
from .container import DebugInfo, KernelInfo, ParamInfo, Reader, TargetInfo

GM_BASE = 1 << 36
GM_ALIGN = 4096


def gm_addresses(params: list[ParamInfo]) -> list[int | None]:
    """Deterministic global-memory placement of the tensor parameters (4 KiB aligned, in order)."""
    out: list[int | None] = []
    cur = GM_BASE
    for p in params:
        if p.kind != "tensor":
            out.append(None)
            continue
        out.append(cur)
        n = 1
        for s in p.shape:
            n *= s
        cur += (max(1, n) * p.dtype.itemsize + GM_ALIGN - 1) // GM_ALIGN * GM_ALIGN
    return out


def scalar_bits(value, dtype: dt.DType) -> int:
    """The raw bits a MOVI immediate holds for ``value`` of ``dtype``."""
    if dtype.is_float:
        if dtype is dt.float32:
            return struct.unpack("<I", struct.pack("<f", value))[0]
        if dtype is dt.float64:
            return struct.unpack("<Q", struct.pack("<d", value))[0]
        import numpy as np
        return int(np.array([value], dtype=dtype.np).view(f"u{dtype.itemsize}")[0])
    return int(value) & ((1 << (dtype.itemsize * 8)) - 1)


class Bytecode:
    """An encoded launch instance. Build one with ``kernel.encode(grid, *args)`` or
    ``Bytecode.from_bytes(data)``; run it with ``dvmlang.run(bytecode, *args)``."""

    def __init__(self, *, major, minor, flags, target, strings, params, layouts, kernels, code, relocs, debug):
        self.major = major
        self.minor = minor
        self.flags = flags
        self.target: TargetInfo = target
        self.strings: list[str] = strings
        self.params: list[ParamInfo] = params
        self.layouts = layouts
        self.kernels: list[KernelInfo] = kernels
        self.code: array = code
        self.relocs = relocs
        self.debug: DebugInfo = debug
        self._bytes: bytes | None = None
        self.decoded = None  # per-kernel decoded instructions, set once validated
        self.program = None  # the device decoder's cache
        self.template_key = None  # identity of the build this instance came from (in-process only)

    # ---- identity ----------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.kernels[0].name if self.kernels else ""

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.kernels[0].grid

    def __repr__(self) -> str:
        k = self.kernels[0] if self.kernels else None
        size = len(self._bytes) if self._bytes is not None else "?"
        return (f"<dvmlang.Bytecode {self.name} grid={k.grid if k else ()} v{self.major}.{self.minor} "
                f"{len(self.code)} words, {size} bytes>")

    def __eq__(self, other) -> bool:
        if not isinstance(other, Bytecode):
            return NotImplemented
        return (self.major, self.minor, self.flags, self.target, self.strings, self.params, self.layouts,
                self.kernels, list(self.code), self.relocs, self.debug) == \
               (other.major, other.minor, other.flags, other.target, other.strings, other.params, other.layouts,
                other.kernels, list(other.code), other.relocs, other.debug)

    __hash__ = None

    # ---- serialisation ------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        if self._bytes is None:
            self._bytes = _serialise(self)
        return self._bytes

    @classmethod
    def from_bytes(cls, data, limits: C.Limits = C.LIMITS) -> "Bytecode":
        """Parse and validate. Any byte string gives a Bytecode or a ``BytecodeError``."""
        try:
            bc = _parse(data, limits)
            bc.validate()
        except BytecodeError:
            raise
        except RecursionError:  # pragma: no cover - defensive
            raise MalformedBytecodeError("structure nests too deeply") from None
        bc._bytes = bytes(data)
        return bc

    def validate(self):
        """Run the validator (once); raises ``InvalidBytecodeError`` if the program is unsafe."""
        if self.decoded is None:
            from .validator import validate
            self.decoded = validate(self)
        return self

    def save(self, path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def load(cls, path, limits: C.Limits = C.LIMITS) -> "Bytecode":
        path = Path(path)
        try:
            size = path.stat().st_size
        except OSError as e:
            raise DvmError(f"cannot read {path}: {e.strerror}") from None
        if size > limits.max_file_bytes:
            raise MalformedBytecodeError(f"{path} is too large", expected=f"at most {limits.max_file_bytes} bytes",
                                         found=str(size))
        return cls.from_bytes(path.read_bytes(), limits)

    def disassemble(self, *, source: bool = True) -> str:
        from .disasm import disassemble
        return disassemble(self, source=source).text

    # ---- rebinding (dvmlang.run) -------------------------------------------------------------------------
    def rebind(self, params: list[ParamInfo], scalars: dict[int, object]) -> "Bytecode":
        """A copy for new tensors/scalars of the same signature: relocations and scalar immediates patched."""
        code = array("Q", self.code)
        addrs = gm_addresses(params)
        for w, kind, p in self.relocs:
            if kind == 0:
                code[w] = addrs[p]
            else:
                code[w] = scalar_bits(scalars[p], params[p].dtype)
        bc = Bytecode(major=self.major, minor=self.minor, flags=self.flags, target=self.target, strings=self.strings,
                      params=params, layouts=self.layouts, kernels=self.kernels, code=code, relocs=self.relocs,
                      debug=self.debug)
        bc.decoded = self.decoded
        bc.program = self.program
        bc.template_key = self.template_key
        return bc


# ---- encoder ---------------------------------------------------------------------------------------------------


class Encoder:
    """Encodes launch instances of one build. Static sections are serialised once, here."""

    def __init__(self, template, params: list[ParamInfo], target: TargetInfo, sources: dict | None = None):
        self.t = template
        self.param_shapes = params
        self.target = target
        strings: list[str] = []
        sid: dict[str, int] = {}

        def intern(s: str) -> int:
            if s not in sid:
                sid[s] = len(strings)
                strings.append(s)
            return sid[s]

        for s in template.strings:
            strings.append(s)
            sid.setdefault(s, len(strings) - 1)
        intern(template.name)
        for p in params:
            intern(p.name)
        files: list[str] = []
        lines = []
        for pc, loc in template.debug:
            if loc.file not in files:
                files.append(loc.file)
                intern(loc.file)
            lines.append((pc, files.index(loc.file), loc.line, loc.col))
        self.debug = DebugInfo(files, lines, {})
        if sources:
            for fi, f in enumerate(files):
                if f in sources:
                    self.debug.sources[fi] = sources[f]
        self.strings = strings
        self.sid = sid
        self.flags = C.FLAG_CHECKSUM | (C.FLAG_SOURCES if self.debug.sources else 0)
        self.relocs = sorted(list(template.relocs) + [(w, 1, p) for w, p, _ in template.scalar_slots])
        self.gm_relocs = [(w, p) for w, k, p in template.relocs]
        self.scalar_slots = [(w, p, d) for w, p, d in template.scalar_slots]
        self.layouts = template.layouts
        self.reg_types = template.reg_types
        self._head = C.header(self.flags)
        self._pre = b"".join([
            C.section("target", C.encode_target(target)),
            C.section("symbols", C.encode_symbols(strings)),
        ])
        self._layouts_sec = C.section("layouts", C.encode_layouts(template.layouts))
        self._post = b"".join([
            C.section("relocs", C.encode_relocs(self.relocs)),
            C.section("debug", C.encode_debug(self.debug, sid, bool(self.debug.sources))),
        ])
        self._kernel_tail = (C.uleb(0) + C.uleb(len(template.words)) + C.uleb(len(template.reg_types)) +
                             bytes(d.code for d in template.reg_types) +
                             b"".join(C.uleb(template.footprint.get(s, 0)) for s in C.SPACES) +
                             bytes([int(template.double_buffer) | (int(template.kind == "mix") << 1)]))
        self._kernel_name = C.uleb(sid[template.name])
        self._template_kernel = KernelInfo(template.name, (1, 1, 1), 0, len(template.words), list(template.reg_types),
                                           {s: template.footprint.get(s, 0) for s in C.SPACES},
                                           template.double_buffer, template.kind == "mix")
        self._code_hdr = bytes([C.SECTION_IDS["code"]]) + C.uleb(8 * len(template.words))
        self.decoded = None  # validated decoded instructions of the template (shared by all instances)
        self.program = None

    def encode(self, params: list[ParamInfo], scalars: dict[int, object], grid: tuple[int, int, int]) -> Bytecode:
        """One launch instance: patch scalars and addresses, serialise, checksum."""
        code = array("Q", self.t.words)
        for w, p, d in self.scalar_slots:
            code[w] = scalar_bits(scalars[p], d)
        addrs = gm_addresses(params)
        for w, p in self.gm_relocs:
            code[w] = addrs[p]
        kernel = KernelInfo(self._template_kernel.name, grid, 0, self._template_kernel.code_words,
                            self._template_kernel.reg_types, self._template_kernel.footprint,
                            self._template_kernel.double_buffer, self._template_kernel.mix)
        ksec = b"\x01" + self._kernel_name + C.uleb(grid[0]) + C.uleb(grid[1]) + C.uleb(grid[2]) + self._kernel_tail
        code_bytes = code.tobytes() if sys.byteorder == "little" else _swapped(code)
        body = b"".join([self._head, self._pre, C.section("params", C.encode_params(params, self.sid)),
                         self._layouts_sec, C.section("kernels", ksec), self._code_hdr, code_bytes, self._post])
        data = body + C.checksum_section(body)
        bc = Bytecode(major=C.VERSION_MAJOR, minor=C.VERSION_MINOR, flags=self.flags, target=self.target,
                      strings=self.strings, params=params, layouts=self.layouts, kernels=[kernel], code=code,
                      relocs=self.relocs, debug=self.debug)
        bc._bytes = data
        if self.decoded is None:
            bc.validate()
            self.decoded = bc.decoded
        bc.decoded = self.decoded
        bc.program = self.program
        bc.template_key = id(self)
        return bc


def _swapped(code: array) -> bytes:
    c = array("Q", code)
    c.byteswap()
    return c.tobytes()


# ---- whole-object serialisation and parsing -------------------------------------------------------------


def _serialise(bc: Bytecode) -> bytes:
    sid: dict[str, int] = {}
    for i, s in enumerate(bc.strings):
        sid.setdefault(s, i)
    parts = [C.header(bc.flags, bc.major, bc.minor),
             C.section("target", C.encode_target(bc.target)),
             C.section("symbols", C.encode_symbols(bc.strings)),
             C.section("params", C.encode_params(bc.params, sid)),
             C.section("layouts", C.encode_layouts(bc.layouts)),
             C.section("kernels", C.encode_kernels(bc.kernels, sid)),
             C.section("code", bc.code.tobytes() if sys.byteorder == "little" else _swapped(bc.code)),
             C.section("relocs", C.encode_relocs(bc.relocs))]
    if bc.debug is not None and (bc.debug.files or bc.debug.lines):
        parts.append(C.section("debug", C.encode_debug(bc.debug, sid, bool(bc.flags & C.FLAG_SOURCES))))
    body = b"".join(parts)
    if bc.flags & C.FLAG_CHECKSUM:
        body += C.checksum_section(body)
    return body


def _parse(data, limits: C.Limits) -> Bytecode:
    major, minor, flags, sections, data = C.split_sections(data, limits)

    def reader(name):
        s, e = sections[name]
        return Reader(data, s, e, name)

    r = reader("target")
    target = TargetInfo(r.string(limits.max_string_bytes), *(r.uleb(40) for _ in range(7)))
    r.done()
    r = reader("symbols")
    n = r.count(limits.max_strings, "strings")
    strings = [r.string(limits.max_string_bytes) for _ in range(n)]
    r.done()

    def sym(rd: Reader) -> str:
        i = rd.uleb(32)
        if i >= len(strings):
            rd.fail("string index out of range", f"< {len(strings)}", str(i))
        return strings[i]

    r = reader("params")
    n = r.count(limits.max_params, "parameters", 4)
    params = []
    for _ in range(n):
        kind = r.byte()
        if kind not in (0, 1):
            r.fail("unknown parameter kind", "0 or 1", str(kind))
        name = sym(r)
        d = r.dtype()
        rank = r.byte()
        if rank > limits.max_rank or (kind == 1 and rank):
            r.fail("parameter rank out of range", f"<= {limits.max_rank}", str(rank))
        if kind == 0:
            shape = tuple(r.uleb(48) for _ in range(rank))
            if any(s > limits.max_dim for s in shape):
                r.fail("dimension too large", f"<= {limits.max_dim}")
            strides = tuple(r.sleb(48) for _ in range(rank))
            params.append(ParamInfo("tensor", name, d, rank, shape, strides))
        else:
            params.append(ParamInfo("scalar", name, d))
    r.done()
    r = reader("layouts")
    n = r.count(limits.max_layouts, "layouts", 2)
    layouts = []
    for _ in range(n):
        d = r.dtype()
        rank = r.byte()
        if rank > limits.max_rank:
            r.fail("layout rank out of range", f"<= {limits.max_rank}", str(rank))
        shape = tuple(r.uleb(32) for _ in range(rank))
        if any(s == 0 for s in shape):
            r.fail("layout has an empty dimension")
        numel = 1
        for s in shape:
            numel *= s
        if numel * d.itemsize > 1 << 24:
            r.fail("layout larger than any on-chip memory", "<= 16 MiB", str(numel * d.itemsize))
        layouts.append((d, shape))
    r.done()
    s, e = sections["code"]
    if (e - s) % 8:
        raise MalformedBytecodeError("code section is not a whole number of 64-bit words", section="code", offset=s,
                                     expected="a multiple of 8 bytes", found=str(e - s))
    if (e - s) // 8 > limits.max_code_words:
        raise MalformedBytecodeError("too many instruction words", section="code",
                                     expected=f"<= {limits.max_code_words}", found=str((e - s) // 8))
    code = array("Q")
    code.frombytes(data[s:e])
    if sys.byteorder != "little":
        code.byteswap()
    r = reader("kernels")
    n = r.count(limits.max_kernels, "kernels", 10)
    kernels = []
    for _ in range(n):
        name = sym(r)
        grid = tuple(r.uleb(32) for _ in range(3))
        g = grid[0] * grid[1] * grid[2]
        if g > limits.max_grid:
            r.fail("grid too large", f"<= {limits.max_grid} programs", str(g))
        start = r.uleb(32)
        words = r.uleb(32)
        nregs = r.count(limits.max_registers, "registers")
        regs = [r.dtype() for _ in range(nregs)]
        fp = {sp: r.uleb(32) for sp in C.SPACES}
        fl = r.byte()
        if fl & ~3:
            r.fail("unknown kernel flags", "bits 0-1", f"{fl:#x}")
        kernels.append(KernelInfo(name, grid, start, words, regs, fp, bool(fl & 1), bool(fl & 2)))
    r.done()
    r = reader("relocs")
    n = r.count(limits.max_relocs, "relocations", 3)
    relocs = []
    for _ in range(n):
        w = r.uleb(32)
        kind = r.byte()
        p = r.uleb(32)
        relocs.append((w, kind, p))
    r.done()
    debug = DebugInfo()
    if "debug" in sections:
        r = reader("debug")
        nf = r.count(limits.max_strings, "files")
        debug.files = [sym(r) for _ in range(nf)]
        ne = r.count(limits.max_debug_entries, "line entries", 4)
        pc = 0
        for _ in range(ne):
            pc += r.uleb(32)
            fi = r.uleb(32)
            if fi >= nf:
                r.fail("line entry names a file that does not exist", f"< {nf}", str(fi))
            debug.lines.append((pc, fi, r.uleb(32), r.uleb(32)))
        if flags & C.FLAG_SOURCES:
            ns = r.count(nf, "sources", 2)
            for _ in range(ns):
                fi = r.uleb(32)
                if fi >= nf:
                    r.fail("source names a file that does not exist", f"< {nf}", str(fi))
                first = r.uleb(32)
                debug.sources[fi] = (first, r.string(1 << 24))
        r.done()
    return Bytecode(major=major, minor=minor, flags=flags, target=target, strings=strings, params=params,
                    layouts=layouts, kernels=kernels, code=code, relocs=relocs, debug=debug)
