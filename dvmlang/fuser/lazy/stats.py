"""What a lazy session did: one ``FlushRecord`` per flush (why it happened and what it ran) and ``LazyStats``,
their totals and the background thread's overlap with the main thread."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

REASONS = ("observe", "unfusible", "hazard", "size cap", "nested", "exit", "explicit", "eager")


@dataclass
class FlushRecord:
    """One flush: why it happened and what it ran. ``ops`` counts the captured operations it computed (views
    and casts included), ``dead`` those it dropped because nothing could observe them, ``outputs`` the values
    it published, ``bytes_stored`` the GM bytes its launch(es) wrote (results and workspaces between fused
    groups), ``encode_s`` the host time spent planning and encoding (including ``builds`` kernel builds when a
    program or a tile shape is new), ``sim_s`` the simulator's wall time."""

    index: int
    reason: str
    detail: str = ""
    ops: int = 0
    dead: int = 0
    outputs: int = 0
    kernels: int = 0
    launches: int = 0
    bytes_stored: int = 0
    bytes_read: int = 0
    cycles: int = 0
    encode_s: float = 0.0
    sim_s: float = 0.0
    new_program: bool = False
    builds: int = 0
    background: bool = False
    names: list = field(default_factory=list)
    error: str | None = None


class LazyStats:
    """What a session did. ``print(session.stats)`` gives a summary; ``flushes`` has one record per flush."""

    def __init__(self):
        self.flushes: list[FlushRecord] = []
        self.encode_intervals: list[tuple[float, float]] = []  # worker wall intervals spent encoding
        self.blocked_intervals: list[tuple[float, float]] = []  # main thread waiting for the worker

    @property
    def launches(self) -> int:
        return sum(f.launches for f in self.flushes)

    @property
    def ops_fused(self) -> int:
        """Operations computed by flushes (each either fused with others or alone in its kernel)."""
        return sum(f.ops for f in self.flushes)

    @property
    def ops_dropped(self) -> int:
        return sum(f.dead for f in self.flushes)

    @property
    def kernels(self) -> int:
        return sum(f.kernels for f in self.flushes)

    @property
    def bytes_stored(self) -> int:
        return sum(f.bytes_stored for f in self.flushes)

    @property
    def cycles(self) -> int:
        return sum(f.cycles for f in self.flushes)

    @property
    def encode_s(self) -> float:
        return sum(f.encode_s for f in self.flushes)

    @property
    def reasons(self) -> collections.Counter:
        return collections.Counter(f.reason for f in self.flushes)

    @property
    def blocked_s(self) -> float:
        return sum(b - a for a, b in self.blocked_intervals)

    @property
    def hidden_encode_s(self) -> float:
        """Encode time on the background thread during which the main thread was not waiting for it."""
        enc = _union(self.encode_intervals)
        blk = _union(self.blocked_intervals)
        total = sum(b - a for a, b in enc)
        return max(0.0, total - _overlap(enc, blk))

    def __repr__(self) -> str:
        r = ", ".join(f"{k} {v}" for k, v in self.reasons.items())
        return (f"<LazyStats {len(self.flushes)} flushes ({r}), {self.launches} launches, {self.ops_fused} ops, "
                f"{self.bytes_stored} bytes stored>")

    def __str__(self) -> str:
        lines = [f"{len(self.flushes)} flush(es), {self.launches} launch(es), {self.kernels} kernel(s), "
                 f"{self.ops_fused} op(s) computed, {self.ops_dropped} dropped, {self.bytes_stored} bytes stored, "
                 f"{self.cycles} cycles"]
        enc = self.encode_s
        if enc:
            hid = self.hidden_encode_s
            lines.append(f"encode {enc * 1e3:.2f} ms on the host"
                         + (f", {hid * 1e3:.2f} ms of it hidden by the background thread" if hid else ""))
        for f in self.flushes:
            what = f"{f.ops} op(s) -> {f.kernels} kernel(s) in {f.launches} launch(es), {f.outputs} output(s), " \
                   f"{f.bytes_stored} B stored, {f.cycles} cycles"
            if f.dead:
                what += f", {f.dead} dead op(s) dropped"
            if f.error:
                what += f", FAILED: {f.error}"
            lines.append(f"  #{f.index} {f.reason}" + (f" ({f.detail})" if f.detail else "") + f": {what}")
        return "\n".join(lines)


def _union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(xs, ys) -> float:
    total, j = 0.0, 0
    for a, b in xs:
        while j < len(ys) and ys[j][1] <= a:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            total += max(0.0, min(b, ys[k][1]) - max(a, ys[k][0]))
            k += 1
    return total

