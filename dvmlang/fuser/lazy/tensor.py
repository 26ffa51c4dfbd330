"""Lazy tensors: ``dvmlang.tensor(x)`` and the results of operations on them.

A ``LazyTensor`` is a handle on a value cell (``memory._Value``): it wraps a numpy array without copying, or
names the result of an operation. Its backend is the runtime's current session (``current_runtime().session()``):
operators, in-place operators and indexed writes go there, and observing it (``.numpy()``, ``float()``,
``print``, ...) flushes the work its value needs. Indexing runs on the concrete array (not fusible).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ... import dtypes as dt
from ...errors import user_frames, user_frames_methods
from .. import foreign
from ..graph import GraphError
from ..operators import TensorOperators
from .flush import _wait_value
from .memory import _Value
from .runtime import current_runtime


@user_frames_methods
class LazyTensor(TensorOperators):
    """A tensor for eager code: wraps a numpy array (``dvmlang.tensor(x)``) or names the result of an operation.
    Outside ``dvmlang.lazy()`` operations run at once (one kernel each); inside they are captured and run fused
    when a value is observed. ``.shape`` and ``.dtype`` are known at once; ``.numpy()`` observes."""

    __slots__ = ("_v", "_wb", "_view", "_base", "_views", "__weakref__")
    __array_ufunc__ = None  # numpy defers to our reflected operators (np_array + t -> t.__radd__)
    __array_priority__ = 1000

    def __init__(self, array):
        t = tensor(array)
        self._v, self._wb, self._view, self._base, self._views = t._v, None, False, None, None

    @classmethod
    def _of(cls, v: _Value) -> "LazyTensor":
        t = object.__new__(cls)
        t._v = v
        t._wb = None
        t._view = False
        t._base = None
        t._views = None
        return t

    # its backend (backend.Backend): operations on this tensor go to the current session
    @property
    def __dvm_backend__(self):
        return current_runtime().session()

    def _track_view(self, view: "LazyTensor") -> None:
        if self._views is None:
            self._views = []
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(view))

    def _live_views(self) -> bool:
        return any(r() is not None for r in (self._views or ()))

    # ---- metadata -----------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._v.shape

    @property
    def dtype(self) -> dt.DType:
        return self._v.dtype

    @property
    def ndim(self) -> int:
        return len(self._v.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._v.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self._v.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._v.shape[0]

    @property
    def state(self) -> str:
        """``pending``, ``in flight``, ``ready`` or ``failed`` (for tests and debugging; does not flush)."""
        v = self._v
        if v.pending:
            return "pending"
        if v.batch is not None:
            return "in flight"
        if v.error is not None:
            return "failed"
        return "ready"

    # ---- observing --------------------------------------------------------------------------------------
    def _observe(self, reason: str = "observe", detail: str = "") -> np.ndarray:
        v = self._v
        if v.pending:
            owner = v.pg.session
            if owner.thread != threading.get_ident():
                raise GraphError("this tensor is pending in a dvmlang.lazy() session of another thread")
            owner._flush(reason, detail)
            v = self._v
        session = current_runtime().session()
        if session.pg.written(v):
            session._flush(reason, detail + " (a pending in-place operation writes its array)")
        return _wait_value(v, v.batch.session if v.batch is not None else session)

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (observes: flushes pending work this value needs). The array is this
        tensor's storage, not a copy: for ``dvmlang.tensor(x)`` it is ``x``."""
        return self._observe("observe", ".numpy()")

    def __dvm_array__(self) -> np.ndarray:
        return self._observe("observe", "passed to a kernel or graph")

    def __array__(self, dtype=None, copy=None):
        a = self._observe("observe", "np.asarray")
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        a = self._observe("observe", ".item()")
        if a.size != 1:
            raise GraphError(f"item() needs a tensor with one element, this one has shape {a.shape}")
        return a.reshape(-1)[0].item()

    def tolist(self):
        return self._observe("observe", ".tolist()").tolist()

    def _scalar(self, what: str):
        a = self._observe("observe", what)
        if a.size != 1:
            raise GraphError(f"{what} needs a tensor with one element, this one has shape {a.shape}")
        return a.reshape(-1)[0]

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __bool__(self) -> bool:
        v = self._v
        if int(np.prod(v.shape, dtype=np.int64)) != 1:
            raise GraphError(f"the truth value of a tensor of shape {v.shape} is ambiguous; reduce it first "
                             "(ops.max / ops.min / ops.sum)")
        return bool(self._scalar("bool() / if"))

    def __repr__(self) -> str:
        try:
            a = self._observe("observe", "repr()")
        except GraphError as e:
            return f"<dvmlang.tensor {self.shape} {self.dtype.name}: {e}>"
        return f"dvmlang.tensor({np.array2string(a, separator=', ')}, dtype={self.dtype.name})"

    def __str__(self) -> str:
        return str(self._observe("observe", "str()"))

    def __format__(self, spec: str) -> str:
        a = self._observe("observe", "format()")
        if a.size == 1 and spec:
            return format(a.reshape(-1)[0].item(), spec)
        return format(str(a), spec)

    # ---- indexing (not fusible: runs on concrete arrays) ----------------------------------------------------
    def __getitem__(self, index) -> "LazyTensor":
        a = self._observe("unfusible", "indexing")
        try:
            r = a[index]
        except (IndexError, TypeError, ValueError) as e:
            raise GraphError(f"t[{_index_text(index)}]: {e} (the tensor has shape {a.shape}); index with ints, "
                             "slices, None, ... or integer/boolean arrays within the shape") from None
        if not isinstance(r, np.ndarray):
            r = np.asarray(r)
        out = tensor(r)
        out._view = r.base is not None
        return out

    def __setitem__(self, index, value) -> None:
        current_runtime().session()._host_write(self, index, value)

    # ---- operators: arithmetic, comparisons and methods come from TensorOperators ----------------------
    # in place: the result is written into this tensor's storage (for dvmlang.tensor(x): into x)
    def __iadd__(self, o):
        return current_runtime().session()._inplace(self, self._ops.add, o)

    def __isub__(self, o):
        return current_runtime().session()._inplace(self, self._ops.sub, o)

    def __imul__(self, o):
        return current_runtime().session()._inplace(self, self._ops.mul, o)

    def __itruediv__(self, o):
        return current_runtime().session()._inplace(self, self._ops.div, o)


@user_frames
def tensor(x, dtype=None) -> LazyTensor:
    """A ``dvmlang`` tensor. A numpy array is wrapped without copying (in-place operations write into it);
    other data (lists, numbers) is converted, Python floats to float32 and Python ints to int32. With
    ``dtype`` the values are converted (a copy when the dtype differs)."""
    if isinstance(x, LazyTensor):
        if dtype is None:
            return x
        return x._ops.cast(x, dtype)
    if isinstance(x, np.ndarray):
        arr = x
    elif foreign.is_torch(x):  # a CPU torch tensor: wrapped without copying (bfloat16 too)
        arr = foreign.to_numpy(x, "the tensor given to dvmlang.tensor")
    else:
        try:
            arr = np.asarray(x)
        except ValueError as e:
            raise GraphError(f"dvmlang.tensor: cannot make an array of this data ({e}); nested lists must be "
                             "rectangular, not ragged: every row of the same length") from None
        if arr.dtype == np.float64 and not isinstance(x, np.generic):
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64 and not isinstance(x, np.generic):
            arr = arr.astype(np.int32)
    if dtype is not None:
        d = dt.lookup(dtype)
        if d is None:
            raise GraphError(f"{dtype!r} is not a dtype")
        if arr.dtype != d.np:
            arr = arr.astype(d.np)
    d = dt.from_numpy(arr.dtype)
    if d is None:
        raise GraphError(f"dvmlang.tensor: numpy dtype {arr.dtype} is not supported")
    return LazyTensor._of(_Value(tuple(int(s) for s in arr.shape), d, array=arr))


def _index_text(index) -> str:
    """``index`` as written between brackets (``0, 1:3``), for messages."""
    parts = index if isinstance(index, tuple) else (index,)

    def one(i):
        if isinstance(i, slice):
            return ":".join("" if x is None else str(x) for x in (i.start, i.stop)) + \
                ("" if i.step is None else f":{i.step}")
        return "..." if i is Ellipsis else repr(i)
    return ", ".join(one(i) for i in parts)

