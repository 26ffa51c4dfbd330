"""Builds on disk: a content-addressed cache that later processes read instead of building again.

A build (a fused group's composed template, or a ``@dvmlang.kernel``'s template for one specialisation) is
stored under ``$DVMLANG_CACHE_DIR`` (default ``~/.cache/dvmlang``) in ``builds/<version>/``, one file per key:

* the **version** folder names dvmlang's version, a fingerprint of the ISA table (every row's name, opcode and
  fields) and a fingerprint of the build path's modules (their sizes and modification times), so a build from
  other code is never read;
* the **file name** is a hash of the key (the build's structure and everything it depends on); the file holds the
  key's text too, and a key that differs is a miss (a foreign entry);
* the **file** is ``DVMB`` + a format number + a CRC-32 + a MAC + a JSON header + the instruction words. It is
  written under a temporary name and renamed, so a reader never sees half a file and two processes writing one
  key leave one whole entry. A file that is truncated, corrupt, foreign or unreadable is a miss: the build is
  made again and the entry rewritten. Nothing in it is executed or unpickled.
* the **MAC** is an HMAC-SHA256 of the entry under this user's key (``key`` in the cache folder: 32 random
  bytes, made once, readable by its owner only). An entry whose MAC holds was written by this user's dvmlang
  from a template it composed, and is run as that template would have been (``signed``); any other entry (a
  copied folder, another user's, edited bytes with a CRC made to match) meets the validator before it runs, and
  one the validator refuses is a miss.

``DVMLANG_CACHE_DIR=off`` turns the disk cache off. ``dvmlang cache`` shows where it is and how much it holds;
``dvmlang cache --clear`` (or ``clear()``) removes it.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import stat
import struct
import threading
import zlib
from array import array
from pathlib import Path

from . import dtypes as dt
from .errors import SourceLoc

MAGIC = b"DVMB"
FORMAT = 2
_HEAD = struct.Struct("<4sII32s")  # magic, format, crc32 of everything after the head, its MAC under the user's key
_NO_MAC = bytes(32)
_lock = threading.Lock()
_version: str | None = None
# the modules whose code decides what a build holds (the frontend, the IR, lowering, the ISA, the fuser's
# composer): a change to any of them is another cache version
_BUILD_PATH = ("frontend", "ir", "vm", "fuser", "language", "opdefs.py", "dtypes.py", "special.py", "runtime.py",
               "args.py", "npu/profile.py")


def root() -> Path | None:
    """The cache folder, or None when the disk cache is off."""
    d = os.environ.get("DVMLANG_CACHE_DIR")
    if d is not None:
        if d.strip().lower() in ("", "off", "0", "none"):
            return None
        return Path(d).expanduser()
    return Path.home() / ".cache" / "dvmlang"


def version() -> str:
    """The folder name of this code's builds: dvmlang's version, the ISA table's and the build path's
    fingerprints."""
    global _version
    if _version is None:
        from ._version import __version__
        from .vm import isa
        h = hashlib.sha256()
        for ins in sorted(isa.BY_NAME.values(), key=lambda i: i.opcode):
            h.update(repr((ins.name, ins.opcode, int(ins.pipe), ins.words, ins.packing)).encode())
        isa_fp = h.hexdigest()[:12]
        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parent
        for entry in _BUILD_PATH:
            p = pkg / entry
            files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
            for f in files:
                try:
                    st = f.stat()
                except OSError:
                    continue
                h.update(f"{f.relative_to(pkg)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _version = f"{__version__}-isa{isa_fp}-code{h.hexdigest()[:12]}"
    return _version


_PROFILE_KEYS: dict = {}


def profile_key(profile) -> str:
    """A profile's fields as text (the same in every process), made once per profile object."""
    k = _PROFILE_KEYS.get(id(profile))
    if k is None or k[0] is not profile:
        k = _PROFILE_KEYS[id(profile)] = (profile, repr(profile))
    return k[1]


_SECRETS: dict = {}  # cache folder -> this user's key there (None: no key can be trusted there)


def secret() -> bytes | None:
    """This user's key for the entries in the cache folder: made once (32 random bytes, mode 0600, created
    exclusively so that two processes agree on one), or None when it cannot be made or read, is not a regular
    file of this user's, or others may read or write it (then no entry is trusted)."""
    r = root()
    if r is None:
        return None
    if r in _SECRETS:
        return _SECRETS[r]
    path = r / "key"
    got = None
    try:
        if not path.exists():
            r.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"key.{os.getpid()}.{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
            try:
                os.link(tmp, path)  # (fails when another process made the key first: then its key is the key)
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
            if stat.S_ISREG(st.st_mode) and mine and not st.st_mode & 0o077:
                data = f.read(33)
                got = data if len(data) == 32 else None
    except OSError:
        got = None
    _SECRETS[r] = got
    return got


def _mac(key: bytes | None, body: bytes) -> bytes:
    return _NO_MAC if key is None else hmac.new(key, body, hashlib.sha256).digest()


def _folder() -> Path | None:
    r = root()
    return None if r is None else r / "builds" / version()


def key_text(key) -> str:
    return repr(key)


def _path(folder: Path, text: str) -> Path:
    return folder / (hashlib.sha256(text.encode()).hexdigest()[:40] + ".dvmbuild")


# ---- templates as JSON ------------------------------------------------------------------------------------

def _loc(loc) -> list | None:
    if loc is None:
        return None
    return [loc.file, loc.line, loc.col, loc.end_line, loc.end_col, loc.func]


def _unloc(v) -> SourceLoc | None:
    if v is None:
        return None
    f, line, col, el, ec, func = v
    if not (isinstance(f, str) and isinstance(line, int) and isinstance(col, int) and isinstance(func, str)):
        raise ValueError("bad source location")
    return SourceLoc(f, line, col, el if isinstance(el, int) else None, ec if isinstance(ec, int) else None, func)


def template_fields(t) -> dict:
    return {"name": t.name, "layouts": [[d.code, list(s)] for d, s in t.layouts],
            "reg_types": [d.code for d in t.reg_types], "footprint": dict(t.footprint),
            "relocs": [list(r) for r in t.relocs], "scalar_slots": [[w, p, d.code] for w, p, d in t.scalar_slots],
            "debug": [[pc, _loc(loc)] for pc, loc in t.debug], "strings": list(t.strings), "kind": t.kind,
            "double_buffer": bool(t.double_buffer)}


def _ints(v, n=None) -> list:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError("expected a list of ints")
    if n is not None and len(v) != n:
        raise ValueError("wrong length")
    return v


def template_from(h: dict, words: array):
    from .vm.lower.program import Template
    by = dt.BY_CODE
    layouts = [(by[c], tuple(_ints(s))) for c, s in h["layouts"]]
    reg_types = [by[c] for c in _ints(h["reg_types"])]
    footprint = {str(k): int(v) for k, v in h["footprint"].items()}
    relocs = [tuple(_ints(r, 3)) for r in h["relocs"]]
    slots = [(w, p, by[c]) for w, p, c in (_ints(x, 3) for x in h["scalar_slots"])]
    debug = [(int(pc), _unloc(loc)) for pc, loc in h["debug"]]
    strings = [str(s) for s in h["strings"]]
    if h["kind"] not in ("vector", "mix"):
        raise ValueError("bad kind")
    for w, _, _ in relocs:
        if not 0 <= w < len(words):
            raise ValueError("relocation outside the code")
    for w, _, _ in slots:
        if not 0 <= w < len(words):
            raise ValueError("scalar slot outside the code")
    return Template(str(h["name"]), words, layouts, reg_types, footprint, [], relocs, slots, debug, strings,
                    h["kind"], bool(h["double_buffer"]))


# ---- entries ----------------------------------------------------------------------------------------------

_queue: list = []
_writer: threading.Thread | None = None
_pending = threading.Condition(_lock)


def store(kind: str, key, header: dict, words: array) -> None:
    """Queue an entry for the writer thread (off the build's critical path). Writing is atomic (a temporary
    file renamed into place); failures are silent: the cache is an optimisation, and a read-only or full disk
    must not fail a build."""
    global _writer
    folder = _folder()  # where the cache is now (not when the writer gets to it)
    if folder is None:
        return
    with _lock:
        _queue.append((folder, kind, key_text(key), header, array("Q", words)))
        if _writer is None or not _writer.is_alive():
            _writer = threading.Thread(target=_write_queued, name="dvmlang-cache-writer", daemon=True)
            _writer.start()
        _pending.notify()


def flush(timeout: float = 5.0) -> None:
    """Wait until every queued entry is on disk (tests, and the end of the process)."""
    with _lock:
        _pending.wait_for(lambda: not _queue and not _writing, timeout)


_writing = False


def _write_queued() -> None:
    global _writing
    while True:
        with _lock:
            while not _queue:
                _writing = False
                _pending.notify_all()
                if not _pending.wait(timeout=30.0) and not _queue:
                    return
            item = _queue.pop(0)
            _writing = True
        _write(*item)


atexit.register(flush, 2.0)


def _write(folder: Path, kind: str, text: str, header: dict, words: array) -> None:
    head = json.dumps({**header, "entry": kind, "key": text}, separators=(",", ":")).encode()
    body = struct.pack("<I", len(head)) + head + words.tobytes()
    data = _HEAD.pack(MAGIC, FORMAT, zlib.crc32(body), _mac(secret(), body)) + body
    path = _path(folder, text)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def load(kind: str, key) -> tuple[dict, array] | None:
    """(header, words) of the entry for ``key``, or None: absent, unreadable, truncated, corrupt or foreign."""
    got = load_signed(kind, key)
    return None if got is None else got[:2]


def load_signed(kind: str, key) -> tuple[dict, array, bool] | None:
    """``load``'s (header, words), and whether the entry's MAC holds under this user's key (written by this
    user's dvmlang, not changed since)."""
    folder = _folder()
    if folder is None:
        return None
    text = key_text(key)
    try:
        data = _path(folder, text).read_bytes()
    except OSError:
        return None
    try:
        if len(data) < _HEAD.size + 4:
            return None
        magic, fmt, crc, mac = _HEAD.unpack_from(data)
        body = data[_HEAD.size:]
        if magic != MAGIC or fmt != FORMAT or zlib.crc32(body) != crc:
            return None
        key_bytes = secret()
        signed = key_bytes is not None and hmac.compare_digest(mac, _mac(key_bytes, body))
        (n,) = struct.unpack_from("<I", body)
        head = json.loads(body[4:4 + n].decode())
        raw = body[4 + n:]
        if not isinstance(head, dict) or head.get("entry") != kind or head.get("key") != text or len(raw) % 8:
            return None
        words = array("Q")
        words.frombytes(raw)
        if struct.pack("=I", 1) != struct.pack("<I", 1):
            words.byteswap()
        return head, words, signed
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error, RecursionError):
        return None


# ---- housekeeping ---------------------------------------------------------------------------------------------

def info() -> dict:
    """Where the cache is, and its entries and bytes (this version's and all)."""
    r = root()
    out = {"root": str(r) if r is not None else None, "version": version(), "entries": 0, "bytes": 0,
           "all_entries": 0, "all_bytes": 0}
    if r is None or not (r / "builds").is_dir():
        return out
    for f in (r / "builds").rglob("*.dvmbuild"):
        try:
            n = f.stat().st_size
        except OSError:
            continue
        out["all_entries"] += 1
        out["all_bytes"] += n
        if f.parent.name == version():
            out["entries"] += 1
            out["bytes"] += n
    return out


def clear() -> int:
    """Remove every build on disk (every version); returns how many files were removed."""
    r = root()
    if r is None or not (r / "builds").is_dir():
        return 0
    n = 0
    with _lock:
        for f in sorted((r / "builds").rglob("*"), key=lambda p: -len(p.parts)):
            try:
                if f.is_dir():
                    f.rmdir()
                else:
                    f.unlink()
                    n += f.suffix == ".dvmbuild"
            except OSError:
                pass
    return n
