"""``triton.runtime.cache``: the names torch's Inductor and packages import from it. ``triton_key()`` names the
compiler (dvmlang's version); ``get_cache_manager(key)`` gives a ``FileCacheManager`` over a folder of
``$DVMLANG_CACHE_DIR`` (files put there are kept, as in Triton's cache; dvmlang's own builds do not use it)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from .. import knobs


def triton_key() -> str:
    """The key of the compiler in Triton's caches: dvmlang's version."""
    from ... import __version__
    return f"dvmlang-{__version__}"


def _base32(key) -> str:
    return base64.b32encode(bytes.fromhex(key)).decode("utf-8").rstrip("=")


def _base64(key) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(key)).decode("utf-8").rstrip("=")


def _cache_root() -> Path:
    return Path(os.environ.get("DVMLANG_CACHE_DIR") or Path.home() / ".cache" / "dvmlang") / "triton"


class FileCacheManager:
    """Triton's file cache of one key: ``get_file``, ``put``, ``get_group``, ``put_group``."""

    def __init__(self, key: str, override: bool = False, dump: bool = False):
        self.key = key
        self.cache_dir = str(_cache_root() / key)

    def _path(self, filename: str) -> Path:
        return Path(self.cache_dir) / filename

    def has_file(self, filename: str) -> bool:
        return self._path(filename).is_file()

    def get_file(self, filename: str) -> str | None:
        return str(self._path(filename)) if self.has_file(filename) else None

    def put(self, data, filename: str, binary: bool = True) -> str:
        path = self._path(filename)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str) and binary:
            data = data.encode()
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        tmp.write_bytes(data) if isinstance(data, bytes) else tmp.write_text(data)
        os.replace(tmp, path)
        return str(path)

    def get_group(self, filename: str) -> dict | None:
        return None

    def put_group(self, filename: str, group: dict) -> str:
        return self.put(repr(group), filename, binary=False)


def get_cache_manager(key: str) -> FileCacheManager:
    return FileCacheManager(key)


def make_so_cache_key(version_hash, signature, constants, ids, **kwargs) -> str:
    return hashlib.sha256(f"{version_hash}-{signature}-{constants}-{ids}-{sorted(kwargs.items())}".encode()).hexdigest()


__all__ = ["triton_key", "get_cache_manager", "FileCacheManager", "knobs", "_base32", "_base64", "make_so_cache_key"]
