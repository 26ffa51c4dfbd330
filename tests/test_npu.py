"""The simulated NPU: profiles, the shape of the cycle model, numerics, faults and debug aids."""

import contextlib
import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import PROFILES, Device, Profile
from fuzzing import budget
from sample_kernels import add, loop_sum, softmax




def run_add(n, block=4096, device=None):
    x = np.ones(n, np.float32)
    y = np.ones(n, np.float32)
    out = np.empty_like(x)
    return add[(dl.cdiv(n, block),)](x, y, out, n, BLOCK=block, device=device)


def test_profiles():
    p = PROFILES["910B2"]
    assert (p.cube_cores, p.vector_cores, p.ub_bytes, p.l1_bytes, p.l0c_bytes) == (24, 48, 192 * 1024, 512 * 1024,
                                                                                 128 * 1024)
    assert p.clock_hz == 1.8e9 and p.hbm_bytes_per_s == 1.6e12
    b3 = PROFILES["910B3"]
    assert (b3.cube_cores, b3.vector_cores) == (20, 40)
    # the platform-config figures of the calibration note (../shared/calibration.md, 1a)
    b1, b4, a3 = PROFILES["910B1"], PROFILES["910B4"], PROFILES["A3-9362"]
    assert (b1.cube_cores, b1.vector_cores, b1.clock_hz) == (24, 48, 1.85e9)
    assert (b4.cube_cores, b4.vector_cores, b4.clock_hz, b4.hbm_bytes) == (20, 40, 1.5e9, 32 << 30)
    assert b4.hbm_bytes_per_s == 20 * 32 * 1.5e9  # CANN's tiling model: cores x ddr_rate x clock
    assert (a3.cube_cores, a3.vector_cores) == (20, 40) and p.l2_bytes == b1.l2_bytes == 192 << 20
    assert all(PROFILES[q.name] is q for q in (b1, p, b3, b4, a3))  # each also by its "-like" name
    assert Device(profile={"vector_cores": 8}).profile.vector_cores == 8
    with pytest.raises(dvmlang.DvmError, match="unknown device profile .H100."):
        Device(profile="H100")
    with pytest.raises(dvmlang.DvmError, match="unknown profile fields"):
        Device(profile={"warp_size": 32})


def test_fewer_cores_take_longer_and_devices_can_be_chosen():
    wide = run_add(1 << 20)
    small = run_add(1 << 20, device=Device(profile="910B3"))
    assert small.cores == 40 and wide.cores == 48
    with Device(profile={"vector_cores": 4}) as d:
        four = run_add(1 << 20)
    assert four.profile is d.profile and four.cores == 4
    assert four.cycles > 1.5 * wide.cycles  # 4 cores hit their per-core DMA cap; 48 share the HBM


def test_memory_bound_kernel_approaches_hbm_roofline():
    ratios = []
    for n in (1 << 16, 1 << 19, 1 << 22):
        launch = run_add(n)
        floor = (launch.bytes_read + launch.bytes_written) / launch.profile.hbm_bytes_per_cycle
        ratios.append(launch.cycles / floor)
    assert ratios[0] > ratios[1] > ratios[2] >= 1.0
    assert ratios[2] < 1.4


def test_doubling_the_data_roughly_doubles_the_cycles():
    a = run_add(1 << 21).cycles
    b = run_add(1 << 22).cycles
    assert 1.7 < b / a < 2.3


@dvmlang.kernel
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    pm = dl.program_id(0)
    pn = dl.program_id(1)
    rm = pm * BM + dl.arange(0, BM)
    rn = pn * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        a = dl.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = dl.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = dl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run_matmul(m, dtype=np.float16, blocks=(128, 128, 128), device=None, rng=None):
    rng = rng or np.random.default_rng(0)
    a = rng.random((m, m)).astype(dtype)
    b = rng.random((m, m)).astype(dtype)
    c = np.zeros((m, m), np.float32)
    bm, bn, bk = blocks
    launch = matmul[(dl.cdiv(m, bm), dl.cdiv(m, bn))](a, b, c, m, m, m, BM=bm, BN=bn, BK=bk, device=device)
    return a, b, c, launch


def test_large_matmul_approaches_cube_peak():
    ratios = []
    for m in (256, 1024):
        a, b, c, launch = run_matmul(m)
        p = launch.profile
        floor = 2 * m ** 3 / (2 * p.cube_macs_per_cycle * p.cube_cores)
        ratios.append(launch.cycles / floor)
        assert launch.kind == "mix" and launch.cores == min(p.cube_cores, (m // 128) ** 2)
    assert ratios[1] < ratios[0]
    assert ratios[1] < 4.5


def test_cube_accumulates_in_fp32():
    m = 128
    a = np.full((m, 1024), 0.1, np.float16)
    b = np.ones((1024, m), np.float16)
    c = np.zeros((m, m), np.float32)
    matmul[(1, 1)](a, b, c, m, m, 1024, BM=128, BN=128, BK=128)
    exact = 1024 * np.float64(np.float16(0.1))
    assert abs(c[0, 0] - exact) < 1e-2  # an fp16 accumulator would stop growing near 256


def test_fp32_inputs_on_the_cube_are_slower():
    _, _, _, h = run_matmul(256, np.float16)
    a, b, c, f = run_matmul(256, np.float32)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert f.cycles > h.cycles


@dvmlang.kernel
def balanced(x_ptr, out_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    acc = dl.zeros((BLOCK,), dl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + dl.arange(0, BLOCK)
        x = dl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        acc += dl.exp(dl.sin(x) * 0.5) * dl.cos(x)
    dl.store(out_ptr + row, dl.sum(acc, axis=0))


def test_double_buffering_cuts_cycles_of_balanced_kernel():
    rows, cols = 96, 8192
    x = np.random.default_rng(0).random((rows, cols), dtype=np.float32)
    ref = (np.exp(np.sin(x) * 0.5) * np.cos(x)).sum(1)
    results = {}
    for db in (True, False):
        out = np.zeros(rows, np.float32)
        d = Device(profile=Profile(double_buffer=db))
        results[db] = balanced[(rows,)](x, out, cols, BLOCK=1024, device=d)
        np.testing.assert_allclose(out, ref, rtol=1e-4)
    assert results[True].cycles < 0.85 * results[False].cycles


@dvmlang.kernel
def runaway(out_ptr, n):
    i = 0
    while i < n:
        i = i * 1
    dl.store(out_ptr, i)


def test_watchdog_stops_runaway_loops():
    out = np.zeros(1, np.int32)
    with pytest.raises(dvmlang.WatchdogTimeout, match=r"(?s)more than 5,000 instructions.*test_npu.py.*Device\(watchdog=N\)"):
        runaway[(1,)](out, 10, device=Device(watchdog=5000))
    with pytest.raises(dvmlang.DvmError, match="watchdog must be a positive"):
        Device(watchdog=0)


@dvmlang.kernel
def _count_to(out_ptr, n):
    i = 0
    while i < n:
        i = i + 1
    dl.store(out_ptr, i)


def test_a_relaunch_runs_with_the_options_and_name_it_is_given_now():
    """A one-program instance keeps its launch base for the next relaunch (Device.run's short way); a change of
    the device's options or of the launch's name takes the long way, and back."""
    out = np.zeros(1, np.int32)
    dev = Device(watchdog=100_000)
    for _ in range(2):  # the second is a relaunch through the kept base
        rec = _count_to[(1,)](out, 200, device=dev)
    assert out[0] == 200 and rec.name == "_count_to"
    assert _count_to[(1,)](out, 200, device=dev, name="renamed").name == "renamed"
    dev.watchdog = 500
    with pytest.raises(dvmlang.WatchdogTimeout):
        _count_to[(1,)](out, 200, device=dev)
    dev.watchdog = 100_000
    out[0] = 0
    rec = _count_to[(1,)](out, 200, device=dev)
    assert rec.name == "_count_to" and out[0] == 200 and rec.cycles > 0


@dvmlang.kernel
def _scalar_prefix(x_ptr, out_ptr, n, f, BLOCK: dl.constexpr):
    """Scalar arithmetic of every pure kind before the first transfer (Machine.prefix)."""
    pid = dl.program_id(0)
    npg = dl.num_programs(0)
    a = n * 3 + pid - npg
    q = a // 2
    g = dl.where(a < n, f * 2.0, f - 1.0)
    h = g + q.to(dl.float32)
    offs = pid * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n, other=0.0)
    dl.store(out_ptr + offs, x * h + a.to(dl.float32), mask=offs < n)


def _record_figures(rec):
    return (rec.cycles, rec.instructions, rec.pipe_busy, rec.bytes_read, rec.bytes_written, rec.hbm_bytes,
            rec.l2_hit_bytes)


@pytest.mark.parametrize("n, f", [(13, 0.5), (40, -3.25)])
def test_a_one_program_relaunch_starts_where_the_prefix_always_ends(n, f):
    """A one-program launch keeps the state its machine's prefix (pure scalar steps) ends in, and the launches
    after it start from there: the same registers, clock and instruction count as running the prefix, and as
    the general way (a traced launch runs every step of a batch of one)."""
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    dev = Device()
    outs, figures = [], []
    for trace in (False, False, False, True):
        out = np.zeros(64, np.float32)
        rec = _scalar_prefix[(1,)](x, out, n, f, BLOCK=64, device=dev, trace=trace)
        dev.l2.flush()
        outs.append(out)
        figures.append(_record_figures(rec))
    base = _scalar_prefix._last.bytecode.__dict__["_one"][3]
    assert base.machine.prefix >= 8 and base.after_prefix is not None  # the relaunches started after the prefix
    a = n * 3 - 1
    h = np.float32((f * 2.0 if a < n else f - 1.0) + a // 2)
    want = np.where(np.arange(64) < n, x * h + np.float32(a), 0).astype(np.float32)
    for out, fig in zip(outs, figures):
        np.testing.assert_array_equal(out, want)
        assert fig == figures[0]


def test_a_watchdog_ends_a_relaunch_within_the_prefix_where_it_always_did():
    """A budget smaller than the prefix (or just its size) ends the launch at the step it always ended at,
    whether the launch is the first, a relaunch, or traced."""
    x = np.ones(16, np.float32)
    base_dev = Device()
    _scalar_prefix[(1,)](x, np.zeros(16, np.float32), 5, 1.0, BLOCK=16, device=base_dev)
    k = _scalar_prefix._last.bytecode.__dict__["_one"][3].machine.prefix
    for budget_ in (1, k - 1, k, k + 1):
        messages = []
        dev = Device(watchdog=budget_)
        for trace in (False, False, True):
            with pytest.raises(dvmlang.WatchdogTimeout) as e:
                _scalar_prefix[(1,)](x, np.zeros(16, np.float32), 5, 1.0, BLOCK=16, device=dev, trace=trace)
            messages.append(str(e.value))
        assert messages[0] == messages[1] == messages[2]
    dev = Device(watchdog=k + 1)  # the prefix and the step after: a relaunch starts after the prefix
    for _ in range(2):
        with pytest.raises(dvmlang.WatchdogTimeout):
            _scalar_prefix[(1,)](x, np.zeros(16, np.float32), 5, 1.0, BLOCK=16, device=dev)


@dvmlang.kernel
def race(x_ptr, out_ptr, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + dl.program_id(0) * BLOCK + offs))


def test_race_detection():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(16, np.float32)
    race[(1,)](x, out, BLOCK=16, device=Device(race_detection=True))  # one program: no race
    with pytest.raises(dvmlang.RaceDetected, match="programs 0 and 1 both wrote element 0 of `out_ptr`"):
        race[(2,)](x, out, BLOCK=16, device=Device(race_detection=True))
    race[(2,)](x, out, BLOCK=16)  # off by default


@dvmlang.kernel
def masked_no_other(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    dl.store(out_ptr + offs, x * 2.0)


def test_debug_mode_poisons_elements_no_one_wrote():
    x = np.ones(4, np.float32)
    out = np.zeros(8, np.float32)
    masked_no_other[(1,)](x, out, 4, BLOCK=8)
    np.testing.assert_array_equal(out, [2, 2, 2, 2, 0, 0, 0, 0])
    masked_no_other[(1,)](x, out, 4, BLOCK=8, device=Device(debug=True))
    assert (out[:4] == 2).all() and np.isnan(out[4:]).all()


def test_debug_mode_reports_reads_of_unwritten_ub():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    bc = add.encode((1,), x, x, out, 16, BLOCK=16)
    code = bc.code
    from dvmlang.vm import isa
    from dvmlang.vm.decode import decode_kernel
    vadd = next(d for d in decode_kernel(code, 0, len(code)) if d.ins.name == "VADD")
    layout = vadd.vals["a"] >> 16
    hole = bc.kernels[0].footprint["ub"] - 64  # inside the footprint, never written by this program
    word = vadd.pc + vadd.ins.layout[[f.name for f in vadd.ins.fields].index("a")][0]
    shift = vadd.ins.layout[[f.name for f in vadd.ins.fields].index("a")][1]
    code[word] = (code[word] & ~(0xFFFFFFFF << shift)) | (((hole // 32) | (layout << 16)) << shift)
    bc.kernels[0].footprint["ub"] = max(bc.kernels[0].footprint["ub"], hole + 64)
    bad = dvmlang.Bytecode.from_bytes(bc.serialise())  # the edited fields, not the bytes encoded
    dev = Device(debug=True)
    for _ in range(2):  # the first launch and a relaunch (Device.run's short way) warn at the caller's line
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dvmlang.run(bad, x, x, out, 16, device=dev)
        found = [m for m in w if "uninitialised UB" in str(m.message)]
        assert found and all(m.filename == __file__ for m in found), [m.filename for m in found]
    assert np.isnan(out).all()
    with pytest.raises(dvmlang.UninitializedRead):
        dvmlang.run(bad, x, x, out, 16, device=Device(debug="raise"))
    _ = isa


def test_batched_and_one_at_a_time_agree_on_loops_and_cube():
    rng = np.random.default_rng(3)
    a1, b1, c1, l1 = run_matmul(200, blocks=(64, 64, 32), rng=rng)
    c2 = np.zeros_like(c1)
    l2 = matmul[(4, 4)](a1, b1, c2, 200, 200, 200, BM=64, BN=64, BK=32, device=Device(sequential=True))
    np.testing.assert_array_equal(c1, c2)
    assert l1.cycles == l2.cycles
    x = rng.random((7, 3000), dtype=np.float32)
    o1, o2 = np.zeros(7, np.float32), np.zeros(7, np.float32)
    balanced[(7,)](x, o1, 3000, BLOCK=512)
    balanced[(7,)](x, o2, 3000, BLOCK=512, device=Device(sequential=True))
    np.testing.assert_array_equal(o1, o2)


def test_launch_overhead_is_paid_per_launch():
    launch = run_add(16, block=16)
    assert launch.cycles > launch.profile.launch_overhead_cycles
    assert launch.launch_overhead == launch.profile.launch_overhead_cycles


def test_ub_buffers_are_32_byte_aligned():
    b = add.build_for(np.zeros(10, np.float32), np.zeros(10, np.float32), np.zeros(10, np.float32), 10, BLOCK=100)
    assert b.template.buffers and all(buf.addr % 32 == 0 for buf in b.template.buffers)


def test_device_doc_is_generated_from_the_code():
    from dvmlang.npu.docgen import main
    assert main(["--check"]) == 0, "docs/device.md is stale: run python -m dvmlang.npu.docgen"


@dvmlang.kernel
def long_chain(x_ptr, out_ptr, N: dl.constexpr, STEPS: dl.constexpr):
    offs = dl.arange(0, N)
    v = dl.load(x_ptr + offs)
    for _ in dl.static_range(STEPS):
        v = dl.tanh(v) * 0.5 + 0.25
    dl.store(out_ptr + offs, v)


def test_long_elementwise_chains_do_not_exhaust_the_host_stack():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    out = np.zeros_like(x)
    long_chain[(1,)](x, out, N=64, STEPS=600)
    ref = x.copy()
    for _ in range(600):
        ref = (np.tanh(ref) * np.float32(0.5) + np.float32(0.25)).astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_programs_with_identical_timing_are_placed_as_wave_by_wave_placement_would():
    from dvmlang.npu import timing as dev
    rng = np.random.default_rng(3)
    for _ in range(60):
        cores = int(rng.integers(1, 49))
        P = int(rng.integers(25 * cores, 40 * cores))
        T = np.full(P, float(rng.integers(10, 2000)) + rng.random())
        f0 = np.where(rng.random(6) < 0.3, np.inf, rng.random(6) * T[0])
        l0 = np.where(np.isinf(f0), 0.0, np.minimum(T[0], f0 + rng.random(6) * T[0]))
        first, last = np.repeat(f0[:, None], P, 1), np.repeat(l0[:, None], P, 1)
        for double_buffer in (False, True):
            fast = dev._compose(T, first, last, cores, double_buffer)
            slow = dev._place_waves(T, first, last, cores, double_buffer)
            np.testing.assert_allclose(fast[0], slow[0], rtol=0, atol=1e-6)
            np.testing.assert_allclose(fast[1], slow[1], rtol=0, atol=1e-6)


def test_one_wave_of_programs_is_placed_as_wave_by_wave_placement_places_it():
    """timing._compose's one-wave path (no more programs than cores) gives _place_waves' offsets and core ends
    bit for bit, for programs of any timing (signed zeros among them)."""
    from dvmlang.npu import timing as dev
    rng = np.random.default_rng(5)
    for _ in range(60):
        cores = int(rng.integers(1, 49))
        P = int(rng.integers(1, cores + 1))
        T = np.where(rng.random(P) < 0.2, -0.0, rng.random(P) * 3000)
        first = np.where(rng.random((6, P)) < 0.3, np.inf, rng.random((6, P)) * T)
        last = np.where(np.isinf(first), 0.0, np.minimum(T, first + rng.random((6, P)) * T))
        for double_buffer in (False, True):
            fast = dev._compose(T, first, last, cores, double_buffer)
            slow = dev._place_waves(T, first, last, cores, double_buffer)
            for a, b in zip(fast, slow):
                assert a.shape == b.shape and a.tobytes() == b.tobytes()


@dvmlang.kernel
def _scaled_rows(x_ptr, out_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    m = cols < n_cols
    x = dl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0)
    dl.store(out_ptr + row * (n_cols + 3) + cols, dl.exp(x) * 2.0, mask=m)


def test_a_masked_store_writes_only_its_box():
    x = np.random.default_rng(4).standard_normal((300, 77)).astype(np.float32)
    out = np.full((300, 80), -7.0, np.float32)
    _scaled_rows[(300,)](x, out, 77, BLOCK=128)
    np.testing.assert_allclose(out[:, :77], np.exp(x) * 2, rtol=1e-6)
    assert (out[:, 77:] == -7.0).all()


def _one_program_launches():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(700).astype(np.float32), rng.standard_normal(700).astype(np.float32)
    yield lambda **kw: add[(1,)](x, y, np.empty_like(x), 700, BLOCK=1024, **kw)
    a, b = rng.standard_normal((50, 70)).astype(np.float16), rng.standard_normal((70, 40)).astype(np.float16)
    yield lambda **kw: matmul[(1, 1)](a, b, np.empty((50, 40), np.float32), 50, 40, 70, BM=64, BN=64, BK=32, **kw)
    s = rng.standard_normal((1, 300)).astype(np.float32)
    yield lambda **kw: softmax[(1,)](np.empty_like(s), s, 300, 300, BLOCK=512, **kw)
    z = rng.standard_normal((1, 1000)).astype(np.float32)
    yield lambda **kw: loop_sum[(1,)](z, np.empty(1, np.float32), 1000, 1000, BLOCK=128, **kw)


@pytest.mark.parametrize("i", range(4))
def test_a_one_program_launch_times_as_the_batched_path_does(i):
    """An untraced one-program launch keeps its clock in Python floats and skips placing programs on cores
    (Device._run_one); a traced one takes the general path. Both give the same record."""
    launch = list(_one_program_launches())[i]
    for profile in ("910B2", "910B3"):
        dev = Device(profile=PROFILES[profile])
        fast = launch(device=dev)
        dev.l2.flush()  # both start cold
        slow = launch(device=dev, trace=True)
        assert fast.trace is None and slow.trace is not None
        for f in ("cycles", "bytes_read", "bytes_written", "instructions", "hbm_bytes", "l2_hit_bytes", "waves",
                  "pipe_busy", "hbm_stretch", "unaligned_cycles"):
            assert getattr(fast, f) == getattr(slow, f), f


@contextlib.contextmanager
def _without_pending_windows():
    """DMA reads gather every program's tile at once (no ``dma.Windows``) inside this block."""
    from dvmlang.npu import dma
    from dvmlang.npu.units import memory
    real = memory.dma_read
    memory.dma_read = lambda *a, pending=False: dma.dma_read(*a)
    try:
        yield
    finally:
        memory.dma_read = real


def _matmul_run(a, b, device=None):
    M, K = a.shape
    N = b.shape[1]
    c = np.empty((M, N), np.float32)
    rec = matmul[(dl.cdiv(M, 32), dl.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32, device=device)
    return c, rec


@pytest.mark.parametrize("dtype", [np.float16, dl.bfloat16.np, np.float32])
def test_cube_operands_shared_by_rows_and_columns_of_programs_give_the_stacked_product(dtype, monkeypatch):
    """The programs' A tiles (a row of programs) and B tiles (a column) are read once per window, pending
    (dma.Windows); the cube multiplies the windows' grid, or widens each window once (units/cube.py). Bit for
    bit what gathering, converting and multiplying every program's own tiles gives, with the same cycles."""
    from dvmlang.npu.units import cube
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(s).astype(np.float32).astype(dtype) for s in ((96, 64), (64, 128)))
    taken = []
    real = cube._grid_product
    monkeypatch.setattr(cube, "_grid_product", lambda *x: taken.append(real(*x)) or taken[-1])
    fast, rec_fast = _matmul_run(a, b, device=Device())
    assert any(t is not None for t in taken), "the grid path was not taken"
    monkeypatch.setattr(cube, "_grid_product", lambda *x: None)
    widened, rec_w = _matmul_run(a, b, device=Device())
    with _without_pending_windows():
        plain, rec_p = _matmul_run(a, b, device=Device())
    assert fast.view(np.uint32).tolist() == plain.view(np.uint32).tolist()
    assert widened.view(np.uint32).tolist() == plain.view(np.uint32).tolist()
    assert rec_fast.cycles == rec_w.cycles == rec_p.cycles
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(plain, ref, rtol=1e-5, atol=1e-4)


def test_the_window_grid_product_is_the_stacked_product_in_both_program_orders():
    from dvmlang.npu.dma import Windows
    from dvmlang.npu.units.cube import _grid_product
    rng = np.random.default_rng(6)
    wa = rng.standard_normal((4, 16, 8)).astype(np.float16)
    wb = rng.standard_normal((3, 8, 24)).astype(np.float16)
    p = np.arange(12)
    for ia, ib in ((p % 4, p // 4), (p // 3, p % 3)):
        got = _grid_product(Windows(wa, ia), Windows(wb, ib), np.float32)
        want = np.matmul(wa[ia].astype(np.float32), wb[ib].astype(np.float32))
        assert got is not None and got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    # not a grid of windows: the caller multiplies the programs' tiles
    assert _grid_product(Windows(wa, p % 4), Windows(wb, p % 3), np.float32) is None


_DIM = st.integers(0, 40) | st.integers(0, 1 << 42)
_STRIDE = st.sampled_from([0, 1, -1, 2, 3, 7, 64, 1000]) | st.integers(-(1 << 20), 1 << 20) | \
    st.integers(-(1 << 61), 1 << 61)


def _one_program_desc(dims, base: int, per_program: bool):
    """A one-program DMA descriptor with ``dims`` ((stride, one end of the box, the other) per dim) and ``base``,
    its fields one-element arrays (a register per program) or 0-d arrays and numpy scalars (an immediate)."""
    from dvmlang.npu.dma import Desc
    d = Desc.__new__(Desc)
    d.n = 1
    d._ints = d._sizes = None
    shape = (1,) if per_program else ()
    d.base = np.full(shape, base, np.int64)
    d.strides = [np.full(shape, s_, np.int64) for s_, _, _ in dims]
    d.lo = [np.full(shape, min(a, b), np.int64) for _, a, b in dims]
    d.hi = [np.full(shape, max(a, b), np.int64) for _, a, b in dims]
    if not per_program:
        d.lo, d.hi = [x[()] for x in d.lo], [x[()] for x in d.hi]  # (numpy scalars, as np.minimum gives them)
    count = np.ones((), np.int64)
    with np.errstate(all="ignore"):  # (int64, as Desc makes it inside a launch, which ignores the overflow)
        for h, l in zip(d.hi, d.lo):
            count = count * (h - l)
    d.empty = count == 0
    return d


@budget(300)
@given(st.lists(st.tuples(_STRIDE, _DIM, _DIM), min_size=1, max_size=3), _DIM, st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([32, 64, 128, 256, 512, 1024, 48, 96, 1 << 41]), st.booleans())
def test_a_one_program_descriptors_unaligned_part_is_the_arrays_double(dims, base, itemsize, align, per_program):
    """Desc._unaligned_one (one program, Python numbers) gives the double Desc._unaligned_arrays gives, or
    leaves it to it: any strides (negative, zero, huge), boxes, bases, item sizes and alignments, the fields as
    0-d arrays and numpy scalars or as one-element arrays (a register per program)."""
    d = _one_program_desc(dims, base, per_program)
    with np.errstate(all="ignore"):
        want = np.asarray(d._unaligned_arrays(itemsize, align)).reshape(-1)[0].item()
        got = d._unaligned_one(itemsize, align)
    spans = abs(base) + sum(abs(s_) * max(a, b, 1) for s_, a, b in dims)
    longest = max(max(a, b) for _, a, b in dims) * itemsize
    assert got is not None or spans * itemsize >= 1 << 60 or longest >= 1 << 40  # (the fallback: values that large)
    if got is not None:
        assert got.__class__ is float and got == want, (got, want)


@budget(300)
@given(st.lists(st.tuples(_STRIDE, _DIM, _DIM), min_size=1, max_size=3), st.integers(-(1 << 20), 1 << 42) | _STRIDE,
       st.integers(0, 1 << 42), st.booleans())
def test_a_one_program_box_is_checked_as_the_arrays_check_it(dims, base, size, per_program):
    """bounds._box_one (one program, Python numbers) gives the first and last elements bounds._box_extremes gives,
    and so check_dma's verdict on them (float64 and int64 alike), or leaves the check to it."""
    from dvmlang.npu.bounds import _box_extremes, _box_one
    d = _one_program_desc(dims, base, per_program)
    box = _box_one(d)
    with np.errstate(all="ignore"):
        lo, hi, flo, fhi = (np.asarray(x).reshape(-1)[0] for x in _box_extremes(d))
    if box is None:
        assert abs(base) + sum(abs(s_) * max(a, b) for s_, a, b in dims) >= 1 << 52  # (only for values that large)
        return
    assert box == (int(lo), int(hi))
    assert (box[0] < 0 or box[1] >= size) == bool((lo < 0) | (hi >= size) | (flo < 0) | (fhi >= size))


def _outcomes(*makers) -> list:
    """What each maker gives, or the type of the exception it raises (numpy's warnings and floating-point
    errors silenced): two ways of making one thing compared, the same exception from both included."""
    made = []
    for make in makers:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                made.append(make())
            except Exception as e:  # noqa: BLE001 - compared by the caller
                made.append(type(e))
    return made


_INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@st.composite
def _field_value(draw):
    """A DMA field's value as a step may read it: a Python int (an immediate), or a register's integer as a numpy
    scalar or 0-d array of any integer dtype; now and then a value of another type or one beyond int64."""
    v = draw(st.integers(-70, 70) | st.integers(-(1 << 41), 1 << 41) | st.integers(-(1 << 63), (1 << 64) - 1) |
             st.sampled_from([(1 << 40) - 1, 1 << 40, -(1 << 40), (1 << 63) + 5, (1 << 64) - 1]))
    kind = draw(st.sampled_from(["int", "scalar", "0-d", "other"]))
    if kind == "int":
        return min(v, (1 << 63) - 1)
    dtype = np.dtype(draw(st.sampled_from(_INT_DTYPES)))
    info = np.iinfo(dtype)
    v = min(max(v, int(info.min)), int(info.max))
    if kind == "scalar":
        return dtype.type(v)
    if kind == "0-d":
        return np.array(v, dtype=dtype)
    return draw(st.sampled_from([np.array(2.5, np.float32), np.array(-3.0), np.array(np.nan), np.array(-np.inf),
                                 np.float64(3.0), True, np.bool_(True), np.array(True), 1 << 64,
                                 np.array([v], dtype=dtype)]))


@budget(300)
@given(st.lists(st.tuples(_field_value(), _field_value(), _field_value(), st.integers(1, 64)), min_size=0,
                max_size=3), _field_value())
def test_a_one_program_descriptor_in_python_numbers_is_the_numpy_one(dims, base):
    """Desc._one (one program, Python integers) gives every field the value and the type (0-d array, numpy
    scalar, dtype) Desc's numpy path gives it, or leaves the descriptor to that path (the same exception, if
    it raises): values of every integer type, huge ones, and values of other types."""
    from dvmlang.npu.dma import Desc

    class Numpy(Desc):
        __slots__ = ()

        def _one(self, *args):
            return False

    class Batch:
        n = 1
    fields = (lambda b: base, [lambda b, v=st_: v for st_, _, _, _ in dims],
              [lambda b, v=lo: v for _, lo, _, _ in dims], [lambda b, v=hi: v for _, _, hi, _ in dims],
              tuple(d for _, _, _, d in dims))
    fast, slow = _outcomes(lambda: Desc(Batch(), *fields), lambda: Numpy(Batch(), *fields))
    if isinstance(slow, type):
        assert fast is slow
        return
    for name in ("base", "strides", "lo", "hi", "count", "empty", "bursts"):
        a, b = getattr(fast, name), getattr(slow, name)
        pairs = list(zip(a, b)) if isinstance(b, list) else [(a, b)]
        assert not isinstance(b, list) or len(a) == len(b), name
        for x, y in pairs:
            assert type(x) is type(y) and x.dtype == y.dtype and np.shape(x) == np.shape(y), (name, x, y)
            assert np.array_equal(x, y), (name, x, y)
    assert slow._ints is None
    if dims:  # what the descriptor's users ask of it: its figures, and whether and how it is uniform
        from dvmlang.npu.dma import _uniform_of
        with np.errstate(all="ignore"):
            for itemsize, align, to_l1 in [(4, 512, False), (1, 32, True), (2, 48, False), (8, 1 << 41, True)]:
                # figures' one-program values: the numpy path's, each a Python number
                want = [np.asarray(x).reshape(-1)[0].item() for x in (
                    slow.count * itemsize, slow.unit_stride_bursts() if to_l1 else slow.bursts,
                    slow._unaligned_arrays(itemsize, align) if slow.strides else 0.0)]
                for d in (fast, slow):
                    got = d.figures(itemsize, align, to_l1)
                    assert list(got) == want and [type(x) for x in got] == [type(x) for x in want], (got, want)
                    d._figures = d._unaligned = None  # (asked afresh)
        u, v = _uniform_of(fast, 1), _uniform_of(slow, 1)
        assert (u is None) == (v is None)
        if u is not None:
            assert [getattr(u, k) for k in u.__slots__] == [getattr(v, k) for k in v.__slots__]


_VIEW_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.uint16, np.int64, np.bool_, dl.bfloat16.np,
                dl.float8e4nv.np]


@st.composite
def _view(draw):
    """(tensor size, start, shape, strides): a strided view that stays inside the tensor, with any strides
    (negative, zero, contiguous rows) and extents (empty ones too)."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 5) | st.just(1), min_size=rank, max_size=rank)))
    if draw(st.booleans()):  # row-major contiguous (a slice), now and then with dims of 1 strided anyhow
        strides, run = [], 1
        for n in reversed(shape):
            strides.insert(0, run if n != 1 else draw(st.integers(-9, 9)))
            run *= n
    else:
        strides = draw(st.lists(st.integers(-40, 40), min_size=rank, max_size=rank))
    low = sum(s_ * (n - 1) for s_, n in zip(strides, shape) if s_ < 0 and n > 0)
    high = sum(s_ * (n - 1) for s_, n in zip(strides, shape) if s_ > 0 and n > 0)
    start = -low + draw(st.integers(0, 20))
    size = start + high + 1 + draw(st.integers(0, 20))
    return size, start, shape, tuple(strides)


@budget(300)
@given(_view(), st.sampled_from(_VIEW_DTYPES), st.booleans())
def test_a_strided_view_of_a_tensor_is_the_one_as_strided_makes(view, dtype, writeable):
    """boxview._strided (a slice, or numpy's constructor) gives the view dvmlang.dtypes.as_strided gives: the same
    memory, shape, strides, values and writeability, for every dtype (bfloat16 and fp8 too); a store through a
    writeable one lands in the tensor."""
    from dvmlang.npu.boxview import _strided
    size, start, shape, strides = view
    g = np.arange(size).astype(dtype)
    got = _strided(g, start, shape, strides, writeable=writeable)
    want = dvmlang.dtypes.as_strided(g[start:], shape, tuple(s_ * g.itemsize for s_ in strides),
                                     writeable=writeable)
    assert got.dtype == g.dtype and got.shape == want.shape == shape
    if got.size:  # (an empty view's address, and a dim of one element's stride, say nothing)
        assert got.__array_interface__["data"][0] == want.__array_interface__["data"][0]
        assert [s_ for s_, n in zip(got.strides, shape) if n > 1] == [s_ for s_, n in zip(want.strides, shape) if n > 1]
    assert got.tobytes() == want.tobytes()
    assert got.flags.writeable == (writeable or _contiguous_slice(start, shape, strides, size))
    if writeable and got.size:
        got[(0,) * len(shape)] = g[start + 1] if start + 1 < size else g[0]
        assert g[start] == got[(0,) * len(shape)]


def _contiguous_slice(start, shape, strides, size) -> bool:
    """Whether _strided gives a plain slice (writeable, as a slice of a writeable tensor is)."""
    run = 1
    for n, s_ in zip(reversed(shape), reversed(strides)):
        if n != 1 and s_ != run:
            return False
        run *= n
    return 0 <= start and start + run <= size


def test_the_boxes_of_a_uniform_descriptor_are_planned_once_and_each_view_is_strideds():
    """boxview._boxes keeps a descriptor's view plan (rows, start, shape, strides, contiguity) and gives what
    _strided gives for every tensor and row count it is asked for, a plan made anew for another row count."""
    from dvmlang.npu.boxview import _boxes, _strided, _Uniform
    for st_, lo, hi, prog in [((1,), [0], [16], (5, 0)), ((1,), [2], [9], (5, 16)), ((40, 1), [0, 0], [3, 8], (7, 120)),
                              ((1, 12), [0, 0], [4, 3], (0, 2))]:
        u = _Uniform(st_, lo, hi, prog)
        for size, rows in [(400, 1), (400, 1), (2000, 3), (60, 1), (400, 3)]:
            g = np.arange(size, dtype=np.float32)
            first, step = prog
            want_shape, want_strides = (rows,) + u.ext, (step,) + u.st
            span = first + u.offset + sum(abs(s_) * (n - 1) for s_, n in zip(want_strides, want_shape))
            if span >= size:
                continue
            got, want = _boxes(g, u, rows), _strided(g, first + u.offset, want_shape, want_strides)
            assert u.plan[0] == rows and got.shape == want.shape
            assert got.__array_interface__["data"][0] == want.__array_interface__["data"][0]
            assert np.array_equal(got, want)


@pytest.mark.parametrize("programs, bases, scalar", [(1, 0, True), (3, [0, 70, 141], False), (3, [0, 70, 141], True),
                                                     (3, [0, 64, 128], False), (3, [0, 64, 128], True)])
def test_a_transfer_gives_its_formulas_cycles_and_bytes_for_each_rate(programs, bases, scalar):
    """memory._transfer keeps a transfer's cycles and bytes with its descriptor: another rate, formula or figures
    give the formula's cycles and the figures' totals for them, never the kept ones; one program's are Python
    floats, several programs' a read-only array, or the one number they all are when the batch keeps one
    clock (``Batch.scalar``: what _execute takes from the array then)."""
    from types import SimpleNamespace

    from dvmlang.npu import timing
    from dvmlang.npu.dma import Desc
    from dvmlang.npu.units.memory import _transfer
    from dvmlang.vm import isa
    prof = PROFILES["910B2"]
    batch = SimpleNamespace(n=programs, bytes_read=np.zeros(programs), bytes_written=np.zeros(programs), last_bytes=0,
                            scalar=scalar)
    bases = np.array(bases, dtype=np.int64) if programs > 1 else bases  # (aligned or not)
    desc = Desc(batch, lambda b: bases, [lambda b: 1], [lambda b: 0], [lambda b: 10], (16,))
    row = isa.BY_NAME["DMA_LOAD1"].cost
    formulas = {"910B2": timing.formula(prof, row),
                "slow bursts": timing.formula(dataclasses.replace(prof, burst_overhead=3 * prof.burst_overhead), row)}
    for rate, kind, dtype in [(64.0, "910B2", np.float32), (64.0, "910B2", np.float32), (16.0, "910B2", np.float32),
                              (16.0, "slow bursts", np.float32), (16.0, "slow bursts", np.float64),
                              (16.0, "910B2", np.float64)]:
        cost = formulas[kind]
        g = np.zeros(256, dtype)
        seen = []
        rates = SimpleNamespace(read=lambda t, total: seen.append(total) or rate,
                                note=lambda pc, t, write, off, r: seen.append(off))
        L = SimpleNamespace(profile=prof, rates=rates)
        got = _transfer(L, batch, cost, desc, g, 0, 0, False)
        nbytes, bursts, un = desc.figures(g.itemsize, prof.gm_align_bytes, False)
        want = cost(bursts=bursts, nbytes=nbytes, rate=rate, unaligned=un)
        assert seen == [timing._total(nbytes, programs), timing._total(nbytes * un, programs)]
        if programs == 1:
            assert got == want and got.__class__ is float
        elif scalar and (want == want[0]).all():
            assert got == want[0] and got.__class__ is float
        else:
            assert np.array_equal(got, want) and got.dtype == want.dtype and not got.flags.writeable


@budget(300)
@given(st.sampled_from(_VIEW_DTYPES + [np.uint8, np.int32, np.float64]),
       st.integers(-300, 300) | st.floats(allow_nan=True, allow_infinity=True, width=32) | st.booleans() |
       st.sampled_from([np.float32(np.nan), np.float16(-0.0), np.int64(1 << 40), np.array(7, np.int16),
                        np.array([1.5, -2.0, 0.0]), np.uint32(4000000000), np.float64(1e300)]),
       st.integers(1, 3), st.lists(st.integers(0, 4), min_size=0, max_size=2))
def test_a_masked_reads_padding_is_the_broadcast_one(dtype, pad, rows, shape):
    """boxview._padded (a filled array) gives what the broadcast padding it replaced gave (``_pad_array(...).copy()``):
    the dtype, shape and bytes for every padding value (Python and numpy numbers, out of range, NaN, one per
    program), or the same exception."""
    from dvmlang.npu.boxview import _pad_array, _padded
    npdt = np.dtype(dtype)
    rows = 3 if np.ndim(pad) else rows
    got, want = _outcomes(lambda: _padded(rows, shape, npdt, pad), lambda: _pad_array(rows, shape, npdt, pad).copy())
    if isinstance(want, type):
        assert got is want
        return
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.writeable
    assert got.tobytes() == want.tobytes()


def test_a_batchs_program_ids_and_coordinates_are_made_once_read_only():
    """state.programs: a batch's program ids and grid coordinates, the ones Batch works out itself, made once
    for every launch of those programs and read-only (a step writing into one fails loudly)."""
    from dvmlang.npu.state import Batch, programs
    for lo, hi, grid in [(0, 8, (8, 1, 1)), (64, 200, (7, 5, 9)), (3, 5, (2, 3, 1)), (0, 30, (1, 6, 5))]:
        pids, coords = programs(lo, hi, grid[0], grid[1])
        assert programs(lo, hi, grid[0], grid[1])[0] is pids
        own = Batch(np.arange(lo, hi, dtype=np.int64), grid, (), uniform=True)
        shared = Batch(pids, grid, (), uniform=True, coords=coords)
        assert np.array_equal(pids, own.pids) and pids.dtype == own.pids.dtype
        for a, b in zip(shared.coords, own.coords):
            assert a.dtype == b.dtype and np.array_equal(a, b) and not a.flags.writeable
        with pytest.raises(ValueError):
            coords[0][0] = 1


def _place_scanning(d, addr, nbytes, slot):
    """state.place as it was before it skipped the scan for a slot of the same place and size."""
    from dvmlang.npu.state import _trim
    end = addr + nbytes
    for a in [a for a, s_ in d.items() if a < end and addr < a + s_.nbytes and not (a == addr and s_.nbytes == nbytes)]:
        _trim(d, a, addr, end)
    d[addr] = slot


@budget(300)
@given(st.lists(st.tuples(st.integers(0, 12).map(lambda k: 32 * k), st.sampled_from([32, 64, 96, 128, 0])),
                min_size=1, max_size=20))
def test_placing_tiles_leaves_the_memory_the_full_overlap_scan_leaves(writes):
    """state.place gives the slots (places, sizes, bytes) the scan of every slot gives, for any sequence of tiles
    written over one another."""
    from dvmlang.npu.state import Slot, as_bytes, place
    fast, slow = {}, {}
    for i, (addr, nbytes) in enumerate(writes):
        arr = np.full((1, nbytes), i, np.uint8)
        place(fast, addr, nbytes, Slot(arr, nbytes))
        _place_scanning(slow, addr, nbytes, Slot(arr, nbytes))
        assert sorted((a, s_.nbytes) for a, s_ in fast.items()) == sorted((a, s_.nbytes) for a, s_ in slow.items())
        for a in fast:
            assert np.array_equal(as_bytes(fast[a].arr), as_bytes(slow[a].arr))


@budget(200)
@given(st.lists(st.integers(0, (1 << 64) - 1) | st.sampled_from([0, 1 << 63, (1 << 64) - 1, 0x7F, 0x80, 0xFF, 0x8000,
                                                                  0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]),
                min_size=1, max_size=8))
def test_an_immediate_is_read_as_numpy_reads_the_words_bytes(words):
    """launch._imm_reader reads an integer dtype's immediate from the word's low bytes in Python numbers: the same
    numpy scalar (type and value; bits for the others) numpy's view of the word's bytes gives, for every dtype."""
    from array import array

    from dvmlang.npu.launch import _imm_reader

    class Code:  # (what _imm_reader asks of a bytecode)
        pass
    bc = Code()
    bc.code = array("Q", words)
    imm = _imm_reader(bc)
    dtypes = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
              np.float32, np.float64, dl.bfloat16.np, np.dtype(np.int32), np.dtype(np.uint16), np.dtype(">i4")]
    for w, word in enumerate(words):
        raw = np.array([word], dtype=np.uint64).view(np.uint8)
        for npdt in dtypes:
            want = raw[:np.dtype(npdt).itemsize].view(npdt)[0]
            for _ in range(2):  # read, then remembered
                got = imm(w, npdt)
                assert type(got) is type(want) and got.dtype == want.dtype
                assert got.tobytes() == want.tobytes(), (word, npdt, got, want)
        assert imm(w, np.bool_) == np.bool_(raw[0] != 0)


@pytest.mark.parametrize("programs", [1, 3])
def test_launches_keep_none_of_the_callers_arrays(programs):
    """A launch, its relaunches (a one-program one on the batch the launch before it parked) and a grid function
    closing over an array keep no reference to the arrays once the call returns: the caller's drop frees them,
    with no collection of cycles."""
    import gc
    import weakref
    dev = Device()

    def launch_twice():
        n = 16 * programs
        x, y, o = np.ones(n, np.float32), np.full(n, 2, np.float32), np.empty(n, np.float32)
        for _ in range(2):
            add[(programs,)](x, y, o, n, BLOCK=16, device=dev)
        add[lambda meta: (dl.cdiv(x.size, meta["BLOCK"]),)](x, y, o, n, BLOCK=16, device=dev)
        assert (o == 3).all()
        return [weakref.ref(a) for a in (x, y, o)]
    launch_twice()  # (the build and its first instance)
    gc.disable()
    try:
        refs = launch_twice()
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_a_launch_made_from_a_shared_base_is_the_one_the_constructor_makes():
    from dvmlang.npu.launch import Launch, LaunchBase
    from dvmlang.npu.timing import Rates
    x = np.ones(16, np.float32)
    bc = add.encode((1,), x, x, np.empty(16, np.float32), 16, BLOCK=16)
    dev = Device()
    arrays, alias = {0: x, 1: x, 2: np.empty(16, np.float32)}, {0: 0, 1: 0, 2: 2}
    opts = dict(watchdog=99, debug=True, kernel_name="k", active_cores=3, loc_of_pc=None, race_detection=True,
                share=0.5)
    a = Launch(bc, bc.kernels[0], arrays, dev.profile, alias_groups=alias, **opts)
    base = Launch.base(bc.kernels[0], dev.profile, **opts)
    b, c = Launch.of(base, bc, arrays, alias), Launch.of(base, bc, arrays, alias)
    assert vars(a).keys() == vars(b).keys()
    for k in vars(a):
        if k not in ("rates", "races", "loc_of_pc"):
            assert getattr(a, k) == getattr(b, k), k
    assert vars(a.rates) == vars(b.rates) and a.races is not None and b.races is not c.races
    assert b.prints is not c.prints and b.rates is not c.rates and b.rates.group_reads is not c.rates.group_reads
    assert (b.rates.dma, b.rates.l2, b.rates.l2_write, b.rates.slow) == Rates.constants(dev.profile, 3, 0.5)
    # a finished launch kept by its LaunchBase holds none of its arrays, and reset is a new launch again
    lb = LaunchBase(bc.kernels[0], None, dev.profile, (), base, {}, 1, 1, 0, 0.5)
    d = lb.launch(bc, arrays, alias)
    d.rates.read(0, 64.0)
    d.add_prints([(0, 0, "x", None, False, None)])
    lb.release(d)
    assert d.arrays is None and d.bc is None
    e = lb.launch(bc, arrays, alias)
    assert e is d and lb.launch(bc, arrays, alias) is not d  # the spare, then a new one while it is in use
    for k in vars(a):
        if k not in ("rates", "races", "loc_of_pc"):
            assert getattr(a, k) == getattr(e, k), k
    assert vars(a.rates) == vars(e.rates) and e.races is not None and e.prints == [] and e.prints_seen == 0


def test_a_launch_record_made_by_of_is_the_one_the_constructor_makes():
    from dvmlang.npu.device import PIPE_LABELS, LaunchRecord
    prof = Device().profile
    b = LaunchRecord(name="k", grid=(1, 1, 1), cycles=5, bytes_read=1, bytes_written=2, waves=3, profile=prof,
                     time_us=5 / prof.clock_hz * 1e6, pipe_busy={q: float(i) for i, q in enumerate(PIPE_LABELS)})
    base = LaunchRecord.base(name="k", grid=(1, 1, 1), waves=3, profile=prof)  # the same record from a shared base
    values = dict(cycles=5, bytes_read=1, bytes_written=2)
    d = LaunchRecord.of(base, dict(values, _busy=[float(i) for i in range(len(PIPE_LABELS))]))
    e = LaunchRecord.of(base, dict(values, cycles=6, pipe_busy={}))
    names = [f.name for f in dataclasses.fields(LaunchRecord)]
    assert [getattr(d, n) for n in names] == [getattr(b, n) for n in names] and d == b
    assert dataclasses.asdict(b) == dataclasses.asdict(d)  # dataclasses' functions read every field
    assert d.time_us == b.time_us and e.cycles == 6 and e.time_us == 6 / prof.clock_hz * 1e6 and d.cycles == 5
    assert e.members is not d.members and e.stages is not d.stages and e.prints is not d.prints
    assert e.pipe_busy == {} and e.members == e.stages == e.prints == e.diagnostics == []
    d.members.append(b)
    assert d.members == [b] and e.members == []  # a list made when first read is the record's own
    e.waves = 7
    assert e.waves == 7 and d.waves == 3 and base["waves"] == 3  # a field set is the record's own
    f = dataclasses.replace(d)
    assert f == d and set(vars(f)) == set(names)
    with pytest.raises(AttributeError):
        d.no_such_field
    with pytest.raises(AttributeError):
        LaunchRecord.__new__(LaunchRecord).cycles  # (no base to read from)
    with pytest.raises(AssertionError):
        LaunchRecord.base(prints=[])  # a list in a shared base would be every record's
    x = np.ones(16, np.float32)
    rec = add[(1,)](x, x, np.empty(16, np.float32), 16, BLOCK=16, device=Device())
    assert rec.bytecode is not None and rec.bytes_read == 128  # (the first read makes the "_raw" figures fields)
    own = set(vars(rec)) - {"_shared", "_busy"}
    assert own | set(vars(rec)["_shared"]) <= set(names)  # no field misspelt by a launch
    rec = add[(1,)](x, x, np.empty(16, np.float32), 16, BLOCK=16, device=Device())
    rec.bytes_read = 5
    assert rec.bytes_written == 64 and rec.bytes_read == 5  # a field set before the first read stays
    assert dataclasses.replace(rec) == rec and rec.time_us == rec.cycles / rec.profile.clock_hz * 1e6


_SIZE = st.integers(1, 5).map(lambda k: 16 * k) | st.integers(1, 80)  # whole tiles half of the time


@budget(12)
@given(_SIZE, _SIZE, _SIZE, st.sampled_from([16, 32]), st.sampled_from([16, 32]),
       st.sampled_from([np.float16, dl.bfloat16.np, np.float32]), st.integers(0, 99))
def test_matmuls_of_any_shape_give_the_same_bits_with_and_without_pending_windows(M, N, K, BM, BN, dtype, seed):
    """Masked edges, one row or column of programs, grids that are not a window grid: the pending windows
    and the cube's use of them never change a bit or a cycle."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32).astype(dtype)
    b = rng.standard_normal((K, N)).astype(np.float32).astype(dtype)

    def run():
        c = np.full((M, N), np.nan, np.float32)
        rec = matmul[(dl.cdiv(M, BM), dl.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN, BK=16, device=Device())
        return c, rec.cycles
    fast, cycles = run()
    with _without_pending_windows():
        plain, plain_cycles = run()
    assert fast.view(np.uint32).tolist() == plain.view(np.uint32).tolist() and cycles == plain_cycles
    np.testing.assert_allclose(fast, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-5, atol=2e-5 * K)


@dvmlang.kernel
def _two_products(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    """Two accumulators of products of the same tiles, and a product used once: each step's products are made
    while the last step's are still held."""
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rn = dl.program_id(1) * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    acc = dl.zeros((BM, BN), dl.float32)
    half = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        a = dl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = dl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = dl.dot(a, b, acc)
        half = dl.dot(a, b, half * 0.5) + dl.dot(a, b)
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)
    dl.store(d_ptr + rm[:, None] * N + rn[None, :], half)


def test_products_recycled_between_steps_are_never_arrays_a_tile_still_holds(monkeypatch):
    """units/cube.py writes the products of a K loop into arrays it recycles once nothing else holds them
    (``_recycled``; only large ones, here every one): the bits are those of fresh arrays, with two
    accumulators and a product alive at once, and an array a tile or a view holds is never handed out."""
    from dvmlang.npu.units import cube
    rng = np.random.default_rng(11)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((64, 96), (96, 64)))

    def run():
        c, d = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
        rec = _two_products[(2, 2)](a, b, c, d, 64, 64, 96, BM=32, BN=32, BK=32, device=Device())
        return c, d, rec.cycles
    monkeypatch.setattr(cube, "_POOLED", (0, 1 << 30))
    cube._RECYCLED.arrays = []
    got = run()
    assert len(cube._RECYCLED.arrays) >= 2  # products were recycled
    monkeypatch.setattr(cube, "_FREE", None)
    want = run()
    assert all(np.array_equal(x.view(np.uint32), y.view(np.uint32)) for x, y in zip(got[:2], want[:2]))
    assert got[2] == want[2]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[0], ref, rtol=1e-4, atol=1e-3)
    monkeypatch.undo()
    pool = cube._RECYCLED.arrays = []
    x = cube._recycled((8, 8), np.float32)  # not pooled: below the size recycled
    monkeypatch.setattr(cube, "_POOLED", (0, 1 << 30))
    x = cube._recycled((8, 8), np.float32)
    y = cube._recycled((8, 8), np.float32)
    assert x is not y and len(pool) == 2  # x is held
    view = y[2:]
    del x, y
    z = cube._recycled((8, 8), np.float32)
    assert z is pool[0] and z is not view.base  # the first is free again; the second a view holds


@dvmlang.kernel
def _centred_norm(x_ptr, y_ptr, n_cols, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    mask = cols < n_cols
    x = dl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    d = dl.where(mask, x - dl.sum(x, axis=0) / n_cols, 0.0)  # a select inside a pending chain, read twice
    dl.store(y_ptr + row * n_cols + cols, d * (1.0 / dl.sqrt(dl.sum(d * d, axis=0) / n_cols + 1e-5)), mask=mask)


@dvmlang.kernel
def _select_none(x_ptr, y_ptr, BLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    x = dl.load(x_ptr + row * BLOCK + cols)
    dl.store(y_ptr + row * BLOCK + cols, dl.where(cols < 0, x * 2.0, x + 1.0))  # false everywhere


def _counting_as_is(monkeypatch):
    """Patch the select shortcut (``units/vector._as_is``) to count the times it is taken."""
    from dvmlang.npu.units import vector
    real, taken = vector._as_is, []

    def counted(*a):
        taken.append(real(*a))
        return taken[-1]
    monkeypatch.setattr(vector, "_as_is", counted)
    return taken


@pytest.mark.parametrize("n_cols", [1000, 1024])
def test_a_select_in_a_pending_chain_gives_the_bits_of_one_program_at_a_time(n_cols, monkeypatch):
    # 300 rows of 4 KiB: the pending chain through the select is evaluated in several row chunks; with 1024
    # columns the select's condition is true everywhere, and its result is its first operand as it is
    from dvmlang.npu.units import vector
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, n_cols)).astype(np.float32)
    ys = []
    # (step by step: the compiled path runs a small batch's select with np.where; compared last)
    for dev, shortcut in ((Device(compiled=False), True), (Device(sequential=True, compiled=False), True),
                          (Device(compiled=False), False), (Device(compiled="always"), None)):
        taken = _counting_as_is(monkeypatch)
        if shortcut is False:
            monkeypatch.setattr(vector, "_as_is", lambda *a: False)
        y = np.zeros_like(x)
        ys.append((y, _centred_norm[(300,)](x, y, n_cols, BLOCK=1024, device=dev).cycles))
        if shortcut is not None:
            assert any(taken) == (shortcut and n_cols == 1024)
    assert all(np.array_equal(y, ys[0][0]) and c == ys[0][1] for y, c in ys)
    d = x - x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(ys[0][0], d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5), rtol=1e-4,
                               atol=1e-5)


def test_a_select_false_everywhere_is_its_second_operand(monkeypatch):
    from dvmlang.npu.units import vector
    x = np.random.default_rng(7).standard_normal((40, 256)).astype(np.float32)
    y1, y2 = np.zeros_like(x), np.zeros_like(x)
    taken = _counting_as_is(monkeypatch)
    r1 = _select_none[(40,)](x, y1, BLOCK=256, device=Device(compiled=False))
    assert taken == [True]
    monkeypatch.setattr(vector, "_as_is", lambda *a: False)
    r2 = _select_none[(40,)](x, y2, BLOCK=256, device=Device(compiled=False))
    assert np.array_equal(y1, x + np.float32(1.0)) and np.array_equal(y1, y2) and r1.cycles == r2.cycles


def test_batches_sized_by_a_probe_give_the_bits_and_cycles_of_fixed_ones(monkeypatch):
    from dvmlang.npu import device as device_mod
    sizes = []
    real = device_mod.Batch.__init__

    def counted(self, pids, grid, zero_regs, **kw):
        sizes.append(len(pids))
        real(self, pids, grid, zero_regs, **kw)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((300, 1000)).astype(np.float32)
    outs = {}
    for name, dev in (("probe", Device(batch_bytes=2 << 20)), ("fixed", Device(batch_bytes=2 << 20, race_detection=True)),
                      ("one batch", Device()), ("sequential", Device(sequential=True))):
        y = np.zeros_like(x)
        sizes.clear()
        monkeypatch.setattr(device_mod.Batch, "__init__", counted)
        rec = _centred_norm[(300,)](x, y, 1000, BLOCK=1024, device=dev)
        monkeypatch.setattr(device_mod.Batch, "__init__", real)
        outs[name] = (y, rec.cycles, list(sizes))
    # 2 MiB counts a program at its footprint (156 per batch); the probe finds it holds less and sizes the rest so
    assert outs["probe"][2] == [64, 236] and outs["fixed"][2] == [156, 144] and outs["one batch"][2] == [300]
    for name in ("fixed", "one batch", "sequential"):
        assert np.array_equal(outs[name][0], outs["probe"][0]) and outs[name][1] == outs["probe"][1], name


@dvmlang.kernel
def _grid_store(out_ptr, S0, S1, BLOCK: dl.constexpr):
    i, j = dl.program_id(0), dl.program_id(1)
    v = dl.zeros((BLOCK,), dl.float32) + (i * 10 + j).to(dl.float32)
    dl.store(out_ptr + i * S0 + j * S1 + dl.arange(0, BLOCK), v)


@pytest.mark.parametrize("s0,s1", [(8, 40), (40, 8), (4, 2), (2, 16), (0, 8)])
def test_a_grid_of_programs_stores_as_one_program_at_a_time_does(s0, s1):
    """Programs on a 2-d grid storing boxes at i * S0 + j * S1 (dma._grid_of): one strided write when no two
    boxes share an element, otherwise in program order (the last program to store an element wins)."""
    outs = []
    for dev in (Device(), Device(sequential=True)):
        out = np.full(4 * 40 + 3 * 40 + 8, -1.0, np.float32)
        _grid_store[(4, 3)](out, s0, s1, BLOCK=8, device=dev)
        outs.append(out)
    assert outs[0].tolist() == outs[1].tolist()
    want = np.full_like(outs[0], -1.0)
    for j in range(3):
        for i in range(4):
            want[i * s0 + j * s1:i * s0 + j * s1 + 8] = i * 10 + j
    assert outs[0].tolist() == want.tolist()


def _batch_desc(bases, strides, los, his):
    """A descriptor of ``len(bases)`` programs: per-program bases and boxes, strides shared (the Desc fields
    the numpy path makes)."""
    from dvmlang.npu.dma import Desc
    n = len(bases)
    d = Desc.__new__(Desc)
    d.n = n
    d._ints = d._sizes = d._plan = None
    d._uniform = d._most = False
    d._windows = None
    d._grid = False
    d.base = np.array(bases, np.int64)
    d.strides = [np.array(s_, np.int64) for s_ in strides]
    d.lo = [np.array(x, np.int64) for x in los]
    d.hi = [np.maximum(np.array(x, np.int64), lo) for x, lo in zip(his, d.lo)]
    count = np.ones(n, np.int64)
    for h, lo in zip(d.hi, d.lo):
        count = count * (h - lo)
    d.count, d.empty = count, count == 0
    return d


@budget(60)
@given(st.integers(2, 9), st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**31), st.booleans())
def test_boxes_that_differ_between_programs_are_read_and_written_as_one_indexed_copy(n, rows, cols, seed, gap):
    """dma._gather_plan (every program's box in one indexed copy) reads and writes what the copy per program
    (``_per_program``, the plan turned off) does: boxes clipped per program, padding, shared tile rows; a
    write whose boxes share an element keeps the copy per program (the last program's value stays)."""
    from dvmlang.npu import dma
    rng = np.random.default_rng(seed)
    shape = (rows, cols)
    pitch = cols + (3 if gap else 0)
    g = rng.standard_normal(n * rows * pitch + 8).astype(np.float32)
    bases = [int(x) for x in rng.integers(0, n * rows * pitch - rows * pitch + 1, n)] if gap else \
        [p * rows * pitch for p in range(n)]
    los = [rng.integers(0, rows, n), rng.integers(0, cols, n)]
    his = [rng.integers(0, rows + 1, n), rng.integers(0, cols + 1, n)]
    outs = []
    def desc():  # (used once before: a descriptor's plan is made at its second use)
        d = _batch_desc(bases, [pitch, 1], los, his)
        assert dma._gather_plan(d, n, shape) is None
        return d
    for limit in (dma.PLAN_ELEMENTS, 0):
        old, dma.PLAN_ELEMENTS = dma.PLAN_ELEMENTS, limit
        try:
            got, _ = dma.dma_read(g, desc(), shape, np.float32, np.float32(-2.5), n)
            dst = g.copy()
            src = rng.standard_normal((n,) + shape).astype(np.float32) if limit else outs[0][2]
            dma.dma_write(dst, desc(), shape, src, n)
            one = g.copy()
            dma.dma_write(one, desc(), shape, src[:1], n)
        finally:
            dma.PLAN_ELEMENTS = old
        outs.append((got, dst, src, one))
    (a, b, _, c), (x, y, _, z) = outs
    assert a.tobytes() == x.tobytes() and b.tobytes() == y.tobytes() and c.tobytes() == z.tobytes()


@budget(60)
@given(st.integers(4, 40), st.integers(1, 6), st.integers(1, 9), st.integers(0, 2**31), st.integers(0, 3),
       st.booleans())
def test_boxes_of_a_few_kinds_are_one_view_per_kind(n, rows, cols, seed, odd, gap):
    """dma._box_classes (the programs' boxes in a few kinds, each kind's at bases that step uniformly or name a few
    shared windows: a persistent loop's last row block clipped at the end, programs past the end with empty boxes,
    a matmul's rows of tiles) reads and writes what the copy per program does, padding and a broadcast source
    included; a write whose boxes overlap, or whose kinds interleave, keeps the copy per program."""
    from dvmlang.npu import dma
    rng = np.random.default_rng(seed)
    shape = (rows, cols)
    pitch = cols + (2 if gap else 0)
    step = rows * pitch if rng.random() < 0.8 else max(1, rows * pitch // 2)  # (sometimes overlapping boxes)
    g = rng.standard_normal(n * step + rows * pitch + 8).astype(np.float32)
    share = int(rng.choice([1, 1, 2, 3]))  # (programs sharing a window, as a matmul's rows of tiles do)
    bases = [(p // share) * step for p in range(n)] if rng.random() < 0.5 else [(p % share) * step for p in range(n)]
    lo0, hi0, hi1 = int(rng.integers(0, rows)), rows, cols
    los = [np.full(n, lo0), np.zeros(n, np.int64)]
    his = [np.full(n, hi0), np.full(n, hi1)]
    k = min(odd, n // 4)
    mode = rng.integers(0, 3)
    at = np.arange(n - k, n) if mode == 0 else rng.choice(np.arange(1, n), k, replace=False) if mode == 1 else \
        np.arange(n // 2, n)  # (the last programs; a few anywhere; half of them)
    for i in at:  # the odd programs: a clipped or an empty box
        his[0][i] = int(rng.integers(lo0, rows + 1))
        his[1][i] = int(rng.integers(0, cols + 1))
    if len(at) > 2 and rng.random() < 0.3:  # (bases that do not step uniformly: copied one by one)
        bases[int(at[1])] += 1
    outs = []
    for fast in (True, False):
        real, old = dma._box_classes, dma.PLAN_ELEMENTS
        if not fast:
            dma._box_classes, dma.PLAN_ELEMENTS = (lambda d, n: None), 0
        try:
            got, _ = dma.dma_read(g, _batch_desc(bases, [pitch, 1], los, his), shape, np.float32, np.float32(-2.5), n)
            src = outs[0][2] if outs else rng.standard_normal((n,) + shape).astype(np.float32)
            dst = g.copy()
            dma.dma_write(dst, _batch_desc(bases, [pitch, 1], los, his), shape, src, n)
            one = g.copy()
            dma.dma_write(one, _batch_desc(bases, [pitch, 1], los, his), shape, src[:1], n)
        finally:
            dma._box_classes, dma.PLAN_ELEMENTS = real, old
        outs.append((got, dst, src, one))
    (a, b, _, c), (x, y, _, z) = outs
    assert a.tobytes() == x.tobytes() and b.tobytes() == y.tobytes() and c.tobytes() == z.tobytes()


@budget(30)
@given(st.integers(2, 40), st.integers(1, 5), st.integers(1, 9), st.integers(0, 2**31), st.booleans())
def test_boxes_at_a_permutation_of_uniform_bases_are_written_as_one_view(n, rows, cols, seed, overlap):
    """A store whose programs' bases are a permutation of a progression (programs over a grid in another order than
    the tensor's) writes what one copy per program in program order writes, as one strided view when no two boxes
    share an element, the copy per program when they do; a read gives every program its own box."""
    from dvmlang.npu import dma
    from dvmlang.npu.boxview import _strided
    rng = np.random.default_rng(seed)
    shape, pitch = (rows, cols), cols + 1
    step = rows * pitch if not overlap else max(1, rows * pitch // 2)
    bases = [int(b_) for b_ in rng.permutation(n) * step]
    los, his = [np.zeros(n, np.int64)] * 2, [np.full(n, rows), np.full(n, cols)]
    g = rng.standard_normal(n * step + rows * pitch + 4).astype(np.float32)
    src = rng.standard_normal((n,) + shape).astype(np.float32)
    for rows_src in (n, 1):
        want = g.copy()
        for i, b_ in enumerate(bases):
            _strided(want, b_, shape, (pitch, 1), writeable=True)[...] = src[i if rows_src > 1 else 0]
        got = g.copy()
        dma.dma_write(got, _batch_desc(bases, [pitch, 1], los, his), shape, src[:rows_src], n)
        assert got.tobytes() == want.tobytes()
    read, _ = dma.dma_read(g, _batch_desc(bases, [pitch, 1], los, his), shape, np.float32, np.float32(0), n)
    for i, b_ in enumerate(bases):
        assert read[i].tobytes() == np.ascontiguousarray(_strided(g, b_, shape, (pitch, 1))).tobytes()


@dvmlang.kernel
def _column_sums(x_ptr, out_ptr, R: dl.constexpr, C: dl.constexpr):
    pid = dl.program_id(0)
    offs = dl.arange(0, R)
    col = dl.load(x_ptr + offs * C + pid)  # column pid of an (R, C) array: a strided box
    dl.store(out_ptr + pid, dl.sum(col, axis=0))


@pytest.mark.parametrize("shape", [(16, 8), (64, 3), (128, 48), (8, 130)])
def test_a_batch_sums_its_strided_tiles_as_one_program_does(shape):
    """A batch of programs whose tiles are strided views side by side in memory: numpy would sum each element
    along the axis (the programs' axis innermost), one program's tile pairwise. Every sum is the sequential
    device's, bit for bit (a torch backward's column sums differed in the last bits)."""
    R, C = shape
    rng = np.random.default_rng(R * C)
    for _ in range(5):
        x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e4])).astype(np.float32)
        outs = []
        for dev in (Device(), Device(sequential=True), Device(compiled=False)):
            o = np.zeros(C, np.float32)
            _column_sums[(C,)](x, o, R=R, C=C, device=dev)
            outs.append(o.tobytes())
        assert outs[0] == outs[1] == outs[2]
