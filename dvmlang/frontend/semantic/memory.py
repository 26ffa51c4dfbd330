"""Pointers and memory on kernel values: pointer arithmetic (a tile part and a scalar part kept apart),
``load``, ``store`` and atomics with masks and fill values, scalar accesses through one-element tiles.
"""

from __future__ import annotations

from ... import dtypes as dt
from ...errors import KernelTypeError
from ...ir.builder import broadcast_shapes
from ..values import PY_NUMBER, block_pointer, pointer, tensor, unwrap
from .arith import SYMBOL
from .shapes import shape_text


class MemoryOps:
    """The ``Semantic``'s pointer arithmetic, loads, stores and atomics."""

    # ---- pointers -------------------------------------------------------------------------------------
    def pointer_arith(self, opname, a, b):
        if isinstance(b, pointer) and opname == "add":
            a, b = b, a
        if not isinstance(a, pointer) or isinstance(b, pointer) or opname not in ("add", "sub"):
            raise KernelTypeError(f"`{SYMBOL.get(opname, opname)}` is not defined on pointers",
                                  hint="pointers support `ptr + offsets` and `ptr - offsets`")
        off = self.to_tensor(b) if not isinstance(unwrap(b), PY_NUMBER) else unwrap(b)
        if isinstance(off, tensor) and not (off.dtype.is_int or off.dtype.is_bool):
            raise KernelTypeError(f"pointer offsets must be integers, got {off.dtype}",
                                  hint="cast the offsets with .to(dl.int32)")
        if isinstance(off, float):
            raise KernelTypeError("pointer offsets must be integers, got a float")
        if opname == "sub":
            off = self.unary("neg", off)
        if isinstance(off, tensor) and off.dtype.is_bool:
            off = self.cast(off, dt.int32)
        if isinstance(off, tensor) and off.is_tile and off.shape == ():
            off = self.as_scalar(off)  # a 0-d tile (a reduction result) offsets the whole pointer: a scalar
        if isinstance(off, tensor) and off.is_tile:
            new = off if a.offset is None else self.binary("add", a.offset, off)
            return pointer(a.param, a.dtype, new, a.name, a.scalar)
        # a scalar increment stays apart from the offset tile
        s = off if a.scalar is None else self.binary("add", a.scalar, off)
        if not isinstance(s, tensor):
            s = self.to_tensor(s, dt.int32)
        return pointer(a.param, a.dtype, a.offset, a.name, s)

    def ptr_offsets(self, ptr: pointer) -> tensor:
        """The full element offset of a pointer (tile part plus scalar part)."""
        off, s = ptr.offset, ptr.scalar
        if off is None:
            return s if s is not None else self.const(0)
        if s is None:
            return off
        return self.binary("add", off, s)

    def ptr_with(self, ptr: pointer, fn) -> pointer:
        """Apply a shape operation to the tile part of a pointer (a scalar-only pointer becomes a tile)."""
        off = ptr.offset if ptr.offset is not None else self.const(0)
        return pointer(ptr.param, ptr.dtype, fn(off), ptr.name, ptr.scalar)

    # ---- memory ---------------------------------------------------------------------------------------
    def _mem_shapes(self, ptr: pointer, *others):
        shape = ptr.shape
        for o in others:
            if isinstance(o, tensor) and o.is_tile:
                s = broadcast_shapes(shape, o.shape)
                if s is None:
                    raise KernelTypeError(f"pointer shape {shape_text(ptr.shape)} and operand shape {o.shape} "
                                          "do not broadcast")
                shape = s
        return shape

    def _offsets(self, ptr: pointer, shape) -> tensor:
        off = self.ptr_offsets(ptr)
        if shape and off.shape != shape:
            off = self.broadcast_to(off, shape)
        return off

    def _mask(self, mask, shape):
        mask = unwrap(mask)
        if mask is None:
            return None
        if not isinstance(mask, tensor):
            return None if mask else self.splat(self.const(False, dt.bool_), shape) if shape else self.const(False, dt.bool_)
        mask = self.truth(mask)
        if shape and mask.shape != shape:
            mask = self.broadcast_to(mask, shape)
        return mask

    def load(self, ptr, mask=None, other=None, attrs=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.load expects a pointer, got {_describe(ptr)}",
                                  hint="pass a tensor parameter plus offsets, for example x_ptr + offs")
        m = unwrap(mask)
        o = unwrap(other)
        if ptr.shape == () and isinstance(m, tensor) and m.numel == 1 and not (isinstance(o, tensor) and o.numel > 1):
            # a masked scalar load: one masked element through the vector unit, then into a register
            o1 = self._one(o) if isinstance(o, tensor) and o.is_tile else o
            return self.as_scalar(self.load(self._one_element(ptr), self._one(m, mask=True), o1, attrs))
        shape = self._mem_shapes(ptr, m if isinstance(m, tensor) else None, o if isinstance(o, tensor) else None)
        offs = self._offsets(ptr, shape)
        mk = self._mask(m, shape)
        oth = None
        if o is not None and mk is not None:
            oth = self.cast(o, ptr.dtype)
            if oth.is_tile and oth.handle.op is not None and oth.handle.op.kind == "full":
                oth = tensor(oth.handle.op.operands[0])  # a splat: its scalar is the fill value
            elif oth.is_tile:
                # a fill value that varies per element: load the masked elements, then select
                if shape and oth.shape != shape:
                    oth = self.broadcast_to(oth, shape)
                h = self.b.load(ptr.param, ptr.dtype, offs.handle, mk.handle, None, attrs)
                return self.where(mk, tensor(h), oth)
        h = self.b.load(ptr.param, ptr.dtype, offs.handle, mk.handle if mk is not None else None,
                        oth.handle if oth is not None else None, attrs)
        return tensor(h)

    def _one_element(self, ptr: pointer) -> pointer:
        """A scalar pointer as a pointer tile of shape (1,)."""
        return pointer(ptr.param, ptr.dtype, self.splat(self.ptr_offsets(ptr), (1,)), ptr.name)

    def _one(self, x: tensor, mask: bool = False) -> tensor:
        """A one-element value as a tile of shape (1,) (a scalar mask is made boolean first)."""
        if x.is_tile:
            return self.reshape(x, (1,))
        return self.splat(self.truth(x) if mask else x, (1,))

    def store(self, ptr, value, mask=None, attrs=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.store expects a pointer, got {_describe(ptr)}",
                                  hint="pass a tensor parameter plus offsets, for example out_ptr + offs")
        value = unwrap(value)
        if isinstance(value, pointer):
            raise KernelTypeError("cannot store a pointer", hint="store a loaded or computed value")
        v = self.cast(value, ptr.dtype)
        m = unwrap(mask)
        if ptr.shape == () and v.numel == 1 and (v.is_tile or isinstance(m, tensor)) and \
                not (isinstance(m, tensor) and m.is_tile and m.numel > 1):
            # one element from the vector unit, or a masked scalar store: a one-element DMA
            ptr = self._one_element(ptr)
            v = self._one(v)
            if isinstance(m, tensor):
                m = self._one(m, mask=True)
        shape = self._mem_shapes(ptr, v, m if isinstance(m, tensor) else None)
        offs = self._offsets(ptr, shape)
        v = self.cast(v, ptr.dtype)
        if shape and v.shape != shape:
            v = self.broadcast_to(v, shape)
        mk = self._mask(m, shape)
        self.b.store(ptr.param, offs.handle, v.handle, mk.handle if mk is not None else None, attrs)

    def atomic(self, opname, ptr, val, mask=None, cmp=None):
        ptr = unwrap(ptr)
        if not isinstance(ptr, pointer):
            raise KernelTypeError(f"dl.atomic_{opname} expects a pointer, got {_describe(ptr)}")
        v = self.cast(val, ptr.dtype)
        m = unwrap(mask)
        c = self.cast(cmp, ptr.dtype) if cmp is not None else None
        if ptr.shape == () and all(x is None or not isinstance(x, tensor) or x.numel == 1 for x in (v, m, c)):
            # a scalar atomic: a one-element tile atomic, its old value read back into a register
            v, m, c = (self._one(x) if isinstance(x, tensor) else x for x in (v, m, c))
            return self.as_scalar(self.atomic(opname, self._one_element(ptr), v, m, c))
        shape = self._mem_shapes(ptr, v, m if isinstance(m, tensor) else None, c)
        offs = self._offsets(ptr, shape)
        v = self.cast(v, ptr.dtype)
        if shape and v.shape != shape:
            v = self.broadcast_to(v, shape)
        if c is not None:
            c = self.cast(c, ptr.dtype)
            if shape and c.shape != shape:
                c = self.broadcast_to(c, shape)
        mk = self._mask(m, shape)
        return tensor(self.b.atomic(opname, ptr.param, ptr.dtype, offs.handle, v.handle,
                                    mk.handle if mk is not None else None, c.handle if c is not None else None))


def _describe(v) -> str:
    v = unwrap(v)
    if isinstance(v, tensor):
        return f"a {'tile' if v.is_tile else 'scalar'} of {v.dtype}"
    if isinstance(v, block_pointer):
        return "a block pointer (use dl.load(block_ptr, boundary_check=...))"
    return f"{type(v).__name__} {v!r}"
