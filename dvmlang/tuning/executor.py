"""Pluggable executors for sweeps (autotuning candidates, the paper evaluation's workloads): ``map`` a function
over items, each item's outcome a value or an error, each bounded in time, none stopping the others.

* ``serial`` — in this process, one after another (no time bound: the simulated device's watchdog stops a
  runaway kernel).
* ``local[:N]`` (the default) — a pool of ``N`` forked worker processes (default: the machine's cores). Workers
  inherit the function and the items when the sweep starts, so nothing is pickled on the way in; each outcome
  comes back through a pipe. A worker that overruns its item's time is killed (by its process id) and
  replaced. Where ``os.fork`` does not exist the sweep is serial.
* ``ray`` / ``ray://local[:N]`` — a Ray cluster started here for the sweep's executor (loopback only, ``N``
  worker processes, stopped by ``close()``); ``ray://HOST:PORT`` — an existing cluster through Ray Client;
  ``ray:auto`` — the cluster ``ray start`` made on this machine. The function and items are pickled with
  cloudpickle (kernels rebuild from their Python function in the workers). Needs the ``ray`` extra.

``get_executor(spec)`` makes one from a spec string, or from ``$DVMLANG_EXECUTOR`` when ``spec`` is None.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time

from ..errors import DvmError

from .base import DEFAULT_TIMEOUT, Executor, Outcome, _call, _describe, _Progress  # noqa: F401 - re-exported


class SerialExecutor(Executor):
    name = "serial"

    def map(self, fn, items, *, timeout=None, progress=None, label="sweep"):
        bar = _Progress(len(items), label, progress)
        out = []
        try:
            for it in items:
                out.append(_call(fn, it))
                bar.advance()
        finally:
            bar.close()
        return out


class LocalPool(Executor):
    """Forked worker processes, one per core by default (see the module's docstring)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, int(workers or os.cpu_count() or 1))

    def map(self, fn, items, *, timeout=DEFAULT_TIMEOUT, progress=None, label="sweep"):
        items = list(items)
        n = len(items)
        if n == 0:
            return []
        if not hasattr(os, "fork"):
            return SerialExecutor().map(fn, items, progress=progress, label=label)
        results: list = [None] * n
        pending = list(range(n))
        workers: dict = {}  # pid -> [task pipe (write fd), result pipe (read fd), item index or None, deadline]
        bar = _Progress(n, label, progress)

        def spawn():
            task_r, task_w = os.pipe()
            res_r, res_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: read an index, run it, write its outcome; leave without any cleanup
                code = 0
                try:
                    os.close(task_w)
                    os.close(res_r)
                    for w in workers.values():  # the other workers' pipes: theirs alone, or they never see EOF
                        for fd in w[:2]:
                            try:
                                os.close(fd)
                            except OSError:
                                pass
                    _one_blas_thread()
                    with os.fdopen(task_r, "rb") as tin, os.fdopen(res_w, "wb") as tout:
                        while True:
                            line = tin.readline()
                            if not line:
                                break
                            i = int(line)
                            out = _call(fn, items[i])
                            try:
                                data = pickle.dumps((i, out))
                            except Exception as e:  # noqa: BLE001 - a value that does not pickle
                                data = pickle.dumps((i, Outcome(None, f"result does not pickle: {_describe(e)}",
                                                                out.seconds)))
                            tout.write(len(data).to_bytes(8, "little") + data)
                            tout.flush()
                except BaseException:  # noqa: BLE001 - the parent sees the pipe close and reports the item
                    code = 1
                finally:
                    os._exit(code)
            os.close(task_r)
            os.close(res_w)
            workers[pid] = [task_w, res_r, None, None]
            return pid

        def give(pid):
            i = pending.pop(0)
            w = workers[pid]
            w[2], w[3] = i, (time.monotonic() + timeout) if timeout else None
            os.write(w[0], f"{i}\n".encode())

        def retire(pid, kill=False):
            w = workers.pop(pid)
            if kill:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for fd in (w[0], w[1]):
                try:
                    os.close(fd)
                except OSError:
                    pass
            os.waitpid(pid, 0)  # only our own child

        try:
            for _ in range(min(self.workers, n)):
                give(spawn())
            while any(w[2] is not None for w in workers.values()):
                busy = {w[1]: pid for pid, w in workers.items() if w[2] is not None}
                now = time.monotonic()
                deadlines = [w[3] for w in workers.values() if w[2] is not None and w[3] is not None]
                wait = max(0.0, min(deadlines) - now) if deadlines else None
                ready, _, _ = select.select(list(busy), [], [], wait)
                for fd in ready:
                    pid = busy[fd]
                    i = workers[pid][2]
                    out = _read_outcome(fd)
                    if out is None:  # the worker died
                        results[i] = Outcome(None, "worker process died", 0.0)
                        retire(pid)
                        bar.advance()
                        if pending:
                            give(spawn())
                        continue
                    results[out[0]] = out[1]
                    workers[pid][2] = None
                    bar.advance()
                    if pending:
                        give(pid)
                now = time.monotonic()
                for pid, w in list(workers.items()):
                    if w[2] is not None and w[3] is not None and now >= w[3]:
                        results[w[2]] = Outcome(None, f"timed out after {timeout:g} s (killed)", float(timeout))
                        retire(pid, kill=True)
                        bar.advance()
                        if pending:
                            give(spawn())
        finally:
            for pid in list(workers):
                retire(pid, kill=workers[pid][2] is not None)
            bar.close()
        return results


def _read_exact(fd, n: int) -> bytes | None:
    chunks = []
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _read_outcome(fd):
    head = _read_exact(fd, 8)
    if head is None:
        return None
    body = _read_exact(fd, int.from_bytes(head, "little"))
    if body is None:
        return None
    try:
        return pickle.loads(body)
    except Exception:  # noqa: BLE001
        return None


def _one_blas_thread() -> None:
    """In a worker: one BLAS thread, so that workers on different cores do not each start a thread pool that
    spins on the same cores (numpy's bundled OpenBLAS; nothing happens where it is not found)."""
    import ctypes
    import glob

    import numpy as np
    for path in glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads"):
            f = getattr(lib, name, None)
            if f is not None:
                f(1)
                return


_SHARED: dict = {}  # spec -> the executor shared() made for it (closed when the process exits)


def shared(spec=None) -> Executor:
    """``get_executor(spec)``, made once per spec in this process and reused (a Ray cluster is started once, not
    per tuning), closed when the process exits."""
    if isinstance(spec, Executor):
        return spec
    if spec is None:
        spec = os.environ.get("DVMLANG_EXECUTOR") or "local"
    ex = _SHARED.get(spec)
    if ex is None:
        import atexit
        ex = _SHARED[spec] = get_executor(spec)
        atexit.register(ex.close)
    return ex


def get_executor(spec=None) -> Executor:
    """An executor from ``spec``: an ``Executor`` (returned as is), ``"serial"``, ``"local"``, ``"local:N"``,
    ``"ray"``, ``"ray://local"``, ``"ray://local:N"``, ``"ray://HOST:PORT"`` or ``"ray:auto"``; None reads
    ``$DVMLANG_EXECUTOR`` (default ``local``). The caller closes what it made (``with get_executor(...) as
    pool``)."""
    if isinstance(spec, Executor):
        return spec
    if spec is None:
        spec = os.environ.get("DVMLANG_EXECUTOR") or "local"
    if not isinstance(spec, str):
        raise DvmError(f"an executor is an Executor or a spec string such as 'local:2' or 'ray://local', got "
                       f"{type(spec).__name__}")
    s = spec.strip()
    if s == "serial":
        return SerialExecutor()
    if s == "local" or s.startswith("local:"):
        n = s.partition(":")[2]
        if n and not n.isdigit():
            raise DvmError(f"executor {spec!r}: the worker count after 'local:' must be a positive integer")
        return LocalPool(int(n) if n else None)
    if s == "ray" or s.startswith("ray:"):
        from .ray_executor import RayExecutor
        rest = s[3:].lstrip(":")
        if rest.startswith("//"):
            rest = rest[2:]
        if rest in ("", "local") or rest.startswith("local:"):
            n = rest.partition(":")[2]
            if n and not n.isdigit():
                raise DvmError(f"executor {spec!r}: the worker count after 'ray://local:' must be a positive integer")
            return RayExecutor(None, int(n) if n else None)
        return RayExecutor("auto" if rest == "auto" else f"ray://{rest}")
    raise DvmError(f"unknown executor {spec!r}: expected 'serial', 'local[:N]', 'ray://local[:N]', 'ray://HOST:PORT' "
                   "or 'ray:auto' (also as $DVMLANG_EXECUTOR)")
