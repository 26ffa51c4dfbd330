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
    if explicit:
        candidates.append(Path(explicit))
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


def cmd_gallery(args) -> int:
    import dvmlang
    console = Console()
    d = _examples_dir(args.dir)
    if d is None:
        console.print(Text("dvmlang gallery: no examples directory found (pass --dir or run from the repository)"))
        return 2
    files = sorted(p for p in d.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        files = [f for f in files if any(o in f.stem for o in args.only)]
    if not files:
        console.print(Text("dvmlang gallery: no examples matched"))
        return 2
    table = Table(title=Text(f"dvmlang gallery ({d})"))
    for col, just in (("example", "left"), ("correct", "center"), ("launches", "right"),
                      ("simulated cycles", "right"), ("simulated time", "right"), ("wall time", "right")):
        table.add_column(col, justify=just)
    failures = []
    sessions = []
    from rich.progress import Progress
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("running examples", total=len(files))
        for f in files:
            progress.update(task, description=f"running {f.stem}")
            t0 = time.perf_counter()
            ok = True
            err = ""
            with dvmlang.trace(max_events=200_000 if args.trace else 0, summary_only=not args.trace) as t:
                try:
                    mod = _load(f)
                    if not hasattr(mod, "run"):
                        raise RuntimeError("example has no run() function")
                    mod.run()
                except AssertionError as e:
                    ok = False
                    err = f"wrong result: {str(e).strip().splitlines()[0] if str(e).strip() else 'assertion failed'}"
                except Exception as e:  # noqa: BLE001 - report and keep going
                    ok = False
                    err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    if args.verbose:
                        traceback.print_exc()
            wall = time.perf_counter() - t0
            cycles = sum(launch.cycles for launch in t.launches)
            us = sum(launch.time_us for launch in t.launches)
            table.add_row(Text(f.stem), Text("yes" if ok else "NO"), str(len(t.launches)), f"{cycles:,}",
                          f"{us:,.1f} us", f"{wall * 1e3:,.0f} ms")
            if not ok:
                failures.append((f.stem, err))
            sessions.append((f.stem, t))
            progress.advance(task)
    if args.trace:
        for name, t in sessions:
            if t.launches:
                console.rule(Text(name))
                t.print(view=args.view, console=console)
    console.print(table)
    for name, err in failures:
        console.print(Text(f"FAILED {name}: {err}"))
    return 1 if failures else 0


def cmd_trace(args) -> int:
    import dvmlang
    console = Console()
    script = Path(args.script)
    if not script.is_file():
        console.print(Text(f"dvmlang trace: no such script: {script}"))
        return 2
    with dvmlang.trace(max_events=args.max_events) as t:
        old_argv = sys.argv
        sys.argv = [str(script)] + list(args.script_args)
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                console.print(Text(f"dvmlang trace: {script} exited with status {e.code}"))
                return 1
        except Exception as e:  # noqa: BLE001
            console.print(Text(f"dvmlang trace: {script} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            return 1
        finally:
            sys.argv = old_argv
    launches = t.launches
    if args.kernel:
        launches = [launch for launch in launches if launch.name == args.kernel]
        if not launches:
            console.print(Text(f"dvmlang trace: no launch of a kernel named {args.kernel!r}"))
            return 1
    from .trace.views import render
    try:
        render(launches, args.view, console=console)
    except dvmlang.DvmError as e:
        console.print(Text(f"dvmlang trace: {e}"))
        return 2
    if args.chrome:
        from .trace.chrome import save_chrome
        save_chrome(launches, args.chrome)
        console.print(Text(f"wrote {args.chrome} (open it at https://ui.perfetto.dev)"))
    return 0


def cmd_disasm(args) -> int:
    from .vm.disasm import disassemble_bytes
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as e:
        print(f"dvmlang disasm: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    result = disassemble_bytes(data, source=not args.no_source)
    print(result.text)
    if not result.ok:
        print(f"dvmlang disasm: {path} is not valid bytecode: {result.errors[0]}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dvmlang", description="dvmlang: NPU kernels on a bytecode VM")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gallery", help="run every example, check it against numpy, and print a table")
    g.add_argument("--dir", help="examples directory (default: ./examples or the repository's)")
    g.add_argument("--trace", action="store_true", help="record and show a trace of every launch")
    g.add_argument("--view", default="summary", help="trace view to show with --trace (default: summary)")
    g.add_argument("--only", nargs="*", help="run only examples whose name contains one of these")
    g.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failing examples")
    g.set_defaults(func=cmd_gallery)
    t = sub.add_parser("trace", help="run a script and show a trace of every launch it makes")
    t.add_argument("script")
    t.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    t.add_argument("--view", default="summary", help="summary, table, source, timeline, disasm or all")
    t.add_argument("--kernel", help="only launches of this kernel")
    t.add_argument("--chrome", help="also write a Chrome/Perfetto trace JSON here")
    t.add_argument("--max-events", type=int, default=2_000_000, help="stop recording rows after this many")
    t.set_defaults(func=cmd_trace)
    d = sub.add_parser("disasm", help="disassemble a .dvmb file")
    d.add_argument("file")
    d.add_argument("--no-source", action="store_true", help="do not interleave kernel source lines")
    d.set_defaults(func=cmd_disasm)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
