"""Runtime fusion of eager code: ``dvmlang.tensor`` values and ``with dvmlang.lazy():`` sessions.

Outside a session every operation on a ``dvmlang.tensor`` runs at once, one kernel per operation. Inside
``with dvmlang.lazy() as session:`` operations are only *captured* into a pending graph (concrete shapes, so
Python sees shapes and dtypes at once); the graph is *flushed* — fused with the fuser's rules, encoded and
run as one stacked launch — when something needs its results:

* **observe**: ``.numpy()``, ``np.asarray(t)``, ``float()``, ``int()``, ``bool()`` (a Python ``if``), ``print``,
  ``repr``, ``str``, ``.item()``, ``.tolist()``;
* **unfusible**: an operation the fuser does not take into a pending graph — ``ops.custom`` (a user kernel,
  run as its own launch), indexing ``t[i]`` and partial writes ``t[i] = v`` of a pending value;
* **hazard**: memory that pending work reads or writes is about to be read or written in the wrong order
  (see ``docs/lazy.md`` for the rule);
* **size cap**: the pending graph holds ``max_pending`` nodes;
* **nested** / **exit** / **explicit**: entering a nested session, leaving the block, ``session.flush()``.

Every flush is recorded with its reason in ``session.stats``. Only values that a live Python object still
references (or that an in-place operation writes back) become outputs of a flush; everything else stays
inside its fused kernel and never reaches GM. Values are held in cells (``_Value``) that move from
*pending* (a node of the pending graph) to *in flight* (a submitted batch) to *ready* (an array) or *failed*
(never computed); a flush publishes its results only after its whole launch succeeded.

A flushed graph is made shape-generic before it is compiled: every input dimension size other than 1 becomes
a symbol (equal sizes share one), so the next flush with the same structure and the same equalities reuses
the compiled program and only encodes for the new sizes.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..errors import user_frames, user_frames_methods
from .api import Program
from .fusion import FREE, VIEWS
from .graph import Graph, GraphError, Node, SymTable
from .operators import TensorOperators

__all__ = ["LazyTensor", "LazySession", "LazyStats", "FlushRecord", "tensor", "lazy"]

REASONS = ("observe", "unfusible", "hazard", "size cap", "nested", "exit", "explicit", "eager")


# ---- memory: roots, read-only guards, in-flight writers ---------------------------------------------------


def _root(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (views are followed to their base)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class _Guards:
    """Arrays that pending or in-flight work reads or writes are made read-only until that work has run, so a
    stray numpy write fails at once (``ValueError: assignment destination is read-only``) instead of changing
    what a flush reads. Guards are counted per memory root; a root and every array object guarded under it
    get their own flags back when the last holder releases it. Memory numpy does not own (a torch tensor's
    ``.numpy()``, ``np.frombuffer``, an object's ``__array_interface__``) is not guarded: numpy may refuse to
    make such an array writeable again, so its flags are never touched."""

    def __init__(self):
        self.lock = threading.RLock()
        self.entries: dict[int, list] = {}  # id(root) -> [root, holders, {id(obj): (obj, was_writeable)}]

    def acquire(self, arr: np.ndarray) -> np.ndarray:
        root = _root(arr)
        if not root.flags.owndata:
            return root  # release() finds no entry for it
        with self.lock:
            e = self.entries.get(id(root))
            if e is None:
                e = self.entries[id(root)] = [root, 0, {}]
            e[1] += 1
            for obj in (root, arr):
                if id(obj) not in e[2]:
                    was = bool(obj.flags.writeable)
                    e[2][id(obj)] = (obj, was)
                    if was:
                        obj.flags.writeable = False
        return root

    def release(self, root: np.ndarray) -> None:
        with self.lock:
            e = self.entries.get(id(root))
            if e is None:
                return
            e[1] -= 1
            if e[1] > 0:
                return
            del self.entries[id(root)]
            for obj, was in e[2].values():  # the root first: a view can only become writeable after its base
                if was:
                    try:
                        obj.flags.writeable = True
                    except ValueError:
                        pass

    def writeable(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` could be written before dvmlang guarded it (an array dvmlang does not know answers
        with its own flag)."""
        root = _root(arr)
        with self.lock:
            e = self.entries.get(id(root))
            if e is not None and id(arr) in e[2]:
                return e[2][id(arr)][1]
            return bool(arr.flags.writeable)

    def adopt(self, arr: np.ndarray) -> None:
        """A view of a writeable input published while the input was guarded is read-only; make it writeable
        (now, or when its root is released)."""
        if arr.flags.writeable or arr.base is None or _broadcasting(arr):
            return
        root = _root(arr)
        with self.lock:
            e = self.entries.get(id(root))
            if e is None:
                if root.flags.writeable:
                    try:
                        arr.flags.writeable = True
                    except ValueError:
                        pass
            elif id(arr) not in e[2]:
                e[2][id(arr)] = (arr, True)

    def write_into(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy ``src`` into ``dst`` although dvmlang guards it (the flush that owns the write does this); an array
        that was read-only before dvmlang guarded it is refused."""
        root = _root(dst)
        with self.lock:
            if not self.writeable(dst):
                raise GraphError(f"an in-place result cannot be written: its target array (shape {dst.shape}) is "
                                 "read-only")
            lifted = []
            for obj in (root, dst):
                if not obj.flags.writeable:
                    obj.flags.writeable = True
                    lifted.append(obj)
            try:
                np.copyto(dst, src, casting="unsafe")
            finally:
                for obj in reversed(lifted):
                    obj.flags.writeable = False



def _broadcasting(a: np.ndarray) -> bool:
    return any(s == 0 and n > 1 for s, n in zip(a.strides, a.shape))


_guards = _Guards()


class _Writers:
    """The last submitted batch that writes each storage (by token), so a host read waits for it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items: dict[int, tuple] = {}

    def set(self, token, batch) -> None:
        with self.lock:
            self.items = {k: v for k, v in self.items.items() if not v[1].done.is_set()}
            self.items[id(token)] = (token, batch)

    def get(self, token):
        with self.lock:
            item = self.items.get(id(token))
            return item[1] if item is not None and item[0] is token else None


_writers = _Writers()
_state_lock = threading.Lock()  # value state transitions (main thread marks, the worker publishes)
_exec_lock = threading.Lock()  # one Program runs on the simulated device at a time


# ---- values -----------------------------------------------------------------------------------------------


class _Failure:
    """Why a value was never computed (kept on the value; observing it raises a GraphError with this message)."""

    __slots__ = ("message", "cause")

    def __init__(self, message: str, cause: BaseException | None = None):
        self.message = message
        self.cause = cause

    def raise_(self):
        raise GraphError(self.message) from self.cause


class _Storage:
    """The identity of a fresh result's memory before its array exists (a stored value and its views share it)."""

    __slots__ = ()


class _Value:
    """The cell behind a tensor: pending (``node`` in ``pg``), in flight (``batch``), ready (``array``) or failed
    (``error``). ``token`` names the memory the value lives in once it has storage: the root array of a wrapped
    array, or a ``_Storage`` shared by a flush's result and its views (None while pending)."""

    __slots__ = ("shape", "dtype", "node", "pg", "batch", "array", "error", "token", "__weakref__")

    def __init__(self, shape, dtype, node=None, pg=None, array=None):
        self.shape = shape
        self.dtype = dtype
        self.node = node
        self.pg = pg
        self.batch = None
        self.array = array
        self.error = None
        self.token = _root(array) if array is not None else None

    def guardable(self) -> np.ndarray | None:
        """The array to make read-only while pending work uses this value (None: memory nobody else has yet)."""
        if self.array is not None:
            return self.array
        return self.token if isinstance(self.token, np.ndarray) else None

    @property
    def pending(self) -> bool:
        return self.node is not None


def _same_storage(a: _Value, b: _Value) -> bool:
    """Whether two values may live in the same memory: one storage, or arrays whose byte ranges overlap (two numpy
    arrays over one buffer numpy does not own, such as two ``.numpy()`` of one torch tensor, have different
    roots)."""
    if a.token is not None and a.token is b.token:
        return True
    return a.array is not None and b.array is not None and np.may_share_memory(a.array, b.array)


class _Pending:
    """The pending graph of a session: concrete shapes, nodes in capture order."""

    def __init__(self, session: "LazySession"):
        self.session = session
        self.nodes: list[Node] = []
        self.owners: dict[int, weakref.ref] = {}  # node id -> the value it computes
        self.inputs: dict[int, tuple] = {}  # id(value) -> (node, value, producer batch at capture)
        self.input_of: dict[int, _Value] = {}  # input node id -> its value
        self.guarded: list[np.ndarray] = []  # roots acquired in _guards
        self.targets: list[_Value] = []  # storages that pending in-place operations write
        self.writebacks: dict[int, tuple] = {}  # id(target value) -> (target, tensor)
        self.ops = 0
        self._ids = itertools.count()

    def add(self, node: Node) -> Node:
        node.id = next(self._ids)
        self.nodes.append(node)
        return node

    def guard(self, v: _Value) -> None:
        arr = v.guardable()
        if arr is not None:
            self.guarded.append(_guards.acquire(arr))

    def written(self, v: _Value) -> bool:
        """Whether a pending in-place operation writes ``v``'s memory."""
        return any(_same_storage(v, t) for t in self.targets)

    def touched(self, v: _Value) -> bool:
        """Whether pending work reads or writes ``v``'s memory."""
        return self.written(v) or any(_same_storage(v, u) for _, u, _ in self.inputs.values())

    def release(self) -> None:
        for root in self.guarded:
            _guards.release(root)
        self.guarded = []

    @property
    def busy(self) -> bool:
        return self.ops > 0 or bool(self.writebacks)


# ---- flushes ----------------------------------------------------------------------------------------------


@dataclass
class FlushRecord:
    """One flush: why it happened and what it ran. ``ops`` counts the captured operations it computed (views
    and casts included), ``dead`` those it dropped because nothing could observe them, ``outputs`` the values
    it published, ``bytes_stored`` the GM bytes its launch(es) wrote (results and workspaces between fused
    groups), ``encode_s`` the host time spent planning and encoding (including ``builds`` kernel builds when a
    program or a tile shape is new), ``sim_s`` the simulator's wall time."""

    index: int
    reason: str
    detail: str = ""
    ops: int = 0
    dead: int = 0
    outputs: int = 0
    kernels: int = 0
    launches: int = 0
    bytes_stored: int = 0
    bytes_read: int = 0
    cycles: int = 0
    encode_s: float = 0.0
    sim_s: float = 0.0
    new_program: bool = False
    builds: int = 0
    background: bool = False
    names: list = field(default_factory=list)
    error: str | None = None


class LazyStats:
    """What a session did. ``print(session.stats)`` gives a summary; ``flushes`` has one record per flush."""

    def __init__(self):
        self.flushes: list[FlushRecord] = []
        self.encode_intervals: list[tuple[float, float]] = []  # worker wall intervals spent encoding
        self.blocked_intervals: list[tuple[float, float]] = []  # main thread waiting for the worker

    @property
    def launches(self) -> int:
        return sum(f.launches for f in self.flushes)

    @property
    def ops_fused(self) -> int:
        """Operations computed by flushes (each either fused with others or alone in its kernel)."""
        return sum(f.ops for f in self.flushes)

    @property
    def ops_dropped(self) -> int:
        return sum(f.dead for f in self.flushes)

    @property
    def kernels(self) -> int:
        return sum(f.kernels for f in self.flushes)

    @property
    def bytes_stored(self) -> int:
        return sum(f.bytes_stored for f in self.flushes)

    @property
    def cycles(self) -> int:
        return sum(f.cycles for f in self.flushes)

    @property
    def encode_s(self) -> float:
        return sum(f.encode_s for f in self.flushes)

    @property
    def reasons(self) -> collections.Counter:
        return collections.Counter(f.reason for f in self.flushes)

    @property
    def blocked_s(self) -> float:
        return sum(b - a for a, b in self.blocked_intervals)

    @property
    def hidden_encode_s(self) -> float:
        """Encode time on the background thread during which the main thread was not waiting for it."""
        enc = _union(self.encode_intervals)
        blk = _union(self.blocked_intervals)
        total = sum(b - a for a, b in enc)
        return max(0.0, total - _overlap(enc, blk))

    def __repr__(self) -> str:
        r = ", ".join(f"{k} {v}" for k, v in self.reasons.items())
        return (f"<LazyStats {len(self.flushes)} flushes ({r}), {self.launches} launches, {self.ops_fused} ops, "
                f"{self.bytes_stored} bytes stored>")

    def __str__(self) -> str:
        lines = [f"{len(self.flushes)} flush(es), {self.launches} launch(es), {self.kernels} kernel(s), "
                 f"{self.ops_fused} op(s) computed, {self.ops_dropped} dropped, {self.bytes_stored} bytes stored, "
                 f"{self.cycles} cycles"]
        enc = self.encode_s
        if enc:
            hid = self.hidden_encode_s
            lines.append(f"encode {enc * 1e3:.2f} ms on the host"
                         + (f", {hid * 1e3:.2f} ms of it hidden by the background thread" if hid else ""))
        for f in self.flushes:
            what = f"{f.ops} op(s) -> {f.kernels} kernel(s) in {f.launches} launch(es), {f.outputs} output(s), " \
                   f"{f.bytes_stored} B stored, {f.cycles} cycles"
            if f.dead:
                what += f", {f.dead} dead op(s) dropped"
            if f.error:
                what += f", FAILED: {f.error}"
            lines.append(f"  #{f.index} {f.reason}" + (f" ({f.detail})" if f.detail else "") + f": {what}")
        return "\n".join(lines)


def _union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(xs, ys) -> float:
    total, j = 0.0, 0
    for a, b in xs:
        while j < len(ys) and ys[j][1] <= a:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            total += max(0.0, min(b, ys[k][1]) - max(a, ys[k][0]))
            k += 1
    return total


class _Batch:
    """A flushed graph on its way to the device."""

    def __init__(self, session, record: FlushRecord, device, trace):
        self.session = session
        self.record = record
        self.device = device
        self.trace = trace
        self.key = None
        self.nodes: list[Node] = []
        self.out_nodes: list[Node] = []
        self.vals: dict = {}
        self.fuse = True
        self.program: Program | None = None  # preset for one-off programs (ops.custom)
        self.inputs: list[tuple] = []  # (value, producer batch) in input node order
        self.outputs: list = []  # value (or None) per output node
        self.wbs: list[tuple] = []  # (target value, output index)
        self.view_sources: dict[int, _Value] = {}  # output index -> the input value it is a view of
        self.guarded: list[np.ndarray] = []
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.reported = False
        self.cancelled: str | None = None  # why the batch must not publish (its session was interrupted)
        self.publishing = False  # past the point of no return: its results are being published
        self.claimed = False  # someone (the thread running it, or an interrupted submission) finishes it

    def claim(self) -> bool:
        """Take the batch to run or to fail it: True for the first caller only."""
        with _state_lock:
            if self.claimed:
                return False
            self.claimed = True
            return True

    def cancel(self, why: str) -> bool:
        """Keep the batch from publishing anything (its session was interrupted): True unless it has already
        begun to publish, which it then completes."""
        with _state_lock:
            if self.publishing or self.done.is_set():
                return False
            self.cancelled = why
            return True

    def wait(self) -> None:
        if not self.done.is_set():
            t0 = time.perf_counter()
            # in slices: a Ctrl-C that arrives just before the wait begins is only seen when it returns
            while not self.done.wait(0.05):
                pass
            self.session.stats.blocked_intervals.append((t0, time.perf_counter()))


class _TimedProgram(Program):
    """A Program that accounts the host time spent preparing (encoding) its groups."""

    encode_s = 0.0

    def prepare_group(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().prepare_group(*args, **kwargs)
        finally:
            self.encode_s += time.perf_counter() - t0


class _Programs:
    """Compiled programs by structural key (LRU): a flush with the same structure and size equalities reuses
    the plan and the generated kernels and only encodes for its sizes."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self.items: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()
        self.count = itertools.count()

    def get(self, batch: _Batch) -> tuple[Program, bool]:
        with self.lock:
            prog = self.items.get(batch.key)
            if prog is not None:
                self.items.move_to_end(batch.key)
                return prog, False
        g = _symbolic(batch.nodes, batch.out_nodes, batch.vals, f"lazy{next(self.count)}")
        prog = _TimedProgram(g, batch.fuse, batch.device.profile, g.name)
        with self.lock:
            self.items[batch.key] = prog
            while len(self.items) > self.capacity:
                self.items.popitem(last=False)
        return prog, True

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


_programs = _Programs()


def _attr_key(n: Node, tok) -> tuple:
    a = n.attrs
    op = n.op
    if op == "reduce":
        return (a["op"], tuple(a["axes"]), bool(a["keepdims"]))
    if op == "permute":
        return tuple(a["perm"])
    if op == "const":
        return (type(a["value"]).__name__, repr(a["value"]))
    if op == "dim":
        return (tok(a["sym"]),)
    if op == "iota":
        return (a["axis"],)
    return tuple(sorted((k, repr(v)) for k, v in a.items()))


def _structure(nodes: list[Node], out_nodes: list[Node], fuse: bool, profile) -> tuple[tuple, dict]:
    """A key that two flushes share exactly when one compiled program serves both: the operations, dtypes,
    wiring, outputs, and every dimension as either a literal or the index of its size among the input sizes."""
    vals: dict[int, int] = {}
    for n in nodes:
        if n.op == "input":
            for d in n.shape:
                if d > 1 and d not in vals:
                    vals[d] = len(vals)

    def tok(d):
        s = vals.get(d)
        return d if s is None else ~s

    pos: dict[int, int] = {}
    parts: list = [fuse, profile.name, profile.ub_bytes]
    for i, n in enumerate(nodes):
        pos[n.id] = i
        parts.append((n.op, n.dtype.code, tuple(tok(d) for d in n.shape), tuple(pos[x.id] for x in n.inputs),
                      _attr_key(n, tok)))
    parts.append(tuple(pos[o.id] for o in out_nodes))
    return tuple(parts), vals


def _symbolic(nodes: list[Node], out_nodes: list[Node], vals: dict, name: str) -> Graph:
    """The shape-generic graph of a flush: every input size (other than 1) becomes a symbol shared by all
    dimensions of that size in this flush."""
    g = Graph(name)
    syms: dict[int, object] = {}
    k = 0
    for n in nodes:
        if n.op != "input":
            continue
        for j, d in enumerate(n.shape):
            if d in vals and d not in syms:
                syms[d] = g.syms.new(f"in{k}.shape[{j}]")
        k += 1
    new: dict[int, Node] = {}
    for n in nodes:
        op, attrs = n.op, dict(n.attrs)
        if op == "dim":
            s = syms.get(attrs["sym"])
            if s is None:
                op, attrs = "const", {"value": float(attrs["sym"])}
            else:
                attrs["sym"] = s
        name_ = ""
        if op == "input":
            name_ = f"in{len(g.inputs)}"
            attrs = {"name": name_}
        m = g.add(Node(op, [new[x.id] for x in n.inputs], tuple(syms.get(d, d) for d in n.shape), n.dtype, attrs,
                       name_))
        new[n.id] = m
        if op == "input":
            g.inputs.append(m)
    g.outputs = [new[o.id] for o in out_nodes]
    return g


def _execute(b: _Batch) -> None:
    """Run one batch: resolve its inputs, compile (or reuse) its program, launch, then publish every result at
    once. On any error nothing is published: the batch's values become failed (never computed)."""
    if not b.claim():
        return  # its submission was interrupted and the main thread failed it
    rec = b.record
    results: list = []
    try:
        arrays = [_input_array(v, producer, b) for v, producer in b.inputs]
        t0 = time.perf_counter()
        prog = b.program
        if prog is None:
            prog, rec.new_program = _programs.get(b)
        plan_s = time.perf_counter() - t0
        with _exec_lock:
            t1 = time.perf_counter()
            prog.encode_s = 0.0
            built = _builds(prog)
            values, record, launches = prog.run({n.id: a for n, a in zip(prog.graph.inputs, arrays)}, b.device,
                                                b.trace)
            run_s = time.perf_counter() - t1
            enc = prog.encode_s
            rec.builds = _builds(prog) - built
        rec.encode_s = plan_s + enc
        rec.sim_s = max(0.0, run_s - enc)
        if rec.background:
            b.session.stats.encode_intervals.append((t0, t0 + rec.encode_s))
        results = [values[o.id] for o in prog.graph.outputs]
        if record is not None:
            rec.launches = launches
            rec.kernels = len(record.members)
            rec.bytes_stored = int(record.bytes_written)
            rec.bytes_read = int(record.bytes_read)
            rec.cycles = int(record.cycles)
            rec.names = [m.name for m in record.members]
        with _state_lock:
            if b.cancelled is not None:
                raise GraphError(b.cancelled)
            b.publishing = True
        for target, i in b.wbs:
            _guards.write_into(target.array, results[i])
        with _state_lock:
            for v, arr in zip(b.outputs, results):
                if v is None:
                    continue
                v.array = arr
                if v.batch is b:
                    v.batch = None
            for target, _ in b.wbs:
                if target.batch is b:
                    target.batch = None
    except BaseException as e:  # noqa: BLE001 - every failure leaves the batch's values never computed
        _fail(b, e)
    finally:
        for i, src in b.view_sources.items():
            if i < len(results) and src.array is not None and _guards.writeable(src.array):
                _guards.adopt(results[i])
        for root in b.guarded:
            _guards.release(root)
        # a finished batch keeps its record and error only (sessions hold their last batch)
        b.inputs, b.outputs, b.wbs, b.nodes, b.out_nodes, b.guarded = [], [], [], [], [], []
        b.view_sources, b.program = {}, None
        b.done.set()


def _fail(b: _Batch, e: BaseException) -> None:
    """Mark a batch failed: its values (and in-place targets) become never computed."""
    b.error = e
    rec = b.record
    rec.error = f"{type(e).__name__}: {e}"
    why = _Failure(f"this value was never computed: lazy flush #{rec.index} ({rec.reason}) failed with "
                   f"{type(e).__name__}: {e}", e)
    with _state_lock:
        for v in [v for v in b.outputs if v is not None] + [t for t, _ in b.wbs]:
            if v.batch is b:
                v.error = why
                v.batch = None
    b.session._failed(b)


def _run_batch(b: _Batch, background: bool) -> None:
    """Hand a batch to the worker, or run it here after everything submitted before it."""
    try:
        if background:
            _worker.submit(b)
            return
        _worker.drain(b.session)
    except BaseException as e:  # an interrupt while submitting: the worker may have the batch already
        b.cancel(f"submitting the flush was interrupted by {type(e).__name__}")
        if b.claim():
            _fail(b, e)
            for root in b.guarded:
                _guards.release(root)
            b.done.set()
        raise
    t0 = time.perf_counter()
    _execute(b)
    b.session.stats.blocked_intervals.append((t0, time.perf_counter()))
    if b.error is not None:
        b.reported = True
        _note(b)
        raise b.error


def _builds(prog: Program) -> int:
    """Kernel builds so far of a program's generated kernels."""
    return sum(kt.kernel.stats.builds for kt in prog.kernels.values() if kt.kernel is not None)


def _input_array(v: _Value, producer: _Batch | None, b: _Batch) -> np.ndarray:
    if producer is not None and producer is not b:
        producer.done.wait()
    if v.array is None:
        why = v.error.message if v.error is not None else "it was never computed"
        cause = v.error.cause if v.error is not None else None
        raise GraphError(f"an input of lazy flush #{b.record.index} is not available: {why}") from cause
    return v.array


class _Worker:
    """The background thread: runs submitted batches in order (one FIFO for the whole process, so a batch
    always runs after every batch submitted before it)."""

    def __init__(self):
        self.queue: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.last: _Batch | None = None

    def submit(self, b: _Batch) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="dvmlang-lazy", daemon=True)
                self.thread.start()
            self.last = b
            self.queue.put(b)

    def _run(self) -> None:
        while True:
            b = self.queue.get()
            _execute(b)

    def drain(self, session=None) -> None:
        last = self.last
        if last is not None and not last.done.is_set():
            t0 = time.perf_counter()
            last.done.wait()
            if session is not None:
                session.stats.blocked_intervals.append((t0, time.perf_counter()))


_worker = _Worker()


# ---- sessions ---------------------------------------------------------------------------------------------


_tls = threading.local()


def _stack() -> list:
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def _current() -> "LazySession":
    s = _stack()
    if s:
        return s[-1]
    e = getattr(_tls, "eager", None)
    if e is None:
        e = _tls.eager = LazySession(background=False, fuse=False, name="eager", _eager=True)
    return e


def _free_chain(n: Node) -> bool:
    """Whether ``n`` is a constant (or a view of one): nothing to compute, carried into the next graph."""
    while n.op in VIEWS:
        n = n.inputs[0]
    return n.op in FREE


@user_frames_methods
class LazySession:
    """``with dvmlang.lazy() as session:`` — capture operations on ``dvmlang.tensor`` values and run them as fused
    launches when their results are needed. Options: ``background`` (encode and run flushes on a worker
    thread), ``max_pending`` (flush when the pending graph has this many nodes), ``fuse`` (False: one kernel
    per operation, the unfused baseline), ``device`` (default: the current device at each flush)."""

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
        outer = _current()
        if not outer.eager and outer.pg.busy:
            outer._flush("nested", "a nested dvmlang.lazy() block begins")
        self.thread = threading.get_ident()
        self.active = True
        _stack().append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        st = _stack()
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

    # ---- the hooks dvmlang.ops calls --------------------------------------------------------------------
    def shape_text(self, shape) -> str:
        return "(" + ", ".join(str(d) for d in shape) + ")"

    def lazy_value(self, x, like=None):
        if isinstance(x, LazyTensor):
            return x
        if isinstance(x, np.ndarray):
            return tensor(x)
        return None

    def lazy_op(self, kind, inputs, shape, dtype, attrs):
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
        node = pg.add(Node(kind, nodes, tuple(int(d) for d in shape), dtype, dict(attrs)))
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
            return entry[0]
        return self._input(v)

    def _view_of_written(self, n: Node) -> bool:
        while n.op in VIEWS:
            n = n.inputs[0]
        src = self.pg.input_of.get(n.id)
        return src is not None and self.pg.written(src)

    def _input(self, v: _Value) -> Node:
        node = _add_input(self.pg, v)
        self.pg.guard(v)
        return node

    def _rehome(self, v: _Value) -> Node:
        """Copy a constant (or a view of one) into this session's pending graph."""
        def copy(n: Node) -> Node:
            return self.pg.add(Node(n.op, [copy(i) for i in n.inputs], n.shape, n.dtype, dict(n.attrs)))
        node = copy(v.node)
        v.node, v.pg = node, self.pg
        self.pg.owners[node.id] = weakref.ref(v)
        return node

    # ---- in-place operations and host writes -----------------------------------------------------------
    def _inplace(self, t: "LazyTensor", fn, other) -> "LazyTensor":
        v = t._v
        if not v.pending and v.array is not None and not _guards.writeable(v.array):
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
            from .. import ops
            new = ops.cast(new, t.dtype)
        if self.eager:
            arr = new._v.array
            dst = t._v.array
            if dst is None:
                raise GraphError("internal: eager in-place target has no storage")
            _guards.write_into(dst, arr)
            return t
        old = t._v
        if old.pending:
            t._v = new._v  # a pending value has no storage yet: the tensor simply names the new value
            return t
        if old.array is not None and not _guards.writeable(old.array):
            raise GraphError(f"in-place operation on a tensor whose array is read-only (shape {t.shape}); "
                             "wrap a writeable array or use the out-of-place operator")
        t._v = new._v
        t._wb = old
        pg = self.pg
        pg.writebacks[id(old)] = (old, t)
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
        _worker.drain(self)
        arr = v.array
        if not _guards.writeable(arr):
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
        wb: list[tuple] = []  # (target, source node, tensor)
        for target, t in pg.writebacks.values():
            src = t._v
            if src.pending and src.pg is pg:
                node = src.node
                if node.id not in seen:
                    outs.append(src)
                    seen.add(node.id)
            else:  # already flushed (or ready): write it back from its array
                node = pg.inputs[id(src)][0] if id(src) in pg.inputs else _add_input(pg, src)
            wb.append((target, node, t))
        out_nodes = [v.node for v in outs]
        for _, node, _ in wb:
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
        from ..npu.device import default_device
        from ..trace.record import active_session
        b = _Batch(self, rec, self.device or default_device(), active_session())
        b.nodes = nodes
        b.out_nodes = out_nodes
        b.fuse = self.fuse and not self.eager
        b.key, b.vals = _structure(nodes, out_nodes, b.fuse, b.device.profile)
        b.inputs = [(pg.inputs[i][1], pg.inputs[i][2]) for i in _input_order(pg, keep)]
        b.outputs = outs
        b.guarded = pg.guarded
        pg.guarded = []
        index = {n.id: i for i, n in enumerate(out_nodes)}
        b.wbs = [(target, index[node.id]) for target, node, _ in wb]
        tokens: dict[int, object] = {}  # stored base node id -> the storage of its result
        b.view_sources = {i: src for i, n in enumerate(out_nodes) if (src := _viewed_input(n, pg)) is not None}
        with _state_lock:
            for v, n in zip(outs, out_nodes):
                if v is None:
                    continue
                v.node = None
                v.pg = None
                v.batch = b
                v.token = _token_for(n, pg, tokens)
            for target, _, t in wb:
                target.batch = b
                t._v = target
                t._wb = None
                _writers.set(target.token, b)
                if target.array is not None:
                    _writers.set(_root(target.array), b)
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
        from ..npu.device import default_device
        from ..trace.record import active_session
        device = self.device or default_device()
        prog = _TimedProgram(g, True, device.profile, g.name)
        rec = FlushRecord(len(self.stats.flushes), "unfusible", f"ops.custom({name})", ops=1, outputs=len(outs),
                          background=self.background and not self.eager, new_program=True)
        if not self.eager:
            self.stats.flushes.append(rec)
        b = _Batch(self, rec, device, active_session())
        b.program = prog
        b.guarded = []
        b.inputs = []
        for t in tensors:
            v = t._v
            with _state_lock:
                producer = v.batch
            b.inputs.append((v, producer))
            arr = v.guardable()
            if arr is not None:
                b.guarded.append(_guards.acquire(arr))
        values = [_Value(o.shape, o.dtype) for o in outs]
        with _state_lock:
            for v in values:
                v.batch = b
                v.token = _Storage()
        b.outputs = values
        self._track(b)
        _run_batch(b, self.background and not self.eager)
        return _CustomCall([LazyTensor._of(v) for v in values])


def _abandon(pg: _Pending, message: str, cause: BaseException | None = None) -> None:
    """The live values of a pending graph that will never run become failed; its guards are released. Tensors
    with a pending in-place write name their old storage again, marked failed too (their array is untouched)."""
    why = _Failure(message, cause)
    with _state_lock:
        for ref in pg.owners.values():
            v = ref()
            if v is not None and v.pg is pg and v.node is not None:
                v.node = None
                v.pg = None
                v.error = why
        for target, t in pg.writebacks.values():
            if t._wb is target:
                t._v = target
                t._wb = None
                target.error = why
    pg.release()


class _CustomCall:
    def __init__(self, outputs):
        self.outputs = outputs


def _add_input(pg: _Pending, v: _Value) -> Node:
    """An input node for a ready or in-flight value (remembering the batch that produces it, if any)."""
    node = pg.add(Node("input", [], v.shape, v.dtype, {}))
    with _state_lock:
        producer = v.batch
    pg.inputs[id(v)] = (node, v, producer)
    pg.input_of[node.id] = v
    return node


def _input_order(pg: _Pending, keep: set[int]) -> list[int]:
    """Keys of ``pg.inputs`` for the inputs still used, in node order (the order of the program's inputs)."""
    used = [(node.id, key) for key, (node, _, _) in pg.inputs.items() if node.id in keep]
    return [key for _, key in sorted(used)]


def _viewed_input(n: Node, pg: _Pending) -> _Value | None:
    """The input value an output is a view of (None when it is not a view of an input)."""
    if n.op not in VIEWS:
        return None
    while n.op in VIEWS:
        n = n.inputs[0]
    if n.op == "input":
        for node, v, _ in pg.inputs.values():
            if node is n:
                return v
    return None


def _token_for(n: Node, pg: _Pending, tokens: dict):
    """The storage an output will live in: its input's when it is a view of one, else the fresh storage of the
    value under its views (shared by every view of it)."""
    while n.op in VIEWS:
        n = n.inputs[0]
    if n.op == "input":
        for node, v, _ in pg.inputs.values():
            if node is n:
                return v.token if v.token is not None else tokens.setdefault(n.id, _Storage())
    return tokens.setdefault(n.id, _Storage())


def _note(b: _Batch) -> None:
    e = b.error
    note = f"raised by dvmlang.lazy flush #{b.record.index} ({b.record.reason})"
    if e is not None and note not in getattr(e, "__notes__", ()):
        e.add_note(note)


def _index_text(index) -> str:
    """``index`` as written between brackets (``0, 1:3``), for messages."""
    parts = index if isinstance(index, tuple) else (index,)

    def one(i):
        if isinstance(i, slice):
            return ":".join("" if x is None else str(x) for x in (i.start, i.stop)) + \
                ("" if i.step is None else f":{i.step}")
        return "..." if i is Ellipsis else repr(i)
    return ", ".join(one(i) for i in parts)


def _can_cast(src: dt.DType, dst: dt.DType) -> bool:
    """numpy's same_kind rule for in-place results: float into int (or into bool) is refused."""
    order = {"b": 0, "u": 1, "i": 1, "f": 2}
    return order[src.kind] <= order[dst.kind]


def _wait_value(v: _Value, session: LazySession | None = None) -> np.ndarray:
    """Wait until ``v`` is ready (or raise why it never will be)."""
    while True:
        with _state_lock:
            b = v.batch
        if b is None:
            break
        b.wait()
    if v.error is not None:
        if session is not None:
            for fb in session.errors:
                if v.error.cause is fb.error:
                    fb.reported = True
        v.error.raise_()
    if v.array is None:
        raise GraphError("internal: a dvmlang tensor has no value after its flush")
    for key in (v.token, _root(v.array)):
        w = _writers.get(key)
        if w is not None:
            w.wait()
    return v.array


# ---- tensors ----------------------------------------------------------------------------------------------


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

    # the hook dvmlang.ops looks for: operations on this tensor go to the current session
    @property
    def __dvm_lazy__(self) -> LazySession:
        return _current()

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
        session = _current()
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
        _current()._host_write(self, index, value)

    # ---- operators: arithmetic, comparisons and methods come from TensorOperators ----------------------
    # in place: the result is written into this tensor's storage (for dvmlang.tensor(x): into x)
    def __iadd__(self, o):
        from .. import ops
        return _current()._inplace(self, ops.add, o)

    def __isub__(self, o):
        from .. import ops
        return _current()._inplace(self, ops.sub, o)

    def __imul__(self, o):
        from .. import ops
        return _current()._inplace(self, ops.mul, o)

    def __itruediv__(self, o):
        from .. import ops
        return _current()._inplace(self, ops.div, o)


# ---- public constructors ------------------------------------------------------------------------------------


@user_frames
def tensor(x, dtype=None) -> LazyTensor:
    """A ``dvmlang`` tensor. A numpy array is wrapped without copying (in-place operations write into it);
    other data (lists, numbers) is converted, Python floats to float32 and Python ints to int32. With
    ``dtype`` the values are converted (a copy when the dtype differs)."""
    if isinstance(x, LazyTensor):
        if dtype is None:
            return x
        from .. import ops
        return ops.cast(x, dtype)
    if isinstance(x, np.ndarray):
        arr = x
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


def lazy(background: bool = True, max_pending: int = 256, fuse: bool = True, device=None,
         name: str = "lazy") -> LazySession:
    """``with dvmlang.lazy() as session:`` — capture operations on ``dvmlang.tensor`` values and run them fused
    when a result is needed (see ``docs/lazy.md``). ``session.stats`` records every flush and why."""
    return LazySession(background=background, max_pending=max_pending, fuse=fuse, device=device, name=name)
