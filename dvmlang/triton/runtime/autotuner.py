"""``triton.runtime.autotuner``: ``Autotuner`` and ``Heuristics`` with Triton's constructors and entry points, over
dvmlang's (``dvmlang.autotune``: configs timed in simulated cycles).

Packages subclass these (FlagGems' ``LibTuner``, fla's cached autotuner) and call them as Triton does:
``Autotuner(fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook, post_hook, prune_configs_by,
warmup, rep, use_cuda_graph, do_bench, cache_results)``, ``Heuristics(fn, arg_names, values)``, and
``run(*args, grid=..., warmup=False, **kwargs)``, which returns the ``CompiledKernel`` of the launch. The
attributes Triton's subclasses read are here: ``fn``, ``base_fn``, ``arg_names``, ``configs``, ``keys``,
``cache``, ``nargs`` (during ``run``), ``best_config``, ``configs_timings``, ``bench_time``, ``pre_hook`` /
``post_hook`` (callables, Triton's defaults when none is given), ``prune_configs(kwargs)``,
``_bench(*args, config=..., **meta)`` (a list of three simulated times in ms).
dvmlang's spelling, ``run(grid, *args, ...)``, works too.
"""

from __future__ import annotations

import time

from ...autotune import Autotuner as _Autotuner
from ...autotune import Heuristics as _Heuristics
from ...errors import ConstexprError, LaunchError, ResourceError
from ..config import Config
from ..errors import OutOfResources
from .errors import AutotunerError, PTXASError
from .jit import KernelInterface


def _base_fn(fn):
    """The Python function under any stack of wrappers (Triton's ``base_fn``)."""
    while hasattr(fn, "fn") and not callable(getattr(fn, "__code__", None)):
        fn = fn.fn
    return fn


def _triton_call(kwargs: dict):
    """(grid, warmup, kwargs) of a Triton-style ``run(*args, grid=..., warmup=..., **kwargs)``."""
    kwargs = dict(kwargs)
    grid = kwargs.pop("grid")
    warmup = kwargs.pop("warmup", False)
    return grid, warmup, kwargs


class Autotuner(_Autotuner, KernelInterface):
    """Triton's ``Autotuner`` (module docstring). Tuning is dvmlang's: every config is timed in simulated
    cycles, writeable arguments are saved and restored around each, and a config that does not fit is
    pruned."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 cache_results=False):
        configs = list(configs or []) or [Config({}, num_warps=4, num_stages=3, num_ctas=1)]
        super().__init__(fn, configs, key, prune_configs_by, reset_to_zero, restore_value, pre_hook, post_hook,
                         warmup, rep, use_cuda_graph, do_bench, cache_results)
        given = list(arg_names)
        if given != self.arg_names[:len(given)]:
            raise LaunchError(f"Autotuner of `{self.__name__}`: arg_names {given} are not the kernel's parameters "
                              f"{self.arg_names}")
        self.arg_names = given
        self.base_fn = _base_fn(fn)
        self.configs_top_k = self.top_k
        self.warmup_ms, self.rep = warmup, rep
        self.use_cuda_graph = use_cuda_graph
        self.nargs = None
        self.bench_time = 0.0
        self.restore_copies: dict = {}
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        # Triton's hooks are always callables; dvmlang saves, restores and zeroes arguments itself
        self.pre_hook = pre_hook or (lambda kwargs, reset_only=False: 0)
        self.post_hook = post_hook or (lambda kwargs, exception: 0)

    def prune_configs(self, kwargs: dict) -> list:
        named = {**(self.nargs or {}), **kwargs}
        return super().prune_configs(named)

    def _bench(self, *args, config=None, **meta):
        """Triton's timing of one config: ``[t, t, t]`` in simulated ms (``inf`` when it does not fit or fails a
        compile-time assertion). Subclasses call this from their own ``run``."""
        if config is None:  # dvmlang's own call: (grid, args, kwargs, config, device)
            return super()._bench(*args, **meta)
        grid = meta.pop("grid")
        meta.pop("warmup", None)
        clash = meta.keys() & config.kwargs.keys()
        if clash:
            raise LaunchError(f"Conflicting meta-parameters: {', '.join(sorted(clash))}. Make sure that you don't "
                              "re-define auto-tuned symbols.")
        from ...npu.device import default_device
        try:
            cycles = _Autotuner._bench(self, grid, args, meta, config, default_device())
        except (OutOfResources, ResourceError, ConstexprError, PTXASError):
            cycles = float("inf")
        ms = cycles / default_device().profile.clock_hz * 1e3
        return [ms, ms, ms]

    def run(self, *args, **kwargs):
        if "grid" not in kwargs:  # dvmlang's spelling: run(grid, *args)
            return super().run(*args, **kwargs)
        grid, warmup, kwargs = _triton_call(kwargs)
        from ...npu.device import default_device
        self.nargs = dict(zip(self.arg_names, args))
        t0 = time.perf_counter()
        tunings = self.tunings
        try:
            config = self.select(grid, args, kwargs, default_device())
            if self.tunings != tunings:
                self.bench_time = time.perf_counter() - t0
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    def warmup(self, *args, grid, **kwargs):
        """Triton's ``warmup``: each config (after pruning) encoded without running: a list of
        ``CompiledKernel``."""
        self.nargs = dict(zip(self.arg_names, args))
        try:
            return [self.fn.warmup(*args, grid=grid, **kwargs, **c.all_kwargs()) for c in self.prune_configs(kwargs)]
        finally:
            self.nargs = None

    def __getitem__(self, grid):
        return KernelInterface.__getitem__(self, grid)


class Heuristics(_Heuristics, KernelInterface):
    """Triton's ``Heuristics(fn, arg_names, values)``: each value is computed from the arguments at every launch;
    a value may be a constexpr or a launch option (``num_warps``, ``num_stages``, ...)."""

    def __init__(self, fn, arg_names, values):
        super().__init__(fn, values)
        self.arg_names = list(arg_names)

    def run(self, *args, **kwargs):
        if "grid" not in kwargs:  # dvmlang's spelling: run(grid, *args)
            return super().run(*args, **kwargs)
        for name, rule in self.values.items():
            kwargs[name] = rule({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, **kwargs)

    def __getitem__(self, grid):
        return KernelInterface.__getitem__(self, grid)


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False):
    """``@triton.autotune(configs, key, ...)``: an ``Autotuner`` over the decorated kernel (Triton's signature)."""
    def decorator(fn):
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)
    return decorator


def heuristics(values):
    """``@triton.heuristics({"NAME": lambda args: ...})``: a ``Heuristics`` over the decorated kernel."""
    return lambda fn: Heuristics(fn, fn.arg_names, values)


__all__ = ["Autotuner", "AutotunerError", "Config", "Heuristics", "OutOfResources", "PTXASError", "autotune",
           "heuristics"]
