"""`dvmlang trace`, `dvmlang disasm`, `dvmlang gallery`: help, views, Chrome export, and failures that
exit non-zero with a one-line reason."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dvmlang.cli import main

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def twice(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    @dvmlang.kernel
    def plus_one(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    x = np.arange(n, dtype=np.float32)
    out = np.empty_like(x)
    twice[(dl.cdiv(n, 256),)](x, out, n, BLOCK=256)
    plus_one[(dl.cdiv(n, 512),)](x, out, n, BLOCK=512)
    print("script ran with n =", n)
''')


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "two_kernels.py"
    p.write_text(SCRIPT)
    return p


def _one_line_error(err: str, *fragments):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.mark.parametrize("command", [[], ["trace"], ["disasm"], ["gallery"]])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main(command + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: dvmlang" in out
    if command == ["trace"]:
        for option in ("--chrome", "--view", "--kernel", "--cycles", "--cores", "--sample", "--summary-only"):
            assert option in out


@pytest.mark.parametrize("view", ["summary", "source", "timeline", "disasm", "table", "compare", "all"])
def test_trace_shows_every_view(script, view, capsys):
    assert main(["trace", str(script), "--view", view, "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "script ran with n = 1000" in out
    assert "twice" in out and "plus_one" in out


def test_trace_kernel_filter_chrome_and_script_arguments(script, tmp_path, capsys):
    out_json = tmp_path / "t.json"
    assert main(["trace", str(script), "--kernel", "plus_one", "--view", "timeline", "--cores", "0-1",
                 "--cycles", "0:300", "--chrome", str(out_json), "--width", "120", "--", "3000"]) == 0
    out = capsys.readouterr().out
    assert "n = 3000" in out and "plus_one: timeline" in out and "twice" not in out
    assert "cores 0, 1 of 48" in out
    doc = json.loads(out_json.read_text())
    kernels = {ev["args"].get("kernel") for ev in doc["traceEvents"] if ev["ph"] == "X" and ev["pid"] != 1}
    assert kernels == {"plus_one"}


def test_trace_limits_reach_the_session(script, capsys):
    assert main(["trace", str(script), "--summary-only", "--view", "timeline"]) == 0
    assert "no rows recorded" in capsys.readouterr().out
    assert main(["trace", str(script), "--sample", "3", "--view", "summary"]) == 0
    assert "sampled every 3th program" in capsys.readouterr().out


@pytest.mark.parametrize("args, code, fragments", [
    (["trace", "no/such/script.py"], 2, ["no such script"]),
    (["trace", "{script}", "--kernel", "nope"], 1, ["no launch of a kernel named 'nope'", "twice"]),
    (["trace", "{script}", "--view", "flame"], 2, ["invalid choice: 'flame'", "--help"]),
    (["trace", "{script}", "--cycles", "soon"], 2, ["--cycles wants START:END"]),
    (["trace", "{script}", "--cores", "x"], 2, ["--cores wants a count"]),
    (["trace", "{script}", "--cores", "70", "--view", "timeline", "--kernel", "twice"], 0, []),
    (["trace", "{script}", "--cores", "0,70", "--view", "timeline"], 2, ["core 70 does not exist"]),
    (["trace", "{script}", "--sample", "0"], 2, ["sample must be a positive integer"]),
    (["disasm", "no/such/file.dvmb"], 2, ["cannot read"]),
    (["gallery", "--dir", "{empty}"], 2, ["no examples directory"]),
    (["gallery", "--dir", str(ROOT / "examples"), "--only", "zzz"], 2, ["matched zzz"]),
    (["gallery", "--", "x"], 2, ["takes none"]),
])
def test_failures_exit_non_zero_with_one_line(args, code, fragments, script, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    args = [a.format(script=script, empty=tmp_path / "empty") for a in args]
    try:
        got = main(args)
    except SystemExit as e:  # argparse usage errors
        got = e.code
    assert got == code
    err = capsys.readouterr().err
    if fragments:
        _one_line_error(err, *fragments)


def test_a_failing_script_shows_its_traceback_then_one_line(script, capsys):
    # as `python SCRIPT.py` shows it (issue 36): the script's frames, none of dvmlang trace's or runpy's
    assert main(["trace", str(script), "--", "not-a-number"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert str(script) in err[1] and "runpy" not in "\n".join(err) and "cli.py" not in "\n".join(err)
    assert err[-2].startswith("ValueError: invalid literal for int()")
    assert err[-1].startswith("dvmlang trace: ") and "failed: ValueError" in err[-1]


def test_trace_runs_a_script_as_python_does(tmp_path, capsys):
    # its folder first on sys.path (a helper module beside it imports), __name__ == "__main__", --triton binds
    # `import triton` to dvmlang.triton
    (tmp_path / "helper_mod.py").write_text(textwrap.dedent('''
        import numpy as np
        import triton
        import triton.language as tl

        @triton.jit
        def inc(x, n, B: tl.constexpr):
            o = tl.arange(0, B)
            tl.store(x + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)

        def go():
            x = np.zeros(5, np.float32)
            inc[(1,)](x, 5, B=8)
            return x
    '''))
    main_py = tmp_path / "main_script.py"
    main_py.write_text("import helper_mod\nprint(__name__, helper_mod.go().tolist())\n")
    try:
        assert main(["trace", "--triton", "--summary-only", str(main_py)]) == 0
    finally:
        import dvmlang.triton
        dvmlang.triton.unbind()
    assert "__main__ [1.0, 1.0, 1.0, 1.0, 1.0]" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    import dvmlang
    import dvmlang.triton
    out = capsys.readouterr().out
    assert out.startswith(f"dvmlang {dvmlang.__version__}") and f"Triton API {dvmlang.triton.__version__}" in out


def test_a_script_that_launches_nothing_or_exits_non_zero(tmp_path, capsys):
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print('hello')\n")
    assert main(["trace", str(quiet)]) == 1
    _one_line_error(capsys.readouterr().err, "launched no kernel")
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.exit(3)\n")
    assert main(["trace", str(bad)]) == 1
    _one_line_error(capsys.readouterr().err, "exited with status 3")


def test_disasm_of_exported_bytecode_and_of_garbage(script, tmp_path, capsys):
    import numpy as np
    import dvmlang.language as dl
    from dvmlang.runtime import Kernel  # noqa: F401 - the kernel object type
    ns = {"__name__": "exported"}
    path = tmp_path / "k.py"
    path.write_text(SCRIPT.split("n = int")[0])
    code = compile(path.read_text(), str(path), "exec")
    exec(code, ns)
    x = np.arange(100, dtype=np.float32)
    ns["twice"].export(tmp_path / "twice.dvmb", (dl.cdiv(100, 64),), x, np.empty_like(x), 100, BLOCK=64)
    assert main(["disasm", str(tmp_path / "twice.dvmb")]) == 0
    out = capsys.readouterr().out
    assert "DMA_LOAD1" in out and "OPNAME" in out
    (tmp_path / "junk.dvmb").write_bytes(b"not bytecode at all")
    assert main(["disasm", str(tmp_path / "junk.dvmb")]) == 1
    _one_line_error(capsys.readouterr().err, "is not valid bytecode")


def test_the_installed_command_runs_as_a_process(script):
    r = subprocess.run([sys.executable, "-m", "dvmlang.cli", "trace", str(script), "--kernel", "missing"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    _one_line_error(r.stderr, "no launch of a kernel named 'missing'")
