"""``dvmlang.Bytecode``: one encoded launch instance — the contract between host and device.

``Encoder`` turns a built ``Template`` into instances: it serialises everything that depends only on
the build once, and per instance writes just the parameter table (shapes, strides), the grid, the code
with scalar immediates and tensor addresses patched in, and a checksum.
"""

from __future__ import annotations

import itertools
import os
import struct
import sys
import zlib
from array import array
from collections import OrderedDict
from math import prod
from pathlib import Path

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, BytecodeError, DvmError, MalformedBytecodeError, VersionError, user_frames
from . import container as C
from .container import DebugInfo, KernelInfo, ParamInfo, TargetInfo, read_file
from .disasm import disassemble

GM_BASE = 1 << 36
GM_ALIGN = 4096  # a power of two (gm_span rounds with a mask)
_TEMPLATE_KEYS = itertools.count(1)  # identities of encoders (builds), never reused within a process


def gm_span(count: int, itemsize: int) -> int:
    """The global memory a tensor of ``count`` elements spans: at least one element, rounded up to GM_ALIGN."""
    return ((count or 1) * itemsize + GM_ALIGN - 1) & -GM_ALIGN


def gm_addresses(params: list[ParamInfo]) -> list[int | None]:
    """Deterministic global-memory placement of the tensor parameters (4 KiB aligned, in order)."""
    out: list[int | None] = []
    cur = GM_BASE
    for p in params:
        if p.kind != "tensor":
            out.append(None)
            continue
        out.append(cur)
        cur += gm_span(prod(p.shape), p.dtype.itemsize)
    return out


_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _bits_f32(value) -> int:
    try:
        return _U32.unpack(_F32.pack(value))[0]
    except OverflowError:  # beyond float32: round to infinity the way numpy does
        return _U32.unpack(_F32.pack(float("inf") if value > 0 else float("-inf")))[0]


def _bits_f64(value) -> int:
    return _U64.unpack(_F64.pack(value))[0]


def _bits_converter(dtype: dt.DType):
    """A function value -> the raw bits a MOVI immediate of ``dtype`` holds."""
    if dtype is dt.float32:
        return _bits_f32
    if dtype is dt.float64:
        return _bits_f64
    if dtype.is_float:
        npdt, view = dtype.np, f"u{dtype.itemsize}"
        return lambda value: int(np.array([value], dtype=npdt).view(view)[0])
    mask = (1 << (dtype.itemsize * 8)) - 1
    return lambda value: int(value) & mask


_CONVERTERS = {d: _bits_converter(d) for d in dt.ALL}


_LOOPED = 4  # instances of a build patched by the table loop before its straight-line patcher is written


def _patcher(scalar_slots, tensor_patches, ranks):
    """``patch(code, values, keys)``: the words of one instance that depend on its runtime values (each scalar's
    MOVI immediate; each tensor's address, tensors placed one after another as ``gm_span`` says, from the
    shapes in ``keys``) written into ``code``, as straight-line code generated once per build: what
    ``Encoder.encode_values`` does for a new shape."""
    env: dict = {"f32": _F32.pack, "u32": _U32.unpack, "bits_f32": _bits_f32}
    lines = ["def patch(code, values, keys):"]
    for w, p, d in scalar_slots:
        if d is dt.float32:  # _bits_f32, written out
            lines += ["    try:", f"        code[{w}] = u32(f32(values[{p}]))[0]", "    except OverflowError:",
                      f"        code[{w}] = bits_f32(values[{p}])"]
        elif d.is_float:
            env[f"bits{w}"] = _CONVERTERS[d]
            lines.append(f"    code[{w}] = bits{w}(values[{p}])")
        else:  # _bits_converter's integer case, written out
            lines.append(f"    code[{w}] = int(values[{p}]) & {(1 << (d.itemsize * 8)) - 1}")
    lines.append(f"    cur = {GM_BASE}")
    for n, (i, _, itemsize, words) in enumerate(tensor_patches):
        lines += [f"    code[{w}] = cur" for w in words]
        if n + 1 < len(tensor_patches):  # the next tensor starts after this one's span (gm_span)
            count = " * ".join(f"s[{d}]" for d in range(ranks[i])) or "1"
            lines += [f"    s = keys[{i}][1]",
                      f"    cur += (({count} or 1) * {itemsize} + {GM_ALIGN - 1}) & {-GM_ALIGN}"]
    exec(compile("\n".join(lines), "<dvmlang patcher>", "exec"), env)  # noqa: S102 - from the build's own tables
    return env["patch"]


def scalar_bits(value, dtype: dt.DType) -> int:
    """The raw bits a MOVI immediate holds for ``value`` of ``dtype``."""
    return _CONVERTERS[dtype](value)


class Bytecode:
    """An encoded launch instance. Build one with ``kernel.encode(grid, *args)`` or
    ``Bytecode.from_bytes(data)`` / ``Bytecode.load(path)``; run it with ``dvmlang.run(bytecode, *args)``.

    Two bytecodes are equal when every field of the container is equal (the cached bytes and the
    validator's results are not compared)."""

    def __init__(self, *, major, minor, flags, target, strings, params, layouts, kernels, code, relocs, debug,
                 custom=()):
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
        self.custom: tuple[tuple[int, str, bytes], ...] = tuple(custom)  # (id of the section before, name, payload)
        self._bytes: bytes | None = None
        self.decoded = None  # per-kernel decoded instructions, set once validated
        self.template_key = None  # the build this instance came from (in-process only; the device caches by it)

    # ---- identity ----------------------------------------------------------------------------------------
    @property
    def params(self) -> list[ParamInfo]:
        """The parameter table: one ``ParamInfo`` per kernel parameter, with this instance's shapes."""
        p = self._params
        if p is None:  # an encoder instance: make the records from the launch keys it kept
            p = self._params = self._encoder.param_infos(self._table)
        return p

    @params.setter
    def params(self, value: list[ParamInfo]):
        self._params = value

    @property
    def name(self) -> str:
        return self.kernels[0].name if self.kernels else ""

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.kernels[0].grid

    def __getattr__(self, name):
        # an encoder's instance (``Encoder._instance``) makes its kernel record when it is first read
        d = self.__dict__
        if name == "kernels" and "_encoder" in d:
            k = d["kernels"] = [d["_encoder"].kernel_info(d["_grid"])]
            return k
        raise AttributeError(f"'Bytecode' object has no attribute {name!r}")

    def __repr__(self) -> str:
        k = self.kernels[0] if self.kernels else None
        size = len(self._bytes) if self._bytes.__class__ is bytes else "?"
        return (f"<dvmlang.Bytecode {self.name} grid={k.grid if k else ()} v{self.major}.{self.minor} "
                f"{len(self.code)} words, {size} bytes>")

    def _fields(self) -> tuple:
        return (self.major, self.minor, self.flags, self.target, self.strings, self.params, self.layouts,
                self.kernels, self.code, self.relocs, self.debug, self.custom)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Bytecode):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None

    # ---- serialisation ------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The container bytes (serialised once, then cached)."""
        b = self._bytes
        if b is None:
            d = self.__dict__
            enc = d.get("_encoder")
            if enc is not None and d["_code_bytes"] is None:
                d["_code_bytes"] = self.code.tobytes() if enc._little else _swapped(self.code)
            b = self._bytes = _serialise(self) if enc is None else enc.container(d["_table"], d["_grid"],
                                                                                  d["_code_bytes"])
        return b

    def serialise(self) -> bytes:
        """Serialise the fields afresh, ignoring any cached bytes. For a bytecode read with ``from_bytes``
        this reproduces the input byte for byte: the reader accepts only the canonical encoding."""
        return _serialise(self)

    @classmethod
    @user_frames
    def from_bytes(cls, data, limits: C.Limits = C.LIMITS) -> "Bytecode":
        """Parse and validate bytes from outside. Any byte string gives a valid ``Bytecode`` or raises a
        ``BytecodeError``: ``MalformedBytecodeError`` when it cannot be decoded (``VersionError`` for an
        unsupported major version), ``InvalidBytecodeError`` when it decodes but is unsafe to run."""
        _check_limits(limits)
        try:
            bc = _parse(data, limits)
            bc.validate()
        except VersionError:
            raise
        except BytecodeError as e:
            raise _with_version_note(e, data) from None
        except RecursionError:  # pragma: no cover - nothing recurses on the input; belt and braces
            raise MalformedBytecodeError("structure nests too deeply") from None
        bc._bytes = bytes(data)
        return bc

    @user_frames
    def validate(self):
        """Run the validator (once per build); raises ``InvalidBytecodeError`` if the program is unsafe."""
        return self._decode(trust=False)

    def _decode(self, trust: bool):
        """Set ``decoded`` (once per build: every instance of an ``Encoder`` shares it). The device passes
        ``trust``: the code of a build the fuser composed in this process from validated fragments
        (``Encoder.trusted``) is then decoded without the validator's pass, as DVM's device decodes what its
        host encoded; everything else, and any explicit ``validate()``, meets the validator."""
        enc = self.__dict__.get("_encoder")
        if self.decoded is not None and (enc is None or enc.validated or trust):
            return self
        if enc is not None and enc.decoded is not None and (enc.validated or trust):
            self.decoded = enc.decoded  # another instance of the build was decoded since
            return self
        if trust and enc is not None and enc.trusted:
            from .decode import decode_kernels
            self.decoded = DecodedKernels(decode_kernels(self.code, self.kernels, enc._template.decoded))
        else:
            from .validator import validate
            decoded = validate(self)
            self.decoded = enc.decoded if enc is not None and enc.decoded is not None else DecodedKernels(decoded)
            if enc is not None:
                enc.validated = True
        if enc is not None:
            enc.decoded = self.decoded  # the verdict holds for every instance of the build (Encoder)
        return self

    @user_frames
    def save(self, path) -> Path:
        """Write the container to ``path`` (conventionally ``*.dvmb``). The file is written under a temporary
        name and renamed, so a reader never sees half a file."""
        path = _as_path(path, "Bytecode.save")
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(self.to_bytes())
            os.replace(tmp, path)
        except OSError as e:
            raise DvmError(f"cannot write {path}: {e.strerror}") from None
        return path

    @classmethod
    @user_frames
    def load(cls, path, limits: C.Limits = C.LIMITS) -> "Bytecode":
        """Read and validate a ``.dvmb`` file. Loading is safe on untrusted files: the bytes are parsed by
        the bounds-checked reader and validated; nothing is unpickled or evaluated."""
        _check_limits(limits)
        return cls.from_bytes(read_file(_as_path(path, "Bytecode.load"), limits.max_file_bytes), limits)

    @user_frames
    def disassemble(self, *, source: bool = True) -> str:
        """The program as text, ``dis``-style: line | offset | pipe | OPNAME | operands | ; comment."""
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
                      debug=self.debug, custom=self.custom)
        bc.decoded = self.decoded
        bc.template_key = self.template_key
        return bc


class DecodedKernels(list):
    """Per kernel, its decoded instructions (a validated bytecode's ``decoded``, shared by every instance of a
    build), and what a device made of them (``machines``: the simulator's steps per kernel and profile), which
    live as long as the build does."""

    __slots__ = ("machines",)

    def __init__(self, kernels=()):
        super().__init__(kernels)
        self.machines: dict = {}


def _as_path(path, what: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{what} expects a file path (str or os.PathLike), got {type(path).__name__}")
    return Path(path)


def _check_limits(limits):
    if not isinstance(limits, C.Limits):
        raise ArgumentError(f"Bytecode.from_bytes/load expects limits=dvmlang.vm.container.Limits(...), got "
                            f"{type(limits).__name__}")


def _with_version_note(e: BytecodeError, data) -> BytecodeError:
    """Errors in a file from a newer minor version say so: the file may use something this reader lacks."""
    try:
        raw = bytes(data[:6])
    except Exception:  # noqa: BLE001 - not bytes at all; nothing to add
        return e
    if len(raw) == 6 and raw[:4] == C.MAGIC and raw[4] == C.VERSION_MAJOR and raw[5] > C.VERSION_MINOR:
        note = (f" (the file is bytecode version {raw[4]}.{raw[5]}, newer than this dvmlang's "
                f"{C.VERSION_MAJOR}.{C.VERSION_MINOR}; it may use a feature this version does not know)")
        return type(e)(e.reason + note, section=e.section, offset=e.offset, expected=e.expected, found=e.found)
    return e


# ---- encoder ---------------------------------------------------------------------------------------------------


class Encoder:
    """Encodes launch instances of one build.

    Everything that depends only on the build is prepared here, once: the static sections are
    serialised, the per-parameter prefixes of the parameter table are laid out, and the template is
    validated (with placeholder shapes; a launch instance differs from it only in immediate words and
    metadata the validator does not depend on). ``encode`` then only patches words and writes the
    per-instance parameter table, grid and checksum."""

    def __init__(self, template, params: list[ParamInfo], target: TargetInfo, sources: dict | None = None,
                 validate: bool = True):
        """``validate=False`` leaves the template's validation to the first instance the device runs (a composed
        fused kernel, validated when its fragments were; every instance shares that first verdict)."""
        self.target = target
        strings: list[str] = []
        sid: dict[str, int] = {}

        def intern(s: str) -> int:
            if s not in sid:
                sid[s] = len(strings)
                strings.append(s)
            return sid[s]

        for s in template.strings:
            intern(s)
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
        self.flags = C.FLAG_CHECKSUM | (C.FLAG_SOURCES if self.debug.sources else 0)
        self.relocs = sorted(list(template.relocs) + [(w, 1, p) for w, p, _ in template.scalar_slots])
        self.layouts = template.layouts
        self._words = array("Q", template.words)
        self._template = template
        self._sid = sid
        self._pre = None  # the sections every instance's container shares: made when bytes are first asked for
        self._param_head = C.uleb(len(params))
        self._param_pre = [(p.kind == "tensor", bytes([0 if p.kind == "tensor" else 1]) + C.uleb(sid[p.name]) +
                            bytes([p.dtype.code, p.rank]), p.dtype.itemsize, p.name, p.dtype) for p in params]
        # encode_values: each tensor's entry starts with the scalar entries before it (they never change)
        self._tensor_pre = []
        fixed = b""
        for i, (is_tensor, pre, itemsize, name, dtype) in enumerate(self._param_pre):
            if is_tensor:
                self._tensor_pre.append((i, fixed + pre, itemsize))
                fixed = b""
            else:
                fixed += pre
        gm_words = [[] for _ in params]
        for w, _, p in template.relocs:
            gm_words[p].append(w)
        # encode_values' patch list: per tensor, its table entry's fixed prefix and the words of its address
        self._tensor_patches = [(i, pre, itemsize, tuple(gm_words[i])) for i, pre, itemsize in self._tensor_pre]
        # the first instance is patched by a loop over the tables; the straight-line patcher is generated for the
        # second (a build that is encoded once, as most fused kernels are per length, never pays its compile)
        self._patch_tables = (template.scalar_slots, self._tensor_patches, [p.rank for p in params])
        self._patch = self._first_patch
        self._looped = 0  # instances patched by the loop so far
        # composed in this process by the fuser from validated fragments (``fuser/build.trusted``): decoded at the
        # first launch, not validated (the test suite validates every one)
        self.trusted = False
        self.validated = False  # an instance has been through the validator (its verdict holds for them all)
        self.fits = None  # the profile an instance was checked to fit (Device._ready): its buffers fit for all
        self._names = [(p.name, p.dtype) for p in params]
        self._param_tail = fixed
        self._params_fixed = [None if p.kind == "tensor" else ParamInfo("scalar", p.name, p.dtype) for p in params]
        self._entries: OrderedDict = OrderedDict()  # (dtype, shape, byte strides, ...) -> _tensor_entry(...)
        self._kernel = KernelInfo(template.name, (1, 1, 1), 0, len(template.words), list(template.reg_types),
                                  {s: template.footprint.get(s, 0) for s in C.SPACES}, template.double_buffer,
                                  template.kind == "mix")
        self._little = sys.byteorder == "little"
        self._infos: dict = {}  # grid -> KernelInfo (kernel_info)
        proto = Bytecode(major=C.VERSION_MAJOR, minor=C.VERSION_MINOR, flags=self.flags, target=target,
                         strings=strings, params=[], layouts=self.layouts, kernels=[], code=array("Q"),
                         relocs=self.relocs, debug=self.debug)
        proto.template_key = next(_TEMPLATE_KEYS)  # unique for the process, unlike id() of a freed encoder
        # the fields every instance of this build has in common, and a place for each of an instance's own (an
        # instance's dict is a copy: no insertion, no resizing), but its kernel record's (Bytecode.__getattr__)
        self._shared = dict(proto.__dict__, _encoder=self, _table=None, _grid=None, _code_bytes=None, encode_s=0.0)
        del self._shared["kernels"]
        self._params = params
        self.decoded = None
        if validate:
            self.validate_template()

    def validate_template(self, trust: bool = False) -> None:
        """Validate the template (an instance with placeholder shapes and zero scalars): the verdict every
        instance of the build shares. Done at once unless the build asked otherwise (a composed kernel's is done
        by its first launch, or ahead of it, on the background worker, for a plan built ahead). ``trust``: decoded
        only, when the build is ``trusted`` (``Bytecode._decode``)."""
        if self.decoded is not None:
            return
        params = self._params
        placeholder = [ParamInfo(p.kind, p.name, p.dtype, p.rank, (1,) * p.rank if p.kind == "tensor" else (),
                                 (1,) * p.rank if p.kind == "tensor" else ()) for p in params]
        scalars = {i: 0 for i, p in enumerate(params) if p.kind == "scalar"}
        self.decoded = self.encode(placeholder, scalars, (1, 1, 1))._decode(trust).decoded

    def _first_patch(self, code, values, keys) -> None:
        """``_patcher``'s work as a loop over the build's tables (the first ``_LOOPED`` instances); later instances
        get the generated straight-line patcher (writing it costs what about ten instances save: a build that
        meets only a few shapes never pays it)."""
        self._looped += 1
        if self._looped >= _LOOPED:
            self._patch = self._compiled_patch
        slots, tensors, ranks = self._patch_tables
        for w, p, d in slots:
            code[w] = _CONVERTERS[d](values[p])
        cur = GM_BASE
        for n, (i, _, itemsize, words) in enumerate(tensors):
            for w in words:
                code[w] = cur
            if n + 1 < len(tensors):
                count = 1
                for x in keys[i][1][:ranks[i]]:
                    count *= x
                cur += gm_span(count, itemsize)

    def _compiled_patch(self, code, values, keys) -> None:
        self._patch = patch = _patcher(*self._patch_tables)
        patch(code, values, keys)

    def encode(self, params: list[ParamInfo], scalars: dict[int, object], grid: tuple[int, int, int]) -> Bytecode:
        """One launch instance from its parameter table: ``params`` (shapes and strides of the tensors,
        strides in elements), ``scalars`` (parameter index -> value) and the grid."""
        code = self._words[:]
        self._patch(code, scalars, {i: (p.dtype, p.shape) for i, p in enumerate(params) if p.kind == "tensor"})
        parts = [self._param_head]
        for p, (is_tensor, pre, itemsize, _, _) in zip(params, self._param_pre):
            parts.append(pre)
            if is_tensor:
                parts.append(_tensor_entry(p.shape, tuple(x * itemsize for x in p.strides), itemsize)[0])
        return self._instance(code, parts, params, grid)

    def encode_values(self, values: list, grid: tuple[int, int, int], keys=None) -> Bytecode:
        """One launch instance from the runtime parameters' values in order (C-contiguous numpy arrays for
        tensors, numbers for scalars): the launch path's encoder. Only the tensors are visited, for the
        global memory each spans (which places the next); the scalar parameters' table entries and
        ``ParamInfo`` records never change and are reused. The parameter table itself is written with the
        container bytes, when they are first asked for (``table``; a launch never asks). ``keys``, when
        given, holds each tensor's ``(dtype, shape, strides in bytes, ...)`` already read from the array by
        the launch path."""
        code = self._words[:]
        if keys is None:
            keys = tuple([(v.dtype, v.shape, v.strides) if isinstance(v, np.ndarray) else None for v in values])
        self._patch(code, values, keys)
        return self._instance(code, keys, None, grid)  # ParamInfo records: made on first use too

    def table(self, keys) -> list[bytes]:
        """The parameter table of an ``encode_values`` instance from its tensors' keys, as parts to join: each
        tensor's entry is remembered by key (tensors of one shape recur within and across launches)."""
        parts = [self._param_head]
        append = parts.append
        entries = self._entries
        for i, pre, itemsize, _ in self._tensor_patches:
            key = keys[i]
            e = entries.get(key)
            if e is None:
                e = _tensor_entry(key[1], key[2], itemsize)
                if len(entries) >= 4096:
                    entries.popitem(last=False)  # the oldest, one at a time: never a pause to clear them all
                entries[key] = e
            append(pre)
            append(e[0])
        append(self._param_tail)
        return parts

    def param_infos(self, keys) -> list[ParamInfo]:
        """The parameter table of an instance from its tensors' (dtype, shape, byte strides, ...) keys."""
        p = self._params_fixed[:]
        for i, _, itemsize in self._tensor_pre:
            _, shape, byte_strides = keys[i][:3]
            name, dtype = self._names[i]
            p[i] = ParamInfo("tensor", name, dtype, len(shape), shape, tuple([x // itemsize for x in byte_strides]))
        return p

    def _instance(self, code, table, params, grid) -> Bytecode:
        """The ``Bytecode`` of patched ``code``, its parameter table (``table``: a list of bytes to join, or the
        tensors' keys it is written from, a tuple: see ``encode_values``; ``params``: its ``ParamInfo`` records,
        or None to make them from the keys when first read) and ``grid``. Its container bytes are written when
        first asked for (``to_bytes``; a launch never asks), from what this instance was encoded with: the code
        as it is now (a copy of its bytes), the table and the grid; its kernel record when first read."""
        # every instance shares the build's fields: a copy of a dict instead of Bytecode.__init__
        bc = Bytecode.__new__(Bytecode)
        bc.__dict__ = fields = self._shared.copy()
        fields["_params"] = params
        fields["_table"] = table
        fields["_grid"] = grid
        fields["code"] = code
        fields["_code_bytes"] = None  # (made from ``code``, which no one changes, when the bytes are asked for)
        fields["decoded"] = self.decoded
        return bc

    def kernel_info(self, grid) -> KernelInfo:
        """The kernel record of ``grid``, shared by the instances launched with it (never changed)."""
        infos = self._infos
        info = infos.get(grid)
        if info is None:
            if len(infos) >= 64:  # the oldest goes, one at a time: no pause to clear them all, and a stream of
                del infos[next(iter(infos))]  # new grids frees a record per record made (no garbage to collect)
            k = self._kernel
            info = infos[grid] = KernelInfo(k.name, grid, 0, k.code_words, k.reg_types, k.footprint,
                                            k.double_buffer, k.mix)
        return info

    def _sections(self) -> None:
        """The container sections every instance shares (made once, when an instance's bytes are first asked
        for: a launch never asks)."""
        template, sid, target = self._template, self._sid, self.target
        self._pre = b"".join([C.section("target", C.encode_target(target)),
                              C.section("symbols", C.encode_symbols(self.strings))])
        self._mid = C.section("layouts", C.encode_layouts(template.layouts)) + bytes([C.SECTION_IDS["kernels"]])
        self._kernel_head = b"\x01" + C.uleb(sid[template.name])
        self._kernel_tail = (C.uleb(0) + C.uleb(len(template.words)) + C.uleb(len(template.reg_types)) +
                             bytes(d.code for d in template.reg_types) +
                             b"".join(C.uleb(template.footprint.get(s, 0)) for s in C.SPACES) +
                             bytes([int(template.double_buffer) | (int(template.kind == "mix") << 1)]))
        self._code_hdr = bytes([C.SECTION_IDS["code"]]) + C.uleb(8 * len(template.words))
        self._post = (C.section("relocs", C.encode_relocs(self.relocs)) +
                      C.section("debug", C.encode_debug(self.debug, sid, bool(self.debug.sources))))
        self._checksum_hdr = bytes([C.SECTION_IDS["checksum"]]) + C.uleb(4)
        self._head_pre = C.header(self.flags) + self._pre
        self._pre_crc = zlib.crc32(self._head_pre)  # the checksum runs on from the static prefix

    def container(self, parts, grid, code_bytes) -> bytes:
        """The container bytes of one instance (``_instance``)."""
        if self._pre is None:
            self._sections()
        if parts.__class__ is not list:  # the tensors' keys (``encode_values``): the table is written now
            parts = self.table(parts)
        ptab = b"".join(parts)
        uleb = C.uleb
        ksec = self._kernel_head + uleb(grid[0]) + uleb(grid[1]) + uleb(grid[2]) + self._kernel_tail
        mid = b"".join((b"\x03", uleb(len(ptab)), ptab, self._mid, uleb(len(ksec)), ksec, self._code_hdr))
        crc = zlib.crc32(self._post, zlib.crc32(code_bytes, zlib.crc32(mid, self._pre_crc)))
        return b"".join((self._head_pre, mid, code_bytes, self._post, self._checksum_hdr, _U32.pack(crc)))


# value -> its unsigned / signed LEB128 bytes: dimensions and strides recur
_LEB: tuple[OrderedDict, OrderedDict] = (OrderedDict(), OrderedDict())


def _leb(memo: OrderedDict, n: int, write) -> bytes:
    """``write(n)``, remembered in ``memo`` (the oldest dropped when full); callers look ``n`` up first."""
    if len(memo) >= 1 << 16:
        memo.popitem(last=False)
    b = memo[n] = write(n)
    return b


def _tensor_entry(shape, byte_strides, itemsize: int) -> tuple[bytes, tuple[int, ...], int]:
    """A tensor's parameter-table entry after its kind/name/dtype/rank prefix: (LEB128 dimensions then
    strides in elements, the strides in elements, the global memory it spans: ``gm_span``)."""
    us, ss = _LEB
    strides = tuple([x // itemsize for x in byte_strides])
    out = []
    n = 1
    for d in shape:
        out.append(us.get(d) or _leb(us, d, C.uleb))  # LEB128 bytes are never empty
        n *= d
    for d in strides:
        out.append(ss.get(d) or _leb(ss, d, C.sleb))
    return b"".join(out), strides, gm_span(n, itemsize)


def _swapped(code: array) -> bytes:
    c = array("Q", code)
    c.byteswap()
    return c.tobytes()


# ---- whole-object serialisation and parsing -------------------------------------------------------------


def _serialise(bc: Bytecode) -> bytes:
    sid: dict[str, int] = {}
    for i, s in enumerate(bc.strings):
        sid.setdefault(s, i)
    known = [("target", C.encode_target(bc.target)),
             ("symbols", C.encode_symbols(bc.strings)),
             ("params", C.encode_params(bc.params, sid)),
             ("layouts", C.encode_layouts(bc.layouts)),
             ("kernels", C.encode_kernels(bc.kernels, sid)),
             ("code", bc.code.tobytes() if sys.byteorder == "little" else _swapped(bc.code)),
             ("relocs", C.encode_relocs(bc.relocs))]
    if bc.debug is not None and bc.debug.present:
        known.append(("debug", C.encode_debug(bc.debug, sid, bool(bc.flags & C.FLAG_SOURCES))))
    parts = [C.header(bc.flags, bc.major, bc.minor)]
    customs = list(bc.custom)

    def customs_after(section_id: int):
        for after, name, payload in customs:
            if after == section_id:
                parts.append(C.custom_section(name, payload))

    customs_after(0)
    for name, payload in known:
        parts.append(C.section(name, payload))
        customs_after(C.SECTION_IDS[name])
    body = b"".join(parts)
    if bc.flags & C.FLAG_CHECKSUM:
        body += C.checksum_section(body)
    return body


# The sections every instance of one build has in common (target, symbols, layouts, relocations, debug), read
# once: their contents by their exact bytes and everything else their reading depends on (the limits, the
# code's size, the sources flag). Only containers read in full are remembered, so an entry holds sections
# that passed every check; any other bytes are read, and refused, exactly as without it.
_STATIC: dict = {}
_MAX_STATIC = 256


def _parse(data, limits: C.Limits, verify: bool = True) -> Bytecode:
    """The ``Bytecode`` of container bytes, unvalidated; any fault is a ``MalformedBytecodeError``."""
    lay = C.split_sections(data, limits, verify)
    sections, data, flags = lay.sections, lay.data, lay.flags

    def reader(name):
        s, e = sections[name]
        return C.Reader(data, s, e, name)

    cs, ce = sections["code"]
    static = tuple(data[a:b] for a, b in (sections[n] for n in ("target", "symbols", "layouts", "relocs")))
    dbg = sections.get("debug")
    key = (limits, flags & C.FLAG_SOURCES, ce - cs, static, data[dbg[0]:dbg[1]] if dbg else None)
    known = _STATIC.get(key)
    if known is None:
        target = C.read_target(reader("target"), limits)
        strings = C.read_symbols(reader("symbols"), limits)
    else:
        target, strings, layouts, relocs, debug = known
    params = C.read_params(reader("params"), limits, strings)
    if known is None:
        layouts = C.read_layouts(reader("layouts"), limits)
    code = C.read_code(data, cs, ce, limits)
    kernels = C.read_kernels(reader("kernels"), limits, strings, sections["kernels"][0])
    if known is None:
        relocs = C.read_relocs(reader("relocs"), limits)
        debug = C.read_debug(reader("debug"), limits, strings, len(code), flags) if dbg else DebugInfo(present=False)
        if len(_STATIC) >= _MAX_STATIC:
            _STATIC.clear()  # (one call: safe against another thread reading at the same time)
        _STATIC[key] = (target, strings, layouts, relocs, debug)
    custom = [(after, name, data[s:e]) for after, name, s, e in lay.customs]
    # each container gets its own lists (a caller may edit one); the records in them are shared
    debug = DebugInfo(list(debug.files), list(debug.lines), dict(debug.sources), debug.present)
    return Bytecode(major=lay.major, minor=lay.minor, flags=flags, target=target, strings=list(strings), params=params,
                    layouts=list(layouts), kernels=kernels, code=code, relocs=list(relocs), debug=debug, custom=custom)
