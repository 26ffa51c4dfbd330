"""``triton.backends.compiler``: the names torch imports from it. ``GPUTarget`` describes a target."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUTarget:
    """Triton's target record. dvmlang's is ``GPUTarget("npu", "dvmlang-sim", 32)``: the warp size is reported
    for programs that read it and has no effect (a program's tiles are whole-tile instructions)."""

    backend: str
    arch: object
    warp_size: int


class BaseBackend:
    """Triton's backend base class, for imports only: dvmlang has no pluggable backends."""

    def __init__(self, target: GPUTarget):
        self.target = target


class Language:
    TRITON = 0
    GLUON = 1


__all__ = ["GPUTarget", "BaseBackend", "Language"]
