"""The host's worker threads: row ranges of one large tile computation run side by side.

A batch's pending elementwise chain, its reduction and the store of its result are computed range of rows by
range of rows (``state.chunks``). numpy releases the GIL inside its loops, so on a machine with several cores the
ranges can run at the same time; every element is still computed by the same numpy operation on the same
values as in one call (each range is whole rows: whole programs' tiles), so the results are bit for bit those
of the calling thread alone. ``DVMLANG_HOST_THREADS`` sets how many threads take part (the calling thread
counts; default: the machine's cores, at most 8; 1 runs every range on the calling thread).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import DvmError

MIN_BYTES = 4 << 20  # a computation smaller than this runs on the calling thread (a hand-off costs tens of us)


def _threads() -> int:
    raw = os.environ.get("DVMLANG_HOST_THREADS")
    if raw is None:
        return max(1, min(8, os.cpu_count() or 1))
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise DvmError(f"DVMLANG_HOST_THREADS must be a positive number of threads, got {raw!r}")
    return n


THREADS = _threads()
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()
_local = threading.local()  # .worker: this thread is running ranges (its own ranges then run in order)


def _executor() -> ThreadPoolExecutor:
    """The worker threads (made when first needed, and again in a forked child, which has none of them)."""
    global _pool, _pool_pid
    pid = os.getpid()
    if _pool is None or _pool_pid != pid:
        with _pool_lock:
            if _pool is None or _pool_pid != pid:
                _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="dvmlang-host")
                _pool_pid = pid
    return _pool


def worth(rows: int, nbytes: int) -> bool:
    """Whether ``each_range`` runs a computation of ``rows`` rows and ``nbytes`` bytes side by side."""
    return THREADS > 1 and rows > 1 and nbytes >= MIN_BYTES and not getattr(_local, "worker", False)


def each_range(fn, ranges: list, nbytes: int) -> None:
    """Call ``fn(r0, r1)`` for every row range of ``ranges`` (disjoint; ``fn`` writes only its own rows).
    When the computation is large (``nbytes`` of results, at least ``MIN_BYTES``) and several threads may take
    part, the ranges run side by side (one range of a large computation is cut into whole-row ranges first);
    otherwise in order on the calling thread. Returns when every range is done; the first error raised is
    raised here."""
    if not worth(ranges[-1][1] - ranges[0][0], nbytes):
        for r0, r1 in ranges:
            fn(r0, r1)
        return
    if len(ranges) == 1:  # one range: cut into a few per thread, for an even share
        r0, r1 = ranges[0]
        step = max(1, -(-(r1 - r0) // (4 * THREADS)))
        ranges = [(r, min(r1, r + step)) for r in range(r0, r1, step)]  # (two rows at least: two ranges)
    claim = itertools.count()  # next() is atomic: each range is taken by one thread
    errors: list = []
    n = len(ranges)

    def drain():
        _local.worker = True
        try:
            with np.errstate(all="ignore"):  # as every launch runs (the error state is per thread)
                while not errors:
                    i = next(claim)
                    if i >= n:
                        return
                    fn(*ranges[i])
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            errors.append(e)
        finally:
            _local.worker = False

    pool = _executor()
    helpers = [pool.submit(drain) for _ in range(min(THREADS - 1, n - 1))]
    try:
        drain()
        for h in helpers:
            h.result()
    except BaseException as e:  # (Ctrl-C on this thread: the helpers stop after their range, before it returns)
        errors.append(e)
        concurrent.futures.wait(helpers)
        raise
    if errors:
        raise errors[0]


# ---- BLAS threads for small products ---------------------------------------------------------------------------

# A matrix product of fewer multiply-accumulates than this runs on one BLAS thread (DVMLANG_BLAS_SMALL=N sets
# another bound, 0 never): OpenBLAS splits products of a few hundred thousand MACs between its threads, and when the
# other cores are busy (torch's own threads spinning after an eager op, another process) its threads wait for
# them: a product of tens of microseconds took milliseconds. Its threads split the rows and columns of the result,
# never the sum over K, so every element is the same sum either way.
BLAS_SMALL = int(os.environ.get("DVMLANG_BLAS_SMALL", 1 << 24))
_blas = None  # (get, set) of the BLAS library's thread count, False when it has none we know; made when first used


def _blas_threads():
    """The thread count functions of the OpenBLAS numpy loaded (found in the process's mapped libraries), or
    False."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ln.split()[-1].startswith("/")})
    except OSError:
        return False
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas{}64_", "scipy_openblas{}", "openblas{}64_", "openblas{}"):
            get = getattr(lib, name.format("_get_num_threads"), None)
            put = getattr(lib, name.format("_set_num_threads"), None)
            if get is not None and put is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                put.restype, put.argtypes = None, [ctypes.c_int]
                return get, put
    return False


def blas_one_thread(macs: int) -> int:
    """Before a product of ``macs`` multiply-accumulates: below ``BLAS_SMALL``, BLAS on one thread; returns the
    thread count to give back (``blas_restore``), 0 when nothing changed."""
    global _blas
    if macs >= BLAS_SMALL:
        return 0
    if _blas is None:
        _blas = _blas_threads()
    if not _blas:
        return 0
    n = _blas[0]()
    if n <= 1:
        return 0
    _blas[1](1)
    return n


def blas_restore(n: int) -> None:
    if n:
        _blas[1](n)
