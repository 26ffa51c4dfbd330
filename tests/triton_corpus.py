"""Published Triton kernels, as their packages ship them, run on dvmlang: a measurement, not a CI test.

    python tests/triton_corpus.py --fetch            # download the pinned packages (pip, no deps) once
    python tests/triton_corpus.py                    # run every case; a table per project, each failure's cause
    python tests/triton_corpus.py -k liger --json out.json

The kernels are not copied into this repository: ``--fetch`` downloads each project's published package at
the version pinned in ``PACKAGES`` (``pip download --no-deps``) and unpacks its Python files into
``$DVMLANG_CORPUS_DIR`` (default ``~/.cache/dvmlang/triton-corpus``). Each case imports the package's own
module with ``import triton`` bound to ``dvmlang.triton`` (nothing else is changed), calls its public entry
point (the op's forward, and backward where the package has one) on small CPU tensors, and compares every
result with a torch reference written here from the op's definition. A case passes when every result is
within its tolerance; anything else (an exception, a wrong number) fails, with the first line of the cause.
The cases are in ``tests/triton_corpus_cases.py``; each names the ``@triton.jit`` kernels it runs.

The binding is this script's own import hook, so the same script measures a dvmlang that predates
``dvmlang.triton.bind()`` (``PYTHONPATH=<old checkout> python tests/triton_corpus.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
import zipfile
from pathlib import Path

# project -> (pip requirement, licence); the licence is the package's own (each is compatible with Apache-2.0)
PACKAGES = {
    "liger-kernel": ("liger-kernel==0.8.5", "BSD-2-Clause"),
    "fla": ("flash-linear-attention==0.6.0 fla-core==0.6.0 einops==0.8.2", "MIT"),
    "unsloth": ("unsloth==2026.10.9", "Apache-2.0"),
    "bitsandbytes": ("bitsandbytes==0.50.2", "MIT"),
    "lightning-attn": ("lightning-attn==0.0.5 einops==0.8.2", "MIT"),
    "torchao": ("torchao==0.18.0", "BSD-3-Clause"),
    # flashinfer imports its own dependencies at import time; they come along (no kernels of theirs run)
    "flashinfer": ("flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.15.post2 nvidia-ml-py requests urllib3 certifi "
                   "idna charset-normalizer", "Apache-2.0"),
}


def corpus_dir() -> Path:
    return Path(os.environ.get("DVMLANG_CORPUS_DIR") or Path.home() / ".cache" / "dvmlang" / "triton-corpus")


def fetch(dest: Path) -> None:
    """Download the pinned packages (no dependencies) and unpack their Python files into ``dest``."""
    wheels = dest / "downloads"
    wheels.mkdir(parents=True, exist_ok=True)
    for req, _ in PACKAGES.values():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *req.split()],
                       check=True)
    for archive in sorted(wheels.iterdir()):
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                native = archive.name.startswith("apache_tvm_ffi")  # its shared library is what it is
                z.extractall(dest, [n for n in z.namelist() if native or n.endswith(".py") or n.endswith(".json")])
        elif archive.name.endswith(".tar.gz"):
            import tarfile
            with tarfile.open(archive) as t:
                top = t.getnames()[0].split("/")[0]
                members = [m for m in t.getmembers() if m.name.endswith(".py") and "/" in m.name]
                for m in members:
                    m.name = m.name[len(top) + 1:]
                t.extractall(dest, [m for m in members if m.name], filter="data")


class TritonAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import triton[.X]`` gives ``dvmlang.triton[.X]``; what dvmlang does not provide is not found."""

    def find_spec(self, name, path=None, target=None):
        if name != "triton" and not name.startswith("triton."):
            return None
        try:
            importlib.import_module("dvmlang." + name)
        except ModuleNotFoundError as e:
            if e.name is not None and e.name.startswith("dvmlang.triton"):
                return None
            raise
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return importlib.import_module("dvmlang." + spec.name)

    def exec_module(self, module):
        pass


class CaseTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    def fire(*_):
        raise CaseTimeout(f"took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cause(exc: BaseException) -> str:
    """The first line of an exception, with the innermost frame of package or test code that raised it."""
    first = (str(exc).strip().splitlines() or [""])[0][:240]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/dvmlang/" not in f.filename]
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {first}{where}"


def run(pattern: str | None = None, seconds: int = 600, verbose: bool = False, triton_dir: str | None = None) -> dict:
    """Run the cases on dvmlang, or with ``triton_dir`` on Triton's own CPU interpreter (``TRITON_INTERPRET=1``,
    Triton installed there: ``pip install --no-deps --target DIR triton==3.9.0``), the reference a case must
    pass first."""
    sys.path.insert(0, str(corpus_dir()))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if triton_dir:
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, triton_dir)
    else:
        sys.meta_path.insert(0, TritonAlias())
    import torch  # noqa: F401 - the cases' tensors

    import dvmlang
    tracing = contextlib.nullcontext if triton_dir else lambda: dvmlang.trace(summary_only=True)
    import triton_corpus_cases as cases
    results = {}
    for c in cases.CASES:
        if pattern and pattern not in c.name and pattern not in c.project:
            continue
        t0 = time.perf_counter()
        out = io.StringIO()
        launched = []
        try:
            with time_limit(seconds), contextlib.redirect_stdout(out), warnings.catch_warnings(), \
                    tracing() as session:
                warnings.simplefilter("ignore")
                c.fn()
            launched = sorted({r.name for r in session.launches}) if session is not None else ["(triton)"]
            if not launched:  # the package took a path of its own (torch code): its Triton kernels did not run
                raise AssertionError("no Triton kernel was launched")
            status, why = "pass", ""
        except Exception as e:  # noqa: BLE001 - every failure is a result
            status, why = "fail", cause(e)
            if verbose:
                traceback.print_exc()
        results[c.name] = {"project": c.project, "kernels": c.kernels, "launched": launched, "status": status,
                           "cause": why,
                           "seconds": round(time.perf_counter() - t0, 2)}
        print(f"{status:4}  {c.project:13} {c.name:38} {results[c.name]['seconds']:7.1f}s  {why or ' '.join(launched)}",
              flush=True)
    return results


def summary(results: dict) -> str:
    per = collections.defaultdict(lambda: [0, 0, 0])
    for r in results.values():
        p = per[r["project"]]
        p[0 if r["status"] == "pass" else 1] += 1
        p[2] += len(r["kernels"])
    lines = [f"{'project':14} passed  failed  kernels"]
    for name, (ok, bad, k) in sorted(per.items()):
        lines.append(f"{name:14} {ok:6}  {bad:6}  {k:7}")
    ok = sum(p[0] for p in per.values())
    lines.append(f"{'total':14} {ok:6}  {len(results) - ok:6}  {sum(p[2] for p in per.values()):7}   "
                 f"({ok}/{len(results)} cases pass)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetch", action="store_true", help="download the pinned packages first")
    ap.add_argument("-k", help="only cases whose name or project contains this")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seconds", type=int, default=600, help="time limit of one case")
    ap.add_argument("-v", action="store_true", help="print each failure's traceback")
    ap.add_argument("--triton", metavar="DIR", help="run on Triton's CPU interpreter, installed in DIR, instead")
    a = ap.parse_args(argv)
    if a.fetch:
        fetch(corpus_dir())
    results = run(a.k, a.seconds, a.v, a.triton)
    print(summary(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
