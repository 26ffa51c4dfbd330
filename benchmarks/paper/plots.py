"""The evaluation's PNG plots (matplotlib, the optional `bench` extra): compile time per instance, speedup over
per-op eager by workload, the end-to-end request stream, and the launch-overhead sensitivity."""

from __future__ import annotations

from pathlib import Path

COLORS = {"dvmlang": "#1f77b4", "per-op eager": "#7f7f7f", "bucketed": "#ff7f0e", "inductor-static": "#d62728",
          "inductor-dynamic": "#9467bd"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def compile_times(rows: list[dict], path: Path) -> Path:
    """Per-instance compile time (log scale), one series per system, over the request index."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for system in ("dvmlang", "inductor-static", "inductor-dynamic"):
        pts = [(r["request"], r["compile_s"]) for r in rows if r["system"] == system and r["compile_s"] == r["compile_s"]
               and r["compile_s"] > 0]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, label=system, color=COLORS[system], alpha=0.7)
    ax.set_yscale("log")
    ax.set_xlabel("request (arrival order)")
    ax.set_ylabel("compile time of the request (s, host)")
    ax.set_title("Compile cost per new instance (every workload)")
    ax.legend()
    return _save(fig, path)


def speedups(summary: list[dict], path: Path) -> Path:
    """Median speedup over per-op eager by workload, for dvmlang and the bucketed kernels."""
    plt = _plt()
    names = [s["workload"] for s in summary]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = range(len(names))
    for k, (key, label) in enumerate((("median_speedup", "dvmlang"), ("median_speedup_bucketed", "bucketed"))):
        ax.bar([i + 0.4 * k for i in x], [s[key] for s in summary], width=0.4, label=label, color=COLORS[label])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.2 for i in x])
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("device time of per-op eager / system (median)")
    ax.set_title("Speedup over one kernel per op, simulated 910B2")
    ax.legend()
    return _save(fig, path)


def stream(cumulative: dict, path: Path, level: str) -> Path:
    """End-to-end time of the request stream (host time or compile stalls, plus device time: run.stream_table),
    cumulative, per system."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for system, ys in cumulative.items():
        ax.plot(range(len(ys)), ys, label=system, color=COLORS.get(system))
    ax.set_yscale("log")
    ax.set_xlabel("request")
    ax.set_ylabel("cumulative time (s): host + device")
    ax.set_title(f"The request stream end to end ({level} level)")
    ax.legend()
    return _save(fig, path)


def sensitivity(table: list[dict], path: Path) -> Path:
    """Median speedup over per-op eager against the launch overhead, per level."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    levels = sorted({t["level"] for t in table})
    for level in levels:
        pts = sorted((t["launch_overhead_us"], t["median_speedup"]) for t in table if t["level"] == level)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=level)
    ax.set_xlabel("launch overhead per kernel launch (us)")
    ax.set_ylabel("median speedup over per-op eager")
    ax.set_title("How much of the speedup is launch overhead")
    ax.legend()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path

