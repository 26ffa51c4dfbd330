"""``triton.runtime``: ``driver`` (the simulated device as Triton's active driver), ``jit``, ``autotuner``,
``errors``, ``cache``."""

from ..config import Config
from . import autotuner, cache, errors, jit  # noqa: F401
from .autotuner import Autotuner, Heuristics, autotune, heuristics
from .driver import driver
from .errors import InterpreterError, OutOfResources
from .jit import JITFunction, KernelInterface, MockTensor, TensorWrapper, reinterpret, version_key

__all__ = ["driver", "Autotuner", "Config", "Heuristics", "autotune", "heuristics", "JITFunction", "KernelInterface",
           "MockTensor", "TensorWrapper", "reinterpret", "version_key", "InterpreterError", "OutOfResources",
           "autotuner", "cache", "errors", "jit"]
