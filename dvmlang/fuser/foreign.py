"""Torch tensors at the fuser's doors: ``@dvmlang.graph`` calls, ``dvmlang.ops`` and ``dvmlang.tensor`` take CPU
torch tensors as zero-copy numpy views (bfloat16 included), and a call whose tensors came from torch returns
torch tensors over dvmlang's result arrays (zero-copy). No torch import: a torch tensor is recognised by its
type (a subclass of a class named ``Tensor`` from a ``torch`` module), and the torch module used for results is
the one that tensor's type came from."""

from __future__ import annotations

import sys

import numpy as np

from .. import dtypes as dt
from .graph import GraphError


_IS_TORCH: dict = {}  # type -> whether it is a torch tensor type (decided once per type)


def is_torch(x) -> bool:
    """Whether ``x`` is a torch tensor (or a subclass: parameters, dvmlang.torch's lazy tensors)."""
    t = type(x)
    r = _IS_TORCH.get(t)
    if r is None:
        r = _IS_TORCH[t] = not (t.__module__ == "numpy" or issubclass(t, (int, float, bool, str, np.ndarray,
                                                                             type(None)))) and \
            any(k.__name__ == "Tensor" and k.__module__.startswith("torch") for k in t.__mro__)
    return r


def _torch_of(x):
    for k in type(x).__mro__:
        if k.__name__ == "Tensor" and k.__module__.startswith("torch"):
            return sys.modules[k.__module__.split(".")[0]]
    raise GraphError(f"internal: {type(x).__name__} is not a torch tensor")


def to_numpy(x, where: str) -> np.ndarray:
    """A numpy array sharing the memory of the CPU torch tensor ``x`` (shaped and strided as ``x``)."""
    dev = getattr(getattr(x, "device", None), "type", "cpu")
    if dev != "cpu":
        raise GraphError(f"{where} is a torch tensor on `{x.device}`; the simulated NPU reads host memory: pass "
                         "x.cpu()")
    if x.requires_grad:
        x = x.detach()  # shares the storage; dvmlang does not record gradients
    name = str(x.dtype).removeprefix("torch.")
    try:
        if name == "bfloat16":  # numpy has no bfloat16: reinterpret as int16, then view as ml_dtypes' bfloat16
            return x.view(_torch_of(x).int16).numpy().view(dt.bfloat16.np)
        a = x.numpy()
    except (TypeError, RuntimeError) as e:
        raise GraphError(f"{where} is a torch tensor of dtype {x.dtype}, which dvmlang does not support ({e}); "
                         f"use one of {', '.join(d.name for d in dt.ARRAY_DTYPES)}") from None
    if dt.from_numpy(a.dtype) is None:
        raise GraphError(f"{where} is a torch tensor of dtype {x.dtype}, which dvmlang does not support")
    return a


def from_numpy(arr: np.ndarray, like):
    """A torch tensor (of ``like``'s torch) over ``arr`` without copying (a copy only when ``arr`` is
    read-only, which torch cannot express)."""
    torch = _torch_of(like)
    if not arr.flags.writeable:
        arr = np.array(arr)
    if arr.dtype == dt.bfloat16.np:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def first_torch(obj, depth: int = 0):
    """The first torch tensor in ``obj`` (an argument, or lists/tuples/dicts of them), else None."""
    if obj.__class__ is np.ndarray:
        return None
    if is_torch(obj):
        return obj
    if depth < 4 and isinstance(obj, dict):
        obj = list(obj.values())
    if depth < 4 and isinstance(obj, (list, tuple)):
        for v in obj:
            t = first_torch(v, depth + 1)
            if t is not None:
                return t
    return None


def numpy_in(obj, where: str, wrap=None, depth: int = 0):
    """``obj`` with every torch tensor replaced by its numpy view (or ``wrap`` of it), containers rebuilt."""
    if is_torch(obj):
        a = to_numpy(obj, where)
        return wrap(a) if wrap is not None else a
    if depth < 4 and isinstance(obj, dict):
        return {k: numpy_in(v, f"{where}[{k!r}]", wrap, depth + 1) for k, v in obj.items()}
    if depth < 4 and isinstance(obj, (list, tuple)):
        out = [numpy_in(v, f"{where}[{i}]", wrap, depth + 1) for i, v in enumerate(obj)]
        return out if isinstance(obj, list) else tuple(out)
    return obj


def torch_out(obj, like):
    """``obj`` (arrays, dvmlang tensors, or lists/tuples of them) as torch tensors of ``like``'s torch."""
    if isinstance(obj, np.ndarray):
        return from_numpy(obj, like)
    if hasattr(obj, "__dvm_array__"):
        return from_numpy(obj.numpy(), like)
    if isinstance(obj, (list, tuple)):
        out = [torch_out(v, like) for v in obj]
        return out if isinstance(obj, list) else tuple(out)
    return obj
