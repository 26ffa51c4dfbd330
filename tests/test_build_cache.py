"""Builds kept by content: shared in memory, and on disk for later processes (dvmlang/cache.py,
dvmlang/kernel_cache.py, dvmlang/fuser/build.py). A damaged, truncated, foreign or stale entry is a miss and
is built again, never trusted."""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.ops as ops
from dvmlang import cache
from dvmlang.fuser import build as fbuild

ROOT = Path(__file__).resolve().parent.parent
SCALE = 3.0


@dvmlang.kernel
def scaled(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) * SCALE, mask=m)


@pytest.fixture
def disk(tmp_path, monkeypatch):
    fbuild.settle()  # builds ahead that earlier tests started go where the cache was then, not here
    monkeypatch.setenv("DVMLANG_CACHE_DIR", str(tmp_path))
    fbuild.forget()
    yield tmp_path
    cache.flush(timeout=120)


def _entries(root) -> list[Path]:
    cache.flush(timeout=120)  # (the writer thread is slow on a loaded machine)
    return sorted(Path(root).rglob("*.dvmbuild"))


def _fresh_kernel():
    """The same kernel as a new object (what a later process has): it shares no in-memory build."""
    return dvmlang.kernel(scaled.fn)


def _run_kernel(k):
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    k[(4,)](x, out, 100, BLOCK=32)
    np.testing.assert_array_equal(out, x * SCALE)
    return k.cache_info()


def test_a_kernel_built_once_is_read_back_by_another_kernel_object(disk):
    first = _run_kernel(_fresh_kernel())
    assert first.builds == 1 and first.loads == 0
    assert len(_entries(disk)) == 1
    again = _run_kernel(_fresh_kernel())
    assert again.builds == 0 and again.loads == 1


def test_a_fused_program_is_read_back_when_no_build_is_in_memory(disk, monkeypatch):
    monkeypatch.delenv("DVMLANG_VALIDATE", raising=False)  # (a user's process: what it composes runs unvalidated)
    fn = lambda x: ops.exp(x) * 2.0 + 1.0  # noqa: E731 - (the source lines are part of a build's key)
    g = dvmlang.graph(fn)
    x = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32)
    want = g(x)
    assert g.stats.builds == 1 and len(_entries(disk)) >= 1
    assert all(b.encoder.trusted for b in fbuild.BUILDS.values())
    fbuild.forget()
    h = dvmlang.graph(fn)
    np.testing.assert_array_equal(h(x), want)
    assert h.stats.builds == 0 and h.stats.loads == 1
    # an entry this user's dvmlang wrote (its MAC holds) runs as the composition it holds did: decoded only
    assert all(b.encoder.trusted and not b.encoder.validated for b in fbuild.BUILDS.values())


def _fused_entry(disk, fn, x):
    """Run ``fn`` (built and written to disk), forget the builds in memory: the entries' paths."""
    want = dvmlang.graph(fn)(x)
    entries = _entries(disk)
    fbuild.forget()
    return want, entries


def _exp_plus(x):
    return ops.exp(x) * 2.0 + 0.5


@pytest.mark.parametrize("whose", ["another key", "edited bytes", "open key file"])
def test_an_entry_this_process_cannot_vouch_for_meets_the_validator(disk, monkeypatch, whose):
    """An entry whose MAC does not hold under this user's key (another user's, a copied folder, bytes edited with
    a CRC made to match) or a key others can read is validated before it runs; one the validator refuses is a
    miss, built again."""
    monkeypatch.delenv("DVMLANG_VALIDATE", raising=False)
    x = np.random.default_rng(1).standard_normal((6, 50)).astype(np.float32)
    want, (entry,) = _fused_entry(disk, _exp_plus, x)
    if whose == "another key":
        (disk / "key").write_bytes(os.urandom(32))
    elif whose == "open key file":
        os.chmod(disk / "key", 0o644)
    else:  # every code word made an opcode that does not exist, the CRC recomputed
        import struct
        import zlib
        data = bytearray(entry.read_bytes())
        head = struct.calcsize("<4sII32s")
        (n,) = struct.unpack_from("<I", data, head)
        start = head + 4 + n
        data[start:] = b"\xff" * (len(data) - start)
        struct.pack_into("<I", data, 8, zlib.crc32(bytes(data[head:])))
        entry.write_bytes(bytes(data))
    monkeypatch.setattr(cache, "_SECRETS", {})  # (a later process: the key read again)
    g = dvmlang.graph(_exp_plus)
    np.testing.assert_array_equal(g(x), want)
    (b,) = fbuild.BUILDS.values()
    if whose == "edited bytes":  # refused by the validator: a miss, composed again here
        assert g.stats.builds == 1 and g.stats.loads == 0
    else:
        assert g.stats.loads == 1 and not b.encoder.trusted and b.encoder.validated


def test_the_key_is_made_once_and_kept_from_others(disk):
    k = cache.secret()
    assert k is not None and len(k) == 32
    mode = os.stat(disk / "key").st_mode & 0o777
    assert mode == 0o600
    cache._SECRETS.clear()
    assert cache.secret() == k  # read back, not made again


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage", "foreign"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(disk, damage):
    _run_kernel(_fresh_kernel())
    (entry,) = _entries(disk)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 3]
    elif damage == "empty":
        data = b""
    elif damage == "garbage":
        data = os.urandom(len(data))
    else:  # a whole, valid entry of another key under this key's name (a hash collision or a copied file)
        other = dvmlang.kernel(scaled.fn)
        x = np.arange(10, dtype=np.float32)
        other[(1,)](x, np.zeros_like(x), 10, BLOCK=16)
        (a, b) = _entries(disk)
        data = (b if a == entry else a).read_bytes()
    entry.write_bytes(bytes(data))
    info = _run_kernel(_fresh_kernel())
    assert info.builds == 1 and info.loads == 0
    cache.flush(timeout=120)  # (the rewrite is written in the background)
    assert _run_kernel(_fresh_kernel()).loads == 1  # rewritten whole


def test_another_version_does_not_read_the_entries(disk, monkeypatch):
    _run_kernel(_fresh_kernel())
    monkeypatch.setattr(cache, "_version", "0.0.0-other")  # another dvmlang, ISA table or build path
    info = _run_kernel(_fresh_kernel())
    assert info.builds == 1 and info.loads == 0
    assert len({p.parent.name for p in _entries(disk)}) == 2


def test_a_changed_global_is_a_miss(disk, monkeypatch):
    _run_kernel(_fresh_kernel())
    monkeypatch.setitem(globals(), "SCALE", 5.0)
    k = _fresh_kernel()
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    k[(4,)](x, out, 100, BLOCK=32)
    np.testing.assert_array_equal(out, x * 5.0)
    assert k.cache_info().builds == 1


def _module(tmp_path, name, factor) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(f"""
        import dvmlang
        import dvmlang.language as dl

        @dvmlang.kernel
        def helper(v):
            return v * {factor}

        @dvmlang.kernel
        def k(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
            offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
            m = offs < n
            dl.store(out_ptr + offs, helper(dl.load(x_ptr + offs, mask=m)), mask=m)
    """))
    return p


_CHILD = """
import sys, numpy as np
sys.path.insert(0, {dir!r})
import {name} as m
x = np.arange(50, dtype=np.float32)
out = np.zeros_like(x)
m.k[(2,)](x, out, 50, BLOCK=32)
assert np.array_equal(out, x * {factor}), out
i = m.k.cache_info()
print(i.builds, i.loads)
"""


def _child(tmp_path, name, factor):
    code = _CHILD.format(dir=str(tmp_path), name=name, factor=factor)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    return tuple(int(v) for v in r.stdout.split())


def test_later_processes_read_a_build_and_a_changed_callee_is_a_miss(disk, tmp_path):
    src = tmp_path / "mods"
    src.mkdir()
    _module(src, "kmod", 2.0)
    assert _child(src, "kmod", 2.0) == (1, 0)
    assert _child(src, "kmod", 2.0) == (0, 1)  # another process reads it
    _module(src, "kmod", 3.0)  # the inlined helper changed: the entry no longer holds
    assert _child(src, "kmod", 3.0) == (1, 0)


def test_two_processes_writing_one_key_leave_one_whole_entry(disk, tmp_path):
    src = tmp_path / "mods2"
    src.mkdir()
    _module(src, "kmod2", 4.0)
    code = _CHILD.format(dir=str(src), name="kmod2", factor=4.0)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    entries = _entries(disk)
    assert len(entries) == 1 and not list(Path(disk).rglob("*.tmp"))
    assert _child(src, "kmod2", 4.0) == (0, 1)


def test_threads_writing_one_key_leave_one_whole_entry(disk):
    words = np.arange(64, dtype=np.uint64)
    from array import array
    w = array("Q", words.tobytes())
    threads = [threading.Thread(target=cache.store, args=("test", ("one key",), {"n": i}, w)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (entry,) = _entries(disk)
    head, got = cache.load("test", ("one key",))
    assert head["n"] in range(8) and list(got) == list(w)


def test_the_disk_cache_can_be_turned_off_and_cleared(disk, monkeypatch):
    _run_kernel(_fresh_kernel())
    assert len(_entries(disk)) == 1
    assert cache.info()["entries"] == 1
    assert cache.clear() == 1 and _entries(disk) == []
    monkeypatch.setenv("DVMLANG_CACHE_DIR", "off")
    info = _run_kernel(_fresh_kernel())
    assert info.builds == 1 and _entries(disk) == []


def test_the_cache_command_shows_and_clears(disk):
    _run_kernel(_fresh_kernel())
    cache.flush(timeout=120)
    r = subprocess.run([sys.executable, "-m", "dvmlang.cli", "cache"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and str(disk) in r.stdout and "1 build" in r.stdout
    r = subprocess.run([sys.executable, "-m", "dvmlang.cli", "cache", "--clear"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and "removed 1" in r.stdout and _entries(disk) == []


def _lines(bc) -> set:
    return {(bc.debug.files[fi], line) for _, fi, line, _ in bc.debug.lines}


def _projections(x, wq, wk, wv):
    q = ops.exp(x @ wq)  # three groups of one structure, each on its own line
    k = ops.exp(x @ wk)
    v = ops.exp(x @ wv)
    return q, k, v


def test_groups_that_differ_only_in_their_lines_share_one_composition():
    """A model's projections are one composition: the second and third take the first's words and get line
    tables of their own (each kernel still points at its own line), and compute what numpy computes."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    ws = [rng.standard_normal((16, 8)).astype(np.float32) * 0.3 for _ in range(3)]
    g = dvmlang.graph(_projections)
    got = g(x, *ws)
    for out, w in zip(got, ws):
        np.testing.assert_allclose(out, np.exp(x @ w), rtol=1e-5, atol=1e-5)
    bcs = g.encode(x, *ws)
    assert len(bcs) == 3 and g.stats.builds == 1  # one composition, not three
    first = _projections.__code__.co_firstlineno
    lines = [_lines(bc) for bc in bcs]
    for i, own in enumerate(lines):  # each kernel's table names its own line and no other projection's
        assert (__file__, first + 1 + i) in own
        assert not any((__file__, first + 1 + j) in own for j in range(3) if j != i)
    assert [bc.code.tobytes() for bc in bcs[1:]] == [bcs[0].code.tobytes()] * 2  # the same words
    with_lines = dvmlang.graph(_projections)  # and the shared words give the bits a composition of its own gives
    fbuild.forget()
    np.testing.assert_array_equal(np.stack(with_lines(x, *ws)), np.stack(got))


def _trap_on_each_line(t, i, j):
    a = ops.gather(t, 0, i)  # two gathers: bounds-checked, their traps' messages name their own operands
    b = ops.gather(t, 0, j)
    return a, b


def test_a_group_whose_code_names_a_place_is_composed_on_its_own():
    t = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([[0, 1, 2], [3, 0, 1]], np.int32)
    g = dvmlang.graph(_trap_on_each_line)
    a, b = g(t, i, i[::-1].copy())
    np.testing.assert_array_equal(a, np.take_along_axis(t, i, 0))
    np.testing.assert_array_equal(b, np.take_along_axis(t, i[::-1], 0))
    said = []
    for k, bad in enumerate([(np.full_like(i, 7), i), (i, np.full_like(i, 7))]):
        with pytest.raises(dvmlang.DvmError) as e:
            g(t, *bad)
        assert f"{__file__}:{_trap_on_each_line.__code__.co_firstlineno + 1 + k}" in str(e.value)
        said.append(str(e.value).splitlines()[0].split(": ", 1)[1])
    assert said[0] != said[1] and g.stats.builds == 2  # each trap names its own gather
