"""Check the invariants of tile IR: every use sees a definition, types fit each op, blocks end properly,
and exits leave a construct that encloses them. A failure is a compiler bug, reported as an
``IRVerificationError`` at the op's source location."""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import IRVerificationError
from ..opdefs import KINDS
from .builder import broadcast_shapes
from .core import EXITS, TERMINATORS, Block, Function, Op, ScalarType, TileType, ends_in_exit

KNOWN = frozenset(KINDS)


def verify(fn: Function) -> None:
    _Verifier(fn).run()


class _Verifier:
    def __init__(self, fn: Function):
        self.fn = fn

    def fail(self, op: Op | None, msg: str):
        raise IRVerificationError(f"IR verification failed: {msg}", op.loc if op is not None else self.fn.loc,
                                  hint="this is a dvmlang bug; please report it with the kernel source")

    def run(self):
        visible = {p.value.id for p in self.fn.params if p.value is not None}
        self.block(self.fn.body, visible, [], top=True)

    def block(self, block: Block, visible: set[int], enclosing: list[Op], top: bool = False):
        visible = set(visible) | {a.id for a in block.args}
        for i, op in enumerate(block.ops):
            if op.kind not in KNOWN:
                self.fail(op, f"unknown op kind {op.kind!r}")
            for v in op.operands:
                if v.id not in visible:
                    self.fail(op, f"operand {v!r} of {op.kind} is used before it is defined")
            if op.kind in TERMINATORS and i != len(block.ops) - 1:
                self.fail(op, f"{op.kind} must end its block")
            self.check(op, enclosing, top)
            for r in op.regions:
                self.block(r, visible, enclosing + [op])
            visible.update(r.id for r in op.results)
        if not top and block.parent is not None and block.parent.kind != "if":
            if block.terminator is None and not ends_in_exit(block):
                self.fail(block.parent, f"a region of {block.parent.kind} has no terminator")

    def check(self, op: Op, enclosing: list[Op], top: bool):
        k = op.kind
        types = [v.type for v in op.operands]
        if k == "binary":
            a, b = types
            r = op.result.type
            if op.attrs["op"] not in ("shl", "shr") and a.dtype is not b.dtype:
                self.fail(op, f"binary {op.attrs['op']} mixes {a.dtype} and {b.dtype}")
            self._shape(op, [a, b], r)
        elif k == "compare":
            if types[0].dtype is not types[1].dtype:
                self.fail(op, f"compare mixes {types[0].dtype} and {types[1].dtype}")
            if op.result.dtype is not dt.bool_:
                self.fail(op, "compare must produce int1")
        elif k == "select":
            if types[0].dtype is not dt.bool_:
                self.fail(op, "select condition must be int1")
            if types[1].dtype is not types[2].dtype:
                self.fail(op, "select branches must share a dtype")
        elif k in ("for",):
            lb, ub, step = types[:3]
            if not all(isinstance(t, ScalarType) and t.dtype.is_int for t in (lb, ub, step)):
                self.fail(op, "for bounds must be integer scalars")
            self._carried(op, op.operands[3:], op.regions[0].args[1:])
        elif k == "while":
            self._carried(op, op.operands, op.regions[0].args)
            self._carried(op, op.operands, op.regions[1].args)
        elif k == "if":
            if not (isinstance(types[0], ScalarType) and types[0].dtype is dt.bool_):
                self.fail(op, "if condition must be an int1 scalar")
        elif k == "yield":
            parent = op.parent.parent if op.parent is not None else None
            if parent is None:
                self.fail(op, "yield outside a region")
            expected = self._yield_types(parent, op)
            if expected is not None and [v.type for v in op.operands] != expected:
                self.fail(op, f"yield types {[str(v.type) for v in op.operands]} do not match "
                              f"{[str(t) for t in expected]}")
        elif k in EXITS:
            target = op.attrs.get("target")
            if target is not None and target not in enclosing:
                self.fail(op, f"{k} leaves a construct that does not enclose it")
            if k in ("break", "continue") and (target is None or target.kind not in ("for", "while")):
                self.fail(op, f"{k} must target a loop")
            if target is not None:
                want = [r.type for r in target.results]
                if [v.type for v in op.operands] != want:
                    self.fail(op, f"{k} carries {[str(v.type) for v in op.operands]}, expected {want}")
        elif k == "take":
            x, idx = types
            ax = op.attrs["axis"]
            if not (isinstance(x, TileType) and isinstance(idx, TileType)) or not idx.dtype.is_int or \
                    len(x.shape) != len(idx.shape) or not 0 <= ax < len(x.shape) or \
                    any(idx.shape[d] not in (1, x.shape[d]) for d in range(len(x.shape)) if d != ax):
                self.fail(op, "take needs a tile and an integer index tile of its rank that fit along the axis")
        elif k == "sort":
            if not isinstance(types[0], TileType) or not 0 <= op.attrs["axis"] < len(types[0].shape):
                self.fail(op, "sort needs a tile and an axis inside it")
        elif k == "histogram":
            x = types[0]
            if not isinstance(x, TileType) or len(x.shape) != 1 or not x.dtype.is_int or \
                    (op.attrs["has_mask"] and (types[1].dtype is not dt.bool_ or types[1].shape != x.shape)):
                self.fail(op, "histogram needs a 1-D integer tile (and an int1 mask of its shape)")
        elif k == "dot":
            a, b = types[0], types[1]
            if not (isinstance(a, TileType) and isinstance(b, TileType)) or len(a.shape) not in (2, 3) or \
                    len(b.shape) != len(a.shape) or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
                self.fail(op, "dot operands do not chain: (M, K) @ (K, N) or (B, M, K) @ (B, K, N)")
            want = a.shape[:-1] + b.shape[-1:]
            if op.result.type.shape != want or (len(types) > 2 and getattr(types[2], "shape", None) != want):
                self.fail(op, f"dot result and accumulator must have the product's shape {want}")
        elif k in ("load", "gather", "atomic", "store", "scatter", "dma_load", "dma_store"):
            t = op.attrs.get("tensor")
            if not isinstance(t, int) or not (0 <= t < len(self.fn.params)) or self.fn.params[t].kind != "tensor":
                self.fail(op, f"{k} names parameter {t!r}, which is not a tensor")

    def _shape(self, op, operand_types, result_type):
        shape = ()
        for t in operand_types:
            if isinstance(t, TileType):
                shape = broadcast_shapes(shape, t.shape)
                if shape is None:
                    self.fail(op, "operand shapes do not broadcast")
        if isinstance(result_type, TileType) and shape != result_type.shape:
            self.fail(op, f"result shape {result_type.shape} is not the broadcast shape {shape}")

    def _carried(self, op, inits, args):
        if [v.type for v in inits] != [a.type for a in args] or len(op.results) != len(inits):
            self.fail(op, "loop-carried values change type")

    def _yield_types(self, parent: Op, op: Op):
        if parent.kind == "for":
            return [r.type for r in parent.results]
        if parent.kind == "while":
            if op.parent is parent.regions[0]:
                return None  # condition block yields the condition followed by nothing
            return [r.type for r in parent.results]
        if parent.kind in ("if", "scope"):
            return [r.type for r in parent.results]
        return None
