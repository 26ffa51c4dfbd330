"""The disassembler: dis-like columns with source lines interleaved, and on bad input it shows what it
can, marks the bad spot, and exits non-zero — it never raises."""

from __future__ import annotations

import random
import struct
import zlib

import pytest

import dvmlang
from dvmlang.cli import main
from dvmlang.vm import container as C
from dvmlang.vm import isa
from dvmlang.vm.bytecode import _parse, _serialise
from dvmlang.vm.dump import disassemble_bytes
from test_bytecode_samples import SAMPLES, sample_bytes


def rows_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith(";") and line.strip()][1:]


def test_columns_and_interleaved_source():
    bc = dvmlang.Bytecode.from_bytes(sample_bytes("softmax"))
    text = bc.disassemble()
    lines = text.splitlines()
    assert lines[0].startswith("; dvmlang bytecode v1.")
    assert lines[1].startswith("; kernel softmax(out_ptr: float32[4x50], in_ptr: float32[4x50], stride: int32")
    header = next(line for line in lines if "OPNAME" in line)
    assert header.split() == ["line", "offset", "pipe", "OPNAME", "operands"]
    # the kernel's own source lines, interleaved before the instructions they produced
    src = [line.strip() for line in lines if line.strip().startswith("; ") and ": " in line and "x = dl.load" in line]
    assert src and src[0].endswith('x = dl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))')
    load = next(line for line in lines if "DMA_LOAD1" in line)
    line_no, offset, pipe, opname = load.split()[:4]
    assert int(line_no) > 0 and int(offset) >= 0 and pipe == "MTE2" and opname == "DMA_LOAD1"
    assert "tensor=in_ptr" in load and "gm=&in_ptr" in load and "; float32" in load
    binds = [line for line in lines if "binds `n_cols`" in line]
    assert len(binds) == 1 and "MOVI" in binds[0]


def test_no_source_option_and_every_pc_once():
    from dvmlang.vm.disasm import disassemble
    bc = dvmlang.Bytecode.from_bytes(sample_bytes("loop_if"))
    result = disassemble(bc, source=False)
    assert "dl.load" not in result.text
    assert [r[1] for r in result.rows] == [d.pc for d in bc.decoded[0]]
    assert len(rows_of(result.text)) == len(bc.decoded[0])


@pytest.mark.parametrize("name", SAMPLES)
def test_every_instruction_of_every_sample_disassembles(name):
    bc = dvmlang.Bytecode.from_bytes(sample_bytes(name))
    result = disassemble_bytes(sample_bytes(name))
    assert result.ok and not result.errors
    assert [r[3] for r in result.rows] == [d.ins.name for d in bc.decoded[0]]


def test_unknown_opcode_prints_invalid_and_goes_on():
    bc = _parse(sample_bytes("vector_add"), C.LIMITS)
    bc.code[0] = (bc.code[0] & ~0xFFFF) | 0x7777
    result = disassemble_bytes(_serialise(bc))
    assert not result.ok
    bad = [line for line in result.text.splitlines() if "<invalid 0x" in line]
    assert bad and bad[0].split()[0] == "0" and "unknown opcode" in bad[0]
    assert "DMA_LOAD1" in result.text and "END" in result.text  # it went on past the bad word
    assert "error: malformed bytecode: unknown opcode" in result.text


def test_truncated_file_shows_sections_and_the_code_it_has():
    data = sample_bytes("vector_add")
    code = C.split_sections(data).sections["code"]
    result = disassemble_bytes(data[:code[0] + 40])
    assert not result.ok
    text = result.text
    assert "section code at offset" in text and "<-- error here" in text and "only 40 present" in text
    assert "MOVI" in text  # the five whole words that are there
    assert "runs past the end of the file" in text


def test_checksum_error_still_shows_the_program():
    data = bytearray(sample_bytes("softmax"))
    s, _ = C.split_sections(bytes(data)).sections["code"]
    data[s + 8] ^= 1  # the immediate of the first MOVI
    result = disassemble_bytes(bytes(data))
    assert not result.ok and "checksum mismatch" in result.text
    assert "checksums ignored" in result.text and "VREDUCE" in result.text
    assert "section checksum at offset" in result.text and "<-- error here" in result.text


def test_bad_magic_and_empty_input():
    for data in (b"", b"\x00d", b"PK\x03\x04" + bytes(40)):
        result = disassemble_bytes(data)
        assert not result.ok and "<-- error here" in result.text and result.errors


def test_newer_major_version_is_described_not_disassembled():
    data = bytearray(sample_bytes("vector_add"))
    data[4] = C.VERSION_MAJOR + 1
    data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[:8])))
    result = disassemble_bytes(bytes(data))
    assert not result.ok and "newer than this dvmlang reads" in result.text
    assert "MOVI" not in result.text


def test_cli_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.dvmb"
    good.write_bytes(sample_bytes("matmul"))
    assert main(["disasm", str(good)]) == 0
    out = capsys.readouterr().out
    assert "MMAD" in out and "; kernel matmul(" in out
    assert main(["disasm", "--no-source", str(good)]) == 0
    assert "dl.dot" not in capsys.readouterr().out
    bad = tmp_path / "bad.dvmb"
    bad.write_bytes(sample_bytes("matmul")[:-3])
    assert main(["disasm", str(bad)]) == 1
    captured = capsys.readouterr()
    assert "<-- error here" in captured.out and "is not valid bytecode" in captured.err
    assert main(["disasm", str(tmp_path / "missing.dvmb")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_marks_an_invalid_instruction(tmp_path, capsys):
    bc = _parse(sample_bytes("vector_add"), C.LIMITS)
    from dvmlang.vm.lower import encode_into
    encode_into(bc.code, 0, isa.BY_NAME["MOVI"], {"rd": 99, "imm": 1}, dvmlang.dtypes.int32, None, None)
    path = tmp_path / "invalid.dvmb"
    path.write_bytes(_serialise(bc))
    assert main(["disasm", str(path)]) == 1
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if line.endswith("<-- invalid here")]
    assert len(marked) == 1 and "r99" in marked[0]
    assert "invalid bytecode: MOVI at pc 0: register r99 (rd) does not exist" in out


def test_disassembler_never_raises_on_mutations():
    rng = random.Random(11)
    for _ in range(300):
        data = bytearray(sample_bytes(rng.choice(SAMPLES)))
        for _ in range(rng.randint(1, 6)):
            kind = rng.randrange(3)
            i = rng.randrange(len(data))
            if kind == 0:
                data[i] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del data[i:i + rng.randint(1, 5)]
            else:
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
        if rng.random() < 0.7 and len(data) >= 12:
            data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[:8])))
            if data[-6:-5] == b"\x09" and data[-5] == 4:
                data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-6])))
        result = disassemble_bytes(bytes(data))
        assert isinstance(result.text, str) and result.text
        assert result.ok == (not result.errors)
