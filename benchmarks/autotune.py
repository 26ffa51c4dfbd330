"""Automatic autotuning against an exhaustive simulation of the same space (issue 39's targets).

For each tunable kernel of the gallery and the Triton tutorials (matmul, tutorial 03's grouped matmul, a
multi-row persistent softmax, a persistent layernorm over column blocks, flash attention) at three shapes:

* the space ``autotune(configs="auto")`` builds (``dvmlang/tuning/space.py``), every fitting candidate simulated
  (the exhaustive best), through the executor;
* the automatic search (the cost model ranks all, the top part and a seeded random few are simulated): its
  winner's cycles over the exhaustive best, and the part of the space it simulated;
* the cost model against the simulator over the whole space (Spearman's rho) and the simulated rank of the
  model's favourite;
* the same winner when the candidates come in the reverse order.

``--speedup`` also times one exhaustive sweep serially, on one forked worker (the baseline) and on the local process
pool (wall seconds, median of ``--repeats`` after a warm-up sweep), and ``--ray N1,N2,..`` on a local Ray cluster of
each size.

    python benchmarks/autotune.py [--quick] [--executor local] [--speedup] [--ray 1,2,4]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import dvmlang
import dvmlang.language as dl
from dvmlang.tuning import search, space
from dvmlang.tuning.executor import get_executor
from dvmlang.tuning.search import spearman
from dvmlang.tuning.trial import Trial

ROOT = Path(__file__).resolve().parent.parent


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@dvmlang.kernel
def softmax_rows(out_ptr, in_ptr, n_rows, n_cols, ROWS: dl.constexpr, BLOCK: dl.constexpr):
    """Row softmax, ``ROWS`` rows per tile, persistent over row blocks (the Triton-Ascend form)."""
    cols = dl.arange(0, BLOCK)
    rows = dl.arange(0, ROWS)
    for blk in range(dl.program_id(0), dl.cdiv(n_rows, ROWS), dl.num_programs(0)):
        r = blk * ROWS + rows
        mask = (r[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = dl.load(in_ptr + r[:, None] * n_cols + cols[None, :], mask=mask, other=-float("inf"))
        x = x - dl.max(x, axis=1)[:, None]
        num = dl.exp(x)
        dl.store(out_ptr + r[:, None] * n_cols + cols[None, :], num / dl.sum(num, axis=1)[:, None], mask=mask)


@dvmlang.kernel
def layernorm_blocks(x_ptr, y_ptr, w_ptr, b_ptr, n_rows, n_cols, eps, BLOCK: dl.constexpr):
    """LayerNorm, persistent over rows, each row in column blocks of ``BLOCK`` (two passes)."""
    for row in range(dl.program_id(0), n_rows, dl.num_programs(0)):
        acc = dl.zeros((BLOCK,), dl.float32)
        acc2 = dl.zeros((BLOCK,), dl.float32)
        for off in range(0, n_cols, BLOCK):
            cols = off + dl.arange(0, BLOCK)
            x = dl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            acc += x
            acc2 += x * x
        mean = dl.sum(acc, axis=0) / n_cols
        rstd = 1.0 / dl.sqrt(dl.sum(acc2, axis=0) / n_cols - mean * mean + eps)
        for off in range(0, n_cols, BLOCK):
            cols = off + dl.arange(0, BLOCK)
            m = cols < n_cols
            x = dl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0)
            w = dl.load(w_ptr + cols, mask=m)
            b = dl.load(b_ptr + cols, mask=m)
            dl.store(y_ptr + row * n_cols + cols, (x - mean) * rstd * w + b, mask=m)


def cases(quick: bool):
    """(family, name, kernel, grid, args, kwargs, reference check) per kernel and shape."""
    rng = np.random.default_rng(0)
    mm = _load("examples/matmul.py", "gallery_matmul").matmul_kernel
    fa = _load("examples/flash_attention.py", "gallery_flash_attention")
    out = []
    for M, N, K in ([(256, 256, 256)] if quick else [(256, 256, 256), (512, 512, 512), (1024, 768, 512)]):
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
        c = np.zeros((M, N), np.float16)
        out.append(("matmul", f"gallery matmul {M}x{N}x{K}", mm,
                    lambda m, M=M, N=N: (dl.cdiv(M, m["BLOCK_M"]), dl.cdiv(N, m["BLOCK_N"])),
                    (a, b, c, M, N, K, K, 1, N, 1, N, 1), {}))
    if not quick:
        t03 = _load("examples/triton/03_matrix_multiplication.py", "tutorial03")
        kern = t03.matmul_kernel.fn  # the tutorial's kernel, without its listed configs
        for M, N, K in [(256, 256, 256), (512, 512, 512), (384, 640, 256)]:
            a = rng.standard_normal((M, K)).astype(np.float16)
            b = rng.standard_normal((K, N)).astype(np.float16)
            c = np.zeros((M, N), np.float16)
            out.append(("matmul", f"tutorial 03 matmul {M}x{N}x{K}", kern,
                        lambda m, M=M, N=N: (dl.cdiv(M, m["BLOCK_SIZE_M"]) * dl.cdiv(N, m["BLOCK_SIZE_N"]),),
                        (a, b, c, M, N, K, K, 1, N, 1, N, 1), {"ACTIVATION": ""}))
    for R, C in ([(512, 781)] if quick else [(1823, 781), (512, 2048), (4096, 256)]):
        x = rng.standard_normal((R, C)).astype(np.float32)
        out.append(("softmax", f"softmax {R}x{C}", softmax_rows, (48,), (np.zeros_like(x), x, R, C),
                    {"BLOCK": dl.next_power_of_2(C)}))
    for R, C in ([(517, 1000)] if quick else [(517, 1000), (256, 4096), (2048, 512)]):
        x = rng.standard_normal((R, C)).astype(np.float32)
        out.append(("layernorm", f"layernorm {R}x{C}", layernorm_blocks, (48,),
                    (x, np.zeros_like(x), rng.standard_normal(C).astype(np.float32),
                     rng.standard_normal(C).astype(np.float32), R, C, 1e-5), {}))
    for BH, L, D, causal in ([(4, 256, 64, True)] if quick else [(4, 256, 64, True), (2, 512, 64, False),
                                                                  (8, 128, 128, True)]):
        q, k, v = (rng.standard_normal((BH, L, D)).astype(np.float16) for _ in range(3))
        out.append(("attention", f"attention {BH}x{L}x{D}{' causal' if causal else ''}", fa.attention_fwd_kernel,
                    lambda m, L=L, BH=BH: (dl.cdiv(L, m["BLOCK_M"]), BH),
                    (q, k, v, np.zeros_like(q), L, 1.0 / math.sqrt(D)), {"HEAD_DIM": D, "CAUSAL": causal}))
    return out


def setup(kernel, grid, args, kwargs, device):
    tuner = dvmlang.autotune(key=[], cache_results=False)(kernel)
    named = tuner._named(args, kwargs)
    from dvmlang.tuning import auto
    knobs = auto.knobs_of(tuner, grid, named, device)
    axis = next((k.axis for k in knobs if k.name == space.PROGRAMS), None)
    trial = Trial(tuner.fn, grid, args, kwargs, tuner.arg_names, [], device, axis)
    return knobs, space.candidates(knobs), trial


def exhaustive(cands, trial, executor):
    est = executor.map(trial, [("estimate", c) for c in cands], timeout=300, label="model")
    fit = [i for i, o in enumerate(est) if o.ok]
    sims = executor.map(trial, [("simulate", cands[i]) for i in fit], timeout=300, label="exhaustive")
    return {i: (est[i].value, o.value if o.ok else None, o.error) for i, o in zip(fit, sims)}, est


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one shape per kernel")
    ap.add_argument("--executor", default=None, help="the sweeps' executor (default $DVMLANG_EXECUTOR or local)")
    ap.add_argument("--speedup", action="store_true", help="time an exhaustive sweep serially and on the pool")
    ap.add_argument("--ray", default="", help="local Ray cluster sizes to time the sweep on, e.g. 1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    device = dvmlang.npu.default_device()
    executor = get_executor(a.executor)
    con = Console(width=200)
    t = Table(title=f"autotune(configs=\"auto\") against an exhaustive simulation ({executor.name}, "
                    f"{os.cpu_count()} cores)")
    for col in ("kernel", "space", "fit", "simulated", "part", "auto / best", "reversed order", "model rho (all)",
                "model #1 is", "auto s", "exhaustive s"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    worst, worst_part, all_same = 0.0, 0.0, True
    for family, name, kernel, grid, args, kwargs in cases(a.quick):
        knobs, cands, trial = setup(kernel, grid, args, kwargs, device)
        t0 = time.perf_counter()
        ex, est = exhaustive(cands, trial, executor)
        t_ex = time.perf_counter() - t0
        ok = {i: v for i, v in ex.items() if v[1] is not None}
        best = min(v[1] for v in ok.values())
        seed = f"benchmark:{name}"
        t0 = time.perf_counter()
        res = search.run(cands, trial, executor, seed)
        t_auto = time.perf_counter() - t0
        # the same search with the candidates reversed (then put back in canonical order, as Autotuner does)
        rev = sorted(list(reversed(cands)), key=space.canonical)
        res2 = search.run(rev, trial, executor, seed)
        same = res.best.config == res2.best.config
        all_same &= same
        ratio = res.best.simulated / best
        part = res.simulated / len(cands)
        worst, worst_part = max(worst, ratio), max(worst_part, part)
        rho = spearman([v[0] for v in ok.values()], [v[1] for v in ok.values()])
        fav = min(ok, key=lambda i: (ok[i][0], i))
        fav_rank = sorted(ok.values(), key=lambda v: v[1]).index(ok[fav]) + 1
        t.add_row(name, str(len(cands)), str(len(ok)), str(res.simulated), f"{part:.1%}", f"{ratio:.4f}",
                  "same" if same else "DIFFERENT", f"{rho:.3f}", f"#{fav_rank} ({ok[fav][1] / best:.3f}x)",
                  f"{t_auto:.1f}", f"{t_ex:.1f}")
        con.print(f"  {name}: best {best:,.0f} cycles; auto {res.best.config} {res.best.simulated:,.0f}; "
                  f"knobs {', '.join(f'{k.name}{list(k.values)}' for k in knobs)}")
    con.print(t)
    con.print(f"worst auto/best {worst:.4f} (target <= 1.02), largest part simulated {worst_part:.1%} (target "
              f"<= 15%), same winner in both orders: {all_same}")
    if a.speedup or a.ray:
        sweep_timing(a, device, con)
    executor.close()
    return 0 if worst <= 1.02 and worst_part <= 0.15 and all_same else 1


def sweep_timing(a, device, con):
    """Wall time of one exhaustive sweep (simulate every fitting candidate) serially, on the pool, on Ray."""
    family, name, kernel, grid, args, kwargs = next(c for c in cases(False) if c[1].startswith("gallery matmul 1024"))
    knobs, cands, trial = setup(kernel, grid, args, kwargs, device)
    est = get_executor("serial").map(trial, [("estimate", c) for c in cands])
    fit = [("simulate", cands[i]) for i, o in enumerate(est) if o.ok]
    t = Table(title=f"one exhaustive sweep: {name}, {len(fit)} candidates simulated (wall s, median of {a.repeats})")
    for col in ("executor", "workers", "wall s", "speed-up over local:1"):
        t.add_column(col, justify="left" if col == "executor" else "right")
    # the baseline is one forked worker: the same process conditions as every pool worker (one BLAS thread);
    # "serial" runs in this process, whose BLAS may start threads that contend for the cores
    specs = ["serial", "local:1"] + ([f"local:{os.cpu_count()}"] if a.speedup else []) + \
        [f"ray://local:{n}" for n in a.ray.split(",") if n]
    base = None
    for spec in specs:
        ex = get_executor(spec)
        try:
            ex.map(trial, fit)  # warm: builds cached, a Ray cluster's workers up and holding the kernel
            walls, values = [], None
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                outs = ex.map(trial, fit)
                walls.append(time.perf_counter() - t0)
                vals = [o.value for o in outs]
                assert values is None or vals == values
                values = vals
        finally:
            ex.close()
        wall = statistics.median(walls)
        if spec == "local:1":
            base = wall
        t.add_row(spec, str(ex.workers), f"{wall:.2f}", f"{base / wall:.2f}x" if base else "")
    con.print(t)
    con.print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
