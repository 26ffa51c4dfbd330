"""The search of ``autotune(configs="auto")``: every candidate is encoded and estimated by the cost model
(``model.py``); the most promising by the model, plus a few drawn at random (to keep the model honest), are
simulated; the fewest simulated cycles win. Both stages run through an executor (``executor.py``).

Determinism: candidates are put in a canonical order first (``space.canonical``), the model's ties and the
simulator's ties are broken by that order, and the random draws are seeded by the tuning's content address
(``store.digest``), so the winner depends only on the kernel source, the key, the profile, the dvmlang version
and the space: not on the order the candidates were listed in, the executor, the process or the run.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field

import numpy as np

BUDGET = 0.08  # the part of the fitting candidates simulated because the model ranks them first
EXPLORE = 0.04  # and the part drawn at random from the rest (at least one when any is left)


@dataclass
class Row:
    index: int  # in the canonical order
    config: dict
    estimate: float = math.inf
    simulated: float | None = None
    error: str | None = None  # from encoding (does not fit, ...) or from simulating (fault, time-out)
    picked: str = ""  # "model" or "explore" when simulated


@dataclass
class Result:
    rows: list
    best: Row | None
    simulated: int = 0
    fitting: int = 0
    spearman: float = float("nan")  # the model's ranking against the simulator's, over the simulated candidates
    model_pick_rank: int | None = None  # the simulated rank (1 = best) of the model's favourite
    model_pick_ratio: float = float("nan")  # its simulated cycles over the best's
    seconds: float = 0.0  # the whole tuning's wall time (set by the caller)
    knobs: list = field(default_factory=list)  # the space's knobs (set by the caller)


def spearman(a, b) -> float:
    if len(a) < 2:
        return float("nan")
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(float)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def plan(rows: list, seed: str, budget=BUDGET, explore=EXPLORE) -> tuple[list, list]:
    """(model picks, random picks): row indices to simulate. ``budget``/``explore``: parts of the fitting
    candidates (a float <= 1) or counts (an int)."""
    fit = sorted((r for r in rows if r.error is None and math.isfinite(r.estimate)),
                 key=lambda r: (r.estimate, r.index))
    n = len(fit)
    if n == 0:
        return [], []

    def count(x, least):
        k = x if isinstance(x, int) and not isinstance(x, bool) else math.ceil(float(x) * n)
        return max(least, min(n, int(k)))
    top = count(budget, 1)
    model = [r.index for r in fit[:top]]
    rest = sorted(r.index for r in fit[top:])
    k = min(len(rest), count(explore, 1) if rest else 0)
    rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "little"))
    return model, sorted(rng.sample(rest, k)) if k else []


def summarise(rows: list) -> Result:
    sim = [r for r in rows if r.simulated is not None]
    fitting = sum(1 for r in rows if math.isfinite(r.estimate))
    res = Result(rows, None, len([r for r in rows if r.picked]), fitting)
    if not sim:
        return res
    best = min(sim, key=lambda r: (r.simulated, r.index))
    res.best = best
    res.spearman = spearman([r.estimate for r in sim], [r.simulated for r in sim])
    fav = min(sim, key=lambda r: (r.estimate, r.index))
    order = sorted(sim, key=lambda r: (r.simulated, r.index))
    res.model_pick_rank = order.index(fav) + 1
    res.model_pick_ratio = fav.simulated / best.simulated if best.simulated else float("nan")
    return res


def run(candidates: list[dict], trial, executor, seed: str, *, budget=BUDGET, explore=EXPLORE, timeout=None,
        progress=None, label="autotune") -> Result:
    """Estimate every candidate, simulate the planned ones (and, if none of them ran, the next ones by the
    model until one does), and summarise. ``trial(("estimate"|"simulate", config))`` returns cycles or
    raises."""
    rows = [Row(i, c) for i, c in enumerate(candidates)]
    est = executor.map(trial, [("estimate", c) for c in candidates], timeout=timeout, progress=progress,
                       label=f"{label}: model")
    for r, o in zip(rows, est):
        if o.ok:
            r.estimate = float(o.value)
        else:
            r.error = o.error
    model, extra = plan(rows, seed, budget, explore)
    todo = [(i, "model") for i in model] + [(i, "explore") for i in extra]
    ranked = [r.index for r in sorted((r for r in rows if r.error is None), key=lambda r: (r.estimate, r.index))]
    while todo:
        outs = executor.map(trial, [("simulate", rows[i].config) for i, _ in todo], timeout=timeout,
                            progress=progress, label=f"{label}: simulate")
        for (i, why), o in zip(todo, outs):
            rows[i].picked = why
            if o.ok:
                rows[i].simulated = float(o.value)
            else:
                rows[i].error = o.error
        if any(r.simulated is not None for r in rows):
            break
        done = {r.index for r in rows if r.picked}
        todo = [(i, "model") for i in ranked if i not in done][:max(1, len(todo))]
    return summarise(rows)
