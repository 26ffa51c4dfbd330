"""Autotuning and heuristics for kernels: ``dvmlang.autotune``, ``dvmlang.heuristics``, ``dvmlang.Config``.

The same decorators as Triton's, with one difference that matters: candidates are timed in *simulated
cycles*, so the same inputs on the same device profile always pick the same config (no GPU autotuner can
promise that), and a config whose tiles do not fit on-chip memory is pruned when it is built or encoded,
before anything runs.

    @dvmlang.autotune(configs=[dvmlang.Config({"BLOCK": 256}), dvmlang.Config({"BLOCK": 1024})], key=["n"])
    @dvmlang.kernel
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr): ...

    add[lambda meta: (dl.cdiv(n, meta["BLOCK"]),)](x, y, out, n)

Tuning never changes what the caller sees: every writeable array argument (numpy, torch, ...) is saved before
each candidate runs and put back afterwards (``reset_to_zero`` arguments are zeroed for each candidate, as in Triton),
then the chosen config runs once on the arguments as they were given. The choice is cached per key in
memory and on disk (``$DVMLANG_CACHE_DIR``, default ``~/.cache/dvmlang``), keyed by the kernel's source,
the device profile, the configs and the key values. When the first candidate shows that the rest would take
a while (``PARALLEL_TUNING_SECONDS``), they run in forked processes, one per core; the choice is the same.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import select
import time
from pathlib import Path

import numpy as np

from .args import LAUNCH_OPTIONS as _LAUNCH_OPTION_NAMES
from .errors import ConstexprError, DvmError, LaunchError, ResourceError, user_frames
from .runtime import Kernel

# Config options that shape a launch on a GPU. Each is accepted; docs/triton.md says what it means here.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class Config:
    """One candidate: constexpr values (``kwargs``) and launch options, as Triton's ``triton.Config``.

    ``num_warps``, ``num_ctas`` and ``maxnreg`` have no effect on the simulated NPU (a program runs on one
    core, and its tiles are whole-tile instructions, not threads); ``num_stages`` is recorded but buffering
    depth is chosen by the compiler. ``pre_hook(nargs)`` runs before each launch with this config."""

    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook=None):
        if not isinstance(kwargs, dict):
            raise LaunchError(f"Config takes a dict of constexpr values, got {type(kwargs).__name__}")
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self) -> dict:
        """The constexpr values and the launch options that are set, as one dict (Triton's method)."""
        opts = {k: getattr(self, k) for k in LAUNCH_OPTIONS if getattr(self, k) is not None}
        return {**self.kwargs, **opts}

    def __repr__(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.all_kwargs().items())


def _innermost(fn) -> Kernel:
    """The ``Kernel`` under any stack of autotune/heuristics wrappers."""
    while not isinstance(fn, Kernel):
        fn = fn.fn
    return fn


class _Wrapper:
    """What autotune and heuristics wrappers share: the launch syntax and the wrapped kernel's names."""

    def __init__(self, fn):
        self.fn = fn
        self.kernel = _innermost(fn)
        self.arg_names = list(self.kernel.source.params)
        self.__name__ = self.kernel.__name__
        self.__doc__ = self.kernel.__doc__

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        raise DvmError(f"launch `{self.__name__}` with a grid: {self.__name__}[grid](...)")

    def _named(self, args, kwargs) -> dict:
        return {**dict(zip(self.arg_names, args)), **kwargs}


class Heuristics(_Wrapper):
    """``@dvmlang.heuristics({"BLOCK": lambda args: ...})``: constexpr values computed from the other
    arguments at each launch (``args`` maps every parameter name to its value)."""

    def __init__(self, fn, values: dict):
        super().__init__(fn)
        if not isinstance(values, dict) or not all(callable(v) for v in values.values()):
            raise LaunchError("heuristics takes a dict of parameter name -> function of the arguments dict")
        # a heuristic may also set a launch option (num_warps, num_stages, ...), as in Triton
        unknown = [k for k in values if k not in self.arg_names and k not in _LAUNCH_OPTION_NAMES]
        if unknown:
            raise LaunchError(f"heuristics for `{self.__name__}` name {', '.join(map(repr, unknown))}, which "
                              f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'}; its "
                              f"parameters are {', '.join(self.arg_names)}")
        self.values = dict(values)

    @user_frames
    def run(self, grid, *args, **kwargs):
        for name, rule in self.values.items():
            kwargs[name] = rule(self._named(args, kwargs))
        return self.fn.run(grid, *args, **kwargs)


def heuristics(values: dict):
    """Decorator: ``@dvmlang.heuristics(values)`` above ``@dvmlang.kernel`` (or ``@dvmlang.autotune``)."""
    return lambda fn: Heuristics(fn, values)


def _cache_dir() -> Path:
    return Path(os.environ.get("DVMLANG_CACHE_DIR") or Path.home() / ".cache" / "dvmlang") / "autotune"


def _takes_var_keywords(fn) -> bool:
    import inspect
    try:
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False


def _same_program_key(c: Config):
    """What names the program a config runs: its constexprs and its pre_hook (which sees only the arguments and
    the constexprs), or None when a value does not hash."""
    try:
        key = (tuple(sorted(c.kwargs.items())), c.pre_hook)
        hash(key)
    except TypeError:
        return None
    return key


def _writeable_views(values) -> list:
    """Zero-copy numpy views of the writeable arrays among ``values`` (numpy arrays, torch tensors, ...)."""
    from .args import is_foreign_array, to_numpy
    views, seen = [], set()
    for v in values:
        if hasattr(v.__class__, "__dvm_descriptor__"):
            v = v.base  # a host TensorDescriptor: the kernel writes through it into its base
        if is_foreign_array(v):
            try:
                v = to_numpy("autotune", "argument", v)
            except DvmError:
                continue  # not an array dvmlang can launch with: the launch itself will say so
        if isinstance(v, np.ndarray) and v.flags.writeable and id(v) not in seen:
            seen.add(id(v))
            views.append(v)
    return views


def _fork_map(fn, items: list, workers: int) -> list:
    """``[fn(x) for x in items]`` in forked processes, ``workers`` at a time; ``None`` where a child failed
    (the caller runs that item itself). Each child returns one float through a pipe and exits."""
    results: list = [None] * len(items)
    running: dict[int, tuple[int, int]] = {}
    pending = list(enumerate(items))

    def reap(pid):
        i, fd = running.pop(pid)
        with os.fdopen(fd, "rb") as f:
            data = f.read()  # to EOF: the child has written and exited
        os.waitpid(pid, 0)  # only our own children: never another part of the program's
        try:
            results[i] = float(data.decode()) if data else None
        except ValueError:
            results[i] = None

    while pending or running:
        while pending and len(running) < workers:
            i, item = pending.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: time one config, report, and leave without running any cleanup
                os.close(r)
                _one_blas_thread()
                try:
                    msg = repr(float(fn(item))).encode()
                except BaseException:  # noqa: BLE001 - the parent re-runs it and raises the real error
                    msg = b""
                try:
                    os.write(w, msg)
                finally:
                    os._exit(0)
            os.close(w)
            running[pid] = (i, r)
        ready, _, _ = select.select([fd for _, fd in running.values()], [], [])
        reap(next(pid for pid, (_, fd) in running.items() if fd == ready[0]))
    return results


def _one_blas_thread() -> None:
    """In a tuning child: one BLAS thread, so that children on different cores do not each start a thread pool
    that spins on the same cores (numpy's bundled OpenBLAS; nothing happens where it is not found)."""
    import ctypes
    import glob
    for path in glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(1)
                return


# Tune in processes when the configs left would take at least this long one after another: forking a process that
# holds torch and the caches, and two tunings sharing memory bandwidth, cost about 1 s on the 2-core machine this
# was measured on (benchmarks/autotune_parallel.py: 1.00x at 1024^3, 0.74x at 2048^3).
PARALLEL_TUNING_SECONDS = 2.0


def _trial_session():
    from .trace.record import Session
    return Session(max_events=0, summary_only=True)


def _key_part(v):
    """A launch argument as it enters the tuning key: arrays by dtype and shape, scalars by value."""
    if hasattr(v, "dtype") and hasattr(v, "shape"):
        return f"{v.dtype}{list(v.shape)}"
    if isinstance(v, (bool, int, float, str, type(None))) or isinstance(v, np.generic):
        return repr(v.item() if isinstance(v, np.generic) else v)
    return type(v).__name__


class Autotuner(_Wrapper):
    """``@dvmlang.autotune(configs, key, ...)``: runs each config once per new key on the simulated device,
    keeps the one with the fewest cycles (the first on a tie), and launches with it.

    ``configs_timings`` holds the last tuning's cycles per config (``inf`` for a pruned one) and
    ``best_config`` the last choice; ``report()`` renders them as a table."""

    def __init__(self, fn, configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
                 pre_hook=None, post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 cache_results=True, print_autotuning=None):
        super().__init__(fn)
        self.configs = list(configs) or [Config({})]
        if not all(isinstance(c, Config) for c in self.configs):
            raise LaunchError("autotune configs must be dvmlang.Config objects")
        self.keys = list(key)
        for group, names in (("key", self.keys), ("reset_to_zero", reset_to_zero or []),
                             ("restore_value", restore_value or [])):
            bad = [n for n in names if n not in self.arg_names]
            if bad:
                raise LaunchError(f"autotune {group} of `{self.__name__}` names {', '.join(map(repr, bad))}; its "
                                  f"parameters are {', '.join(self.arg_names)}")
        prune = prune_configs_by or {}
        unknown = set(prune) - {"perf_model", "top_k", "early_config_prune"}
        if unknown:
            raise LaunchError(f"prune_configs_by takes perf_model, top_k and early_config_prune, not "
                              f"{', '.join(sorted(unknown))}")
        self.perf_model = prune.get("perf_model")
        self.top_k = prune.get("top_k")
        self.early_config_prune = prune.get("early_config_prune")
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])  # every writeable array is restored: listed or not
        self.user_pre_hook = pre_hook
        self.user_post_hook = post_hook
        self.do_bench = do_bench
        self.cache_results = cache_results
        self.print_autotuning = print_autotuning
        self.cache: dict = {}
        self.configs_timings: dict = {}
        self.best_config: Config | None = None
        self.tunings = 0  # how many keys were tuned by running candidates (not found in a cache)

    # ---- the tuning key and its caches --------------------------------------------------------------------
    def _key(self, named: dict) -> tuple:
        missing = [k for k in self.keys if k not in named]
        if missing:
            raise LaunchError(f"autotune key {', '.join(map(repr, missing))} of `{self.__name__}` was not passed")
        parts = [_key_part(named[k]) for k in self.keys]
        parts += [str(v.dtype) for v in named.values() if hasattr(v, "dtype") and hasattr(v, "shape")]
        return tuple(parts)

    def _disk_file(self, device) -> Path:
        h = hashlib.sha256()
        for part in (ast.dump(self.kernel.source.tree), repr(device.profile), repr([c.all_kwargs() for c in self.configs])):
            h.update(part.encode())
            h.update(b"\0")
        return _cache_dir() / f"{self.__name__}-{h.hexdigest()[:24]}.json"

    def _disk_lookup(self, device, key):
        try:
            data = json.loads(self._disk_file(device).read_text())
            index = data["entries"][json.dumps(key)]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # no file, another format, or not this key: tune
        return self.configs[index] if isinstance(index, int) and 0 <= index < len(self.configs) else None

    def _disk_store(self, device, key, config: Config) -> None:
        path = self._disk_file(device)
        try:
            entries = json.loads(path.read_text()).get("entries", {})
        except (OSError, ValueError, AttributeError):
            entries = {}
        entries[json.dumps(key)] = self.configs.index(config)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": 1, "kernel": self.__name__, "entries": entries}))
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs a re-tune next time

    # ---- pruning and timing --------------------------------------------------------------------------------
    def prune_configs(self, named: dict) -> list:
        configs = self.configs
        if self.early_config_prune is not None:
            # Triton calls early_config_prune(configs, nargs, **kwargs): a function that takes **kwargs gets every
            # argument by name there too (tutorials 06 and 09 read kwargs["N_CTX"], kwargs["FLATTEN"])
            if _takes_var_keywords(self.early_config_prune):
                configs = list(self.early_config_prune(configs, named, **named))
            else:
                configs = list(self.early_config_prune(configs, named))
        if self.perf_model is not None and self.top_k is not None:
            k = self.top_k
            if isinstance(k, float) and k <= 1.0:
                k = max(1, int(len(configs) * k))
            est = {i: self.perf_model(**named, **c.all_kwargs()) for i, c in enumerate(configs)}
            configs = [configs[i] for i in sorted(est, key=lambda i: (est[i], i))[:k]]
        if not configs:
            raise LaunchError(f"autotune of `{self.__name__}`: pruning left no config to run")
        return configs

    def _bench(self, grid, args, kwargs, config: Config, device) -> float:
        """The simulated cycles of one config (``inf`` when it does not fit or its static_asserts fail).
        Every writeable array argument is saved before and restored after, so tuning changes nothing."""
        saved = [(a, a.copy()) for a in _writeable_views((*args, *kwargs.values()))]
        named = self._named(args, {**kwargs, **config.kwargs})
        try:
            for name in self.reset_to_zero:
                for a in _writeable_views((named[name],)):
                    a[...] = 0
            if config.pre_hook is not None:
                config.pre_hook(named)
            if self.user_pre_hook is not None:
                self.user_pre_hook(named)
            call = lambda: self.fn.run(grid, *args, **kwargs, **config.kwargs, device=device)  # noqa: E731
            try:
                # the trial launches go to a session of their own: a trace (or do_bench) around the tuned
                # launch sees that launch, not the tuning (Triton's do_bench tunes in its untimed warmup)
                with _trial_session():
                    device.l2.flush()  # every trial starts with a cold L2, as with Triton's do_bench
                    if self.do_bench is not None:
                        cost = float(self.do_bench(call))
                    else:
                        cost = float(call().cycles)
            except (ResourceError, ConstexprError):
                cost = float("inf")  # pruned before running: it does not fit, or the config fails a static_assert
            except Exception as e:
                if self.user_post_hook is not None:
                    self.user_post_hook(named, exception=e)
                raise
            if self.user_post_hook is not None:
                self.user_post_hook(named, exception=None)
            return cost
        finally:
            for a, copy in saved:
                np.copyto(a, copy)

    def _bench_all(self, grid, args, kwargs, configs: list, device) -> dict:
        """The cycles of each config. The first runs here; when it took long enough that processes pay off, the
        rest run in forked processes, one per core (the simulated cycles are the same wherever a config runs,
        so the choice is too). Hooks and ``do_bench`` are the caller's code and run here, in order."""
        t0 = time.perf_counter()
        out = {configs[0]: self._bench(grid, args, kwargs, configs[0], device)}
        rest = configs[1:]
        workers = min(len(rest), os.cpu_count() or 1)
        serial = (workers < 2 or not hasattr(os, "fork") or self.do_bench is not None
                  or self.user_pre_hook is not None or self.user_post_hook is not None
                  or any(c.pre_hook is not None for c in rest)
                  or (time.perf_counter() - t0) * len(rest) < PARALLEL_TUNING_SECONDS)
        if not serial:
            forked = _fork_map(lambda c: self._bench(grid, args, kwargs, c, device), rest, workers)
            out.update((c, t) for c, t in zip(rest, forked) if t is not None)
        for c in rest:
            if c not in out:  # serial tuning, or a child that failed: run here, where its error is raised
                out[c] = self._bench(grid, args, kwargs, c, device)
        return out

    def _choose(self, grid, args, kwargs, named, key, device) -> Config:
        t0 = time.perf_counter()
        configs = self.prune_configs(named)
        if len(configs) == 1:
            timings = {configs[0]: float("nan")}  # nothing to compare it with: not timed
        else:
            # configs that differ only in launch options (num_warps, num_stages, ...: no effect here) run the same
            # program (with the same pre_hook, if any): timed once
            timings, seen, todo = {}, {}, []
            for c in configs:
                same = _same_program_key(c)
                if same is None or same not in seen:
                    todo.append(c)
                    if same is not None:
                        seen[same] = c
            measured = self._bench_all(grid, args, kwargs, todo, device)
            for c in configs:
                same = _same_program_key(c)
                timings[c] = measured[c] if c in measured else measured[seen[same]]
        best = min(timings, key=timings.get)  # min keeps the first of equal timings: the first listed wins a tie
        if timings[best] == float("inf"):
            raise ResourceError(f"autotune of `{self.__name__}`: no config fits on the device ({len(configs)} tried: "
                                + "; ".join(map(repr, configs)) + ")")
        self.configs_timings = timings
        self.tunings += 1
        if self.print_autotuning or (self.print_autotuning is None and os.environ.get("DVMLANG_PRINT_AUTOTUNING")):
            from rich.console import Console
            Console(stderr=True).print(self.report(title=f"autotuning `{self.__name__}` for key {key} "
                                                         f"({time.perf_counter() - t0:.2f} s)"))
        return best

    @user_frames
    def run(self, grid, *args, device=None, **kwargs):
        from .npu.device import default_device
        device = device or default_device()
        config = self.select(grid, args, kwargs, device)
        return self.fn.run(grid, *args, **kwargs, **config.kwargs, device=device)

    def select(self, grid, args, kwargs, device) -> Config:
        """The config for these arguments (tuned, or from a cache), with its ``pre_hook`` run: what ``run``
        launches with."""
        named = self._named(args, kwargs)
        key = self._key(named)
        config = self.cache.get(key)
        if config is None and self.cache_results:
            config = self._disk_lookup(device, key)
        if config is None:
            config = self._choose(grid, args, kwargs, named, key, device)
            if self.cache_results:
                self._disk_store(device, key, config)
        self.cache[key] = config
        self.best_config = config
        clash = [k for k in config.kwargs if k in kwargs]
        if clash:
            raise LaunchError(f"`{self.__name__}` got {', '.join(map(repr, clash))} both from the call and from an "
                              "autotune config; pass each constexpr one way")
        if config.pre_hook is not None:
            config.pre_hook(self._named(args, {**kwargs, **config.kwargs}))
        return config

    def report(self, title: str | None = None):
        """The last tuning as a ``rich`` table: each config, its simulated cycles, the chosen one marked."""
        from rich.table import Table
        table = Table(title=title or f"autotuning `{self.__name__}`")
        table.add_column("config")
        table.add_column("cycles", justify="right")
        table.add_column("")
        for c, t in self.configs_timings.items():
            shown = "pruned (does not fit)" if t == float("inf") else "not timed (one config)" if t != t else f"{t:,.0f}"
            table.add_row(repr(c), shown, "best" if c is self.best_config else "")
        return table


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=True,
             print_autotuning=None):
    """Decorator: ``@dvmlang.autotune(configs=[...], key=[...])`` above ``@dvmlang.kernel``.

    ``warmup``, ``rep`` and ``use_cuda_graph`` have no effect: simulated time is the same on every run.
    ``do_bench(fn)`` replaces the cycle count with what it returns for a call of ``fn``."""
    return lambda fn: Autotuner(fn, configs, key, prune_configs_by, reset_to_zero, restore_value, pre_hook,
                                post_hook, warmup, rep, use_cuda_graph, do_bench, cache_results, print_autotuning)
