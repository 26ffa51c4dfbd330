"""The PyTorch front door: ``torch.compile(model, backend="dvmlang")`` runs a model's fused regions on the
simulated NPU (docs/torch.md). Core dvmlang never imports this package, so ``import dvmlang`` needs no torch."""

from .backend import dvmlang_backend
from . import distributed  # registers the "dvmlang" torch.distributed backend
from .custom_op import CustomOpError, custom_op
from .explain import explain
from .lazy import LazyTorchTensor, TorchLazyError, lazy
from .stats import launches, reset_stats, stats

backend = dvmlang_backend

__all__ = ["distributed", "backend", "dvmlang_backend", "stats", "reset_stats", "explain", "launches", "lazy", "LazyTorchTensor", "TorchLazyError", "custom_op", "CustomOpError"]
