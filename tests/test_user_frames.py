"""Errors as users see them: their own call site and the diagnostic, not dvmlang's frames.

A ``DvmError`` leaving a public entry point carries a traceback without dvmlang's internals (one frame of
the entry point remains: the ``raise`` line, whose comment says how to see the rest); ``DVMLANG_TRACEBACK=1``
keeps every frame for debugging dvmlang itself.
"""

import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

PACKAGE = os.path.dirname(dvmlang.__file__) + os.sep


@dvmlang.kernel
def undefined_name(x_ptr, B: dl.constexpr):
    offs = dl.arange(0, B)
    dl.store(x_ptr + offs, dl.load(x_ptr + offs) + no_such_name)  # noqa: F821 - the error under test


@dvmlang.kernel
def out_of_bounds(x_ptr, B: dl.constexpr):
    dl.store(x_ptr + dl.arange(0, B), 1.0)


def _dvmlang_frames(err: BaseException) -> list[str]:
    return [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_tb(err.__traceback__)
            if f.filename.startswith(PACKAGE)]


def _only_entry_frames(err: BaseException) -> bool:
    """Whether the one dvmlang frame left is an entry point's ``raise`` (``user_frames``, or a launch's
    ``kernel[grid](...)`` or ``kernel.encode``, which inline it), the line that says how to see the rest."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(PACKAGE)]
    return len(frames) <= 1 and all("DVMLANG_TRACEBACK=1" in f.line and f.name in ("entry", "_launch", "encode")
                                    for f in frames)


def test_compile_error_shows_no_compiler_frames():
    x = np.zeros(16, np.float32)
    with pytest.raises(dvmlang.KernelTypeError) as info:
        undefined_name[(1,)](x, B=16)
    assert "no_such_name" in str(info.value)
    assert _only_entry_frames(info.value), _dvmlang_frames(info.value)
    assert not any("ast.py" in f.filename for f in traceback.extract_tb(info.value.__traceback__))
    assert info.value.__suppress_context__


def test_device_fault_shows_no_simulator_frames():
    x = np.zeros(8, np.float32)
    with pytest.raises(dvmlang.MemoryFault) as info:
        out_of_bounds[(1,)](x, B=16)
    assert _only_entry_frames(info.value), _dvmlang_frames(info.value)
    assert np.all(x == 0) or np.all(x[:8] == 1)  # what a faulted launch leaves: see docs/device.md


def test_every_kernel_entry_point_trims():
    x = np.zeros(16, np.float32)
    for call in (lambda: undefined_name.run((1,), x, B=16), lambda: undefined_name.encode((1,), x, B=16),
                 lambda: undefined_name.ir(x, B=16), lambda: undefined_name.build_for(x, B=16)):
        with pytest.raises(dvmlang.KernelTypeError) as info:
            call()
        assert _only_entry_frames(info.value), _dvmlang_frames(info.value)


def test_other_exceptions_keep_their_traceback():
    """A non-dvmlang exception is a dvmlang bug: it keeps every frame so it can be reported."""
    from dvmlang.errors import user_frames

    @user_frames
    def broken():
        raise KeyError("internal")

    with pytest.raises(KeyError) as info:
        broken()
    assert any(f.name == "broken" for f in traceback.extract_tb(info.value.__traceback__))


SCRIPT = textwrap.dedent("""
    import numpy as np
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def k(x_ptr, B: dl.constexpr):
        offs = dl.arange(0, B)
        dl.store(x_ptr + offs, dl.load(x_ptr + offs) + no_such_name)

    k[(1,)](np.zeros(16, np.float32), B=16)   # the user's call site
""")


def _run(tmp_path, env_extra):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "DVMLANG_TRACEBACK"} | env_extra
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)


def test_script_prints_call_site_and_diagnostic_only(tmp_path):
    err = _run(tmp_path, {}).stderr
    assert "the user's call site" in err and "no_such_name" in err and "^^^^" in err
    assert "codegen.py" not in err and "ast.py" not in err
    shown = [line for line in err.splitlines() if line.strip().startswith("File ") and PACKAGE in line]
    assert len(shown) == 1 and "DVMLANG_TRACEBACK=1" in err, err  # the entry point's raise line, no more
    assert len(err.splitlines()) < 15, err


def test_debug_switch_shows_dvmlang_frames(tmp_path):
    err = _run(tmp_path, {"DVMLANG_TRACEBACK": "1"}).stderr
    assert "codegen.py" in err and "no_such_name" in err


def _graph_with_bad_reshape(x):
    return dvmlang.ops.reshape(x, (7, 7))  # the user's line: the error must show it


@pytest.mark.parametrize("entry", ["graph", "eager", "lazy", "lazy_index", "bytecode"])
def test_tensor_and_bytecode_entry_points_trim(entry):
    import dvmlang.ops as ops
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(dvmlang.DvmError) as info:
        if entry == "graph":
            dvmlang.graph(_graph_with_bad_reshape)(x)
        elif entry == "eager":
            ops.reshape(dvmlang.tensor(x), (7, 7))
        elif entry == "lazy":
            with dvmlang.lazy():
                ops.reshape(dvmlang.tensor(x), (7, 7))
        elif entry == "lazy_index":
            with dvmlang.lazy():
                dvmlang.tensor(x)[10]
        else:
            dvmlang.Bytecode.from_bytes(b"not bytecode at all")
    assert _only_entry_frames(info.value), _dvmlang_frames(info.value)
    if entry == "graph":  # the user's own function inside the graph call is kept
        assert any(f.name == "_graph_with_bad_reshape" for f in traceback.extract_tb(info.value.__traceback__))
