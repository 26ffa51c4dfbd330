"""No legitimate kernel refused: divergent data-dependent loops run with every program's own trip count (the parts
of a batch meet again where their paths join), the budget is per program, and Ctrl-C stops any launch."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device


@dvmlang.kernel
def collatz(x_ptr, out_ptr):
    pid = dl.program_id(0)
    n = dl.load(x_ptr + pid)
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    dl.store(out_ptr + pid, steps)


def _collatz_reference(x: np.ndarray) -> np.ndarray:
    out = []
    for v in x.tolist():
        s = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        out.append(s)
    return np.array(out, np.int32)


@pytest.mark.parametrize("programs", [1, 7, 300])
def test_collatz_step_counts_agree_on_every_device(programs):
    """Programs whose loops run 0 to 200+ trips: the same counts and cycles on the batched, the compiled and the
    sequential device (the batched device runs the loop's body for the programs still in it, together)."""
    x = (np.arange(programs, dtype=np.int32) * 37 + 1) % 5000 + 1
    want = _collatz_reference(x)
    seen = []
    for device in (Device(compiled=False), Device(compiled="always"), Device(sequential=True)):
        out = np.zeros(programs, np.int32)
        rec = collatz[(programs,)](x, out, device=device)
        np.testing.assert_array_equal(out, want)
        seen.append((rec.cycles, rec.bytes_read, rec.bytes_written, rec.pipe_busy))
    assert seen[0] == seen[1] == seen[2]


@dvmlang.kernel
def spin(out_ptr, n):
    i = 0
    while i < n:
        i = i * 1
    dl.store(out_ptr, i)


@pytest.mark.parametrize("compiled", [False, True])
def test_ctrl_c_stops_a_launch_and_the_device_runs_on(compiled):
    """A launch with a budget that would take hours stops at Ctrl-C (a KeyboardInterrupt, as any Python code
    does), leaves the array it never stored to as it was, and the device runs the next launch as usual. (The
    bound below only says the interrupt was honoured; benchmarks/sim_speed.py measures how soon.)"""
    dev = Device(watchdog=1 << 50, compiled=compiled)
    out = np.full(1, 5, np.int32)
    # (a process started in the background of a shell ignores SIGINT, and then ``interrupt_main`` does nothing:
    # Python's own handler, as an interactive process has it, for the test's duration)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    t0 = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            spin[(64,)](out, 10, device=dev)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, handler)
    assert time.perf_counter() - t0 < 60
    assert out[0] == 5  # the store after the loop never ran
    spin[(64,)](out, 0, device=dev)
    assert out[0] == 0
    x = np.arange(1, 9, dtype=np.int32)
    got = np.zeros(8, np.int32)
    collatz[(8,)](x, got, device=dev)
    np.testing.assert_array_equal(got, _collatz_reference(x))
