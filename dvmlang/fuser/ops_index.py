"""``dvmlang.ops`` for views and indexing: slicing (``x[..., a:b]``, ``narrow``, ``select``, ``chunk``, ``split``),
``cat``, ``expand``/``unsqueeze``/``squeeze``/``flatten``, and reads at indices from an int tensor (``gather``,
``take_along_axis``, ``index_select``, ``embedding``).

Slices are views (``slice`` nodes, never computed: consumers read the value under them through strides and an
offset). ``cat`` and ``gather`` are vector operations that read some operands from memory at positions of their
own (fusion.MEMORY_READS): a cat's parts at the output index shifted by each part's offset, a gather's table at
the index tensor's values (checked on the device: an index outside the table stops the launch with DeviceError).
Bounds and sizes may be symbols and shape arithmetic on them (``x.shape[-1] // 2``); bounds that a call's sizes
could put outside the tensor are checked when the call binds its sizes (GraphError), never clamped silently.
"""

from __future__ import annotations

import builtins

from .. import dtypes as dt
from . import dims
from .graph import GraphError, Sym
from .ops_core import _dim_arg, _graph, _node, _shape, _value, broadcast_to, cast, reshape, where
from .operators import TensorOperators

__all__ = ["slice", "narrow", "select", "chunk", "split", "cat", "concatenate", "stack", "expand", "unsqueeze",
           "squeeze", "flatten", "getitem", "gather", "take_along_axis", "index_select", "embedding"]


def _axis(x, axis, where_):
    r = len(_shape(x))
    if not isinstance(axis, int) or isinstance(axis, bool) or not -r <= axis < r:
        raise GraphError(f"{where_}: axis {axis!r} is out of range for a tensor of rank {r}")
    return axis % r


def _le(g, a, b, message):
    """Record that dim ``a`` <= dim ``b`` (proven now, or checked when a call binds its sizes)."""
    pa, pb = dims.poly(g.syms, a), dims.poly(g.syms, b)
    diff = dims._add(pb, pa, -1)
    if not diff or (list(diff) == [()] and diff[()] >= 0):
        return
    if list(diff) == [()]:
        raise GraphError(message)
    if not g.captures:
        raise GraphError(message)
    g.syms.checks.append(("le", pa, pb, message))


def _norm_index(g, i, n, what):
    """A slice bound or index: ints count from the end when negative (``-1`` is ``n - 1``)."""
    i = _dim_arg(g, i, what)
    if isinstance(i, int) and i < 0:
        return dims.arith(g.syms, "+", n, i)
    return i


def slice(x, axis, start=None, stop=None, step=1):  # noqa: A001
    """``x[..., start:stop:step, ...]`` along ``axis`` (a view). ``start``/``stop`` are ints (negative count from
    the end) or dims (``x.shape[-1] // 2``); a positive ``step``. Bounds outside the dim raise GraphError (at
    capture, or when a call's sizes put them outside) instead of being clamped."""
    g = _graph(x)
    x = _value(g, x)
    a = _axis(x, axis, "slice")
    n = g.syms.find(_shape(x)[a])
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise GraphError(f"slice: step must be a positive int, got {step!r} (negative steps are not supported)")
    start = 0 if start is None else _norm_index(g, start, n, "slice start")
    stop = n if stop is None else _norm_index(g, stop, n, "slice stop")
    where_ = f"slice {start}:{stop} of dim {a} (size {g.syms.text(n)})"
    _le(g, 0, start, f"{where_}: the start is negative")
    _le(g, start, stop, f"{where_}: the start is past the stop (an empty or reversed slice)")
    _le(g, stop, n, f"{where_}: the stop is past the end of the dim")
    size = dims.arith(g.syms, "-", stop, start)
    if step != 1:
        size = dims.arith(g.syms, "//", dims.arith(g.syms, "+", size, step - 1), step)
    if step == 1 and g.syms.equal(start, 0) is True and g.syms.equal(size, n) is True:
        return x
    shape = list(_shape(x))
    shape[a] = size
    return _node(g, "slice", [x], shape, x.dtype, axis=a, start=start, step=step)


def narrow(x, axis, start, length):
    """``x`` along ``axis`` from ``start`` for ``length`` elements (as torch.narrow; a view)."""
    g = _graph(x)
    xv = _value(g, x)
    n = _shape(xv)[_axis(xv, axis, "narrow")]
    start = _norm_index(g, start, n, "narrow start")
    return slice(xv, axis, start, dims.arith(g.syms, "+", start, _dim_arg(g, length, "narrow length")))


def select(x, axis, index):
    """``x`` at ``index`` along ``axis``, that dim removed (as torch.select; a view)."""
    g = _graph(x)
    xv = _value(g, x)
    a = _axis(xv, axis, "select")
    n = _shape(xv)[a]
    i = _norm_index(g, index, n, "select index")
    _le(g, dims.arith(g.syms, "+", i, 1), n, f"select: index {index} is out of range for dim {a} of size "
                                             f"{g.syms.text(n)}")
    v = slice(xv, a, i, dims.arith(g.syms, "+", i, 1))
    return reshape(v, tuple(d for k, d in enumerate(_shape(v)) if k != a))


def split(x, split_size_or_sections, axis=0):
    """Pieces of ``x`` along ``axis`` (views): an int (or dim) is the size of each piece (the last may be smaller,
    static sizes only), a list gives every piece's size (as torch.split)."""
    g = _graph(x)
    xv = _value(g, x)
    a = _axis(xv, axis, "split")
    n = g.syms.find(_shape(xv)[a])
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [_dim_arg(g, s, "split") for s in split_size_or_sections]
        total = 0
        for s in sizes:
            total = dims.arith(g.syms, "+", total, s)
        if g.syms.equal(total, n) is not True:
            if g.captures and (not isinstance(total, int) or not isinstance(n, int)):
                g.syms.checks.append(("eq", dims.poly(g.syms, total), dims.poly(g.syms, n),
                                      f"split: the sizes {sizes} must add up to dim {a}"))
            else:
                raise GraphError(f"split: the sizes {sizes} add up to {g.syms.text(total)}, not to dim {a} of size "
                                 f"{g.syms.text(n)}")
    else:
        size = _dim_arg(g, split_size_or_sections, "split")
        if isinstance(size, int) and isinstance(n, int):
            sizes = [builtins.min(size, n - k) for k in range(0, n, size)] if size > 0 else []
            if not sizes:
                raise GraphError(f"split: size {size} must be positive")
        else:
            count = dims.arith(g.syms, "//", n, size)
            if not isinstance(count, int):
                raise GraphError(f"split of dim {a} (size {g.syms.text(n)}) into pieces of {g.syms.text(size)}: the "
                                 "number of pieces must be known at capture; pass the sizes as a list, or use chunk")
            sizes = [size] * count
            g.syms.checks.append(("eq", dims.poly(g.syms, dims.arith(g.syms, "*", size, count)),
                                  dims.poly(g.syms, n), f"split of dim {a} into {count} pieces of {size}"))
    out, start = [], 0
    for s in sizes:
        stop = dims.arith(g.syms, "+", start, s)
        out.append(slice(xv, a, start, stop))
        start = stop
    return tuple(out)


def chunk(x, chunks, axis=0):
    """``chunks`` pieces of ``x`` along ``axis`` (views). A symbolic dim must divide evenly (checked per call);
    a static dim splits as torch.chunk does (pieces of ceil(n / chunks), the last smaller)."""
    g = _graph(x)
    xv = _value(g, x)
    a = _axis(xv, axis, "chunk")
    n = g.syms.find(_shape(xv)[a])
    if not isinstance(chunks, int) or chunks < 1:
        raise GraphError(f"chunk: chunks must be a positive int, got {chunks!r}")
    if isinstance(n, int):
        return split(xv, -(-n // chunks), a)
    size = dims.arith(g.syms, "//", n, chunks)
    return split(xv, [size] * chunks, a)


def cat(tensors, axis=0):
    """Join ``tensors`` along ``axis`` (every other dim equal, deduced). The parts are read from memory (their
    producers store them); dtypes promote as in torch.cat."""
    tensors = list(tensors)
    if not tensors:
        raise GraphError("cat needs at least one tensor")
    g = _graph(*tensors)
    vals = [_value(g, t) for t in tensors]
    r = len(_shape(vals[0]))
    if r == 0:
        raise GraphError("cat: zero-dimensional tensors cannot be concatenated")
    if any(len(_shape(v)) != r for v in vals):
        raise GraphError(f"cat: tensors of ranks {[len(_shape(v)) for v in vals]}; all must have rank {r}")
    a = _axis(vals[0], axis, "cat")
    d = vals[0].dtype
    for v in vals[1:]:
        d = dt.promote_tensors(d, v.dtype)
    vals = [cast(v, d) for v in vals]
    shape = list(_shape(vals[0]))
    for k, v in enumerate(vals[1:], 1):
        for j in range(r):
            if j != a:
                shape[j] = g.syms.unify(shape[j], _shape(v)[j], f"dim {j} of the tensors of cat")
    offsets, total = [], 0
    for v in vals:
        offsets.append(total)
        total = dims.arith(g.syms, "+", total, _shape(v)[a])
    if len(vals) == 1:
        return vals[0]
    shape[a] = total
    if r > 4:  # (the fuser's spaces have rank <= 4)
        merged = _merged_cat(g, vals, shape, a)
        if merged is not None:
            return merged
    for j in range(r):
        if j != a:
            vals = [broadcast_to(v, tuple(_shape(v)[:j]) + (shape[j],) + tuple(_shape(v)[j + 1:]))
                    if g.syms.find(_shape(v)[j]) == 1 and g.syms.find(shape[j]) != 1 else v for v in vals]
    chains = [_elementwise_chain(g, v) for v in vals] if g.captures else [None] * len(vals)
    if any(c is not None for c in chains):
        # cat([f(a), b]) = where(in the first part, f(c), c) with c = cat([a, b]): the parts' elementwise work
        # (rotary's -x[..., h:]) runs in the cat's kernel instead of being stored first
        leaves = [c[0] if c is not None else v for c, v in zip(chains, vals)]
        c = _node(g, "cat", leaves, shape, d, axis=a, offsets=tuple(offsets))
        out = c
        pos = None
        for j, ch in enumerate(chains):
            if ch is None:
                continue
            if pos is None:
                pos = _node(g, "iota", [], shape, dt.int32, axis=a)
            lo, hi = offsets[j], offsets[j + 1] if j + 1 < len(offsets) else None
            inside = _range_mask(g, pos, lo, hi)
            out = where(inside, _replay(g, ch[1], c), out)
        return out
    return _node(g, "cat", vals, shape, d, axis=a, offsets=tuple(offsets))


def _merged_cat(g, vals, shape, a):
    """A cat of rank > 4 (``shape``: the result's) as one of rank <= 4 viewed back: the dims on each side of the axis
    merged in runs along which every part either has the result's sizes or 1s (broadcast after merging, as
    below); None when more runs than that are needed."""
    def pattern(j):
        return tuple(g.syms.find(_shape(v)[j]) == 1 and g.syms.find(shape[j]) != 1 for v in vals)
    runs: list = []
    for j in range(len(shape)):
        if j == a or not runs or runs[-1][0] == a or j == a + 1 or pattern(j) != pattern(runs[-1][0]):
            runs.append([j])
        else:
            runs[-1].append(j)
    if len(runs) > 4:
        return None

    def product(v, run):
        n = 1
        for j in run:
            n = dims.arith(g.syms, "*", n, _shape(v)[j])
        return n
    out = cat([reshape(v, tuple(product(v, run) for run in runs)) for v in vals], [run[0] for run in runs].index(a))
    return reshape(out, tuple(shape))


def _elementwise_chain(g, v):
    """(leaf, ops) when ``v`` is a chain of elementwise ops of one full-size operand (others: rank-0 constants or
    sizes) over a leaf of the same shape and dtype; None when it is not (or is the leaf itself)."""
    from .fusion import EW, is_free
    n, chain = v.node, []
    while n.op in EW and n.op != "broadcast_to" and n.dtype is v.node.dtype:
        main = [i for i in n.inputs if not (is_free(i) and i.rank == 0)]
        if len(main) != 1 or len(main[0].shape) != len(n.shape) or \
                any(g.syms.equal(x, y) is not True for x, y in zip(main[0].shape, n.shape)):
            break
        chain.append(n)
        n = main[0]
    if not chain or n.dtype is not v.node.dtype:
        return None
    from .graph import GraphValue
    return GraphValue(n, g), list(reversed(chain))


def _replay(g, chain, x):
    """The elementwise ``chain`` (nodes of another operand) applied to ``x`` instead."""
    from .graph import GraphValue
    cur = x.node
    for n in chain:
        ins = [i if i.rank == 0 else cur for i in n.inputs]  # the rank-0 constants and sizes stay
        cur = g.add(type(n)(n.op, ins, tuple(x.node.shape), n.dtype, dict(n.attrs)))
    return GraphValue(cur, g)


def _range_mask(g, pos, lo, hi):
    from .ops_core import _binary, ge, lt
    m = ge(pos, lo) if not (isinstance(lo, int) and lo == 0) else None
    if hi is not None:
        h = lt(pos, hi)
        m = h if m is None else _binary("and", m, h)
    return m if m is not None else ge(pos, 0)


concatenate = cat


def stack(tensors, axis=0):
    """Join ``tensors`` (equal shapes) along a new dim ``axis``."""
    tensors = list(tensors)
    g = _graph(*tensors)
    vals = [_value(g, t) for t in tensors]
    r = len(_shape(vals[0])) + 1
    if not -r <= axis < r:
        raise GraphError(f"stack: axis {axis} is out of range for rank {r}")
    return cat([unsqueeze(v, axis % r) for v in vals], axis % r)


def unsqueeze(x, axis):
    """``x`` with a dim of size 1 inserted at ``axis`` (a view)."""
    g = _graph(x)
    x = _value(g, x)
    s = list(_shape(x))
    r = len(s) + 1
    if not -r <= axis < r:
        raise GraphError(f"unsqueeze: axis {axis} is out of range for rank {r}")
    s.insert(axis % r, 1)
    return reshape(x, tuple(s))


def squeeze(x, axis=None):
    """``x`` without its dims of size 1 (or only ``axis``, which must be 1) (a view)."""
    g = _graph(x)
    x = _value(g, x)
    s = [g.syms.find(d) for d in _shape(x)]
    if axis is None:
        keep = [d for d in s if not (isinstance(d, int) and d == 1)]
    else:
        axes = {_axis(x, a, "squeeze") for a in ((axis,) if isinstance(axis, int) else axis)}
        keep = [d for k, d in enumerate(s) if k not in axes or not (isinstance(d, int) and d == 1)]
    return reshape(x, tuple(keep))


def flatten(x, start_axis=0, end_axis=-1):
    """Dims ``start_axis..end_axis`` merged into one (their product, a dim of its own when symbolic)."""
    g = _graph(x)
    x = _value(g, x)
    s = list(_shape(x))
    if not s:
        return reshape(x, (1,))
    a, b = _axis(x, start_axis, "flatten"), _axis(x, end_axis, "flatten")
    merged = 1
    for d in s[a:b + 1]:
        merged = dims.arith(g.syms, "*", merged, d)
    return reshape(x, tuple(s[:a]) + (merged,) + tuple(s[b + 1:]))


def expand(x, *sizes):
    """``x`` broadcast to ``sizes`` (as torch's expand: -1 keeps a dim)."""
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = tuple(sizes[0])
    g = _graph(x)
    x = _value(g, x)
    s = _shape(x)
    off = len(sizes) - len(s)
    if off < 0:
        raise GraphError(f"expand: {len(sizes)} sizes for a tensor of rank {len(s)}")
    out = tuple(s[k - off] if isinstance(d, int) and d == -1 and k >= off else _dim_arg(g, d, "expand")
                for k, d in enumerate(sizes))
    return broadcast_to(x, out)


def getitem(x, key):
    """``x[key]`` for ints, slices (ints or dims as bounds, positive steps), ``None``, ``...`` and one int tensor
    (an ``index_select`` along its dim, its dims in place of that one)."""
    g = _graph(x)
    x = _value(g, x)
    if not isinstance(key, tuple):
        key = (key,)
    ellipses = [p for p, k in enumerate(key) if k is Ellipsis]
    if len(ellipses) > 1:
        raise GraphError("x[...]: an index can only have a single ellipsis")
    r = len(_shape(x))
    used = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > r:
        raise GraphError(f"x[...]: too many indices ({used}) for a tensor of rank {r}")
    fill = (builtins.slice(None),) * (r - used)
    key = key[:ellipses[0]] + fill + key[ellipses[0] + 1:] if ellipses else key + fill
    v, axis, tensor_at = x, 0, None
    for k in key:
        if k is None:
            v = unsqueeze(v, axis)
            axis += 1
        elif isinstance(k, builtins.slice):
            if not (k.start is None and k.stop is None and k.step in (None, 1)):
                v = slice(v, axis, k.start, k.stop, 1 if k.step is None else k.step)
            axis += 1
        elif isinstance(k, TensorOperators):
            if tensor_at is not None:
                raise GraphError("x[...]: only one tensor index is supported (use ops.gather for more)")
            tensor_at = (axis, k)
            axis += 1
        elif isinstance(k, (int, Sym)) and not isinstance(k, bool):
            v = select(v, axis, k)
        else:
            raise GraphError(f"x[...]: unsupported index {k!r}; index with ints, dims, slices, None, ... or one int "
                             "tensor")
    if tensor_at is not None:
        a, idx = tensor_at
        v = index_select(v, a, idx)
    return v


def _index(g, index, where_):
    i = _value(g, index)
    if not (i.dtype.is_int or i.dtype.is_bool) or i.dtype.is_bool:
        raise GraphError(f"{where_}: the index must be an integer tensor, got {i.dtype.name}")
    return cast(i, dt.int32) if i.dtype is not dt.int32 else i


def gather(x, axis, index):
    """``out[p] = x[p with p[axis] = index[p]]`` (torch.gather / numpy take_along_axis): ``index`` has ``x``'s
    rank and broadcasts against its other dims; the result has the index's dims. An index outside
    ``[0, x.shape[axis])`` stops the launch with DeviceError."""
    g = _graph(x, index)
    x = _value(g, x)
    i = _index(g, index, "gather")
    a = _axis(x, axis, "gather")
    sx, si = list(_shape(x)), list(_shape(i))
    if len(sx) != len(si):
        raise GraphError(f"gather: the index has rank {len(si)}, the tensor rank {len(sx)}; they must be equal")
    out = []
    for k in range(len(sx)):
        if k == a:
            out.append(si[k])
            continue
        dx, di = g.syms.find(sx[k]), g.syms.find(si[k])
        if isinstance(dx, int) and dx == 1:
            out.append(di)
        elif isinstance(di, int) and di == 1:
            out.append(dx)
        else:
            out.append(g.syms.unify(dx, di, f"dim {k} of gather's tensor and index"))
    if len(out) > 4:
        raise GraphError(f"gather supports tensors of rank <= 4, got rank {len(out)}")
    i = broadcast_to(i, tuple(out)) if tuple(g.syms.find(d) for d in si) != tuple(out) else i
    return _node(g, "gather", [x, i], out, x.dtype, axis=a)


def take_along_axis(x, index, axis):
    """numpy's ``take_along_axis(x, index, axis)``: ``gather(x, axis, index)``."""
    return gather(x, axis, index)


def index_select(x, axis, index):
    """``x`` at the positions ``index`` (an int tensor of any rank) along ``axis``, whose dims replace that dim
    (torch.index_select for a 1-d index; ``x[idx]`` for axis 0)."""
    g = _graph(x, index)
    x = _value(g, x)
    i = _index(g, index, "index_select")
    a = _axis(x, axis, "index_select")
    sx, si = list(_shape(x)), list(_shape(i))
    if len(si) == 0:
        return reshape(index_select(x, a, reshape(i, (1,))), tuple(sx[:a] + sx[a + 1:]))
    # a flat index (n,) placed at ``a``; the table viewed with that dim; the index's own dims restored after
    flat = i if len(si) == 1 else reshape(i, (dims.dim_of(g.syms, dims.product(g.syms, si)),))
    n = _shape(flat)[0]
    idx = reshape(flat, tuple(1 for _ in sx[:a]) + (n,) + tuple(1 for _ in sx[a + 1:]))
    out = gather(x, a, idx)
    if len(si) == 1:
        return out
    return reshape(out, tuple(sx[:a]) + tuple(si) + tuple(sx[a + 1:]))


def embedding(weight, ids):
    """Rows of ``weight`` (V, D) at ``ids`` (an int tensor of any shape): shape ``ids.shape + (D,)``."""
    g = _graph(weight, ids)
    w = _value(g, weight)
    if len(_shape(w)) != 2:
        raise GraphError(f"embedding: the weight must be (num_embeddings, dim), got rank {len(_shape(w))}")
    return index_select(w, 0, ids)

