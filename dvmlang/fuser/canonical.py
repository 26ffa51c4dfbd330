"""Canonical form of a captured graph before fusion: every reduction over the last dimension with keepdims
(plus the views that bring its axis last and back), a reshape that cannot be a view gets a copy under it, a free
value that is stored gets a copy kernel, and a reduction of a whole tensor is split across the cores."""

from __future__ import annotations

from .fusion import EW, VIEWS, is_free, memory_operands
from .graph import Graph, Node

MAX_VIEW_RANK = 4  # a strided view of a computed value is read as it is up to this rank (the kernels' limit)
SPLIT_MIN = 1 << 16  # a whole-tensor reduction of at least this many elements (or of a symbolic count) is split


def canonicalize(g: Graph, parts: int | None = None) -> None:
    """Rewrite every reduction into reductions over the last dimension with keepdims, plus views. With ``parts``
    (the vector cores), a reduction of a whole tensor (one row: every other dim is 1) of a symbolic or large
    count is split: ``parts`` programs each reduce a chunk of it into a partial (a ``reduce`` with ``split``),
    and a second reduction combines the partials, so it runs on every core instead of one."""
    g.prune()
    new_nodes: list[Node] = []
    replace: dict[int, Node] = {}
    readers: dict[int, int] = {}  # id(node) -> how many nodes and outputs read it
    for x in [i for n in g.nodes for i in n.inputs] + list(g.outputs):
        readers[id(x)] = readers.get(id(x), 0) + 1

    def add(n: Node) -> Node:
        n.id = -1
        new_nodes.append(n)
        return n

    for n in g.nodes:
        n.inputs = [replace.get(i.id, i) for i in n.inputs]
        if n.op == "reshape" and not _reshape_is_a_view(n.inputs[0]) and \
                not (n.rank <= MAX_VIEW_RANK and (_splits_only(g, n.inputs[0].shape, n.shape) or
                                                  _store_in_order(n.inputs[0], readers))):
            x = n.inputs[0]
            n.inputs = [add(Node("broadcast_to", [x], x.shape, x.dtype, {"copy": True}, loc=n.loc))]
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
                cur = add(Node("permute", [cur], tuple(shape[i] for i in perm), cur.dtype, {"perm": perm}, loc=n.loc))
                red_shape = tuple(shape[i] for i in perm[:-1]) + (1,)
                cur = add(Node("reduce", [cur], red_shape, n.dtype, {"op": n.attrs["op"], "axes": (r - 1,),
                                                                     "keepdims": True}, loc=n.loc))
                back = list(range(r - 1))
                back.insert(ax, r - 1)
                inv = tuple(back)
                cur = add(Node("permute", [cur], tuple(red_shape[i] for i in inv), n.dtype, {"perm": inv}, loc=n.loc))
                shape[ax] = 1
            else:
                extent = g.syms.find(shape[ax])
                one_row = all(isinstance(g.syms.find(d), int) and g.syms.find(d) == 1 for d in shape[:-1])
                if parts and cur is x and one_row and (not isinstance(extent, int) or extent >= SPLIT_MIN):
                    cur = add(Node("reduce", [cur], tuple(shape[:-1]) + (parts,), n.dtype,
                                   {"op": n.attrs["op"], "axes": (r - 1,), "keepdims": True, "split": parts},
                                   loc=n.loc))
                shape[ax] = 1
                cur = add(Node("reduce", [cur], tuple(shape), n.dtype, {"op": n.attrs["op"], "axes": (r - 1,),
                                                                       "keepdims": True}, loc=n.loc))
        if tuple(cur.shape) != tuple(n.shape):
            cur = add(Node("reshape", [cur], n.shape, n.dtype, {}, loc=n.loc))
        replace[n.id] = cur
    g.outputs = [replace.get(o.id, o) for o in g.outputs]
    # a free value (a constant, an index tile) that is returned or read from memory is computed by a copy kernel
    def read_stored(n: Node) -> list:
        return [n.inputs[0]] if n.op in VIEWS else memory_operands(n)
    stored = {o.id for o in g.outputs} | {m.id for n in new_nodes for m in read_stored(n)}
    copies: dict[int, Node] = {}
    final: list[Node] = []
    for n in new_nodes:
        if copies:
            n.inputs = [copies.get(i.id, i) if i in read_stored(n) else i for i in n.inputs]
        final.append(n)
        if n.id in stored and n.id != -1 and is_free(n):
            c = Node("broadcast_to", [n], n.shape, n.dtype, {"copy": True}, loc=n.loc)
            c.id = -1
            copies[n.id] = c
            final.append(c)
    g.outputs = [copies.get(o.id, o) for o in g.outputs]
    new_nodes = final
    g.nodes = new_nodes
    for i, n in enumerate(g.nodes):
        n.id = i
    outputs = {o.id for o in g.outputs}
    for n in g.nodes:  # scalar arithmetic on constants and sizes (e.g. 1/sqrt(head size)) is free
        if n.op in EW and n.rank == 0 and n.inputs and n.id not in outputs and all(is_free(i) for i in n.inputs):
            n.attrs["free_scalar"] = True


def _store_in_order(x: Node, readers: dict) -> bool:
    """Whether ``x``, a chain of permutes of a value computed in the launch that nothing else reads (each link
    read only by the next; not an output), can be made contiguous by storing that value in the chain's order.
    Then the value gets ``attrs["order"]``, the order of its dims in memory (its buffer holds
    ``permute(value, order)`` contiguously; every kernel writes its outputs through their strides), and a
    reshape of the chain is a view. An attention's output (H, L, D), transposed to (L, H, D) and reshaped to
    (L, H*D) for the output projection, is stored as (L, H, D): no copy kernel."""
    perms = []
    while x.op == "permute" and readers.get(id(x), 0) == 1:
        perms.append(x.attrs["perm"])
        x = x.inputs[0]
    if not perms or x.op in VIEWS or x.op in ("input", "broadcast_to", "custom") or is_free(x) or \
            readers.get(id(x), 0) != 1 or x.attrs.get("order") is not None or not 2 <= x.rank <= MAX_VIEW_RANK:
        return False
    order = tuple(range(x.rank))
    for p in reversed(perms):  # from the value outwards: permute(v, p)'s dim i is v's dim p[i]
        order = tuple(order[i] for i in p)
    if order != tuple(range(x.rank)):  # (else the permutes cancel: the chain is the value in its own order)
        x.attrs["order"] = order
    return True


def _splits_only(g, old, new) -> bool:
    """Whether a reshape from ``old`` to ``new`` only splits dims (each dim of ``old`` is, in order, one dim of
    ``new`` proven equal, or a run of dims of ``new`` whose product it is, all of them numbers) and inserts or
    removes dims of size 1: a view of any strided array at every size (a dim of stride s split into (n1, n2)
    has strides (s*n2, s)), as a head split (L, H*D) -> (L, H, D) of a slice of a fused q/k/v projection is."""
    find = g.syms.find

    def big(shape):
        return [x for x in map(find, shape) if not (isinstance(x, int) and x == 1)]
    a, b = big(old), big(new)
    j = 0
    for d in a:
        if j < len(b) and g.syms.equal(d, b[j]) is True:
            j += 1
            continue
        if not isinstance(d, int):
            return False
        rest = d
        while rest > 1 and j < len(b) and isinstance(b[j], int) and b[j] > 0 and rest % b[j] == 0:
            rest //= b[j]
            j += 1
        if rest != 1:
            return False
    return j == len(b)


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
