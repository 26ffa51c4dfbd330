"""Show any bytes as bytecode, even bytes that fail their checks: the ``dvmlang disasm`` view of a file.

``disassemble_bytes`` parses (``vm/bytecode``), validates and formats (``vm/disasm``) what it can; where the
container is damaged it falls back to the header, the list of sections and the raw words of the code section,
and reports every error. It never raises.
"""

from __future__ import annotations

import struct
import sys
from array import array

from ..errors import BytecodeError, MalformedBytecodeError, VersionError
from . import container as C
from .bytecode import Bytecode, _parse
from .disasm import Disassembly, disassemble


def disassemble_bytes(data: bytes, *, source: bool = True) -> Disassembly:
    """Disassemble bytes from outside. Never raises: a container that fails its checks is still shown as
    far as it can be read — with its checksums ignored if that is all that is wrong, else as a list of
    sections and the raw words of its code section — and every error is reported and marked."""
    errors: list[str] = []
    head: list[str] = []
    try:
        data = bytes(data)
    except Exception as e:  # noqa: BLE001 - not bytes at all
        return Disassembly(f"; error: expected bytes, got {type(data).__name__}", False, [str(e)])
    bad_offset = None
    try:
        bc = _parse(data, C.LIMITS)
    except BytecodeError as e:
        errors.append(str(e))
        bad_offset = e.offset
        bc = None
        if not isinstance(e, VersionError):
            try:
                bc = _parse(data, C.LIMITS, verify=False)  # a bad checksum alone: show what the bytes say
                head.append("; (checksums ignored to show the contents)")
            except BytecodeError:
                bc = _raw_code(data)
                if bc is not None:
                    head.append("; (metadata unreadable: the code section's words, without names or layouts)")
        head = _describe_header(data, bad_offset) + head
    invalid_pc = None
    if bc is not None and bc.kernels and bc.kernels[0].name != "?":
        try:
            bc.validate()
        except BytecodeError as e:
            errors.append(str(e))
            if e.offset is not None and e.section and e.section.startswith("code"):
                invalid_pc = e.offset // 8
    if bc is None:
        result = Disassembly("\n".join(head), False)
    else:
        result = disassemble(bc, source=source, invalid_pc=invalid_pc)
        if head:
            result.text = "\n".join(head) + "\n" + result.text
    if errors:
        result.text += "\n; error: " + "\n; error: ".join(errors)
        result.errors = errors + result.errors
        result.ok = False
    return result


def _sections(data: bytes):
    """(id, section start, payload start, payload end) of every section that can be located."""
    out = []
    pos = C.HEADER_SIZE
    while pos < len(data):
        try:
            r = C.Reader(data, pos + 1, len(data), "?")
            size = r.uleb(32)
        except MalformedBytecodeError:
            out.append((data[pos], pos, None, None))
            break
        out.append((data[pos], pos, r.pos, r.pos + size))
        pos = r.pos + size
    return out


def _raw_code(data: bytes):
    """A stand-in ``Bytecode`` holding just the whole words of the code section, or None."""
    if len(data) < C.HEADER_SIZE or data[:4] != C.MAGIC:
        return None
    for sid, _, start, end in _sections(data):
        if sid == C.SECTION_IDS["code"] and start is not None:
            end = min(end, len(data))
            n = (end - start) // 8
            if n == 0:
                return None
            code = array("Q")
            code.frombytes(data[start:start + 8 * n])
            if sys.byteorder != "little":
                code.byteswap()
            major, minor, flags = struct.unpack_from("<BBH", data, 4)
            return Bytecode(major=major, minor=minor, flags=flags, target=C.TargetInfo("?", 0, 0, 0, 0, 0, 0, 0),
                            strings=[], params=[], layouts=[],
                            kernels=[C.KernelInfo("?", (1, 1, 1), 0, n, [], {})], code=code, relocs=[],
                            debug=C.DebugInfo(present=False))
    return None


def _describe_header(data: bytes, bad_offset: int | None = None) -> list[str]:
    lines = [f"; {len(data)} bytes"]
    if len(data) >= 8 and data[:4] == C.MAGIC:
        major, minor, flags = struct.unpack_from("<BBH", data, 4)
        mark = "  <-- error here" if bad_offset is not None and bad_offset < C.HEADER_SIZE else ""
        lines.append(f"; header: magic ok, version {major}.{minor}, flags {flags:#x}{mark}")
        for sid, pos, start, end in _sections(data):
            name = C.SECTION_NAMES.get(sid, f"#{sid}")
            if start is None:
                lines.append(f"; section {name} at offset {pos}: unreadable size  <-- error here")
                break
            inside = bad_offset is not None and pos <= bad_offset < max(end, pos + 1)
            past = "" if end <= len(data) else f" (only {len(data) - start} present)"
            lines.append(f"; section {name} at offset {pos}, {end - start} bytes{past}"
                         + ("  <-- error here" if inside else ""))
    elif len(data) >= 4:
        lines.append(f"; header: bad magic {data[:4]!r}  <-- error here")
    else:
        lines.append("; header: truncated  <-- error here")
    return lines
