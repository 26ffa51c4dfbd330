"""``triton.tools``: ``tensor_descriptor`` (host tensor descriptors, taken by launches as kernel arguments) and
``mxfp`` (microscaling fp4/e8m0 host helpers)."""

from . import mxfp, tensor_descriptor  # noqa: F401

__all__ = ["mxfp", "tensor_descriptor"]
