"""The .dvmb container: round trips, every malformed and invalid case by its message, limits, versions."""

from __future__ import annotations

import struct
import zlib
from array import array

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.vm import container as C
from dvmlang.vm import isa
from dvmlang.vm.bytecode import _parse, _serialise
from dvmlang.vm import bytecode
from dvmlang.vm.lower import encode_into
from test_bytecode_samples import KERNELS, SAMPLES, sample_args, sample_bytes

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")


# ---- helpers: craft containers ------------------------------------------------------------------------------


def parsed(name: str) -> dvmlang.Bytecode:
    """A sample parsed but not validated, to be edited and re-serialised."""
    return _parse(sample_bytes(name), C.LIMITS)


def reseal(data: bytes) -> bytes:
    """Recompute the header CRC and the trailing checksum section of (possibly edited) container bytes."""
    data = bytearray(data)
    data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[:8])))
    assert data[-6] == C.SECTION_IDS["checksum"] and data[-5] == 4
    data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-6])))
    return bytes(data)


def section_at(data: bytes, name: str) -> tuple[int, int, int]:
    """(offset of the section id, payload start, payload end) of a section."""
    pos = C.HEADER_SIZE
    while pos < len(data):
        r = C.Reader(data, pos + 1, len(data), "?")
        size = r.uleb(32)
        if data[pos] == C.SECTION_IDS[name]:
            return pos, r.pos, r.pos + size
        pos = r.pos + size
    raise KeyError(name)


def with_header(data: bytes, major: int, minor: int, flags: int | None = None) -> bytes:
    data = bytearray(data)
    data[4], data[5] = major, minor
    if flags is not None:
        data[6:8] = struct.pack("<H", flags)
    return reseal(bytes(data))


def malformed(data, match, limits=C.LIMITS):
    with pytest.raises(dvmlang.MalformedBytecodeError, match=match) as e:
        dvmlang.Bytecode.from_bytes(data, limits)
    return e.value


def invalid(bc: dvmlang.Bytecode, match):
    with pytest.raises(dvmlang.InvalidBytecodeError, match=match) as e:
        dvmlang.Bytecode.from_bytes(_serialise(bc))
    return e.value


def assemble(bc, pc, name, dtype=None, set_=None, wait=None, **vals):
    """Write one instruction into ``bc.code`` at ``pc`` (the lowering's own packer)."""
    ins = isa.BY_NAME[name]
    encode_into(bc.code, pc, ins, vals, dtype, set_, wait)
    return pc + ins.words


# ---- round trips ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_decode_of_encode_is_equal_and_reencodes_byte_for_byte(name):
    data = sample_bytes(name)
    bc = dvmlang.Bytecode.from_bytes(data)
    assert bc.to_bytes() == data
    assert bc.serialise() == data  # from the fields, not the cached bytes
    again = dvmlang.Bytecode.from_bytes(bc.serialise())
    assert again == bc


@pytest.mark.parametrize("name", SAMPLES)
def test_encoder_instances_equal_their_decoding(name):
    kernel = KERNELS[name]
    args, _ = sample_args(name)
    grid = {"matmul": (2, 1)}.get(name, (len(args[0]),))
    meta = {"vector_add": {"BLOCK": 128}, "softmax": {"BLOCK": 64}, "loop_if": {"BLOCK": 32},
            "matmul": {"BM": 16, "BN": 16, "BK": 16}, "gather_scan": {"BLOCK": 32}}[name]
    bc = kernel.encode(grid, *args, **meta)
    decoded = dvmlang.Bytecode.from_bytes(bc.to_bytes())
    assert decoded == bc
    assert _serialise(bc) == bc.to_bytes()  # the launch path's bytes are the canonical serialisation


def test_encode_and_encode_values_write_the_same_bytes():
    kernel = KERNELS["softmax"]
    x = np.random.default_rng(0).random((5, 40), dtype=np.float32)
    bc = kernel.encode((5,), np.zeros_like(x), x, 40, 40, BLOCK=64)
    enc = kernel.build_for(np.zeros_like(x), x, 40, 40, BLOCK=64).encoder
    scalars = {i: v for i, v in enumerate([None, None, 40, 40]) if v is not None}
    assert enc.encode(bc.params, scalars, (5, 1, 1)).to_bytes() == bc.to_bytes()
    # the patcher's addresses and immediates are what rebinding (gm_addresses, scalar_bits) writes
    assert bc.rebind(bc.params, scalars).code == bc.code


@dvmlang.kernel
def _scaled(x_ptr, y_ptr, s, n, B: dl.constexpr):
    offs = dl.arange(0, B)
    m = offs < n
    dl.store(y_ptr + offs, dl.load(x_ptr + offs, mask=m) * s, mask=m)


@pytest.mark.parametrize("s", [1e-5, -0.0, 0.0, 2.5, float("inf"), float("-inf"), float("nan"), 3.4028235e38,
                               3.4028235677973366e38, 1e39, -1e300, 1e-46, -1e-46])
def test_a_float_scalar_is_patched_as_scalar_bits_writes_it_and_computes_as_numpy(s):
    """The launch path's patcher writes a float32 immediate in line (``_patcher``); beyond float32 it rounds to
    infinity as numpy does, the same bits as ``scalar_bits`` (which ``rebind`` and ``encode`` write)."""
    x = np.arange(1, 17, dtype=np.float32)
    y = np.zeros(16, np.float32)
    bc = _scaled.encode((1,), x, y, s, 16, B=16)
    assert bc.rebind(bc.params, {2: s, 3: 16}).code == bc.code
    _scaled[(1,)](x, y, s, 16, B=16)
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(y, x * np.array(s).astype(np.float32))


@pytest.mark.parametrize("s", [1e-5, -0.0, 0.0, float("nan"), 3.4028235677973366e38, 1e39, -1e-46, 7])
def test_the_table_loop_and_the_straight_line_patcher_write_the_same_words(s):
    """A build's first instances are patched by a loop over its tables, later ones by the patcher generated for
    it (``bytecode._LOOPED``): for the same values both write the same words."""
    x = np.arange(1, 17, dtype=np.float32)
    y = np.zeros(37, np.float32)
    enc = _scaled.build_for(x, y, s, 16, B=16).encoder
    values = [x, y, s, 16]
    keys = tuple((a.dtype, a.shape, a.strides) if isinstance(a, np.ndarray) else None for a in values)
    looped, straight = enc._words[:], enc._words[:]
    enc._first_patch(looped, values, keys)
    bytecode._patcher(*enc._patch_tables)(straight, values, keys)
    assert looped == straight
    assert looped != enc._words  # (something was patched)


def test_the_field_loop_and_the_written_packer_pack_every_row_alike():
    """An ISA row's first instructions are packed by a loop over its fields, later ones by the packer written out for
    it (``assemble.WRITE_AFTER``): for every row, on random field values (wider than the fields: masked), the same
    words, head word and fields."""
    from dvmlang.vm.lower import assemble

    rng = np.random.default_rng(5)
    for ins in isa.BY_NAME.values():
        loop, written = assemble._packer(ins), assemble._written(ins)
        assemble._PACKERS.pop(id(ins), None)
        for _ in range(8):
            vals = {name: int(rng.integers(0, 1 << 62)) for name, *_ in ins.packing}
            head = int(rng.integers(0, 1 << 20)) << 40
            a, b = array("Q", bytes(8 * (ins.words + 1))), array("Q", bytes(8 * (ins.words + 1)))
            assert loop(a, 1, vals, head) == written(b, 1, vals, head), ins.name
            assert a == b, ins.name


def test_an_encoded_instance_makes_its_kernel_record_when_first_read():
    """``Encoder._instance`` leaves ``kernels`` to ``Bytecode.__getattr__``: made once, with the instance's grid,
    shared by the instances of that grid; any other missing attribute is an ``AttributeError``."""
    x = np.zeros(16, np.float32)
    a, b = (_scaled.encode((3,), x, x, s, 16, B=16) for s in (1.0, 2.0))
    c = _scaled.encode((2, 5), x, x, 2.0, 16, B=16)
    assert a is not b and "kernels" not in vars(a)
    assert a.kernels is a.kernels and a.kernels[0] is b.kernels[0] and a.grid == (3, 1, 1)
    assert c.kernels[0].grid == (2, 5, 1) and c.kernels[0].code_words == len(c.code)
    assert dvmlang.Bytecode.from_bytes(c.to_bytes()).kernels == c.kernels
    with pytest.raises(AttributeError, match="no_such_field"):
        a.no_such_field  # noqa: B018


def test_equality_sees_every_field():
    a = dvmlang.Bytecode.from_bytes(sample_bytes("softmax"))
    b = dvmlang.Bytecode.from_bytes(sample_bytes("softmax"))
    assert a == b
    b.code[0] ^= 1
    assert a != b
    c = dvmlang.Bytecode.from_bytes(sample_bytes("softmax"))
    c.params[0].shape = (1, 1)
    assert a != c


def test_custom_sections_are_skipped_and_kept_in_place():
    data = sample_bytes("vector_add")
    _, _, end = section_at(data, "params")
    custom = C.custom_section("producer", b"\x01\x02 any bytes")
    edited = data[:end] + custom + data[end:]
    edited = edited[:-6] + C.checksum_section(edited[:-6])
    edited = edited[:8] + struct.pack("<I", zlib.crc32(edited[:8])) + edited[12:]
    bc = dvmlang.Bytecode.from_bytes(edited)
    assert bc.custom == ((C.SECTION_IDS["params"], "producer", b"\x01\x02 any bytes"),)
    assert bc.serialise() == edited
    plain = dvmlang.Bytecode.from_bytes(data)
    assert bc != plain and bc.kernels == plain.kernels and list(bc.code) == list(plain.code)


# ---- malformed: the container ---------------------------------------------------------------------------------


def test_not_bytes():
    malformed("a string", "expected bytes, got str")


@pytest.mark.parametrize("n", [0, 3, 11])
def test_truncated_header(n):
    e = malformed(sample_bytes("vector_add")[:n], "truncated header")
    assert e.section == "header" and e.expected == "12 bytes" and e.found == str(n)


def test_bad_magic_names_what_it_found():
    e = malformed(b"\x80\x04\x95" + sample_bytes("vector_add")[3:], "bad magic")
    assert e.offset == 0 and "dvm" in e.expected


def test_header_crc_mismatch():
    data = bytearray(sample_bytes("vector_add"))
    data[6] ^= 2
    e = malformed(bytes(data), "header CRC mismatch")
    assert e.offset == 8


def test_checksum_mismatch():
    data = bytearray(sample_bytes("vector_add"))
    _, s, _ = section_at(bytes(data), "code")
    data[s] ^= 0x40
    e = malformed(bytes(data), "checksum mismatch")
    assert e.section == "checksum"


def test_unknown_flags():
    malformed(with_header(sample_bytes("vector_add"), 1, 1, flags=0x11), "unknown header flags")


def test_sources_flag_needs_a_debug_section():
    bc = parsed("vector_add")
    bc.debug.present = False
    bc.flags |= C.FLAG_SOURCES
    malformed(_serialise(bc), "flag `sources` is set but there is no debug section")


def test_sections_out_of_order():
    data = sample_bytes("vector_add")
    t0, _, t1 = section_at(data, "target")
    s0, _, s1 = section_at(data, "symbols")
    swapped = data[:t0] + data[s0:s1] + data[t0:t1] + data[s1:]
    e = malformed(reseal(swapped), "sections out of order or repeated")
    assert e.section == "target" and e.found == "target"


def test_unknown_section_id():
    data = sample_bytes("vector_add")
    _, _, end = section_at(data, "relocs")
    malformed(reseal(data[:end] + b"\x0c\x00" + data[end:]), "unknown section id")


def test_missing_section():
    data = sample_bytes("vector_add")
    r0, _, r1 = section_at(data, "relocs")
    malformed(reseal(data[:r0] + data[r1:]), "missing required section `relocs`")


def test_section_size_past_the_end():
    data = sample_bytes("vector_add")
    pos, _, _ = section_at(data, "checksum")
    malformed(data[:pos] + b"\x09\x05\x00\x00\x00\x00", "checksum section must hold 4 bytes|runs past the end")
    malformed(data[:pos + 1] + b"\x7f", "section runs past the end of the file")


def test_bytes_after_the_checksum():
    malformed(sample_bytes("vector_add") + b"\x00\x00", "bytes after the checksum section")


def test_checksum_section_without_the_flag():
    data = sample_bytes("vector_add")
    malformed(with_header(data, 1, 1, flags=int.from_bytes(data[6:8], "little") & ~C.FLAG_CHECKSUM),
              "checksum section present but the header flag is not set")


def test_checksum_flag_without_the_section():
    bc = parsed("vector_add")
    body = _serialise(bc)[:-6]
    malformed(body, "header promises a checksum section")


# ---- malformed: LEB128 and section payloads ---------------------------------------------------------------------


def test_leb128_rules():
    r = C.Reader(b"\x80\x00", 0, 2, "t")
    with pytest.raises(dvmlang.MalformedBytecodeError, match="non-canonical LEB128"):
        r.uleb(32)
    r = C.Reader(b"\xff\xff\xff\xff\x7f", 0, 5, "t")
    with pytest.raises(dvmlang.MalformedBytecodeError, match="integer too large"):
        r.uleb(32)
    r = C.Reader(b"\xff\xff\xff\xff\xff\x01", 0, 6, "t")
    with pytest.raises(dvmlang.MalformedBytecodeError, match="too long"):
        r.uleb(32)
    r = C.Reader(b"\xff\x7f", 0, 2, "t")  # -1 in two bytes: canonical is one byte
    with pytest.raises(dvmlang.MalformedBytecodeError, match="non-canonical signed LEB128"):
        r.sleb(48)
    r = C.Reader(b"\x80", 0, 1, "t")
    with pytest.raises(dvmlang.MalformedBytecodeError, match="unexpected end of section"):
        r.uleb(32)
    for n in (0, 1, 63, 64, 127, 128, 8191, 8192, -1, -64, -65, -(1 << 40), (1 << 47) - 1):
        b = C.sleb(n)
        assert C.Reader(b, 0, len(b), "t").sleb(48) == n
        if n >= 0:
            b = C.uleb(n)
            assert C.Reader(b, 0, len(b), "t").uleb(48) == n


def test_duplicate_symbol():
    bc = parsed("vector_add")
    bc.strings = bc.strings + [bc.strings[0]]
    malformed(_serialise(bc), "duplicate string in the symbol table")


def test_string_index_out_of_range():
    data = bytearray(sample_bytes("vector_add"))
    _, s, _ = section_at(bytes(data), "params")
    data[s + 2] = 0x7F  # the first parameter's name index
    malformed(reseal(bytes(data)), "string index out of range")


def test_unknown_dtype_code_in_a_parameter():
    bc = parsed("vector_add")
    data = bytearray(_serialise(bc))
    _, s, _ = section_at(bytes(data), "params")
    data[s + 3] = 15
    e = malformed(reseal(bytes(data)), "unknown dtype code")
    assert e.section == "params"


def test_trailing_bytes_in_a_section():
    data = sample_bytes("vector_add")
    t0, s, e = section_at(data, "target")
    payload = data[s:e] + b"\x00"
    malformed(reseal(data[:t0] + C.section("target", payload) + data[e:]), "section has trailing bytes")


def test_code_not_whole_words():
    data = sample_bytes("vector_add")
    c0, s, e = section_at(data, "code")
    malformed(reseal(data[:c0] + C.section("code", data[s:e - 3]) + data[e:]), "not a whole number of 64-bit words")


def test_count_larger_than_the_section():
    data = sample_bytes("vector_add")
    r0, s, e = section_at(data, "relocs")
    malformed(reseal(data[:r0] + C.section("relocs", C.uleb(1000) + data[s + 1:e]) + data[e:]),
              "relocations count exceeds the section")


def test_line_entry_beyond_the_code():
    bc = parsed("vector_add")
    bc.debug.lines.append((len(bc.code) + 5, 0, 1, 0))
    malformed(_serialise(bc), "line entry beyond the end of the code")


def test_unknown_opcode_and_reserved_bits_are_malformed():
    bc = parsed("vector_add")
    bc.code[0] = (bc.code[0] & ~0xFFFF) | 0x7777
    e = malformed(_serialise(bc), "unknown opcode")
    assert e.section == "code" and e.offset == 0 and e.found == "0x7777"
    bc = parsed("vector_add")
    head = bc.code[0]
    ins = isa.BY_OPCODE[head & 0xFFFF]
    bc.code[0] = head | (1 << (isa.PAYLOAD_SHIFT + sum(f.bits for f in ins.fields if f.head)))
    e = malformed(_serialise(bc), "reserved bits set in the head word")
    assert e.offset == 0
    bc = parsed("vector_add")
    bc.code[0] = head | (7 << isa.SET_EVENT_SHIFT)  # an event id without the set flag
    malformed(_serialise(bc), "reserved bits set in the head word")


def test_wrong_length_and_pipe_fields():
    bc = parsed("vector_add")
    bc.code[0] ^= 1 << isa.LEN_SHIFT
    malformed(_serialise(bc), "wrong length for")
    bc = parsed("vector_add")
    bc.code[0] ^= 1 << isa.PIPE_SHIFT
    malformed(_serialise(bc), "wrong pipe for")


# ---- limits -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field,value,match", [
    ("max_file_bytes", 100, "file too large"),
    ("max_sections", 3, "too many sections"),
    ("max_code_words", 8, "too many instruction words"),
    ("max_strings", 2, "too many strings"),
    ("max_params", 2, "too many parameters"),
    ("max_layouts", 0, "too many layouts"),
    ("max_registers", 2, "too many registers"),
    ("max_relocs", 1, "too many relocations"),
    ("max_grid", 2, "grid too large"),
    ("max_layout_bytes", 16, "layout larger than any on-chip memory"),
    ("max_string_bytes", 4, "string too long"),
])
def test_limits_are_enforced(field, value, match):
    import dataclasses
    limits = dataclasses.replace(C.LIMITS, **{field: value})
    malformed(sample_bytes("vector_add"), match, limits)


def test_default_grid_limit_matches_the_device():
    assert C.LIMITS.max_grid == dvmlang.npu.Device().profile.max_programs


# ---- invalid: decoded but unsafe --------------------------------------------------------------------------------


def test_branch_into_the_middle_of_an_instruction():
    bc = parsed("loop_if")
    jmp = next(d for d in dvmlang.Bytecode.from_bytes(sample_bytes("loop_if")).decoded[0] if d.ins.name == "JMP")
    assemble(bc, jmp.pc, "JMP", target=1)  # word 1 is the immediate of the first MOVI
    e = invalid(bc, "branch into the middle of an instruction")
    assert e.offset == jmp.pc * 8 and e.found == "1"


def test_branch_outside_the_kernel():
    bc = parsed("loop_if")
    jmp = next(d for d in dvmlang.Bytecode.from_bytes(sample_bytes("loop_if")).decoded[0] if d.ins.name == "JMP")
    assemble(bc, jmp.pc, "JMP", target=len(bc.code) + 3)
    invalid(bc, "branch target outside the kernel's code")


def test_loop_without_exit_is_invalid():
    bc = parsed("vector_add")
    # the last instruction is END; replace the one before it with a jump to itself
    decoded = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add")).decoded[0]
    last = decoded[-2]
    pc = last.pc
    for w in range(last.ins.words):
        bc.code[pc + w] = 0  # NOPs
    assemble(bc, pc, "JMP", target=pc)
    e = invalid(bc, "unbounded loop: no path from here reaches END")
    assert e.offset == pc * 8 and e.found == f"a loop from pc {pc} to pc {pc} with no exit"


def test_wait_without_a_matching_set():
    bc = parsed("vector_add")
    decoded = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add")).decoded[0]
    d = next(x for x in decoded if x.set is not None)
    bc.code[d.pc] &= ~(1 << isa.SET_FLAG_SHIFT | 0x3F << isa.SET_PIPE_SHIFT)
    invalid(bc, "wait without a matching set")


def test_register_out_of_range():
    bc = parsed("vector_add")
    assemble(bc, 0, "MOVI", dtype=dvmlang.dtypes.int32, rd=200, imm=0)
    e = invalid(bc, "register r200 .* does not exist")
    assert e.expected.startswith("<") and e.found == "200"


def test_register_of_the_wrong_type():
    bc = parsed("vector_add")
    assemble(bc, 0, "MOVI", dtype=dvmlang.dtypes.float64, rd=0, imm=0)
    invalid(bc, "register r0 .* has type")


def test_tile_outside_the_footprint():
    bc = parsed("vector_add")
    bc.kernels[0].footprint["ub"] = 64
    invalid(bc, "overflows the kernel's UB footprint")


def test_footprint_beyond_the_target():
    bc = parsed("vector_add")
    bc.kernels[0].footprint["ub"] = bc.target.ub_bytes + 32
    invalid(bc, "UB footprint exceeds the target")


def test_relocation_that_patches_the_wrong_word():
    bc = parsed("vector_add")
    w, kind, p = next(r for r in bc.relocs if r[1] == 0)
    bc.relocs = [(w + 1, kind, p) if r == (w, kind, p) else r for r in bc.relocs]
    invalid(bc, "relocation does not patch the address operand")


def test_global_address_without_a_relocation():
    bc = parsed("vector_add")
    first = next(r for r in bc.relocs if r[1] == 0)
    bc.relocs = [r for r in bc.relocs if r != first]
    invalid(bc, "global-memory address without a relocation")


def test_tensor_operand_that_names_a_scalar():
    bc = parsed("vector_add")
    decoded = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add")).decoded[0]
    d = next(x for x in decoded if x.ins.name.startswith("DMA_LOAD"))
    scalar = next(i for i, p in enumerate(bc.params) if p.kind == "scalar")
    vals = dict(d.vals, tensor=scalar)
    encode_into(bc.code, d.pc, d.ins, vals, d.dtype, d.set, d.wait)
    invalid(bc, "names parameter .* which is not a tensor")


def test_invalid_error_marks_the_spot_in_the_disassembly():
    bc = parsed("vector_add")
    assemble(bc, 0, "MOVI", dtype=dvmlang.dtypes.int32, rd=200, imm=0)
    from dvmlang.vm.dump import disassemble_bytes
    result = disassemble_bytes(_serialise(bc))
    assert not result.ok
    marked = [line for line in result.text.splitlines() if "<-- invalid here" in line]
    assert len(marked) == 1 and "MOVI" in marked[0] and "r200" in marked[0]


# ---- versions -----------------------------------------------------------------------------------------------


def test_newer_major_version_is_refused_naming_both_versions():
    data = with_header(sample_bytes("vector_add"), C.VERSION_MAJOR + 1, 0)
    with pytest.raises(dvmlang.VersionError) as e:
        dvmlang.Bytecode.from_bytes(data)
    msg = str(e.value)
    assert f"{C.VERSION_MAJOR + 1}.0" in msg and f"{C.VERSION_MAJOR}.{C.VERSION_MINOR}" in msg
    assert "newer" in msg and "upgrade dvmlang" in msg
    assert isinstance(e.value, dvmlang.BytecodeError)


def test_older_major_version_is_refused():
    data = with_header(sample_bytes("vector_add"), 0, 9)
    with pytest.raises(dvmlang.VersionError, match=r"version 0\.9, older .* re-export"):
        dvmlang.Bytecode.from_bytes(data)


def test_older_minor_version_loads_and_runs():
    assert C.VERSION_MINOR >= 1
    data = with_header(sample_bytes("vector_add"), C.VERSION_MAJOR, 0)
    bc = dvmlang.Bytecode.from_bytes(data)
    assert (bc.major, bc.minor) == (C.VERSION_MAJOR, 0)
    assert bc.serialise() == data  # the version is kept
    args, check = sample_args("vector_add")
    dvmlang.run(bc, *args)
    check(args)


def test_newer_minor_version_loads_when_it_uses_nothing_new():
    data = with_header(sample_bytes("vector_add"), C.VERSION_MAJOR, C.VERSION_MINOR + 1)
    assert dvmlang.Bytecode.from_bytes(data).minor == C.VERSION_MINOR + 1


def test_newer_minor_version_errors_say_the_file_is_newer():
    bc = parsed("vector_add")
    bc.minor = C.VERSION_MINOR + 3
    bc.code[0] = (bc.code[0] & ~0xFFFF) | 0x7777
    e = malformed(_serialise(bc), "unknown opcode")
    assert f"{C.VERSION_MAJOR}.{C.VERSION_MINOR + 3}" in str(e) and "newer" in str(e)


def test_header_layout_is_frozen():
    data = sample_bytes("vector_add")
    assert data[:4] == b"\x00dvm"
    assert (data[4], data[5]) == (C.VERSION_MAJOR, C.VERSION_MINOR)
    assert struct.unpack_from("<I", data, 8)[0] == zlib.crc32(data[:8])


def test_template_is_validated_once_at_build():
    kernel = KERNELS["vector_add"]
    x = np.zeros(10, np.float32)
    build = kernel.build_for(x, x, x, 10, BLOCK=128)
    assert build.encoder.decoded is not None
    a = kernel.encode((1,), x, x, x, 10, BLOCK=128)
    b = kernel.encode((2,), x, x, x, 11, BLOCK=128)
    assert a.decoded is b.decoded is build.encoder.decoded
    assert array("Q", a.code) != array("Q", b.code)  # the scalar immediate differs


def test_register_scalar_operand_with_stray_bits_is_invalid():
    bc = parsed("vector_add")
    decoded = dvmlang.Bytecode.from_bytes(sample_bytes("vector_add")).decoded[0]
    d = next(x for x in decoded if x.ins.name.startswith("DMA_LOAD") and x.vals["base"] & isa.SOP_REG_BIT)
    vals = dict(d.vals, base=d.vals["base"] | 0x100)
    encode_into(bc.code, d.pc, d.ins, vals, d.dtype, d.set, d.wait)
    invalid(bc, "scalar operand base names a register but sets reserved bits 8-30")


def test_template_keys_are_never_reused():
    """The device caches decoded programs by template key: a key must never name two different builds, even
    after a build is freed (object ids are reused; the keys are not)."""
    import gc
    fn = KERNELS["vector_add"].fn
    x = np.zeros(8, np.float32)
    keys = []
    for block in (8, 16) * 10:
        k = dvmlang.kernel(fn)
        keys.append(k.encode((1,), x, x, x, 8, BLOCK=block).template_key)
        del k
        gc.collect()
    assert len(set(keys)) == len(keys)
