"""Runtime fusion of eager code (``dvmlang.lazy()``) on a decoder-layer-like workload at many sequence lengths.

The workload is eager Python over ``dvmlang.tensor`` values — the same code runs eagerly, lazily fused, and
lazily unfused. Per layer (``x``: ``(S, D)``): rms_norm, q/k/v projections per head (batched matmuls),
causal softmax attention (``ops.scaled_dot_product_attention``), the output projection summed over heads, a
residual add, rms_norm, a SwiGLU MLP (two matmuls, silu, product, down projection) and a residual add.
Every result is checked against numpy.

Table 1 — fusion (one forward pass, observed once at the end, so it is one flush):

* launches / kernels / simulated cycles / GM bytes stored, fused against one kernel per op
  (``lazy(fuse=False)``: the kernels eager mode runs, each its own launch with the launch overhead);
* encode: host time of the flush (plan lookup, tiling, encoding; a build when a tile shape is new);
* new: whether the flush had to plan a new program (the first length, or when size equalities change).

Table 2 — the background thread, in a serving loop: per request the host issues the forward pass (with
``max_pending`` set so it flushes about once per layer), calls ``session.flush()`` to hand the rest over, does
its own host work for the next request (numpy, which releases the GIL — standing in for tokenising, sampling
or network I/O), then reads the response. Foreground, every flush encodes and runs inline; background, the
worker encodes and runs while the host goes on.

* encode per flush, and how much of the encode time ran while the main thread was not waiting for the
  worker (``stats.hidden_encode_s``);
* issue: main-thread time until the forward pass was issued and flushed;
* wall per request, foreground and background, and how long the host waited for the response. CPython's GIL
  lets one thread run Python at a time: the worker's pure-Python encoding overlaps the host's numpy work, not
  the host's own Python.

    python benchmarks/lazy.py [--layers 2] [--lengths 20] [--dim 64] [--heads 4] [--ffn 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dvmlang  # noqa: E402
import dvmlang.ops as ops  # noqa: E402


def make_weights(layers: int, D: int, H: int, F: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    hd = D // H

    def mat(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return [dict(n1=1 + mat(D, scale=0.1), n2=1 + mat(D, scale=0.1), wq=mat(H, D, hd, scale=D ** -0.5),
                 wk=mat(H, D, hd, scale=D ** -0.5), wv=mat(H, D, hd, scale=D ** -0.5),
                 wo=mat(H, hd, D, scale=D ** -0.5), wu=mat(D, F, scale=D ** -0.5), wg=mat(D, F, scale=D ** -0.5),
                 wd=mat(F, D, scale=F ** -0.5)) for _ in range(layers)]


def layer(x, w):
    """One decoder layer in eager style over dvmlang tensors."""
    h = ops.rms_norm(x, w["n1"])
    q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]  # (H, S, hd)
    a = ops.scaled_dot_product_attention(q, k, v, causal=True)
    x = x + ops.sum(a @ w["wo"], axis=0)
    h = ops.rms_norm(x, w["n2"])
    return x + ops.swiglu(h @ w["wu"], h @ w["wg"]) @ w["wd"]


def forward(x, weights):
    y = dvmlang.tensor(x)
    for w in weights:
        y = layer(y, w)
    return y


def reference(x, weights):
    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6) * g

    S = x.shape[0]
    mask = np.tril(np.ones((S, S), bool))
    for w in weights:
        h = rms(x, w["n1"])
        q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]
        s = np.where(mask, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + (p @ v @ w["wo"]).sum(0)
        h = rms(x, w["n2"])
        g = h @ w["wg"]
        x = x + ((h @ w["wu"]) * g / (1 + np.exp(-g))) @ w["wd"]
    return x


def run(x, tweights, **options):
    """One forward pass in a lazy session, observed at the end: (result, stats). Every pass starts with a cold
    L2, so fused and per-op passes are compared from the same state."""
    dvmlang.npu.default_device().l2.flush()
    with dvmlang.lazy(**options) as session:
        out = forward(x, tweights).numpy()
    return out, session.stats


def serve(x, tweights, host_work, **options):
    """One request of a serving loop: (result, stats, issue seconds, wall seconds)."""
    t0 = time.perf_counter()
    with dvmlang.lazy(**options) as session:
        y = forward(x, tweights)
        session.flush()
        issued = time.perf_counter()
        host_work()
        out = y.numpy()
    return out, session.stats, issued - t0, time.perf_counter() - t0


def lengths(n: int) -> list[int]:
    """``n`` distinct sequence lengths between 3 and about 180, irregular on purpose (primes, odd sizes)."""
    base = [3, 7, 12, 16, 23, 31, 37, 48, 53, 61, 64, 77, 89, 96, 101, 113, 127, 140, 157, 179]
    extra = [190 + 13 * i for i in range(max(0, n - len(base)))]
    return (base + extra)[:n] if n <= len(base) else base + extra


def nodes_per_layer(tweights, D: int) -> int:
    """How many nodes one layer adds to the pending graph (to set max_pending to about one layer)."""
    with dvmlang.lazy(background=False) as session:
        y = dvmlang.tensor(np.zeros((4, D), np.float32))
        layer(y, tweights[0])
        n = len(session.pg.nodes)
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lengths", type=int, default=20)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    # 64: with ffn >= 96 and S >= 77 the fuser's matmul tiler picks a 128x128 tile whose SwiGLU epilogue does not
    # fit UB (BufferOverflowError; reported, a fuser bug: dvmlang.graph(lambda h, w, u: ops.silu(h @ w) * u))
    ap.add_argument("--ffn", type=int, default=64)
    ap.add_argument("--host-elems", type=int, default=1_500_000, help="floats the host sorts per request")
    args = ap.parse_args(argv)
    D, H, F, L = args.dim, args.heads, args.ffn, args.layers
    weights = make_weights(L, D, H, F)
    tweights = [{k: dvmlang.tensor(v) for k, v in w.items()} for w in weights]
    rng = np.random.default_rng(1)
    print(f"dvmlang {dvmlang.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}; "
          f"{L} decoder layer(s), D={D}, heads={H}, ffn={F}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} (the background thread needs a free core to overlap the host's work)")

    # one kernel per op really is what eager mode runs: count eager launches once
    x0 = rng.standard_normal((5, D)).astype(np.float32)
    with dvmlang.trace(summary_only=True) as tr:
        eager = forward(x0, tweights).numpy()
    _, unf0 = run(x0, tweights, background=False, fuse=False)
    assert len(tr.launches) == unf0.launches, (len(tr.launches), unf0.launches)
    assert np.allclose(eager, reference(x0, weights), rtol=1e-4, atol=1e-4)
    print(f"eager mode (outside lazy) ran {len(tr.launches)} launches for one forward pass at S=5, the same as "
          "lazy(fuse=False)")
    t0 = time.perf_counter()
    _, first = run(x0, tweights, background=False)
    f0 = first.flushes[0]
    print(f"first fused flush: plans the program and builds its {f0.builds} kernels in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms")

    rows1 = []
    for S in lengths(args.lengths):
        x = rng.standard_normal((S, D)).astype(np.float32)
        ref = reference(x, weights)
        fused, fs = run(x, tweights, background=False)
        unfused, us = run(x, tweights, background=False, fuse=False)
        err = max(float(np.abs(fused - ref).max()), float(np.abs(unfused - ref).max()))
        assert err < 1e-3, (S, err)
        assert len(fs.flushes) == 1
        f = fs.flushes[0]
        rows1.append((S, fs.launches, us.launches, fs.kernels, fs.cycles, us.cycles, fs.bytes_stored,
                      us.bytes_stored, f.encode_s, f.builds, f.new_program, err))

    print()
    print("Table 1: fused (one flush per forward pass) against one kernel per op; each length seen for the first time")
    print(f"{'S':>4} {'launches':>13} {'kernels':>7} {'cycles fused':>13} {'cycles per-op':>14} {'speedup':>7} "
          f"{'stored fused':>13} {'stored per-op':>14} {'encode':>10} {'builds':>6} {'new':>4} {'max err':>8}")
    for S, lf, lu, k, cf, cu, bf, bu, enc, builds, new, err in rows1:
        print(f"{S:>4} {lf:>5} vs {lu:>4} {k:>7} {cf:>13,} {cu:>14,} {cu / cf:>6.1f}x {bf:>13,} {bu:>14,} "
              f"{enc * 1e6:>8.0f}us {builds:>6} {'yes' if new else 'no':>4} {err:>8.1e}")
    plain = [r for r in rows1 if r[9] == 0]
    enc = [r[8] for r in plain]
    print(f"flushes that only encoded (no build): {len(plain)} of {len(rows1)}, median {statistics.median(enc) * 1e6:.0f} "
          f"us per flush = {statistics.median(enc) / rows1[0][3] * 1e6:.0f} us per kernel (max "
          f"{max(enc) * 1e6:.0f} us); builds happen for a new plan (new size equalities: S equal to head_dim or D) "
          "or a new tile shape")
    print(f"cycles per-op / fused: median {statistics.median([r[5] / r[4] for r in rows1]):.1f}x; GM bytes stored "
          f"per-op / fused: median {statistics.median([r[7] / r[6] for r in rows1]):.1f}x; launches "
          f"{rows1[0][1]} vs {rows1[0][2]}")

    per_layer = nodes_per_layer(tweights, D)
    cap = per_layer + 4
    buf = np.random.default_rng(2).standard_normal(args.host_elems)

    def host_work():
        np.sort(buf)

    t0 = time.perf_counter()
    host_work()
    host_ms = (time.perf_counter() - t0) * 1e3
    rows2 = []
    for S in lengths(args.lengths):
        x = rng.standard_normal((S, D)).astype(np.float32)
        serve(x, tweights, host_work, background=False, max_pending=cap)  # warm: builds are not what we measure
        pf, sf, issue_fg, wall_fg = serve(x, tweights, host_work, background=False, max_pending=cap)
        pb, sb, issue_bg, wall_bg = serve(x, tweights, host_work, background=True, max_pending=cap)
        assert np.array_equal(pf, pb), "background results differ from foreground"
        assert [(g.reason, g.cycles) for g in sf.flushes] == [(g.reason, g.cycles) for g in sb.flushes]
        enc = sb.encode_s
        rows2.append((S, len(sb.flushes), enc / len(sb.flushes), enc, sb.hidden_encode_s, issue_fg, issue_bg,
                      wall_fg, wall_bg, sf.blocked_s, sb.blocked_s))

    print()
    print(f"Table 2: the background thread in a serving loop (max_pending={cap}: about one flush per layer of "
          f"{per_layer} nodes, then session.flush(); host work per request: np.sort of {args.host_elems:,} floats, "
          f"{host_ms:.0f} ms)")
    print(f"{'S':>4} {'flushes':>7} {'encode/flush':>12} {'encode':>8} {'hidden':>14} {'issue fg':>9} "
          f"{'issue bg':>9} {'wall fg':>9} {'wall bg':>9} {'waited fg':>10} {'waited bg':>10}")
    for S, n, per, enc, hid, ifg, ibg, wfg, wbg, bfg, bbg in rows2:
        print(f"{S:>4} {n:>7} {per * 1e6:>10.0f}us {enc * 1e3:>6.2f}ms {hid * 1e3:>6.2f}ms ({hid / enc:>4.0%}) "
              f"{ifg * 1e3:>7.1f}ms {ibg * 1e3:>7.1f}ms {wfg * 1e3:>7.1f}ms {wbg * 1e3:>7.1f}ms {bfg * 1e3:>8.1f}ms "
              f"{bbg * 1e3:>8.1f}ms")
    tot_enc = sum(r[3] for r in rows2)
    tot_hid = sum(r[4] for r in rows2)

    def med(i):
        return statistics.median([r[i] for r in rows2]) * 1e3

    print(f"hidden: {tot_hid * 1e3:.1f} of {tot_enc * 1e3:.1f} ms of encoding ({tot_hid / tot_enc:.0%}) ran while the "
          f"host was not waiting; medians: issue {med(5):.1f} ms foreground vs {med(6):.1f} ms background, wall "
          f"{med(7):.1f} vs {med(8):.1f} ms per request")
    print("results: every length matches numpy; background results and flush records equal the foreground ones")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
