"""``triton.tools``: ``tensor_descriptor`` (host tensor descriptors are not launch arguments yet)."""

from . import tensor_descriptor  # noqa: F401

__all__ = ["tensor_descriptor"]
