"""``triton.testing`` on the simulated device: ``do_bench`` reports simulated time, so it is deterministic.

``do_bench(fn)`` runs ``fn`` once and returns the simulated time of the kernel launches it made, in
milliseconds (Triton's unit): the same value on every call, so ``warmup``, ``rep`` and the cache flush have
nothing to average. Inside a trace session its launches are recorded there like any other. A function that launches no kernel (a torch CPU operation) has no simulated time: ``nan``,
with a ``DvmWarning``. ``perf_report``/``Benchmark`` run the benchmarked function over the x values and print
(and return) the table; plotting is done only when matplotlib is installed and ``show_plots`` or
``save_path`` asks for it.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from ..errors import DvmError, warn_user

_MODES = ("min", "max", "mean", "median", "all")


def _simulated_ms(fn) -> float:
    """The simulated time of the launches ``fn()`` makes. Inside a trace session (``dvmlang.trace()``, ``dvmlang
    trace``, the gallery) they are recorded there, as every launch is; otherwise in a session of totals only."""
    from ..npu.device import default_device
    from ..trace.record import Session, active_session
    default_device().l2.flush()  # Triton's do_bench clears the L2 cache before it times: every run starts cold
    outer = active_session()
    first = len(outer.launches) if outer is not None else 0
    with Session(summary_only=True) if outer is None else contextlib.nullcontext() as s:
        fn()
    launches = (s if outer is None else outer).launches[first:]
    if not launches:
        warn_user("do_bench: the function launched no dvmlang kernel, so it has no simulated time (host code such "
                  "as a torch CPU operation is not modelled); the result is nan")
        return float("nan")
    return sum(r.time_us for r in launches) / 1e3


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """The simulated time of the launches ``fn()`` makes, in ms. ``quantiles`` gives that value once per
    quantile (every run takes the same time); ``return_mode="all"`` gives a one-element list."""
    if return_mode not in _MODES:
        raise DvmError(f"do_bench return_mode must be one of {', '.join(_MODES)}, got {return_mode!r}")
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None
    ms = _simulated_ms(fn)
    if quantiles is not None:
        return [ms for _ in quantiles]
    return [ms] if return_mode == "all" else ms


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """``do_bench``: there are no CUDA graphs, and simulated time has no launch jitter to remove."""
    return do_bench(fn, grad_to_none=grad_to_none, quantiles=quantiles, return_mode=return_mode)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Triton's helper: numpy's ``assert_allclose`` on the values as float arrays (tensors through ``.cpu()``)."""
    def arr(v):
        if hasattr(v, "detach"):
            v = v.detach().cpu()
            if str(getattr(v, "dtype", "")) == "torch.bfloat16":
                v = v.float()
            v = v.numpy()
        return np.asarray(v)
    x, y = arr(x), arr(y)
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    if x.dtype == np.bool_ or y.dtype == np.bool_:
        np.testing.assert_array_equal(x, y, err_msg=err_msg)
        return
    np.testing.assert_allclose(x, y, atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)


class Benchmark:
    """Triton's benchmark description: ``x_names`` over ``x_vals``, one line per ``line_vals`` entry."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args, xlabel="", ylabel="",
                 x_log=False, y_log=False, styles=None):
        self.x_names = list(x_names)
        self.x_vals = list(x_vals)
        self.line_arg = line_arg
        self.line_vals = list(line_vals)
        self.line_names = list(line_names)
        self.plot_name = plot_name
        self.args = dict(args)
        self.xlabel, self.ylabel = xlabel, ylabel
        self.x_log, self.y_log = x_log, y_log
        self.styles = styles


class Mark:
    """What ``@perf_report`` returns: ``.run(print_data=True)`` benchmarks and returns the tables."""

    def __init__(self, fn, benchmarks):
        self.fn = fn
        self.benchmarks = benchmarks

    def _run(self, bench: Benchmark, save_path, show_plots, print_data, **kwargs):
        rows = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            xargs = dict(zip(bench.x_names, xs))
            row = list(xs)
            for line in bench.line_vals:
                ret = self.fn(**xargs, **{bench.line_arg: line}, **bench.args, **kwargs)
                row.append(ret[0] if isinstance(ret, (list, tuple)) else ret)  # (mid, min, max): the middle
            rows.append(row)
        columns = [*bench.x_names, *bench.line_names]
        table = _Table(bench.plot_name, columns, rows)
        if print_data:
            print(f"{bench.plot_name}:")
            print(table)
        if save_path:
            os.makedirs(save_path, exist_ok=True)
            with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w") as f:
                f.write(table.csv())
        if show_plots or save_path:
            table.plot(bench, save_path, show_plots)
        return table

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        tables = [self._run(b, save_path, show_plots, print_data, **kwargs) for b in self.benchmarks]
        if return_df:
            tables = [t.to_pandas() for t in tables]
        return tables[0] if len(tables) == 1 else tables


class _Table:
    """A benchmark's results: ``columns`` and ``rows``; ``to_pandas()`` when pandas is installed."""

    def __init__(self, name, columns, rows):
        self.name, self.columns, self.rows = name, columns, rows

    def __str__(self) -> str:
        cells = [[str(c) for c in self.columns]] + [[_fmt(v) for v in r] for r in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)

    def csv(self) -> str:
        return "\n".join(",".join(map(str, r)) for r in [self.columns, *self.rows]) + "\n"

    def to_pandas(self):
        import pandas
        return pandas.DataFrame(self.rows, columns=self.columns)

    def plot(self, bench, save_path, show_plots) -> None:
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            return  # plotting is optional: the table was printed or saved
        fig, ax = plt.subplots()
        n = len(bench.x_names)
        xs = [r[0] for r in self.rows]
        for i, name in enumerate(bench.line_names):
            ax.plot(xs, [r[n + i] for r in self.rows], label=name)
        ax.set_xlabel(bench.xlabel or bench.x_names[0])
        ax.set_ylabel(bench.ylabel)
        ax.set_xscale("log" if bench.x_log else "linear")
        ax.set_yscale("log" if bench.y_log else "linear")
        ax.legend()
        if save_path:
            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        if show_plots:
            plt.show()
        plt.close(fig)


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


# ---- perf-model helpers (Triton's matmul perf models and packages' roofline estimates call these) ----------------

def _profile(device=None):
    from .devicefigures import profile
    return profile(device)


def _dtype(dtype, what: str):
    from .. import dtypes as dt
    d = dt.lookup(dtype)
    if d is None:
        raise DvmError(f"{what}: {dtype!r} is not a dtype")
    return d


def get_dram_gbps(device=None) -> float:
    """The simulated device's HBM bandwidth in GB/s (``Profile.hbm_bytes_per_s``; Triton computes it from the
    memory clock and bus width, which ``get_device_properties`` reports so that the two agree)."""
    return _profile(device).hbm_bytes_per_s / 1e9


def get_max_tensorcore_tflops(dtype, clock_rate=None, device=None) -> float:
    """The cube units' peak in TFLOP/s for ``dtype`` operands: every cube core (``Profile.cube_cores``) does
    ``cube_macs_per_cycle`` multiply-accumulates (2 flops each) per cycle on 16- and 8-bit operands, and
    ``cube_fp32_factor`` times fewer on 32-bit ones, as the simulator charges them. ``clock_rate`` is in kHz as
    in Triton (``get_device_properties()["sm_clock_rate"]``); by default the profile's clock."""
    p = _profile(device)
    d = _dtype(dtype, "get_max_tensorcore_tflops")
    if not (d.is_float or d.is_int) or d.itemsize > 4:
        raise DvmError(f"get_max_tensorcore_tflops: the cube unit does not multiply {d.name}")
    khz = p.clock_hz / 1e3 if clock_rate is None else clock_rate
    macs = p.cube_macs_per_cycle / (p.cube_fp32_factor if d.itemsize >= 4 else 1)
    return p.cube_cores * khz * 2 * macs * 1e-9


def get_max_simd_tflops(dtype, clock_rate=None, device=None) -> float:
    """The vector units' peak in TFLOP/s for ``dtype``: every vector core (``Profile.vector_cores``) does one
    operation per lane per cycle on ``vector_bytes_per_cycle`` bytes (64 fp32 or 128 fp16 lanes), as the
    simulator charges an elementwise instruction. ``clock_rate`` in kHz, by default the profile's clock."""
    p = _profile(device)
    d = _dtype(dtype, "get_max_simd_tflops")
    khz = p.clock_hz / 1e3 if clock_rate is None else clock_rate
    return p.vector_cores * khz * (p.vector_bytes_per_cycle // d.itemsize) * 1e-9


def nvsmi(attrs) -> list:
    """``nvidia-smi --query-gpu=...`` answered by the simulated device for the attributes that have a meaning
    here: ``clocks.sm``/``clocks.max.sm``/``clocks.current.sm`` (MHz), ``clocks.mem``/``clocks.max.mem``/
    ``clocks.memory``/``clocks.max.memory``/``clocks.current.memory`` (MHz: ``get_device_properties``' memory
    clock), ``memory.total`` and ``memory.free`` (MiB of HBM), ``memory.used`` (0), ``count`` (1). Any other
    attribute is a ``DvmError``."""
    from .devicefigures import mem_clock_khz
    p = _profile()
    sm, mem, hbm = int(p.clock_hz / 1e6), int(mem_clock_khz(p) / 1e3), int(p.hbm_bytes // 2**20)
    table = {"clocks.sm": sm, "clocks.max.sm": sm, "clocks.current.sm": sm, "clocks.mem": mem, "clocks.max.mem": mem,
             "clocks.memory": mem, "clocks.max.memory": mem, "clocks.current.memory": mem, "memory.total": hbm,
             "memory.free": hbm, "memory.used": 0, "count": 1}
    attrs = [attrs] if isinstance(attrs, str) else list(attrs)
    unknown = [a for a in attrs if a not in table]
    if unknown:
        raise DvmError(f"nvsmi: {', '.join(unknown)} has no meaning on the simulated NPU; it answers "
                       f"{', '.join(table)}")
    return [table[a] for a in attrs]


@contextlib.contextmanager
def set_gpu_clock(ref_sm_clock=1350, ref_mem_clock=1215):
    """Triton locks the GPU's clocks for stable timings and yields its peak (fp16 TFLOP/s, GB/s). Simulated time
    is stable already: the clocks are the profile's, unchanged, and so are the numbers yielded."""
    yield get_max_tensorcore_tflops("float16"), get_dram_gbps()


def perf_report(benchmarks):
    """Decorator: ``@triton.testing.perf_report(Benchmark(...))`` (or a list of them)."""
    benchmarks = benchmarks if isinstance(benchmarks, (list, tuple)) else [benchmarks]
    return lambda fn: Mark(fn, benchmarks)


__all__ = ["do_bench", "do_bench_cudagraph", "assert_close", "Benchmark", "perf_report", "Mark", "get_dram_gbps",
           "get_max_tensorcore_tflops", "get_max_simd_tflops", "nvsmi", "set_gpu_clock"]
