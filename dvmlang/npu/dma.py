"""Global-memory access: DMA descriptors evaluated for a batch (each box checked against its tensor by
``bounds.check_dma`` before anything is read or written), box reads and writes (as strided views where the
programs' boxes allow), element-wise scalar stores, and atomic read-modify-writes.
"""

from __future__ import annotations

import math

import numpy as np

from ..vm.semantics import box_elements
from .bounds import check_dma
from .boxview import (_boxes, _injective, _overlapping, _pad_array, _padded, _progression,
                      _strided, _Uniform)
from .state import Slot, chunks, each_rows, eval_rows


class Desc:
    """A DMA descriptor evaluated for a batch: per-program base, strides and box. (One made by ``_one`` makes
    its numpy fields when one is first read: the one-program paths read its Python numbers.)"""

    __slots__ = ("base", "strides", "lo", "hi", "count", "bursts", "n", "empty", "checked", "_uniform", "_unaligned",
                 "_figures", "_windows", "_grid", "_ints", "_sizes", "cycles", "_plan", "_most")

    def __init__(self, b, base, strides, los, his, shape):
        n = b.n
        self.n = n
        self.checked = -1  # the tensor size this descriptor's box was checked against (see descriptor)
        self._uniform = False  # _uniform_desc's answer, once asked (False: not yet)
        self._unaligned = None
        self._figures = None
        self._windows = None  # _windows_of's answer, once asked
        self._grid = False  # _grid_of's answer, once asked (False: not yet)
        self._ints = None  # (base, strides, lo, hi) as Python integers, when _one made the fields from them
        self._sizes = None  # _one's (count, bursts, empty) in Python numbers, and whether the box has a dim
        self.cycles = None  # a transfer's cycles and bytes for its rate, figures and formula: memory._transfer
        self._plan = None  # _gather_plan's answer, once asked
        self._most = False  # _box_classes's answer, once asked (False: not yet)
        if n == 1 and self._one(b, base, strides, los, his, shape):
            return
        self.base = np.asarray(base(b), dtype=np.int64)
        self.strides = [np.asarray(s(b), dtype=np.int64) for s in strides]
        # (np.clip's values and types, without its Python wrapper's few us per call)
        lo = [np.minimum(np.maximum(np.asarray(f(b), dtype=np.int64), 0), s) for f, s in zip(los, shape)]
        hi = [np.minimum(np.maximum(np.asarray(f(b), dtype=np.int64), 0), s) for f, s in zip(his, shape)]
        hi = [np.maximum(h, l) for h, l in zip(hi, lo)]
        self.lo, self.hi = lo, hi
        ext = [h - l for h, l in zip(hi, lo)]
        count = np.ones((), dtype=np.int64)
        for e in ext:
            count = count * e
        self.count = np.broadcast_to(count, (n,)) if np.ndim(count) == 0 and n > 1 else count
        self.empty = count == 0
        if len(shape) >= 1:
            inner_contig = self.strides[-1] == 1
            rows = count // np.maximum(ext[-1], 1)
            self.bursts = np.where(inner_contig, rows, count)
        else:
            self.bursts = count

    def _one(self, b, base, strides, los, his, shape) -> bool:
        """The fields of a one-program descriptor worked out in Python integers (``_ints``, and ``_sizes``: its
        count, bursts and emptiness), when every field's value is an integer (Python's, a numpy integer or a 0-d
        integer array) below ``_ONE_LIMIT`` in magnitude: nothing ``__init__``'s numpy path computes can then
        wrap. Its numpy fields are made from them when one is first read (``__getattr__``), with the values and
        the types that path gives them (0-d int64 arrays for the base, strides and bursts; int64 scalars for the
        box and, with a box, the count; a numpy bool for ``empty``). False, having set nothing, otherwise. (A new
        shape's first launch makes its descriptors anew, and numpy calls on one-element values cost about 1 us
        each; the one-program paths read the integers.)"""
        vals = [base(b)]
        for fields in (strides, los, his):
            for f in fields:
                vals.append(f(b))
        for i, x in enumerate(vals):
            c = x.__class__
            if c is not int:
                if c is np.ndarray:  # (a register holds a 0-d array)
                    if x.ndim or x.dtype.kind not in "iu":
                        return False
                elif c not in _INT_SCALARS:
                    return False
                vals[i] = x = int(x)
            if not -_ONE_LIMIT < x < _ONE_LIMIT:
                return False
        r = len(strides)
        st = vals[1:1 + r]
        lo_ints, hi_ints, count, ext = [], [], 1, 0
        for lo, hi, d in zip(vals[1 + r:1 + 2 * r], vals[1 + 2 * r:], shape):  # (np.clip's, then hi >= lo)
            lo = 0 if lo < 0 else (d if lo > d else lo)
            hi = 0 if hi < 0 else (d if hi > d else hi)
            if hi < lo:
                hi = lo
            lo_ints.append(lo)
            hi_ints.append(hi)
            ext = hi - lo
            count *= ext
        self._ints = (vals[0], st, lo_ints, hi_ints)
        self._sizes = (count, count // max(ext, 1) if shape and st[-1] == 1 else count, count == 0, bool(shape))
        return True

    def __getattr__(self, name):
        # (only for a field not set: the numpy fields of a descriptor _one made, made now from its integers)
        if name not in _NUMPY_FIELDS or self._ints is None:
            raise AttributeError(name)
        i64 = np.int64
        base, st, lo_ints, hi_ints = self._ints
        count, bursts, _, has_dims = self._sizes
        self.base = np.array(base, dtype=i64)
        self.strides = [np.array(x, dtype=i64) for x in st]
        self.lo, self.hi = [i64(x) for x in lo_ints], [i64(x) for x in hi_ints]
        self.count = c = i64(count) if lo_ints else np.ones((), dtype=i64)
        self.empty = c == 0
        self.bursts = np.array(bursts, dtype=i64) if has_dims else c
        return getattr(self, name)

    def is_empty(self) -> bool:
        """One program: whether its box is empty."""
        return self._sizes[2] if self._sizes is not None else bool(self.empty.item())

    def ints(self) -> tuple:
        """(base, strides, lo, hi) of a one-program descriptor as Python integers: those ``_one`` made the fields
        from, or the fields' one values."""
        if self._ints is not None:
            return self._ints
        return (self.base.item(), [s.item() for s in self.strides], [x.item() for x in self.lo],
                [x.item() for x in self.hi])

    def figures(self, itemsize: int, align: int, to_l1: bool):
        """(bytes, bursts, unaligned part) each program moves (``to_l1``: bursts along the stored rows,
        ``unit_stride_bursts``), remembered with the descriptor. For a one-program batch they are Python
        numbers, so the step's cost and the launch's totals stay in Python floats (the same doubles as the
        one-element arrays)."""
        key = (itemsize, align, to_l1)
        f = self._figures
        if f is not None and f[0] == key:
            return f[1]
        sizes = self._sizes
        un = self.unaligned(itemsize, align)
        if sizes is not None and not to_l1:  # (made by _one: its Python numbers)
            nbytes, bursts = sizes[0] * itemsize, sizes[1]
        else:
            bursts = self.unit_stride_bursts() if to_l1 else self.bursts
            if self.n == 1:  # (one value each: its count times the item size is far below 2**63, as a tile's is)
                nbytes, bursts = self.count.item() * itemsize, bursts.item()
                if un.__class__ is not float:
                    un = np.asarray(un).reshape(-1)[0].item()
            else:
                nbytes = self.count * itemsize
        f = nbytes, bursts, un
        self._figures = (key, f)
        return f

    def unit_stride_bursts(self):
        """Bursts when the transfer runs along whichever dim has unit stride (the rows as stored): a cube operand
        loaded into L1 is read that way, and MTE1 transposes it on its way to L0 (LoadData's transpose), so a
        transposed matrix in GM is not read element by element."""
        for d in range(len(self.strides) - 1, -1, -1):
            if np.all(self.strides[d] == 1):
                return self.count // np.maximum(self.hi[d] - self.lo[d], 1)
        return self.bursts

    def unaligned(self, itemsize: int, align: int):
        """The part of each program's bursts that start off their alignment boundary: ``align`` bytes, or the
        burst's own size rounded down to a power of two when it is shorter (GM moves 128/256/512 B segments).
        Burst starts are ``first + sum(i_d * stride_d)`` over the outer dims (every dim, when the last is
        strided): modulo the boundary ``a`` they cover the multiples of ``g = gcd(a, stride_d * itemsize)``
        from the first, so a part ``g / a`` of them is aligned when the first burst's address is a multiple
        of ``g``, none otherwise (tensors start aligned)."""
        if self._unaligned is not None and self._unaligned[0] == (itemsize, align):
            return self._unaligned[1]
        v = self._unaligned_part(itemsize, align)
        self._unaligned = ((itemsize, align), v)
        return v

    def _unaligned_part(self, itemsize: int, align: int):
        if not (self._ints[1] if self._ints is not None else self.strides):
            return 0.0
        if self.n == 1:  # one program: in Python numbers (a new shape's first launch makes its descriptors anew)
            v = self._unaligned_one(itemsize, align)
            if v is not None:
                return v
        return self._unaligned_arrays(itemsize, align)

    def _unaligned_one(self, itemsize: int, align: int) -> float | None:
        """``_unaligned_arrays`` of a one-program descriptor in Python numbers: the same double (``figures``
        takes a one-program batch's as a Python float), or None when that could differ: a value large enough
        for the int64 arithmetic there to wrap, or a burst large enough for its floating-point log2 to round
        up to the next power of two."""
        base, st, lo, hi = self.ints()
        contiguous = st[-1] == 1
        burst = max((hi[-1] - lo[-1]) * itemsize if contiguous else itemsize, 1)
        terms = [l * s for l, s in zip(lo, st)]
        if burst >= _EXACT_LOG2 or (abs(base) + sum(map(abs, terms))) * itemsize >= _NO_WRAP or \
                max(map(abs, st)) * itemsize >= _NO_WRAP:
            return None
        if self.is_empty():
            return 0.0
        a = max(int(min(align, 2.0 ** (burst.bit_length() - 1))), 32)  # 2 ** floor(log2(burst)), at most align
        g = a
        for s in (st[:-1] if contiguous else st):
            g = math.gcd(g, s * itemsize)
        if g == 0:
            g = a
        first = base + sum(terms)
        return 1.0 - (g / a if first * itemsize % g == 0 else 0.0)

    def _unaligned_arrays(self, itemsize: int, align: int):
        contiguous = np.all(self.strides[-1] == 1)
        burst = (self.hi[-1] - self.lo[-1]) * itemsize if contiguous else np.full(self.n, itemsize)
        a = np.minimum(align, 2 ** np.floor(np.log2(np.maximum(burst, 1)))).astype(np.int64)
        a = np.maximum(a, 32)
        first = self.base
        for lo, st in zip(self.lo, self.strides):
            first = first + lo * st
        g = a
        for st in (self.strides[:-1] if contiguous else self.strides):
            g = np.gcd(g, np.asarray(st, dtype=np.int64) * itemsize)
        g = np.where(g == 0, a, g)
        aligned = np.where((first * itemsize) % g == 0, g / a, 0.0)
        return np.where(self.empty, 0.0, 1.0 - aligned)


_NUMPY_FIELDS = frozenset({"base", "strides", "lo", "hi", "count", "bursts", "empty"})
_ONE_LIMIT = 1 << 40  # Desc._one: below it, no field's value nor anything made of it wraps in int64
_INT_SCALARS = frozenset({np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.intc,
                          np.uintc, np.intp, np.uintp, np.longlong, np.ulonglong})
_EXACT_LOG2 = 1 << 40  # below it, floor(log2(x)) in float64 is exactly x.bit_length() - 1 (Desc._unaligned_one)
_NO_WRAP = 1 << 62  # below it, no sum or product _unaligned_arrays makes of the values can wrap in int64


def descriptor(memo: dict, L, b, t: int, fields, shape, pc: int) -> Desc:
    """The DMA descriptor of a step for batch ``b``, its box checked against tensor ``t``. ``fields``: the
    step's (base, strides, lo, hi, the register fields among them) functions; ``memo``: the step's own
    descriptors by field values. The descriptor is a pure function of those values (one per batch: an
    immediate, a scalar register, a one-program batch; or one per program) and the batch size, so a step that
    sees the same values again (a relaunch, the same batch of a relaunch, a loop over the same box) reuses it,
    and the check it passed for a tensor of the same size (outside a pointer-table heap, whose segments are
    checked every time). The immediates are the step's own, so the register fields' values key it, those per
    program by their exact bytes, dtype and shape."""
    base, strides, los, his, varying = fields
    key = descriptor_key(b, varying)
    desc = memo.get(key)
    if desc is None:
        desc = Desc(b, base, strides, los, his, shape)
        if len(memo) >= (64 if b.n <= 1024 else 8):  # a large batch's descriptors (and keys) hold arrays
            memo.clear()
        memo[key] = desc
    g = L.arrays[t]
    if desc.checked != g.size:
        check_dma(L, b, t, desc, pc, g.size)
        if getattr(g, "dvm_segments", None) is None:
            desc.checked = g.size
    return desc


def descriptor_key(b, varying) -> tuple:
    """What a step's descriptor is kept under for batch ``b``: its size and its register fields' values."""
    key = [b.n]
    for f in varying:
        v = f(b)
        if type(v) is int:
            key.append(v)
        elif v.size == 1:
            key.append((v.item(), v.ndim))
        else:
            key.append((v.dtype.char, v.shape, v.tobytes()))
    return tuple(key)


# ---- descriptors the same for every program ------------------------------------------------------------


def _all_same(x):
    if np.ndim(x) == 0:
        return True, int(x)
    if (x == x[0]).all():
        return True, int(x[0])
    return False, None


def _uniform_desc(desc: Desc, n: int) -> _Uniform | None:
    if desc._uniform is False:
        desc._uniform = _uniform_of(desc, n)
    return desc._uniform


def _uniform_of(desc: Desc, n: int) -> _Uniform | None:
    if desc._ints is not None:  # one program, its fields from these integers (Desc._one): what the lines below give
        base, st, lo, hi = desc._ints
        return _Uniform(st, lo, hi, (base, 0))
    vals = [_all_same(x) for x in desc.strides + desc.lo + desc.hi]
    if not all(u for u, _ in vals):
        return None
    r = len(desc.strides)
    v = [x for _, x in vals]
    return _Uniform(v[:r], v[r:2 * r], v[2 * r:], _progression(desc.base, n))


def _windows_of(desc: Desc, n: int):
    """(the distinct bases of a batch's programs, each program's index into them, (first, step) when the distinct
    bases step uniformly, else None), worked out once per descriptor."""
    w = desc._windows
    if w is None:
        bases, inverse = np.unique(np.broadcast_to(desc.base, (n,)), return_inverse=True)
        w = desc._windows = (bases, inverse, _progression(bases, len(bases)) if len(bases) > 1 else None)
    return w


def _per_program(desc: Desc, n: int, which=None):
    """(program, start element, box extents, strides, box slices) of every program with a non-empty box (of the
    programs ``which``, when given)."""
    base = np.broadcast_to(desc.base, (n,))
    sts = [np.broadcast_to(x, (n,)) for x in desc.strides]
    los = [np.broadcast_to(x, (n,)) for x in desc.lo]
    his = [np.broadcast_to(x, (n,)) for x in desc.hi]
    for i in (range(n) if which is None else which.tolist()):
        lo = [int(x[i]) for x in los]
        hi = [int(x[i]) for x in his]
        ext = tuple(h - l for l, h in zip(lo, hi))
        if any(e == 0 for e in ext):
            continue
        st = tuple(int(x[i]) for x in sts)
        start = int(base[i]) + sum(s_ * l for s_, l in zip(st, lo))
        yield i, start, ext, st, tuple(slice(l, h) for l, h in zip(lo, hi))


MAX_CLASSES = 8  # the most kinds of box a batch's descriptor is read as one view per kind in


def _box_classes(desc: Desc, n: int):
    """For a descriptor whose boxes differ between the programs: ([(a ``_Uniform`` of the programs whose strides and
    box are alike, with their bases' progression; those programs, as a slice when they are consecutive, else
    their indices; how many; None, or when their bases do not step uniformly but name a few windows (a grid of
    programs sharing a matmul's tiles), the distinct bases, each program's index into them and their
    progression)] in program order, the programs of any other kind) when they come in
    at most ``MAX_CLASSES`` kinds (a persistent loop's last row block clipped at the tensor's end, the programs
    past its end, whose boxes are empty and left out, a matmul's last column of tiles), else None; worked out once
    per descriptor. Each kind's boxes are then one strided view, and the rest are copied one by one."""
    most = desc._most
    if most is False:
        most = desc._most = None
        if n > 3 and desc._ints is None:
            fields = np.stack([np.broadcast_to(x, (n,)) for x in desc.strides + desc.lo + desc.hi], axis=1)
            kinds, which = np.unique(fields, axis=0, return_inverse=True)
            if 1 < len(kinds) <= MAX_CLASSES:
                base = np.broadcast_to(desc.base, (n,))
                r = len(desc.strides)
                classes, rest = [], []
                for c, row in enumerate(kinds):
                    idx = np.flatnonzero(which.reshape(-1) == c)
                    v = [int(x) for x in row]
                    u = _Uniform(v[:r], v[r:2 * r], v[2 * r:], _progression(base[idx], len(idx)))
                    if u.empty:
                        continue  # (nothing to copy)
                    windows = None
                    if u.prog is None:  # (bases in a grid: a few windows the programs share, each read once)
                        at, inverse = np.unique(base[idx], return_inverse=True)
                        windows = (at, inverse.reshape(-1), _progression(at, len(at)) if len(at) > 1 else None)
                        if len(at) > len(idx) // 2 and windows[2] is None:
                            rest.append(idx)
                            continue
                    rows = slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == len(idx) else idx
                    classes.append((u, rows, len(idx), windows))
                classes.sort(key=lambda k: k[1].start if k[1].__class__ is slice else int(k[1][0]))
                most = desc._most = (classes, np.sort(np.concatenate(rest)) if rest else None)
    return most


def _ordered(classes, rest) -> bool:
    """Whether a write may copy each kind of box as one view, kind after kind: every kind a run of consecutive
    programs whose boxes do not overlap, none left to copy one by one (then the copies overwrite one another in
    the programs' order, as one copy per program does)."""
    if rest is not None:
        return False
    end = 0
    for u, rows, k, windows in classes:
        if windows is not None or rows.__class__ is not slice or rows.start < end or \
                _overlapping(u.prog[1], u.st, u.ext, k):
            return False
        end = rows.stop
    return True


PLAN_ELEMENTS = 1 << 16  # a gather plan is made for boxes of up to this many elements in all (24 bytes each)


def _gather_plan(desc: Desc, n: int, shape):
    """For a descriptor whose boxes differ between the programs (no uniform view of them): [the tensor element
    of every element inside a program's box, in program order; its place in the batch's (n, *shape) tile; its
    place in one program's tile; whether no element is in two boxes (``_distinct``)], so that a read or a write
    is one indexed copy instead of one copy per program. Made at the descriptor's second use (a relaunch finds
    it with the descriptor); None at the first, and when the boxes hold more than ``PLAN_ELEMENTS`` elements."""
    plan = desc._plan
    if plan is None or plan.__class__ is int:  # (made at the descriptor's second use: a new shape's first launch
        if plan is None:                     # copies its boxes one by one, a relaunch finds the plan)
            desc._plan = 1
            return None
        shape = tuple(shape)
        size = 1
        tile_st = []
        for e in reversed(shape):
            tile_st.append(size)
            size *= e
        tile_st.reverse()
        src, dst, total = [], [], 0
        for i, start, ext, st, box in _per_program(desc, n):
            k = 1
            for e in ext:
                k *= e
            total += k
            if total > PLAN_ELEMENTS:
                plan = False
                break
            src.append(box_elements(start, st, [0] * len(ext), ext))  # (the box's elements: vm.semantics)
            dst.append(box_elements(i * size, tile_st, [b_.start for b_ in box], [b_.stop for b_ in box]))
        if plan is not False:
            s_all = np.concatenate(src) if src else np.zeros(0, np.int64)
            d_all = np.concatenate(dst) if dst else np.zeros(0, np.int64)
            plan = [s_all, d_all, d_all % max(size, 1), None]
        desc._plan = plan
    return plan or None


def _distinct(plan) -> bool:
    """Whether no element of a gather plan is in two programs' boxes (worked out once, for a write)."""
    if plan[3] is None:
        plan[3] = np.unique(plan[0]).size == plan[0].size
    return plan[3]


# ---- box reads and writes --------------------------------------------------------------------------------


def dma_read(g: np.ndarray, desc: Desc, shape, npdt, pad, n, pending=False):
    """Read a box per program. Returns (array (rows, *shape), is_view_of_gm); with ``pending``, a whole tile
    the programs read from a few shared windows comes back as ``Windows`` (a pending gather) instead."""
    u = _uniform_desc(desc, n)
    full = u is not None and u.full(tuple(shape))
    if u is not None and u.prog is not None:
        step = u.prog[1]
        rows = n if (n == 1 or step != 0 or desc.base.ndim) else 1
        if u.empty:
            return _pad_array(rows, shape, npdt, pad), False
        view = _boxes(g, u, rows)
        if full:
            return view, True
        out = _padded(rows, shape, npdt, pad)
        out[(slice(None),) + u.box] = view
        return out, False
    if u is not None and n > 1:
        # programs that read the same window (e.g. the tiles of a matmul shared by a row of programs): read
        # each distinct window once
        bases, inverse, prog = _windows_of(desc, n)
        if len(bases) <= n // 2 or prog is not None:  # (stepping windows: one strided read, then one per program)
            if u.empty:
                return _pad_array(n, shape, npdt, pad), False
            if prog is not None:  # the windows step uniformly: one strided read of them all
                windows = _strided(g, prog[0] + u.offset, (len(bases),) + u.ext, (prog[1],) + u.st).copy()
            else:
                windows = np.stack([_strided(g, int(b_) + u.offset, u.ext, u.st) for b_ in bases])
            if full:
                return (Windows(windows, inverse) if pending else windows[inverse]), False
            out = _padded(n, shape, npdt, pad)
            out[(slice(None),) + u.box] = windows[inverse]
            return out, False
        grid = _grid_of(desc, n)
        if grid is not None:  # a grid of programs (rows and columns of tiles): one strided read of every box
            if u.empty:
                return _pad_array(n, shape, npdt, pad), False
            first, s1, k, s2 = grid
            boxes = _strided(g, first + u.offset, (n // k, k) + u.ext, (s2, s1) + u.st).reshape((n,) + u.ext)
            if full:
                return boxes, True  # (a view of GM, or a copy of it: either may be materialised before a store)
            out = _padded(n, shape, npdt, pad)
            out[(slice(None),) + u.box] = boxes
            return out, False
    out = _padded(n, shape, npdt, pad)
    kinds = _box_classes(desc, n) if u is None else None
    # each kind of box as one view and the programs of no kind one by one, unless more than a few are of no kind
    # and the indexed copy takes them all
    if kinds is None or (kinds[1] is not None and len(kinds[1]) > n // 8):
        plan = _gather_plan(desc, n, shape)
        if plan is not None:  # every program's box in one indexed copy
            out.reshape(-1)[plan[1]] = g[plan[0]]
            return out, False
    if kinds is not None:
        _read_kinds(g, kinds[0], out)
        if kinds[1] is None:
            return out, False
    for i, start, ext, st, box in _per_program(desc, n, None if kinds is None else kinds[1]):
        out[(i,) + box] = _strided(g, start, ext, st)
    return out, False


def _read_kinds(g: np.ndarray, classes: list, out: np.ndarray) -> None:
    """Each kind of box (``_box_classes``) read as one view into ``out``, a kind whose programs share a few
    windows each window once (one strided read when they step uniformly)."""
    for cu, rows, k, windows in classes:
        if windows is None:
            out[(rows,) + cu.box] = _boxes(g, cu, k)
            continue
        at, inverse, prog = windows
        w = _strided(g, prog[0] + cu.offset, (len(at),) + cu.ext, (prog[1],) + cu.st) if prog is not None else \
            np.stack([_strided(g, int(b_) + cu.offset, cu.ext, cu.st) for b_ in at])
        out[(rows,) + cu.box] = w[inverse]


class Windows:
    """A tile the programs of a batch read from a few distinct windows of a tensor: program ``p`` holds
    ``windows[inverse[p]]``. Recorded as the tile's pending value (``fn(inverse)``, gathered when first read)
    so that a consumer transforming every program's tile the same way (the cube widening its operands) can
    transform the windows instead: the same values, without one copy of each window per program."""

    __slots__ = ("windows", "inverse")

    def __init__(self, windows: np.ndarray, inverse: np.ndarray):
        self.windows, self.inverse = windows, inverse

    def __call__(self, inverse: np.ndarray) -> np.ndarray:
        return self.windows[inverse]


def pending_windows(src):
    """The slot of a reader's ``source`` value when it is a pending ``Windows`` gather of a whole tile, read
    at the tile's shape and in the tile's dtype; else None."""
    if src.__class__ is not tuple:
        return None
    slot, shape = src
    win = slot.lazy[0]
    if win.__class__ is Windows and win.windows.dtype == slot.dtype and tuple(slot.shape) == shape:
        return slot
    return None


def dma_write(g: np.ndarray, desc: Desc, shape, src: np.ndarray, n):
    rows_src = src.shape[0]
    u = _uniform_desc(desc, n)
    if u is not None and u.prog is not None and (n == 1 or desc.base.ndim):
        if u.empty:
            return
        step = u.prog[1]
        view = _boxes(g, u, n, writeable=True)
        part = src[(slice(None),) + u.box]
        if _overlapping(step, u.st, u.ext, n):
            for i in range(n):
                view[i] = part[i if rows_src > 1 else 0]
        else:
            view[...] = part
        return
    grid = _grid_of(desc, n) if u is not None and rows_src == n else None
    if grid is not None and not u.empty:
        # a grid of programs (a matmul's row and column of tiles): one strided write, when no two programs'
        # boxes share an element (the order they are written in does not matter then)
        first, s1, k, s2 = grid
        dims = [(s1, k), (s2, n // k)] + list(zip(u.st, u.ext))
        if _injective(dims):
            view = _strided(g, first + u.offset, (n // k, k) + u.ext, (s2, s1) + u.st, writeable=True)
            view[...] = src[(slice(None),) + u.box].reshape((n // k, k) + u.ext)
            return
    if u is not None and not u.empty and n > 1 and desc.base.ndim:
        # the programs' bases a permutation of a progression (programs over a grid in another order than the
        # tensor's): one strided view in the bases' order, each program's box put at its place in it, when no two
        # boxes share an element
        at, inverse, prog = _windows_of(desc, n)
        if prog is not None and len(at) == n and not _overlapping(prog[1], u.st, u.ext, n):
            part = src[(slice(None),) + u.box]
            _strided(g, prog[0] + u.offset, (n,) + u.ext, (prog[1],) + u.st, writeable=True)[inverse] = \
                part if rows_src > 1 else part[0]
            return
    kinds = _box_classes(desc, n) if u is None else None
    if kinds is not None and _ordered(*kinds):  # each kind of box as one view, kind after kind
        for cu, rows, k, _ in kinds[0]:
            _boxes(g, cu, k, writeable=True)[...] = src[((rows,) if rows_src > 1 else (slice(0, 1),)) + cu.box]
        return
    plan = _gather_plan(desc, n, shape)
    if plan is not None and _distinct(plan):  # no element in two boxes: every program's box in one indexed copy
        g[plan[0]] = src.reshape(-1)[plan[1] if rows_src > 1 else plan[2]]
        return
    for i, start, ext, st, box in _per_program(desc, n):
        _strided(g, start, ext, st, writeable=True)[...] = src[(i if rows_src > 1 else 0,) + box]


def _grid_of(desc: Desc, n: int):
    """(first, inner step, programs per row k, outer step) when program p's base is ``first + (p % k) * inner +
    (p // k) * outer`` with 1 < k < n (a 2-d grid of programs), else None; worked out once per descriptor."""
    if desc._grid is False:
        desc._grid = None
        base = np.broadcast_to(desc.base, (n,))
        if n > 2 and desc.base.ndim:
            d = np.diff(base)
            k = int(np.argmax(d != d[0])) + 1
            if 1 < k < n and n % k == 0:
                g = base.reshape(n // k, k)
                col = np.diff(g[:, 0])
                if (col == col[0]).all() and (g == g[:, :1] + np.arange(k) * d[0]).all():
                    desc._grid = (int(base[0]), int(d[0]), k, int(col[0]))
    return desc._grid


def store_view(g: np.ndarray, desc: Desc, shape, n, whole: bool):
    """(view, box): a writable view of the destination when every program stores the same box of its tile
    (``box`` None: the whole tile) at a base that steps uniformly and the programs do not overlap; a partial
    box only when ``whole`` is False. (None, None) otherwise."""
    u = _uniform_desc(desc, n)
    if u is None or u.prog is None or u.empty:
        return None, None
    full = u.full(tuple(shape))
    if (not full and whole) or (n > 1 and desc.base.ndim == 0):
        return None, None
    if _overlapping(u.prog[1], u.st, u.ext, n):
        return None, None
    return _boxes(g, u, n, writeable=True), None if full else u.box


def compute_into(slot: Slot, view: np.ndarray, box) -> bool:
    """Compute a pending elementwise result straight into global memory: all of it (``box`` None) or only the
    box a masked store writes. False (nothing written) when an operand is not laid out as the tile, so it
    cannot be cut to the box (then the caller stores the whole tile)."""
    f, args, _ = slot.lazy
    shape = tuple(slot.shape)
    cuts = None
    if box is not None:  # each operand's box: the tile's, along the dims it is not broadcast in
        dims = [a[1] if a.__class__ is tuple else a.shape[1:] for a in args]  # what eval_rows gives, per row
        if not all(_tile_shaped(d, shape) for d in dims):
            return False
        cuts = [(slice(None),) + tuple(bx if d == s else slice(None) for bx, d, s in zip(box, dd, shape))
                for dd in dims]

    def part(r0, r1):
        vals = [eval_rows(a, r0, r1, {}) for a in args]
        if cuts is not None:
            vals = [v[c] for v, c in zip(vals, cuts)]
        f(*vals, out=view[r0:r1] if slot.rows > 1 else view)
    rows = slot.rows
    each_rows(slot, part, chunks(slot) if rows > 1 else _ONE_ROW, rows * slot.nbytes if rows > 1 else 0)
    return True


_ONE_ROW = ((0, 1),)  # compute_into's one range of a one-program store


def _tile_shaped(dims: tuple, shape) -> bool:
    """Whether a value (rows, *dims) is (rows, *shape) with some dims of ``shape`` broadcast as 1 (so a box can be
    cut from it)."""
    return len(dims) == len(shape) and all(d in (1, s) for d, s in zip(dims, shape))
