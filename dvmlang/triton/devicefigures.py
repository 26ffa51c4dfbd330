"""The simulated device's figures under Triton's names, shared by ``runtime.driver`` (device properties) and
``testing`` (the perf-model helpers): one place for how a profile becomes a memory clock and bus width."""

from __future__ import annotations

from ..errors import LaunchError

MEM_BUS_WIDTH = 4096  # bits: with mem_clock_khz, 2 * clock * width / 8 is the profile's HBM bandwidth


def profile(device=None):
    """The default device's profile; ``device`` must be index 0 (the only device)."""
    check_device(device)
    from ..npu.device import default_device
    return default_device().profile


def check_device(device) -> None:
    index = getattr(device, "index", device)
    if index not in (0, None):
        raise LaunchError(f"device {device!r}: the simulated NPU is the only device, index 0")


def mem_clock_khz(p) -> int:
    """The memory clock (kHz) that gives the profile's HBM bandwidth over ``MEM_BUS_WIDTH`` bits, double data rate."""
    return int(p.hbm_bytes_per_s * 8 / (2 * MEM_BUS_WIDTH) / 1e3)
