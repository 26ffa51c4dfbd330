"""View algebra on a captured graph, before fusion (``canonical`` runs it first): a chain of reshapes is one
reshape and a chain of permutes one permute, one back to its operand's shape and order is its operand, and a
permute of a reshape that only splits dims is the permute of the unsplit dims, then the split, and an elementwise
operation reads a number broadcast to a shape as the number. Each rewrite keeps
every value's elements; what it changes is which views a kernel reads through, so fewer need a copy kernel."""

from __future__ import annotations

from .fusion import EW
from .graph import Graph, Node
from .graph_ops import FREE

MAX_VIEW_RANK = 4  # a strided view of a computed value is read as it is up to this rank (the kernels' limit)


def fold_views(g: Graph) -> None:
    """A reshape of a reshape is one reshape of the first one's operand, a permute of a permute one permute, and
    either to its operand's own shape and order (not returned) is its operand: attention's value heads split for
    a batched matmul and merged back, ``(B*H, L, D) -> (B, H, L, D) -> (B*H, L, D)``, are the permuted value
    itself, which the matmul reads through strides, not a reshape that merges permuted dims (a copy kernel)."""
    outputs = {id(o) for o in g.outputs}
    find = g.syms.find
    replace: dict[int, Node] = {}
    folded = False
    for n in g.nodes:
        n.inputs = [replace.get(id(i), i) for i in n.inputs]
        if n.op == "permute":
            while n.inputs[0].op == "permute":  # permute(permute(x, p), q): dim i is x's dim p[q[i]]
                inner = n.inputs[0]
                n.attrs = {**n.attrs, "perm": tuple(inner.attrs["perm"][i] for i in n.attrs["perm"])}
                n.inputs = [inner.inputs[0]]
                folded = True
            if id(n) not in outputs and n.attrs["perm"] == tuple(range(n.rank)):
                replace[id(n)] = n.inputs[0]
            continue
        if n.op != "reshape":
            continue
        while n.inputs[0].op == "reshape":
            n.inputs = [n.inputs[0].inputs[0]]
            folded = True
        if id(n) not in outputs and shape_key(find, n.shape) == shape_key(find, n.inputs[0].shape):
            replace[id(n)] = n.inputs[0]
    if replace or folded:  # (and the reshapes only a folded one read are gone)
        rewritten(g, [n for n in g.nodes if id(n) not in replace], [replace.get(id(o), o) for o in g.outputs])


def numbers_unbroadcast(g: Graph) -> None:
    """An elementwise operation reads a number broadcast to a shape (``full``, ``ones``, ``scalar_tensor`` then
    ``expand``: a ``broadcast_to`` of a constant, a size or scalar arithmetic on them) as the number itself: the
    operation's shape is already the broadcast of its operands, and a number broadcasts to any shape in its
    kernel. The broadcast, which a kernel of its own stored when its readers run in another iteration space
    (a causal mask's ``(L, L)`` read over ``(B, H, L, L)``), is then read by no one. A copy (``attrs["copy"]``)
    stays."""
    numbers: dict[int, bool] = {}

    def number(x: Node) -> bool:  # a rank-0 value computed from constants and sizes alone
        got = numbers.get(id(x))
        if got is None:
            got = numbers[id(x)] = x.rank == 0 and (x.op in FREE or (x.op in EW and all(map(number, x.inputs))))
        return got

    changed = False
    for n in g.nodes:
        if n.op in EW and any(i.op == "broadcast_to" for i in n.inputs):
            ins = [i.inputs[0] if i.op == "broadcast_to" and not i.attrs.get("copy") and number(i.inputs[0]) else i
                   for i in n.inputs]
            if any(a is not b for a, b in zip(ins, n.inputs)):
                n.inputs = ins
                changed = True
    if changed:
        rewritten(g, g.nodes, g.outputs)


def permutes_before_splits(g: Graph) -> bool:
    """A permute of a reshape that only splits dims, moving each split dim's parts together and in order, is the
    permute of the unsplit dims, then the split: ``permute(reshape(v, (H, D) -> (B, H/B, L, D)), (2, 0, 1, 3))`` is
    ``reshape(permute(v, (1, 0, 2)), (L, B, H/B, D))``. Attention's output heads merged back (``(B*H, L, D)`` split,
    moved behind L and merged into ``(L, B*H*D)``) then read as one permute of the matmul's result, which its
    kernel stores in that order (``_store_in_order``) instead of a copy kernel reordering it. True when any moved."""
    def moved(n: Node) -> list | None:
        v = n.inputs[0] if n.op == "permute" else None
        if v is None or v.op != "reshape" or n.rank > MAX_VIEW_RANK:
            return None
        runs = split_runs(g, v.inputs[0].shape, v.shape)
        if runs is None:
            return None
        perm, order, k = n.attrs["perm"], [], 0
        first = {run[0]: i for i, run in enumerate(runs)}
        while k < len(perm) and perm[k] in first:
            run = runs[first[perm[k]]]
            if tuple(perm[k:k + len(run)]) != tuple(run):
                return None
            order.append(first[perm[k]])
            k += len(run)
        if k < len(perm) or order == sorted(order):
            return None
        x = v.inputs[0]
        p = Node("permute", [x], tuple(x.shape[i] for i in order), x.dtype, {"perm": tuple(order)}, loc=n.loc)
        return [p, Node("reshape", [p], n.shape, n.dtype, {}, loc=n.loc)]

    return replace_each(g, moved)


def split_runs(g, old, new) -> list | None:
    """For a reshape that only splits dims (each dim of ``old`` is a run of dims of ``new`` whose product it is;
    a dim kept as it is, a run of one), the run of ``new``'s dims of each dim of ``old``, in order; else None."""
    find = g.syms.find
    runs, j = [], 0
    for d in map(find, old):
        if j < len(new) and g.syms.equal(d, new[j]) is True:
            runs.append((j,))
            j += 1
            continue
        if not isinstance(d, int) or d <= 1:
            return None
        run, rest = [], d
        while rest > 1 and j < len(new) and isinstance(find(new[j]), int) and find(new[j]) > 1 and \
                rest % find(new[j]) == 0:
            rest //= find(new[j])
            run.append(j)
            j += 1
        if rest != 1 or not run:
            return None
        runs.append(tuple(run))
    return runs if j == len(new) else None


def replace_each(g: Graph, fn) -> bool:
    """Rewrite ``g`` node by node: ``fn(n)``, called with ``n``'s operands already replaced, returns the new nodes
    that take its place (the last stands for it) or None to keep it. True when any node was replaced."""
    out: list[Node] = []
    replace: dict[int, Node] = {}
    for n in g.nodes:
        n.inputs = [replace.get(id(i), i) for i in n.inputs]
        new = fn(n)
        if new is None:
            out.append(n)
        else:
            out += new
            replace[id(n)] = new[-1]
    if replace:
        rewritten(g, out, [replace.get(id(o), o) for o in g.outputs])
    return bool(replace)


def rewritten(g: Graph, nodes: list[Node], outputs: list[Node]) -> None:
    """Give ``g`` its rewritten ``nodes`` (in order) and ``outputs``, numbered, without what nothing reads."""
    g.outputs = outputs
    g.nodes = nodes
    for i, n in enumerate(g.nodes):
        n.id = i
    g.prune()


def shape_key(find, shape) -> tuple:
    return tuple(d if isinstance(d, int) else ("s", d.id) for d in map(find, shape))

