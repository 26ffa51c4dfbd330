"""Host speed, before and after: the host figures of host_speed.py for two checkouts, in alternating processes,
each figure scaled to the machine's Python speed measured around it.

A shared or virtual machine's speed drifts by 1.5-2x within minutes, and a whole process can land in a slow or
a fast phase, so two single runs of host_speed.py cannot show a 20 % change. This runs the relaunch, encode,
@graph and from_bytes figures of ``BEFORE`` (another checkout's directory, e.g. a ``git worktree`` of an older
commit) and of this checkout in turn, ``--pairs`` times, and scales every figure to what it would be with the
pure-Python loop of ``host_speed.machine_speed`` taking 600 us (its time on the quiet development machine).
Both sides run this checkout's benchmark code (host_speed.py), so only dvmlang differs. Prints each side's
median and minimum over the pairs.

    git worktree add /tmp/before <commit>
    python benchmarks/host_speed_ab.py /tmp/before [--pairs 6] [--only relaunch,encode]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUIET_LOOP = 600e-6  # seconds the machine_speed loop takes on the quiet development machine


FIGURES = ("relaunch", "encode", "graph", "from_bytes")


def measure(which=FIGURES) -> dict:
    """This process's figures (us at the quiet machine's speed), with whichever dvmlang it imports: the groups
    in ``which``."""
    sys.path.insert(0, str(HERE))
    import host_speed as H

    out = {}

    def scaled(name, fn):
        before = H.machine_speed()
        v = fn()
        loop = (before + H.machine_speed()) / 2
        out[name] = v * 1e6 * QUIET_LOOP / loop
        return v

    rel = {}

    def relaunch():
        rel.update(H.relaunch(600))
        return statistics.median(rel["whole"])
    if "relaunch" in which:
        whole = scaled("relaunch, whole call", relaunch)
        out["  dvmlang overhead"] = statistics.median(rel["overhead"]) / whole * out["relaunch, whole call"]
    if "encode" in which:
        for name in ("layernorm", "softmax"):
            scaled(f"encode, new shape: {name}", lambda: statistics.median(H.encode(name, 600)["encode"]))
    if "graph" in which:
        scaled("@graph call, new small shape, host", lambda: H.graph_call(15)["host"])
    if "from_bytes" in which:
        scaled("from_bytes, gallery layernorm",
               lambda: statistics.median(H.from_bytes("layernorm", 150)["from_bytes"]))
    return out


def run_side(dvmlang_root: Path | None, which) -> dict:
    env = dict(os.environ)
    if dvmlang_root is not None:
        env["PYTHONPATH"] = str(dvmlang_root) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, __file__, "--measure", "--only", ",".join(which)], env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?", help="the other checkout's directory (its dvmlang/ is imported)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--only", default=",".join(FIGURES),
                    help=f"comma-separated figure groups to compare (default: all of {', '.join(FIGURES)})")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    which = tuple(w.strip() for w in opts.only.split(",") if w.strip())
    unknown = [w for w in which if w not in FIGURES]
    if unknown or not which:
        ap.error(f"--only takes some of {', '.join(FIGURES)}, got {opts.only!r}")
    if opts.measure:
        print(json.dumps(measure(which)))
        return 0
    if not opts.before or not (Path(opts.before) / "dvmlang" / "__init__.py").exists():
        ap.error("give the directory of another checkout (one that holds dvmlang/)")
    sides = {"before": [], "after": []}
    for i in range(opts.pairs):
        sides["before"].append(run_side(Path(opts.before).resolve(), which))
        sides["after"].append(run_side(None, which))
        print(f"pair {i + 1}/{opts.pairs} done", file=sys.stderr)
    names = list(sides["after"][0])
    width = max(len(n) for n in names)
    print(f"{'figure (us at a 600 us Python loop)':{width}}  before: median (min)   after: median (min)")
    for n in names:
        b = [s[n] for s in sides["before"]]
        a = [s[n] for s in sides["after"]]
        print(f"{n:{width}}  {statistics.median(b):8.1f} ({min(b):7.1f})    {statistics.median(a):8.1f} ({min(a):7.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
