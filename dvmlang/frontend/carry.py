"""Values that flow through runtime control flow: which parts of them are carried, and with what type.

A kernel value is made of *parts*: a tile or scalar is one part; a pointer is its tile offset and its
scalar offset; a block pointer is its shape, strides and offsets. Where paths meet (after an ``if``, at a
loop's back edge, at the returns of an inlined kernel) a ``Tmpl`` records, part by part, whether every
path holds the very same object (the part stays fixed and costs nothing) or the paths differ (the part
is carried, as a register or a tile, with one agreed type). This is what lets ``ptrs += BLOCK * stride``
in a loop carry a single scalar while the offset tile stays an affine expression the access analysis
turns into a DMA.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import KernelTypeError
from ..ir.core import ScalarType, TileType, Value
from .values import PY_NUMBER, block_pointer, pointer, tensor, unwrap


class Tmpl:
    __slots__ = ("kind", "meta", "parts", "carried")

    def __init__(self, kind, meta, parts, carried):
        self.kind = kind
        self.meta = meta
        self.parts = parts  # carried positions hold a placeholder tensor giving the type
        self.carried = carried

    @property
    def any_carried(self) -> bool:
        return any(self.carried)

    def sig(self):
        return (self.kind, self.meta, tuple(p.handle.type if c else id(p) if isinstance(p, tensor) else ("c", p)
                                            for p, c in zip(self.parts, self.carried)))


def parts_of(v):
    v = unwrap(v)
    if isinstance(v, tensor):
        return "t", None, [v]
    if isinstance(v, pointer):
        return "p", (v.param, v.dtype, v.name), [v.offset, v.scalar]
    if isinstance(v, block_pointer):
        return "bp", (v.param, v.dtype, v.block_shape, v.order, v.name), \
            list(v.shape_vals) + list(v.strides) + list(v.offsets)
    return "c", None, [v]


def assemble(kind, meta, parts):
    if kind == "p":
        return pointer(meta[0], meta[1], parts[0], meta[2], parts[1])
    if kind == "bp":
        param, dtype, block_shape, order, name = meta
        r = len(block_shape)
        return block_pointer(param, dtype, tuple(parts[:r]), tuple(parts[r:2 * r]), tuple(parts[2 * r:]),
                             block_shape, order, name)
    return parts[0]


def handles(v, t: Tmpl) -> list[Value]:
    """The IR values of ``v`` at the carried positions of ``t`` (``v`` already coerced to ``t``)."""
    _, _, ps = parts_of(v)
    return [unwrap(p).handle for p, c in zip(ps, t.carried) if c]


def types(t: Tmpl) -> list:
    return [p.handle.type for p, c in zip(t.parts, t.carried) if c]


def rebuild(t: Tmpl, values) -> object:
    """A value shaped like ``t`` whose carried parts are taken, in order, from the iterator ``values``."""
    it = iter(values)
    parts = [tensor(next(it)) if c else p for p, c in zip(t.parts, t.carried)]
    return assemble(t.kind, t.meta, parts)


def placeholder(t: Tmpl):
    return rebuild(t, [Value(ty) for ty in types(t)])


def same(a, b) -> bool:
    a, b = unwrap(a), unwrap(b)
    if isinstance(a, (tensor, pointer, block_pointer)) or isinstance(b, (tensor, pointer, block_pointer)):
        return a is b
    return type(a) is type(b) and a == b


def identical(vals) -> bool:
    return all(same(v, vals[0]) for v in vals[1:])


def holds_local(v, local) -> bool:
    """Whether ``v`` holds an IR value whose id is in ``local`` (defined inside the paths being merged, so it
    must be carried out of them even where every path agrees)."""
    v = unwrap(v)
    if isinstance(v, (tuple, list)):
        return any(holds_local(x, local) for x in v)
    kind, _, ps = parts_of(v)
    if kind == "c":
        return False
    return any(isinstance(unwrap(p), tensor) and unwrap(p).handle.id in local for p in ps)


def _fixed(col, local) -> bool:
    """A part every path holds as the very same object, visible after the paths: it stays fixed."""
    return identical(col) and not holds_local(col[0], local)


def _part_type(values, loop: bool, describe):
    """The one type a carried part takes, from the values it holds on each path."""
    runtime = [v for v in values if isinstance(v, tensor)]
    numbers = [v for v in values if isinstance(v, PY_NUMBER)]
    others = [v for v in values if v is not None and not isinstance(v, (tensor,) + PY_NUMBER)]
    if others:
        raise KernelTypeError(f"{describe()} holds {kind_of(others[0])}, which cannot change inside runtime control "
                              "flow", hint="compile-time values other than numbers must be the same on every path")
    if not runtime:
        if any(isinstance(v, float) for v in numbers):
            return ScalarType(dt.float32)
        if numbers and all(isinstance(v, bool) for v in numbers):
            return ScalarType(dt.bool_)
        big = any(isinstance(v, int) and not dt.int_fits(v, dt.int32) for v in numbers)
        return ScalarType(dt.int64 if big else dt.int32)
    shapes = {v.shape for v in runtime}
    tiles = {v.is_tile for v in runtime}
    # a scalar and a 0-d tile (a reduction result) hold one value in two places: carry the 0-d tile
    scalar_or_0d = len(tiles) > 1 and shapes == {()}
    if (len(shapes) > 1 or len(tiles) > 1) and not scalar_or_0d:
        desc = " vs ".join(sorted({kind_of(v) for v in runtime}))
        hint = ("initialise it with the final shape, for example dl.zeros((BLOCK,), dl.float32)" if loop
                else "give it the same shape on every path")
        raise KernelTypeError(f"{describe()} changes shape: {desc}", hint=hint)
    dtypes = {v.dtype for v in runtime}
    first = next(v for v in runtime if v.is_tile) if scalar_or_0d else runtime[0]
    if len(dtypes) > 1:
        if all(d.is_int for d in dtypes) and describe.pointer_part:
            d = dt.int64 if dt.int64 in dtypes else dt.promote(*list(dtypes)[:2])
            return TileType(first.shape, d) if first.is_tile else ScalarType(d)
        if loop:
            raise KernelTypeError(f"loop-carried {describe()} changes type: it is {kind_of(runtime[0])} before the "
                                  f"loop and {kind_of(runtime[-1])} in the body",
                                  hint=f"cast it explicitly, for example {describe.name} = {describe.name}.to("
                                       f"{runtime[0].dtype!r}), or initialise it with the type the loop produces")
        raise KernelTypeError(f"{describe()} has different types on different paths: "
                              f"{', '.join(sorted(str(d) for d in dtypes))}", hint="cast one branch with .to(...)")
    return first.handle.type


class _Describe:
    def __init__(self, name, what="", pointer_part=False):
        self.name = name
        self.what = what
        self.pointer_part = pointer_part

    def __call__(self):
        return f"`{self.name}`{self.what}"


def unify(vals, name: str, loop: bool = False, local=frozenset()) -> Tmpl:
    """The template every value in ``vals`` (one per path) can be converted to. ``local`` holds the ids of
    the IR values defined inside the paths (see ``holds_local``)."""
    vals = [unwrap(v) for v in vals]
    kinds = {parts_of(v)[0] for v in vals}
    if kinds <= {"c"}:
        if _fixed(vals, local):
            return Tmpl("c", None, [vals[0]], [False])
        ty = _part_type(vals, loop, _Describe(name))
        return Tmpl("t", None, [tensor(Value(ty))], [True])
    if "c" in kinds and kinds != {"c", "t"}:
        raise KernelTypeError(f"`{name}` is a pointer on one path and {kind_of(next(v for v in vals if parts_of(v)[0] == 'c'))}"
                              " on another", hint="keep one pointer per name")
    runtime_kinds = kinds - {"c"}
    if len(runtime_kinds) > 1:
        raise KernelTypeError(f"`{name}` is a value on one path and a pointer on another",
                              hint="use separate names for pointers and values")
    kind = runtime_kinds.pop()
    if kind == "t":
        ty = _part_type(vals, loop, _Describe(name))
        if _fixed(vals, local):
            return Tmpl("t", None, [vals[0]], [False])
        return Tmpl("t", None, [tensor(Value(ty))], [True])
    metas = [parts_of(v)[1] for v in vals]
    if kind == "p":
        if any(m[0] != metas[0][0] for m in metas):
            raise KernelTypeError(f"`{name}` points into different tensors on different paths",
                                  hint="keep one pointer per tensor")
    elif any(m[0] != metas[0][0] or m[2] != metas[0][2] for m in metas):
        raise KernelTypeError(f"`{name}` must stay a block pointer into one tensor with one block shape")
    columns = list(zip(*[parts_of(v)[2] for v in vals]))
    parts, carried = [], []
    for i, col in enumerate(columns):
        if _fixed(col, local):
            parts.append(col[0])
            carried.append(False)
            continue
        what = (" (its offsets)" if i == 0 else " (its scalar offset)") if kind == "p" else " (a block pointer part)"
        col = [0 if v is None else v for v in col]
        ty = _part_type(col, loop, _Describe(name, what, pointer_part=True))
        parts.append(tensor(Value(ty)))
        carried.append(True)
    return Tmpl(kind, metas[0], parts, carried)


def coerce(sem, v, t: Tmpl, name: str):
    """Convert ``v`` to template ``t``: fixed parts must be the same objects, carried parts are cast."""
    v = unwrap(v)
    if t.kind in ("t", "c"):
        if not t.carried[0]:
            return v
        return _coerce_part(sem, v, t.parts[0], name)
    kind, meta, ps = parts_of(v)
    if kind != t.kind or meta[0] != t.meta[0]:
        raise KernelTypeError(f"`{name}` must stay a pointer into {t.meta[-1]} on every path")
    out = []
    for p, tp, c in zip(ps, t.parts, t.carried):
        if c:
            out.append(_coerce_part(sem, 0 if p is None else p, tp, name))
        else:
            out.append(p)
    return assemble(t.kind, t.meta, out)


def _coerce_part(sem, v, template: tensor, name):
    if isinstance(v, (pointer, block_pointer)):
        raise KernelTypeError(f"`{name}` is a pointer on one path but a value elsewhere")
    if not isinstance(v, tensor):
        if not isinstance(v, PY_NUMBER):
            raise KernelTypeError(f"`{name}` is {kind_of(v)}, expected {kind_of(template)}")
        s = sem.const(v, template.dtype)
        return sem.splat(s, template.shape) if template.is_tile else s
    if v.is_tile != template.is_tile or v.shape != template.shape:
        if v.is_scalar and template.is_tile:
            return sem.splat(sem.cast(v, template.dtype), template.shape)
        raise KernelTypeError(f"`{name}` is {kind_of(v)}, expected {kind_of(template)}")
    if v.dtype is not template.dtype:
        return sem.cast(v, template.dtype)
    return v


def kind_of(v) -> str:
    """``v`` described for a message: "a tile<...>", "a scalar int32", "the constant 3", ..."""
    v = unwrap(v)
    if isinstance(v, tensor):
        return f"a {v.handle.type}" if v.is_tile else f"a scalar {v.dtype}"
    if isinstance(v, pointer):
        return f"a pointer into {v.name}"
    if isinstance(v, block_pointer):
        return f"a block pointer into {v.name}"
    if isinstance(v, bool):
        return f"the constant {v}"
    if isinstance(v, (int, float)):
        return f"the constant {v!r}"
    if v is None:
        return "None"
    return f"a {type(v).__name__}"
