"""``triton.backends.compiler``: the names torch imports from it. ``GPUTarget`` describes a target."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUTarget:
    """Triton's target record. dvmlang's is ``GPUTarget("cpu", "dvmlang-sim", 32)`` (``"npu"`` where Ascend's torch
    extension is installed: ``runtime.driver``): the warp size is reported
    for programs that read it and has no effect (a program's tiles are whole-tile instructions)."""

    backend: str
    arch: object
    warp_size: int


class BaseBackend:
    """Triton's backend base class, for imports only: dvmlang has no pluggable backends."""

    def __init__(self, target: GPUTarget):
        self.target = target

    def hash(self) -> str:
        """Triton's key of a backend in its caches."""
        return f"dvmlang-{self.target.backend}-{self.target.arch}"


class Language:
    TRITON = 0
    GLUON = 1


__all__ = ["GPUTarget", "BaseBackend", "Language"]
