"""A ``rich.progress`` bar that appears only when the work turns out to take longer than about a second
(and only on a terminal), so short runs and captured output stay clean."""

from __future__ import annotations

import time

DELAY_S = 1.0


class LazyProgress:
    """``update(done)`` as the work advances; ``close()`` at the end. Shows nothing for short work."""

    def __init__(self, description: str, total: int, unit: str = "", console=None, delay: float = DELAY_S):
        self.description = description
        self.total = max(1, int(total))
        self.unit = unit
        self.console = console
        self.delay = delay
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None
        self.done = 0
        self.enabled = True
        if console is None:
            from rich.console import Console
            self.console = Console(stderr=True)
        if not self.console.is_terminal:
            self.enabled = False

    def update(self, done: int) -> None:
        if not self.enabled or done <= self.done:
            return
        self.done = done
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.delay:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn(self.description), BarColumn(), MofNCompleteColumn(),
                                TextColumn(self.unit), TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=self.total)
        self.bar.update(self.task, completed=min(done, self.total))

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
