"""What a copy kernel reads: a copy kernel materialises a view of a stored value that its readers cannot read
through strides (``canonical`` puts one under a reshape that is no view), and its iteration space, like every
vector group's, has rank <= ``MAX_VIEW_RANK``. A view of higher rank is read as one of fewer dims with the same
elements in the same order: the runs of dims a permute of a value in memory order keeps together, merged (Swin's
window partition); else the runs of dims adjacent in memory (``_strides``: each dim's stride is its size times the
next one's); else, for a permute, what it reads copied first when that is not in memory order (Mamba2's chunked
scan: a slice of a permuted rank-5 value, permuted again), and a permute of more than four runs of dims done as
block moves, a copy each (pixel_shuffle)."""

from __future__ import annotations

import functools

from . import dims
from .graph import Graph, Node
from .graph_ops import VIEWS
from .views import MAX_VIEW_RANK


def copy_source(g: Graph, x: Node, add, loc) -> Node:
    """``x``, a view of rank > ``MAX_VIEW_RANK``, as a view of at most that rank with its elements in order (new
    nodes go through ``add``, copies among them); ``x`` itself when there is none (the planner then refuses its
    copy kernel)."""
    y = _merged_permute(g, x, add)
    if y is x:
        y = _merged_view(g, x, add)
    if y is not x or x.op not in VIEWS:
        return y
    inner = x.inputs[0]
    if not _reshape_is_a_view(inner):  # (what the view reads, copied first: then in memory order)
        src = copy_source(g, inner, add, loc) if inner.rank > MAX_VIEW_RANK else inner
        if src.rank > MAX_VIEW_RANK:
            return x
        c = add(Node("broadcast_to", [src], src.shape, src.dtype, {"copy": True}, loc=loc))
        inner = add(Node("reshape", [c], inner.shape, inner.dtype, {}, loc=loc)) if src is not inner else c
    if x.op != "permute":  # (a slice or a reshape of a value in memory order)
        v = _merged_view(g, add(Node(x.op, [inner], x.shape, x.dtype, dict(x.attrs), loc=loc)), add)
        return v if v.rank <= MAX_VIEW_RANK else x
    steps = _block_moves(x.attrs["perm"])
    for k, rel in enumerate(steps):  # (a permute of more runs: one block of dims moved per copy, as an insertion
        p = add(Node("permute", [inner], tuple(inner.shape[i] for i in rel), x.dtype, {"perm": rel}, loc=loc))
        m = _merged_permute(g, p, add)  # sort moves them: pixel_shuffle's (N, C, r, r, H, W) -> (N, C, H, r, W, r)
        if k == len(steps) - 1:  # takes two)
            return m
        c = add(Node("broadcast_to", [m], m.shape, m.dtype, {"copy": True}, loc=loc))
        inner = add(Node("reshape", [c], p.shape, p.dtype, {}, loc=loc))
    return x


def _block_moves(perm) -> list:
    """``perm`` as permutations applied one after another, each moving one block of dims (so with at most four runs
    of dims kept together): the first dim out of place and the dims after it that follow it in ``perm``, moved to
    its place."""
    cur, steps = list(range(len(perm))), []
    while cur != list(perm):
        i = next(k for k in range(len(perm)) if cur[k] != perm[k])
        j = cur.index(perm[i])
        m = 1
        while j + m < len(cur) and i + m < len(perm) and cur[j + m] == perm[i + m]:
            m += 1
        new = cur[:i] + cur[j:j + m] + cur[i:j] + cur[j + m:]
        steps.append(tuple(cur.index(d) for d in new))
        cur = new
    return steps


def _runs(perm) -> list:
    """The runs of a permutation's dims that stay together and in order."""
    runs = [[perm[0]]]
    for d in perm[1:]:
        if d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _merged_permute(g: Graph, x: Node, add) -> Node:
    """``x``, a permute of rank > ``MAX_VIEW_RANK``, as a permute of a reshape of its operand that merges each run of
    dims the permute keeps together and in order, when that has rank <= ``MAX_VIEW_RANK``: the same elements in
    the same order (row-major). A window partition's (B, nH, ws, nW, ws, C) permuted by (0, 1, 3, 2, 4, 5) is
    (B*nH, ws, nW, ws*C) permuted by (0, 2, 1, 3). ``x`` itself when it is no such permute, or when its operand is
    not in memory order (a reshape of it would not be a view; ``add`` puts a new node in the graph)."""
    if x.op != "permute" or not _reshape_is_a_view(x.inputs[0]):  # (merging dims of a slice is no view)
        return x
    y = x.inputs[0]
    runs = _runs(x.attrs["perm"])
    if len(runs) > MAX_VIEW_RANK:
        return x
    blocks = sorted(runs)  # (the operand's dims in order, run by run)
    shape = []
    for block in blocks:
        size = 1
        for d in block:
            size = dims.arith(g.syms, "*", size, y.shape[d])
        shape.append(size)
    merged = add(Node("reshape", [y], tuple(shape), y.dtype, {}, loc=x.loc))
    order = tuple(blocks.index(run) for run in runs)
    return add(Node("permute", [merged], tuple(shape[i] for i in order), y.dtype, {"perm": order}, loc=x.loc))


def _merged_view(g: Graph, x: Node, add) -> Node:
    """``x``, a chain of views of rank > ``MAX_VIEW_RANK``, as a reshape of it to fewer dims when its dims of size
    other than 1 merge into at most ``MAX_VIEW_RANK`` runs that are each one stride in memory (each dim's stride
    its size times the next one's, as the chain's strides over its stored value give them, proven for every size):
    the same elements in the same order, and numpy's reshape of the chain is a view. ``x`` itself otherwise."""
    st = _strides(g, x)
    if st is None:
        return x
    mul = functools.partial(dims.arith, g.syms, "*")
    runs: list = []  # [size, stride] of each run
    for d, s in zip(x.shape, st):
        if _one(g.syms.find(d)):
            continue
        if runs and g.syms.equal(runs[-1][1], mul(d, s)) is True:
            runs[-1] = [mul(runs[-1][0], d), s]
        else:
            runs.append([d, s])
    if len(runs) > MAX_VIEW_RANK:
        return x
    return add(Node("reshape", [x], tuple(r[0] for r in runs) or (1,), x.dtype, {}, loc=x.loc))


def _strides(g: Graph, x: Node) -> list | None:
    """The strides (elements, dims) of view chain ``x`` over the value it views, stored contiguously in its own
    order; None for a chain with anything else (a broadcast, a reshape that does not only split dims, a value
    stored in another order)."""
    if x.op not in VIEWS:
        if x.attrs.get("order") is not None:
            return None
        out, acc = [], 1
        for d in reversed(x.shape):
            out.append(acc)
            acc = dims.arith(g.syms, "*", acc, d)
        return out[::-1]
    inner = _strides(g, x.inputs[0])
    if inner is None:
        return None
    if x.op == "permute":
        return [inner[p] for p in x.attrs["perm"]]
    if x.op == "slice":
        a = x.attrs["axis"]
        return inner[:a] + [dims.arith(g.syms, "*", inner[a], x.attrs["step"])] + inner[a + 1:]
    src = [(d, s) for d, s in zip(x.inputs[0].shape, inner) if not _one(g.syms.find(d))]
    out, k = [], 0
    for d in x.shape:  # (a reshape that splits each dim into a run of dims, and adds or drops 1s)
        if _one(g.syms.find(d)):
            out.append(1)
            continue
        if k >= len(src):
            return None
        rest, s = src[k]
        if g.syms.equal(rest, d) is True:
            out.append(s)
            k += 1
            continue
        a, b = g.syms.find(rest), g.syms.find(d)
        if isinstance(a, int) and isinstance(b, int) and (b < 1 or a % b):
            return None
        q = dims.arith(g.syms, "//", rest, d)  # (the reshape is checked at every call: d divides rest then)
        out.append(dims.arith(g.syms, "*", s, q))
        src[k] = (q, s)
    return out if k == len(src) else None


def _reshape_is_a_view(x: Node) -> bool:
    """Whether a reshape of ``x`` reads its elements in memory order, so it can be a view of a stored value. A
    value computed in the launch is stored contiguously; a permute that moves a dimension other than a
    literal 1 makes a reshape of it a gather, which the kernels reading it cannot express as strides (numpy
    would copy at bind time, before the producer ran): such a reshape gets a copy kernel (``broadcast_to``
    to the same shape) under it. A reshape of a view of an input stays a view: numpy copies the input's real
    elements when the launch is bound."""
    reorders = False
    while x.op in VIEWS:
        if x.op == "slice":
            reorders = True  # a slice of a computed value is not contiguous
        if x.op == "permute":
            src = x.inputs[0].shape
            moved = [d for d in x.attrs["perm"] if not (isinstance(src[d], int) and src[d] == 1)]
            reorders = reorders or moved != sorted(moved)
        x = x.inputs[0]
    return not reorders or x.op == "input"


def _one(d) -> bool:
    return isinstance(d, int) and d == 1
