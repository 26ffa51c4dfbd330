"""Flushes: a session's pending graph turned into a batch, compiled (or reused) and run on the device.

A flush hands a ``_Batch`` (the kept nodes, the outputs, the in-place write-backs) to the runtime's worker
thread, or runs it on the calling thread after everything submitted before it. A batch is keyed by its
structure (``_structure``), so the next flush with the same structure and size equalities reuses the compiled
program (``_Programs``) from its shape-generic graph (``_symbolic``) and only encodes for its sizes. A batch
publishes every result at once after its whole launch succeeded; on any error its values become failed.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from typing import NamedTuple

import numpy as np

from ..api import Program
from ..graph import Graph, GraphError, Node
from .memory import _Failure, _Input, _Pending, _root, _Value
from .stats import FlushRecord


class _WriteBack(NamedTuple):
    """An in-place result of a batch: the value whose array it is written into, and its output index."""

    target: _Value
    output: int


class _Batch:
    """A flushed graph on its way to the device."""

    def __init__(self, session, record: FlushRecord, device, trace):
        self.session = session
        self.rt = session.rt
        self.record = record
        self.device = device
        self.trace = trace
        self.key = None
        self.nodes: list[Node] = []
        self.out_nodes: list[Node] = []
        self.vals: dict = {}
        self.fuse = True
        self.program: Program | None = None  # preset for one-off programs (ops.custom)
        self.inputs: list[_Input] = []  # in input node order
        self.outputs: list = []  # value (or None) per output node
        self.wbs: list[_WriteBack] = []
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
        with self.rt.state_lock:
            if self.claimed:
                return False
            self.claimed = True
            return True

    def cancel(self, why: str) -> bool:
        """Keep the batch from publishing anything (its session was interrupted): True unless it has already
        begun to publish, which it then completes."""
        with self.rt.state_lock:
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
        prog = Program(g, batch.fuse, batch.device.profile, g.name)
        with self.lock:
            self.items[batch.key] = prog
            while len(self.items) > self.capacity:
                self.items.popitem(last=False)
        return prog, True


def _attr_key(n: Node, tok) -> tuple:
    a = n.attrs
    op = n.op
    if op == "reduce":
        return (a["op"], tuple(a["axes"]), bool(a["keepdims"]))
    if op == "permute":
        return tuple(a["perm"])
    if op == "const":
        return (type(a["value"]).__name__,)  # its value is a runtime scalar of the program (bound per flush)
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
                       name_, loc=n.loc))
        new[n.id] = m
        if op == "input":
            g.inputs.append(m)
    g.outputs = [new[o.id] for o in out_nodes]
    g.flush_consts = [new[n.id] for n in nodes if n.op == "const"]  # in flush order: a later flush binds its values
    return g


def _execute(b: _Batch) -> None:
    """Run one batch: resolve its inputs, compile (or reuse) its program, launch, then publish every result at
    once. On any error nothing is published: the batch's values become failed (never computed)."""
    if not b.claim():
        return  # its submission was interrupted and the main thread failed it
    rt = b.rt
    rec = b.record
    results: list = []
    try:
        arrays = [_input_array(i.value, i.producer, b) for i in b.inputs]
        t0 = time.perf_counter()
        prog = b.program
        if prog is None:
            prog, rec.new_program = rt.programs.get(b)
        plan_s = time.perf_counter() - t0
        with rt.exec_lock:
            t1 = time.perf_counter()
            prog.encode_s = 0.0
            built = _builds(prog)
            consts = {c.id: n.attrs["value"] for c, n in zip(getattr(prog.graph, "flush_consts", ()),
                                                              (n for n in b.nodes if n.op == "const"))}
            run = prog.run({n.id: a for n, a in zip(prog.graph.inputs, arrays)}, b.device, b.trace, consts=consts)
            run_s = time.perf_counter() - t1
            enc = prog.encode_s
            rec.builds = _builds(prog) - built
        rec.encode_s = plan_s + enc
        rec.sim_s = max(0.0, run_s - enc)
        if rec.background:
            b.session.stats.encode_intervals.append((t0, t0 + rec.encode_s))
        results = [run.values[o.id] for o in prog.graph.outputs]
        record = run.record
        if record is not None:
            rec.launches = run.launches
            rec.kernels = len(record.members)
            rec.bytes_stored = int(record.bytes_written)
            rec.bytes_read = int(record.bytes_read)
            rec.cycles = int(record.cycles)
            rec.names = [m.name for m in record.members]
        with rt.state_lock:
            if b.cancelled is not None:
                raise GraphError(b.cancelled)
            b.publishing = True
        for wb in b.wbs:
            rt.guards.write_into(wb.target.array, results[wb.output])
        with rt.state_lock:
            for v, arr in zip(b.outputs, results):
                if v is None:
                    continue
                v.array = arr
                if v.batch is b:
                    v.batch = None
            for wb in b.wbs:
                if wb.target.batch is b:
                    wb.target.batch = None
    except BaseException as e:  # noqa: BLE001 - every failure leaves the batch's values never computed
        _fail(b, e)
    finally:
        for i, src in b.view_sources.items():
            if i < len(results) and src.array is not None and rt.guards.writeable(src.array):
                rt.guards.adopt(results[i])
        for root in b.guarded:
            rt.guards.release(root)
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
    with b.rt.state_lock:
        for v in [v for v in b.outputs if v is not None] + [wb.target for wb in b.wbs]:
            if v.batch is b:
                v.error = why
                v.batch = None
    b.session._failed(b)


def _run_batch(b: _Batch, background: bool) -> None:
    """Hand a batch to the worker, or run it here after everything submitted before it."""
    worker = b.rt.worker
    try:
        if background:
            worker.submit(b)
            return
        worker.drain(b.session)
    except BaseException as e:  # an interrupt while submitting: the worker may have the batch already
        b.cancel(f"submitting the flush was interrupted by {type(e).__name__}")
        if b.claim():
            _fail(b, e)
            for root in b.guarded:
                b.rt.guards.release(root)
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
    return sum(gk.cache_info().builds for gk in {id(g): g for g in list(prog.kernels.values())}.values())


def _input_array(v: _Value, producer: _Batch | None, b: _Batch) -> np.ndarray:
    if producer is not None and producer is not b:
        producer.done.wait()
    if v.array is None:
        why = v.error.message if v.error is not None else "it was never computed"
        cause = v.error.cause if v.error is not None else None
        raise GraphError(f"an input of lazy flush #{b.record.index} is not available: {why}") from cause
    return v.array


class _Worker:
    """The background thread: runs submitted batches in order (one FIFO per runtime, so a batch always runs after
    every batch submitted before it)."""

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
            if b is None:
                return
            _execute(b)

    def drain(self, session=None) -> None:
        last = self.last
        if last is not None and not last.done.is_set():
            t0 = time.perf_counter()
            last.done.wait()
            if session is not None:
                session.stats.blocked_intervals.append((t0, time.perf_counter()))

    def stop(self) -> None:
        """End the thread once it has run everything submitted (a runtime that is replaced)."""
        with self.lock:
            if self.thread is not None and self.thread.is_alive():
                self.queue.put(None)
            self.thread = None


def _abandon(pg: _Pending, message: str, cause: BaseException | None = None) -> None:
    """The live values of a pending graph that will never run become failed; its guards are released. Tensors
    with a pending in-place write name their old storage again, marked failed too (their array is untouched)."""
    why = _Failure(message, cause)
    with pg.rt.state_lock:
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


def _note(b: _Batch) -> None:
    e = b.error
    note = f"raised by dvmlang.lazy flush #{b.record.index} ({b.record.reason})"
    if e is not None and note not in getattr(e, "__notes__", ()):
        e.add_note(note)


def _wait_value(v: _Value, session) -> np.ndarray:
    """Wait until ``v`` is ready (or raise why it never will be); an error of ``session``'s flushes that this
    raises counts as reported."""
    rt = session.rt
    while True:
        with rt.state_lock:
            b = v.batch
        if b is None:
            break
        b.wait()
    if v.error is not None:
        for fb in session.errors:
            if v.error.cause is fb.error:
                fb.reported = True
        v.error.raise_()
    if v.array is None:
        raise GraphError("internal: a dvmlang tensor has no value after its flush")
    for key in (v.token, _root(v.array)):
        w = rt.writers.get(key)
        if w is not None:
            w.wait()
    return v.array
