"""Triton's tutorials, verbatim, with ``import triton`` bound to ``dvmlang.triton`` and nothing else changed.

    python tests/triton_tutorials.py            # all 11 files of $DVMLANG_TRITON_TESTS/tutorials
    python tests/triton_tutorials.py 05 10      # some of them

Each file runs as ``python FILE`` would (``__main__``, its own folder on ``sys.path``) in a process of its own,
with ``dvmlang.triton.bind()`` first. The benchmark sweeps are skipped (``triton.testing.perf_report``'s
``Mark.run`` does nothing): they take minutes on the simulator and check nothing. A file passes when it runs to
its end; a failure shows the last line of its traceback. ``examples/triton/`` holds the same tutorials with their
sizes shrunk for the gallery; this runs the originals.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_RUNNER = """
import runpy, sys
import dvmlang.triton
dvmlang.triton.bind()
import triton.testing
triton.testing.Mark.run = lambda self, *args, **kwargs: None  # benchmark sweeps skipped
path = sys.argv[1]
sys.argv = [path]
sys.path.insert(0, __import__("os").path.dirname(path))
runpy.run_path(path, run_name="__main__")
"""


def tutorials_dir() -> Path:
    base = os.environ.get("DVMLANG_TRITON_TESTS") or "/work/shared/triton-tests"
    return Path(base) / "tutorials"


def run_one(path: Path, seconds: int = 1800) -> tuple[bool, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _RUNNER, str(path)], capture_output=True, text=True,
                           timeout=seconds, cwd=path.parent)
    except subprocess.TimeoutExpired:
        return False, f"took more than {seconds} s", time.perf_counter() - t0
    lines = [ln for ln in (p.stderr or "").strip().splitlines() if ln.strip()]
    why = "" if p.returncode == 0 else (lines[-1] if lines else f"exit status {p.returncode}")
    return p.returncode == 0, why[:300], time.perf_counter() - t0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    files = sorted(tutorials_dir().glob("[0-9][0-9]-*.py"))
    if argv:
        files = [f for f in files if any(f.name.startswith(a) for a in argv)]
    passed = 0
    for f in files:
        ok, why, secs = run_one(f)
        passed += ok
        print(f"{'pass' if ok else 'FAIL'}  {f.name:40} {secs:7.1f}s  {why}", flush=True)
    print(f"{passed} passed, {len(files) - passed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
