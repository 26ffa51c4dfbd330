"""Control flow (including break, continue and early return), compile-time features, printing,
pointer analysis and atomics."""

import inspect
import warnings

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

SCALE = dl.constexpr(3)
OFFSET = 0.5


@dvmlang.kernel
def ranges(out_ptr, n, step, MODE: dl.constexpr):
    total = 0
    count = 0
    if MODE == "neg":
        for i in range(n, 0, -2):
            total += i
            count += 1
    elif MODE == "runtime_step":
        for i in range(0, n, step):
            total += i
            count += 1
    elif MODE == "runtime_neg_step":
        for i in range(n, -1, step):
            total += i
            count += 1
    elif MODE == "static":
        for i in dl.static_range(0, 8, 3):
            total += i * SCALE
            count += 1
    elif MODE == "nested":
        for i in range(n):
            for j in range(i):
                total += j
                count += 1
    else:
        for i in range(5, 5):
            total += 100
        count = -1
    dl.store(out_ptr, total)
    dl.store(out_ptr + 1, count)


@pytest.mark.parametrize("mode,n,step,ref", [
    ("neg", 9, 0, [9 + 7 + 5 + 3 + 1, 5]), ("runtime_step", 10, 3, [0 + 3 + 6 + 9, 4]),
    ("runtime_neg_step", 6, -4, [6 + 2, 2]), ("static", 0, 0, [(0 + 3 + 6) * 3, 3]),
    ("nested", 5, 0, [sum(j for i in range(5) for j in range(i)), 10]), ("empty", 0, 0, [0, -1]),
])
def test_ranges(mode, n, step, ref):
    out = np.zeros(2, np.int32)
    ranges[(1,)](out, n, step, MODE=mode)
    assert out.tolist() == ref


@dvmlang.kernel
def flow(x_ptr, out_ptr, n, limit, BLOCK: dl.constexpr, MODE: dl.constexpr):
    pid = dl.program_id(0)
    acc = dl.zeros((BLOCK,), dl.float32)
    it = 0
    if MODE == "break":
        for start in range(0, n, BLOCK):
            cols = start + dl.arange(0, BLOCK)
            x = dl.load(x_ptr + pid * n + cols, mask=cols < n, other=0.0)
            if dl.max(x, axis=0) > limit:
                break
            acc += x
            it += 1
    elif MODE == "continue":
        for start in range(0, n, BLOCK):
            cols = start + dl.arange(0, BLOCK)
            x = dl.load(x_ptr + pid * n + cols, mask=cols < n, other=0.0)
            it += 1
            if dl.max(x, axis=0) > limit:
                continue
            acc += x
    elif MODE == "while":
        start = 0
        while start < n and it < 3:
            cols = start + dl.arange(0, BLOCK)
            acc += dl.load(x_ptr + pid * n + cols, mask=cols < n, other=0.0)
            start += BLOCK
            it += 1
    else:  # early return
        if pid % 2 == 1:
            return
        for start in range(0, n, BLOCK):
            cols = start + dl.arange(0, BLOCK)
            acc += dl.load(x_ptr + pid * n + cols, mask=cols < n, other=0.0)
            it += 1
    dl.store(out_ptr + pid * 2, dl.sum(acc, axis=0))
    dl.store(out_ptr + pid * 2 + 1, it.to(dl.float32))


def _flow_ref(x, limit, block, mode):
    rows, n = x.shape
    out = np.zeros((rows, 2), np.float32)
    for r in range(rows):
        acc, it = 0.0, 0
        if mode == "return" and r % 2 == 1:
            continue
        for k, s in enumerate(range(0, n, block)):
            chunk = x[r, s:s + block]
            if mode == "break":
                if chunk.max() > limit:
                    break
                acc += chunk.sum()
                it += 1
            elif mode == "continue":
                it += 1
                if chunk.max() > limit:
                    continue
                acc += chunk.sum()
            elif mode == "while":
                if it >= 3:
                    break
                acc += chunk.sum()
                it += 1
            else:
                acc += chunk.sum()
                it += 1
        out[r] = acc, it
    return out


@pytest.mark.parametrize("mode", ["break", "continue", "while", "return"])
def test_break_continue_while_early_return(rng, mode):
    rows, n, block = 6, 100, 16
    x = rng.uniform(0, 1, (rows, n)).astype(np.float32)
    x[1, 40] = 5.0
    x[3, 5] = 5.0
    x[4, 99] = 5.0
    out = np.full((rows, 2), -7.0, np.float32)
    flow[(rows,)](x, out, n, 2.0, BLOCK=block, MODE=mode)
    ref = _flow_ref(x, 2.0, block, mode)
    if mode == "return":
        ref[1::2] = -7.0  # returned early: nothing stored
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@dvmlang.kernel
def clamp_or_skip(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@dvmlang.kernel
def pair(a, b):
    return a + b, a * b


@dvmlang.kernel
def calls(x_ptr, out_ptr, lo, hi):
    v = dl.load(x_ptr + dl.program_id(0))
    c = clamp_or_skip(v, lo, hi)
    s, p = pair(c, 2.0)
    r = s if v > 0 else p
    dl.store(out_ptr + dl.program_id(0), r)


def test_inlined_kernels_with_early_returns_and_tuples():
    x = np.array([-5.0, 0.5, 3.0, 10.0, -0.25], np.float32)
    out = np.zeros_like(x)
    calls[(5,)](x, out, -1.0, 4.0)
    c = np.clip(x, -1, 4)
    np.testing.assert_allclose(out, np.where(x > 0, c + 2, c * 2))


@dvmlang.kernel
def static_things(out_ptr, N: dl.constexpr, FLAG: dl.constexpr):
    dl.static_assert(N % 2 == 0, "N must be even")
    dl.static_print("building with N =", N)
    offs = dl.arange(0, N)
    v = offs.to(dl.float32) * SCALE + OFFSET
    v = v if FLAG else -v
    dl.store(out_ptr + offs, v)


def test_constexpr_globals_static_assert_and_print(capsys):
    out = np.zeros(4, np.float32)
    static_things[(1,)](out, N=4, FLAG=True)
    np.testing.assert_allclose(out, np.arange(4) * 3 + 0.5)
    assert "building with N = 4" in capsys.readouterr().out
    static_things[(1,)](out, N=4, FLAG=False)
    np.testing.assert_allclose(out, -(np.arange(4) * 3 + 0.5))
    with pytest.raises(dvmlang.ConstexprError, match="static assertion failed: N must be even"):
        static_things[(1,)](np.zeros(3, np.float32), N=3, FLAG=True)


@dvmlang.kernel
def printer(x_ptr, N: dl.constexpr):
    pid = dl.program_id(0)
    x = dl.load(x_ptr + pid * N + dl.arange(0, N))
    dl.device_print("x", x)
    print("sum", dl.sum(x, axis=0))


def test_device_print_once_per_program_in_order(capsys):
    x = np.arange(6, dtype=np.int32)
    printer[(3,)](x, N=2)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["pid (0) x [0 1]", "pid (0) sum 1", "pid (1) x [2 3]", "pid (1) sum 5",
                     "pid (2) x [4 5]", "pid (2) sum 9"]


@dvmlang.kernel
def gather_k(x_ptr, idx_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    idx = dl.load(idx_ptr + offs, mask=m, other=0)
    v = dl.load(x_ptr + idx, mask=m, other=-1.0)
    dl.store(out_ptr + idx, v * 2.0, mask=m)


def test_gather_scatter_warn_with_line_and_compute(rng):
    n = 50
    x = rng.random(n, dtype=np.float32)
    idx = rng.permutation(n).astype(np.int32)
    out = np.zeros(n, np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        gather_k[(2,)](x, idx, out, n, BLOCK=32)
    perf = [x for x in w if issubclass(x.category, dvmlang.PerformanceWarning)]
    assert len(perf) == 2
    lines, first = inspect.getsourcelines(gather_k.fn)
    want = {first + i for i, t in enumerate(lines) if "x_ptr + idx" in t or "out_ptr + idx" in t}
    assert {x.lineno for x in perf} == want and all("test_language_control.py" in x.filename for x in perf)
    assert "gather" in str(perf[0].message)
    np.testing.assert_allclose(out[idx], x[idx] * 2)


@dvmlang.kernel
def histogram(x_ptr, hist_ptr, n, BINS: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    v = dl.load(x_ptr + offs, mask=m, other=0)
    dl.atomic_add(hist_ptr + v, 1, mask=m)


def test_histogram_with_atomics(rng):
    n = 1000
    x = rng.integers(0, 16, n).astype(np.int32)
    hist = np.zeros(16, np.int32)
    histogram[(dl.cdiv(n, 128),)](x, hist, n, BINS=16, BLOCK=128)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=16))


@dvmlang.kernel
def atomics_k(t_ptr, old_ptr, v_ptr, OP: dl.constexpr, N: dl.constexpr):
    offs = dl.arange(0, N)
    v = dl.load(v_ptr + dl.program_id(0) * N + offs)
    if OP == "max":
        old = dl.atomic_max(t_ptr + offs, v)
    elif OP == "min":
        old = dl.atomic_min(t_ptr + offs, v)
    elif OP == "xchg":
        old = dl.atomic_xchg(t_ptr + offs, v)
    elif OP == "cas":
        old = dl.atomic_cas(t_ptr + offs, dl.zeros((N,), dl.int32), v)
    else:
        old = dl.atomic_add(t_ptr + offs, v)
    dl.store(old_ptr + dl.program_id(0) * N + offs, old)


@pytest.mark.parametrize("op", ["add", "max", "min", "xchg", "cas"])
def test_atomics_across_programs(rng, op):
    P, N = 5, 8
    vals = rng.integers(1, 100, (P, N)).astype(np.int32)
    t = np.zeros(N, np.int32)
    old = np.zeros((P, N), np.int32)
    atomics_k[(P,)](t, old, vals, OP=op, N=N)
    # programs apply their atomics in program order: replay that sequentially
    ref_t = np.zeros(N, np.int32)
    ref_old = np.zeros((P, N), np.int32)
    for p in range(P):
        ref_old[p] = ref_t
        if op == "add":
            ref_t = ref_t + vals[p]
        elif op == "max":
            ref_t = np.maximum(ref_t, vals[p])
        elif op == "min":
            ref_t = np.minimum(ref_t, vals[p])
        elif op == "xchg":
            ref_t = vals[p].copy()
        else:
            ref_t = np.where(ref_t == 0, vals[p], ref_t)
    np.testing.assert_array_equal(t, ref_t)
    np.testing.assert_array_equal(old, ref_old)


@dvmlang.kernel
def pointer_carry(x_ptr, out_ptr, n_blocks, BLOCK: dl.constexpr):
    p = x_ptr + dl.arange(0, BLOCK)
    acc = dl.zeros((BLOCK,), dl.float32)
    for i in range(n_blocks):
        acc += dl.load(p)
        p += BLOCK
    dl.store(out_ptr + dl.arange(0, BLOCK), acc)


def test_loop_carried_pointer(rng):
    x = rng.random(4 * 16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    pointer_carry[(1,)](x, out, 4, BLOCK=16)
    np.testing.assert_allclose(out, x.reshape(4, 16).sum(0), rtol=1e-6)
