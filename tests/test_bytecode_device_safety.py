"""Bytecode that validates but computes hostile values at run time faults cleanly; it never crashes the
process. These run in a subprocess, so a regression shows up as a failed test rather than a dead suite."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def strided_load(x_ptr, out_ptr, s, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs * s, mask=offs < 3, other=0)
    dl.store(out_ptr + offs, x, mask=offs < 3)


def test_wrapping_stride_is_a_memory_fault_not_a_crash():
    # stride 1 - 2**63: elements 0 and 2 wrap back into range in int64, element 1 lies 2**63 bytes away
    code = textwrap.dedent(f"""
        import numpy as np, dvmlang, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_bytecode_device_safety import strided_load
        x = np.arange(8, dtype=np.int8)
        out = np.zeros(8, np.int8)
        try:
            strided_load[(1,)](x, out, -(2**63) + 1, BLOCK=4)
        except dvmlang.MemoryFault as e:
            print("fault", e.tensor)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "fault x_ptr" in r.stdout


@pytest.mark.parametrize("s", [1, 2, 5])
def test_ordinary_strides_still_work(s):
    x = np.arange(16, dtype=np.int8)
    out = np.zeros(8, np.int8)
    strided_load[(1,)](x, out, s, BLOCK=4)
    np.testing.assert_array_equal(out[:3], x[:3 * s:s])


@pytest.mark.parametrize("s", [-1, 2**40, -(2**62)])
def test_out_of_range_strides_fault(s):
    with pytest.raises(dvmlang.MemoryFault, match="x_ptr"):
        strided_load[(1,)](np.arange(16, dtype=np.int8), np.zeros(8, np.int8), s, BLOCK=4)
