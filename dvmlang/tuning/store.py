"""The autotuning cache on disk: content-addressed, written atomically, shareable as one file.

An entry's name is the SHA-256 of what decides a tuning's outcome (``digest``): the kernel's source, the tuning
key, the device profile, the dvmlang version and the search space (or the listed configs). It lives in
``$DVMLANG_CACHE_DIR/autotune/`` (default ``~/.cache/dvmlang/autotune/``) as ``<digest>.json``, written to a
temporary file and renamed. An entry holds its own digest and a checksum of its body: a file that does not
parse, is truncated, has another format, names another digest or fails its checksum is a miss (the tuning runs
again and rewrites it), never an error.

``export_cache(path)`` writes every valid entry into one JSON file; ``import_cache(path)`` checks each entry of
such a file and stores the valid ones, so a team or a cluster tunes once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

FORMAT = "dvmlang-autotune/1"
BUNDLE = "dvmlang-autotune-bundle/1"


def cache_dir() -> Path | None:
    """The folder of the tunings, or None when the disk cache is off (``DVMLANG_CACHE_DIR=off``: then a tuning
    is kept by its tuner alone, for the process)."""
    from ..cache import root
    r = root()
    return None if r is None else r / "autotune"


def digest(parts: dict) -> str:
    """The content address of a tuning: SHA-256 of ``parts`` as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _valid(entry, want: str | None = None) -> bool:
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return False
    body = entry.get("body")
    d = entry.get("digest")
    if not isinstance(body, dict) or not isinstance(d, str) or len(d) != 64 or (want is not None and d != want):
        return False
    return entry.get("checksum") == _checksum(body)


def load(d: str) -> dict | None:
    """The body of entry ``d``, or None (absent, unreadable, or not a valid entry for ``d``)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        entry = json.loads((folder / f"{d}.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return entry["body"] if _valid(entry, d) else None


def save(d: str, body: dict) -> bool:
    """Store ``body`` as entry ``d``, atomically; False when the cache cannot be written (a cache that cannot
    be written only costs a tuning next time)."""
    folder = cache_dir()
    if folder is None:
        return False
    entry = {"format": FORMAT, "digest": d, "body": body, "checksum": _checksum(body)}
    return _write(folder / f"{d}.json", json.dumps(entry, sort_keys=True))


def _write(path: Path, text: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return True
    except (OSError, TypeError, ValueError):
        return False


def export_cache(path) -> int:
    """Write every valid entry of the cache into one file at ``path``; returns how many."""
    entries = []
    root = cache_dir()
    for f in sorted(root.glob("*.json")) if root is not None and root.is_dir() else []:
        try:
            e = json.loads(f.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if _valid(e, f.stem):
            entries.append(e)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": BUNDLE, "entries": entries}, sort_keys=True))
    os.replace(tmp, path)
    return len(entries)


def import_cache(path) -> int:
    """Store the valid entries of a file ``export_cache`` wrote; returns how many were stored (an invalid entry
    is skipped)."""
    from ..errors import DvmError
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DvmError(f"cannot read the autotuning cache file {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != BUNDLE or not isinstance(data.get("entries"), list):
        raise DvmError(f"{path} is not an autotuning cache file (dvmlang.tuning.export_cache writes them)")
    n = 0
    for e in data["entries"]:
        if _valid(e):
            n += save(e["digest"], e["body"])
    return n
