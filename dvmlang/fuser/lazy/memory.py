"""Memory and hazards of lazy tensors: value cells, the memory they live in, and what pending work touches.

A tensor's value is a cell (``_Value``) that is pending (a node of a session's pending graph), in flight (a
submitted batch), ready (an array) or failed (never computed). Its ``token`` names its memory: the root of a
wrapped array, or a ``_Storage`` shared by a flush's result and its views. The pending graph (``_Pending``)
records the values it reads and the storages its in-place operations write, which is what the hazard checks
ask (``written``, ``touched``). Arrays that pending or in-flight work uses are made read-only meanwhile
(``_Guards``), and the last batch that writes each storage is remembered (``_Writers``) so a host read waits
for it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..fusion import VIEWS
from ..graph import GraphError, Node


def _root(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (views are followed to their base)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _broadcasting(a: np.ndarray) -> bool:
    return any(s == 0 and n > 1 for s, n in zip(a.strides, a.shape))


@dataclass(eq=False)
class _Guard:
    """The guard on one memory root: how many holders it has, and every array object guarded under it with
    whether it was writeable before (by id; the root first)."""

    root: np.ndarray
    holders: int = 0
    arrays: dict = field(default_factory=dict)  # id(array) -> (array, was writeable)


class _Guards:
    """Arrays that pending or in-flight work reads or writes are made read-only until that work has run, so a
    stray numpy write fails at once (``ValueError: assignment destination is read-only``) instead of changing
    what a flush reads. Guards are counted per memory root; a root and every array object guarded under it
    get their own flags back when the last holder releases it. Memory numpy does not own (a torch tensor's
    ``.numpy()``, ``np.frombuffer``, an object's ``__array_interface__``) is not guarded: numpy may refuse to
    make such an array writeable again, so its flags are never touched."""

    def __init__(self):
        self.lock = threading.RLock()
        self.entries: dict[int, _Guard] = {}  # by id(root)

    def acquire(self, arr: np.ndarray) -> np.ndarray:
        root = _root(arr)
        if not root.flags.owndata:
            return root  # release() finds no entry for it
        with self.lock:
            e = self.entries.get(id(root))
            if e is None:
                e = self.entries[id(root)] = _Guard(root)
            e.holders += 1
            for obj in (root, arr):
                if id(obj) not in e.arrays:
                    was = bool(obj.flags.writeable)
                    e.arrays[id(obj)] = (obj, was)
                    if was:
                        obj.flags.writeable = False
        return root

    def release(self, root: np.ndarray) -> None:
        with self.lock:
            e = self.entries.get(id(root))
            if e is None:
                return
            e.holders -= 1
            if e.holders > 0:
                return
            del self.entries[id(root)]
            for obj, was in e.arrays.values():  # the root first: a view can only become writeable after its base
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
            if e is not None and id(arr) in e.arrays:
                return e.arrays[id(arr)][1]
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
            elif id(arr) not in e.arrays:
                e.arrays[id(arr)] = (arr, True)

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


class _Writer(NamedTuple):
    token: object  # the storage (kept, so its id is not reused while the entry lives)
    batch: object  # the batch (flush._Batch) that writes it


class _Writers:
    """The last submitted batch that writes each storage (by token), so a host read waits for it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items: dict[int, _Writer] = {}  # by id(token)

    def set(self, token, batch) -> None:
        with self.lock:
            self.items = {k: w for k, w in self.items.items() if not w.batch.done.is_set()}
            self.items[id(token)] = _Writer(token, batch)

    def get(self, token):
        with self.lock:
            w = self.items.get(id(token))
            return w.batch if w is not None and w.token is token else None


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


class _Input(NamedTuple):
    """A value a pending graph (or a batch) reads: its input node, and the batch that produced it when it was
    captured (None when it was ready)."""

    node: Node
    value: _Value
    producer: object  # flush._Batch | None


class _InPlace(NamedTuple):
    """A pending in-place operation: the value whose storage it writes, and the tensor that names the new value."""

    target: _Value
    tensor: object  # tensor.LazyTensor


class _Pending:
    """The pending graph of a session: concrete shapes, nodes in capture order, the values it reads and the
    storages its in-place operations write."""

    def __init__(self, session):
        self.session = session
        self.rt = session.rt
        self.nodes: list[Node] = []
        self.owners: dict[int, weakref.ref] = {}  # node id -> the value it computes
        self.inputs: dict[int, _Input] = {}  # by id(value)
        self.input_of: dict[int, _Value] = {}  # input node id -> its value
        self.guarded: list[np.ndarray] = []  # roots acquired in the runtime's guards
        self.targets: list[_Value] = []  # storages that pending in-place operations write
        self.writebacks: dict[int, _InPlace] = {}  # by id(target value)
        self.ops = 0
        self._ids = itertools.count()

    def add(self, node: Node) -> Node:
        node.id = next(self._ids)
        self.nodes.append(node)
        return node

    def add_input(self, v: _Value) -> Node:
        """An input node for a ready or in-flight value (remembering the batch that produces it, if any)."""
        node = self.add(Node("input", [], v.shape, v.dtype, {}))
        with self.rt.state_lock:
            producer = v.batch
        self.inputs[id(v)] = _Input(node, v, producer)
        self.input_of[node.id] = v
        return node

    def guard(self, v: _Value) -> None:
        arr = v.guardable()
        if arr is not None:
            self.guarded.append(self.rt.guards.acquire(arr))

    def written(self, v: _Value) -> bool:
        """Whether a pending in-place operation writes ``v``'s memory."""
        return any(_same_storage(v, t) for t in self.targets)

    def touched(self, v: _Value) -> bool:
        """Whether pending work reads or writes ``v``'s memory."""
        return self.written(v) or any(_same_storage(v, i.value) for i in self.inputs.values())

    def release(self) -> None:
        for root in self.guarded:
            self.rt.guards.release(root)
        self.guarded = []

    @property
    def busy(self) -> bool:
        return self.ops > 0 or bool(self.writebacks)

    def used_inputs(self, keep: set[int]) -> list[_Input]:
        """The inputs whose nodes are in ``keep``, in node order (the order of the program's inputs)."""
        return sorted((i for i in self.inputs.values() if i.node.id in keep), key=lambda i: i.node.id)

    def viewed_input(self, n: Node) -> _Value | None:
        """The input value an output is a view of (None when it is not a view of an input)."""
        if n.op not in VIEWS:
            return None
        while n.op in VIEWS:
            n = n.inputs[0]
        return self.input_of.get(n.id) if n.op == "input" else None

    def token_for(self, n: Node, tokens: dict):
        """The storage an output will live in: its input's when it is a view of one, else the fresh storage of the
        value under its views (shared by every view of it)."""
        while n.op in VIEWS:
            n = n.inputs[0]
        v = self.input_of.get(n.id) if n.op == "input" else None
        if v is not None and v.token is not None:
            return v.token
        return tokens.setdefault(n.id, _Storage())
