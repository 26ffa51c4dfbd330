"""dvmlang: a Triton-style DSL for NPU kernels on a bytecode virtual machine.

    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        mask = offs < n
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) + dl.load(y_ptr + offs, mask=mask), mask=mask)

    launch = add[(dl.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
"""

from .errors import (ArgumentError, BufferOverflowError, BytecodeError, CollectiveError, CollectiveMismatch,
                     CollectiveTimeout, CompilationError, ConstexprError, DeviceError, DvmError, DvmWarning, InvalidBytecodeError, IRVerificationError, KernelTypeError,
                     LaunchError, MalformedBytecodeError, MemoryFault, OutOfMemory, PeerError, PerformanceWarning, RaceDetected, ResourceError,
                     UninitializedRead, UnsupportedSyntaxError, VersionError, WatchdogTimeout)
from . import npu, ops
from .autotune import Autotuner, Config, Heuristics, autotune, heuristics
from .fuser.api import GraphFunction, graph
from .fuser.graph import GraphError
from .fuser.lazy import LazySession, LazyTensor, lazy, tensor
from .runtime import CacheInfo, Kernel, kernel, run
from .trace.record import Session as _Session
from .vm.bytecode import Bytecode
from ._version import __version__  # noqa: F401 - dvmlang.__version__


def _preload() -> None:
    """Import what the first build and launch need (the validator, the kernel frontend, the IR passes, and
    ``numpy.ma``, which ``np.unique`` imports at its first call: 8-30 ms in some launch) and start the build-ahead
    worker (``fuser.build.Ahead``), so that a process's first calls do not pay for them. Runs on a background
    thread after ``import dvmlang`` (``DVMLANG_PRELOAD=0``: not at all)."""
    import importlib
    for name in ("dvmlang.vm.validator", "dvmlang.kernel_cache", "dvmlang.frontend.build", "dvmlang.ir.verifier",
                 "numpy.ma"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the call that needs the module imports it and reports any error
            return
    from .fuser import build
    build._worker()  # (the build-ahead worker, running before the first call hands it work)


def _start_preload() -> None:
    import os
    import threading
    if os.environ.get("DVMLANG_PRELOAD", "1") != "0":
        threading.Thread(target=_preload, name="dvmlang-preload", daemon=True).start()


_start_preload()


def trace(max_events: int | None = 2_000_000, sample: int = 1, summary_only: bool = False) -> _Session:
    """Record every launch made inside ``with dvmlang.trace() as t:`` (see ``t.launches``, ``t.print()``)."""
    return _Session(max_events=max_events, sample=sample, summary_only=summary_only)


__all__ = [
    "kernel", "Kernel", "run", "autotune", "heuristics", "Config", "Autotuner", "Heuristics", "trace", "Bytecode", "CacheInfo", "graph", "GraphFunction", "GraphError", "ops", "npu",
    "lazy", "tensor", "LazyTensor", "LazySession", "DvmError", "CompilationError",
    "UnsupportedSyntaxError", "KernelTypeError", "ConstexprError", "IRVerificationError", "ArgumentError",
    "LaunchError", "BytecodeError", "MalformedBytecodeError", "InvalidBytecodeError", "VersionError",
    "ResourceError", "BufferOverflowError", "DeviceError", "MemoryFault", "WatchdogTimeout", "UninitializedRead",
    "RaceDetected", "OutOfMemory", "CollectiveError", "CollectiveMismatch", "CollectiveTimeout", "PeerError",
    "DvmWarning", "PerformanceWarning",
]
