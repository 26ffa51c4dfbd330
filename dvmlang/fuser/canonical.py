"""Canonical form of a captured graph before fusion: chains of views folded (``views``); an operation equal to an
earlier one replaced by it; an elementwise operation on a reshape of a matmul's result moved into its epilogue;
an operation with numbers on views that only matmuls read moved above them; an elementwise value that its
readers broadcast computed again by them; a view that only adds or drops dims of size 1 moved under the
elementwise operations it reads (recomputed from their operands' views); every reduction over the last dimension
with keepdims (plus the views that bring its axis last and back); a reshape that cannot be a view given a copy
under it; a free value that is stored given a copy kernel; a number broadcast that only cats read computed in
their kernels; and a reduction of a whole tensor split across the cores."""

from __future__ import annotations

from .fusion import EW, VECTOR, VIEWS, _broadcastable, _row_values, _same_shape, is_free, memory_operands
from .graph import Graph, Node
from .copies import _one, _reshape_is_a_view, copy_source
from .views import MAX_VIEW_RANK, fold_views, numbers_unbroadcast, permutes_before_splits, replace_each, rewritten, shape_key

MAX_SUNK = 16  # the elementwise operations a view of size-1 dims is moved under (each computed again under it)
MAX_INLINED = 8  # the elementwise operations of a broadcast operand computed again by its readers
SPLIT_MIN = 1 << 16  # a whole-tensor reduction of at least this many elements (or of a symbolic count) is split


def canonicalize(g: Graph, parts: int | None = None, fused: bool = False) -> None:
    """Rewrite every reduction into reductions over the last dimension with keepdims, plus views. With ``parts``
    (the vector cores), a reduction of a whole tensor (one row: every other dim is 1) of a symbolic or large
    count is split: ``parts`` programs each reduce a chunk of it into a partial (a ``reduce`` with ``split``),
    and a second reduction combines the partials, so it runs on every core instead of one. When ``fused``, views
    of size-1 dims are moved under elementwise operations (``_sink_unit_views``)."""
    g.prune()
    if fused:  # (a kernel per operation gains nothing from them)
        fold_views(g)
        if permutes_before_splits(g):
            fold_views(g)
        numbers_unbroadcast(g)
        _merge_equal(g)
        _epilogues_under_reshapes(g)
        _hoist_permutes(g)
        _sink_unit_views(g)
        _inline_broadcast(g)
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
            if x.rank > MAX_VIEW_RANK:  # (a copy kernel's space has rank <= 4)
                x = copy_source(g, x, add, n.loc)
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
    if fused:  # again, over the copies made above (a head split of a strided q is a copy, then its scale)
        _hoist_permutes(g)
    outputs = {o.id for o in g.outputs}
    for n in g.nodes:  # scalar arithmetic on constants and sizes (e.g. 1/sqrt(head size)) is free
        if n.op in EW and n.rank == 0 and n.inputs and n.id not in outputs and all(is_free(i) for i in n.inputs):
            n.attrs["free_scalar"] = True
    readers = _readers(g)
    for n in g.nodes:  # a number broadcast that only cats read, as parts: computed where the part lies (graph_ops)
        if n.op == "broadcast_to" and not n.attrs.get("copy") and n.id not in outputs and n.inputs[0].rank == 0 and \
                is_free(n.inputs[0]) and readers.get(id(n)) and all(r.op == "cat" for r in readers[id(n)]):
            n.attrs["free_scalar"] = True


def _readers(g: Graph) -> dict[int, list]:
    """id(node) -> the nodes that read it."""
    readers: dict[int, list] = {}
    for n in g.nodes:
        for i in n.inputs:
            readers.setdefault(id(i), []).append(n)
    return readers


_NEVER_MERGED = frozenset(("input", "const", "custom", "custom_out"))  # (a const is a runtime scalar of the kernels)


def _merge_equal(g: Graph) -> None:
    """Common subexpressions: an operation equal to an earlier one (the same op, dtype, shape, attributes and
    operands, once the operands' own equals are merged) is replaced by it (a model that applies one layer twice to
    one input, a decomposition that computes a mean twice), so it is computed and stored once. Inputs, user
    kernels and numbers (runtime scalars: equal at this call, perhaps not at the next) are never merged, nor two
    values both returned (the caller gets two arrays), nor index arithmetic and numbers (values computed from
    numbers and index tiles alone, or a number from numbers such as a 0-d input's cast: every kernel that reads
    one computes it, where a merged one would be stored once)."""
    first: dict = {}
    same: dict[int, Node] = {}  # id(node) -> the earlier equal node
    outputs = {id(o) for o in g.outputs}
    find = g.syms.find
    data: set[int] = set()  # the nodes computed from a tensor (an input or a user kernel's output)
    for n in g.nodes:
        if same:
            n.inputs = [same.get(id(i), i) for i in n.inputs]
        if not (n.op in ("input", "custom_out") or any(id(i) in data for i in n.inputs)):
            continue  # index arithmetic: every kernel that reads it computes it (merged, it would be stored once)
        data.add(id(n))
        if n.op in _NEVER_MERGED or not n.shape and all(not i.shape for i in n.inputs):
            continue  # (a number from numbers, such as a 0-d input's cast, joins the one kernel reading it)
        pre = (n.op, *map(id, n.inputs))  # (the full key only for an operation on operands seen together before)
        seen = first.get(pre)
        if seen is None:
            first[pre] = [(None, n)]
            continue
        key = _full_key(n, find)
        for k, (kept, earlier) in enumerate(seen):
            if kept is None:
                kept = _full_key(earlier, find)
                seen[k] = (kept, earlier)
            if kept == key:
                if not (id(n) in outputs and id(earlier) in outputs):
                    same[id(n)] = earlier
                break
        else:
            seen.append((key, n))
    if same:
        g.outputs = [same.get(id(o), o) for o in g.outputs]
        g.prune()


def _full_key(n: Node, find) -> tuple:
    return (n.dtype.code, tuple(_key(find(d)) for d in n.shape),
            tuple(sorted((k, _key(v)) for k, v in n.attrs.items())))


def _key(v):
    """An attribute (or a size) as a key that equals another only for the same value: a float by its bits (0.0 is
    not -0.0, a NaN equals itself), a tuple by its items, anything else not a plain constant by its identity."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return (type(v).__name__, v)
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, tuple):
        return tuple(_key(x) for x in v)
    return ("object", id(v))


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


def _unit_map(g, old, new) -> dict | None:
    """For a view from shape ``old`` to ``new`` that only adds or drops dims of size 1 (the other dims proven
    equal, in order): old dim -> new dim, for every dim of ``old`` that is not a literal 1. None otherwise."""
    find = g.syms.find
    a = [i for i, d in enumerate(old) if not _one(find(d))]
    b = [j for j, d in enumerate(new) if not _one(find(d))]
    if len(a) != len(b) or any(g.syms.equal(old[i], new[j]) is not True for i, j in zip(a, b)):
        return None
    return dict(zip(a, b))


def _unit_view(g, n: Node) -> dict | None:
    """``_unit_map`` of a reshape or permute ``n`` that keeps its operand's elements in order (a permute that
    moves only dims of size 1)."""
    x = n.inputs[0]
    if n.op == "permute":
        moved = [d for d in n.attrs["perm"] if not _one(g.syms.find(x.shape[d]))]
        if moved != sorted(moved):
            return None
    elif n.op != "reshape":
        return None
    return _unit_map(g, x.shape, n.shape)


def _sink_unit_views(g: Graph) -> None:
    """Move every view that only adds or drops dims of size 1 (an ``unsqueeze``, a ``view`` to (1, L, 1)) of an
    elementwise value under the operations: the view's readers get them computed again, at the view's shape, on
    views of their operands. A view of a computed value is read from memory, so its producer and its readers are
    different kernels; moved down, the operations join their readers' kernel (Inductor inlines pointwise
    producers into their consumers the same way). Index arithmetic on tiny tensors, as a transformers model
    builds its attention mask, becomes part of the kernel that gathers with it instead of a kernel per step.
    And index arithmetic broadcast to a shape (``repeat_interleave``'s index) is computed at that shape
    (``widened``) by the kernels that read it.

    At most ``MAX_SUNK`` operations per view; a copy (``broadcast_to`` with ``copy``) is not moved through; an
    operand that broadcasts (smaller than the readers' space and not one value per row of it) or is computed
    otherwise (a reduction, a gather, a matmul, a view that moves data) is read through a view of size-1 dims of
    its own, as the moved view read the chain's result. And only where every reader can take the operations into
    its kernel (``hosts``): a vector operation over the view's shape or over rows of which the view holds one
    value each, or a gather indexing with it; else the moved operations would be a kernel of their own, storing
    the value again. (A gather is not moved: inside a kernel of another tiling, a row normalisation's, its reads
    run on fewer cores; GPT-2's embedding lookups moved into the layer norm's kernel cost 14% more device time
    for two launches fewer.)"""
    find = g.syms.find
    memo: dict = {}  # (id(node), shape key) -> the node computing it at that shape
    out: list[Node] = []
    replace: dict[int, Node] = {}
    readers = _readers(g)
    outputs = {id(o) for o in g.outputs}

    def hosts(n: Node) -> bool:
        """Whether every reader of view ``n`` can compute the operations moved under it in its own kernel."""
        if id(n) in outputs:
            return False
        for r in readers.get(id(n), ()):
            if r.op == "gather" and r.inputs[0] is not n:  # (its index: the gather's iteration space)
                continue
            if r.op not in VECTOR or r.op in VIEWS or n in memory_operands(r):
                return False
            space = r.inputs[0].shape if r.op == "reduce" else r.shape
            if _same_shape(g, n.shape, space) is not True and not _row_values(g, n.shape, space) and \
                    not (r.op in EW and _broadcastable(g, n.shape, space) and only_viewed(base(n))):
                return False
        return bool(readers.get(id(n)))

    def only_viewed(x: Node) -> bool:
        """Whether ``x`` is read through views of size-1 dims alone (not returned): moved under them, it is no
        kernel of its own, and a reader that broadcasts the view computes it (``_inline_broadcast``)."""
        return id(x) not in outputs and all(r.op in ("reshape", "permute") and _unit_view(g, r) is not None
                                            for r in readers.get(id(x), ()))

    def base(n: Node) -> Node:
        x = n.inputs[0]
        while x.op in ("reshape", "permute") and _unit_view(g, x) is not None:
            x = x.inputs[0]
        return x

    def under(x: Node, shape: tuple, made: dict, budget: list, top: tuple) -> Node | None:
        """``x`` at ``shape`` (a view of it adding or dropping dims of size 1) for a reader over ``top``: its
        operations computed again when the reader's kernel can hold them (over ``top`` or its rows), else ``x``
        read through a view; None when that takes more than the budget."""
        if len(x.shape) == len(shape) and all(g.syms.equal(a, b) is True for a, b in zip(x.shape, shape)):
            return x
        k = (id(x), shape_key(find, shape))
        got = memo.get(k) or made.get(k)
        if got is not None:
            return got
        m = _unit_map(g, x.shape, shape)
        if m is None:
            return None
        hostable = _same_shape(g, shape, top) is True or _row_values(g, shape, top)  # (in the reader's kernel)
        if x.op == "input":
            y = Node("reshape", [x], tuple(shape), x.dtype, {}, loc=x.loc)
        elif x.op == "iota":
            ax = x.attrs["axis"]
            if ax not in m:
                return None  # (an index along a dim of size 1: zeros, kept as they are)
            y = Node("iota", [], tuple(shape), x.dtype, dict(x.attrs, axis=m[ax]), loc=x.loc)
        elif x.op in ("reshape", "permute") and _unit_view(g, x) is not None:
            src = x.inputs[0]
            if src.op == "input":
                y = Node("reshape", [src], tuple(shape), x.dtype, {}, loc=x.loc)
            else:
                return under(src, shape, made, budget, top)
        elif x.op in EW and not x.attrs.get("copy") and hostable:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            r, rt = len(x.shape), len(shape)
            ins = []
            for i in x.inputs:
                lead = r - len(i.shape)  # (operands broadcast from the right)
                want = [1] * rt
                for a, d in enumerate(i.shape):
                    if _one(find(d)):
                        continue
                    if lead + a not in m:
                        return None
                    want[m[lead + a]] = d
                y_in = i if i.rank == 0 else under(i, tuple(want), made, budget, top)  # (a number broadcasts)
                if y_in is None:
                    return None
                ins.append(y_in)
            y = Node(x.op, ins, tuple(shape), x.dtype, dict(x.attrs), loc=x.loc)
        elif x.op != "custom" and len(shape) <= MAX_VIEW_RANK:
            y = Node("reshape", [x], tuple(shape), x.dtype, {}, loc=x.loc)  # a value computed otherwise (a
            # reduction, a gather, a matmul, a view that moves data): read through a view, as the view read it
        else:
            return None
        y.id = -1  # (not an id of the graph's: ``replace`` keys the graph's nodes by theirs)
        made[k] = y
        return y

    def widened(x: Node, shape: tuple, pos: dict, made: dict, budget: list) -> Node | None:
        """Index arithmetic ``x`` (operations on index tiles and numbers) broadcast to ``shape``, computed at
        ``shape``: ``pos`` maps each dim of ``x`` that is not 1 to its dim of ``shape``. None for anything else."""
        if x.rank == 0:
            return x  # (a number broadcasts)
        if x.op == "iota":
            if x.attrs["axis"] not in pos:
                return None
            y = Node("iota", [], tuple(shape), x.dtype, dict(x.attrs, axis=pos[x.attrs["axis"]]), loc=x.loc)
        elif x.op in ("reshape", "permute") and _unit_view(g, x) is not None:
            m = _unit_view(g, x)
            return widened(x.inputs[0], shape, {k: pos[j] for k, j in m.items()}, made, budget)
        elif x.op in EW and not x.attrs.get("copy") and any(i.rank for i in x.inputs):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            ins = []
            for i in x.inputs:
                lead = x.rank - i.rank
                at = {a: pos.get(lead + a) for a, d in enumerate(i.shape) if not _one(find(d))}
                y_in = None if None in at.values() else widened(i, shape, at, made, budget)
                if y_in is None:
                    return None
                ins.append(y_in)
            y = Node(x.op, ins, tuple(shape), x.dtype, dict(x.attrs), loc=x.loc)
        else:
            return None
        y.id = -1
        made[(id(y), None)] = y
        return y

    for n in g.nodes:
        n.inputs = [replace.get(i.id, i) for i in n.inputs]
        if n.op == "broadcast_to" and not n.attrs.get("copy") and n.inputs[0].op not in ("iota", "input"):
            # index arithmetic broadcast to a shape (repeat_interleave's index) is computed at that shape, in the
            # kernels that read it, instead of being stored at its own and read back through the broadcast
            x = n.inputs[0]
            made = {}
            lead = n.rank - x.rank
            y = widened(x, n.shape, {a: lead + a for a, d in enumerate(x.shape) if not _one(find(d))}, made,
                        [MAX_SUNK])
            if y is not None and any(m.op == "iota" for m in made.values()):  # (else a number: stays broadcast)
                out.extend(made.values())
                replace[n.id] = y
                continue
        if n.op in ("reshape", "permute") and _unit_view(g, n) is not None and \
                base(n).op in EW and hosts(n):
            made: dict = {}  # (what this view's move makes, in order: operands first)
            y = under(base(n), n.shape, made, [MAX_SUNK], n.shape)
            if y is not None and y.op not in VIEWS:
                memo.update(made)
                out.extend(made.values())
                replace[n.id] = y
                continue
        out.append(n)
    if replace:
        rewritten(g, out, [replace.get(o.id, o) for o in g.outputs])


def _inline_broadcast(g: Graph) -> None:
    """An elementwise value that its readers broadcast (a per-channel ``rsqrt(running_var + eps)`` read over a batch, a
    mask built over (L, L) read over heads) is a kernel of its own, stored and read back: a reader's kernel runs
    over a larger space. When every reader is an elementwise operation (or a broadcast that is not a copy) over a
    space it broadcasts to (not per-row values of it: those join already), and it is not returned, its operations
    (at most ``MAX_INLINED``, down to values computed otherwise or inputs, read broadcast as before) are computed
    again by the readers at their shape, as Inductor inlines pointwise producers into their consumers: the value's
    kernel and its store go, at the cost of computing the chain once per element of the readers' space instead of
    once per element of its own."""
    def chain(x: Node) -> bool:
        return x.op in EW and x.op != "broadcast_to" and not x.attrs.get("copy") and x.rank > 0

    if not any((chain(n) or n.op == "broadcast_to") and any(i.shape != n.shape and chain(i) for i in n.inputs)
               for n in g.nodes):
        return  # (no elementwise value read over another shape by an elementwise operation)
    find = g.syms.find
    readers = _readers(g)
    outputs = {id(o) for o in g.outputs}
    made: dict = {}  # (id(value), shape key) -> its clone at that shape
    out: list[Node] = []

    def reader(r: Node) -> bool:  # (an elementwise operation, or a broadcast that is not a copy)
        return chain(r) or r.op == "broadcast_to" and not r.attrs.get("copy")

    def reads_wider(r: Node, x: Node) -> bool:
        return reader(r) and _broadcastable(g, x.shape, r.shape) and _same_shape(g, x.shape, r.shape) is not True \
            and not _row_values(g, x.shape, r.shape)

    def at(x: Node, shape: tuple, budget: list, new: dict) -> Node | None:
        """``x`` computed at ``shape`` (which it broadcasts to, from the right); ``new``: this move's clones."""
        k = (id(x), shape_key(find, shape))
        got = made.get(k) or new.get(k)
        if got is not None:
            return got
        if x.op == "iota":
            ax = len(shape) - x.rank + x.attrs["axis"]
            if g.syms.equal(x.shape[x.attrs["axis"]], shape[ax]) is not True:
                return None  # (an index along a dim the reader broadcasts: not the reader's index there)
            y = Node("iota", [], tuple(shape), x.dtype, dict(x.attrs, axis=ax), loc=x.loc)
        elif chain(x):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            ins = []
            for i in x.inputs:
                y_in = at(i, shape, budget, new) if chain(i) or i.op == "iota" else i  # (else read broadcast)
                if y_in is None:
                    return None
                ins.append(y_in)
            y = Node(x.op, ins, tuple(shape), x.dtype, dict(x.attrs), loc=x.loc)
        else:
            return None
        y.id = -1
        new[k] = y
        return y

    for n in g.nodes:
        if reader(n):
            for j, x in enumerate(n.inputs):
                if x.shape == n.shape:
                    continue
                rs = readers.get(id(x), ())
                if not chain(x) or id(x) in outputs or not all(reads_wider(r, x) for r in rs):  # (n among rs)
                    continue
                new: dict = {}  # (in the order made: operands first)
                y = at(x, n.shape, [MAX_INLINED], new)
                if y is not None:
                    made.update(new)
                    out.extend(new.values())
                    n.inputs[j] = y
        out.append(n)
    if made:
        rewritten(g, out, g.outputs)


def _epilogues_under_reshapes(g: Graph) -> None:
    """An elementwise operation on a reshape of a matmul's result whose other operands are inputs or numbers
    spanning only trailing dims the reshape keeps (a bias after ``linear``'s flatten and unflatten: ``(B*S, N) ->
    (B, S, N)``, then ``+ bias``) is computed on the matmul's result and reshaped after: it then joins the matmul's
    epilogue instead of being a kernel of its own. Only when no vector operation reads it directly (one would take
    it as its first operation: attention's mask added before the softmax) and the matmul and the reshape have no
    other reader (the value is stored once)."""
    readers = _readers(g)
    outputs = {id(o) for o in g.outputs}
    find = g.syms.find

    def only(x: Node, r: Node) -> bool:
        return id(x) not in outputs and [id(y) for y in readers.get(id(x), ())] == [id(r)]

    def alone(n: Node) -> bool:  # (its readers take it through views, or are matmuls: none would fuse it)
        return all(r.op in VIEWS or r.op == "matmul" for r in readers.get(id(n), ()))

    def given(i: Node) -> bool:
        while i.op in VIEWS:
            i = i.inputs[0]
        return i.op == "input" or is_free(i)

    def moved(n: Node) -> list | None:
        shaped = [i for i in n.inputs if i.op == "reshape" and i.inputs[0].op == "matmul"]
        if n.op not in EW or n.op == "broadcast_to" or n.attrs.get("copy") or len(shaped) != 1 or \
                n.inputs.count(shaped[0]) != 1:
            return None
        v = shaped[0]
        x = v.inputs[0]
        k = max((i.rank for i in n.inputs if i is not v), default=0)
        keeps = 0 < k <= min(x.rank, v.rank) and all(
            g.syms.equal(a, b) is True for a, b in zip(x.shape[-k:], v.shape[-k:]))
        if not (keeps and shape_key(find, n.shape) == shape_key(find, v.shape) and only(v, n) and only(x, v) and
                alone(n) and all(given(i) for i in n.inputs if i is not v)):
            return None
        m = Node(n.op, [x if i is v else i for i in n.inputs], x.shape, n.dtype, dict(n.attrs), loc=n.loc)
        return [m, Node("reshape", [m], n.shape, n.dtype, dict(v.attrs), loc=v.loc)]

    replace_each(g, moved)


def _hoist_permutes(g: Graph) -> None:
    """An elementwise operation with numbers on permutes and reshapes of a computed value, read only by matmuls
    (through views or not: attention's scale on ``k^T``, or on ``q`` split into heads), is computed before the
    views instead: a matmul takes no prologue, so it would be a kernel of its own, reading the value and storing
    its result; computed on the value itself, it joins the kernel that computes the value, and the matmul reads it
    through the same views as it read the operation's result (they keep every element: no slice)."""
    readers = _readers(g)
    outputs = {id(o) for o in g.outputs}

    def matmul_only(x: Node) -> bool:
        rs = readers.get(id(x), ())
        return bool(rs) and id(x) not in outputs and all(
            r.op == "matmul" or r.op in ("reshape", "permute") and matmul_only(r) for r in rs)

    def moved(n: Node) -> list | None:
        views = [i for i in n.inputs if i.rank]
        chain = []  # the views from the operand down to the value
        x = views[0] if len(views) == 1 else None
        while x is not None and x.op in ("permute", "reshape"):
            chain.append(x)
            x = x.inputs[0]
        if not chain or n.op not in EW or n.op == "broadcast_to" or n.attrs.get("copy") or \
                x.op in ("input", "custom_out") or x.op in VIEWS or not matmul_only(n):
            return None
        new = [Node(n.op, [x if i is views[0] else i for i in n.inputs], x.shape, n.dtype, dict(n.attrs), loc=n.loc)]
        for view in reversed(chain):
            new.append(Node(view.op, [new[-1]], view.shape, n.dtype, dict(view.attrs), loc=n.loc))
        return new

    replace_each(g, moved)
