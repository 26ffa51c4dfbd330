"""``triton.profiler`` (proton) on simulated time: ``import dvmlang.triton.profiler as proton``.

Proton profiles GPU kernels; here it records the kernel launches a program makes while a profile is active,
with each launch's **simulated** time (``LaunchRecord.time_us``), grouped under the ``proton.scope`` names
that enclose them. ``start(name)`` begins a profile (``hook="triton"`` is accepted: every dvmlang launch is a
Triton launch), ``activate``/``deactivate`` pause and resume recording, ``scope(name, metrics)`` (a context
manager or decorator) names a region and attaches the metrics it is given (``flops16``, ``bytes``, ...),
``finalize()`` writes ``<name>.hatchet`` (JSON: a tree of frames with ``time (ns)``, ``count`` and the
scope metrics) and ends the profile. ``triton.profiler.viewer`` reads that file back (``parse``,
``print_tree``). Host code inside a scope (a torch CPU operation) launches nothing and has no simulated
time: its frame has ``count`` 0 and time 0. Hardware counters, ``context="python"`` stacks and other
backends (``cupti``, ``roctracer``) do not exist here: ``backend=`` is accepted and ignored, ``data="trace"``
raises.
"""

from __future__ import annotations

import contextlib
import functools
import json

from ...errors import DvmError

__all__ = ["start", "activate", "deactivate", "finalize", "scope", "enter_scope", "exit_scope", "viewer"]


class _Profile:
    def __init__(self, name: str):
        self.name = name
        self.active = True
        self.root = _Frame("ROOT")
        self.stack = [self.root]
        self.session = None


class _Frame:
    def __init__(self, name: str):
        self.name = name
        self.children: dict[str, _Frame] = {}
        self.metrics: dict[str, float] = {}
        self.count = 0
        self.time_ns = 0.0

    def child(self, name: str) -> "_Frame":
        f = self.children.get(name)
        if f is None:
            f = self.children[name] = _Frame(name)
        return f

    def to_json(self) -> dict:
        kids = [c.to_json() for c in self.children.values()]
        time = self.time_ns + sum(k["metrics"]["time (ns)"] for k in kids)
        count = self.count + sum(k["metrics"]["count"] for k in kids)
        metrics = {"time (ns)": time, "count": count, **self.metrics}
        return {"frame": {"name": self.name, "type": "function"}, "metrics": metrics, "children": kids}


_PROFILE: _Profile | None = None


def _collect() -> None:
    """Move the launches recorded since the last collection into the frame of the current scope."""
    p = _PROFILE
    if p is None or p.session is None:
        return
    s = p.session
    p.session = None
    s.__exit__(None, None, None)
    from ...trace.record import active_session
    outer = active_session()
    if outer is not None:  # a trace around the profile (the gallery's) still sees these launches
        outer.launches.extend(s.launches)
    frame = p.stack[-1]
    for r in s.launches:
        f = frame.child(r.name)
        f.count += 1
        f.time_ns += r.time_us * 1e3


def _record() -> None:
    from ...trace.record import Session
    p = _PROFILE
    if p is not None and p.active and p.session is None:
        p.session = Session(max_events=0, summary_only=True)
        p.session.__enter__()


def start(name: str | None = None, *, context: str = "shadow", data: str = "tree", backend=None, mode=None,
          hook=None):
    """Begin a profile named ``name`` (the file ``finalize`` writes is ``<name>.hatchet``); returns its id, 0."""
    global _PROFILE
    if data != "tree":
        raise DvmError(f"proton.start(data={data!r}): only the 'tree' profile exists here (simulated launch times)")
    if hook not in (None, "triton"):
        raise DvmError(f"proton.start(hook={hook!r}): the only hook is 'triton'")
    if _PROFILE is not None:
        finalize()
    _PROFILE = _Profile(name or "proton")
    _record()
    return 0


def activate(session: int | None = 0) -> None:
    """Resume recording launches."""
    if _PROFILE is not None:
        _PROFILE.active = True
        _record()


def deactivate(session: int | None = 0, flushing: bool = False) -> None:
    """Pause recording: launches until the next ``activate`` are not in the profile."""
    if _PROFILE is not None:
        _collect()
        _PROFILE.active = False


def enter_scope(name: str, metrics: dict | None = None) -> None:
    p = _PROFILE
    if p is None:
        return
    _collect()
    f = p.stack[-1].child(name)
    for k, v in (metrics or {}).items():
        f.metrics[k] = f.metrics.get(k, 0) + v
    p.stack.append(f)
    _record()


def exit_scope(name: str | None = None) -> None:
    p = _PROFILE
    if p is None or len(p.stack) == 1:
        return
    _collect()
    p.stack.pop()
    _record()


class scope(contextlib.ContextDecorator):
    """``with proton.scope(name, metrics):`` or ``@proton.scope(name)``: launches inside are recorded under
    ``name``; ``metrics`` (numbers) are added to the scope's frame each time it is entered."""

    def __init__(self, name: str, metrics: dict | None = None):
        self.name = name
        self.metrics = metrics

    def __enter__(self):
        enter_scope(self.name, self.metrics)
        return self

    def __exit__(self, *exc):
        exit_scope(self.name)
        return False


def finalize(session: int | None = None, output_format: str = "hatchet") -> str | None:
    """End the profile and write ``<name>.hatchet``; returns the file's path (None when no profile is running)."""
    global _PROFILE
    p = _PROFILE
    if p is None:
        return None
    _collect()
    _PROFILE = None
    path = f"{p.name}.hatchet"
    tree = p.root.to_json()
    with open(path, "w") as f:
        json.dump([tree], f, indent=1)
    return path


def profile(func=None, *, name: str | None = None, **kw):
    """``@proton.profile``: the decorated function runs inside ``start(name)`` ... ``finalize()``."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            start(name or fn.__name__, **kw)
            try:
                return fn(*args, **kwargs)
            finally:
                finalize()
        return inner
    return wrap(func) if func is not None else wrap


from . import viewer  # noqa: E402,F401 - Triton's triton.profiler.viewer
