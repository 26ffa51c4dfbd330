"""The host's worker threads (dvmlang/npu/host.py): large tile computations run as ranges of rows side by side,
with the results and cycles of the calling thread alone."""

import importlib.util
import threading
from pathlib import Path

import numpy as np
import pytest

import dvmlang
from dvmlang.npu import Device, host

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name):
    """A gallery module, loaded from its file (examples/ stays off sys.path: its triton/ is not torch's triton)."""
    spec = importlib.util.spec_from_file_location(f"_host_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


layernorm, softmax, vector_add = _example("layernorm"), _example("softmax"), _example("vector_add")


@pytest.fixture
def threads(monkeypatch):
    """Set how many threads take part (the calling thread counts) and count the ranges run off it."""
    off = []
    real = host.each_range

    def counted(fn, ranges, nbytes):
        def fn2(r0, r1):
            if threading.current_thread() is not threading.main_thread():
                off.append((r0, r1))
            return fn(r0, r1)
        return real(fn2, ranges, nbytes)

    def use(n):
        monkeypatch.setattr(host, "THREADS", n)
        return off
    monkeypatch.setattr(host, "each_range", counted)
    return use


def _launches():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1536, 1024), dtype=np.float32)
    w, b = rng.standard_normal(1024, dtype=np.float32), rng.standard_normal(1024, dtype=np.float32)
    n = 3 << 20
    u, v = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)

    def sm(dev):
        out = np.empty_like(x)
        return out, softmax.softmax[(1536,)](out, x, 1024, 1024, 1024, BLOCK=1024, device=dev)

    def ln(dev):
        out, mean, rstd = np.empty_like(x), np.empty(1536, np.float32), np.empty(1536, np.float32)
        rec = layernorm.layernorm[(1536,)](x, out, w, b, mean, rstd, 1024, 1024, 1e-5, BLOCK=1024, device=dev)
        return np.concatenate([out.ravel(), mean, rstd]), rec

    def add(dev):
        out = np.empty_like(u)
        return out, vector_add.add[(n // 8192,)](u, v, out, n, BLOCK=8192, device=dev)
    return {"softmax": sm, "layernorm": ln, "vector add": add}


@pytest.mark.parametrize("name", ["softmax", "layernorm", "vector add"])
def test_large_launches_on_worker_threads_give_the_calling_threads_bits_and_cycles(name, threads):
    launch = _launches()[name]
    threads(1)
    alone, rec1 = launch(Device())
    off = threads(3)
    for _ in range(5):  # (on a loaded machine the calling thread may take every range before a helper wakes)
        together, rec3 = launch(Device())
        assert alone.view(np.uint32).tolist() == together.view(np.uint32).tolist()
        assert rec1.cycles == rec3.cycles and rec1.pipe_busy == rec3.pipe_busy
        if off:
            break
    assert off, "no range ran on a worker thread"


def test_each_range_runs_every_range_once_and_raises_the_first_error(monkeypatch):
    monkeypatch.setattr(host, "THREADS", 4)
    seen = []
    lock = threading.Lock()

    def fn(r0, r1):
        with lock:
            seen.append((r0, r1))
    ranges = [(i, i + 3) for i in range(0, 300, 3)]
    host.each_range(fn, ranges, host.MIN_BYTES)
    assert sorted(seen) == ranges

    def bad(r0, r1):
        if r0 == 150:
            raise dvmlang.DeviceError("a range failed")
    with pytest.raises(dvmlang.DeviceError, match="a range failed"):
        host.each_range(bad, ranges, host.MIN_BYTES)
    # small work, or one range of one row, stays on the calling thread
    where = []
    host.each_range(lambda r0, r1: where.append(threading.current_thread()), ranges, host.MIN_BYTES - 1)
    host.each_range(lambda r0, r1: where.append(threading.current_thread()), [(0, 1)], host.MIN_BYTES)
    assert set(where) == {threading.current_thread()}


def test_a_range_that_asks_for_ranges_runs_them_itself(monkeypatch):
    monkeypatch.setattr(host, "THREADS", 3)
    inner = []

    def outer(r0, r1):
        me = threading.current_thread()
        host.each_range(lambda a, b: inner.append(threading.current_thread() is me), [(0, 5), (5, 9)],
                        host.MIN_BYTES)
    host.each_range(outer, [(0, 10), (10, 20), (20, 30)], host.MIN_BYTES)
    assert inner and all(inner)


def test_a_bad_thread_count_is_refused(monkeypatch):
    monkeypatch.setenv("DVMLANG_HOST_THREADS", "zero")
    with pytest.raises(dvmlang.DvmError, match="DVMLANG_HOST_THREADS"):
        host._threads()
    monkeypatch.setenv("DVMLANG_HOST_THREADS", "2")
    assert host._threads() == 2


def test_a_small_product_runs_on_one_blas_thread_with_the_same_bits():
    """``host.blas_one_thread``: below ``BLAS_SMALL`` MACs a product runs on one BLAS thread and the count is given
    back after; the product is the same bits as on the library's threads (they split the result, not the sums)."""
    from dvmlang.npu import host
    rng = np.random.default_rng(0)
    for shape_a, shape_b in [((128, 64), (64, 64)), ((4, 128, 64), (4, 64, 64)), ((300, 257), (257, 129))]:
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32)
        want = np.matmul(a, b)
        n = host.blas_one_thread(a.size * b.shape[-1])
        try:
            if host._blas:
                assert host._blas[0]() == 1 or n == 0
            got = np.matmul(a, b)
        finally:
            host.blas_restore(n)
        assert got.tobytes() == want.tobytes()
        if host._blas and n:
            assert host._blas[0]() == n
    assert host.blas_one_thread(host.BLAS_SMALL) == 0  # (a large product keeps the library's threads)
