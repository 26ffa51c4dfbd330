"""Block pointers (``make_block_ptr``/``advance``), tensor descriptors, and tile-indexed memory
(``load_tile``/``store_tile``).

All three become ordinary pointer arithmetic plus a bounds mask here; access analysis then turns them
into one DMA descriptor each (a box along every checked dimension), so they cost nothing extra.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import ConstexprError, KernelTypeError
from .values import block_pointer, pointer, tensor, unwrap


def _ints(sem, values, what, n=None):
    values = unwrap(values)
    if not isinstance(values, (tuple, list)):
        values = (values,)
    if n is not None and len(values) != n:
        raise KernelTypeError(f"{what} needs {n} entries, got {len(values)}")
    out = []
    for v in values:
        v = unwrap(v)
        if isinstance(v, tensor):
            v = sem.as_scalar(v, what)
            if not (v.dtype.is_int or v.dtype.is_bool):
                raise KernelTypeError(f"{what} must be integers, got {v.dtype}")
            v = sem.cast(v, dt.int32) if v.dtype is not dt.int64 else v
        elif not isinstance(v, int):
            raise KernelTypeError(f"{what} must be integers, got {type(v).__name__} {v!r}")
        out.append(v)
    return tuple(out)


def make_block_ptr(sem, base, shape, strides, offsets, block_shape, order=None) -> block_pointer:
    base = unwrap(base)
    if not isinstance(base, pointer) or base.is_tile:
        raise KernelTypeError("make_block_ptr needs a tensor parameter (a scalar pointer) as its base")
    block_shape = sem.shape_arg(block_shape, "block_shape")
    r = len(block_shape)
    shape_v = _ints(sem, shape, "make_block_ptr shape", r)
    strides_v = _ints(sem, strides, "make_block_ptr strides", r)
    offsets_v = _ints(sem, offsets, "make_block_ptr offsets", r)
    if not base.is_base:
        raise KernelTypeError("make_block_ptr needs the tensor parameter itself as its base",
                              hint="put the offset into `offsets` instead of adding it to the pointer")
    return block_pointer(base.param, base.dtype, shape_v, strides_v, offsets_v, block_shape, order, base.name)


def advance(sem, bp, offsets) -> block_pointer:
    bp = unwrap(bp)
    if not isinstance(bp, block_pointer):
        raise KernelTypeError("dl.advance needs a block pointer from dl.make_block_ptr")
    delta = _ints(sem, offsets, "dl.advance offsets", len(bp.block_shape))
    new = tuple(sem.binary("add", a, b) for a, b in zip(bp.offsets, delta))
    return block_pointer(bp.param, bp.dtype, bp.shape_vals, bp.strides, new, bp.block_shape, bp.order, bp.name)


def _addresses(sem, param, dtype, name, shape_v, strides_v, offsets_v, block_shape, check_dims):
    """Offsets tile and bounds mask of a block at ``offsets_v``."""
    r = len(block_shape)
    offs = None
    mask = None
    for d in range(r):
        idx = sem.binary("add", offsets_v[d], sem.arange(0, block_shape[d]))
        view = tuple(block_shape[d] if i == d else 1 for i in range(r))
        idx = sem.reshape(idx, view)
        term = sem.binary("mul", idx, strides_v[d])
        offs = term if offs is None else sem.binary("add", offs, term)
        if d in check_dims:
            ok = sem.binary("and", sem.compare("ge", idx, 0), sem.compare("lt", idx, shape_v[d]))
            mask = ok if mask is None else sem.binary("and", mask, ok)
    offs = sem.broadcast_to(offs, block_shape)
    if mask is not None:
        mask = sem.broadcast_to(mask, block_shape)
    return pointer(param, dtype, offs, name), mask


def _check_dims(bp_rank, boundary_check):
    dims = unwrap(boundary_check)
    if dims is None:
        dims = ()
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(unwrap(d) for d in dims)
    for d in dims:
        if not isinstance(d, int) or not 0 <= d < bp_rank:
            raise KernelTypeError(f"boundary_check dimension {d!r} is out of range for a rank-{bp_rank} block")
    return dims


def _padding(dtype, padding_option):
    p = unwrap(padding_option)
    if p in ("", None, "zero"):
        return 0
    if p == "nan":
        if not dtype.is_float:
            raise KernelTypeError("padding_option='nan' needs a floating-point tensor")
        return float("nan")
    raise KernelTypeError(f"padding_option must be '', 'zero' or 'nan', got {p!r}")


def load_block(sem, bp: block_pointer, boundary_check=(), padding_option=""):
    dims = _check_dims(len(bp.block_shape), boundary_check)
    ptr, mask = _addresses(sem, bp.param, bp.dtype, bp.name, bp.shape_vals, bp.strides, bp.offsets,
                           bp.block_shape, dims)
    other = _padding(bp.dtype, padding_option) if mask is not None else None
    return sem.load(ptr, mask, other)


def store_block(sem, bp: block_pointer, value, boundary_check=()):
    dims = _check_dims(len(bp.block_shape), boundary_check)
    ptr, mask = _addresses(sem, bp.param, bp.dtype, bp.name, bp.shape_vals, bp.strides, bp.offsets,
                           bp.block_shape, dims)
    return sem.store(ptr, value, mask)


class tensor_descriptor:
    """A tensor descriptor, Triton's newer spelling of a block pointer: made in the kernel by
    ``dl.make_tensor_descriptor(base, shape, strides, block_shape, padding_option)``, or passed from the host
    (a ``triton.tools.tensor_descriptor.TensorDescriptor`` argument, ``build.build_ir``). ``desc.load([i, j])``
    reads the block at element offsets (i, j), filling out-of-range elements with ``padding`` (0, or NaN for
    "nan"); ``desc.store([i, j], value)`` drops them. ``desc.shape``, ``desc.strides`` (runtime scalars),
    ``desc.block_shape`` (a list of ints, as Triton's) and ``desc.dtype`` read its parts."""

    __slots__ = ("param", "dtype", "shape_vals", "strides", "block_shape", "name", "padding")

    def __init__(self, param, dtype, shape_vals, strides, block_shape, name, padding="zero"):
        self.param = param
        self.dtype = dtype
        self.shape_vals = shape_vals
        self.strides = strides
        self.block_shape = tuple(block_shape)
        self.name = name
        self.padding = padding

    def attr(self, sem, attr):
        """``desc.<attr>`` in a kernel (None for an attribute a descriptor does not have)."""
        if attr == "load":
            return lambda offsets: descriptor_load(sem, self, offsets)
        if attr == "store":
            return lambda offsets, value: descriptor_store(sem, self, offsets, value)
        if attr == "block_shape":
            return list(self.block_shape)
        if attr == "shape":
            return list(self.shape_vals)
        if attr == "strides":
            return list(self.strides)
        if attr == "dtype":
            return self.dtype
        return None

    def __repr__(self):
        return f"<tensor descriptor of {self.name} block {self.block_shape}>"


def _triton_error(text: str, hint: str | None = None) -> KernelTypeError:
    """A compile error with Triton's text, whose ``__cause__`` is the ``ValueError`` Triton raises (Triton's
    tests read ``str(e.__cause__)``)."""
    err = KernelTypeError(text, hint=hint)
    err.__cause__ = ValueError(text)
    return err


def check_block_shape(block_shape, what="block_shape") -> None:
    """Triton's ``validate_block_shape``: every entry a power of 2."""
    for i, d in enumerate(block_shape):
        if not isinstance(d, int) or isinstance(d, bool):
            raise KernelTypeError(f"Shape element {i} must have type `constexpr[int]`, got {type(d).__name__}")
        if d < 1 or d & (d - 1):
            raise _triton_error(f"Shape element {i} must be a power of 2", f"{what} is {list(block_shape)}")


def make_tensor_descriptor(sem, base, shape, strides, block_shape, padding_option="zero"):
    base = unwrap(base)
    if not isinstance(base, pointer) or not base.is_base:
        raise KernelTypeError("make_tensor_descriptor needs a tensor parameter as its base")
    block_shape = sem.shape_arg(block_shape, "block_shape")
    r = len(block_shape)
    if not 1 <= r <= 5:
        raise _triton_error(f"Expected 1 <= ndim <= 5 but got {r} dimensions")
    shape_l, strides_l = unwrap(shape), unwrap(strides)
    for what, vals in (("shape", shape_l), ("strides", strides_l)):
        n = len(vals) if isinstance(vals, (tuple, list)) else 1
        if n != r:
            raise _triton_error(f"Expected {r} {what} but got {n}" if what == "strides" else
                                f"Expected block_shape to have {n} dimensions but got {r}")
    check_block_shape(block_shape)
    elem = base.dtype.itemsize
    if block_shape[-1] * elem < 16:
        raise _triton_error(f"Descriptor block shape must have at least 16 bytes in the last dimension, but got "
                            f"{block_shape[-1]} * {elem} = {block_shape[-1] * elem} bytes",
                            "Triton requires it (a TMA box's inner dimension); make the last block dimension "
                            f"at least {max(1, 16 // elem)} elements")
    last = unwrap(strides_l[-1])
    if isinstance(last, int) and last != 1:
        raise _triton_error(f"Tensor descriptor last dim must be 1 but got {last}",
                            "the last dimension of a descriptor is contiguous; transpose the loaded block instead")
    pad = unwrap(padding_option)
    if pad not in ("zero", "nan"):
        raise KernelTypeError(f"padding_option must be 'zero' or 'nan', got {pad!r}")
    if pad == "nan" and not base.dtype.is_float:
        raise _triton_error("Padding option `nan` is not supported for integer blocks")
    return tensor_descriptor(base.param, base.dtype, _ints(sem, shape, "shape", r), _ints(sem, strides, "strides", r),
                             block_shape, base.name, pad)


def _descriptor_addresses(sem, desc, offsets):
    offsets_v = _ints(sem, offsets, "descriptor offsets", len(desc.block_shape))
    return _addresses(sem, desc.param, desc.dtype, desc.name, desc.shape_vals, desc.strides, offsets_v,
                      desc.block_shape, tuple(range(len(desc.block_shape))))


def descriptor_load(sem, desc, offsets):
    ptr, mask = _descriptor_addresses(sem, desc, offsets)
    return sem.load(ptr, mask, _padding(desc.dtype, desc.padding))


def descriptor_store(sem, desc, offsets, value):
    ptr, mask = _descriptor_addresses(sem, desc, offsets)
    value = sem.to_tensor(value)
    if not value.is_scalar and tuple(value.shape) != desc.block_shape:
        raise KernelTypeError(f"descriptor store of a {list(value.shape)} block through a descriptor of block shape "
                              f"{list(desc.block_shape)}", hint="store a value of the descriptor's block shape")
    return sem.store(ptr, value, mask)


def _tensor_geometry(sem, x, shape, what):
    x = unwrap(x)
    if not isinstance(x, pointer) or not x.is_base:
        raise KernelTypeError(f"{what} takes a tensor parameter (the array itself), got {x!r}",
                              hint="pass the kernel parameter, not pointer arithmetic on it")
    param = sem.params[x.param]
    shape = sem.shape_arg(shape, f"{what} shape")
    if len(shape) != param.rank:
        raise KernelTypeError(f"{what}: `{x.name}` has rank {param.rank} but the tile shape {shape} has rank "
                              f"{len(shape)}", hint="give one tile size per dimension of the array")
    dims = tuple(tensor(sem.b.tensor_dim(x.param, d)) for d in range(param.rank))
    strides = tuple(tensor(sem.b.tensor_dim(x.param, d, stride=True)) for d in range(param.rank))
    return x, shape, dims, strides


def load_tile(sem, x, index, shape, padding=0):
    """The tile number ``index`` (in tile units) of an array, padded where it runs past the edge."""
    x, shape, dims, strides = _tensor_geometry(sem, x, shape, "dl.load_tile")
    idx = _ints(sem, index, "dl.load_tile index", len(shape))
    offsets = tuple(sem.binary("mul", i, s) for i, s in zip(idx, shape))
    ptr, mask = _addresses(sem, x.param, x.dtype, x.name, dims, strides, offsets, shape, tuple(range(len(shape))))
    pad = unwrap(padding)
    if isinstance(pad, str):
        pad = _padding(x.dtype, pad)
    if not isinstance(pad, (int, float, bool)):
        raise ConstexprError("dl.load_tile padding must be a compile-time number (or 'zero'/'nan')")
    return sem.load(ptr, mask, pad)


def store_tile(sem, x, index, value):
    """Store ``value`` as tile number ``index`` of an array; elements past the edge are dropped."""
    value = sem.to_tensor(value)
    if value.is_scalar:
        raise KernelTypeError("dl.store_tile needs a tile value")
    x, shape, dims, strides = _tensor_geometry(sem, x, value.shape, "dl.store_tile")
    idx = _ints(sem, index, "dl.store_tile index", len(shape))
    offsets = tuple(sem.binary("mul", i, s) for i, s in zip(idx, shape))
    ptr, mask = _addresses(sem, x.param, x.dtype, x.name, dims, strides, offsets, shape, tuple(range(len(shape))))
    return sem.store(ptr, value, mask)


# ---- pointer tables: int64 addresses loaded from a tensor, cast with tl.pointer_type ------------------------


class pointer_type:
    """Triton's ``tl.pointer_type(element_ty)``: ``x.to(tl.pointer_type(tl.float16))`` turns an int64 address
    loaded from a tensor argument (a *pointer table*, as Triton's tutorial 08 builds from ``t.data_ptr()``)
    into a pointer to ``element_ty``.

    How it runs: each element type gets a hidden tensor parameter, the *heap*. At each launch the runtime
    reads every pointer table the kernel casts from and finds the live tensor (torch storage, or array
    argument) each address falls in (an address in none is an ``ArgumentError``, before anything runs). The
    heap holds those tensors one after another (its *segments*); the kernel sees a copy of each table whose
    entries are the addresses' element offsets into the heap, and the runtime copies the heap back into the
    tensors after the launch. Every access through the heap is bounds-checked against the segment its first
    element falls in (a DMA box must lie inside one tensor; each gathered element inside some tensor) before
    anything is read or written."""

    def __init__(self, element_ty, address_space: int = 1, const: bool = False):
        d = dt.lookup(unwrap(element_ty))
        if d is None:
            raise KernelTypeError(f"tl.pointer_type needs an element dtype, got {element_ty!r}")
        self.element_ty = d
        self.address_space = address_space
        self.const = const

    def is_ptr(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, pointer_type) and other.element_ty is self.element_ty

    def __hash__(self):
        return hash(("pointer_type", self.element_ty))

    def __repr__(self):
        return f"pointer<{self.element_ty.name}>"


def _table_of(x: tensor) -> int | None:
    """The tensor parameter a scalar was loaded from (through integer casts), or None."""
    v = x.handle
    while v.op is not None and v.op.kind == "cast" and not v.op.attrs.get("bitcast") and v.op.operands[0].dtype.is_int:
        v = v.op.operands[0]
    op = v.op
    if op is not None and op.kind == "load" and not op.attrs.get("has_mask"):
        return op.attrs["tensor"]
    return None


def pointer_from_table(sem, x, ptype: pointer_type) -> pointer:
    """``x.to(tl.pointer_type(d))``: see ``pointer_type``."""
    from ..ir.core import Param
    d = ptype.element_ty
    x = unwrap(x)
    if isinstance(x, pointer):
        if x.dtype is d:
            return x
        raise KernelTypeError(f"cannot cast a pointer to {x.dtype.name} into a pointer to {d.name}: a tensor argument "
                              "has one element type here", hint="pass the array viewed as the other dtype")
    if not isinstance(x, tensor) or x.is_tile or x.dtype not in (dt.int64, dt.uint64):
        raise KernelTypeError(f"tl.pointer_type casts an int64 address (a scalar loaded from a pointer table), got "
                              f"{x!r}", hint="load one entry: tl.load(table + i).to(tl.pointer_type(tl.float16))")
    table = _table_of(x)
    if table is None:
        raise KernelTypeError("a pointer made with tl.pointer_type must come straight from a load of a tensor "
                              "argument (a pointer table of x.data_ptr() values), so the runtime can find the "
                              "tensors it points into", hint="load the address with tl.load(table + i) and cast "
                                                             "that value; do address arithmetic on the pointer")
    heaps = sem.__dict__.setdefault("_pointer_heaps", {})
    for other, (_, h) in heaps.items():
        if other is not d and table in h.pointer_tables:
            raise KernelTypeError(f"the pointer table `{sem.params[table].name}` is cast to pointers to {other.name} "
                                  f"and to {d.name}; one table points to one element type here")
    if d not in heaps:
        heap = Param(f"__heap_{d.name}", "tensor", d, 1)
        heap.pointer_tables = []  # read by the runtime (runtime.py, _bind_pointer_heaps)
        heaps[d] = (len(sem.params), heap)
        sem.params.append(heap)
    idx, heap = heaps[d]
    if table not in heap.pointer_tables:
        heap.pointer_tables.append(table)
    name = f"*{sem.params[table].name}"
    return pointer(idx, d, None, name, sem.cast(x, dt.int64))  # the runtime's copy of the table holds offsets
