"""The fuser's fragment table: what every graph operation a fused kernel computes is, in instructions.

One row per graph op (``FRAGMENTS``). A row's ``emit(k, node, args)`` writes the op's pre-selected
instructions into the kernel being composed (``k``, an ``emit.KernelContext``) for its operands' roles: a tile
(``compose.Tile``) or a scalar register (``compose.Reg``), and returns the result's value. The instructions are
chosen by role and dtype once, here: an elementwise op is ``V<OP>`` on two tiles, ``V<OP>S`` on a tile and a
scalar (``rev`` when the scalar comes first), ``S<OP>`` on two scalars (folded at build time when both are
constants), as the ISA's rows for the op vocabulary (``opdefs``) give them.

The elementwise rows are generated from ``opdefs.FUSIBLE``; the others (``where``, ``cast``, ``broadcast_to``,
free values, reductions, scans, the memory reads ``gather`` and ``cat``) are written out below. Adding a fuser
op is one row here (plus its shape rule in ``ops_*`` and its grouping trait in ``fusion``); the skeletons in
``emit`` (the persistent program loop, loads and stores, the matmul K loop) never change for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import dtypes as dt
from .. import opdefs
from ..vm import isa
from ..vm.compose import Reg, Tile


@dataclass(frozen=True)
class Fragment:
    """One graph op: its kind (``elementwise``, ``free``, ``reduction``, ``scan``, ``row`` or ``memory``: as
    ``graph_ops`` says) and how it
    emits (``emit(k, node, args) -> value``; ``args`` are its operands' values, in order)."""

    op: str
    kind: str
    emit: Callable


# ---- elementwise -------------------------------------------------------------------------------------------

def _elementwise(op: str) -> Fragment:
    d = opdefs.ELEMENTWISE[op]
    if op in opdefs.COMPARE:
        return Fragment(op, "elementwise", lambda k, n, a: k.compare(op, a[0], a[1], n))
    if d.arity == 1:
        return Fragment(op, "elementwise", lambda k, n, a: k.unary(op, a[0], n))
    return Fragment(op, "elementwise", lambda k, n, a: k.binary(op, a[0], a[1], n))


def _where(k, n, a):
    return k.select(a[0], a[1], a[2], n.dtype, k.loc(n))


def _cast(k, n, a):
    return k.cast(a[0], n.dtype, k.loc(n))


def _same(k, n, a):
    return a[0]  # a broadcast is consumed by elementwise ops directly (numpy broadcasting); a store materialises it


# ---- free values: constants, sizes, index tiles ----------------------------------------------------------

def _const(k, n, a):
    return k.graph_constant(n)


def _dim(k, n, a):
    return k.dim_value(n)


def _iota(k, n, a):
    return k.iota(n)


# ---- reductions and scans over the columns ---------------------------------------------------------------

REDUCE = {"sum": "sum", "prod": "prod", "max": "max_nan", "min": "min_nan"}  # numpy's NaN rule: a NaN in a row
COMBINE = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}  # gives NaN; partial results of column
# blocks combine NaN-propagating


def identity(op: str, d: dt.DType):
    """The identity of a reduction: what masked columns hold."""
    if op == "sum":
        return 0.0 if d.is_float else 0
    if op == "prod":
        return 1.0 if d.is_float else 1
    if d.is_float:
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(d.np)
    return int(info.min if op == "max" else info.max)


def _reduce(k, n, a):
    op = n.attrs["op"]
    loc = k.loc(n)
    masked = k.select(k.cmask(), a[0], k.constant(identity(op, n.dtype), n.dtype), n.dtype, loc)
    red = k.tile((masked.shape[0], 1), n.dtype, "reduce", loc)
    k.c.emit("VREDUCE", {"op": isa.REDUCE_OPS.index(REDUCE[op]), "axis": 1, "dst": k.c.ref(red),
                         "a": k.c.ref(masked)}, n.dtype, loc, reads=[masked], writes=[red])
    acc = k.accumulator(n)
    if acc is None:
        return red
    k.c.emit(isa.VECTOR_BINARY[COMBINE[op]].name, {"dst": k.c.ref(acc), "a": k.c.ref(acc), "b": k.c.ref(red)},
             n.dtype, loc, reads=[acc, red], writes=[acc])
    return acc


def _cumsum(k, n, a):
    """A running sum, product, maximum or minimum along the columns (``attrs["op"]``, sum when absent)."""
    op = n.attrs.get("op", "sum")
    loc = k.loc(n)
    v = a[0]
    rows = v.shape[0] if isinstance(v, Tile) else 1
    t = k.select(k.cmask(), k.broadcast(v, (rows, k.bc), n.dtype, loc), k.constant(identity(op, n.dtype), n.dtype),
                 n.dtype, loc)
    out = k.tile(t.shape, n.dtype, "cumsum", loc)
    k.c.emit("VSCAN", {"op": isa.SCAN_OPS.index(op), "axis": 1, "reverse": 0, "dst": k.c.ref(out),
                       "a": k.c.ref(t)}, n.dtype, loc, reads=[t], writes=[out])
    carry = k.accumulator(n)
    if carry is None:
        return out
    # loop mode: combine with the running result of the column blocks before this one, then carry this block's
    # total on
    comb = isa.VECTOR_BINARY[COMBINE[op]].name
    res = k.tile(out.shape, n.dtype, "cumsum", loc)
    k.c.emit(comb, {"dst": k.c.ref(res), "a": k.c.ref(out), "b": k.c.ref(carry)}, n.dtype, loc,
             reads=[out, carry], writes=[res])
    total = k.tile((t.shape[0], 1), n.dtype, "cumsum total", loc)
    k.c.emit("VREDUCE", {"op": isa.REDUCE_OPS.index(REDUCE[op]), "axis": 1, "dst": k.c.ref(total),
                         "a": k.c.ref(t)}, n.dtype, loc, reads=[t], writes=[total])
    k.c.emit(comb, {"dst": k.c.ref(carry), "a": k.c.ref(carry), "b": k.c.ref(total)}, n.dtype, loc,
             reads=[carry, total], writes=[carry])
    return res


# ---- ops on a whole row (row mode: the row is one tile) -------------------------------------------------

def _sort(k, n, a):
    """``VSORT`` along the columns. The tile's columns past the row hold what sorts last (NaN ascending: it is the
    largest; -inf descending), so the stored box holds the row's own values in order."""
    loc = k.loc(n)
    desc = bool(n.attrs.get("descending", False))
    d = n.dtype
    if d.is_float:
        pad = -math.inf if desc else math.nan
    else:
        info = np.iinfo(d.np) if not d.is_bool else None
        pad = (int(info.min) if desc else int(info.max)) if info is not None else (0 if desc else 1)
    v = a[0]
    rows = v.shape[0] if isinstance(v, Tile) else 1
    t = k.select(k.cmask(), k.broadcast(v, (rows, k.bc), d, loc), k.constant(pad, d), d, loc)
    out = k.tile(t.shape, d, "sort", loc)
    k.c.emit("VSORT", {"axis": 1, "descending": int(desc), "dst": k.c.ref(out), "a": k.c.ref(t)}, d, loc,
             reads=[t], writes=[out])
    return out


# ---- memory reads at positions of their own ---------------------------------------------------------------

def _gather(k, n, a):
    return k.gather(n, a[1])


def _cat(k, n, a):
    return k.cat(n, a)


FRAGMENTS: dict[str, Fragment] = {
    **{op: _elementwise(op) for op in sorted(opdefs.FUSIBLE)},
    "where": Fragment("where", "elementwise", _where),
    "cast": Fragment("cast", "elementwise", _cast),
    "broadcast_to": Fragment("broadcast_to", "elementwise", _same),
    "const": Fragment("const", "free", _const),
    "dim": Fragment("dim", "free", _dim),
    "iota": Fragment("iota", "free", _iota),
    "reduce": Fragment("reduce", "reduction", _reduce),
    "cumsum": Fragment("cumsum", "scan", _cumsum),
    "sort": Fragment("sort", "row", _sort),
    "gather": Fragment("gather", "memory", _gather),
    "cat": Fragment("cat", "memory", _cat),
}


def is_scalar(v) -> bool:
    return v.__class__ is Reg
