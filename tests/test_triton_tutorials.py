"""Triton's tutorials, ported to examples/triton/ with only their imports changed: every file there runs and
checks itself against torch (its ``run()`` asserts), and makes at least one launch on the simulated device.
Also the pieces of dvmlang.triton the tutorials need: ``warmup`` giving a ``CompiledKernel`` (tutorial 02),
the no-op ``gdc_wait``/``gdc_launch_dependents`` (tutorial 11), and grids above 65535 programs (tutorial 01's
benchmark at 2**26 elements)."""

import contextlib
import importlib.util
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dvmlang  # noqa: E402
import dvmlang.triton as triton  # noqa: E402
import dvmlang.triton.language as tl  # noqa: E402

TUTORIALS = Path(__file__).resolve().parent.parent / "examples" / "triton"
NAMES = sorted(p.stem for p in TUTORIALS.glob("*.py") if not p.name.startswith("_"))


def load(name):
    spec = importlib.util.spec_from_file_location(f"dvmlang_tutorial_{name}", TUTORIALS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_folder_has_the_tutorials_of_issue_13():
    numbers = {n[:2] for n in NAMES}
    assert {"01", "02", "03", "04", "05", "06", "07", "09", "11"} <= numbers


@pytest.mark.parametrize("name", NAMES)
def test_tutorial_runs_and_checks_itself_against_torch(name):
    out = io.StringIO()
    with dvmlang.trace(summary_only=True) as t, contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore", dvmlang.DvmWarning)  # do_bench of a torch baseline is nan, with a warning
        mod = load(name)
        assert hasattr(mod, "run"), f"{name} has no run() for the gallery"
        mod.run()  # the tutorial's own checks against torch are asserts in run()
    assert t.launches, f"{name} launched no kernel"
    assert all(launch.cycles > 0 for launch in t.launches)


# ---- what the tutorials need from dvmlang.triton ------------------------------------------------------------------

@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_warmup_gives_a_compiled_kernel_with_the_bytecodes_numbers():
    x, y = torch.rand(100), torch.zeros(100)
    k = _copy.warmup(x, y, 100, BLOCK=64, num_warps=8, grid=(1,))
    assert isinstance(k, triton.compiler.CompiledKernel)
    assert torch.equal(y, torch.zeros(100))  # nothing ran
    k._init_handles()
    info = k.bytecode.kernels[0]
    assert k.n_regs == len(info.reg_types) > 0 and k.n_spills == 0
    ub = info.footprint["ub"]
    assert k.metadata.shared == (2 * ub if info.double_buffer else ub) > 0
    assert k.metadata.num_warps == 8 and k.metadata.name == "_copy"
    props = triton.runtime.driver.active.utils.get_device_properties(0)
    assert props["max_shared_mem"] // k.metadata.shared >= 1
    assert "dvmasm" in k.asm
    k[(2, 1, 1)](x, y, 100, 64)  # every parameter positionally, as Triton's compiled kernels take them
    assert torch.equal(y, x)


def test_a_compiled_kernel_refuses_other_constexprs():
    x, y = torch.rand(100), torch.zeros(100)
    k = _copy.warmup(x, y, 100, BLOCK=64, grid=(1,))
    with pytest.raises(dvmlang.LaunchError, match="compiled with BLOCK=64"):
        k[(4,)](x, y, 100, 32)


def test_dvmlang_kernels_still_warm_up_to_bytecode():
    k = dvmlang.kernel(_copy.fn)
    bc = k.warmup(np.zeros(4, np.float32), np.zeros(4, np.float32), 4, BLOCK=4, grid=(1,))
    assert isinstance(bc, dvmlang.Bytecode)


@triton.jit
def _add_gdc(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.load(y_ptr + offs, mask=offs < n)
    if USE_GDC:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(out_ptr + offs, x + y, mask=offs < n)


def test_gdc_wait_and_launch_dependents_change_nothing():
    x, y = torch.rand(300), torch.rand(300)
    a, b = torch.empty(300), torch.empty(300)
    with_gdc = _add_gdc[(3,)](x, y, a, 300, BLOCK=128, USE_GDC=True, launch_pdl=True)
    without = _add_gdc[(3,)](x, y, b, 300, BLOCK=128, USE_GDC=False)
    assert torch.equal(a, x + y) and torch.equal(b, a)
    assert with_gdc.cycles == without.cycles
    assert with_gdc.bytecode.code.tobytes() == without.bytecode.code.tobytes()


def test_a_grid_of_more_than_65535_programs_runs():
    """Tutorial 01's benchmark sweeps to 2**27 elements: up to 131072 programs of 1024. The device runs a grid's
    programs in waves over its cores, so a grid is not bounded by the hardware's 65535 blocks per launch."""
    n = 65536 * 64 + 5
    x = torch.rand(n)
    y = torch.rand(n)
    out = torch.empty(n)
    rec = _add_gdc[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64, USE_GDC=False)
    assert rec.grid == (65537, 1, 1)
    assert torch.equal(out, x + y)


def test_a_grid_beyond_the_devices_limit_is_a_launch_error():
    limit = dvmlang.npu.Device().profile.max_programs
    assert limit == 2**24
    x = np.zeros(4, np.float32)
    with pytest.raises(dvmlang.LaunchError, match="at most 16777216"):
        _copy[(limit + 1,)](x, x.copy(), 4, BLOCK=4)


def test_do_bench_inside_a_trace_records_its_launches_there():
    x, y = torch.rand(100), torch.zeros(100)
    with dvmlang.trace(summary_only=True) as t:
        _copy[(1,)](x, y, 100, BLOCK=128)
        ms = triton.testing.do_bench(lambda: _copy[(2,)](x, y, 100, BLOCK=64))
    assert [launch.grid for launch in t.launches] == [(1, 1, 1), (2, 1, 1)]
    assert ms == pytest.approx(t.launches[1].time_us / 1e3)
    assert triton.testing.do_bench(lambda: _copy[(2,)](x, y, 100, BLOCK=64)) == ms  # outside a trace: the same


def test_tutorial_05_at_its_own_width_fits():
    """At N = 8192 the backward kernel's tiles fill the 192 KiB UB to the last byte as written (issue 13 made that
    a BufferOverflowError at the kernel's line instead of bytecode the validator refused); since issue 36 a
    temporary is dead after its last use and UB is kept for the splat slots, so it runs, and matches float32
    torch (tests/test_triton_wild.py checks dw/db at 64 rows)."""
    ln = load("05_layer_norm")
    x = torch.randn(4, 8192, dtype=torch.float16, requires_grad=True)
    w = torch.rand(8192, dtype=torch.float16, requires_grad=True)
    b = torch.rand(8192, dtype=torch.float16, requires_grad=True)
    dy = torch.randn(4, 8192, dtype=torch.float16)
    ln.layer_norm(x, (8192,), w, b, 1e-5).backward(dy)
    x32, w32, b32 = (v.detach().float().requires_grad_(True) for v in (x, w, b))
    torch.nn.functional.layer_norm(x32, (8192,), w32, b32, 1e-5).backward(dy.float())
    torch.testing.assert_close(x.grad.float(), x32.grad, atol=2e-2, rtol=1e-2)
