"""The ``dvmlang`` command: ``gallery``, ``trace``, ``disasm``. Each subcommand has ``--help``; failures exit
non-zero with a one-line reason."""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _examples_dir(explicit: str | None) -> Path | None:
    candidates = []
    if explicit:  # an explicit directory is the only candidate
        c = Path(explicit)
        return c if c.is_dir() and any(c.glob("*.py")) else None
    if os.environ.get("DVMLANG_EXAMPLES"):
        candidates.append(Path(os.environ["DVMLANG_EXAMPLES"]))
    candidates.append(Path.cwd() / "examples")
    candidates.append(Path(__file__).resolve().parent.parent / "examples")
    for c in candidates:
        if c.is_dir() and any(c.glob("*.py")):
            return c
    return None


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"dvmlang_example_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# the optional extras an example may need (the Triton tutorials and the torch examples): without them it is
# skipped, not failed, so the README's plain install runs the gallery
OPTIONAL_NEEDS = ("torch", "transformers", "pytest")  # tutorial 06 imports pytest


def _run_example(f: Path, args, quiet: bool):
    """Run one example's ``run()`` in a trace session: ``(ok, skipped, err, session, wall seconds)``. With
    ``quiet`` (a Triton tutorial, which prints its tables), its output and warnings are hidden unless -v."""
    import contextlib
    import io
    import warnings

    import dvmlang
    t0 = time.perf_counter()
    ok, skipped, err = True, False, ""
    out = io.StringIO()
    hide = quiet and not args.verbose
    with dvmlang.trace(max_events=200_000 if args.trace else 0, summary_only=not args.trace) as t, \
            warnings.catch_warnings(), contextlib.redirect_stdout(out) if hide else contextlib.nullcontext():
        if hide:
            warnings.simplefilter("ignore")
        try:
            mod = _load(f)
            if not hasattr(mod, "run"):
                raise RuntimeError("example has no run() function")
            mod.run()
        except ModuleNotFoundError as e:
            if e.name in OPTIONAL_NEEDS:
                skipped, err = True, f"needs {e.name} (pip install -e '.[test]')"
            else:
                ok, err = False, f"{type(e).__name__}: {e}"
        except AssertionError as e:
            ok = False
            err = f"wrong result: {str(e).strip().splitlines()[0] if str(e).strip() else 'assertion failed'}"
        except Exception as e:  # noqa: BLE001 - report and keep going
            ok = False
            err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if args.verbose:
                traceback.print_exc()
    return ok, skipped, err, t, time.perf_counter() - t0


# the gallery's sections after examples/*.py: folder -> title
SECTIONS = {"triton/": "Triton tutorials", "multi_npu/": "multi-npu (many simulated NPUs)"}


def _has_run(path: Path) -> bool:
    """A gallery example defines ``run()`` (multi_npu/ also holds modules the examples share)."""
    return "\ndef run(" in path.read_text()


def _first_of_each_kernel(launches) -> list:
    seen, out = set(), []
    for launch in launches:
        if launch.name not in seen:
            seen.add(launch.name)
            out.append(launch)
    return out


def cmd_gallery(args) -> int:
    console = Console()
    d = _examples_dir(args.dir)
    if d is None:
        where = f"in {args.dir}" if args.dir else "(pass --dir or run from the repository)"
        return _fail("gallery", f"no examples directory found {where}", 2)
    sections = [("", sorted(p for p in d.glob("*.py") if not p.name.startswith("_")))]
    if not args.no_triton and (d / "triton").is_dir():  # Triton's tutorials, ported (examples/triton/README.md)
        sections.append(("triton/", sorted(p for p in (d / "triton").glob("*.py") if not p.name.startswith("_"))))
    if not args.no_multi_npu and (d / "multi_npu").is_dir():  # systems of simulated NPUs (docs/distributed.md)
        sections.append(("multi_npu/", sorted(p for p in (d / "multi_npu").glob("*.py")
                                              if not p.name.startswith("_") and _has_run(p))))
    if args.only:
        sections = [(pre, [f for f in files if any(o in pre + f.stem or o in pre.replace("_", "-") + f.stem
                                                   for o in args.only)]) for pre, files in sections]
    sections = [(pre, files) for pre, files in sections if files]
    if not sections:
        return _fail("gallery", f"no example in {d} matched {' '.join(args.only)}", 2)
    table = Table(title=Text(f"dvmlang gallery ({d})"))
    for col, just in (("example", "left"), ("correct", "center"), ("launches", "right"),
                      ("simulated\ncycles", "right"), ("simulated\ntime", "right"), ("wall\ntime", "right")):
        table.add_column(col, justify=just, no_wrap=col != "example", overflow="ellipsis")
    failures, skips, sessions = [], [], []
    from rich.progress import Progress
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("running examples", total=sum(len(files) for _, files in sections))
        for pre, files in sections:
            if pre:
                if len(sections) > 1:
                    table.add_section()
                table.add_row(Text(SECTIONS[pre], style="bold"), Text("(torch)" if pre == "triton/" else ""))
            for f in files:
                name = pre + f.stem
                progress.update(task, description=f"running {name}")
                ok, skipped, err, t, wall = _run_example(f, args, quiet=pre == "triton/")
                cycles = sum(launch.cycles for launch in t.launches)
                us = sum(launch.time_us for launch in t.launches)
                us += sum(r.time_us for r in t.comm if r.op != "remote")  # (a system's collectives, when any)
                table.add_row(Text(f.stem), Text("skipped" if skipped else "yes" if ok else "NO"), str(len(t.launches)),
                              f"{cycles:,}", f"{us:,.1f} us", f"{wall * 1e3:,.0f} ms")
                if skipped:
                    skips.append((name, err))
                elif not ok:
                    failures.append((name, err))
                # a tutorial's trace shows the first launch of each of its kernels (its benchmark launches many)
                sessions.append((name, _first_of_each_kernel(t.launches) if pre == "triton/" else t.launches, t.comm))
                progress.advance(task)
    if args.trace:
        from .trace.views import render
        for name, launches, comm in sessions:
            if launches or (args.view == "comm" and comm):
                console.rule(Text(name))
                render(launches, args.view, console=console, **({"records": comm} if args.view == "comm" else {}))
    console.print(table)
    for name, err in skips:
        console.print(Text(f"skipped {name}: {err}"))
    for name, err in failures:
        console.print(Text(f"FAILED {name}: {err}"))
    return 1 if failures else 0


def _fail(command: str, reason: str, code: int = 1) -> int:
    """Print a one-line reason on stderr and return the exit status."""
    Console(stderr=True, highlight=False).print(Text(f"dvmlang {command}: {reason}"), soft_wrap=True)
    return code


def _print_script_traceback(e: BaseException) -> None:
    """The script's traceback on stderr, from its first frame (this command's and runpy's frames dropped), as
    ``python SCRIPT.py`` would print it."""
    tb = e.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == __file__ or "runpy" in tb.tb_frame.f_code.co_filename
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(e), e, tb)))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _parse_cycles(text: str | None):
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (float(lo.replace(",", "").replace("_", "")), float(hi.replace(",", "").replace("_", "")))
    except ValueError:
        raise ValueError(f"--cycles wants START:END in cycles (for example 0:5000), got {text!r}") from None


def _parse_cores(text: str | None):
    if text is None:
        return None
    try:
        if "," in text or "-" in text:
            ids = []
            for part in text.split(","):
                a, sep, b = part.partition("-")
                ids.extend(range(int(a), int(b) + 1) if sep else [int(a)])
            return ids
        return int(text)
    except ValueError:
        raise ValueError(f"--cores wants a count (4) or core ids (0,2,5 or 0-3), got {text!r}") from None


def _view_options(args) -> dict:
    options = {"cycles": _parse_cycles(args.cycles), "cores": _parse_cores(args.cores)}
    if args.width is not None:
        options["width"] = args.width
    return {k: v for k, v in options.items() if v is not None}


def cmd_trace(args) -> int:
    from .errors import DvmError
    from .trace.record import Session
    script = Path(args.script)
    if not script.is_file():
        return _fail("trace", f"no such script: {script}", 2)
    try:
        options = _view_options(args)
    except ValueError as e:
        return _fail("trace", str(e), 2)
    console = Console(width=args.width) if args.width else Console()
    try:
        session = Session(max_events=None if args.max_events < 0 else args.max_events, sample=args.sample,
                          summary_only=args.summary_only, progress=True)
    except DvmError as e:
        return _fail("trace", str(e), 2)
    if args.triton:
        from .triton import bind
        bind()  # `import triton` in the script (and the packages it imports) is dvmlang.triton
    with session as t:
        # as `python SCRIPT.py` runs it: argv, the script's folder first on sys.path, __main__
        old_argv, old_path = sys.argv, list(sys.path)
        sys.argv = [str(script)] + list(args.script_args)
        sys.path.insert(0, str(script.resolve().parent))
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                return _fail("trace", f"{script} exited with status {e.code}")
        except Exception as e:  # noqa: BLE001 - the script's failure: its traceback, as Python prints it
            _print_script_traceback(e)
            return _fail("trace", f"{script} failed: {_first_line(e)}")
        finally:
            sys.argv = old_argv
            sys.path[:] = old_path
    launches = t.launches
    if not launches and not (args.view == "comm" and t.comm):
        return _fail("trace", f"{script} launched no kernel (nothing to show)")
    if args.kernel:
        names = sorted({launch.name for launch in launches})
        launches = [launch for launch in launches if launch.name == args.kernel]
        if not launches:
            return _fail("trace", f"no launch of a kernel named {args.kernel!r}; launched: {', '.join(names)}")
    from .trace.views import render
    try:
        if args.view == "comm":
            options["records"] = t.comm
        render(launches, args.view, console=console, **options)
        if args.chrome:
            if t.comm:  # systems of NPUs: a process per device, the links, flows from sends to receives
                from .trace.system_chrome import save_records_chrome
                save_records_chrome(t.comm, launches, args.chrome)
            else:
                from .trace.chrome import save_chrome
                save_chrome(launches, args.chrome)
            console.print(Text(f"wrote {args.chrome} (open it at https://ui.perfetto.dev)"))
    except DvmError as e:
        return _fail("trace", str(e).splitlines()[0], 2)
    return 0


def cmd_disasm(args) -> int:
    from .errors import DvmError
    from .vm.container import read_file
    from .vm.container import LIMITS
    from .vm.dump import disassemble_bytes
    path = Path(args.file)
    try:
        data = read_file(path, LIMITS.max_file_bytes)
    except DvmError as e:
        return _fail("disasm", str(e).removeprefix("malformed bytecode: "), 2)
    result = disassemble_bytes(data, source=not args.no_source)
    print(result.text)
    if not result.ok:
        return _fail("disasm", f"{path} is not valid bytecode: {result.errors[0]}")
    return 0


def cmd_cache(args) -> int:
    from . import cache
    if args.clear:
        print(f"removed {cache.clear()} build(s) from {cache.root()}")
        return 0
    i = cache.info()
    if i["root"] is None:
        print("the disk cache is off (DVMLANG_CACHE_DIR=off)")
        return 0
    print(f"builds on disk: {i['root']} (DVMLANG_CACHE_DIR overrides it)")
    print(f"  this version ({i['version']}): {i['entries']} build(s), {i['bytes'] / 1024:.1f} KiB")
    print(f"  all versions: {i['all_entries']} build(s), {i['all_bytes'] / 1024:.1f} KiB")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus the hint to ask for --help) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from . import __version__
    from .triton import __version__ as triton_api
    return f"dvmlang {__version__} (Triton API {triton_api}; Python {sys.version.split()[0]})"


def main(argv=None) -> int:
    from .trace.views import VIEWS
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:  # `dvmlang trace SCRIPT.py [options] -- ARGS...`: ARGS go to the script
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    parser = _Parser(prog="dvmlang", description="dvmlang: NPU kernels on a bytecode VM")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("gallery", help="run every example, check it against numpy, and print a table",
                       description="Run every example of the gallery (examples/*.py, each with a run() function), "
                                   "check it against numpy, then Triton's tutorials ported to dvmlang "
                                   "(examples/triton/*.py, checked against torch), and print a table of simulated "
                                   "cycles and wall time. Exits 1 when an example is wrong or fails; a tutorial "
                                   "whose torch is not installed is skipped.")
    g.add_argument("--dir", help="examples directory (default: ./examples or the repository's)")
    g.add_argument("--trace", action="store_true", help="record and show a trace of every launch")
    g.add_argument("--view", default="summary", choices=[v for v in VIEWS if v != "compare"],
                   help="trace view to show with --trace (default: summary)")
    g.add_argument("--only", nargs="*", help="run only examples whose name contains one of these")
    g.add_argument("--no-triton", action="store_true",
                   help="skip the Triton tutorials (examples/triton/; they need torch and are skipped without it)")
    g.add_argument("--no-multi-npu", action="store_true",
                   help="skip the multi-npu section (examples/multi_npu/: systems of simulated NPUs, torch.distributed)")
    g.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failing examples")
    g.set_defaults(func=cmd_gallery)
    t = sub.add_parser("trace", help="run a script and show a trace of every launch it makes",
                       description="Run SCRIPT.py as `python SCRIPT.py` would (as __main__, its folder first on "
                                   "sys.path) with tracing on, then show every kernel launch it made; a failing "
                                   "script's traceback is printed. Arguments after `--` are passed to the script.",
                       epilog="views: summary (cycles, bandwidth vs roofline, what bounds the kernel), source "
                              "(lines with their share of cycles), timeline (per core and pipe), disasm, table, "
                              "compare (the first two launches side by side), comm (collectives, links and ranks "
                              "of simulated systems), all.")
    t.add_argument("script", help="the Python script to run")
    t.add_argument("--view", default="summary", choices=VIEWS, help="what to show (default: summary)")
    t.add_argument("--kernel", help="only launches of this kernel")
    t.add_argument("--chrome", metavar="OUT.json", help="also write a Chrome/Perfetto trace JSON here")
    t.add_argument("--cycles", metavar="START:END", help="timeline cycle range (default: the whole launch)")
    t.add_argument("--cores", help="timeline cores: a count (default 4) or ids such as 0,2,5 or 0-3")
    t.add_argument("--width", type=int, help="render width in characters (default: the terminal's)")
    t.add_argument("--max-events", type=int, default=2_000_000,
                   help="stop recording rows after this many (-1: no limit; totals stay exact)")
    t.add_argument("--sample", type=int, default=1, help="record the rows of every n-th program only")
    t.add_argument("--summary-only", action="store_true", help="record exact totals but no rows")
    t.add_argument("--triton", action="store_true",
                   help="bind `import triton` to dvmlang.triton first (a Triton program runs unedited)")
    t.set_defaults(func=cmd_trace)
    d = sub.add_parser("disasm", help="disassemble a .dvmb file",
                       description="Disassemble a .dvmb bytecode file: line | offset | pipe | OPNAME | operands | "
                                   "; comment, with the kernel's source lines interleaved. Exits 1 when the file "
                                   "is not valid bytecode (the listing goes as far as it can).")
    d.add_argument("file", help="a .dvmb file (kernel.export(...) or Bytecode.save(...) writes one)")
    d.add_argument("--no-source", action="store_true", help="do not interleave kernel source lines")
    d.set_defaults(func=cmd_disasm)
    c = sub.add_parser("cache", help="show (or clear) the builds kept on disk",
                       description="Show where the disk cache of builds is (DVMLANG_CACHE_DIR, default "
                                   "~/.cache/dvmlang) and what it holds; --clear removes every build in it.")
    c.add_argument("--clear", action="store_true", help="remove every build (all versions)")
    c.set_defaults(func=cmd_cache)
    args = parser.parse_args(argv)
    if args.command != "trace" and script_args:
        parser.error(f"`--` passes arguments to a traced script; `{args.command}` takes none")
    args.script_args = script_args
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
