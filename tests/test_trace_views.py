"""The terminal views: what they compute, how they lay out at narrow widths, and their errors."""

import io

import numpy as np
import pytest
from rich.console import Console

import dvmlang
import dvmlang.language as dl
from sample_kernels import matmul
from dvmlang.trace.stats import analyse, busy_per_bin, line_stats, nice_step
from dvmlang.trace.timeline import glyphs
from dvmlang.trace.views import compare, render


@dvmlang.kernel
def bracket_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)  # [bold]ub[0:4096][/bold] gm[/out]
    dl.store(out_ptr + offs, dl.exp(x) * 2.0, mask=offs < n)


@dvmlang.kernel
def heavy(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    for _ in range(20):
        x = dl.exp(dl.sin(x) * 0.5)
    dl.store(out_ptr + offs, x, mask=offs < n)


@dvmlang.kernel
def copy(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n), mask=offs < n)




def text_of(launches, view, width=100, **options) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    render(launches, view, console=c, **options)
    return c.file.getvalue()


def _run(kernel, n, block, **kw):
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    return kernel[(dl.cdiv(n, block),)](x, np.empty_like(x), n, BLOCK=block, trace=True, **kw)


def test_user_text_with_brackets_is_never_markup():
    launch = _run(bracket_kernel, 1000, 256)
    for view in ("source", "table", "disasm"):
        out = text_of([launch], view, width=160)
        assert "ub[" in out, view
    out = text_of([launch], "source", width=160)
    assert "[bold]ub[0:4096][/bold] gm[/out]" in out  # the comment survives literally
    assert "ub[0x" in text_of([launch], "disasm", width=160)


def test_source_shares_add_up_and_hot_spots_are_ranked():
    launch = _run(heavy, 4096, 1024)
    lines, total = line_stats(launch.trace)
    assert sum(s.cycles for s in lines) == pytest.approx(total)
    assert total == pytest.approx(sum(launch.pipe_busy.values()))
    out = text_of([launch], "source", top=3)
    hot = out.split("hot spots")[1].splitlines()[3:6]
    ranked = [float(row.split()[2].rstrip("%")) for row in hot]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) == 3
    assert "x = dl.exp(dl.sin(x) * 0.5)" in hot[0]  # the loop body is the hot spot
    assert "VEXP" in out and "VSIN" in out  # each line lists its instructions


def test_summary_names_what_bounds_the_kernel():
    tiny = _run(copy, 1000, 1024)
    big_copy = _run(copy, 1 << 22, 8192)
    compute = _run(heavy, 1 << 20, 8192)
    assert analyse(tiny).bound == "launch overhead"
    assert analyse(big_copy).bound == "program dispatch"  # 512 programs of one tile on 48 cores
    from dvmlang.npu import Device
    with Device(big_copy.profile.with_(program_dispatch_cycles=0)):
        assert analyse(_run(copy, 1 << 22, 8192)).bound == "memory (HBM / DMA)"
    assert analyse(compute).bound == "vector"
    out = text_of([big_copy], "summary")
    for word in ("cycles", "wave(s)", "bytes moved", "HBM rate", "vector", "bound by", "MTE2", "utilisation",
                 "program dispatch", "L2 hits"):
        assert word in out, word
    a = analyse(big_copy)
    assert 0 < a.roofline_fraction <= 1.0
    assert a.bytes_read == a.bytes_written == 4 * (1 << 22)


def test_summary_of_a_cube_kernel_counts_macs_against_the_peak():
    M, N, K = 32, 32, 64
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K)).astype(np.float16), rng.random((K, N)).astype(np.float16)
    launch = matmul[(2, 2)](a, b, np.zeros((M, N), np.float32), M, N, K, BM=16, BN=16, BK=16, trace=True)
    A = analyse(launch)
    assert A.cube_macs == M * N * K
    assert 0 < A.cube_peak_fraction < 1
    assert "MACs" in text_of([launch], "summary")


def test_views_of_summary_only_traces_stay_exact():
    x = np.random.default_rng(0).random(4096, dtype=np.float32)
    with dvmlang.trace(summary_only=True) as t:
        heavy[(4,)](x, np.empty_like(x), 4096, BLOCK=1024)
    out = text_of(t.launches, "all")
    assert "no rows recorded" in out and "VEXP" in out and "hot spots" in out


@pytest.mark.parametrize("width", [80, 100])
def test_instruction_table_never_wraps_the_source(width):
    launch = _run(bracket_kernel, 1000, 256)
    out = text_of([launch], "table", width=width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    # the load's source line shows once, on one line, cut with an ellipsis when it does not fit
    hits = [line for line in lines if "x = dl.load(x_ptr" in line]
    assert len(hits) == 1
    assert "…" in hits[0] or "[/out]" in hits[0]
    assert not any(line.strip() in ("mask=offs", "<", "n)") for line in lines)  # no word-per-line wrapping


def test_timeline_draws_each_core_and_pipe_and_honours_its_options():
    launch = _run(copy, 50 * 256, 256)
    out = text_of([launch], "timeline", width=100)
    assert [line.split()[1] for line in out.splitlines() if line.startswith("core ")] == ["0", "1", "2", "3"]
    assert "MTE2" in out and "legend" in out and "█" in out
    assert all(len(line) <= 100 for line in out.splitlines())
    out = text_of([launch], "timeline", width=60, cores=[5, 49 % 48], cycles=(0, 400))
    assert [line.split()[1] for line in out.splitlines() if line.startswith("core ")] == ["5", "1"]
    assert "cycles 0-400" in out
    assert "p5" in out and "p1" in out  # program starts are marked
    assert all(len(line) <= 60 for line in out.splitlines())


@pytest.mark.parametrize("options, message", [
    (dict(cycles=(500, 100)), "empty or negative"),
    (dict(cycles=(10 ** 9, 10 ** 9 + 5)), "starts after the launch ends"),
    (dict(cycles="soon"), "pair of cycle counts"),
    (dict(cores=[99]), "core 99 does not exist"),
    (dict(cores=0), "shows no core"),
    (dict(width=10), "at least 40"),
    (dict(colour=True), "unknown trace view option 'colour'"),
])
def test_bad_view_options_are_dvmlang_errors(options, message):
    launch = _run(copy, 2048, 256)
    with pytest.raises(dvmlang.DvmError, match=message):
        render([launch], "timeline", console=Console(file=io.StringIO(), width=100), **options)


def test_unknown_view_and_kernel_filters():
    launch = _run(copy, 2048, 256)
    with pytest.raises(dvmlang.DvmError, match="unknown trace view 'flame'"):
        text_of([launch], "flame")
    with pytest.raises(dvmlang.DvmError, match="no launch of a kernel named 'nope'"):
        text_of([launch], "summary", kernel="nope")
    assert "copy" in text_of([launch], "summary", kernel="copy")
    with pytest.raises(dvmlang.DvmError, match="needs two launches"):
        text_of([launch], "compare")


def test_compare_two_block_sizes_side_by_side():
    a = _run(copy, 1 << 16, 512)
    b = _run(copy, 1 << 16, 1024)
    c = Console(file=io.StringIO(), width=100, color_system=None)
    compare(a, b, console=c, labels=("BLOCK=512", "BLOCK=1024"))
    out = c.file.getvalue()
    assert "BLOCK=512" in out and "BLOCK=1024" in out
    row = next(line for line in out.splitlines() if line.startswith("programs"))
    assert row.split()[1:] == ["128", "64", "x0.50"]
    assert "cycles per source line" in out


def test_session_print_and_all_view():
    x = np.random.default_rng(0).random(3000, dtype=np.float32)
    with dvmlang.trace() as t:
        copy[(3,)](x, np.empty_like(x), 3000, BLOCK=1024)
        copy[(6,)](x, np.empty_like(x), 3000, BLOCK=512)
    c = Console(file=io.StringIO(), width=100, color_system=None)
    t.print(view="all", console=c)
    out = c.file.getvalue()
    for part in ("launch 0: copy", "launch 1: copy", "bound by", "hot spots", "core 0", "OPNAME"):
        assert part in out, part
    c = Console(file=io.StringIO(), width=100, color_system=None)
    t.print(view="compare", console=c, pair=(1, 0))
    assert "grid=(6, 1, 1)" in c.file.getvalue().splitlines()[0]


def test_helpers():
    assert glyphs(np.array([0.0, 0.01, 0.5, 1.0, 2.0])) == "·▁▄██"
    edges = np.array([0.0, 5.0, 10.0, 15.0])
    got = busy_per_bin(np.array([2.0, 9.0]), np.array([7.0, 16.0]), edges)
    np.testing.assert_allclose(got, [3.0, 3.0, 5.0])
    got = busy_per_bin(np.array([0.0]), np.array([10.0]), edges, weight=np.array([2.0]))
    np.testing.assert_allclose(got, [10.0, 10.0, 0.0])
    assert nice_step(23_000, 8) == 5000


@pytest.mark.parametrize("busy, cycles, expected", [
    (dict(MTE2=48 * 9000.0, VECTOR=48 * 2000.0), 5400 + 9500, "memory (HBM / DMA)"),
    (dict(MTE2=48 * 1000.0, VECTOR=48 * 9000.0), 5400 + 9500, "vector"),
    (dict(CUBE=48 * 9000.0), 5400 + 9500, "cube"),
    (dict(MTE2=48 * 100.0, VECTOR=48 * 100.0), 5400 + 600, "launch overhead"),
    (dict(MTE2=48 * 1000.0, VECTOR=48 * 1000.0), 5400 + 20000, "latency (pipes waiting)"),
])
def test_what_bounds_a_launch_follows_the_busiest_limit(busy, cycles, expected):
    from types import SimpleNamespace

    from dvmlang.npu.profile import Profile
    p = Profile()
    launch = SimpleNamespace(profile=p, cycles=cycles, launch_overhead=p.launch_overhead_cycles, cores=48,
                             grid=(480, 1, 1), bytes_read=1000, bytes_written=1000, pipe_busy=busy, kind="vector",
                             waves=10, trace=None, instructions=100, time_us=cycles / p.clock_hz * 1e6, name="k")
    a = analyse(launch)
    assert a.bound == expected
    assert a.bounds == sorted(a.bounds, key=lambda b: -b.cycles)


def test_rows_follow_the_hbm_stretch_and_the_summary_says_so():
    launch = _run(copy, 1 << 22, 8192)
    tr = launch.trace
    stretch = getattr(launch, "hbm_stretch", 1.0)
    rows = np.bincount(tr.step, weights=tr.dur, minlength=len(tr.steps))
    np.testing.assert_allclose(rows, tr.step_cycles * stretch, rtol=1e-9)
    assert ("HBM limit" in text_of([launch], "summary")) == (stretch > 1.0)
