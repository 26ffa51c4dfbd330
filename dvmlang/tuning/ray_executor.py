"""The Ray executor (``DVMLANG_EXECUTOR=ray://...``; the ``ray`` extra): a sweep's items as Ray tasks.

``RayExecutor(None, N)`` starts a cluster on this machine for its own use (``ray.init`` with ``N`` CPUs, the
node on 127.0.0.1, no dashboard) and stops it in ``close()``; ``RayExecutor("ray://HOST:PORT")`` (Ray Client) or
``RayExecutor("auto")`` joins a running cluster and leaves it running. The sweep's function is pickled once with
cloudpickle and put in the object store; each task gets it and one item. A dvmlang kernel pickles as its Python
function (by value when its module is not importable by the workers: a script's ``__main__``), and is rebuilt
in the worker, where its builds are cached across the sweep's tasks. Items go in chunks (about four per worker:
a Ray round trip costs more than a small item), at most ``workers`` chunks at once; an item past its time bound
is interrupted in the worker (an interval timer), and a chunk past all its items' bounds is cancelled (its worker
killed).
"""

from __future__ import annotations

import copyreg
import io
import os
import sys
import time

from ..errors import DvmError
from .base import DEFAULT_TIMEOUT, Executor, Outcome, _call, _Progress

_FN_CACHE: dict = {}  # in a worker: payload object id -> the unpickled function


def _rebuild_kernel(cls, fn):
    return cls(fn)


def _reduce_kernel(k):
    return _rebuild_kernel, (type(k), k.fn)


def dumps(obj) -> bytes:
    """cloudpickle ``obj``, with dvmlang kernels reduced to their Python functions."""
    try:
        from ray import cloudpickle
    except ImportError as e:  # pragma: no cover - RayExecutor checks first
        raise DvmError("the Ray executor needs ray: pip install 'dvmlang[ray]'") from e
    from ..runtime import Kernel
    buf = io.BytesIO()
    p = cloudpickle.CloudPickler(buf, protocol=5)
    table = dict(copyreg.dispatch_table)
    table.update(getattr(cloudpickle.CloudPickler, "dispatch_table", {}) or {})
    table[Kernel] = _reduce_kernel
    for cls in _subclasses(Kernel):
        table[cls] = _reduce_kernel
    p.dispatch_table = table
    p.dump(obj)
    return buf.getvalue()


def _subclasses(cls):
    out = []
    for c in cls.__subclasses__():
        out.append(c)
        out += _subclasses(c)
    return out


class _ItemTimeout(BaseException):  # not an Exception: the item's own handlers do not catch it
    pass


def _alarm(signum, frame):
    raise _ItemTimeout()


def _run_items(payload_ref_key, payload, items, timeout):
    """A chunk of items in one task (a Ray round trip costs more than a small item): each item's outcome, each
    bounded by ``timeout`` seconds with an interval timer where the task runs on the main thread."""
    import pickle
    import signal
    import threading
    fn = _FN_CACHE.get(payload_ref_key)
    if fn is None:
        _FN_CACHE.clear()
        fn = _FN_CACHE[payload_ref_key] = pickle.loads(payload)
    timer = bool(timeout) and threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    out = []
    for item in items:
        if timer:
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        t0 = time.perf_counter()
        try:
            out.append(_call(fn, item))
        except _ItemTimeout:
            out.append(Outcome(None, f"timed out after {timeout:g} s (interrupted)", time.perf_counter() - t0))
        finally:
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
    return out


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise DvmError("the Ray executor needs ray, an optional extra: pip install 'dvmlang[ray]' (or use "
                           "DVMLANG_EXECUTOR=local)") from None
        self.ray = ray
        self.address = address
        self.started = False
        if not ray.is_initialized():
            if address is None:
                # the workers import what this process imports: its sys.path, through their environment
                path = os.pathsep.join(p for p in sys.path if p)
                os.environ["PYTHONPATH"] = path
                ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                         _node_ip_address="127.0.0.1", configure_logging=False,
                         runtime_env={"env_vars": {"PYTHONPATH": path}})
                self.started = True
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        self.workers = max(1, int(workers or ray.cluster_resources().get("CPU", 1)))
        self.name = "ray (local)" if address is None else f"ray ({address})"
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_run_items)

    def map(self, fn, items, *, timeout=DEFAULT_TIMEOUT, progress=None, label="sweep"):
        ray = self.ray
        items = list(items)
        n = len(items)
        results: list = [None] * n
        if not n:
            return results
        payload = ray.put(dumps(fn))
        key = f"{id(fn)}-{time.time_ns()}"
        # chunks: about four per worker, so a round trip is paid per chunk and the load still balances
        size = max(1, n // (4 * self.workers))
        chunks = [list(range(i, min(n, i + size))) for i in range(0, n, size)]
        running: dict = {}  # ObjectRef -> (item indices, deadline)
        bar = _Progress(n, label, progress)
        try:
            while chunks or running:
                while chunks and len(running) < self.workers:
                    idx = chunks.pop(0)
                    ref = self._remote.remote(key, payload, [items[i] for i in idx], timeout)
                    # the chunk's own bound: its items' bounds, and a little for the round trip
                    running[ref] = (idx, time.monotonic() + timeout * len(idx) + 30.0 if timeout else None)
                deadlines = [d for _, d in running.values() if d is not None]
                wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                done, _ = ray.wait(list(running), num_returns=1, timeout=wait)
                for ref in done:
                    idx, _ = running.pop(ref)
                    try:
                        outs = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - a task that failed outside the items' own code
                        outs = [Outcome(None, f"ray task failed: {type(e).__name__}: {str(e).splitlines()[0]}")] * len(idx)
                    for i, o in zip(idx, outs):
                        results[i] = o
                        bar.advance()
                now = time.monotonic()
                for ref, (idx, d) in list(running.items()):
                    if d is not None and now >= d:
                        ray.cancel(ref, force=True)
                        running.pop(ref)
                        for i in idx:
                            results[i] = Outcome(None, f"timed out after {timeout:g} s (cancelled)", float(timeout))
                            bar.advance()
        finally:
            bar.close()
        return results

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False
