"""Strip-mining: a loop over GPU-sized blocks runs as twice as many iterations over blocks half as long.

Triton kernels written for GPUs walk long rows in blocks sized for registers and shared memory spills
(``for i in range(0, n, BLOCK): x = tl.load(p + i + tl.arange(0, BLOCK), ...)``, with BLOCK = 32768 for a
vocabulary row): a block of 128 KiB and its temporaries do not fit a core's 192 KiB Unified Buffer. When such
a loop's body is *lane-wise* (every tile is the block, 1-d, and each lane's result depends only on the same lane
of the loads, through elementwise arithmetic, DMA loads and stores whose boxes move with the loop variable,
``full`` and ``broadcast`` of loop-invariant scalars) the loop computes the same thing with any block length that
divides BLOCK: iteration ``i`` of step BLOCK covers the lanes of iterations ``i, i + C, ...`` of step C.

``halve_loops(fn)`` rewrites every such loop whose block is at least ``min_bytes`` in place: the step, the
``full``/``broadcast``/DMA shapes and every tile type of the body go from BLOCK to BLOCK / 2, and
the loop's end becomes ``start + cdiv(end - start, BLOCK) * BLOCK`` so that the lanes covered are exactly the
original ones. Which lanes a DMA touches must follow the loop variable, not the block: its base advances by
stride x step, and its box bounds are either open (0, or at least BLOCK) or move back by the step (``n - i``);
and no scalar that changes with the loop variable may enter lane arithmetic. This is checked by evaluating the
body's scalar expressions at the loop variable 0, C and BLOCK (the values from outside the loop fixed). It
leaves alone loops that carry values, nest regions, reduce, gather, use ``arange`` (a lane's position in its
block) or a block-sized tile defined outside them. Returns what it split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import opdefs
from ..errors import SourceLoc
from .core import Function, Op, ScalarType, TileType, Value

# tile ops whose lanes are independent (each result lane from the same lane of the operands)
LANEWISE = frozenset({"binary", "unary", "compare", "select", "fma", "cast"})
SCALAR_OK = frozenset({"const", "binary", "unary", "compare", "select", "cast", "fma", "program_id",
                       "num_programs", "tensor_dim", "tensor_stride"})


@dataclass
class Split:
    loc: SourceLoc | None
    block: int      # the block length before
    chunk: int      # after
    nbytes: int     # the largest block tile, before


def halve_loops(fn: Function, min_bytes: int = 4096) -> list[Split]:
    done = []
    for op in list(fn.walk()):
        if op.kind == "for":
            s = _halve(op, min_bytes)
            if s is not None:
                done.append(s)
    return done


def _const_of(v: Value):
    return v.op.attrs.get("value") if v.op is not None and v.op.kind == "const" else None


def _halve(loop: Op, min_bytes: int) -> Split | None:
    if loop.results or len(loop.regions) != 1 or loop.parent is None:
        return None
    body = loop.regions[0]
    if len(body.args) != 1:  # only the induction variable: nothing carried
        return None
    L = _const_of(loop.operands[2])
    if not isinstance(L, int) or L < 2 or L % 2:
        return None
    C = L // 2
    inside = {a.id for a in body.args}
    tiles: list[Value] = []
    big = 0
    for o in body.ops:
        if o.regions:
            return None
        if o.kind == "yield":
            if o.operands:
                return None
            continue
        if not _lanewise(o, L):
            return None
        for x in o.operands:
            if x.id not in inside and isinstance(x.type, TileType) and L in x.shape:
                return None  # a block-sized tile from outside: its lanes would not line up
        for r in o.results:
            inside.add(r.id)
            if isinstance(r.type, TileType):
                tiles.append(r)
                big = max(big, r.type.nbytes)
    if big < min_bytes or not tiles or not _moves_with_loop(body, L, C):
        return None
    # the new shapes
    for v in tiles:
        v.type = TileType(tuple(C if s == L else s for s in v.shape), v.dtype)
    for o in body.ops:
        if "shape" in o.attrs:
            o.attrs["shape"] = tuple(C if s == L else s for s in o.attrs["shape"])
    # the step, and an end that covers exactly the lanes the long blocks covered
    parent = loop.parent
    at = parent.ops.index(loop)
    start, end, step = loop.operands[:3]
    d = end.dtype
    new: list[Op] = []

    def emit(kind, operands, attrs) -> Value:
        o = Op(kind, operands, [ScalarType(d)], attrs, loc=loop.loc)
        new.append(o)
        return o.result

    c_step = emit("const", [], {"value": C})
    c_l = emit("const", [], {"value": L})
    c_l1 = emit("const", [], {"value": L - 1})
    span = emit("binary", [end, start], {"op": "sub"})
    n = emit("binary", [emit("binary", [span, c_l1], {"op": "add"}), c_l], {"op": "floordiv"})
    new_end = emit("binary", [start, emit("binary", [n, c_l], {"op": "mul"})], {"op": "add"})
    for o in reversed(new):
        o.parent = parent
        parent.ops.insert(at, o)
    loop.operands[1] = new_end
    loop.operands[2] = c_step
    return Split(loop.loc, L, C, big)


def _moves_with_loop(body, L: int, C: int) -> bool:
    """The DMA boxes follow the loop variable and lane arithmetic sees loop-invariant scalars (module docstring)."""
    iv = body.args[0]
    memo: dict = {}
    outside: dict = {}

    def ev(v: Value, i: int):
        key = (v.id, i)
        if key in memo:
            return memo[key]
        if v is iv:
            r = i
        elif v.op is not None and v.op.kind == "const":
            r = v.op.attrs["value"]
        elif v.op is not None and v.op.parent is body and v.op.kind in ("binary", "unary", "cast"):
            args = [ev(x, i) for x in v.op.operands]
            if any(a is None for a in args):
                return None
            if v.op.kind == "cast":
                r = args[0]
            else:
                table = opdefs.BINARY if v.op.kind == "binary" else opdefs.UNARY
                d = table.get(v.op.attrs["op"])
                if d is None:
                    return None
                with np.errstate(all="ignore"):
                    r = d.ref(*[np.int64(a) if isinstance(a, (int, np.integer)) else np.float64(a) for a in args])
                r = r.item() if hasattr(r, "item") else r
        elif v.op is not None and v.op.parent is body:
            return None  # computed some other way inside the loop: not understood
        else:
            r = outside.setdefault(v.id, 7919 * (len(outside) + 3))  # a value from outside the loop: fixed
        memo[key] = r
        return r

    def moves(f) -> bool:
        a, b, c = ev(f, 0), ev(f, C), ev(f, L)
        return None not in (a, b, c) and b == a - C and c == a - L

    def invariant(f) -> bool:
        a, b, c = ev(f, 0), ev(f, C), ev(f, L)
        return None not in (a, b, c) and a == b == c

    for o in body.ops:
        if o.kind in ("dma_load", "dma_store"):
            base, stride, lo, hi = o.operands[:4]
            if not invariant(stride):
                return False
            s0 = ev(stride, 0)
            b0, bc, bl = ev(base, 0), ev(base, C), ev(base, L)
            if None in (b0, bc, bl) or bc - b0 != s0 * C or bl - b0 != s0 * L:
                return False
            if not ((invariant(lo) and ev(lo, 0) <= 0) or moves(lo)):
                return False
            if not ((invariant(hi) and ev(hi, 0) >= L) or moves(hi)):
                return False
            if o.kind == "dma_load" and len(o.operands) > 4 and not invariant(o.operands[4]):
                return False  # the value of the lanes outside the box
        elif o.results and isinstance(o.results[0].type, TileType):
            for x in o.operands:
                if (not isinstance(x.type, TileType) or x.shape == ()) and not invariant(x):
                    return False
    return True


def _lanewise(o: Op, L: int) -> bool:
    """Whether ``o`` keeps lanes independent and is one whose block length can change (module docstring)."""
    res = o.results[0] if o.results else None
    tile = res is not None and isinstance(res.type, TileType)
    if not tile:
        if o.kind in ("dma_store",):
            return o.attrs.get("rank") == 1 and tuple(o.attrs.get("shape", ())) == (L,) and not o.attrs.get("into")
        return o.kind in SCALAR_OK and all(not isinstance(x.type, TileType) for x in o.operands)
    if res.shape == ():  # a one-element tile: a scalar in a tile's clothing
        return o.kind in LANEWISE and all(not isinstance(x.type, TileType) or x.shape == () for x in o.operands)
    if res.shape != (L,):
        return False
    if o.kind in LANEWISE:
        return all(not isinstance(x.type, TileType) or x.shape in ((L,), ()) for x in o.operands)
    if o.kind in ("full", "broadcast"):
        return all(not isinstance(x.type, TileType) or x.shape == () for x in o.operands)
    if o.kind == "dma_load":
        return o.attrs.get("rank") == 1 and not o.attrs.get("into") and not o.attrs.get("keep")
    return False


__all__ = ["halve_loops", "Split"]
