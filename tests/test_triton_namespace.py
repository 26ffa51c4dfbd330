"""``import dvmlang.triton as triton`` / ``import dvmlang.triton.language as tl``: Triton programs with only their
imports changed (docs/triton.md). Every numeric check is against numpy or Python's math, computed
independently of the op vocabulary's own references where one exists (float64 math, then rounded)."""

import math
import subprocess
import sys

import numpy as np
import pytest

import dvmlang.triton as triton
import dvmlang.triton.language as tl
from dvmlang.triton.language.extra import libdevice


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DVMLANG_CACHE_DIR", str(tmp_path))
    return tmp_path


# ---- imports and module layout ------------------------------------------------------------------------------

def test_the_namespace_imports_without_torch_and_dvmlang_does_not_import_it():
    code = ("import sys, dvmlang; assert 'dvmlang.triton' not in sys.modules; "
            "import dvmlang.triton as triton, dvmlang.triton.language as tl; "
            "import dvmlang.triton.language.math, dvmlang.triton.language.core, dvmlang.triton.language.standard; "
            "import dvmlang.triton.language.extra.libdevice, dvmlang.triton.language.extra.cuda.libdevice; "
            "import dvmlang.triton.runtime, dvmlang.triton.runtime.jit, dvmlang.triton.runtime.driver; "
            "import dvmlang.triton.compiler, dvmlang.triton.compiler.compiler, dvmlang.triton.compiler.errors; "
            "import dvmlang.triton.backends, dvmlang.triton.backends.compiler, dvmlang.triton.testing; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_layout_and_version():
    from dvmlang.triton.language.extra.cuda import libdevice as cuda_libdevice
    assert cuda_libdevice is libdevice and tl.extra.libdevice is libdevice
    assert tl.math.exp is tl.exp and tl.core.load is tl.load and tl.standard.softmax is tl.softmax
    major, minor, patch = (int(p) for p in triton.__version__.split("."))
    assert major == 3 and minor >= 0 and patch >= 0
    assert triton.cdiv(10, 4) == 3 and triton.next_power_of_2(100) == 128
    assert triton.runtime.jit.JITFunction is triton.JITFunction
    assert triton.backends.backends == {}
    assert tl.str_to_ty("fp32", None) is tl.float32 and tl.str_to_ty("i1", None) is tl.int1
    assert isinstance(tl.float16, tl.dtype)
    import dvmlang.language as dl
    missing = [k for k in vars(dl) if not k.startswith("_") and not hasattr(tl, k)
               and k not in ("debug", "elementwise", "memory", "reductions", "scaled",
                             "shape", "shmem")]  # dl's own module split
    assert missing == []
    assert tl.range is dl.range and tl.static_range is dl.static_range and tl.cdiv is dl.cdiv


def test_names_with_no_meaning_here_say_so():
    with pytest.raises(triton.TritonError, match="inline_asm_elementwise is not available"):
        tl.inline_asm_elementwise
    with pytest.raises(AttributeError):
        tl.no_such_name
    with pytest.raises(triton.TritonError, match="pointer types"):
        tl.str_to_ty("*fp32")
    with pytest.raises(triton.TritonError, match="first launch"):
        triton.compiler.compiler.compile(None)


# ---- tutorial 01, as Triton writes it ----------------------------------------------------------------------

@triton.jit
def add_kernel(x_ptr,  # *Pointer* to first input vector.
               y_ptr,  # *Pointer* to second input vector.
               output_ptr,  # *Pointer* to output vector.
               n_elements,  # Size of the vector.
               BLOCK_SIZE: tl.constexpr,  # Number of elements each program should process.
               ):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x, y):
    output = np.empty_like(x)
    n_elements = output.size
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )  # noqa: E731
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


def test_tutorial_01_vector_add():
    rng = np.random.default_rng(0)
    size = 98432
    x, y = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
    np.testing.assert_array_equal(add(x, y), x + y)


def test_jit_takes_tritons_options_and_nothing_else():
    def f(x_ptr, n):
        tl.store(x_ptr + tl.arange(0, 8), tl.full((8,), 1, tl.int32) * n)
    k = triton.jit(do_not_specialize=["n"], debug=True, noinline=True)(f)
    x = np.zeros(8, np.int32)
    k[(1,)](x, 5)
    np.testing.assert_array_equal(x, 5)
    with pytest.raises(triton.TritonError, match="does not take"):
        triton.jit(fast=True)(f)


# ---- autotune and heuristics through the namespace ---------------------------------------------------------

@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 64}, num_warps=4),
                          triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=2)], key=["n_elements"])
@triton.jit
def tuned_add(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0})
@triton.jit
def scaled(x_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if EVEN:
        tl.store(output_ptr + offsets, tl.load(x_ptr + offsets) * 2)
    else:
        mask = offsets < n_elements
        tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)


def test_autotune_and_heuristics():
    rng = np.random.default_rng(1)
    n = 5000
    x, y, out = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32), np.zeros(n, np.float32)
    tuned_add[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    np.testing.assert_array_equal(out, x + y)
    assert tuned_add.best_config.kwargs["BLOCK_SIZE"] in (64, 1024)
    for n, factor in ((4096, 2), (4000, 3)):
        x, out = rng.random(n, dtype=np.float32), np.zeros(n, np.float32)
        scaled[(triton.cdiv(n, 256),)](x, out, n, BLOCK_SIZE=256)
        np.testing.assert_array_equal(out, x * factor)


# ---- errors ------------------------------------------------------------------------------------------------

@triton.jit
def bad_kernel(x_ptr):
    tl.store(x_ptr, undefined_name)  # noqa: F821


@triton.jit
def huge_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


def test_error_classes_catch_dvmlang_errors():
    with pytest.raises(triton.CompilationError):
        bad_kernel[(1,)](np.zeros(1, np.float32))
    with pytest.raises(triton.OutOfResources):
        huge_kernel[(1,)](np.zeros(1 << 20, np.float32), BLOCK=1 << 20)
    from dvmlang.triton.compiler.errors import CompilationError
    from dvmlang.triton.runtime.errors import InterpreterError, OutOfResources
    import dvmlang
    assert CompilationError is dvmlang.CompilationError and OutOfResources is dvmlang.ResourceError
    assert issubclass(InterpreterError, triton.TritonError) and triton.TritonError is dvmlang.DvmError


# ---- libdevice: the new op rows and the libdevice spellings, against float64 math --------------------------

@triton.jit
def unary_kernel(x_ptr, y_ptr, s_ptr, n, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, F(tl.load(x_ptr + offs, mask=m)), mask=m)
    tl.store(s_ptr, F(tl.load(x_ptr + 1)))  # a scalar: the scalar instruction


@triton.jit
def binary_kernel(x_ptr, y_ptr, o_ptr, n, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, F(tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m)), mask=m)


def _c(fn):
    """A C math function on float64, NaN where C returns NaN (math raises ValueError) and inf on overflow."""
    def f(v):
        try:
            return fn(float(v))
        except ValueError:  # outside the domain: NaN, but atanh(+-1) is +-inf in C
            return math.copysign(math.inf, v) if fn is math.atanh and abs(v) == 1 else math.nan
        except OverflowError:
            return math.copysign(math.inf, v) if fn is not math.cosh else math.inf
    return np.vectorize(f, otypes=[np.float64])


def _round_half_away(v):
    if not math.isfinite(v):
        return v
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _cbrt(v):
    return math.copysign(abs(v) ** (1.0 / 3.0), v) if math.isfinite(v) else v


UNARY = {  # name: (float64 oracle, inputs, float16 is meaningful)
    "tan": (_c(math.tan), np.linspace(-1.5, 1.5, 37)),
    "asin": (_c(math.asin), np.linspace(-1.2, 1.2, 37)),
    "acos": (_c(math.acos), np.linspace(-1.2, 1.2, 37)),
    "atan": (_c(math.atan), np.linspace(-50, 50, 37)),
    "sinh": (_c(math.sinh), np.linspace(-10, 10, 37)),
    "cosh": (_c(math.cosh), np.linspace(-10, 10, 37)),
    "asinh": (_c(math.asinh), np.linspace(-100, 100, 37)),
    "acosh": (_c(math.acosh), np.linspace(0.5, 100, 37)),
    "atanh": (_c(math.atanh), np.linspace(-1.2, 1.2, 37)),
    "expm1": (_c(math.expm1), np.concatenate([np.linspace(-5, 5, 30), [1e-7, -1e-7, 1e-4]])),
    "log10": (_c(math.log10), np.concatenate([np.geomspace(1e-3, 1e4, 30), [-1.0]])),
    "cbrt": (np.vectorize(_cbrt, otypes=[np.float64]), np.linspace(-30, 30, 37)),
    "erfc": (_c(math.erfc), np.linspace(-3, 9, 37)),
    "lgamma": (_c(math.lgamma), np.concatenate([np.linspace(-4.75, 30, 33), [1.0, 2.0]])),
    "tgamma": (_c(math.gamma), np.concatenate([np.linspace(-4.75, 30, 33), [0.5, 5.0]])),
    "trunc": (np.vectorize(lambda v: float(math.trunc(v)) if math.isfinite(v) else v), None),
    "rint": (np.vectorize(lambda v: float(round(v)) if math.isfinite(v) else v), None),  # Python rounds half-even
    "round": (np.vectorize(_round_half_away, otypes=[np.float64]), None),
}
ROUNDING_INPUTS = np.array([-3.5, -2.5, -1.5, -0.5, -0.49999997, -0.0, 0.0, 0.49999997, 0.5, 1.5, 2.5, 3.5,
                            1.25, -7.75, 8388609.0, np.inf, -np.inf, np.nan, 123.456, -0.7])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_new_unary_rows_match_c(name, dtype):
    oracle, inputs = UNARY[name]
    with np.errstate(all="ignore"):
        x = (ROUNDING_INPUTS if inputs is None else inputs).astype(dtype)  # in float16 8388609 is inf
        y, s = np.zeros_like(x), np.zeros(1, dtype)
        unary_kernel[(2,)](x, y, s, x.size, F=getattr(libdevice, name), BLOCK=32)
        want = oracle(x.astype(np.float64)).astype(dtype)
    tol = dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-3, atol=1e-4)
    if name == "expm1":  # near 0 the relative error is what expm1 is for
        tol["atol"] = 0
    if inputs is None:
        np.testing.assert_array_equal(y, want)
    else:
        np.testing.assert_allclose(y, want, equal_nan=True, **tol)
    np.testing.assert_allclose(s[0], want[1], equal_nan=True, **tol)
    # the dl function is the same op
    assert getattr(tl, name) is getattr(libdevice, name)


def test_gamma_functions_at_their_poles_and_exact_values():
    x = np.array([0.0, -0.0, -1.0, -2.0, 1.0, 2.0, 5.0, 0.5, np.inf, -np.inf, np.nan], np.float32)
    got = {}
    for name in ("lgamma", "tgamma"):
        y, s = np.zeros_like(x), np.zeros(1, np.float32)
        with np.errstate(all="ignore"):
            unary_kernel[(1,)](x, y, s, x.size, F=getattr(libdevice, name), BLOCK=16)
        got[name] = y
    inf, nan = np.inf, np.nan
    np.testing.assert_allclose(got["lgamma"], np.array([inf, inf, inf, inf, 0, 0, math.log(24), math.log(math.pi) / 2,
                                                        inf, inf, nan], np.float32), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(got["tgamma"], np.array([inf, -inf, nan, nan, 1, 1, 24, math.sqrt(math.pi), inf, nan,
                                                        nan], np.float32), rtol=1e-6, equal_nan=True)
    assert np.signbit(got["tgamma"][1])


def test_rounding_modes_differ_as_in_c():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float32)
    out = {}
    for name in ("rint", "round", "trunc", "nearbyint"):
        y, s = np.zeros_like(x), np.zeros(1, np.float32)
        unary_kernel[(1,)](x, y, s, x.size, F=getattr(libdevice, name), BLOCK=8)
        out[name] = y.tolist()
    assert out["rint"] == out["nearbyint"] == [0.0, 2.0, 2.0, -0.0, -2.0]
    assert out["round"] == [1.0, 2.0, 3.0, -1.0, -3.0]
    assert out["trunc"] == [0.0, 1.0, 2.0, -0.0, -2.0]


def test_rounding_an_integer_is_the_identity():
    x = np.array([-3, 0, 7, 2**30], np.int32)
    y, s = np.zeros_like(x), np.zeros(1, np.int32)
    unary_kernel[(1,)](x, y, s, x.size, F=libdevice.round, BLOCK=4)
    np.testing.assert_array_equal(y, x)


def _fmod(a, b):
    try:
        return math.fmod(a, b)  # C's fmod: exact, with the sign of a
    except ValueError:  # fmod(x, 0) and fmod(inf, y) are NaN
        return math.nan


def _fdim(a, b):
    return math.nan if math.isnan(a) or math.isnan(b) else (a - b if a > b else 0.0)


BINARY = {
    "fdim": np.vectorize(_fdim, otypes=[np.float64]),
    "atan2": np.vectorize(math.atan2, otypes=[np.float64]),
    "hypot": np.vectorize(math.hypot, otypes=[np.float64]),
    "copysign": np.vectorize(math.copysign, otypes=[np.float64]),
    "fmod": np.vectorize(lambda a, b: _fmod(a, b), otypes=[np.float64]),
}


def _binary_inputs(dtype):
    a = np.array([1.0, -1.0, 0.0, -0.0, 3.7, -3.7, 7.5, -7.5, 1e3, np.inf, np.nan, 2.0, 5.0, -0.0], dtype)
    b = np.array([1.0, 1.0, -1.0, 1.0, 2.0, 2.0, -2.0, -2.0, 3e-2, 1.0, 1.0, np.inf, 0.0, -1.0], dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_libdevice_functions_match_c(name, dtype):
    a, b = _binary_inputs(dtype)
    o = np.zeros_like(a)
    with np.errstate(all="ignore"):
        binary_kernel[(1,)](a, b, o, a.size, F=getattr(libdevice, name), BLOCK=16)
        want = BINARY[name](a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    if name in ("fmod", "copysign", "fdim"):  # exact in C (fdim of these operands too)
        np.testing.assert_array_equal(o, want)
        np.testing.assert_array_equal(np.signbit(o[~np.isnan(o)]), np.signbit(want[~np.isnan(want)]))
    else:
        tol = dict(rtol=2e-6) if dtype == np.float32 else dict(rtol=1e-3)
        np.testing.assert_allclose(o, want, equal_nan=True, **tol)


def test_nextafter_steps_one_ulp():
    a = np.array([1.0, 1.0, 0.0, -2.0], np.float32)
    b = np.array([2.0, 0.0, 1.0, -3.0], np.float32)
    o = np.zeros_like(a)
    binary_kernel[(1,)](a, b, o, a.size, F=libdevice.nextafter, BLOCK=4)
    bits = o.view(np.int32).astype(np.int64) - a.view(np.int32).astype(np.int64)
    assert bits.tolist() == [1, -1, 1, 1]  # 0.0 -> the smallest subnormal; -2.0 away from 0 is one more in magnitude


def test_libdevice_float_functions_refuse_integers():
    x, y = np.arange(4, dtype=np.int32), np.zeros(4, np.int32)
    with pytest.raises(triton.CompilationError, match="floating-point"):
        binary_kernel[(1,)](x, x, y, 4, F=libdevice.atan2, BLOCK=4)
    with pytest.raises(triton.CompilationError, match="floating-point"):
        unary_kernel[(1,)](x, y, np.zeros(1, np.int32), 4, F=libdevice.isnan, BLOCK=4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_classification_functions(dtype):
    x = np.array([1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-30, -5.0], dtype)
    expected = {"isnan": np.isnan(x), "isinf": np.isinf(x), "isfinited": np.isfinite(x), "finitef": np.isfinite(x),
                "signbit": np.signbit(x)}
    for name, want in expected.items():
        y, s = np.zeros(x.size, np.int32), np.zeros(1, np.int32)
        unary_kernel[(1,)](x, y, s, x.size, F=getattr(libdevice, name), BLOCK=16)
        np.testing.assert_array_equal(y, want.astype(np.int32), err_msg=name)


def test_existing_math_under_libdevice_names():
    x = np.array([0.25, 1.0, 2.0, 9.0, -4.0], np.float32)
    for name, ref in (("fabs", np.abs), ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("log1p", np.log1p),
                      ("floor", np.floor), ("ceil", np.ceil), ("rsqrt", lambda v: 1 / np.sqrt(v))):
        y, s = np.zeros_like(x), np.zeros(1, np.float32)
        with np.errstate(all="ignore"):
            unary_kernel[(1,)](x, y, s, x.size, F=getattr(libdevice, name), BLOCK=8)
            np.testing.assert_allclose(y, ref(x.astype(np.float64)).astype(np.float32), rtol=2e-6, equal_nan=True)
    a, b = np.array([2.0, 9.0, np.nan], np.float32), np.array([0.5, np.nan, 3.0], np.float32)
    for name, ref in (("pow", np.power), ("fmax", np.fmax), ("fmin", np.fmin)):
        o = np.zeros_like(a)
        binary_kernel[(1,)](a, b, o, a.size, F=getattr(libdevice, name), BLOCK=4)
        np.testing.assert_allclose(o, ref(a, b), rtol=1e-6, equal_nan=True)


# ---- host utilities ----------------------------------------------------------------------------------------

def test_do_bench_is_simulated_time_and_deterministic():
    n = 1 << 16
    x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    fn = lambda: add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)  # noqa: E731
    ms = triton.testing.do_bench(fn)
    assert ms == triton.testing.do_bench(fn) and ms > 0
    assert ms == pytest.approx(fn().time_us / 1e3)
    assert triton.testing.do_bench(fn, quantiles=[0.5, 0.2, 0.8]) == [ms, ms, ms]
    two = triton.testing.do_bench(lambda: (fn(), fn()))
    assert two == pytest.approx(2 * ms)
    import dvmlang
    with pytest.warns(dvmlang.DvmWarning, match="no simulated time"):
        assert math.isnan(triton.testing.do_bench(lambda: x + y))


def test_perf_report_runs_over_the_x_values(capsys):
    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["size"], x_vals=[1024, 1 << 17], line_arg="provider", line_vals=["triton"], line_names=["Triton"],
        plot_name="vector-add", args={}, ylabel="ms"))
    def benchmark(size, provider):
        x, y, out = np.ones(size, np.float32), np.ones(size, np.float32), np.zeros(size, np.float32)
        ms = triton.testing.do_bench(lambda: add_kernel[(triton.cdiv(size, 1024),)](x, y, out, size, BLOCK_SIZE=1024))
        return ms, ms, ms

    table = benchmark.run(print_data=True, show_plots=False)
    assert [r[0] for r in table.rows] == [1024, 1 << 17] and table.rows[0][1] < table.rows[1][1]
    assert "vector-add" in capsys.readouterr().out


def test_device_properties_come_from_the_profile():
    import dvmlang
    p = dvmlang.npu.device.default_device().profile
    drv = triton.runtime.driver.active
    props = drv.utils.get_device_properties(drv.get_current_device())
    assert props["multiprocessor_count"] == p.vector_cores and props["max_shared_mem"] == p.ub_bytes
    assert {"max_num_regs", "warpSize", "sm_clock_rate", "mem_clock_rate", "mem_bus_width"} <= set(props)
    assert 2 * props["mem_clock_rate"] * 1e3 * props["mem_bus_width"] / 8 == pytest.approx(p.hbm_bytes_per_s)
    assert drv.get_current_device() == 0 and str(drv.get_active_torch_device()) == "cpu"
    assert drv.get_current_target().backend == "cpu"  # the torch device of its tensors (torch_npu absent)
    with pytest.raises(triton.TritonError, match="only device"):
        drv.utils.get_device_properties(1)


def test_reinterpret_a_numpy_array():
    x = np.array([1.0, -2.0], np.float32)
    w = triton.reinterpret(x, tl.uint32)
    assert isinstance(w, triton.TensorWrapper) and w.base is x and w.dtype is tl.uint32
    np.testing.assert_array_equal(w.view(), x.view(np.uint32))
    with pytest.raises(triton.TritonError, match="bytes"):
        triton.reinterpret(x, tl.int16)


def test_assert_close():
    triton.testing.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.001]))
    with pytest.raises(AssertionError):
        triton.testing.assert_close(np.array([1.0]), np.array([1.5]))


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) >> 1, mask=m)


def test_a_reinterpreted_array_launches_as_its_new_dtype():
    x = np.array([-2, -1, 4], np.int32)  # as uint32: 0xfffffffe, 0xffffffff, 4; a logical shift
    y = np.zeros(3, np.int32)
    copy_kernel[(1,)](triton.reinterpret(x, tl.uint32), triton.reinterpret(y, tl.uint32), 3, BLOCK=4)
    np.testing.assert_array_equal(y.view(np.uint32), x.view(np.uint32) >> 1)


# ---- torch tensors (the runtime takes them; nothing in dvmlang.triton imports torch) ------------------------

def test_tutorial_01_on_torch_tensors():
    torch = pytest.importorskip("torch")
    DEVICE = triton.runtime.driver.active.get_active_torch_device()
    assert DEVICE == torch.device("cpu")  # tutorial 01 asserts x.device == DEVICE
    torch.manual_seed(0)
    size = 98432
    x = torch.rand(size, device=DEVICE)
    y = torch.rand(size, device=DEVICE)
    output = torch.empty_like(x)
    n_elements = output.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )  # noqa: E731
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    assert torch.equal(output, x + y)
    triton.testing.assert_close(output, x + y, atol=0, rtol=0)


def test_reinterpret_a_torch_tensor():
    torch = pytest.importorskip("torch")
    x = torch.tensor([-2, -1, 4], dtype=torch.int32)
    y = torch.zeros(3, dtype=torch.int32)
    wx, wy = triton.reinterpret(x, tl.uint32), triton.reinterpret(y, tl.uint32)
    assert wx.base is x and wx.dtype is tl.uint32
    copy_kernel[(1,)](wx, wy, 3, BLOCK=4)
    np.testing.assert_array_equal(y.numpy().view(np.uint32), x.numpy().view(np.uint32) >> 1)


def test_dtype_class_knobs_and_tools_import_as_in_triton():
    assert isinstance(tl.float32, tl.dtype) and not isinstance("float32", tl.dtype)
    assert [tl.dtype(n) for n in tl.dtype.SINT_TYPES] == [tl.int8, tl.int16, tl.int32, tl.int64]
    assert tl.dtype("fp16") is tl.float16 and tl.dtype("bf16") is tl.bfloat16
    assert tl.float8e4b15 != tl.float8e4nv and "not supported" in repr(tl.float8e4b8)
    assert getattr(tl.float8e5b16, "some_attr", None) is None  # an AttributeError, for getattr with a default
    with pytest.raises(triton.TritonError, match="not supported"):
        tl.str_to_ty("fp8e4b15")
    with pytest.raises(triton.TritonError, match="not supported"):
        tl.float8e4b15.is_fp8()
    from dvmlang.triton import knobs
    assert knobs.compilation.listener is None and isinstance(knobs.runtime, knobs.base_knobs)
    with knobs.compilation.scope():
        knobs.compilation.listener = print
    assert knobs.compilation.listener is None
    from dvmlang.triton.tools.tensor_descriptor import TensorDescriptor
    assert TensorDescriptor.from_tensor(np.zeros((4, 4), np.float32), [2, 2]).strides == [4, 1]  # a launch argument
    with pytest.raises(triton.TritonError, match="power of 2"):
        TensorDescriptor.from_tensor(np.zeros((4, 4), np.float32), [3, 2])


def test_amd_backend_options_in_a_config_are_not_constexprs():
    c = triton.Config({"BLOCK_SIZE": 64, "matrix_instr_nonkdim": 16, "waves_per_eu": 2}, num_warps=4, num_stages=2)
    assert c.kwargs == {"BLOCK_SIZE": 64} and c.backend_options == {"matrix_instr_nonkdim": 16, "waves_per_eu": 2}
    assert "waves_per_eu: 2" in repr(c)
    k = triton.autotune([c, triton.Config({"BLOCK_SIZE": 256, "kpack": 2})], key=["n_elements"])(add_kernel)
    n = 1000
    x, y, out = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    k[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    np.testing.assert_array_equal(out, x + 1)
    with pytest.raises(triton.TritonError, match="ir_override"):
        triton.Config({}, ir_override="x.ttgir")


def test_a_wrapper_the_array_interface_cannot_describe_launches_by_its_own_view():
    """A launch reads a wrapper through ``__dvm_numpy__`` (any dtype); the array interface, which cannot name fp8,
    refuses rather than hand other libraries raw bytes as numbers."""
    x = np.array([0x38, 0x40, 0xB8, 0x00], np.uint8)  # e4m3fn bytes of 1.0, 2.0, -1.0, 0.0
    y = np.zeros(4, np.float32)
    add_kernel[(1,)](triton.reinterpret(x, tl.float8e4nv), np.ones(4, np.float32), y, 4, BLOCK_SIZE=4)
    np.testing.assert_array_equal(y, [2.0, 3.0, 0.0, 1.0])
    with pytest.raises(triton.TritonError, match="has no __array_interface__"):
        triton.reinterpret(x, tl.float8e4nv).__array_interface__
