"""What every executor shares: the ``Executor`` interface, an item's ``Outcome``, running one item, the progress
bar (``executor.py`` has the executors)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass

DEFAULT_TIMEOUT = 120.0  # seconds one item may take in a pool before it is killed


@dataclass
class Outcome:
    """What one item gave: ``value``, or ``error`` (a line of text: the exception, or a time-out)."""

    value: object = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _call(fn, item) -> Outcome:
    t0 = time.perf_counter()
    try:
        return Outcome(fn(item), None, time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - one item's error is its outcome, never the sweep's
        if os.environ.get("DVMLANG_TRACEBACK"):
            traceback.print_exc()
        return Outcome(None, _describe(e), time.perf_counter() - t0)


class _Progress:
    """A rich progress bar on stderr for a long sweep (or nothing)."""

    def __init__(self, total: int, label: str, show):
        self.bar = None
        if show is None:
            show = total >= 16 and (sys.stderr.isatty() or bool(os.environ.get("DVMLANG_PROGRESS")))
        if show and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self.bar.start()
            self.task = self.bar.add_task(label, total=total)

    def advance(self):
        if self.bar is not None:
            self.bar.advance(self.task)

    def close(self):
        if self.bar is not None:
            self.bar.stop()


class Executor:
    """The interface: ``map(fn, items, timeout=, progress=, label=) -> [Outcome]`` in the items' order."""

    name = "executor"
    workers = 1

    def map(self, fn, items, *, timeout: float | None = DEFAULT_TIMEOUT, progress=None, label: str = "sweep"):
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<dvmlang executor {self.name}, {self.workers} worker(s)>"
