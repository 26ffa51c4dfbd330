"""The lazy runtime: all state that ``dvmlang.lazy`` keeps beyond one session, in one object.

``LazyRuntime`` holds the read-only guards and the last writer of each storage (``memory``), the cache of
compiled programs and the background worker (``flush``), the locks that order value state changes and device
runs, and per thread the stack of active sessions and the eager session. Everything in the package reaches
it through ``current_runtime()``; a session and its batches keep the runtime they were made in. ``fresh_runtime()``
swaps in a new, empty one for a block (tests use it to start from no cached programs, guards or worker).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from .flush import _Programs, _Worker
from .memory import _Guards, _Writers


class _Threads(threading.local):
    """Per thread: the active sessions (innermost last) and the eager session, made on first use."""

    def __init__(self):
        self.stack: list = []
        self.eager = None


class LazyRuntime:
    """The state of lazy execution. ``eager_session`` makes a thread's session for code outside every
    ``dvmlang.lazy()`` block (``session.py`` passes it: the runtime does not know the session class);
    ``capacity`` is how many compiled programs the cache keeps."""

    def __init__(self, eager_session: Callable, capacity: int = 256):
        self.eager_session = eager_session
        self.guards = _Guards()
        self.writers = _Writers()
        self.programs = _Programs(capacity)
        self.worker = _Worker()
        self.state_lock = threading.Lock()  # value state transitions (main thread marks, the worker publishes)
        self.exec_lock = threading.Lock()  # one Program runs on the simulated device at a time
        self.threads = _Threads()

    def session(self):
        """The session operations of this thread go to: the innermost active one, else the eager session."""
        t = self.threads
        if t.stack:
            return t.stack[-1]
        if t.eager is None:
            t.eager = self.eager_session()
        return t.eager


_runtime: LazyRuntime | None = None  # the runtime in use (session.py installs the first one)


def current_runtime() -> LazyRuntime:
    """The runtime in use."""
    return _runtime


def install(rt: LazyRuntime) -> LazyRuntime | None:
    """Make ``rt`` the runtime in use; returns the one it replaces."""
    global _runtime
    old, _runtime = _runtime, rt
    return old


@contextlib.contextmanager
def fresh_runtime(capacity: int = 256) -> Iterator[LazyRuntime]:
    """``with fresh_runtime() as rt:`` — a new, empty runtime for the block (no compiled programs, guards,
    sessions or worker of the one before), then the previous one again. Work already submitted to the previous
    runtime finishes first; at the end the block's own work finishes and its worker thread ends. Tensors made
    before the block can be used in it; sessions made before it keep their own runtime."""
    old = current_runtime()
    old.worker.drain()
    new = LazyRuntime(old.eager_session, capacity)
    install(new)
    try:
        yield new
    finally:
        new.worker.drain()
        new.worker.stop()
        install(old)
