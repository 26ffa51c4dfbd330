"""``dl.reduce`` and ``dl.associative_scan`` with a ``@dvmlang.kernel`` combine function: built from slices,
reshapes and concatenations around inlined calls of the combine function. The code generator is passed in
explicitly (it inlines the calls), as Triton passes its generator to such builtins.
"""

from __future__ import annotations

from ..errors import KernelTypeError
from .source import KernelFunction
from .values import unwrap


def _inputs(sem, input, what):
    single = not isinstance(unwrap(input), (tuple, list))
    xs = [sem.to_tensor(v) for v in ((input,) if single else unwrap(input))]
    if not xs or any(x.is_scalar for x in xs):
        raise KernelTypeError(f"{what} needs tiles")
    if any(x.shape != xs[0].shape for x in xs):
        raise KernelTypeError(f"{what}: all inputs must have one shape, got {[x.shape for x in xs]}")
    return single, xs


def _combine(cg, fn, a, b, single, what):
    sem = cg.sem
    if not isinstance(fn, KernelFunction):
        raise KernelTypeError(f"{what}: combine_fn must be a @dvmlang.kernel function, got {fn!r}",
                              hint="decorate the combine function with @dvmlang.kernel")
    out = cg.inline(fn, list(a) + list(b), {}, cg.b.loc)
    outs = [out] if single else list(unwrap(out)) if isinstance(unwrap(out), (tuple, list)) else [out]
    if len(outs) != len(a):
        raise KernelTypeError(f"{what}: combine_fn returned {len(outs)} values, expected {len(a)}")
    res = []
    for o, x in zip(outs, a):
        o = sem.to_tensor(o)
        if o.shape != x.shape:
            o = sem.broadcast_to(o, x.shape)
        res.append(sem.cast(o, x.dtype))
    return res


def _cut(sem, x, axis, start, size):
    starts = [0] * len(x.shape)
    sizes = list(x.shape)
    starts[axis] = start
    sizes[axis] = size
    if tuple(sizes) == x.shape:
        return x
    return sem.slice(x, starts, sizes)


def reduce(cg, input, axis, fn, keep_dims):
    """``dl.reduce``: a tree of inlined ``fn`` calls along ``axis``, pairing neighbours (an odd one out passes
    through to the next level)."""
    sem = cg.sem
    single, xs = _inputs(sem, input, "dl.reduce")
    axis = unwrap(axis)
    if axis is None:
        xs = [sem.reshape(x, (x.numel,)) for x in xs]
        axis = 0
    rank = len(xs[0].shape)
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise KernelTypeError(f"dl.reduce axis {axis!r} is out of range for shape {xs[0].shape}")
    axis %= rank
    shape = xs[0].shape
    n = shape[axis]
    while n > 1:
        h = n // 2
        evens = [_cut(sem, x, axis, 0, 2 * h) for x in xs]
        paired = shape[:axis] + (h, 2) + shape[axis + 1:]
        halves = []
        for j in (0, 1):
            part = []
            for x in evens:
                y = sem.reshape(x, paired)
                y = _cut(sem, y, axis + 1, j, 1)
                part.append(sem.reshape(y, shape[:axis] + (h,) + shape[axis + 1:]))
            halves.append(part)
        combined = _combine(cg, fn, halves[0], halves[1], single, "dl.reduce")
        if n % 2:
            combined = [sem.cat(c, _cut(sem, x, axis, n - 1, 1), axis) for c, x in zip(combined, xs)]
        xs = combined
        n = h + n % 2
        shape = xs[0].shape
    out = [sem.reshape(x, shape[:axis] + shape[axis + 1:]) if not keep_dims else x for x in xs]
    return out[0] if single else tuple(out)


def scan(cg, input, axis, fn, reverse):
    """``dl.associative_scan``: an inclusive scan along ``axis`` by doubling strides (Hillis-Steele), each
    step one inlined ``fn`` call."""
    sem = cg.sem
    single, xs = _inputs(sem, input, "dl.associative_scan")
    rank = len(xs[0].shape)
    axis = unwrap(axis)
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise KernelTypeError(f"dl.associative_scan axis {axis!r} is out of range for shape {xs[0].shape}")
    axis %= rank
    n = xs[0].shape[axis]
    k = 1
    while k < n:
        lo = [_cut(sem, x, axis, 0, n - k) for x in xs]
        hi = [_cut(sem, x, axis, k, n - k) for x in xs]
        # the part earlier in scan order is the first argument: a reverse scan runs from the end (Triton)
        first, second = (hi, lo) if reverse else (lo, hi)
        c = _combine(cg, fn, first, second, single, "dl.associative_scan")
        if reverse:
            xs = [sem.cat(cc, _cut(sem, x, axis, n - k, k), axis) for cc, x in zip(c, xs)]
        else:
            xs = [sem.cat(_cut(sem, x, axis, 0, k), cc, axis) for cc, x in zip(c, xs)]
        k *= 2
    return xs[0] if single else tuple(xs)
