"""Untrusted bytecode and resource bounds: a loaded ``.dvmb`` never makes dvmlang read host files, loading
refuses what is not a regular file, validation work is bounded across kernels, and the watchdog ends a
runaway launch after an instruction budget per program."""

from __future__ import annotations

import os
import threading
from array import array

import numpy as np
import pytest
from rich.console import Console

import dvmlang
import dvmlang.language as dl
from dvmlang.cli import main
from dvmlang.npu import Device
from dvmlang.vm import container as C
from dvmlang.vm import decode, isa
from dvmlang.vm.lower import encode_into
from sample_kernels import add

SECRET = "SECRET-HOST-LINE-DO-NOT-SHOW"


def _finishes(fn, seconds: float = 20.0):
    """Run ``fn`` on a daemon thread; fail (instead of hanging the suite) if it does not return in time."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not finish within {seconds} s (blocked on a host file?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _add_naming(path: str) -> bytes:
    """The bytes of a valid ``add`` instance whose debug section names ``path`` and embeds no source text."""
    x = np.arange(300, dtype=np.float32)
    bc = dvmlang.Bytecode.from_bytes(add.encode((3,), x, x, np.empty_like(x), 300, BLOCK=128).to_bytes())
    old = bc.debug.files[0]
    bc.strings = [path if s == old else s for s in bc.strings]
    bc.debug.files = [path]
    bc.debug.sources = {}
    bc.debug.lines = [(pc, 0, 1 + i % 3, 0) for i, (pc, _, _, _) in enumerate(bc.debug.lines)]
    bc.flags &= ~C.FLAG_SOURCES
    return bc.serialise()


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "host.txt"
    path.write_text(f"{SECRET} 1\n{SECRET} 2\n{SECRET} 3\n")
    return path


def test_a_loaded_file_never_shows_the_host_file_its_debug_section_names(tmp_path, secret_file, capsys):
    data = _add_naming(str(secret_file))
    bc = dvmlang.Bytecode.from_bytes(data)
    text = bc.disassemble()
    assert SECRET not in text and "MOVI" in text
    (tmp_path / "k.dvmb").write_bytes(data)
    assert main(["disasm", str(tmp_path / "k.dvmb")]) == 0
    assert SECRET not in capsys.readouterr().out
    small = np.zeros(10, np.float32)  # shorter than the grid covers: the first load faults
    with pytest.raises(dvmlang.MemoryFault) as e:
        dvmlang.run(bc, small, small, small, 300)
    assert f"at {secret_file}:" in str(e.value)  # file:line only
    assert SECRET not in str(e.value)
    x = np.zeros(300, np.float32)
    with dvmlang.trace() as t:
        dvmlang.run(bc, x, x, x, 300)
    console = Console(record=True, width=140, color_system=None)
    t.print("all", console=console)
    shown = console.export_text()
    assert "MOVI" in shown and SECRET not in shown
    t.save_chrome(tmp_path / "trace.json")
    assert SECRET not in (tmp_path / "trace.json").read_text()


def test_a_loaded_file_naming_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    bc = dvmlang.Bytecode.from_bytes(_add_naming(str(fifo)))
    assert "MOVI" in _finishes(bc.disassemble)
    small = np.zeros(10, np.float32)
    with pytest.raises(dvmlang.MemoryFault, match="pipe:"):
        _finishes(lambda: dvmlang.run(bc, small, small, small, 300))


def test_embedded_source_text_is_shown_for_a_loaded_file(tmp_path):
    x = np.arange(300, dtype=np.float32)
    path = add.export(tmp_path / "add.dvmb", (3,), x, x, np.empty_like(x), 300, BLOCK=128)
    bc = dvmlang.Bytecode.load(path)
    assert bc.flags & C.FLAG_SOURCES
    assert "dl.store(out_ptr + offs" in bc.disassemble()
    small = np.zeros(10, np.float32)
    with pytest.raises(dvmlang.MemoryFault, match=r"(?s)kernels\.py:\d+.*dl\.load\(x_ptr \+ offs"):
        dvmlang.run(bc, small, small, small, 300)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_load_refuses_anything_but_a_regular_file(tmp_path, kind, capsys):
    if kind == "fifo":
        path = tmp_path / "pipe.dvmb"
        os.mkfifo(path)
    elif kind == "directory":
        path = tmp_path
    else:
        path = "/dev/zero"
    with pytest.raises(dvmlang.BytecodeError, match="not a regular file"):
        _finishes(lambda: dvmlang.Bytecode.load(path))
    assert _finishes(lambda: main(["disasm", str(path)])) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_load_reads_at_most_the_size_limit(tmp_path):
    path = tmp_path / "big.dvmb"
    path.write_bytes(b"\0dvm" + bytes(5000))
    with pytest.raises(dvmlang.MalformedBytecodeError, match="too large"):
        dvmlang.Bytecode.load(path, C.Limits(max_file_bytes=4096))


def _shared_code_file(kernels: int, words: int) -> bytes:
    """A container whose ``kernels`` kernels all run the same ``words`` words (NOPs, then END)."""
    code = array("Q", bytes(8 * words))
    for pc in range(words):
        encode_into(code, pc, isa.BY_NAME["END" if pc == words - 1 else "NOP"], {}, None, None, None)
    target = C.TargetInfo("910B2-like", 48, 24, 192 << 10, 512 << 10, 64 << 10, 64 << 10, 128 << 10)
    ks = [C.KernelInfo(f"k{i}", (1, 1, 1), 0, words, [], {s: 0 for s in C.SPACES}) for i in range(kernels)]
    bc = dvmlang.Bytecode(major=C.VERSION_MAJOR, minor=C.VERSION_MINOR, flags=C.FLAG_CHECKSUM, target=target,
                          strings=[k.name for k in ks], params=[], layouts=[], kernels=ks, code=code, relocs=[],
                          debug=C.DebugInfo(present=False))
    return bc.serialise()


@pytest.fixture
def decode_count(monkeypatch):
    """How many instructions have been decoded (every decode goes through ``decode.decode_one``)."""
    calls = [0]
    real = decode.decode_one

    def counting(code, pc, end):
        calls[0] += 1
        return real(code, pc, end)
    monkeypatch.setattr(decode, "decode_one", counting)
    return calls


def test_kernels_sharing_code_cannot_multiply_the_validation_work(decode_count):
    limits = C.Limits(max_code_words=4096)
    with pytest.raises(dvmlang.MalformedBytecodeError, match="max_code_words") as e:
        dvmlang.Bytecode.from_bytes(_shared_code_file(16, 4096), limits)
    assert "16 kernels" in str(e.value)
    assert decode_count[0] == 0  # refused before anything is decoded
    bc = dvmlang.Bytecode.from_bytes(_shared_code_file(16, 256), limits)  # 16 x 256 words: within the budget
    assert decode_count[0] == 16 * 256 and len(bc.decoded) == 16


def test_the_default_budget_refuses_sixteen_kernels_over_the_whole_code_section(decode_count):
    with pytest.raises(dvmlang.MalformedBytecodeError, match="max_code_words"):
        dvmlang.Bytecode.from_bytes(_shared_code_file(16, C.LIMITS.max_code_words))
    assert decode_count[0] == 0


@dvmlang.kernel
def diverging_loops(out_ptr, n):
    pid = dl.program_id(0)
    k = 0
    acc = 0
    while k < n:
        if (pid >> (k % 6)) & 1 == 1:  # after 6 iterations each of 64 programs runs in a batch of its own
            acc = acc + 1
        else:
            acc = acc + 2
        k = k + 1
    dl.store(out_ptr + pid, acc)


@dvmlang.kernel
def runaway(out_ptr, n):
    i = 0
    while i < n:
        i = i * 1
    dl.store(out_ptr, i)


def _diverging_reference(n: int) -> np.ndarray:
    pid = np.arange(64)[:, None]
    k = np.arange(n)[None, :]
    return np.where((pid >> (k % 6)) & 1 == 1, 1, 2).sum(axis=1).astype(np.int32)


def _count_steps(device, bc):
    """Wrap every step of the device's machine for ``bc`` with a counter: instructions actually executed."""
    calls = [0]
    for s in device.machine(bc).steps:
        fn = s.fn

        def counted(b, L, fn=fn):
            calls[0] += 1
            return fn(b, L)
        s.fn = counted
    return calls


def test_the_watchdog_budget_is_per_program():
    """Each program may run the budget, whatever batch it runs in: 64 diverging loops that each stay within it run
    to the end on the batched and the sequential device alike, and a program that runs away ends the launch on
    both, after at most the budget per program."""
    out = np.zeros(64, np.int32)
    for device in (Device(watchdog=2000), Device(watchdog=2000, sequential=True)):
        out[:] = 0
        diverging_loops[(64,)](out, 40, device=device)  # each program runs < 2000; together far more
        np.testing.assert_array_equal(out, _diverging_reference(40))
    dev = Device(watchdog=500)
    bc = runaway.encode((4,), np.zeros(1, np.int32), 10)
    steps = _count_steps(dev, bc)
    with pytest.raises(dvmlang.WatchdogTimeout, match="more than 500 instructions"):
        dvmlang.run(bc, np.zeros(1, np.int32), 10, device=dev)
    assert steps[0] <= 500  # the four programs run in step: one batch, within one program's budget
    with pytest.raises(dvmlang.WatchdogTimeout):
        runaway[(4,)](np.zeros(1, np.int32), 10, device=Device(watchdog=500, sequential=True))


def test_a_runaway_kernel_ends_with_kernel_program_line_work_and_how_to_raise_the_budget():
    out = np.zeros(1, np.int32)
    with pytest.raises(dvmlang.WatchdogTimeout) as e:
        runaway[(1,)](out, 10, device=Device(watchdog=500))
    msg = str(e.value)
    assert "kernel `runaway`" in msg and "program(s) [0]" in msg and "more than 500 instructions" in msg
    assert "test_untrusted.py:" in msg and "while i < n" in msg and "Device(watchdog=N)" in msg
    assert "had run 500 instructions for its 1 program(s)" in msg and "DVMLANG_WATCHDOG=N" in msg


def test_the_default_watchdog_budget_is_large_and_set_by_the_environment(monkeypatch):
    from dvmlang.npu.device import DEFAULT_WATCHDOG
    assert Device().watchdog == DEFAULT_WATCHDOG == 1 << 26
    monkeypatch.setenv("DVMLANG_WATCHDOG", "2**30")
    assert Device().watchdog == 1 << 30
    monkeypatch.setenv("DVMLANG_WATCHDOG", "12_345")
    assert Device().watchdog == 12345 and Device(watchdog=7).watchdog == 7
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv("DVMLANG_WATCHDOG", bad)
        with pytest.raises(dvmlang.DvmError, match="DVMLANG_WATCHDOG must be a positive"):
            Device()


@pytest.mark.parametrize("call", [lambda: dvmlang.Bytecode.load(None), lambda: dvmlang.Bytecode.load(3),
                                  lambda: dvmlang.Bytecode.from_bytes(b"\0dvm", limits=5),
                                  lambda: dvmlang.Bytecode.load("x.dvmb", limits=None),
                                  lambda: dvmlang.Bytecode.from_bytes(_shared_code_file(1, 2)).save(None)])
def test_a_bad_path_or_limits_argument_is_an_argument_error(call):
    with pytest.raises(dvmlang.ArgumentError, match="expects"):
        call()
