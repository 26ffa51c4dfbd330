"""Run Triton's own unit tests against dvmlang: ``triton`` is bound to ``dvmlang.triton``, tensors are torch CPU tensors.

    python tests/triton_conformance.py                      # test_core, test_random, test_standard: all of them
    python tests/triton_conformance.py --sample 300 --seed 0 # a seeded sample of the applicable tests
    python tests/triton_conformance.py -k test_bin_op --files test_core --failures

Which tests apply is Triton's own CPU classification: the tests marked ``interpreter``, run as if
``TRITON_INTERPRET=1`` (so ``is_interpreter()`` holds and they skip what Triton's interpreter skips), with
``--device cpu``. The tests are read from ``$DVMLANG_TRITON_TESTS`` (default: ``tests/triton_upstream``, verbatim
copies of Triton's files), and nothing of them is edited. One adaptation: ``exec`` of a string registers the
string as the source of what it defines, because the tests build kernels by exec'ing edited source and
dvmlang compiles a kernel from its source text. The summary counts, per file, the parametrizations that
passed, failed (an error counts as a failure) and were skipped by the tests themselves; the pass rate is
passed / (passed + failed). ``--out FILE`` also writes the counts and every failure's first line as JSON.
Triton's ``test_random`` imports ``scipy`` (``pip install scipy``); the test extra does not install it.
"""

from __future__ import annotations

import argparse
import builtins
import collections
import importlib
import importlib.abc
import importlib.util
import itertools
import json
import linecache
import os
import random
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TESTS = ROOT / "tests" / "triton_upstream"  # verbatim copies; $DVMLANG_TRITON_TESTS names another
FILES = ("test_core", "test_random", "test_standard")


def tests_dir() -> Path:
    return Path(os.environ.get("DVMLANG_TRITON_TESTS", DEFAULT_TESTS))


class TritonAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import triton...`` gives the module of the same name under ``dvmlang.triton``; ``triton._internal_testing``
    is Triton's own helper file from the tests directory."""

    def __init__(self, unit: Path):
        self.unit = unit

    def find_spec(self, name, path=None, target=None):
        if name != "triton" and not name.startswith("triton."):
            return None
        if name == "triton._internal_testing":
            return importlib.util.spec_from_file_location(name, self.unit / "_internal_testing.py")
        try:
            importlib.import_module("dvmlang." + name)
        except ModuleNotFoundError:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return importlib.import_module("dvmlang." + spec.name)

    def exec_module(self, module):
        pass


_exec = builtins.exec
_names = itertools.count()


def _exec_with_source(source, globals=None, locals=None, /, *args, **kwargs):
    """``exec`` of a string, compiled under a registered file name: Triton's tests build kernels by exec'ing
    edited source (``patch_kernel``), and a dvmlang kernel is compiled from its source text (Triton's
    interpreter runs the function instead)."""
    if globals is None:  # exec(src) runs in its caller's namespace (scipy builds its docstrings that way)
        caller = sys._getframe(1)
        globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
    if isinstance(source, str):
        name = f"<exec-{next(_names)}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        source = compile(source, name, "exec")
    return _exec(source, globals, locals, *args, **kwargs)


def install(unit: Path) -> None:
    if not any(isinstance(f, TritonAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, TritonAlias(unit))
    builtins.exec = _exec_with_source


class Collector:
    """A pytest plugin: the applicable tests (a seeded sample of them, if asked) and each one's outcome."""

    def __init__(self, sample: int | None, seed: int):
        self.sample, self.seed = sample, seed
        self.outcomes: dict[str, str] = {}
        self.files: dict[str, str] = {}
        self.messages: dict[str, str] = {}

    @pytest.fixture
    def with_allocator(self):
        """Triton's ``test/unit/conftest.py`` fixture (not among the copied files): it installs a scratch-memory
        allocator for kernels that need global scratch; dvmlang kernels need none."""
        yield

    def pytest_collection_modifyitems(self, session, config, items):
        chosen = [it for it in items if it.get_closest_marker("interpreter") is not None]
        if self.sample is not None and self.sample < len(chosen):
            chosen = sorted(random.Random(self.seed).sample(chosen, self.sample), key=lambda it: it.nodeid)
        items[:] = chosen
        self.files = {it.nodeid: it.path.stem for it in chosen}

    def pytest_runtest_logreport(self, report):
        nid = report.nodeid
        if report.when == "call" or report.outcome != "passed":
            if report.outcome == "failed" or nid not in self.outcomes:
                self.outcomes[nid] = report.outcome
            if report.outcome == "failed" and nid not in self.messages:
                text = str(report.longrepr).strip().splitlines()
                self.messages[nid] = next((ln for ln in reversed(text) if ln.startswith("E ")), text[-1] if text
                                          else "")[:300]


def run(files=FILES, k: str | None = None, sample: int | None = None, seed: int = 0, quiet: bool = True):
    """Run the selected files; return {file: Counter(outcome)} and {nodeid: failure line}."""
    unit = tests_dir() / "unit"
    if not unit.is_dir():
        raise SystemExit(f"Triton's tests are not at {unit}; set DVMLANG_TRITON_TESTS to the triton-tests folder")
    os.environ["TRITON_INTERPRET"] = "1"
    install(unit)
    sys.path.insert(0, str(unit))
    upstream = importlib.import_module("conftest_upstream")
    collector = Collector(sample, seed)
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\nmarkers =\n    interpreter\n")
        args = [str(unit / f"{f}.py") for f in files] + [
            "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider", "--device", "cpu",
            "-W", "ignore::DeprecationWarning", "-q" if quiet else "-v", "--no-header", "-rN", "--tb=line"]
        if k:
            args += ["-k", k]
        pytest.main(args, plugins=[upstream, collector])
    counts: dict[str, collections.Counter] = {}
    for nid, outcome in collector.outcomes.items():
        counts.setdefault(collector.files.get(nid, "collection"), collections.Counter())[outcome] += 1
    return counts, collector.messages


def summary(counts) -> str:
    lines = [f"{'file':<16}{'passed':>8}{'failed':>8}{'skipped':>9}{'pass rate':>11}"]
    total = collections.Counter()
    for name in sorted(counts):
        c = counts[name]
        total.update(c)
        lines.append(_row(name, c))
    lines.append(_row("all", total))
    return "\n".join(lines)


def _row(name, c) -> str:
    ran = c["passed"] + c["failed"]
    rate = f"{100 * c['passed'] / ran:.1f}%" if ran else "-"
    return f"{name:<16}{c['passed']:>8}{c['failed']:>8}{c['skipped']:>9}{rate:>11}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default=",".join(FILES), help="comma-separated test files (default: all three)")
    ap.add_argument("-k", help="pytest -k expression")
    ap.add_argument("--sample", type=int, help="run a seeded sample of this many applicable tests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--failures", action="store_true", help="print each failure's first line")
    ap.add_argument("--out", help="write the counts and failures as JSON")
    a = ap.parse_args(argv)
    counts, messages = run(a.files.split(","), a.k, a.sample, a.seed)
    print(summary(counts))
    if a.failures:
        for nid in sorted(messages):
            print(f"{nid}\n    {messages[nid]}")
    if a.out:
        Path(a.out).write_text(json.dumps({"counts": {k: dict(v) for k, v in counts.items()},
                                           "failures": messages}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
