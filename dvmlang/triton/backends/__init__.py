"""``triton.backends``: importable (torch probes it when a ``triton`` module is present). dvmlang has one
backend, the simulated NPU, and registers no Triton backends: ``backends`` is empty."""

from . import compiler  # noqa: F401

backends: dict = {}

__all__ = ["backends", "compiler"]
