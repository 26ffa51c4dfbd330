"""``triton.runtime.driver``: the simulated NPU as Triton's active driver.

There is one device (index 0), the default ``dvmlang.npu.Device``; its numbers come from its
``npu.profile.Profile`` (docs/device.md).

The backend's name is the torch device that tensors for it live on, because that is what packages do with it:
they call ``getattr(torch, backend)`` for the device module (streams, ``current_device()``, ``synchronize()``)
and make tensors on ``torch.device(backend)``. The simulated device reads host memory, so the name is
``"cpu"``; only when Ascend's torch extension (``torch_npu``) is installed, and ``torch.npu`` exists, is it
``"npu"`` (packages then take their Ascend paths; ``get_active_torch_device()`` stays the CPU, where the
simulator's tensors live). ``"npu"`` without the extension sent packages to a ``torch.npu`` that does not exist.
"""

from __future__ import annotations

import importlib.util
import sys

from ...errors import LaunchError
from ..backends.compiler import GPUTarget


def _backend_name() -> str:
    """``"npu"`` where Ascend's torch extension is importable, else ``"cpu"`` (module docstring)."""
    try:
        return "npu" if importlib.util.find_spec("torch_npu") is not None else "cpu"
    except (ImportError, ValueError):
        return "cpu"


TARGET = GPUTarget(_backend_name(), "dvmlang-sim", 32)


from ..devicefigures import MEM_BUS_WIDTH, check_device as _check_device, mem_clock_khz, profile as _device_profile


def _profile():
    return _device_profile()


class _Utils:
    def get_device_properties(self, device: int = 0) -> dict:
        """Triton's keys, from the device profile. ``multiprocessor_count`` is the vector core count (the cores a
        kernel's programs are spread over), ``max_shared_mem`` the Unified Buffer of one core; ``max_num_regs``
        and ``warpSize`` are reported for programs that compute occupancy from them and mean nothing here.
        ``mem_clock_rate`` (kHz) and ``mem_bus_width`` (bits) are chosen so that Triton's
        ``2 * clock * width / 8`` is the profile's HBM bandwidth."""
        _check_device(device)
        p = _profile()
        return {
            "max_shared_mem": p.ub_bytes,
            "max_num_regs": 65536,
            "multiprocessor_count": p.vector_cores,
            "warpSize": TARGET.warp_size,
            "sm_clock_rate": int(p.clock_hz / 1e3),
            "mem_clock_rate": mem_clock_khz(p),
            "mem_bus_width": MEM_BUS_WIDTH,
            # the keys Ascend's Triton backend reports (packages read them when the backend is "npu")
            "num_aicore": p.cube_cores,
            "num_vectorcore": p.vector_cores,
        }


class ActiveDriver:
    """What ``triton.runtime.driver.active`` answers."""

    def __init__(self):
        self.utils = _Utils()

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        _check_device(device)

    def get_current_stream(self, device=None) -> int:
        return 0  # launches run in program order

    def get_current_target(self) -> GPUTarget:
        return TARGET

    def get_active_torch_device(self):
        """``torch.device("cpu")`` when the program has imported torch (the simulated device reads host memory,
        with or without Ascend's extension), else the string ``"cpu"``; torch itself is never imported here."""
        torch = sys.modules.get("torch")
        return torch.device("cpu") if torch is not None and hasattr(torch, "device") else "cpu"

    def get_device_interface(self):
        raise LaunchError("get_device_interface returns torch.cuda on a GPU; the simulated NPU has no torch device "
                          "module (its tensors are CPU tensors)")

    def get_benchmarker(self):
        from ..testing import do_bench
        return do_bench

    def get_empty_cache_for_benchmark(self):
        raise LaunchError("there is no L2 cache to flush between benchmark runs: simulated time is the same on every "
                          "run")


class _Driver:
    def __init__(self):
        self.active = ActiveDriver()
        self.default = self.active

    def set_active(self, driver) -> None:
        self.active = driver

    def reset_active(self) -> None:
        self.active = self.default


driver = _Driver()

__all__ = ["driver", "TARGET"]
