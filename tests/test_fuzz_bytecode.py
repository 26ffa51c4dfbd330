"""Fuzzing the bytecode reader, validator, device and disassembler with mutated real bytecodes.

The property, for any byte string: ``Bytecode.from_bytes`` either raises a ``dvmlang.BytecodeError`` or
returns a program that (a) re-serialises to exactly the same bytes (the reader accepts only the
canonical encoding) and (b) runs on small arrays built from its own parameter table. Running may end in
a ``dvmlang.DeviceError`` — a memory fault, the watchdog, a trap — which is the safe outcome for a
program that is well-formed but computes nonsense. Nothing else may escape: no other exception type,
no crash, no hang (the fuzz device's watchdog is small). The disassembler never raises on any input.

Mutations: random bit flips, truncation at every length, inserted and deleted bytes, section size fields
and counts off by one, and structure-aware edits of the code (opcode swaps, operand words, dtype codes,
sync fields). Most mutations are "resealed" (header CRC and checksum recomputed) so they reach the
parser's and validator's deeper checks instead of stopping at the checksum.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dvmlang
from dvmlang.vm import container as C
from dvmlang.vm import isa
from dvmlang.vm.dump import disassemble_bytes
from test_bytecode_samples import FUZZ_DEVICE, SAMPLES, sample_bytes, small_args

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning", "ignore::dvmlang.DvmWarning")

FUZZ = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEEP = settings(FUZZ, max_examples=600)  # mutations that often decode: these reach the validator and device


# ---- the property -----------------------------------------------------------------------------------------------


def outcome(data: bytes) -> str:
    """Check the property for one byte string; returns what happened."""
    try:
        bc = dvmlang.Bytecode.from_bytes(data)
    except dvmlang.BytecodeError as e:
        assert e.reason and str(e).split(":")[0] in ("malformed bytecode", "invalid bytecode", "unsupported bytecode")
        dis = disassemble_bytes(data)
        assert not dis.ok and dis.errors
        return "rejected"
    assert bc.serialise() == bytes(data), "an accepted container must be in canonical form"
    dis = disassemble_bytes(data)
    assert dis.ok, dis.errors
    try:
        dvmlang.run(bc, *small_args(bc), device=FUZZ_DEVICE)
    except dvmlang.DeviceError:
        return "faulted"
    except dvmlang.ResourceError:
        return "does not fit the device"  # a footprint the file's target allows but this device does not
    except dvmlang.BytecodeError:
        return "refused at run time"  # the device's own backstop (a decoder limitation, never a crash)
    return "ran"


def reseal(data: bytes) -> bytes:
    """Recompute the header CRC and, when the container still ends in a checksum section, the checksum."""
    data = bytearray(data)
    if len(data) >= 12:
        data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[:8])))
    if len(data) >= 18 and data[-6] == C.SECTION_IDS["checksum"] and data[-5] == 4:
        data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-6])))
    return bytes(data)


def size_fields(data: bytes):
    """(offset, length, value) of every section's LEB128 size field, and of the first LEB128 count inside
    each section that starts with one."""
    out = []
    pos = C.HEADER_SIZE
    while pos < len(data):
        r = C.Reader(data, pos + 1, len(data), "?")
        size = r.uleb(32)
        out.append((pos + 1, r.pos - pos - 1, size))
        sid = data[pos]
        if C.SECTION_NAMES[sid] in ("symbols", "params", "layouts", "kernels", "relocs", "debug"):
            cr = C.Reader(data, r.pos, r.pos + size, "?")
            n = cr.uleb(32)
            out.append((r.pos, cr.pos - r.pos, n))
        pos = r.pos + size
    return out


def replace_field(data: bytes, at: int, length: int, value: int) -> bytes:
    return data[:at] + C.uleb(value) + data[at + length:]


# ---- deterministic sweeps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_truncation_at_every_length(name):
    data = sample_bytes(name)
    for n in range(len(data)):
        with pytest.raises(dvmlang.MalformedBytecodeError):
            dvmlang.Bytecode.from_bytes(data[:n])
        assert not disassemble_bytes(data[:n]).ok


@pytest.mark.parametrize("name", SAMPLES)
def test_resealed_truncation_of_the_code_at_every_word(name):
    """Cut the code section at every word (sizes fixed up, checksums recomputed): always malformed or
    invalid, never a crash."""
    data = sample_bytes(name)
    layout = C.split_sections(data)
    s, e = layout.sections["code"]
    code_id = s - len(C.uleb(e - s)) - 1
    for words in range(0, (e - s) // 8):
        cut = data[:code_id] + C.section("code", data[s:s + 8 * words]) + data[e:]
        assert outcome(reseal(cut)) == "rejected"


@pytest.mark.parametrize("name", SAMPLES)
def test_size_fields_off_by_one(name):
    data = sample_bytes(name)
    results = set()
    for at, length, value in size_fields(data):
        for v in (value - 1, value + 1):
            if v < 0:
                continue
            m = replace_field(data, at, length, v)
            results.add(outcome(m))
            results.add(outcome(reseal(m)))
    assert results == {"rejected"}


@pytest.mark.parametrize("name", SAMPLES)
def test_every_single_bit_flip_in_the_header(name):
    data = sample_bytes(name)
    for bit in range(C.HEADER_SIZE * 8):
        m = bytearray(data)
        m[bit // 8] ^= 1 << (bit % 8)
        assert outcome(bytes(m)) == "rejected"


# ---- hypothesis --------------------------------------------------------------------------------------------------

samples = st.sampled_from(SAMPLES)


@FUZZ
@given(samples, st.lists(st.integers(min_value=0, max_value=1 << 20), min_size=1, max_size=3), st.booleans())
def test_random_bit_flips(name, positions, resealed):
    data = bytearray(sample_bytes(name))
    bits = {p % (len(data) * 8) for p in positions}
    for bit in bits:
        data[bit // 8] ^= 1 << (bit % 8)
    data = bytes(data)
    got = outcome(reseal(data) if resealed else data)
    if not resealed:
        assert got == "rejected"  # CRC-32 catches every error of up to 3 bits at these sizes


@FUZZ
@given(samples, st.integers(min_value=0), st.binary(min_size=1, max_size=8), st.booleans())
def test_inserted_bytes(name, where, blob, resealed):
    data = sample_bytes(name)
    at = where % (len(data) + 1)
    m = data[:at] + blob + data[at:]
    outcome(reseal(m) if resealed else m)


@FUZZ
@given(samples, st.integers(min_value=0), st.integers(min_value=1, max_value=8), st.booleans())
def test_deleted_bytes(name, where, count, resealed):
    data = sample_bytes(name)
    at = where % len(data)
    m = data[:at] + data[at + count:]
    outcome(reseal(m) if resealed else m)


@DEEP
@given(samples, st.integers(min_value=0), st.sampled_from(["opcode", "operand", "dtype", "sync", "head"]),
       st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_structured_code_edits(name, which, kind, value):
    """Edit one instruction so that the result often still decodes: the validator has to catch it, or the
    device has to run it safely."""
    data = bytearray(sample_bytes(name))
    bc = dvmlang.Bytecode.from_bytes(bytes(data))
    s, _ = C.split_sections(bytes(data)).sections["code"]
    d = bc.decoded[0][which % len(bc.decoded[0])]
    head = d.head
    if kind == "opcode":  # another instruction of the same length (a plausible but wrong one)
        same = [i for i in isa.TABLE if i.words == d.ins.words]
        ins = same[value % len(same)]
        head = (head & ~0x7FFFF) | ins.opcode | (int(ins.pipe) << isa.PIPE_SHIFT)
    elif kind == "dtype":
        head = (head & ~(0xF << isa.DTYPE_SHIFT)) | ((value % 15) << isa.DTYPE_SHIFT)
    elif kind == "sync":
        head ^= (value & 0x3FFF) << isa.SET_FLAG_SHIFT
    elif kind == "head":
        head ^= (value & 0xFFFFFF) << isa.PAYLOAD_SHIFT
    elif d.ins.words > 1:
        w = 1 + value % (d.ins.words - 1)
        small = (value >> 8) % 4096 if value & 1 else value
        struct.pack_into("<Q", data, s + (d.pc + w) * 8, small)
    struct.pack_into("<Q", data, s + d.pc * 8, head)
    outcome(reseal(bytes(data)))


@DEEP
@given(samples, st.data())
def test_metadata_edits(name, data):
    """Replace one LEB128 field anywhere in the metadata with another value (sizes and checksums kept
    consistent), reaching every parser path with well-formed but wrong numbers."""
    raw = sample_bytes(name)
    layout = C.split_sections(raw)
    s, e = layout.sections["code"]
    candidates = [i for i in range(C.HEADER_SIZE, len(raw) - 6) if not s <= i < e]
    at = data.draw(st.sampled_from(candidates))
    byte = data.draw(st.integers(min_value=0, max_value=255))
    m = bytearray(raw)
    m[at] = byte
    outcome(reseal(bytes(m)))


def test_garbage_never_crashes():
    rng = __import__("random").Random(5)
    for n in (0, 1, 12, 13, 64, 300):
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(n))
            assert outcome(blob) == "rejected"
            assert outcome(reseal(b"\x00dvm\x01\x01\x01\x00" + blob)) == "rejected"
