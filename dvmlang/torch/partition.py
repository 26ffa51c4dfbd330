"""The partitioner and the compiled graph: maximal regions of supported nodes become one dvmlang program each
(``fuser.api.Program``: planned once, encoded per shape), nodes dvmlang cannot run execute in torch eager
between them, every fallback counted by op name with its reason.

Nodes are visited in the graph's order. A supported node joins the current region unless it reads the result
of an eager step that runs after the region starts (then a new region starts after that step); an unsupported
one becomes an eager step. Size arithmetic on ``SymInt`` (``sym_size``, ``s0 * s1``) runs on the host: sizes
reach the fuser as the region's symbols, bound from its inputs' shapes at every call.
"""

from __future__ import annotations

import operator
import re
import time
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import dtypes as dt
from ..errors import BytecodeError, DeviceError, DvmError, SourceLoc
from ..fuser.api import Program
from ..npu import default_device
from ..trace.record import active_session
from . import stats as st
from .rewrite import rewrite
from .table import CUSTOM_OPS, LOWERINGS, lowering
from .lower import Late, LVal, Region, Unsupported, check_ranks

# nodes with no computation of their own: run on the host wherever they are, never counted as fallbacks
HOST = {operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv, operator.truediv,
        operator.mod, operator.neg, operator.pow, torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min,
        torch.sym_not, torch.sym_sum, torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int,
        torch.ops.aten.sym_numel.default, torch.ops.aten.sym_storage_offset.default,
        torch.ops.aten._assert_async.msg}  # (a check of a computed condition, on the host as torch's own code does)
VIEW_ONLY = {"input", "reshape", "permute"}


def op_name(node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t._schema.name.split('::')[-1]}.{t._overloadname}"
    return getattr(t, "__name__", str(t))


@dataclass
class Step:
    kind: str  # "region" | "eager" | "host" | "eager_views" | "custom" (a dvmlang.torch.custom_op) | "empty" |
    # "writeback" (an input mutation's copy_ into the caller's buffer)
    nodes: list
    region: Region | None = None
    program: Program | None = None
    outputs: list = field(default_factory=list)  # (fx node, LVal) the region returns
    reason: str = ""
    out_index: list = field(default_factory=list)  # per output, its index in the program's graph outputs
    orders: list | None = None  # per output, its stride order (stride_order), worked out at the first call
    row_major: list | None = None  # per output, whether that order is the dims in order
    views: dict = field(default_factory=dict)  # input key -> (weakref to the tensor, its view or None): _view


class CompiledGraph:
    """One FX graph (a forward, backward or inference graph of AOTAutograd) partitioned and ready to run."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, device=None):
        rewrite(gm)
        self.gm = gm
        self.name = name
        self.device = device
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.sources = _symbol_sources(self.placeholders)
        self.fallbacks: dict = {}  # op name -> reason
        self.steps: list[Step] = []
        self._partition()
        st.STATS.graphs += 1

    # ---- partitioning ------------------------------------------------------------------------------------
    def _partition(self):
        made_at = {}  # fx node -> index of the step that computes it
        current = None
        for node in self.gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                self._eager(node, made_at, "host")
                continue
            if node.op == "call_function" and node.target in HOST and not _tuple_getitem(node, current):
                self._eager(node, made_at, "host")
                continue
            if node.op == "call_function" and node.target is torch.ops.aten.copy_.default and \
                    node.args[0].op == "placeholder":
                # an input mutation's epilogue (batch norm's running statistics, a KV cache written in place): the
                # value was computed on the NPU; the write into the caller's buffer is a copy on the host
                self._eager(node, made_at, "writeback")
                continue
            if node.op == "call_function" and node.target in CUSTOM_OPS:
                self._eager(node, made_at, "custom")  # a dvmlang.torch.custom_op: its launcher runs dvmlang kernels
                continue
            fn = lowering(node.target) if node.op == "call_function" else None
            if fn is None:
                self._eager(node, made_at, "eager", f"no dvmlang lowering for {op_name(node)}")
                continue
            for attempt in range(2):
                if current is None:
                    current = Region(f"{self.name}_r{sum(s.kind == 'region' for s in self.steps)}", self.sources)
                    current.position = len(self.steps)
                    current.made_at = made_at
                    self.steps.append(Step("region", [], current))
                snap = current.snapshot()
                try:
                    val = _lower(current, node, fn)
                    check_ranks(current, snap[0])
                except Late:
                    current.rollback(snap)
                    current = None  # it reads an eager result computed after the region starts: a new region
                    continue
                except (Unsupported, DvmError) as e:
                    current.rollback(snap)
                    self._eager(node, made_at, "eager", str(e).splitlines()[0])
                    break
                except Exception as e:  # noqa: BLE001 - a bug in a lowering never fails a compile torch can run
                    current.rollback(snap)
                    self._eager(node, made_at, "eager", f"internal error in the lowering ({type(e).__name__}: "
                                f"{(str(e).splitlines() or [''])[0]}); please report it")
                    break
                current.env[node] = val
                current.nodes.append(node)
                made_at[node] = current.position
                break
        self._finish()

    def _eager(self, node, made_at, kind, reason=""):
        made_at[node] = len(self.steps)
        self.steps.append(Step(kind, [node], reason=reason))
        if kind == "eager":
            self.fallbacks.setdefault(op_name(node), reason)

    def _finish(self):
        # a region value eager code reads that is not a tensor (a tuple such as native_layer_norm's, read by a
        # getitem the lowering refused) cannot leave the region: that region runs eagerly
        lowered_in = {n: s for s in self.steps if s.kind == "region" for n in s.region.nodes}
        for step in self.steps:
            if step.kind == "region":
                continue
            for n in step.nodes:
                for a in n.all_input_nodes:
                    s = lowered_in.get(a)
                    if s is not None and s.kind == "region" and not isinstance(s.region.env[a], LVal):
                        s.kind, s.nodes, s.reason = "eager", list(s.region.nodes), \
                            f"{a.name}'s results are read by an op that runs eagerly"
                        for m in s.nodes:
                            self.fallbacks.setdefault(op_name(m), s.reason)
        users_outside = {}
        for step in self.steps:
            if step.kind != "region":
                for n in step.nodes:
                    for a in n.all_input_nodes:
                        users_outside[a] = True
        for a in self.output_node.all_input_nodes:
            users_outside[a] = True
        for step in self.steps:
            if step.kind == "region":
                for key, _, kind in step.region.inputs:
                    if kind != "dim":
                        users_outside[key] = True
        for step in self.steps:
            if step.kind != "region":
                continue
            r = step.region
            for n in r.nodes:
                if users_outside.get(n):
                    val = r.env[n]
                    if isinstance(val, LVal):
                        step.outputs.append((n, val))
            if not step.outputs and not r.nodes:
                step.kind = "empty"
                continue
            if all(n.op in VIEW_ONLY or n.op == "const" for n in r.g.nodes):
                step.kind, step.nodes = "eager_views", list(r.nodes)
                continue
            r.g.outputs = []
            index = {}
            for _, lv in step.outputs:
                if lv.v.node.id not in index:
                    index[lv.v.node.id] = len(r.g.outputs)
                    r.g.outputs.append(lv.v.node)
            step.out_index = [index[lv.v.node.id] for _, lv in step.outputs]
            try:
                step.program = Program(r.g, True, (self.device or default_device()).profile, r.name)
                st.STATS.plans += 1
                st.track(step.program)
            except DvmError as e:
                step.kind, step.nodes, step.reason = "eager", list(r.nodes), f"fuser: {str(e).splitlines()[0]}"
                for n in r.nodes:
                    self.fallbacks.setdefault(op_name(n), step.reason)
            step.nodes = list(r.nodes)

    # ---- running -------------------------------------------------------------------------------------------
    def __call__(self, args: list):
        env = dict(zip(self.placeholders, args))
        device = self.device or default_device()
        st.STATS.calls += 1
        for step in self.steps:
            if step.kind == "region":
                try:
                    self._run_region(step, env, device)
                    continue
                except (DeviceError, BytecodeError):
                    raise  # a fault of the generated code is a dvmlang bug: never hidden behind eager
                except DvmError as e:  # e.g. a tile that does not fit UB at these sizes: this call runs eagerly
                    st.STATS.runtime_fallbacks += 1
                    st.STATS.runtime_reasons[step.region.name] = str(e).splitlines()[0]
                    self._run_eager(step.nodes, env, count=True)
            elif step.kind in ("eager", "host", "eager_views", "custom", "writeback"):
                self._run_eager(step.nodes, env, count=step.kind == "eager")
        out = torch.fx.node.map_arg(self.output_node.args[0], lambda n: env[n])
        return out

    def _run_eager(self, nodes, env, count):
        for n in nodes:
            if count:
                st.STATS.fallback_ops[op_name(n)] += 1
            if n.op == "get_attr":
                obj = self.gm
                for part in n.target.split("."):
                    obj = getattr(obj, part)
                env[n] = obj
                continue
            args = torch.fx.node.map_arg(n.args, lambda a: self._host(a, env))
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: self._host(a, env))
            t0 = time.perf_counter()
            env[n] = n.target(*args, **kwargs)
            if count:
                st.STATS.eager_s += time.perf_counter() - t0

    def _host(self, a, env):
        """``a``'s value; a host computation (SymInt arithmetic) a region read symbolically and whose step comes
        later is computed now (a region that runs eagerly at run time needs its value)."""
        if a not in env and a.op == "call_function" and a.target in HOST:
            self._run_eager([a], env, count=False)
        return env[a]

    def _run_region(self, step: Step, env, device):
        r = step.region
        inputs = {}
        arrays = []
        # (by position: a program planned before for the same structure has its own input nodes)
        for (key, n, kind), pn in zip(r.inputs, step.program.graph.inputs):
            if kind == "tensor":
                a = _view(step.views, key, env[key])
            elif kind == "scalar":
                a = np.asarray(env[key], dtype=n.dtype.np)
            else:  # a size no tensor input binds
                a = np.broadcast_to(np.zeros((), np.int8), (self.sources[key[1]](env),))
            inputs[pn.id] = a
            arrays.append(a)
        t0 = time.perf_counter()
        values, record, launches = step.program.run(inputs, device, active_session())
        st.STATS.host_s += time.perf_counter() - t0
        st.STATS.launches += launches
        if record is not None:
            st.STATS.cycles += record.cycles
            st.STATS.sim_us += record.time_us
            st.LAST_LAUNCHES.append(record)
        outs = step.program.graph.outputs
        given = [a for a in arrays if a.size]
        orders = step.orders
        if orders is None:  # (each output's stride order: its fake value's, the same at every call)
            orders = step.orders = [stride_order(fx.meta.get("val")) for fx, _ in step.outputs]
            step.row_major = [o is not None and o == list(range(len(o))) for o in orders]
        for (fx, lv), i, order, row_major in zip(step.outputs, step.out_index, orders, step.row_major):
            arr = values[outs[i].id]
            # an array this call allocated (it owns its memory, and is none of the arrays before it) shares memory
            # with none of them: only the others are compared
            fresh = arr.base is None and not any([arr is a for a in given])
            env[fx] = from_numpy(arr, lv, () if fresh else given, fx, order, row_major)
            given.append(arr)


def _lower(r: Region, node, fn):
    args = node.args
    kwargs = dict(node.kwargs)
    r.g.loc = _source_loc(node)  # the fused kernels' instructions map to the model's line, not to this backend
    try:
        return fn(r, node, *args, **kwargs)
    finally:
        r.g.loc = None


def _source_loc(node):
    """The model's source line an FX node came from (the innermost frame of its recorded stack trace)."""
    st = node.meta.get("stack_trace")
    if not st:
        return None
    m = None
    for m in _FRAME.finditer(st):
        pass
    if m is None:
        return None
    return SourceLoc(m.group(1), int(m.group(2)), 0, func=m.group(3))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _tuple_getitem(node, region) -> bool:
    """A getitem of a multi-output op lowered in the region (native_layer_norm's results)."""
    if node.target is not operator.getitem or region is None:
        return False
    return isinstance(region.env.get(node.args[0]), tuple)


def _getitem(r: Region, node, src, i):
    val = r.env.get(src)
    if not isinstance(val, tuple) or val[i] is None:
        raise Unsupported("getitem of a result the lowering does not compute")
    return val[i]


LOWERINGS[operator.getitem] = _getitem


def _symbol_sources(placeholders) -> dict:
    """sympy symbol -> function(env) -> its size at run time, from the first placeholder that has it."""
    out = {}
    for p in placeholders:
        val = p.meta.get("val")
        if isinstance(val, torch.SymInt):
            e = val.node.expr
            if e.is_Symbol and e not in out:
                out[e] = (lambda env, p=p: int(env[p]))
        elif isinstance(val, torch.Tensor):
            for i, s in enumerate(val.shape):
                if isinstance(s, torch.SymInt):
                    e = s.node.expr
                    if e.is_Symbol and e not in out:
                        out[e] = (lambda env, p=p, i=i: int(env[p].shape[i]))
    return out


def _view(views: dict, key, t) -> np.ndarray:
    """The numpy view of region input ``key``'s tensor ``t`` (``to_numpy``): the same array at every call that
    passes the same tensor, unchanged (the same memory, shape and strides), as a model's weights and buffers
    are. The device's L2 model knows a GM buffer by its array, as a real L2 knows it by its address: a weight is
    then warm at the next call, as on an NPU, not a new buffer every call. A view (and the tensor it holds) is
    kept for a parameter from its first call, for any other tensor from the second call in a row that passes
    it; a tensor passed once (an activation) is referenced weakly, so its memory is not held."""
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    seen = views.get(key)
    if seen is None or seen[0]() is not t:
        if not isinstance(t, torch.nn.Parameter):
            views[key] = (weakref.ref(t), None, 0, None)
            return to_numpy(t)
        seen = (weakref.ref(t), None, 0, None)
    a = seen[1]
    if a is not None and t.data_ptr() == seen[2] and t.stride() == seen[3] and a.shape == t.shape:
        return a
    a = to_numpy(t)[...]  # (a view of the tensor's array: a fused program keeps its flat view while ``a`` lives)
    views[key] = (seen[0], a, t.data_ptr(), t.stride())
    return a


def to_numpy(t) -> np.ndarray:
    """A numpy view of a CPU torch tensor (zero-copy; bfloat16 through int16)."""
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.requires_grad:
        t = t.detach()
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(dt.bfloat16.np)
    return t.numpy()


def from_numpy(arr: np.ndarray, lv: LVal, others, fx, order=False, row_major: bool = False) -> torch.Tensor:
    """A torch tensor sharing ``arr``'s memory, in the layout torch's metadata says (an eager kernel downstream
    may rely on it). Copied when read-only, when it aliases a region input or another output (autograd may
    accumulate into a gradient in place), or when its strides are not torch's."""
    if not arr.flags.writeable or any(s < 0 for s in arr.strides) or \
            any(np.may_share_memory(arr, a) for a in others):
        arr = np.array(arr)
    if arr.dtype == dt.bfloat16.np:
        t = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(arr)
    if lv.folded:
        t = t.reshape([int(np.prod([arr.shape[a] for a in g], dtype=np.int64)) for g in lv.groups])
    if row_major and arr.flags.c_contiguous:  # (``order``, worked out by the caller, is the dims in order)
        return t
    return _layout(t, fx.meta.get("val"), order)


def _hint(s) -> int:
    if isinstance(s, torch.SymInt):
        h = s.node.hint
        return int(h) if h is not None else 0
    return int(s)


def stride_order(val):
    """The dims of torch's fake value ``val`` outermost first, as its strides order them (None when it is not a
    tensor of two dims or more): what ``_layout`` gives a result, the same at every call of a graph."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return None
    want = [_hint(s) for s in val.stride()]
    return sorted(range(val.dim()), key=lambda i: (-want[i], i))


def _layout(t: torch.Tensor, val, order=False) -> torch.Tensor:
    """``t`` with the stride order of torch's fake value ``val`` (a copy only when the order differs); ``order``:
    ``stride_order(val)`` when the caller kept it."""
    if order is False:
        order = stride_order(val)
    if order is None or t.dim() != len(order):
        return t
    expect, acc = [0] * t.dim(), 1
    for i in reversed(order):
        expect[i] = acc
        acc *= t.shape[i]
    if all(t.shape[i] == 1 or t.stride(i) == expect[i] for i in range(t.dim())):
        return t
    out = torch.empty_permuted(t.shape, order, dtype=t.dtype)
    out.copy_(t)
    return out

