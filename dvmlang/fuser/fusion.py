"""Fusion: split a captured graph into groups, each one kernel, and record why every rejected pair was
rejected.

Kinds of group:

* **vector** — elementwise/broadcast chains and reductions over the last dimension, on one iteration space
  ``(outer..., rows, cols)``. Three tilings: *tiled* (no reduction: blocks of rows x cols), *loop*
  (reductions only as sinks: each program loops over column blocks and accumulates), *row* (a reduction
  result is consumed inside the group: a whole row must be one tile).
* **matmul** — a batched matmul on the cube, with an elementwise epilogue on its output (a mix kernel).
* **custom** — a user ``@dvmlang.kernel`` called with ``ops.custom``.

Sibling vector groups over one iteration space that read a tensor in common are merged after the walk
(``Planner.horizontal``). Views (``reshape``, ``permute``) are not computed: the value under them is stored and
consumers read it through strides. Symbol deduction decides what can fuse: equal iteration spaces must be *proven* (same
symbol or same number); unknown means do not fuse. A row-mode group whose row length is a symbol is fused
behind a launch-time guard, with a split plan as the fallback when a row does not fit UB.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .. import opdefs
from .graph import Graph, GraphError, Node
from .graph_ops import FREE, GRAPH_OPS, MEMORY_READ_OPS, ROW_OPS, SCANS, VIEWS, memory_operands_of

_PLANNING = threading.RLock()  # a split plan is planned once, by whichever thread first needs it

EW = opdefs.FUSIBLE | {n for n, op in GRAPH_OPS.items() if op.kind == "elementwise"}
# FREE, VIEWS, SCANS, ROW_OPS and the memory reads come from the structural op table (graph_ops: what each means)
MEMORY_READS = {n: memory_operands_of(n) for n in MEMORY_READ_OPS}
VECTOR = EW | set(MEMORY_READS) | SCANS | ROW_OPS


def memory_operands(n: Node) -> list:
    """The operands ``n`` reads from memory at positions of its own (a gather's table, a cat's parts)."""
    f = MEMORY_READS.get(n.op)
    return list(f(n)) if f else []


def is_free(n: Node) -> bool:
    """Constants, sizes, index tiles, and scalar arithmetic on them (marked by ``canonicalize``): computed
    inside every kernel that uses them rather than stored."""
    return n.op in FREE or n.attrs.get("free_scalar", False)


@dataclass(eq=False)
class Group:
    id: int
    kind: str  # "vector" | "matmul" | "custom"
    nodes: list[Node] = field(default_factory=list)
    space: tuple = ()
    mode: str = "tiled"  # vector groups: tiled | loop | row
    inputs: list[Node] = field(default_factory=list)
    outputs: list[Node] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    guard: object = None  # for row mode with a symbolic row: the symbol that must fit
    live_bytes: int = 0  # peak live bytes per element (tiling.live_bytes_per_element, cached)
    recompute: list[Node] = field(default_factory=list)  # elementwise nodes of other groups computed again here
    # what the group's kernels work out once (signature, build keys, launch fields), shared with its plan's
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def body(self) -> list[Node]:
        """The nodes the group's kernel computes, in order (node ids are): its own and the ones it recomputes."""
        return sorted(self.nodes + self.recompute, key=lambda n: n.id) if self.recompute else self.nodes

    @property
    def name(self) -> str:
        if self.kind == "custom":
            return f"g{self.id}_custom_{self.nodes[0].attrs['kernel'].__name__}"
        ops = [n.attrs["op"] if n.op == "reduce" else "cum" + n.attrs["op"] if n.op == "cumsum" and "op" in n.attrs
               else n.op for n in self.nodes if not is_free(n)]
        head = "_".join(dict.fromkeys(ops))[:40] or self.kind
        return f"g{self.id}_{head}"

    def __repr__(self) -> str:
        return f"<group {self.name} {self.kind}/{self.mode}>"


@dataclass
class GroupChange:
    """What an operation joining a group changes in it: a wider iteration space (the group held per-row values
    only), row mode (it consumes a row reduction of the group) and the symbolic row that must fit UB."""

    space: tuple | None = None
    mode: str | None = None
    guard: object = None

    def space_of(self, grp: Group) -> tuple:
        return self.space if self.space is not None else grp.space


@dataclass
class Rejection:
    producer: str
    consumer: str
    reason: str


@dataclass
class Plan:
    graph: Graph
    groups: list[Group]
    rejections: list[Rejection]
    stages: list[list[Group]]
    fused: bool
    split_reductions: bool = False
    # the split plan a guarded row falls back to: planned at its first use (``fallback``; the build ahead plans it)
    _make_fallback: object = field(default=None, repr=False, compare=False)
    _fallback: "Plan | None" = field(default=None, repr=False, compare=False)

    @property
    def has_fallback(self) -> bool:
        """Whether there is a split plan (planned or still to plan), without planning it."""
        return self._make_fallback is not None or self._fallback is not None

    @property
    def fallback(self) -> "Plan | None":
        with _PLANNING:
            if self._make_fallback is not None:
                self._fallback, self._make_fallback = self._make_fallback(), None
        return self._fallback


def _same_shape(g: Graph, a, b) -> bool | None:
    if len(a) != len(b):
        return False
    eq = [g.syms.equal(x, y) for x, y in zip(a, b)]
    return False if False in eq else None if None in eq else True


def _broadcastable(g: Graph, small, big) -> bool:
    """Whether ``small`` broadcasts to ``big`` with every dim proven 1 or proven equal."""
    if len(small) > len(big):
        return False
    off = len(big) - len(small)
    for i, d in enumerate(small):
        d = g.syms.find(d)
        if isinstance(d, int) and d == 1:
            continue
        if g.syms.equal(d, big[off + i]) is not True:
            return False
    return True


def _row_values(g: Graph, small, big) -> bool:
    """Whether ``small`` is ``big`` with its last dimension reduced to 1."""
    if len(small) != len(big) or not small:
        return False
    last = g.syms.find(small[-1])
    return isinstance(last, int) and last == 1 and all(g.syms.equal(a, b) is True for a, b in zip(small[:-1], big[:-1]))


def _desc(n: Node) -> str:
    return f"%{n.id} {n.op if n.op != 'reduce' else 'reduce ' + n.attrs['op']}"


SPLIT_REASON = ("a reduction's result is consumed inside its group; this is the split plan, used when a row does "
                "not fit UB")
MODE_RANK = {"tiled": 0, "loop": 1, "split": 1.5, "row": 2, "matmul": 3}
MAX_MERGED = 8  # reductions, and groups merged horizontally, in one kernel at most (each takes scalar registers)
MAX_READS = 16  # tensors a group reads from memory, at most


class Planner:
    def __init__(self, g: Graph, fuse: bool, split_reductions: bool, no_row: dict | None = None):
        self.g = g
        self.fuse = fuse
        self.split = split_reductions
        self.no_row = dict(no_row or {})  # reduce node id -> why its result cannot be consumed in its group
        self.group_of: dict[int, Group] = {}
        self.groups: list[Group] = []
        self.rejections: list[Rejection] = []
        self.users = g.users()
        self.reads: dict[int, set[int]] = {}  # group id -> ids of the groups it reads from directly
        self.recomputed: list[Node] = []
        self.next_id = 0

    def reject(self, producer: Node, consumer: Node, reason: str):
        r = Rejection(_desc(producer), _desc(consumer), reason)
        if not any(x.producer == r.producer and x.consumer == r.consumer for x in self.rejections):
            self.rejections.append(r)  # the first reason for a pair is the one that decided

    def new_group(self, kind: str, n: Node, space) -> Group:
        grp = Group(self.next_id, kind, [], tuple(space))  # never len(groups): a merge removes a group
        self.next_id += 1
        self.groups.append(grp)
        self.reads[grp.id] = set()
        self.put(grp, n)
        return grp

    def producer(self, v: Node) -> tuple[Node, Group | None]:
        """The node that computes ``v`` (through views) and its group."""
        while v.op in VIEWS:
            v = v.inputs[0]
        if v.op == "custom_out":
            return v, self.group_of.get(v.inputs[0].id)
        return v, self.group_of.get(v.id)

    def put(self, grp: Group, n: Node):
        grp.nodes.append(n)
        self.group_of[n.id] = grp
        for i in n.inputs:
            _, src = self.producer(i)
            if src is not None and src is not grp:
                self.reads[grp.id].add(src.id)

    def depends(self, a: Group, b: Group) -> bool:
        """Whether group ``a`` reads (directly or through other groups) from group ``b``."""
        seen = set()
        stack = list(self.reads[a.id])
        while stack:
            x = stack.pop()
            if x == b.id:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(self.reads[x])
        return False

    def merge(self, into: Group, other: Group):
        """Move every node of ``other`` into ``into`` (two groups that do not depend on each other)."""
        for n in other.nodes:
            self.group_of[n.id] = into
        into.nodes = sorted(into.nodes + other.nodes, key=lambda n: n.id)  # node ids are a topological order
        self.reads[into.id] |= self.reads.pop(other.id)
        self.reads[into.id].discard(into.id)
        for r in self.reads.values():
            if other.id in r:
                r.discard(other.id)
                r.add(into.id)
        into.recompute = sorted(set(into.recompute) | set(other.recompute), key=lambda x: x.id)
        into.mode = max(into.mode, other.mode, key=MODE_RANK.__getitem__)
        into.guard = into.guard if into.guard is not None else other.guard
        self.groups.remove(other)

    def run(self) -> list[Group]:
        for n in self.g.nodes:
            if n.op in ("input",) or is_free(n) or n.op in VIEWS or n.op == "custom_out":
                continue
            if n.op == "custom":
                self._custom(n)
                continue
            if n.op == "matmul":
                self._matmul(n)
                continue
            if n.op in VECTOR or n.op == "reduce":
                self._vector(n)
                continue
            raise GraphError(f"the fuser does not know the operation {n.op!r}")
        self.renumber()
        return self.groups

    def renumber(self) -> None:
        """Number the groups in order (merged groups leave gaps), ``reads`` with them."""
        new = {grp.id: k for k, grp in enumerate(self.groups)}
        self.reads = {new[a]: {new[b] for b in r} for a, r in self.reads.items()}
        for grp in self.groups:
            grp.id = new[grp.id]

    # ---- custom and matmul ------------------------------------------------------------------------------
    def _custom(self, n: Node):
        if self.fuse:
            for i in n.inputs:
                base, src = self.producer(i)
                if src is not None and not is_free(base):
                    self.reject(base, n, "a user kernel (ops.custom) reads its arguments from memory: the producer "
                                         "stores its value (the kernels are stacked in one launch)")
        self.new_group("custom", n, ())

    def _matmul(self, n: Node):
        if self.fuse:
            for i in n.inputs:
                base, src = self.producer(i)
                if src is not None:
                    self.reject(base, n, "elementwise producers of a matmul operand are not fused into the cube "
                                         "kernel (no prologue fusion): the operand is stored and the matmul reads it")
        grp = self.new_group("matmul", n, n.shape)
        grp.mode = "matmul"

    # ---- vector ---------------------------------------------------------------------------------------------
    def _space_of(self, n: Node):
        if n.op == "reduce":
            return n.inputs[0].shape
        return n.shape

    def _vector(self, n: Node):
        space = self._space_of(n)
        if len(space) > 4:
            raise GraphError(f"fused vector groups support tensors of rank <= 4, got rank {len(space)}")
        candidates = []
        for i in n.inputs:
            src = self.group_of.get(i.id)
            if src is not None and src not in candidates:
                candidates.append(src)
        chosen = None
        change = GroupChange()
        split_from = set()  # groups n could not join because a row of theirs does not fit UB
        if self.fuse:
            for grp in candidates:
                reason, change = self._why_not(grp, n, space)
                if reason is None:
                    chosen = grp
                    break
                producer = next(i for i in n.inputs if self.group_of.get(i.id) is grp)
                self.reject(producer, n, reason)
                if reason == SPLIT_REASON or reason in self.no_row.values():
                    split_from.add(grp.id)
            if chosen is not None:
                for grp in candidates[candidates.index(chosen) + 1:]:
                    producer = next(i for i in n.inputs if self.group_of.get(i.id) is grp)
                    why = self._why_not_merge(chosen, grp, n, change)
                    if why is None:
                        self.merge(chosen, grp)
                    else:
                        self.reject(producer, n, why)
            for i in n.inputs:
                base, src = self.producer(i)
                if src is None or src is chosen:
                    continue
                if i.op in VIEWS:
                    self.reject(base, n, f"read through a view (%{i.id} {i.op}): views are not computed in a kernel; "
                                         "the producer stores its value and this operation reads it through strides")
                elif i.op == "custom_out":
                    self.reject(base, n, "the producer is a user kernel (ops.custom): its outputs are stored")
        if n.op in ROW_OPS:  # a whole row in one tile (a launch-time guard when the row is a symbol)
            cols = self.g.syms.find(space[-1]) if space else 1
            change.mode, change.guard = "row", (cols if not isinstance(cols, int) else None)
        if chosen is None:
            grp = self.new_group("vector", n, space)
            if n.op == "reduce" or n.op in SCANS:
                grp.mode = "split" if n.attrs.get("split") else "loop"
            if n.op in ROW_OPS:
                grp.mode, grp.guard = "row", change.guard
            self._recompute(grp, n, split_from)
            return
        chosen.space = change.space_of(chosen)
        chosen.mode = max(chosen.mode, change.mode or chosen.mode,
                          ("split" if n.attrs.get("split") else "loop") if n.op == "reduce" or n.op in SCANS
                          else "tiled", key=MODE_RANK.__getitem__)
        if change.guard is not None:
            chosen.guard = change.guard
        self.put(chosen, n)
        if chosen.kind == "vector":
            self._recompute(chosen, n, split_from)

    def _recompute(self, grp: Group, n: Node, sources: set):
        """When a split (a row that does not fit UB) separates ``n`` from full-width elementwise values of
        another group, ``grp`` computes them again from their own inputs instead of reading them back: a
        stored intermediate costs a write and a read of the whole tensor, recomputing it a few vector ops."""
        g = self.g
        mem = memory_operands(n)
        for i in n.inputs:
            src = self.group_of.get(i.id)
            if i in mem or src is None or src.id not in sources or src is grp or i.op not in EW or i in grp.recompute:
                continue
            if _same_shape(g, i.shape, grp.space) is not True:
                continue
            chain, leaves = set(), set()
            stack = [i]
            while stack and chain is not None:
                x = stack.pop()
                if x.id in {c.id for c in chain} or is_free(x):
                    continue
                if self.group_of.get(x.id) is src and x.op in EW and not self._reduces_under(x) and len(chain) < 16:
                    chain.add(x)
                    stack.extend(x.inputs)
                elif self.group_of.get(x.id) is src and (x.op not in EW or self._reduces_under(x)) and \
                        _same_shape(g, x.shape, grp.space) is not True:
                    leaves.add(x)  # a per-row value of the other group: small, read from memory
                elif self.group_of.get(x.id) is src:
                    chain = None  # would read a full-width reduction result back, or too long
                else:
                    leaves.add(x)
            if chain is None:
                continue
            sources_of_leaves = {self.producer(x)[1] for x in leaves} - {None, grp}
            if any(self.depends(lg, grp) for lg in sources_of_leaves):
                continue
            grp.recompute = sorted(set(grp.recompute) | chain, key=lambda x: x.id)
            self.reads[grp.id] |= {lg.id for lg in sources_of_leaves}
            for c in chain:
                self.recomputed.append(c)

    def _numbers_for(self, grp: Group, n: Node) -> bool:
        """Whether rank-0 group ``grp`` (numbers from rank-0 inputs: a Python float Dynamo passes as a 0-d tensor,
        cast) is read by ``n`` alone: ``n``'s kernel then computes it over its own iteration space and never
        stores it (every program of a wider kernel would store the same element)."""
        outs = {o.id for o in self.g.outputs}
        ids = {x.id for x in grp.nodes}
        return all(x.id not in outs and all(u.id in ids or u is n for u in self.users[x.id]) for x in grp.nodes)

    def _reads_own_memory(self, grp: Group, n: Node) -> str | None:
        for i in memory_operands(n):
            base, src = self.producer(i)
            if src is grp:
                return (f"a {n.op} reads %{base.id} from memory at positions of its own (not the tile's): its "
                        "producer stores it first, in another kernel")
        return None

    def _check_inputs(self, grp: Group, n: Node, shape) -> str | None:
        """Cycles, reads of the group's own results through a view, and provable broadcasting of ``n``'s
        operands against ``shape``, for ``n`` joining ``grp``."""
        g = self.g
        mem = memory_operands(n)
        for i in n.inputs:
            if is_free(i):
                continue
            base, src = self.producer(i)
            if i in mem:
                if src is not None and src is not grp and self.depends(src, grp):
                    return "fusing would create a cycle between kernels"
                continue
            if src is grp and i.op in VIEWS:
                return (f"the operation reads %{base.id} of this group through a view (%{i.id} {i.op}): a kernel "
                        "cannot read back its own results from memory within the launch")
            if src is not None and src is not grp and self.depends(src, grp):
                return "fusing would create a cycle between kernels"
            if not _broadcastable(g, i.shape, shape):
                return (f"broadcast dims cannot be proven equal: operand %{i.id} {g.shape_text(i.shape)} against "
                        f"{g.shape_text(shape)}")
        return None

    def _why_not(self, grp: Group, n: Node, space) -> tuple[str | None, GroupChange]:
        """Why ``n`` cannot join ``grp`` (None if it can), and the changes to the group if it joins."""
        g = self.g
        reason = self._reads_own_memory(grp, n)
        if reason is not None:
            return reason, GroupChange()
        if grp.kind == "custom":
            return "the producer is a user kernel (ops.custom): its outputs are stored", GroupChange()
        if grp.kind == "matmul":
            if n.op in MEMORY_READS or n.op in SCANS:
                return (f"a {n.op} is not fused into a matmul epilogue (it reads other positions than the "
                        "output tile's)"), GroupChange()
            if n.op == "reduce" or n.op in ROW_OPS:
                return (f"a {'reduction' if n.op == 'reduce' else n.op} is not fused into a matmul epilogue (it needs "
                        "whole rows; the epilogue works tile by tile)"), GroupChange()
            mm = grp.nodes[0]
            if _same_shape(g, n.shape, mm.shape) is not True:
                return (f"the epilogue must keep the matmul's shape {g.shape_text(mm.shape)}; this operation has "
                        f"shape {g.shape_text(n.shape)}"), GroupChange()
            return self._check_inputs(grp, n, mm.shape), GroupChange()
        # vector group
        if n.op == "reduce" and sum(x.op == "reduce" for x in grp.nodes) >= MAX_MERGED or \
                len(self._read_by(grp, n.inputs) | self._read_by(grp, [i for x in grp.nodes for i in x.inputs])) > \
                MAX_READS:  # (every tensor a kernel reads or stores takes scalar registers: 256 in all)
            return "the group already reads or reduces as many tensors as one kernel takes", GroupChange()
        split = n.attrs.get("split") or any(x.attrs.get("split") for x in grp.nodes if x.op == "reduce")
        if split and (n.op in SCANS or any(x.op in SCANS for x in grp.nodes)):
            return ("a whole-tensor reduction split across the cores and a running scan do not share a kernel (each "
                    "program reduces a chunk; a scan runs along whole rows)"), GroupChange()
        change = GroupChange()
        gs = grp.space
        same = _same_shape(g, space, gs)
        if same is not True and n.op == "reduce" and _row_values(g, space, gs):
            return (f"the reduction runs over the last dim of {g.shape_text(space)} (size 1), not over the "
                    f"columns of the group's iteration space {g.shape_text(gs)}"), GroupChange()
        if same is not True and _row_values(g, space, gs):
            same = True  # per-row values (a reduction's shape) live in the same iteration space
        elif same is not True and (_row_values(g, gs, space) or not gs and self._numbers_for(grp, n)):
            if any(x.op == "reduce" for x in grp.nodes):
                return (f"the group's reductions run over the last dim of its iteration space {g.shape_text(gs)} "
                        f"(size 1); widening it to {g.shape_text(space)} would change what they reduce"), GroupChange()
            change.space = gs = tuple(space)  # the group so far held per-row values only
            same = True
        if same is not True:
            why = "cannot be proven equal" if same is None else "differ"
            return (f"iteration spaces {why}: {g.shape_text(space)} vs {g.shape_text(gs)} (unknown means do not "
                    "fuse)"), GroupChange()
        reason = self._check_inputs(grp, n, gs)
        if reason is not None:
            return reason, GroupChange()
        reason = self._consume(n, [grp], gs, change)
        return reason, change

    def _consume(self, n: Node, groups: list, gs, change: GroupChange) -> str | None:
        """A full-width ``n`` that consumes a row reduction of one of ``groups`` needs the group in row mode
        (a whole row in one tile): allowed unless this is the split plan or the row cannot fit UB."""
        g = self.g
        reduces = set()
        for i in n.inputs:
            if self.group_of.get(i.id) in groups:
                reduces |= self._reduces_under(i)
        if not reduces or _same_shape(g, n.shape, gs) is not True:
            return None
        if self.split:
            return SPLIT_REASON
        for r in sorted(reduces):
            if r in self.no_row:
                return self.no_row[r]
        change.mode = "row"
        cols = g.syms.find(gs[-1])
        if not isinstance(cols, int):
            change.guard = cols
        return None

    def _read_by(self, grp: Group, values) -> set:
        return {id(i) for i in values if not is_free(i) and self.producer(i)[1] is not grp}

    def _why_not_merge(self, into: Group, other: Group, n: Node, change: GroupChange) -> str | None:
        """Why the group ``other`` (another producer of ``n``) cannot be merged into ``into``, which ``n`` joins."""
        g = self.g
        if into.kind != "vector" or other.kind != "vector":
            kinds = {"matmul": "a matmul", "custom": "a user kernel (ops.custom)", "vector": "a vector group"}
            return (f"the operation joined {kinds[into.kind]} (the group of %{into.nodes[0].id}); the producer's "
                    f"group is {kinds[other.kind]}, which cannot be merged into it: the value is stored and read back")
        gs = change.space_of(into)
        if _same_shape(g, other.space, gs) is not True and _row_values(g, other.space, gs) and \
                any(x.op == "reduce" for x in other.nodes):
            return (f"the producer's group reduces over the last dim of {g.shape_text(other.space)} (size 1); merged "
                    f"into the iteration space {g.shape_text(gs)} its reductions would change")
        if _same_shape(g, other.space, gs) is not True and not _row_values(g, other.space, gs) and \
                not (not other.space and self._numbers_for(other, n)):
            same = _same_shape(g, other.space, gs)
            why = "cannot be proven equal" if same is None else "differ"
            return (f"the operation joined the group of %{into.nodes[0].id}; the producer's group iterates over "
                    f"{g.shape_text(other.space)}, and the spaces {why} ({g.shape_text(gs)})")
        if self.depends(into, other) or self.depends(other, into):
            return "merging the producer's group would create a cycle between kernels"
        if any(self.producer(i)[1] is other for i in memory_operands(n)):
            return (f"a {n.op} reads the producer's value from memory at positions of its own: the producer's group "
                    "stores it first")
        for i in n.inputs:
            _, src = self.producer(i)
            if src is not None and src is not into and src is not other and self.depends(src, other):
                return "merging the producer's group would create a cycle between kernels"
        return self._consume(n, [other], gs, change)

    def horizontal(self, row_fits) -> bool:
        """Merge sibling vector groups that load a tensor in common (every element of one value, through the same
        view or reshapes and permutes of it; not slices of it, nor a gather's table, read element by element) over
        one iteration space into one kernel, which then loads it once: a model's log-softmax, softmax and variance
        of one input, the mean and the max of one row. Neither may depend on the other (through any kernel), nor
        hold a scan or a sort, nor merge more than ``MAX_MERGED`` groups (a 7x7 depthwise weight gradient's 49
        reductions ran out of scalar registers); a merged group that needs whole rows must have a static row that
        still fits UB (the two groups' live bytes per element summed, an upper bound of the merged group's): a
        symbolic row would be guarded at a smaller size, sending calls to the split plan sooner. Run after
        ``finish`` (the groups' inputs and outputs); True when anything merged (``finish`` is then run again)."""
        g = self.g

        def whole(x: Node) -> int:  # the value a read loads every element of, through reshapes and permutes
            v = x
            while v.op in ("reshape", "permute"):
                v = v.inputs[0]
            return x.id if v.op in VIEWS else v.id

        def loaded(grp: Group) -> set:
            mem = {id(m) for n in grp.body() for m in memory_operands(n)}
            return {whole(x) for x in grp.inputs if id(x) not in mem}

        groups = [grp for grp in self.groups if grp.kind == "vector" and grp.mode in ("tiled", "loop", "row") and
                  not any(n.op in SCANS or n.op in ROW_OPS for n in grp.nodes)]
        reads = {grp.id: loaded(grp) for grp in groups}
        count = {grp.id: 1 for grp in groups}  # (the groups merged into each)
        live = {}  # group id -> live bytes per element (summed over what merged into it: an upper bound)
        if row_fits is not None:
            for grp in groups:
                row_fits(grp, 1)  # (which works out the group's live bytes, kept in ``live_bytes``)
                live[grp.id] = grp.live_bytes
        merged = False
        for i, a in enumerate(groups):
            if a.id not in reads:
                continue
            for b in groups[i + 1:]:
                if b.id not in reads or not reads[a.id] & reads[b.id] or _same_shape(g, a.space, b.space) is not True:
                    continue
                if self.depends(a, b) or self.depends(b, a) or count[a.id] + count[b.id] > MAX_MERGED:
                    continue
                if max(a.mode, b.mode, key=MODE_RANK.__getitem__) == "row":
                    cols = g.syms.find(a.space[-1]) if a.space else 1
                    if row_fits is None or not isinstance(cols, int) or not (live[a.id] and live[b.id]) or \
                            not row_fits(Group(-1, "vector", live_bytes=live[a.id] + live[b.id]), cols):
                        continue
                self.merge(a, b)
                reads[a.id] |= reads.pop(b.id)
                count[a.id] += count.pop(b.id)
                if live:
                    live[a.id] += live.pop(b.id)
                merged = True
        return merged

    def _reduces_under(self, v: Node) -> set[int]:
        """The row reductions that ``v`` is or depends on inside its group."""
        grp = self.group_of.get(v.id)
        out = set()
        seen = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x.id in seen or self.group_of.get(x.id) is not grp:
                continue
            seen.add(x.id)
            if x.op == "reduce":
                out.add(x.id)
            stack.extend(x.inputs)
        return out


def finish(g: Graph, groups: list[Group]) -> list[list[Group]]:
    """Inputs and outputs of every group, and the stages: groups of one stage do not depend on each other."""
    members = {}
    computed_by: dict[int, list[Group]] = {}  # node id -> the groups whose kernels compute it
    for grp in groups:
        for n in grp.nodes:
            members[n.id] = grp
        for n in grp.body():
            computed_by.setdefault(n.id, []).append(grp)
    body_ids = {grp.id: {n.id for n in grp.body()} for grp in groups}
    users = g.users()
    outputs = {o.id for o in g.outputs}
    for grp in groups:
        ins, outs = [], []
        own = body_ids[grp.id]
        for n in grp.body():
            for i in n.inputs:
                if i.id not in own and not is_free(i) and i not in ins:
                    ins.append(i)
        for n in grp.nodes:
            # stored when a graph output, or read by a kernel that does not compute it itself, or by a view
            external = False
            for u in users[n.id]:
                computing = computed_by.get(u.id)
                if computing is None:
                    external = True  # a view (or a user kernel's output) of it is read
                elif any(h is not grp and n.id not in body_ids[h.id] for h in computing):
                    external = True
            if n.op == "custom" or n.id in outputs or external:
                if n.op != "custom":
                    outs.append(n)
        if grp.kind == "custom":
            call = grp.nodes[0]
            outs = [u for u in users[call.id] if u.op == "custom_out"]
        grp.inputs = ins
        grp.outputs = outs
    level: dict[int, int] = {}
    producer_of = {}
    for grp in groups:
        for o in grp.outputs:
            producer_of[o.id] = grp

    def base_group(v: Node):
        while v.op in VIEWS:
            v = v.inputs[0]
        return producer_of.get(v.id) or members.get(v.id)

    def level_of(grp: Group, stack=()) -> int:
        if grp.id in level:
            return level[grp.id]
        if grp.id in stack:
            raise GraphError("internal: fusion groups form a cycle")
        lv = 0
        for i in grp.inputs:
            src = base_group(i)
            if src is not None and src is not grp:
                lv = max(lv, level_of(src, stack + (grp.id,)) + 1)
        level[grp.id] = lv
        return lv

    for grp in groups:
        level_of(grp)
    stages: list[list[Group]] = []
    for grp in groups:
        while len(stages) <= level[grp.id]:
            stages.append([])
        stages[level[grp.id]].append(grp)
    return stages


def plan(g: Graph, fuse: bool = True, row_fits=None, split_reductions: bool = False,
         no_row: dict | None = None) -> Plan:
    """Fuse ``g``. ``row_fits(group, cols)`` says whether a row-mode group's row fits UB: a static row that does
    not is split (its reductions end their groups); a symbolic row is fused behind a launch-time guard, with
    the split plan as the fallback."""
    p = Planner(g, fuse, split_reductions, no_row)
    groups = p.run()
    stages = finish(g, groups)
    if fuse and not split_reductions and p.horizontal(row_fits):
        p.renumber()
        for grp in groups:
            grp.live_bytes = 0
        stages = finish(g, groups)
    if fuse and not split_reductions and row_fits is not None:
        too_long = {}
        for grp in groups:
            cols = g.syms.find(grp.space[-1]) if grp.space else 1
            if grp.mode == "row" and isinstance(cols, int) and not row_fits(grp, cols):
                for n in grp.nodes:
                    if n.op == "reduce":
                        too_long[n.id] = ("a reduction's result is consumed inside its group, which needs a whole "
                                          f"row in one tile, but a row of {cols} elements cannot fit UB (footprint "
                                          f"of {grp.name})")
        if too_long:
            return plan(g, fuse, row_fits, split_reductions, {**(no_row or {}), **too_long})
    result = Plan(g, groups, p.rejections, stages, fuse, split_reductions)
    if fuse and not split_reductions and any(grp.mode == "row" and grp.guard is not None for grp in groups):
        result._make_fallback = lambda: plan(g, fuse, row_fits, True, no_row)
    return result
