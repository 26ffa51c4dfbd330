"""The simulated NPU against published Ascend 910B measurements: every workload of the calibration note that
has a hardware figure, run on a fresh device, with the published range, its source and the ratio.

`tests/test_calibration.py` pins the same workloads (the simulated figure stays within 20% of the published
range); this script prints them, adds the 4096^3 GEMM (too slow for a test), and with `--docs` rewrites the
calibration table of `docs/device.md` between its markers.

    python benchmarks/calibration.py [--quick] [--docs]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device
from dvmlang.npu.profile import get_profile

BAND = 0.2  # a simulated figure passes when it lies within 20% of the published range


@dvmlang.kernel
def copy_loop(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
    """Persistent copy: grid = cores, each program strides over the tensor in BLOCK-element steps."""
    pid = dl.program_id(0)
    nprog = dl.num_programs(0)
    for start in range(pid * BLOCK, n, nprog * BLOCK):
        o = start + dl.arange(0, BLOCK)
        dl.store(y_ptr + o, dl.load(x_ptr + o, mask=o < n), mask=o < n)


@dvmlang.kernel
def add_loop(x_ptr, y_ptr, z_ptr, n, BLOCK: dl.constexpr):
    pid = dl.program_id(0)
    nprog = dl.num_programs(0)
    for start in range(pid * BLOCK, n, nprog * BLOCK):
        o = start + dl.arange(0, BLOCK)
        m = o < n
        dl.store(z_ptr + o, dl.load(x_ptr + o, mask=m) + dl.load(y_ptr + o, mask=m), mask=m)


@dvmlang.kernel
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    """Persistent Triton-style GEMM: grid = cube cores, each program loops over output tiles, `acc +=` a dot
    per K step (the accumulator stays in L0C; FixPipe stores it once)."""
    tiles_n = dl.cdiv(N, BN)
    for t in range(dl.program_id(0), dl.cdiv(M, BM) * tiles_n, dl.num_programs(0)):
        rm = (t // tiles_n) * BM + dl.arange(0, BM)
        rn = (t % tiles_n) * BN + dl.arange(0, BN)
        rk = dl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
        acc = dl.zeros((BM, BN), dl.float32)
        for k in range(0, K, BK):
            a = dl.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = dl.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += dl.dot(a, b)
            a_ptrs += BK
            b_ptrs += BK * N
        dl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dvmlang.kernel
def c2v_stream(a_ptr, b_ptr, out_ptr, R, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    """Cube -> vector streaming: R products per program, each handed to the vector core for a max."""
    pid = dl.program_id(0)
    a = dl.load(a_ptr + dl.arange(0, BM)[:, None] * BK + dl.arange(0, BK)[None, :])
    b = dl.load(b_ptr + dl.arange(0, BK)[:, None] * BN + dl.arange(0, BN)[None, :])
    s = dl.full((BM, BN), -float("inf"), dl.float32)
    for _ in range(R):
        s = dl.maximum(s, dl.dot(a, b))
    dl.store(out_ptr + pid * BM * BN + dl.arange(0, BM)[:, None] * BN + dl.arange(0, BN)[None, :], s)


@dvmlang.kernel
def tiny_copy(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
    o = dl.arange(0, BLOCK)
    dl.store(y_ptr + o, dl.load(x_ptr + o, mask=o < n), mask=o < n)


@dvmlang.kernel
def rmsnorm_row(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: dl.constexpr):
    """One small row per program (the TileLang-Ascend rmsnorm measurement's shape of work)."""
    row = dl.program_id(0)
    cols = dl.arange(0, BLOCK)
    m = cols < n_cols
    x = dl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(dl.float32)
    w = dl.load(w_ptr + cols, mask=m, other=0.0).to(dl.float32)
    r = dl.rsqrt(dl.sum(x * x, axis=0) / n_cols + eps)
    dl.store(y_ptr + row * n_cols + cols, (x * r * w).to(dl.bfloat16), mask=m)


@dataclass
class Workload:
    name: str
    low: float  # the published range (low == high for a single figure)
    high: float
    unit: str
    source: str
    kind: str
    run: object  # () -> simulated figure in `unit`
    test: bool = True  # pinned in tests/test_calibration.py (False: benchmark only, too slow on the host)

    def band(self) -> tuple[float, float]:
        return self.low * (1 - BAND), self.high * (1 + BAND)

    def ratio(self, sim: float) -> float:
        """sim / published: against the nearest end of the range (1.0 inside it)."""
        if sim < self.low:
            return sim / self.low
        if sim > self.high:
            return sim / self.high
        return 1.0


def _fresh(profile=None) -> Device:
    """A new device: cold L2, so nothing is left from an earlier workload."""
    return Device(profile)


def copy_tbs(mib: int = 256) -> float:
    n = mib * 2**20 // 4
    x = np.ones(n, np.float32)
    y = np.empty_like(x)
    with _fresh() as dev:
        launch = copy_loop[(dev.profile.vector_cores,)](x, y, n, BLOCK=16384)
    assert np.array_equal(x, y)
    return 2 * x.nbytes / (launch.time_us * 1e-6) / 1e12


def add_tbs(mib: int = 256) -> float:
    n = mib * 2**20 // 4
    x = np.full(n, 1.5, np.float32)
    y = np.full(n, 2.0, np.float32)
    z = np.empty_like(x)
    with _fresh() as dev:
        launch = add_loop[(dev.profile.vector_cores,)](x, y, z, n, BLOCK=8192)
    assert np.all(z == 3.5)
    return 3 * x.nbytes / (launch.time_us * 1e-6) / 1e12


def gemm_tflops(n: int, tiles=(128, 256, 64)) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    c = np.empty((n, n), np.float32)
    with _fresh() as dev:
        launch = gemm[(dev.profile.cube_cores,)](a, b, c, n, n, n, BM=tiles[0], BN=tiles[1], BK=tiles[2])
    rows = slice(0, n, max(1, n // 64))  # an independent check of a sample of rows (the whole product is slow)
    np.testing.assert_allclose(c[rows], a[rows].astype(np.float32) @ b.astype(np.float32), rtol=2e-3, atol=2e-2)
    return 2 * n**3 / (launch.time_us * 1e-6) / 1e12


def c2v_bytes_per_cycle(R: int = 16, BM: int = 128, BN: int = 128, BK: int = 16) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((BM, BK)).astype(np.float16)
    b = rng.standard_normal((BK, BN)).astype(np.float16)
    with _fresh() as dev:
        cores = dev.profile.cube_cores
        out = np.empty((cores, BM, BN), np.float32)
        launch = c2v_stream[(cores,)](a, b, out, R, BM=BM, BN=BN, BK=BK)
    np.testing.assert_allclose(out[0], a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    body = launch.cycles - launch.launch_overhead
    return R * BM * BN * 4 / body  # per cube core: every core hands off R tiles in the body's time


def tiny_us() -> float:
    x = np.arange(64, dtype=np.float32)
    y = np.empty_like(x)
    with _fresh():
        launch = tiny_copy[(1,)](x, y, 64, BLOCK=64)
    assert np.array_equal(x, y)
    return launch.time_us


def small_block_us(rows: int = 1024, cols: int = 1024) -> float:
    """Time per program on a core of a grid of `rows` small programs on the 910B3 profile (the measurement's
    part): the launch's programs time over its waves."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(cols).astype(ml_dtypes.bfloat16)
    y = np.empty_like(x)
    with _fresh("910B3") as dev:
        launch = rmsnorm_row[(rows,)](x, w, y, cols, 1e-6, BLOCK=cols)
    xf = x.astype(np.float32)
    ref = xf / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + 1e-6) * w.astype(np.float32)
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
    waves = -(-rows // dev.profile.vector_cores)
    return (launch.cycles - launch.launch_overhead) / waves / dev.profile.clock_hz * 1e6


FLAGGEMS = "FlagGems `mode=kernel` tables (flagos-ai/FlagGems#6324, #6424; torch_npu, SKU not stated)"
WORKLOADS = [
    Workload("copy 256 MiB fp32, grid = vector cores", 1.22, 1.40, "TB/s",
             f"no public A2 copy figure; streaming kernels: torch_npu swiglu on 512 MiB 1.22-1.23 TB/s ({FLAGGEMS}); "
             "pto-kernels matmul_add 1.40 TB/s on 910B2 (huawei-csl/pto-kernels [R8])", "measured", copy_tbs),
    Workload("vector add 256 MiB per tensor fp32", 1.22, 1.40, "TB/s", "as the copy", "measured", add_tbs),
    Workload("GEMM fp16 1024^3, persistent, 128x256x64 tiles", 98.0, 130.0, "TFLOPS",
             "torch_npu 98 TFLOPS on 910B2, host-timed (zzc0721/torch-performance-test-data#109); 130 TFLOPS "
             "device-timed, device not stated (triton-lang/triton-ascend#293)", "measured", lambda: gemm_tflops(1024)),
    Workload("GEMM fp16 2048^3, persistent, 128x256x64 tiles", 251.0, 297.0, "TFLOPS",
             "torch_npu 251 TFLOPS on 910B2 (#109); 297 (triton-ascend#293)", "measured", lambda: gemm_tflops(2048)),
    Workload("GEMM fp16 4096^3, persistent, 128x256x64 tiles", 314.5, 347.0, "TFLOPS",
             "torch_npu 314.5 TFLOPS on 910B2 (#109); 347 (triton-ascend#293, probably a 25-core or 1.85 GHz part)",
             "measured", lambda: gemm_tflops(4096), test=False),
    Workload("cube -> vector handoff streaming, per cube core", 27.0, 39.0, "B/cycle",
             "C2V 1.15-1.67 TB/s over 24 AIC on 910B2 (pto-kernels stream_c2v_v2c [R8])", "measured",
             c2v_bytes_per_cycle),
    Workload("one 64-element kernel (launch floor)", 1.4, 4.6, "us",
             f"smallest kernels timed on the device: Triton-Ascend 1.4-2.0 us, torch_npu aclnn 2.5-4.6 us ({FLAGGEMS}, "
             "FlagGems#6014, FlagGems-vllm#732)", "measured", tiny_us),
    Workload("1,024 one-row rmsnorm programs on 910B3, per program", 2.0, 2.0, "us",
             "TileLang-Ascend rmsnorm on 910B3: 512-1024 blocks of about 2 us each, 'all the time spent on "
             "per-block fixed overhead' (tile-ai/tilelang-ascend#1791)", "measured", small_block_us),
]

PARAMETERS = [
    # (parameter, published, source, kind, simulated value as text)
    ("HBM sustained rate", "1.38 TB/s (CANN tiling model); 1.40 best measured", "CANN ops tiling code [R7]; [R8]",
     "derived / measured", lambda p: f"{p.hbm_bytes_per_cycle * p.clock_hz / 1e12:.2f} TB/s"),
    ("per-core GM rate (HBM miss)", "32 B/cycle", "`ddr_rate=32`, CANN ini [R2][R4]", "spec",
     lambda p: f"{p.mte_bytes_per_cycle:g} B/cycle"),
    ("per-core L2 read / write", "110 / 86 B/cycle", "`l2_read_rate`, `l2_write_rate`, `Ascend910B1.ini` [R3]", "spec",
     lambda p: f"{p.l2_read_bytes_per_cycle:g} / {p.l2_write_bytes_per_cycle:g} B/cycle"),
    ("cube -> vector handoff", "27-39 B/cycle per AIC, through GM", "pto-kernels stream_c2v_v2c [R8]", "measured",
     lambda p: f"{p.handoff_bytes_per_cycle:g} B/cycle + {p.handoff_flag_cycles} cycles flag"),
    ("unaligned GM burst", "as little as 70% of 512 B-aligned", "CANN best practice 'GM地址尽量512B对齐'", "measured",
     lambda p: f"{100 * p.unaligned_efficiency:.0f}% off a {p.gm_align_bytes} B boundary"),
    ("per-program dispatch beyond the cores", "about 2 us per small block", "tile-ai/tilelang-ascend#1791",
     "measured", lambda p: f"{p.program_dispatch_cycles:,} cycles ({p.program_dispatch_cycles / p.clock_hz * 1e6:.1f} us) "
                           "+ the block's work"),
    ("L2 across launches", "192 MB L2 keeps a producer's output (warm mm+add ~2.0 TB/s)",
     "pto-kernels matmul_add [R8]", "measured", lambda p: "LRU by tensor, write-back" if p.l2_across_launches else "off"),
]


def measure(quick: bool = False) -> list[tuple[Workload, float, float]]:
    out = []
    for w in WORKLOADS:
        if quick and not w.test:
            continue
        t0 = time.perf_counter()
        sim = w.run()
        out.append((w, sim, time.perf_counter() - t0))
    return out


def table_markdown(results) -> str:
    p = get_profile(None)
    lines = ["| parameter or workload | published | source | kind | simulated | ratio |", "|---|---|---|---|---|---|"]
    for name, pub, src, kind, sim in PARAMETERS:
        lines.append(f"| {name} | {pub} | {src} | {kind} | {sim(p)} | model input |")
    for w, sim, _ in results:
        pub = f"{w.low:g}" if w.low == w.high else f"{w.low:g}-{w.high:g}"
        lines.append(f"| {w.name} | {pub} {w.unit} | {w.source} | {w.kind} | {sim:.3g} {w.unit} | "
                     f"{w.ratio(sim):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leave out the workloads too slow for a test")
    ap.add_argument("--docs", action="store_true", help="rewrite the calibration table of docs/device.md")
    args = ap.parse_args(argv)
    results = measure(args.quick)
    print(f"{'workload':58} {'published':>14} {'simulated':>11} {'ratio':>6}  in band  host")
    for w, sim, host in results:
        lo, hi = w.band()
        pub = f"{w.low:g}" if w.low == w.high else f"{w.low:g}-{w.high:g}"
        print(f"{w.name:58} {pub:>9} {w.unit:>4} {sim:11.3g} {w.ratio(sim):6.2f}  {'yes' if lo <= sim <= hi else 'NO':>7}"
              f"  {host:.1f}s")
    if args.docs:
        path = Path(__file__).resolve().parent.parent / "docs" / "device.md"
        text = path.read_text()
        new = re.sub(r"(<!-- calibration table -->\n).*?(\n<!-- end calibration table -->)",
                     lambda m: m.group(1) + table_markdown(results) + m.group(2), text, flags=re.S)
        if new == text and "<!-- calibration table -->" not in text:
            print("docs/device.md has no calibration table markers", file=sys.stderr)
            return 1
        path.write_text(new)
        print(f"wrote the calibration table to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
