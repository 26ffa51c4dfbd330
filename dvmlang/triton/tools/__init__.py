"""``triton.tools``: ``tensor_descriptor`` (host tensor descriptors, taken by launches as kernel arguments)."""

from . import tensor_descriptor  # noqa: F401

__all__ = ["tensor_descriptor"]
