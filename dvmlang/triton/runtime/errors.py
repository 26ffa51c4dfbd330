"""``triton.runtime.errors``: Triton's runtime error classes. ``OutOfResources`` is ``dvmlang.ResourceError`` (it
takes Triton's ``(required, limit, name)`` too), ``InterpreterError`` is ``dvmlang.DeviceError``; the others are
defined for packages that catch them and are never raised here: ``PTXASError`` (there is no ptxas),
``AutotunerError`` (pruning that leaves no config is a ``LaunchError``), ``IntelGPUError``."""

from ...errors import DvmError
from ..errors import InterpreterError, OutOfResources


class PTXASError(DvmError):
    """Triton's error of NVIDIA's assembler: never raised here."""


class AutotunerError(DvmError):
    """Triton's autotuner error: never raised here (see the module docstring)."""


class IntelGPUError(DvmError):
    """Triton's error of Intel's backend: never raised here."""


__all__ = ["InterpreterError", "OutOfResources", "PTXASError", "AutotunerError", "IntelGPUError"]
