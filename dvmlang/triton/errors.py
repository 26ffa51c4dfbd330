"""Triton's error classes as dvmlang's, so ``except triton.CompilationError`` catches dvmlang's compile errors.

``TritonError`` is ``DvmError`` (the base of every dvmlang error), ``CompilationError`` is dvmlang's,
``OutOfResources`` is ``ResourceError`` (a kernel's tiles do not fit on-chip memory), and
``InterpreterError`` is ``DeviceError`` (a fault while the kernel runs on the simulated device).
"""

from ..errors import CompilationError, DeviceError, DvmError, ResourceError

TritonError = DvmError
OutOfResources = ResourceError
InterpreterError = DeviceError

__all__ = ["TritonError", "CompilationError", "OutOfResources", "InterpreterError"]
