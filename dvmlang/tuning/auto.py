"""``autotune(configs="auto")`` inside ``Autotuner.run``: the space, the cache, the search and the table."""

from __future__ import annotations

import math
import os
import re
import time

from ..errors import ResourceError
from . import search, space, store

TABLE_TOP = 12


def _given(tuner, named: dict) -> set:
    """Parameters the launch fixes: passed by the caller, or computed by a heuristics wrapper below."""
    out = set(named)
    fn = tuner.fn
    while hasattr(fn, "fn") and not hasattr(fn, "source"):
        out |= set(getattr(fn, "values", {}) or {})
        fn = fn.fn
    return out


def _grid_sizes(grid, named: dict):
    try:
        g = grid(dict(named)) if callable(grid) else grid
    except Exception:  # noqa: BLE001 - a grid that needs the knobs' values: no size to add
        return None
    return tuple(g) if isinstance(g, (tuple, list)) else (g,)


def knobs_of(tuner, grid, named: dict, device) -> list:
    if tuner.space is not None:
        knobs = []
        for name, vals in tuner.space.items():
            axis = None
            if name == space.PROGRAMS:
                axes = sorted(space.persistent_axes(tuner.kernel.source.tree))
                axis = axes[0] if axes else 0
            knobs.append(space.Knob(name, "space", space._values(vals), "given by space=", axis))
        return knobs
    return space.discover(tuner.kernel, _given(tuner, named), tuner.hints, device.profile,
                          _grid_sizes(grid, named))


def _config(values: dict, axis):
    from .config import Config
    kw = {k: v for k, v in values.items() if k != space.PROGRAMS}
    c = Config(kw)
    if space.PROGRAMS in values:
        c.programs = {axis if axis is not None else 0: int(values[space.PROGRAMS])}
    return c


def choose(tuner, grid, args, kwargs, named, key, device):
    """The config for ``key``: from the cache, or by a search. Returns a ``Config``."""
    from .executor import SerialExecutor, shared
    from .trial import Trial
    t0 = time.perf_counter()
    knobs = knobs_of(tuner, grid, named, device)
    axis = next((k.axis for k in knobs if k.name == space.PROGRAMS), None)
    space_desc = [[k.name, [repr(v) for v in k.values]] for k in knobs]
    digest = tuner._digest(device, key, space_desc)
    if tuner.cache_results:
        body = store.load(digest)
        if body and isinstance(body.get("config"), dict) and set(body["config"]) == {k.name for k in knobs}:
            values = body["config"]
            ok = all(any(repr(v) == repr(values[k.name]) for v in k.values) for k in knobs)
            if ok:
                tuner.search = None
                return _config(values, axis)
    cands = space.candidates(knobs)
    serial = (tuner.do_bench is not None or tuner.user_pre_hook is not None or tuner.user_post_hook is not None)
    executor = SerialExecutor() if serial else shared(tuner.executor)
    trial = Trial(tuner.fn, grid, args, kwargs, tuner.arg_names, tuner.reset_to_zero, device, axis)
    timeout = tuner.timeout if tuner.timeout is not None else float(os.environ.get("DVMLANG_TUNE_TIMEOUT", 120))
    budget = tuner.budget if tuner.budget is not None else search.BUDGET
    explore = tuner.explore if tuner.explore is not None else search.EXPLORE
    if serial:  # the caller's hooks and do_bench run around each simulated candidate, here, in order
        from .trial import grid_with, split

        def run_one(item, plain=trial):
            if item[0] != "simulate":
                return plain(item)
            kw, programs = split(item[1], axis)
            c = _config(item[1], axis)
            cost = tuner._bench(grid_with(grid, programs), args, kwargs, c, device)
            if not math.isfinite(cost):
                raise ResourceError("does not fit (or fails a static_assert)")
            return cost
        trial = run_one
    res = search.run(cands, trial, executor, digest, budget=budget, explore=explore, timeout=timeout,
                     label=f"autotune {tuner.__name__}")
    res.seconds = time.perf_counter() - t0
    res.knobs = knobs
    tuner.search = res
    tuner.tunings += 1
    if res.best is None:
        errors = sorted({r.error for r in res.rows if r.error})[:4]
        raise ResourceError(f"autotune of `{tuner.__name__}`: no candidate of the {len(cands)} in its search space "
                            f"ran ({'; '.join(errors) or 'none fits'}); restrict the space with hints=")
    best = _config(res.best.config, axis)
    tuner.configs_timings = {_config(r.config, axis): (r.simulated if r.simulated is not None else math.inf)
                             for r in res.rows if r.picked}
    if tuner.cache_results:
        store.save(digest, {"kernel": tuner.__name__, "key": list(key), "config": res.best.config,
                            "cycles": res.best.simulated, "simulated": res.simulated, "candidates": len(cands),
                            "spearman": None if res.spearman != res.spearman else res.spearman})
    if tuner.print_autotuning or (tuner.print_autotuning is None and os.environ.get("DVMLANG_PRINT_AUTOTUNING")):
        from rich.console import Console
        Console(stderr=True).print(table(tuner, None, TABLE_TOP))
    return best


def table(tuner, title=None, top: int = TABLE_TOP):
    """The last search as a ``rich`` table: the simulated candidates best first (``top`` of them), the model's
    estimate and rank for each, and every candidate that failed with its error."""
    from rich.table import Table
    res = tuner.search
    n = len(res.rows)
    t = Table(title=title or f"autotuning `{tuner.__name__}`: {n} candidates, {res.fitting} fit, {res.simulated} "
                             f"simulated ({res.simulated / max(1, n):.0%}) in {res.seconds:.1f} s",
              caption=f"model vs simulator over the simulated: Spearman {res.spearman:.2f}; the model's favourite "
                      f"is simulated #{res.model_pick_rank}, {res.model_pick_ratio:.3f}x the best")
    for c in ("#", "config", "model cycles", "model rank", "simulated cycles", "picked by", ""):
        t.add_column(c, justify="right" if "cycles" in c or "rank" in c or c == "#" else "left")
    by_model = {r.index: i + 1 for i, r in enumerate(sorted((r for r in res.rows if math.isfinite(r.estimate)),
                                                             key=lambda r: (r.estimate, r.index)))}
    sim = sorted((r for r in res.rows if r.simulated is not None), key=lambda r: (r.simulated, r.index))
    failed = [r for r in res.rows if r.picked and r.simulated is None]
    for i, r in enumerate(sim[:top]):
        t.add_row(str(i + 1), _show(r.config), f"{r.estimate:,.0f}", str(by_model.get(r.index, "")),
                  f"{r.simulated:,.0f}", r.picked, "best" if r is res.best else "")
    for r in failed:
        t.add_row("-", _show(r.config), f"{r.estimate:,.0f}" if math.isfinite(r.estimate) else "",
                  str(by_model.get(r.index, "")), "", r.picked, r.error or "")
    unfit = [r for r in res.rows if not r.picked and r.error]
    if unfit:
        reasons = {}
        for r in unfit:
            reasons.setdefault((r.error or "").split(":")[0], []).append(r)
        for why, rs in reasons.items():
            t.add_row("-", f"{len(rs)} candidates, e.g. {_show(rs[0].config)}", "", "", "", "not run",
                      _short(rs[0].error or why))
    return t


def _short(error: str) -> str:
    """An error's first 100 characters, its kernel's file named without its folder (the same text wherever the
    checkout lives)."""
    return re.sub(r"(?:[A-Za-z]:)?[/\\][^\s:]*[/\\]([^/\\\s:]+:\d+)", r"\1", error)[:100]


def _show(c: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in c.items())
