"""Build tile IR: one method per operation kind, with result types inferred where the IR defines them.

The frontend decides promotions and reports user errors; the builder assumes well-typed input and the
verifier double-checks it.
"""

from __future__ import annotations

from contextlib import contextmanager

from .. import dtypes as dt
from ..errors import SourceLoc
from .core import Block, Op, ScalarType, TileType, Type, Value


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two static shapes, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y) if x != 1 and y != 1 else (y if x == 1 else x))
    return tuple(reversed(out))


def make_type(shape: tuple[int, ...] | None, dtype: dt.DType) -> Type:
    """A scalar type when ``shape`` is None, else a tile type."""
    return ScalarType(dtype) if shape is None else TileType(tuple(shape), dtype)


def shape_of(v: Value) -> tuple[int, ...] | None:
    return v.type.shape if isinstance(v.type, TileType) else None


class Builder:
    """Appends ops to an insertion block and stamps them with the current source location."""

    def __init__(self, block: Block):
        self.block = block
        self.loc: SourceLoc | None = None
        self._const_cache: dict = {}

    @contextmanager
    def at(self, block: Block):
        saved = self.block
        self.block = block
        try:
            yield block
        finally:
            self.block = saved

    def op(self, kind: str, operands, result_types, attrs=None, regions=None) -> Op:
        return self.block.append(Op(kind, list(operands), list(result_types), attrs, regions, self.loc))

    # ---- leaves -----------------------------------------------------------------------------------
    def const(self, value, dtype: dt.DType) -> Value:
        if dtype.is_bool:
            value = bool(value)
        elif dtype.is_int:
            value = int(value)
        else:
            value = float(value)
        return self.op("const", [], [ScalarType(dtype)], {"value": value}).result

    def program_id(self, axis: int) -> Value:
        return self.op("program_id", [], [ScalarType(dt.int32)], {"axis": axis}).result

    def num_programs(self, axis: int) -> Value:
        return self.op("num_programs", [], [ScalarType(dt.int32)], {"axis": axis}).result

    def arange(self, start: int, end: int) -> Value:
        return self.op("arange", [], [TileType((end - start,), dt.int32)], {"start": start, "end": end}).result

    def full(self, shape: tuple[int, ...], scalar: Value) -> Value:
        return self.op("full", [scalar], [TileType(tuple(shape), scalar.dtype)]).result

    def tensor_dim(self, tensor: int, dim: int, stride: bool = False) -> Value:
        kind = "tensor_stride" if stride else "tensor_dim"
        return self.op(kind, [], [ScalarType(dt.int32)], {"tensor": tensor, "dim": dim}).result

    # ---- elementwise --------------------------------------------------------------------------------
    def binary(self, opname: str, a: Value, b: Value, dtype: dt.DType) -> Value:
        sa, sb = shape_of(a), shape_of(b)
        if sa is None and sb is None:
            shape = None
        else:
            shape = broadcast_shapes(sa or (), sb or ())
        return self.op("binary", [a, b], [make_type(shape, dtype)], {"op": opname}).result

    def compare(self, opname: str, a: Value, b: Value) -> Value:
        sa, sb = shape_of(a), shape_of(b)
        shape = None if sa is None and sb is None else broadcast_shapes(sa or (), sb or ())
        return self.op("compare", [a, b], [make_type(shape, dt.bool_)], {"op": opname}).result

    def unary(self, opname: str, x: Value, dtype: dt.DType | None = None) -> Value:
        return self.op("unary", [x], [make_type(shape_of(x), dtype or x.dtype)], {"op": opname}).result

    def select(self, c: Value, a: Value, b: Value) -> Value:
        shapes = [shape_of(v) for v in (c, a, b)]
        if all(s is None for s in shapes):
            shape = None
        else:
            shape = ()
            for s in shapes:
                shape = broadcast_shapes(shape, s or ())
        return self.op("select", [c, a, b], [make_type(shape, a.dtype)]).result

    def cast(self, x: Value, dtype: dt.DType, bitcast: bool = False, rounding: str | None = None) -> Value:
        attrs = {"dtype": dtype, "bitcast": bitcast}
        if rounding is not None:
            attrs["rounding"] = rounding  # "rtz": a narrowing float conversion rounds toward zero
        return self.op("cast", [x], [make_type(shape_of(x), dtype)], attrs).result

    def fma(self, a: Value, b: Value, c: Value) -> Value:
        shape = ()
        for s in (shape_of(a), shape_of(b), shape_of(c)):
            shape = broadcast_shapes(shape, s or ())
        return self.op("fma", [a, b, c], [TileType(shape, a.dtype)]).result

    # ---- shape ----------------------------------------------------------------------------------------
    def broadcast(self, x: Value, shape: tuple[int, ...]) -> Value:
        return self.op("broadcast", [x], [TileType(tuple(shape), x.dtype)], {"shape": tuple(shape)}).result

    def reshape(self, x: Value, shape: tuple[int, ...]) -> Value:
        return self.op("reshape", [x], [TileType(tuple(shape), x.dtype)], {"shape": tuple(shape)}).result

    def permute(self, x: Value, perm: tuple[int, ...]) -> Value:
        shape = tuple(x.shape[p] for p in perm)
        return self.op("permute", [x], [TileType(shape, x.dtype)], {"perm": tuple(perm)}).result

    def cat(self, a: Value, b: Value, axis: int) -> Value:
        shape = list(a.shape)
        shape[axis] += b.shape[axis]
        return self.op("cat", [a, b], [TileType(tuple(shape), a.dtype)], {"axis": axis}).result

    def slice(self, x: Value, starts: tuple[int, ...], sizes: tuple[int, ...]) -> Value:
        return self.op("slice", [x], [TileType(tuple(sizes), x.dtype)],
                       {"starts": tuple(starts), "sizes": tuple(sizes)}).result

    def take(self, x: Value, index: Value, axis: int) -> Value:
        shape = tuple(index.shape[d] if d == axis else x.shape[d] for d in range(len(x.shape)))
        return self.op("take", [x, index], [TileType(shape, x.dtype)], {"axis": axis}).result

    def sort(self, x: Value, axis: int, descending: bool) -> Value:
        return self.op("sort", [x], [TileType(x.shape, x.dtype)], {"axis": axis, "descending": descending}).result

    def histogram(self, x: Value, mask: Value | None, num_bins: int) -> Value:
        operands = [x] + ([mask] if mask is not None else [])
        return self.op("histogram", operands, [TileType((num_bins,), dt.int32)],
                       {"num_bins": num_bins, "has_mask": mask is not None}).result

    def to_scalar(self, x: Value) -> Value:
        return self.op("to_scalar", [x], [ScalarType(x.dtype)]).result

    # ---- reductions -----------------------------------------------------------------------------------
    def reduce(self, x: Value, opname: str, axis: int, keep_dims: bool, dtype: dt.DType) -> Value:
        shape = list(x.shape)
        if keep_dims:
            shape[axis] = 1
        else:
            del shape[axis]
        return self.op("reduce", [x], [TileType(tuple(shape), dtype)],
                       {"op": opname, "axis": axis, "keep_dims": keep_dims}).result

    def scan(self, x: Value, opname: str, axis: int, reverse: bool) -> Value:
        return self.op("scan", [x], [TileType(x.shape, x.dtype)],
                       {"op": opname, "axis": axis, "reverse": reverse}).result

    # ---- memory -----------------------------------------------------------------------------------
    def load(self, tensor: int, dtype: dt.DType, offsets: Value, mask: Value | None, other: Value | None,
             attrs: dict | None = None) -> Value:
        operands = [offsets] + ([mask] if mask is not None else []) + ([other] if other is not None else [])
        a = {"tensor": tensor, "has_mask": mask is not None, "has_other": other is not None}
        a.update(attrs or {})
        return self.op("load", operands, [make_type(shape_of(offsets), dtype)], a).result

    def store(self, tensor: int, offsets: Value, value: Value, mask: Value | None, attrs: dict | None = None) -> Op:
        operands = [offsets, value] + ([mask] if mask is not None else [])
        a = {"tensor": tensor, "has_mask": mask is not None}
        a.update(attrs or {})
        return self.op("store", operands, [], a)

    def atomic(self, opname: str, tensor: int, dtype: dt.DType, offsets: Value, value: Value,
               mask: Value | None, cmp: Value | None = None) -> Value:
        operands = [offsets, value] + ([mask] if mask is not None else []) + ([cmp] if cmp is not None else [])
        return self.op("atomic", operands, [make_type(shape_of(offsets), dtype)],
                       {"op": opname, "tensor": tensor, "has_mask": mask is not None,
                        "has_cmp": cmp is not None}).result

    def dot(self, a: Value, b: Value, acc: Value | None, out_dtype: dt.DType) -> Value:
        shape = a.shape[:-1] + (b.shape[-1],)
        operands = [a, b] + ([acc] if acc is not None else [])
        return self.op("dot", operands, [TileType(shape, out_dtype)]).result

    def print(self, prefix: str, values: list[Value], hex: bool = False) -> Op:
        return self.op("print", values, [], {"prefix": prefix, "hex": hex})

    # ---- control flow -------------------------------------------------------------------------------
    def for_op(self, lb: Value, ub: Value, step: Value, inits: list[Value]) -> Op:
        body = Block([Value(lb.type, name="iv")] + [Value(v.type) for v in inits])
        return self.op("for", [lb, ub, step] + inits, [v.type for v in inits], regions=[body])

    def while_op(self, inits: list[Value]) -> Op:
        cond = Block([Value(v.type) for v in inits])
        body = Block([Value(v.type) for v in inits])
        return self.op("while", inits, [v.type for v in inits], regions=[cond, body])

    def yield_(self, values: list[Value]) -> Op:
        return self.op("yield", values, [])

    def exit(self, kind: str, target: Op | None, values: list[Value]) -> Op:
        return self.op(kind, values, [], {"target": target})
