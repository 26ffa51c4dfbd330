"""Lazy sessions: ``with dvmlang.lazy() as session:`` and the eager session of code outside one.

A session is the backend (``backend.Backend``) that ``dvmlang.ops`` builds on for ``dvmlang.tensor`` values: it
captures each operation into its pending graph (``memory._Pending``, concrete shapes), keeps in-place writes,
views and host writes in order (a hazard flushes first), and flushes the pending graph into a batch
(``flush``) when a result is needed or ``max_pending`` nodes are pending. Outside every session, a thread's
eager session runs each operation at once (one kernel per operation, no stats). Sessions nest per thread; the
runtime (``runtime.LazyRuntime``) holds the stack.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ... import dtypes as dt
from ...errors import user_frames_methods, user_loc
from ...npu import default_device
from ...trace.record import active_session
from ..backend import Backend
from ..fusion import FREE, VIEWS
from ..api import Program
from ..graph import Graph, GraphError, Node, SymTable
from .flush import _abandon, _Batch, _note, _run_batch, _structure, _wait_value, _WriteBack
from .memory import _InPlace, _Input, _Pending, _root, _Storage, _Value
from .runtime import LazyRuntime, current_runtime, install
from .stats import REASONS, FlushRecord, LazyStats
from .tensor import LazyTensor, _index_text, tensor


def _free_chain(n: Node) -> bool:
    """Whether ``n`` is a constant (or a view of one): nothing to compute, carried into the next graph."""
    while n.op in VIEWS:
        n = n.inputs[0]
    return n.op in FREE


@user_frames_methods
class LazySession(Backend):
    """``with dvmlang.lazy() as session:`` — capture operations on ``dvmlang.tensor`` values and run them as fused
    launches when their results are needed. Options: ``background`` (encode and run flushes on a worker
    thread), ``max_pending`` (flush when the pending graph has this many nodes), ``fuse`` (False: one kernel
    per operation, the unfused baseline), ``device`` (default: the current device at each flush). A session
    works in the runtime that is current when it is made (``current_runtime()``)."""

    runtime_sizes = True

    def __init__(self, background: bool = True, max_pending: int = 256, fuse: bool = True, device=None,
                 name: str = "lazy", _eager: bool = False):
        if not isinstance(max_pending, int) or max_pending < 1:
            raise GraphError(f"max_pending must be a positive node count, got {max_pending!r}")
        self.background = bool(background)
        self.max_pending = max_pending
        self.fuse = bool(fuse)
        self.device = device
        self.name = name
        self.eager = _eager
        self.rt = current_runtime()
        self.stats = LazyStats()
        self.syms = SymTable()  # concrete shapes only: ops' broadcasting checks compare integers
        self.pg = _Pending(self)
        self.thread = threading.get_ident()
        self.last: _Batch | None = None
        self.unfinished: list[_Batch] = []  # submitted batches that may not have run yet (an interrupt cancels them)
        self.errors: list[_Batch] = []
        self.active = False

    def __repr__(self) -> str:
        mode = "eager" if self.eager else ("background" if self.background else "foreground")
        return f"<dvmlang.lazy session {self.name} ({mode}), {len(self.stats.flushes)} flushes>"

    # ---- context --------------------------------------------------------------------------------------
    def __enter__(self) -> "LazySession":
        if self.active:
            raise GraphError("this dvmlang.lazy() session is already active; create a new one with dvmlang.lazy()")
        outer = self.rt.session()
        if not outer.eager and outer.pg.busy:
            outer._flush("nested", "a nested dvmlang.lazy() block begins")
        self.thread = threading.get_ident()
        self.active = True
        self.rt.threads.stack.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        st = self.rt.threads.stack
        if st and st[-1] is self:
            st.pop()
        self.active = False
        if exc_type is not None and not issubclass(exc_type, Exception):
            self._interrupted(exc_type)
            return False
        try:
            self._flush("exit", "leaving the dvmlang.lazy() block" if exc is None else
                        f"leaving the dvmlang.lazy() block on {exc_type.__name__}")
            self.wait()
        except Exception as e:  # noqa: BLE001
            if exc is None:
                raise
            exc.add_note(f"dvmlang.lazy: the work pending when the block raised could not be computed either "
                         f"({type(e).__name__}: {e}); those values are never computed")
        except BaseException as e:  # Ctrl-C while the block's last flushes run
            self._interrupted(type(e))
            raise
        return False

    def _interrupted(self, exc_type: type) -> None:
        """A KeyboardInterrupt (any BaseException that is not an Exception) ends the block: the pending graph is
        dropped and flushes still in flight publish nothing (unless one has begun to), so no wrapped array is
        written after the interrupt. Their values are never computed."""
        why = "the lazy block was interrupted by " + exc_type.__name__
        self._discard(why)
        for b in self.unfinished:
            b.cancel(why)
        self.wait(raise_errors=False)

    # ---- the backend dvmlang.ops builds on (backend.Backend) --------------------------------------------------
    def shape_text(self, shape) -> str:
        return "(" + ", ".join(str(d) for d in shape) + ")"

    def value(self, x):
        if isinstance(x, LazyTensor):
            return x
        if isinstance(x, np.ndarray):
            return tensor(x)
        return None

    def node(self, kind, inputs, shape, dtype, attrs):
        if kind == "custom":
            return self._custom(inputs, attrs)
        if kind == "custom_out":
            return inputs[0].outputs[attrs["index"]]
        if len(self.pg.nodes) >= self.max_pending:
            self._flush("size cap", f"the pending graph reached {self.max_pending} nodes")
        tensors = [self._tensor(x) for x in inputs]
        if kind in VIEWS:
            src = tensors[0]
            if src._wb is not None:
                self._flush("hazard", "a view of a tensor with a pending in-place write")
        while True:
            pg = self.pg
            nodes = [self._node_of(t) for t in tensors]
            if self.pg is pg:
                break
        node = Node(kind, nodes, tuple(int(d) for d in shape), dtype, dict(attrs))
        node.loc = self.loc if self.loc is not None else user_loc()
        pg.add(node)
        v = _Value(node.shape, dtype, node, pg)
        pg.owners[node.id] = weakref.ref(v)
        if kind not in FREE:
            pg.ops += 1
        t = LazyTensor._of(v)
        if kind in VIEWS:
            src = tensors[0]
            t._view = True
            if src._v.pending:
                root = src._base if src._base is not None else src
                t._base = root
                root._track_view(t)
        if self.eager and kind not in FREE:
            self._flush("eager")
        return t

    def _tensor(self, x) -> "LazyTensor":
        if isinstance(x, LazyTensor):
            return x
        if isinstance(x, np.ndarray):
            return tensor(x)
        raise GraphError(f"expected a dvmlang.tensor, got {type(x).__name__}")

    def _node_of(self, t: "LazyTensor") -> Node:
        """The node of ``t`` in the current pending graph: its own node when pending here, else an input."""
        pg = self.pg
        v = t._v
        if v.pending and v.pg is pg:
            if not (pg.targets and v.node.op in VIEWS and self._view_of_written(v.node)):
                return v.node
            # a view aliases its base: it must see the pending in-place write, so the write runs first
            self._flush("hazard", "reading a view of an array that a pending in-place operation writes")
            pg = self.pg
            v = t._v
        if v.pending:
            other = v.pg
            if _free_chain(v.node):
                return self._rehome(v)
            if other.session.thread != threading.get_ident():
                raise GraphError("this tensor is pending in a dvmlang.lazy() session of another thread; observe it "
                                 "there first")
            other.session._flush("nested", "a value pending in an outer session is used")
            v = t._v
        if pg.written(v):
            self._flush("hazard", "reading an array that a pending in-place operation writes")
            pg = self.pg
        entry = pg.inputs.get(id(v))
        if entry is not None:
            return entry.node
        return self._input(v)

    def _view_of_written(self, n: Node) -> bool:
        while n.op in VIEWS:
            n = n.inputs[0]
        src = self.pg.input_of.get(n.id)
        return src is not None and self.pg.written(src)

    def _input(self, v: _Value) -> Node:
        node = self.pg.add_input(v)
        self.pg.guard(v)
        return node

    def _rehome(self, v: _Value) -> Node:
        """Copy a constant (or a view of one) into this session's pending graph."""
        def copy(n: Node) -> Node:
            return self.pg.add(Node(n.op, [copy(i) for i in n.inputs], n.shape, n.dtype, dict(n.attrs), loc=n.loc))
        node = copy(v.node)
        v.node, v.pg = node, self.pg
        self.pg.owners[node.id] = weakref.ref(v)
        return node

    # ---- in-place operations and host writes -----------------------------------------------------------
    def _inplace(self, t: "LazyTensor", fn, other) -> "LazyTensor":
        v = t._v
        guards = self.rt.guards
        if not v.pending and v.array is not None and not guards.writeable(v.array):
            raise GraphError(f"in-place operation on a tensor whose array is read-only (shape {t.shape}); "
                             "wrap a writeable array or use the out-of-place operator")
        if v.pending and (t._view or t._live_views()):
            self._flush("hazard", "an in-place write to a pending value that has views")
        new = fn(t, other)
        new = self._tensor(new)
        if tuple(new.shape) != tuple(t.shape):
            raise GraphError(f"in-place operation: the result has shape {tuple(new.shape)} but the tensor has shape "
                             f"{tuple(t.shape)} (in-place results cannot broadcast the target)")
        if new.dtype is not t.dtype:
            if not _can_cast(new.dtype, t.dtype):
                raise GraphError(f"in-place operation: result type {new.dtype.name} cannot be stored in a tensor of "
                                 f"{t.dtype.name}")
            new = t._ops.cast(new, t.dtype)
        if self.eager:
            arr = new._v.array
            dst = t._v.array
            if dst is None:
                raise GraphError("internal: eager in-place target has no storage")
            guards.write_into(dst, arr)
            return t
        old = t._v
        if old.pending:
            t._v = new._v  # a pending value has no storage yet: the tensor simply names the new value
            return t
        if old.array is not None and not guards.writeable(old.array):
            raise GraphError(f"in-place operation on a tensor whose array is read-only (shape {t.shape}); "
                             "wrap a writeable array or use the out-of-place operator")
        t._v = new._v
        t._wb = old
        pg = self.pg
        pg.writebacks[id(old)] = _InPlace(old, t)
        pg.targets.append(old)
        pg.guard(old)
        return t

    def _host_write(self, t: "LazyTensor", index, value) -> None:
        """``t[index] = value``: a partial write runs on the host, after the work that touches ``t``'s memory."""
        v = t._v
        if v.pending or (isinstance(value, LazyTensor) and value._v.pending):
            self._flush("unfusible", "an indexed assignment of or to a pending value")
            v = t._v
        if isinstance(value, LazyTensor):
            value = value._observe("observe", "the value of an indexed assignment")
        _wait_value(v, self)
        if self.pg.touched(v):
            self._flush("hazard", "an indexed assignment writes an array that pending work reads")
        self.rt.worker.drain(self)
        arr = v.array
        if not self.rt.guards.writeable(arr):
            raise GraphError(f"indexed assignment to a tensor whose array is read-only (shape {t.shape})")
        try:
            arr[index] = value
        except (IndexError, TypeError, ValueError) as e:
            try:
                target = f"t[{_index_text(index)}] of shape {np.shape(arr[index])}"
            except (IndexError, TypeError, ValueError):
                target = f"a tensor of shape {arr.shape}"
            raise GraphError(f"t[{_index_text(index)}] = value: {e}; the target is {target}: give an index within "
                             "the shape and a value of the target's shape (or one that broadcasts to it)") from None

    # ---- flushing -----------------------------------------------------------------------------------------
    def flush(self, wait: bool = False) -> FlushRecord | None:
        """Run the pending graph now (reason ``explicit``); in the background this only hands it to the worker.
        ``wait=True`` also waits until it ran and raises any error of this session's flushes not reported yet.
        Returns the flush's record (None when nothing was pending)."""
        rec = self._flush("explicit", "session.flush()")
        if wait:
            self.wait()
        return rec

    def _flush(self, reason: str, detail: str = "") -> FlushRecord | None:
        assert reason in REASONS, reason
        pg = self.pg
        if not pg.busy:
            return None
        self.pg = _Pending(self)
        try:
            return self._submit(pg, reason, detail)
        except BaseException as e:
            _abandon(pg, f"this value was never computed: flushing it failed with {type(e).__name__}: {e}", e)
            raise

    def _submit(self, pg: _Pending, reason: str, detail: str) -> FlushRecord | None:
        outs: list[_Value] = []
        seen: set[int] = set()
        carry: list[_Value] = []
        for ref in pg.owners.values():
            v = ref()
            if v is None or v.pg is not pg or v.node is None:
                continue
            if _free_chain(v.node):
                carry.append(v)
                continue
            outs.append(v)
            seen.add(v.node.id)
        wb: list[tuple[_InPlace, Node]] = []  # each pending in-place write and the node of the value it writes
        for w in pg.writebacks.values():
            src = w.tensor._v
            if src.pending and src.pg is pg:
                node = src.node
                if node.id not in seen:
                    outs.append(src)
                    seen.add(node.id)
            else:  # already flushed (or ready): write it back from its array
                node = pg.inputs[id(src)].node if id(src) in pg.inputs else pg.add_input(src)
            wb.append((w, node))
        out_nodes = [v.node for v in outs]
        for _, node in wb:
            if node not in out_nodes:
                out_nodes.append(node)
                outs.append(None)
        order = sorted(range(len(out_nodes)), key=lambda i: out_nodes[i].id)
        out_nodes = [out_nodes[i] for i in order]
        outs = [outs[i] for i in order]
        keep: set[int] = set()
        stack = list(out_nodes)
        while stack:
            n = stack.pop()
            if n.id in keep:
                continue
            keep.add(n.id)
            stack.extend(n.inputs)
        nodes = [n for n in pg.nodes if n.id in keep]
        computed = sum(1 for n in nodes if n.op != "input" and n.op not in FREE)
        rec = FlushRecord(len(self.stats.flushes), reason, detail, ops=computed, dead=pg.ops - computed,
                          outputs=len(out_nodes), background=self.background and not self.eager)
        if not self.eager:
            self.stats.flushes.append(rec)
        for v in carry:
            self._rehome(v)
        if not out_nodes:
            pg.release()
            return rec
        b = _Batch(self, rec, self.device or default_device(), active_session())
        b.nodes = nodes
        b.out_nodes = out_nodes
        b.fuse = self.fuse and not self.eager
        b.key, b.vals = _structure(nodes, out_nodes, b.fuse, b.device.profile)
        b.inputs = pg.used_inputs(keep)
        b.outputs = outs
        b.guarded = pg.guarded
        pg.guarded = []
        index = {n.id: i for i, n in enumerate(out_nodes)}
        b.wbs = [_WriteBack(w.target, index[node.id]) for w, node in wb]
        tokens: dict[int, object] = {}  # stored base node id -> the storage of its result
        b.view_sources = {i: src for i, n in enumerate(out_nodes) if (src := pg.viewed_input(n)) is not None}
        with self.rt.state_lock:
            for v, n in zip(outs, out_nodes):
                if v is None:
                    continue
                v.node = None
                v.pg = None
                v.batch = b
                v.token = pg.token_for(n, tokens)
            for w, _ in wb:
                target, t = w
                target.batch = b
                t._v = target
                t._wb = None
                self.rt.writers.set(target.token, b)
                if target.array is not None:
                    self.rt.writers.set(_root(target.array), b)
        self._track(b)
        _run_batch(b, self.background and not self.eager)
        return rec

    def _track(self, b: _Batch) -> None:
        """``b`` is this session's newest batch (and unfinished until it ran)."""
        self.unfinished = [u for u in self.unfinished if not u.done.is_set()] + [b]
        self.last = b

    def wait(self, raise_errors: bool = True) -> None:
        """Wait until every flush of this session has run; raise the first error not reported yet."""
        last = self.last
        if last is not None:
            last.wait()
        if raise_errors:
            for b in self.errors:
                if not b.reported:
                    b.reported = True
                    _note(b)
                    raise b.error

    def _failed(self, b: _Batch) -> None:
        self.errors.append(b)

    def _discard(self, why: str) -> None:
        """Drop the pending graph: its live values become never computed (used when the block is interrupted)."""
        pg = self.pg
        self.pg = _Pending(self)
        _abandon(pg, f"this value was never computed: {why}")

    # ---- unfusible: user kernels --------------------------------------------------------------------------
    def _custom(self, inputs, attrs):
        name = getattr(attrs["kernel"], "__name__", "kernel")
        self._flush("unfusible", f"ops.custom({name}) runs a user kernel as its own launch")
        g = Graph(f"custom_{name}")
        tensors = [self._tensor(x) for x in inputs]
        ins: list[Node] = []
        for t in tensors:
            v = t._v
            if v.pending:  # pending in another session: make it concrete first
                t._observe("observe", f"an argument of ops.custom({name})")
                v = t._v
            n = g.add(Node("input", [], v.shape, v.dtype, {"name": f"in{len(ins)}"}, f"in{len(ins)}"))
            g.inputs.append(n)
            ins.append(n)
        call = g.add(Node("custom", ins, (), dt.int32, dict(attrs)))
        outs = []
        for i, (shape, d) in enumerate(attrs["outs"]):
            o = g.add(Node("custom_out", [call], tuple(int(s) for s in shape), d, {"index": i}))
            outs.append(o)
        g.outputs = list(outs)
        device = self.device or default_device()
        prog = Program(g, True, device.profile, g.name)
        rec = FlushRecord(len(self.stats.flushes), "unfusible", f"ops.custom({name})", ops=1, outputs=len(outs),
                          background=self.background and not self.eager, new_program=True)
        if not self.eager:
            self.stats.flushes.append(rec)
        b = _Batch(self, rec, device, active_session())
        b.program = prog
        b.guarded = []
        b.inputs = []
        for t, n in zip(tensors, ins):
            v = t._v
            with self.rt.state_lock:
                producer = v.batch
            b.inputs.append(_Input(n, v, producer))
            arr = v.guardable()
            if arr is not None:
                b.guarded.append(self.rt.guards.acquire(arr))
        values = [_Value(o.shape, o.dtype) for o in outs]
        with self.rt.state_lock:
            for v in values:
                v.batch = b
                v.token = _Storage()
        b.outputs = values
        self._track(b)
        _run_batch(b, self.background and not self.eager)
        return _CustomCall([LazyTensor._of(v) for v in values])


class _CustomCall:
    """What a session's ``custom`` node is: the output tensors of the user kernel's launch (``ops.custom`` takes
    each through a ``custom_out`` node)."""

    def __init__(self, outputs):
        self.outputs = outputs


def _can_cast(src: dt.DType, dst: dt.DType) -> bool:
    """numpy's same_kind rule for in-place results: float into int (or into bool) is refused."""
    order = {"b": 0, "u": 1, "i": 1, "f": 2}
    return order[src.kind] <= order[dst.kind]


def lazy(background: bool = True, max_pending: int = 256, fuse: bool = True, device=None,
         name: str = "lazy") -> LazySession:
    """``with dvmlang.lazy() as session:`` — capture operations on ``dvmlang.tensor`` values and run them fused
    when a result is needed (see ``docs/lazy.md``). ``session.stats`` records every flush and why."""
    return LazySession(background=background, max_pending=max_pending, fuse=fuse, device=device, name=name)


def _eager_session() -> LazySession:
    """A thread's session outside every ``dvmlang.lazy()`` block: each operation runs at once."""
    return LazySession(background=False, fuse=False, name="eager", _eager=True)


install(LazyRuntime(_eager_session))
