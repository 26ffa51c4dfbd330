"""Eager torch code fused at run time: ``with dvmlang.torch.lazy():`` (docs/torch.md, "Eager mode").

A ``TorchDispatchMode`` sees every aten op the block runs on CPU tensors. An op of the backend's table
(``aten_ops.LOWERINGS``, the same lowering ``torch.compile`` uses) is lowered on a one-op fuser graph whose
nodes are replayed into a ``dvmlang.lazy()`` session's pending graph: the result is a ``LazyTorchTensor``, a
torch wrapper tensor (shape, dtype and strides as eager's) holding the pending ``dvmlang.tensor``. Nothing runs
until something observes a value:

* ``.item()``, ``print``/``repr``, ``.tolist()``, ``.numpy()``, a Python ``if`` (``bool``): the pending graph is
  flushed (one fused launch) and the value materialised as a torch tensor over dvmlang's result array;
* an op outside the table: flush, then the op runs in torch on materialised tensors (counted in
  ``dvmlang.torch.stats()["fallback_ops"]``); ops with no tensor inputs (factories, ``randn``) run in torch;
* in-place ops (``add_``, ``copy_``, ``index_put_``, ...) and views (``view``, ``transpose``, slicing,
  ``as_strided``) of a pending value: flush, then run in torch on the materialised tensors, so aliasing is
  eager's exactly (a view of a real tensor is taken in torch at once: it reads nothing).

Autograd is not captured: an op on a tensor that requires grad, with grad enabled, raises ``TorchLazyError``
(use ``torch.no_grad()``) instead of recording a graph whose gradients dvmlang would not compute.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import DvmError
from ..fuser import ops
from ..fuser.graph import GraphValue, Node
from ..fuser.lazy import LazyTensor, lazy as dvm_lazy, tensor as dvm_tensor
import sys

from .stats import STATS  # noqa: F401 (the module itself: the package's `stats` is the function)
from .table import CUSTOM_OPS, lowering
from .lower import LVal, Region, Unsupported, dvm_dtype
from .partition import _layout, to_numpy

st = sys.modules[__package__ + ".stats"]

aten = torch.ops.aten

# ops with no tensor operand that are lowered lazily (a pending constant or index tile, fused where it is used)
FACTORIES = {aten.arange.default, aten.arange.start, aten.arange.start_step, aten.full.default, aten.zeros.default,
             aten.ones.default, aten.scalar_tensor.default, aten.empty.memory_format, aten.empty_permuted.default}

# ops that observe a value on the host: a flush, never counted as a fallback
OBSERVE = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default}


class TorchLazyError(DvmError):
    """Misuse of ``dvmlang.torch.lazy()`` (autograd under the mode, a tensor of another device)."""


def op_name(func) -> str:
    if isinstance(func, torch._ops.OpOverload):
        return f"{func._schema.name.split('::')[-1]}.{func._overloadname}"
    return getattr(func, "__name__", str(func))


# ---- the wrapper tensor ------------------------------------------------------------------------------------

class LazyTorchTensor(torch.Tensor):
    """A torch tensor whose value is pending in a ``dvmlang.lazy()`` session (or computed there). Its shape,
    dtype and strides are eager torch's; reading its data materialises it (flushing what it needs)."""

    @staticmethod
    def __new__(cls, lt: LazyTensor, meta: torch.Tensor, copy: bool):
        r = torch.Tensor._make_wrapper_subclass(cls, meta.shape, strides=meta.stride(), dtype=meta.dtype,
                                                device="cpu", requires_grad=False)
        r._lt, r._meta, r._copy, r._real = lt, meta, copy, None
        r._vbase = None  # for a view: (the base LazyTorchTensor, the view op, its args and kwargs, the result's
        # index for an op with several results (split) or None)
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # outside the lazy block: an ordinary eager op on the materialised values
        args, kwargs = tree_map(real, (args, kwargs or {}))
        return func(*args, **kwargs)

    def materialise(self, detail: str = "materialise") -> torch.Tensor:
        """The torch tensor of this value (flushes the pending graph it needs, once)."""
        if self._real is None and self._vbase is not None:
            # a view is always taken in torch from its base's tensor: aliasing and strides are eager's
            base, func, args, kwargs, index = self._vbase
            b = base.materialise(detail)
            with _disable_current_modes():
                real_ = func(*tree_map(lambda x: b if x is base else x, args), **kwargs)
            self._real = real_ if index is None else real_[index]
            self._lt = None
        if self._real is None:
            arr = self._lt._observe("observe", detail)
            if self._copy or not arr.flags.writeable or any(s < 0 for s in arr.strides):
                arr = np.array(arr)
            self._real = _layout(_from_numpy(arr), self._meta)
            self._lt = None  # from now on the torch tensor is the value (in-place ops write it)
        return self._real

    def __repr__(self, *, tensor_contents=None):
        return self._observed("repr() / print", repr)

    def __str__(self):
        return self.__repr__()

    def _observed(self, what: str, fn):
        """``fn`` of the materialised tensor, outside the capturing mode (an observation on the host)."""
        t = self.materialise(what)
        with _disable_current_modes():
            return fn(t)

    def __format__(self, spec):
        return self._observed("format()", lambda t: t.__format__(spec))

    def tolist(self):
        return self._observed(".tolist()", lambda t: t.tolist())

    def numpy(self, *, force: bool = False):
        return self._observed(".numpy()", lambda t: t.numpy(force=force) if force else t.numpy())

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None and np.dtype(dtype) != a.dtype else a

    def __bool__(self):
        return self._observed("bool() / if", bool)

    def __float__(self):
        return self._observed("float()", float)

    def __int__(self):
        return self._observed("int()", int)

    def __index__(self):
        return self.__int__()

    def __reduce_ex__(self, proto):
        return self.materialise("pickle").__reduce_ex__(proto)


def _from_numpy(arr: np.ndarray) -> torch.Tensor:
    from .. import dtypes as dt
    if arr.dtype == dt.bfloat16.np:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def real(x):
    """``x`` with every lazy tensor materialised (others unchanged)."""
    if isinstance(x, LazyTorchTensor):
        return x.materialise(_CURRENT_OP.name)
    return x


class _Op(threading.local):
    name = "an op"


_CURRENT_OP = _Op()


# ---- lowering one op onto the lazy session ------------------------------------------------------------------

class _Arg:
    """A tensor operand of the op, as the lowering sees an fx node: its metadata (a meta tensor)."""

    def __init__(self, t: torch.Tensor, i: int):
        self.meta = {"val": torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")}
        self.name = f"arg{i}"
        self.tensor = t


class _FakeNode:
    def __init__(self, func, args, kwargs, val):
        self.target, self.args, self.kwargs, self.meta, self.name = func, args, kwargs, {"val": val}, "out"


class _OpRegion(Region):
    """A one-op region: its operands are the op's tensors, as inputs of concrete shapes."""

    def __init__(self, name: str):
        super().__init__(name, {})
        self.position = 0
        self.g.runtime_sizes = True  # as the lazy session: a mean divides by a size (symbolic at the flush)
        self.arg_lv: dict = {}
        self.arg_of: dict = {}  # input node id -> _Arg

    def operand(self, a):
        if isinstance(a, _Arg):
            lv = self.arg_lv.get(a)
            if lv is None:
                t = a.tensor
                n = self.g.add(Node("input", [], tuple(int(s) for s in t.shape), dvm_dtype(t.dtype),
                                    {"name": a.name}, a.name))
                self.g.inputs.append(n)
                lv = self.arg_lv[a] = LVal(GraphValue(n, self.g))
                self.arg_of[n.id] = a
            return lv
        if isinstance(a, torch.fx.Node):
            raise Unsupported("internal: an fx node in eager mode")
        return super().operand(a)


def _settled(t: "LazyTorchTensor") -> bool:
    """Whether ``t`` or a base it is a view of has a torch tensor (then ``t`` is taken from it, no flush)."""
    while t is not None:
        if t._real is not None:
            return True
        t = t._vbase[0] if t._vbase is not None else None
    return False


def _lazy_value(t: torch.Tensor) -> LazyTensor:
    if isinstance(t, LazyTorchTensor):
        if not _settled(t):
            return t._lt
        t = t.materialise()
    return dvm_tensor(to_numpy(t))


def _lower(func, fn, args, kwargs, metas):
    """The op lowered on a one-op graph and replayed into the current lazy session: LazyTorchTensor result(s)."""
    counter = iter(range(1 << 30))
    sargs, skwargs = tree_map(lambda x: _Arg(x, next(counter)) if isinstance(x, torch.Tensor) else x,
                              (args, kwargs))
    r = _OpRegion(op_name(func))
    out = fn(r, _FakeNode(func, sargs, skwargs, metas), *sargs, **skwargs)
    outs = out if isinstance(out, tuple) else (out,)
    mlist = metas if isinstance(metas, (tuple, list)) else (metas,)
    if len(outs) != len(mlist) or any(not isinstance(o, LVal) for o in outs):
        raise Unsupported("a result the lowering does not compute")
    vals = []
    for lv, m in zip(outs, mlist):
        v = lv.v
        if tuple(v.shape) != tuple(m.shape):
            v = ops.reshape(v, tuple(int(s) for s in m.shape))
        vals.append(v)
    # replay the one-op graph into the session (the backend protocol: the same nodes ops would have made there)
    session = _state().session
    made: dict = {}
    for n in r.g.nodes:
        if n.op == "input":
            made[n.id] = _lazy_value(r.arg_of[n.id].tensor)
            continue
        made[n.id] = session.node(n.op, [made[i.id] for i in n.inputs], n.shape, n.dtype, dict(n.attrs))
    ins = {id(made[n.id]) for n in r.g.inputs}
    res = []
    for v, m in zip(vals, mlist):
        lt = made[v.node.id]
        res.append(LazyTorchTensor(lt, m, copy=id(lt) in ins or lt._view))
    return tuple(res) if isinstance(out, tuple) else res[0]


# ---- the mode -------------------------------------------------------------------------------------------------

class _State(threading.local):
    mode = None
    session = None


_STATE = _State()


def _state():
    return _STATE


def _tensors(args, kwargs) -> list:
    return [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]


class _LazyMode(TorchDispatchMode):
    def __init__(self, session):
        super().__init__()
        self.session = session
        self.seen_flushes = 0
        self.progs: dict = {}  # id(program) -> program (builds/encodes already attributed at enter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tens = _tensors(args, kwargs)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tens):
            raise TorchLazyError(
                f"dvmlang.torch.lazy(): {op_name(func)} on a tensor that requires grad, with grad enabled. The "
                "lazy mode does not record autograd graphs (gradients would not be computed): run the block "
                "under torch.no_grad() (or detach the tensors), or use torch.compile(model, backend='dvmlang') "
                "for training")
        for t in tens:
            if t.device.type != "cpu" and t.device.type != "meta":
                raise TorchLazyError(f"dvmlang.torch.lazy(): {op_name(func)} on a tensor on {t.device}; the "
                                     "simulated NPU reads host memory: pass CPU tensors")
        try:
            return self._dispatch(func, args, kwargs, tens)
        finally:
            self.sync()

    def _dispatch(self, func, args, kwargs, tens):
        schema = func._schema
        mutable = schema.is_mutable
        is_view = getattr(func, "is_view", False)
        fn = lowering(func)
        base = args[0] if args and isinstance(args[0], LazyTorchTensor) else None
        if is_view and (base is None or _settled(base)):
            fn = None  # a view of a torch tensor: taken in torch, it reads nothing
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "cpu":
            fn = None  # a factory for another device: torch makes it
        if fn is not None and not mutable and (tens or func in FACTORIES):
            try:
                with _disable_current_modes():
                    metas = func(*tree_map(_meta, args), **tree_map(_meta, kwargs))
                out = _lower(func, fn, args, kwargs, metas)
                if is_view:  # modelled exactly: materialised as this view of the base's tensor
                    if isinstance(out, LazyTorchTensor):
                        out._vbase, out._copy = (base, func, args, kwargs, None), False
                    elif isinstance(out, (tuple, list)) and all(isinstance(o, LazyTorchTensor) for o in out):
                        for k, o in enumerate(out):  # split, unbind: each result a view of the base
                            o._vbase, o._copy = (base, func, args, kwargs, k), False
                    else:
                        raise Unsupported("a view whose results are not tensors")
                return out
            except (Unsupported, DvmError, NotImplementedError, RuntimeError) as e:
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                st.STATS.runtime_reasons.setdefault(f"lazy {op_name(func)}", reason)
        # torch runs it: flush what it reads or may write, then the op on materialised tensors
        lazies = [t for t in tens if isinstance(t, LazyTorchTensor)]
        if func in OBSERVE:
            detail = ".item()" if func is aten._local_scalar_dense.default else op_name(func)
            for t in lazies:
                t.materialise(detail)
        elif mutable and self.session.pg.busy:
            self.session._flush("hazard", f"{op_name(func)} writes in place (it runs in torch)")
        elif any(not _settled(t) for t in lazies) and func not in CUSTOM_OPS:
            self.session._flush("unfusible", f"{op_name(func)} runs in torch")
        if func not in OBSERVE and func not in CUSTOM_OPS and not (is_view and all(map(_settled, lazies))):
            st.STATS.fallback_ops[op_name(func)] += 1
        self.session.wait()
        _CURRENT_OP.name = f"an argument of {op_name(func)} (a dvmlang kernel)" if func in CUSTOM_OPS else \
            f"{op_name(func)} runs in torch"
        rargs, rkwargs = tree_map(real, (args, kwargs))
        t0 = time.perf_counter()
        out = func(*rargs, **rkwargs)
        if func not in OBSERVE and func not in CUSTOM_OPS:
            st.STATS.eager_s += time.perf_counter() - t0
        # an op returning one of its (materialised) arguments returns that argument (x.add_(1) is x)
        back = {id(t._real): t for t in lazies if t._real is not None}
        return tree_map(lambda o: back.get(id(o), o) if isinstance(o, torch.Tensor) else o, out)

    def sync(self):
        """Attribute the session's new flushes to dvmlang.torch.stats()."""
        fl = self.session.stats.flushes
        clock = None
        for rec in fl[self.seen_flushes:]:
            st.STATS.launches += rec.launches
            st.STATS.cycles += rec.cycles
            if rec.cycles:
                if clock is None:
                    from ..npu import default_device
                    clock = (self.session.device or default_device()).profile.clock_hz
                st.STATS.sim_us += rec.cycles / clock * 1e6
            st.STATS.host_s += rec.encode_s + rec.sim_s
        self.seen_flushes = len(fl)
        for prog in list(self.session.rt.programs.items.values()):
            if id(prog) not in self.progs:
                self.progs[id(prog)] = prog
                st.track(prog)


def _meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


@contextlib.contextmanager
def lazy(max_pending: int = 256, fuse: bool = True, device=None):
    """``with dvmlang.torch.lazy() as session:`` — eager torch ops on CPU tensors are captured into a
    ``dvmlang.lazy()`` session (yielded: ``session.stats`` records every flush and why) and run fused when a
    value is observed. Options as ``dvmlang.lazy`` (flushes run in the foreground)."""
    if _STATE.mode is not None:
        raise TorchLazyError("dvmlang.torch.lazy() blocks do not nest; use one block")
    session = dvm_lazy(background=False, max_pending=max_pending, fuse=fuse, device=device, name="torch_lazy")
    mode = _LazyMode(session)
    # programs compiled before the block: their earlier builds and encodes are not this block's
    for prog in list(session.rt.programs.items.values()):
        mode.progs[id(prog)] = prog
        if not st.tracked(prog):
            st.track(prog)
            b, e = st._counts(prog.kernels)
            st._base["builds"] += b
            st._base["encodes"] += e
    _STATE.mode, _STATE.session = mode, session
    try:
        with session, mode:
            yield session
    finally:
        _STATE.mode = _STATE.session = None
        mode.sync()
