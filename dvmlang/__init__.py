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

__version__ = "0.1.0"


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
