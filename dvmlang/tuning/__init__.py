"""Automatic autotuning and sweeps: ``autotune(configs="auto")``'s search space, cost model and search, the
content-addressed cache, and the executors that run sweeps (docs/language.md, "Automatic search")."""

from .executor import Executor, LocalPool, Outcome, SerialExecutor, get_executor
from .store import export_cache, import_cache

__all__ = ["Executor", "LocalPool", "Outcome", "SerialExecutor", "get_executor", "export_cache", "import_cache"]
