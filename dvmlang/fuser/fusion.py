"""Fusion: split a captured graph into groups, each one kernel, and record why every rejected pair was
rejected.

Kinds of group:

* **vector** — elementwise/broadcast chains and reductions over the last dimension, on one iteration space
  ``(outer..., rows, cols)``. Three tilings: *tiled* (no reduction: blocks of rows x cols), *loop*
  (reductions only as sinks: each program loops over column blocks and accumulates), *row* (a reduction
  result is consumed inside the group: a whole row must be one tile).
* **matmul** — a batched matmul on the cube, with an elementwise epilogue on its output (a mix kernel).
* **custom** — a user ``@dvmlang.kernel`` called with ``ops.custom``.

Views (``reshape``, ``permute``) are not computed: the value under them is stored and consumers read it
through strides. Symbol deduction decides what can fuse: equal iteration spaces must be *proven* (same
symbol or same number); unknown means do not fuse. A row-mode group whose row length is a symbol is fused
behind a launch-time guard, with a split plan as the fallback when a row does not fit UB.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtypes as dt
from .graph import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, Graph, GraphError, Node

EW = frozenset(ELEMENTWISE_UNARY) | frozenset(ELEMENTWISE_BINARY) | {"where", "cast", "broadcast_to"}
FREE = frozenset({"const", "dim", "iota"})  # copied into every group that uses them
VIEWS = frozenset({"reshape", "permute"})


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

    @property
    def name(self) -> str:
        ops = [n.op if n.op != "reduce" else n.attrs["op"] for n in self.nodes if n.op not in FREE]
        head = "_".join(dict.fromkeys(ops))[:40] or self.kind
        return f"g{self.id}_{head}"

    def __repr__(self) -> str:
        return f"<group {self.name} {self.kind}/{self.mode}>"


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
    fallback: "Plan | None" = None


def canonicalize(g: Graph) -> None:
    """Rewrite every reduction into reductions over the last dimension with keepdims, plus views."""
    new_nodes: list[Node] = []
    replace: dict[int, Node] = {}

    def add(n: Node) -> Node:
        n.id = -1
        new_nodes.append(n)
        return n

    for n in g.nodes:
        n.inputs = [replace.get(i.id, i) for i in n.inputs]
        if n.op != "reduce":
            new_nodes.append(n)
            continue
        x = n.inputs[0]
        axes = sorted(n.attrs["axes"])
        cur = x
        shape = list(x.shape)
        for ax in reversed(axes):
            r = len(shape)
            if ax != r - 1:
                perm = tuple(i for i in range(r) if i != ax) + (ax,)
                cur = add(Node("permute", [cur], tuple(shape[i] for i in perm), cur.dtype, {"perm": perm}))
                red_shape = tuple(shape[i] for i in perm[:-1]) + (1,)
                cur = add(Node("reduce", [cur], red_shape, n.dtype, {"op": n.attrs["op"], "axes": (r - 1,),
                                                                     "keepdims": True}))
                back = list(range(r - 1))
                back.insert(ax, r - 1)
                inv = tuple(back)
                cur = add(Node("permute", [cur], tuple(red_shape[i] for i in inv), n.dtype, {"perm": inv}))
                shape[ax] = 1
            else:
                shape[ax] = 1
                cur = add(Node("reduce", [cur], tuple(shape), n.dtype, {"op": n.attrs["op"], "axes": (r - 1,),
                                                                       "keepdims": True}))
        if tuple(cur.shape) != tuple(n.shape):
            cur = add(Node("reshape", [cur], n.shape, n.dtype, {}))
        replace[n.id] = cur
    g.outputs = [replace.get(o.id, o) for o in g.outputs]
    g.nodes = new_nodes
    for i, n in enumerate(g.nodes):
        n.id = i


def _same_shape(g: Graph, a, b) -> bool | None:
    if len(a) != len(b):
        return False
    result = True
    for x, y in zip(a, b):
        e = g.syms.equal(x, y)
        if e is False:
            return False
        if e is None:
            result = None
    return result


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


def _is_row_reduce(n: Node) -> bool:
    return n.op == "reduce" and n.attrs["axes"] == (len(n.shape) - 1,)


def _desc(n: Node) -> str:
    return f"%{n.id} {n.op if n.op != 'reduce' else 'reduce ' + n.attrs['op']}"


class Planner:
    def __init__(self, g: Graph, fuse: bool, split_reductions: bool, ub_elems_limit):
        self.g = g
        self.fuse = fuse
        self.split = split_reductions
        self.ub_elems_limit = ub_elems_limit  # max row length a row-mode group can hold (static check)
        self.group_of: dict[int, Group] = {}
        self.groups: list[Group] = []
        self.rejections: list[Rejection] = []
        self.users = g.users()
        self.deps: dict[int, set[int]] = {}  # group id -> ids of groups it reads from (transitively closed)

    def reject(self, producer: Node, consumer: Node, reason: str):
        self.rejections.append(Rejection(_desc(producer), _desc(consumer), reason))

    def new_group(self, kind: str, n: Node, space) -> Group:
        grp = Group(len(self.groups), kind, [], tuple(space))
        self.groups.append(grp)
        self.deps[grp.id] = set()
        self.put(grp, n)
        return grp

    def put(self, grp: Group, n: Node):
        grp.nodes.append(n)
        self.group_of[n.id] = grp
        for i in n.inputs:
            src = self.group_of.get(i.id)
            if src is not None and src is not grp:
                self.deps[grp.id] |= {src.id} | self.deps[src.id]

    def depends(self, a: Group, b: Group) -> bool:
        """Whether group ``a`` reads (transitively) from group ``b``."""
        return b.id in self.deps[a.id]

    def run(self) -> list[Group]:
        for n in self.g.nodes:
            if n.op in ("input",) or n.op in FREE or n.op in VIEWS or n.op == "custom_out":
                continue
            if n.op == "custom":
                grp = self.new_group("custom", n, ())
                continue
            if n.op == "matmul":
                self._matmul(n)
                continue
            if n.op in EW or n.op == "reduce":
                self._vector(n)
                continue
            raise GraphError(f"the fuser does not know the operation {n.op!r}")
        return self.groups

    # ---- matmul -------------------------------------------------------------------------------------------
    def _matmul(self, n: Node):
        for i in n.inputs:
            src = self.group_of.get(i.id)
            if src is not None:
                self.reject(i, n, "elementwise producers of a matmul operand are not fused into the cube kernel "
                                  "(no prologue fusion): the operand is stored and the matmul reads it")
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
        if self.fuse:
            for grp in candidates:
                reason = self._why_not(grp, n, space, candidates)
                if reason is None:
                    chosen = grp
                    break
                producer = next(i for i in n.inputs if self.group_of.get(i.id) is grp)
                self.reject(producer, n, reason)
        if chosen is None:
            grp = self.new_group("vector", n, space)
            if n.op == "reduce":
                grp.mode = "loop"
            return
        self.put(chosen, n)
        if n.op == "reduce" and chosen.mode == "tiled":
            chosen.mode = "loop"

    def _why_not(self, grp: Group, n: Node, space, candidates) -> str | None:
        g = self.g
        if grp.kind == "custom":
            return "the producer is a user kernel (ops.custom): its outputs are stored"
        if grp.kind == "matmul":
            if n.op == "reduce":
                return "a reduction is not fused into a matmul epilogue (the epilogue works tile by tile)"
            mm = grp.nodes[0]
            if _same_shape(g, n.shape, mm.shape) is not True:
                return (f"the epilogue must keep the matmul's shape {g.shape_text(mm.shape)}; this operation has "
                        f"shape {g.shape_text(n.shape)}")
            for i in n.inputs:
                src = self.group_of.get(i.id)
                if src is grp or i.op in FREE:
                    continue
                if src is not None and self.depends(src, grp):
                    return "fusing would create a cycle between kernels"
                if not _broadcastable(g, self._value_shape(i), mm.shape):
                    return (f"operand %{i.id} with shape {g.shape_text(i.shape)} cannot be proven to broadcast to "
                            f"the matmul output {g.shape_text(mm.shape)}")
            return None
        # vector group
        gs = grp.space
        same = _same_shape(g, space, gs)
        if same is not True and _row_values(g, space, gs):
            same = True  # per-row values (a reduction's shape) live in the same iteration space
        elif same is not True and _row_values(g, gs, space):
            grp.space = gs = tuple(space)  # the group so far held per-row values only
            same = True
        if same is not True:
            why = "cannot be proven equal" if same is None else "differ"
            return (f"iteration spaces {why}: {g.shape_text(space)} vs {g.shape_text(gs)} (unknown means do not "
                    "fuse)")
        for i in n.inputs:
            src = self.group_of.get(i.id)
            if src is grp or i.op in FREE:
                continue
            if src is not None and src is not grp and self.depends(src, grp):
                return "fusing would create a cycle between kernels"
            if not _broadcastable(g, self._value_shape(i), gs):
                return (f"broadcast dims cannot be proven equal: operand %{i.id} {g.shape_text(i.shape)} against "
                        f"{g.shape_text(gs)}")
        consumed = [i for i in n.inputs if self.group_of.get(i.id) is grp and self._derives_from_reduce(i, grp)]
        if consumed and _same_shape(g, n.shape, gs) is True:
            if self.split:
                return ("a reduction's result is consumed inside its group; this is the split plan, used when a row "
                        "does not fit UB")
            cols = g.syms.find(gs[-1])
            if isinstance(cols, int) and self.ub_elems_limit is not None and cols > self.ub_elems_limit:
                return (f"a reduction's result is consumed inside its group, which needs a whole row in one tile, "
                        f"but a row of {cols} elements cannot fit UB (footprint)")
            grp.mode = "row"
            if not isinstance(cols, int):
                grp.guard = cols
        return None

    def _value_shape(self, i: Node):
        return i.shape

    def _derives_from_reduce(self, v: Node, grp: Group) -> bool:
        """Whether ``v`` (in ``grp``) is or depends on a row reduction inside ``grp``."""
        seen = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x.id in seen or self.group_of.get(x.id) is not grp:
                continue
            seen.add(x.id)
            if x.op == "reduce":
                return True
            stack.extend(x.inputs)
        return False


def finish(g: Graph, groups: list[Group]) -> list[list[Group]]:
    """Inputs and outputs of every group, and the stages: groups of one stage do not depend on each other."""
    members = {}
    for grp in groups:
        for n in grp.nodes:
            members[n.id] = grp
    users = g.users()
    outputs = {o.id for o in g.outputs}
    for grp in groups:
        ins, outs = [], []
        for n in grp.nodes:
            for i in n.inputs:
                if members.get(i.id) is not grp and i.op not in FREE and i not in ins:
                    ins.append(i)
            external = [u for u in users[n.id] if members.get(u.id) is not grp]
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


def plan(g: Graph, fuse: bool = True, ub_elems_limit: int | None = None, split_reductions: bool = False) -> Plan:
    p = Planner(g, fuse, split_reductions, ub_elems_limit)
    groups = p.run()
    stages = finish(g, groups)
    result = Plan(g, groups, p.rejections, stages, fuse, split_reductions)
    if fuse and not split_reductions and any(grp.mode == "row" and grp.guard is not None for grp in groups):
        result.fallback = plan(g, fuse, ub_elems_limit, split_reductions=True)
    return result


_ = dt
