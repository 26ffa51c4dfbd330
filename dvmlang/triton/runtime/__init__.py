"""``triton.runtime``: ``driver`` (the simulated device as Triton's active driver), ``jit``, ``autotuner``,
``errors``."""

from ...autotune import Autotuner, Heuristics
from ..config import Config
from ..errors import InterpreterError, OutOfResources
from . import autotuner, errors, jit  # noqa: F401
from .driver import driver
from .jit import JITFunction, TensorWrapper, reinterpret

__all__ = ["driver", "Autotuner", "Config", "Heuristics", "JITFunction", "TensorWrapper", "reinterpret",
           "InterpreterError", "OutOfResources", "autotuner", "errors", "jit"]
