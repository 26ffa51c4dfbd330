"""Expressions: constants, names (locals, closures, globals read as compile-time constants), attributes
(``x.dtype``, tile methods, descriptor methods), operators and comparisons with constant folding, ``and``/
``or`` and conditional expressions, tuples, f-strings, subscripts and tile slicing.

A mixin of ``CodeGen`` (see ``codegen``); the typed operations themselves are the ``Semantic``'s.
"""

from __future__ import annotations

import ast
import builtins
import types

import numpy as np

from .. import dtypes as dt
from .. import language as dl
from ..errors import KernelTypeError, UnsupportedSyntaxError
from .blockptr import tensor_descriptor
from .carry import kind_of
from .context import GlobalRead, is_runtime_value
from .values import Shape, Undefined, constexpr, pointer, tensor, unwrap

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
          ast.LShift: "shl", ast.RShift: "shr"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert", ast.Not: "not"}


class ExpressionsMixin:
    """The expression visitors of the code generator."""

    def visit_Constant(self, node):
        return node.value

    def visit_Name(self, node):
        return self.lookup(node.id, node)

    def lookup(self, name, node):
        if name in self.names:
            v = self.names[name]
            if isinstance(v, Undefined):
                raise self.error(KernelTypeError, node, v.reason)
            return v
        if name in self.closure:
            value, cell = self.closure[name]
            return self._global_value(name, value, node, cell)
        if name in self.globals:
            return self._global_value(name, self.globals[name], node)
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.error(KernelTypeError, node, f"name `{name}` is not defined")

    def _global_value(self, name, value, node, namespace=None):
        """``value``, read from the module's globals (or a closure's cell, ``namespace``) as a constant."""
        if isinstance(value, constexpr):
            value = value.value
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)) or \
                callable(value):
            return value
        if isinstance(value, (bool, int, float, str, type(None), dt.DType, tuple)):
            ns = self.globals if namespace is None else namespace
            self.build.global_reads[(id(ns), name)] = GlobalRead(ns, name, value)
            return value
        if isinstance(value, np.ndarray):
            raise self.error(KernelTypeError, node, f"global `{name}` is a numpy array; kernels cannot read arrays "
                             "from globals", "pass the array as a kernel argument")
        raise self.error(KernelTypeError, node, f"global `{name}` is {kind_of(value)}, which a kernel cannot use",
                         "kernels read numbers, dtypes and dl.constexpr values from globals")

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        attr = node.attr
        base_u = unwrap(base)
        if is_runtime_value(base_u):
            return self._tensor_attr(base_u, attr, node)
        if isinstance(base_u, dt.DType) and attr == "element_ty":
            return base_u  # ``ptr.type.element_ty`` where ``ptr.type`` is the element dtype
        if attr == "dtype" and isinstance(base_u, (bool, int, float)):
            return dt.scalar_dtype_of_python(base_u)  # as Triton, where ``value = 1`` is an int32 scalar
        try:
            return getattr(base_u, attr)
        except AttributeError:
            raise self.error(KernelTypeError, node, f"{kind_of(base_u)} has no attribute `{attr}`") from None

    def _tensor_attr(self, t, attr, node):
        if isinstance(t, tensor_descriptor):
            got = t.attr(self.sem, attr)
            if got is None:
                raise self.error(KernelTypeError, node, f"a tensor descriptor has no attribute `{attr}`",
                                 "it has load, store, shape, strides, block_shape and dtype")
            return method(got) if callable(got) else got
        if attr in ("dtype", "type"):
            # a pointer's .dtype is its element dtype (docs/triton.md); .type, Triton's pointer or block type,
            # is given as the same dtype, whose .element_ty and .scalar are itself (ptr.type.element_ty)
            return t.dtype
        if attr == "shape":
            return Shape(t.shape)
        if attr == "T" and isinstance(t, tensor):
            return self.sem.trans(t)
        if attr == "numel" and isinstance(t, tensor):
            return t.numel
        if attr in dl.TENSOR_METHODS:
            fn = getattr(dl, dl.TENSOR_METHODS[attr])
            return BoundMethod(fn, t)
        raise self.error(KernelTypeError, node, f"{kind_of(t)} has no attribute `{attr}`")

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            raise self.error(UnsupportedSyntaxError, node, "the `@` operator is not supported", "use dl.dot(a, b)")
        lhs = self.visit(node.left)
        rhs = self.visit(node.right)
        return self.sem.binary(BINOPS[type(node.op)], lhs, rhs)

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        return self.sem.unary(_UNARY[type(node.op)], v)

    def visit_BoolOp(self, node):
        kind = "and" if isinstance(node.op, ast.And) else "or"
        result = self.visit(node.values[0])
        for expr in node.values[1:]:
            r = unwrap(result)
            if not is_runtime_value(r):
                if (kind == "and" and not r) or (kind == "or" and r):
                    return result
                result = self.visit(expr)
                continue
            rhs = self.visit(expr)
            if not is_runtime_value(rhs):
                if (kind == "and" and rhs) or (kind == "or" and not rhs):
                    result = self.sem.truth(r)
                else:
                    result = bool(rhs)
                continue
            result = self.sem.logical(kind, r, rhs)
        return result

    def visit_Compare(self, node):
        left = self.visit(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)):
                right = self.visit(comp)
                l, r = unwrap(left), unwrap(right)
                if isinstance(op, (ast.Is, ast.IsNot)) and (l is None) != (r is None):
                    # a runtime value (a pointer, a tile) is never None: Triton folds `ptr is not None` to True
                    v = isinstance(op, ast.IsNot)
                elif is_runtime_value(left) or is_runtime_value(right):
                    raise self.error(UnsupportedSyntaxError, node, f"`{type(op).__name__}` only works on compile-time "
                                     "values", "compare runtime values with == and !=")
                else:
                    v = {ast.In: lambda: l in r, ast.NotIn: lambda: l not in r, ast.Is: lambda: l is r,
                         ast.IsNot: lambda: l is not r}[type(op)]()
            else:
                right = self.visit(comp)
                v = self.sem.compare(_CMPOPS[type(op)], left, right)
            if result is None:
                result = v
            elif is_runtime_value(result) or is_runtime_value(v):
                result = self.sem.binary("and", result, v)
            else:
                result = result and v
            left = right
        return result

    def visit_IfExp(self, node):
        cond = unwrap(self.visit(node.test))
        if not is_runtime_value(cond):
            return self.visit(node.body if cond else node.orelse)
        cond = self.sem.truth(self.sem.as_scalar(cond, "a conditional expression"))
        key = f"__ifexp_{id(node)}"

        def branch(expr):
            def run():
                self.names[key] = self.visit(expr)
                return False
            return run

        try:
            self._runtime_if(node, cond, branch(node.body), branch(node.orelse))
        except KernelTypeError as e:
            if f"`{key}`" not in e.message:
                raise
            # the merge names the value by its internal key: name the expression instead
            raise self.error(KernelTypeError, node, e.message.replace(f"`{key}`", "the conditional expression"),
                             e.hint) from None
        value = self.names.pop(key, None)  # absent when both sides give None (two stores)
        if isinstance(value, Undefined):
            raise self.error(KernelTypeError, node, "both sides of a conditional expression must give a value")
        return value

    def visit_Tuple(self, node):
        return tuple(self._visit_elts(node.elts))

    def visit_List(self, node):
        return list(self._visit_elts(node.elts))

    def _visit_elts(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = unwrap(self.visit(e.value))
                out.extend(v)
            else:
                out.append(self.visit(e))
        return out

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = unwrap(self.visit(v.value))
                if is_runtime_value(val):
                    raise self.error(UnsupportedSyntaxError, v, "f-strings can only format compile-time values",
                                     "print runtime values with print(prefix, value)")
                spec = self.visit(v.format_spec) if v.format_spec is not None else ""
                if v.conversion == ord("r"):
                    val = repr(val)
                elif v.conversion == ord("s"):
                    val = str(val)
                parts.append(format(val, spec))
        return "".join(parts)

    def visit_FormattedValue(self, node):
        return self.visit_JoinedStr(ast.JoinedStr(values=[node]))

    def visit_Subscript(self, node):
        base = unwrap(self.visit(node.value))
        idx = self.visit(node.slice)
        if isinstance(base, (tensor, pointer)):
            return self._index_tensor(base, idx, node)
        if is_runtime_value(idx):
            raise self.error(KernelTypeError, node, "a compile-time sequence cannot be indexed by a runtime value")
        try:
            return base[unwrap(idx)]
        except Exception as e:  # noqa: BLE001
            raise self.error(KernelTypeError, node, f"cannot index {kind_of(base)}: {e}") from None

    def visit_Slice(self, node):
        lo = self.visit(node.lower) if node.lower is not None else None
        hi = self.visit(node.upper) if node.upper is not None else None
        st = self.visit(node.step) if node.step is not None else None
        return slice(unwrap(lo), unwrap(hi), unwrap(st))

    def _index_tensor(self, base, idx, node):
        idx = unwrap(idx)
        if not isinstance(idx, tuple):
            idx = (idx,)
        if isinstance(base, pointer):
            if _adds_axes_only(idx):
                return self.sem.ptr_with(base, lambda off: self._index_tensor(off, idx, node))
            raise self.error(UnsupportedSyntaxError, node, "unsupported tensor index on a pointer: pointers only "
                             "take None (a new unit dimension) and full slices `:`, as in Triton",
                             "offset the pointer instead: ptr + 10 + dl.arange(0, BLOCK)")
        shape = list(base.shape)
        if not base.shape and _adds_axes_only(idx):
            # as Triton: each None adds a unit dimension and a full slice keeps the value as it is
            n = sum(1 for i in idx if i is None)
            return self.sem.reshape(base, (1,) * n) if n else base
        n_real = sum(1 for i in idx if i is not None)
        if n_real > len(shape):
            raise self.error(KernelTypeError, node, f"too many indices for a tile of shape {base.shape}")
        starts, sizes, out_shape = [], [], []
        d = 0
        drop = []
        for i in idx:
            if i is None:
                out_shape.append(1)
                continue
            if isinstance(i, slice):
                lo, hi, st = i.start, i.stop, i.step
                if any(is_runtime_value(v) for v in (lo, hi, st)) or (st not in (None, 1)):
                    raise self.error(UnsupportedSyntaxError, node, "tile slices need compile-time bounds and step 1",
                                     "use dl.where with a mask for data-dependent selection")
                r = builtins.range(shape[d])[slice(lo, hi)]
                if len(r) == 0:
                    raise self.error(KernelTypeError, node, f"the slice selects nothing from dimension {d} of "
                                     f"size {shape[d]}")
                starts.append(r.start)
                sizes.append(len(r))
                out_shape.append(len(r))
            elif isinstance(i, int):
                if not -shape[d] <= i < shape[d]:
                    raise self.error(KernelTypeError, node, f"index {i} is out of range for dimension {d} of size "
                                     f"{shape[d]}")
                starts.append(i % shape[d])
                sizes.append(1)
                drop.append(d)
            elif i is Ellipsis:
                raise self.error(UnsupportedSyntaxError, node, "`...` is not supported in tile indexing")
            else:
                raise self.error(UnsupportedSyntaxError, node, "tiles can only be indexed by None, compile-time "
                                 "integers and slices", "use a mask with dl.where to select by runtime values")
            d += 1
        while d < len(shape):
            starts.append(0)
            sizes.append(shape[d])
            out_shape.append(shape[d])
            d += 1
        v = base
        if tuple(sizes) != tuple(shape):
            v = self.sem.slice(v, starts, sizes)
        if tuple(out_shape) != v.shape:
            v = self.sem.reshape(v, tuple(out_shape)) if out_shape else self.sem.as_scalar(v)
        return v

    def visit_Starred(self, node):
        raise self.error(UnsupportedSyntaxError, node, "starred expressions are only allowed in calls and tuples")


def method(f):
    """A compiler-provided method of a kernel value, callable with runtime arguments."""
    def m(*args, _sem=None, **kw):
        return f(*args, **kw)
    m.__dvm_builtin__ = True
    return m


class BoundMethod:
    """``x.sum`` and the like: a ``dl`` function with its first argument bound (called by ``CallsMixin.call``)."""

    __slots__ = ("fn", "self")

    def __init__(self, fn, self_):
        self.fn = fn
        self.self = self_


def _adds_axes_only(idx: tuple) -> bool:
    """An index of only ``None`` (a new unit axis) and full slices ``:`` (an axis kept as it is)."""
    return all(i is None or (isinstance(i, slice) and i == slice(None)) for i in idx)
