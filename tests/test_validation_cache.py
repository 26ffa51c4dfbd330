"""The reader's caches (issue 17): a container's shared sections are read once and its code's verdict is
reached once per build, yet every container gets exactly the fields, decoding and refusals it would get
without them."""

from __future__ import annotations

import struct
import zlib
import numpy as np
import pytest

import dvmlang
import dvmlang.ops as ops
from dvmlang import dtypes as dt
from dvmlang.vm import container as C
from dvmlang.vm import isa, validator
from dvmlang.vm.lower import encode_into
from dvmlang.vm import bytecode
from dvmlang.vm.bytecode import _parse
from test_bytecode_samples import SAMPLES, sample_bytes
from test_untrusted import _shared_code_file, decode_count  # noqa: F401 - a fixture

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")


def reseal(data: bytes) -> bytes:
    data = bytearray(data)
    data[8:12] = struct.pack("<I", zlib.crc32(bytes(data[:8])))
    data[-4:] = struct.pack("<I", zlib.crc32(bytes(data[:-6])))
    return bytes(data)


def clear_caches():
    validator._VERDICTS.clear()
    bytecode._STATIC.clear()


def outcome(data: bytes):
    """What ``from_bytes`` makes of ``data``: its fields and decoding, or the error it raised."""
    try:
        bc = dvmlang.Bytecode.from_bytes(data)
    except dvmlang.BytecodeError as e:
        return type(e).__name__, str(e)
    decoded = [[(d.pc, d.ins.name, sorted(d.vals.items()), d.dtype, d.set, d.wait, d.head) for d in k]
               for k in bc.decoded]
    return "ok", bc._fields(), decoded


def cold(data: bytes):
    clear_caches()
    return outcome(data)


def warm(good: bytes, data: bytes):
    """``data`` read right after ``good`` (so the caches hold what reading ``good`` left in them)."""
    outcome(good)
    return outcome(data)


def code_edits(data: bytes, rng):
    """Copies of ``data`` with one code word changed, most of them words no relocation patches."""
    lay = C.split_sections(data)
    s, e = lay.sections["code"]
    relocated = {w for w, _, _ in dvmlang.Bytecode.from_bytes(data).relocs}
    for _ in range(40):
        w = int(rng.integers(0, (e - s) // 8))
        m = bytearray(data)
        old = struct.unpack_from("<Q", m, s + 8 * w)[0]
        if rng.random() < 0.5:
            new = old ^ (1 << int(rng.integers(0, 64)))
        else:
            new = int(rng.integers(0, 1 << 63)) if w in relocated or rng.random() < 0.3 else old ^ 0xFF
        struct.pack_into("<Q", m, s + 8 * w, new)
        yield reseal(bytes(m))


@pytest.mark.parametrize("name", SAMPLES)
def test_code_edits_get_the_same_verdict_and_decoding_with_the_caches_warm_or_cold(name):
    good = sample_bytes(name)
    rng = np.random.default_rng(17)
    refused = 0
    for data in code_edits(good, rng):
        expected = cold(data)
        assert warm(good, data) == expected
        assert warm(data, data) == expected  # and read twice
        refused += expected[0] != "ok"
    assert refused  # the edits reach the validator's refusals


@pytest.mark.parametrize("name", SAMPLES)
def test_metadata_edits_get_the_same_outcome_with_the_caches_warm_or_cold(name):
    good = sample_bytes(name)
    lay = C.split_sections(good)
    s, e = lay.sections["code"]
    rng = np.random.default_rng(5)
    at = [i for i in range(C.HEADER_SIZE, len(good) - 6) if not s <= i < e]
    refused = 0
    for i in rng.choice(at, size=min(60, len(at)), replace=False):
        m = bytearray(good)
        m[int(i)] = int(rng.integers(0, 256))
        data = reseal(bytes(m))
        expected = cold(data)
        assert warm(good, data) == expected
        refused += expected[0] != "ok"
    assert refused


def test_an_instance_of_another_shape_is_not_decoded_again(decode_count):  # noqa: F811 - the fixture
    from test_bytecode_samples import KERNELS
    softmax = KERNELS["softmax"]
    x, y = np.zeros((5, 100), np.float32), np.zeros((7, 90), np.float32)
    a = softmax.encode((5,), np.empty_like(x), x, 100, 100, BLOCK=128).to_bytes()
    b = softmax.encode((7,), np.empty_like(y), y, 90, 90, BLOCK=128).to_bytes()
    assert a != b
    expected = cold(b)
    clear_caches()
    dvmlang.Bytecode.from_bytes(a)
    decoded = decode_count[0]
    assert outcome(b) == expected  # the addresses and scalars of b, in its fields and its decoding
    assert decode_count[0] == decoded


def _overlapping_kernels(second_word: int) -> bytes:
    """Kernel k0 runs MOVI r0 (a relocated scalar immediate in word 1), END; kernel k1 starts at word 1, so
    that it decodes the relocated word as an instruction head."""
    bc = _parse(_shared_code_file(2, 3), C.LIMITS)  # two kernels over the same 3 words, edited below
    encode_into(bc.code, 0, isa.BY_NAME["MOVI"], {"rd": 0}, dt.int32, None, None)
    bc.code[1] = second_word
    for k in bc.kernels:
        k.reg_types = [dt.int32]
    bc.kernels[1].code_start, bc.kernels[1].code_words = 1, 2
    bc.strings.append("n")
    bc.params = [C.ParamInfo("scalar", "n", dt.int32)]
    bc.relocs = [(1, 1, 0)]
    return bc.serialise()


def test_a_relocated_word_another_kernel_decodes_keeps_its_checks():
    good = _overlapping_kernels(_parse(_shared_code_file(1, 1), C.LIMITS).code[0])  # END
    assert cold(good)[0] == "ok"
    bad = _overlapping_kernels(0xFFFF)  # an unknown opcode for k1
    expected = cold(bad)
    assert expected[0] == "MalformedBytecodeError" and "unknown opcode" in expected[1]
    assert warm(good, bad) == expected


def test_free_fields_fill_their_word():
    """The verdict cache leans on this: a relocated field is a whole operand word, with no reserved bits."""
    kinds = 0
    for ins in isa.TABLE:
        for name, w, shift, mask in ins.packing:
            if ins.kinds[name] in validator.FREE_KINDS:
                kinds += 1
                assert w and shift == 0 and mask == (1 << 64) - 1, (ins.name, name)
                assert validator._FREE[ins.opcode]
    assert kinds


def test_each_container_gets_its_own_lists():
    good = sample_bytes("vector_add")
    a = dvmlang.Bytecode.from_bytes(good)
    a.strings.append("edited")
    a.debug.lines.clear()
    b = dvmlang.Bytecode.from_bytes(good)
    assert "edited" not in b.strings and b.debug.lines
    assert b.serialise() == good


# ---- composed templates: decoded without the validator's pass in a user's process (fuser/build.trusted) ----------

def _decoding(decoded, patched=frozenset()):
    """Each instruction's decoded fields; those held in the ``patched`` words (an instance's own immediates and
    addresses, which the device reads from the instance's words, not from its decoding) left out."""
    def fields(d):
        own = {d.pc + i for i in range(1, d.ins.words)} & patched
        return sorted((k, v) for k, v in d.vals.items() if not (own and k in ("imm", "gm")))
    return [[(d.pc, d.ins.name, fields(d), d.dtype, d.set, d.wait, d.head) for d in k] for k in decoded]


_TRUSTED_CASES = {
    "softmax": (lambda x: ops.softmax(x, axis=-1), lambda x: np.exp(x - x.max(-1, keepdims=True)) /
                np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "norm": (lambda x: (x - ops.mean(x, axis=-1, keepdims=True)) * 0.5 + 1.0,
             lambda x: (x - x.mean(-1, keepdims=True)) * 0.5 + 1.0),
    "matmul_gelu": (lambda x: ops.gelu(x @ x.T), None),
    "cat_exp": (lambda x: ops.exp(ops.cat([x, x * 2.0], axis=0)), lambda x: np.exp(np.concatenate([x, x * 2], 0))),
}


@pytest.mark.parametrize("case", sorted(_TRUSTED_CASES))
def test_a_composed_build_is_decoded_as_the_validator_decodes_it(case, monkeypatch):
    """A user's process runs a template the fuser composed without the validator's pass; the instructions the
    device runs (the assembler's record of what it packed) are the ones the validator decodes from an instance's
    words, but for the immediates and addresses the instance patches in (which the device reads from the
    instance's words); the results are numpy's, and an explicit
    ``validate()`` still runs the validator, which accepts the code."""
    monkeypatch.delenv("DVMLANG_VALIDATE", raising=False)
    from dvmlang.fuser import build
    build.forget()
    fn, ref = _TRUSTED_CASES[case]
    x = np.random.default_rng(3).standard_normal((7, 40)).astype(np.float32)
    g = dvmlang.graph(fn)
    got = g(x)
    want = ref(x) if ref is not None else None
    if want is None:
        y = x.astype(np.float64) @ x.T.astype(np.float64)
        want = 0.5 * y * (1 + np.vectorize(__import__("math").erf)(y / np.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    bcs = g.encode(x)
    assert bcs
    for bc in bcs:
        enc = bc._encoder
        assert enc.trusted and not enc.validated and enc.decoded is not None  # the launch decoded it only
        clear_caches()
        patched = frozenset(w for w, _, _ in enc.relocs)
        assert _decoding(validator._validate(bc), patched) == _decoding(enc.decoded, patched)
        assert bc.validate() is bc and enc.validated


def test_the_test_suite_validates_every_composed_build():
    from dvmlang.fuser import build
    build.forget()
    g = dvmlang.graph(lambda x: ops.exp(x) + 1.0)
    g(np.ones((3, 5), np.float32))
    bc, = g.encode(np.ones((3, 5), np.float32))
    assert not bc._encoder.trusted and bc._encoder.validated


def test_the_bytes_of_a_trusted_build_meet_the_validator_when_read(monkeypatch):
    """Trust is in the process's own composer, never in bytes: the container of a trusted build, read back, is
    validated."""
    monkeypatch.delenv("DVMLANG_VALIDATE", raising=False)
    g = dvmlang.graph(lambda x: ops.exp(x) * 3.0)
    x = np.ones((4, 9), np.float32)
    g(x)
    bc, = g.encode(x)
    assert bc._encoder.trusted
    ran = []
    real = validator._validate
    monkeypatch.setattr(validator, "_validate", lambda b: ran.append(b) or real(b))
    clear_caches()
    back = dvmlang.Bytecode.from_bytes(bc.to_bytes())
    patched = frozenset(w for w, _, _ in bc._encoder.relocs)
    assert ran and _decoding(back.decoded, patched) == _decoding(bc._encoder.decoded, patched)
