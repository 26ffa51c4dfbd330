"""Host-side arguments as Triton programs pass them: torch CPU tensors, ``__dlpack__`` and
``__array_interface__`` objects, strided views, and Triton's launch options.

No torch import: a torch tensor is recognised by duck typing (its type's module is ``torch``), and the
torch module itself, needed only to reinterpret a ``bfloat16``/fp8 tensor as integers of the same size,
is taken from ``sys.modules`` (it is loaded, since one of its tensors exists).

A foreign array becomes a numpy array that shares its memory (stores land in the original):

* C-contiguous: a view of the same shape; it binds exactly as that numpy array would.
* strided (a transpose, a column, a slice with a step; any view that is not C-contiguous): as Triton sees it,
  a pointer to its first element. It binds as a flat 1-d array running from the first element to the last
  byte any of its elements occupies, so the kernel's own stride arguments decide what is read and every
  access is bounds-checked against that span. A negative stride (numpy only) is refused.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from . import dtypes as dt
from .errors import ArgumentError, LaunchError
from .frontend.specs import ScalarSpec, TensorSpec
from .frontend.values import constexpr

# Triton's launch options: accepted by ``kernel[grid](...)``, ``run``, ``encode``, ``prepare`` and ``warmup``
# (unless the kernel has a parameter of the same name, which then takes the value). None has an effect
# on the simulated NPU; each is checked for the type Triton takes. docs/language.md section 1 says why.
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


# option: (the values Triton takes, said in words)
LAUNCH_OPTIONS = {
    "num_warps": (lambda v: _is_int(v) and v >= 1 and not v & (v - 1), "a positive power of 2"),
    "num_ctas": (lambda v: _is_int(v) and v >= 1, "a positive int"),
    "num_stages": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "maxnreg": (lambda v: v is None or (_is_int(v) and v >= 1), "None or a positive int"),
    "enable_fp_fusion": (_is_bool, "a bool"),
    "launch_cooperative_grid": (_is_bool, "a bool"),
    "launch_pdl": (_is_bool, "a bool"),
    "debug": (lambda v: v is None or _is_bool(v), "None or a bool"),
    "extern_libs": (lambda v: v is None or (isinstance(v, dict) and all(isinstance(k, str) for k in v)),
                    "None or a dict of library name -> path"),
}


def split_launch_options(kname: str, params, kwargs: dict) -> dict:
    """``kwargs`` without the launch options (checked, then dropped); ``kwargs`` itself when it has none."""
    if not kwargs or LAUNCH_OPTIONS.keys().isdisjoint(kwargs):
        return kwargs
    out = {}
    for k, v in kwargs.items():
        if k not in LAUNCH_OPTIONS or k in params:
            out[k] = v
            continue
        ok, want = LAUNCH_OPTIONS[k]
        if not ok(v):
            raise LaunchError(f"launch option `{k}` of `{kname}` must be {want}, got {type(v).__name__} {v!r}")
    return out


def is_foreign_array(v) -> bool:
    """Whether ``v`` is an array dvmlang converts (a torch tensor, a ``__dlpack__`` or ``__array_interface__``
    object), not a numpy array, number, constexpr value or dvmlang value (``__dvm_array__``)."""
    if isinstance(v, (np.ndarray, np.generic, int, float, str, tuple)) or v is None or hasattr(v, "__dvm_array__"):
        return False
    t = type(v)
    return hasattr(t, "__dvm_numpy__") or (t.__module__.startswith("torch") and hasattr(v, "numpy")) \
        or hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__")


def to_numpy(kname: str, name: str, v) -> np.ndarray:
    """A numpy array sharing the memory of the foreign array ``v`` (``ArgumentError`` naming the argument
    if that is impossible)."""
    where = f"argument `{name}` of `{kname}`"
    if hasattr(type(v), "__dvm_numpy__"):  # a view dvmlang made itself (triton.reinterpret's TensorWrapper)
        a = v.__dvm_numpy__()
    elif type(v).__module__.startswith("torch") and hasattr(v, "numpy"):
        a = _torch_to_numpy(where, v)
    elif hasattr(v, "__dlpack__"):
        try:
            a = np.from_dlpack(v)
        except Exception as e:  # noqa: BLE001 - any producer's refusal
            raise ArgumentError(f"{where} ({type(v).__name__}) cannot be viewed through __dlpack__: "
                                f"{type(e).__name__}: {e}; pass a numpy array") from None
    else:
        try:
            a = np.asarray(v)
        except Exception as e:  # noqa: BLE001
            raise ArgumentError(f"{where} ({type(v).__name__}) cannot be viewed through __array_interface__: "
                                f"{type(e).__name__}: {e}; pass a numpy array") from None
        if a.dtype == object:
            raise ArgumentError(f"{where} ({type(v).__name__}) is not an array of numbers; pass a numpy array")
    return strided_as_flat(where, a)


def strided_as_flat(where: str, a: np.ndarray, end: int | None = None) -> np.ndarray:
    """``a`` itself when C-contiguous; else the flat 1-d array over its memory from its first element to the
    end of its storage (a Triton pointer to the first element: the kernel's own strides decide what it reads,
    and bounds are the storage's). ``end`` is the address one past the storage (a torch tensor's); for a
    numpy view it is the end of the array it views, or of its last element when that is unknown."""
    if a.flags.c_contiguous:
        return a
    if any(s < 0 for s in a.strides):
        raise ArgumentError(f"{where} has a negative stride (strides {a.strides}); a kernel addresses memory "
                            "upward from the first element. Pass np.ascontiguousarray(x) and copy results back")
    if a.size == 0:
        return np.empty(0, a.dtype)
    item = a.itemsize
    if any(s % item for s in a.strides):
        raise ArgumentError(f"{where} has strides {a.strides} that are not whole elements of {item} bytes; "
                            "pass np.ascontiguousarray(x)")
    first = a.__array_interface__["data"][0]
    n = sum((n - 1) * s for n, s in zip(a.shape, a.strides)) // item + 1  # to the end of the last element
    if end is None:
        b = a
        while isinstance(b.base, np.ndarray):
            b = b.base
        if b is not a and b.flags.c_contiguous:
            end = b.__array_interface__["data"][0] + b.nbytes
    if end is not None and end - first >= n * item:
        n = (end - first) // item
    return dt.as_strided(a, shape=(n,), strides=(item,), writeable=a.flags.writeable)


def _torch_to_numpy(where: str, t) -> np.ndarray:
    dev = getattr(getattr(t, "device", None), "type", "cpu")
    if dev != "cpu":
        raise ArgumentError(f"{where} is a torch tensor on `{t.device}`; the simulated NPU reads host memory. "
                            "Pass x.cpu() and copy results back")
    if str(getattr(t, "layout", "torch.strided")) != "torch.strided":
        raise ArgumentError(f"{where} is a torch tensor with layout {t.layout}; pass a dense (strided) tensor")
    if t.requires_grad:
        t = t.detach()  # shares the storage: stores land in the tensor
    if t.is_conj() or t.is_neg():
        raise ArgumentError(f"{where} is a torch tensor with a lazy conjugate/negative bit; pass x.resolve_conj()")
    name = str(t.dtype).removeprefix("torch.")
    target = {"bfloat16": dt.bfloat16, "float8_e4m3fn": dt.float8e4nv, "float8_e5m2": dt.float8e5}.get(name)
    try:
        if target is not None:  # numpy cannot see these: reinterpret as same-size ints, then view as ml_dtypes
            torch = sys.modules[type(t).__module__.split(".")[0]]
            ints = torch.int16 if target.np.itemsize == 2 else torch.uint8
            a = t.view(ints).numpy().view(target.np)
        else:
            a = t.numpy()
    except (TypeError, RuntimeError) as e:
        raise ArgumentError(f"{where} is a torch tensor of dtype {t.dtype}, which dvmlang does not support "
                            f"({e}); use one of {', '.join(x.name for x in dt.ARRAY_DTYPES)}") from None
    if a.flags.c_contiguous:
        return a
    st = t.untyped_storage()
    return strided_as_flat(where, a, st.data_ptr() + st.nbytes())


# ---- launch keys: what of a raw argument names the build and the instance ------------------------------------


class _NoLaunchKey(Exception):
    """An argument the launch fast path does not key (the launch takes the ordinary path)."""


_KEYED_TYPES = frozenset({int, bool, str, type(None), dt.DType})


def _launch_key(v):
    """What of one raw launch argument selects the build and the instance: for arrays dtype, shape and strides
    (never their data; contiguity follows from them), for numbers their type and exact value."""
    t = v.__class__
    if t is np.ndarray:
        return (v.dtype, v.shape, v.strides)
    if t in _KEYED_TYPES:
        return (t, v)
    if t is float:
        return (t, v, math.copysign(1.0, v)) if v == v else (t, "nan")  # -0.0 == 0.0 but encodes differently
    if isinstance(v, np.generic):
        return (t, v.tobytes())
    if t is tuple or callable(v):
        return (t, v)  # constexpr tuples and combine functions: keyed (and kept alive) by value / identity
    raise _NoLaunchKey


_INT32 = (-(1 << 31), (1 << 31) - 1)  # the ints a scalar parameter binds as int32, and as int64
_INT64 = (-(1 << 63), (1 << 63) - 1)


def c_contiguous(itemsize: int, shape: tuple, strides: tuple) -> bool:
    """numpy's C_CONTIGUOUS flag of an array with this item size, shape and byte strides: every dim longer
    than 1 steps by the bytes of the dims after it (an empty array is contiguous)."""
    if 0 in shape:
        return True
    step = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != step:
                return False
            step *= n
    return True


def _class_of(k):
    """The class of a runtime argument from its launch key: arrays by dtype, rank and contiguity; Python ints
    by the integer type they bind as; other numbers by type."""
    t = k[0]
    if t is int:
        v = k[1]
        return (int, 32 if _INT32[0] <= v <= _INT32[1] else 64 if _INT64[0] <= v <= _INT64[1] else None)
    if t.__class__ is not type:  # an array: (dtype, shape, strides)
        return (t, len(k[1]), c_contiguous(t.itemsize, k[1], k[2]))
    if t in _KEYED_TYPES and t is not bool:
        return k  # strings, None, dtypes: not runtime values; keep them whole
    return (t,)


# ---- pointer tables (``tl.pointer_type``): the heap of the tensors a table's addresses fall in ----------------


class SegmentedHeap(np.ndarray):
    """The heap of a ``tl.pointer_type`` dtype: the tensors a launch's pointer tables point into, one after
    another. ``dvm_segments`` is an (n, 2) int64 array of their element ranges ``[start, end)``, sorted;
    ``dvm_names`` says what each one is; ``dvm_sources`` holds (tensor memory as bytes, heap bytes) pairs
    for copying back. The device checks every access against the segment it falls in (``npu/bounds.py``)."""

    def __array_finalize__(self, obj):
        self.dvm_segments = getattr(obj, "dvm_segments", None)
        self.dvm_names = getattr(obj, "dvm_names", None)
        self.dvm_sources = getattr(obj, "dvm_sources", None)
        self.dvm_owners = getattr(obj, "dvm_owners", None)

    def copy_back(self) -> None:
        """Store the heap's segments into the tensors they were copied from (after a launch that wrote it)."""
        for dst, src in self.dvm_sources or ():
            np.copyto(dst, src)


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _live_storages(arrays: dict) -> list:
    """(first byte address, bytes, description, owner) of every allocation an address may fall in: the launch's
    array arguments and, when torch is loaded, every live CPU tensor's storage (found through the collector:
    a pointer table names tensors only by ``data_ptr()``)."""
    import gc
    out = {}
    for name, a in arrays.items():
        if isinstance(a, SegmentedHeap):
            continue
        b = a
        while isinstance(b.base, np.ndarray):
            b = b.base
        lo, hi = _byte_bounds(b)
        out.setdefault(lo, (lo, hi - lo, f"argument `{name}`", b))
    torch = sys.modules.get("torch")
    if torch is not None:
        # plain tensors and parameters only, by exact type (type() never fails, where isinstance() on a dead
        # weak proxy raises): subclasses such as torch.compile's FakeTensors, still alive after tracing, have no
        # real memory behind their data pointers
        plain = (torch.Tensor, torch.nn.Parameter)
        objs = [o for o in gc.get_objects() if type(o) in plain]
        for o in objs:
            try:
                if o.device.type != "cpu" or o.is_meta:
                    continue
                st = o.untyped_storage()
                start, n = st.data_ptr(), st.nbytes()
            except (RuntimeError, NotImplementedError, ReferenceError):
                continue
            if n and (start not in out or out[start][1] < n):
                out[start] = (start, n, f"a torch tensor of shape {tuple(o.shape)} ({str(o.dtype)[6:]})", o)
    return sorted(out.values())


def pointer_heap(kname: str, param, tables: list, arrays: dict):
    """The heap (``SegmentedHeap``) of the hidden parameter ``param`` (a ``tl.pointer_type`` dtype) for the pointer
    tables ``tables`` ((name, array) pairs), and each table as the kernel sees it: the addresses as element
    offsets into the heap. ``ArgumentError`` for an address inside no live tensor, or not on an element of it."""
    d = param.dtype
    item = d.itemsize
    storages = _live_storages(arrays)
    starts = np.array([st[0] for st in storages], dtype=np.int64)
    order: dict[int, tuple] = {}  # storage start -> storage, in the order the tables first name them
    seen = []
    for name, t in tables:
        flat = np.asarray(t).astype(np.int64, copy=False).ravel()
        js = np.searchsorted(starts, flat, side="right") - 1
        for a, j in zip(flat.tolist(), js.tolist()):
            if j < 0 or not a < storages[j][0] + storages[j][1]:
                raise ArgumentError(f"pointer table `{name}` of `{kname}` holds the address {a:#x}, which is inside no "
                                    "live tensor (no array argument and no CPU torch tensor holds it); a kernel reads "
                                    "memory only inside tensors. Fill the table with x.data_ptr() of tensors that "
                                    "are alive during the launch")
            if (a - storages[j][0]) % item:
                raise ArgumentError(f"pointer table `{name}` of `{kname}` holds the address {a:#x}, which is not on a "
                                    f"{d.name} element of {storages[j][2]} (its memory starts at {storages[j][0]:#x})")
            order.setdefault(storages[j][0], storages[j])
        seen.append((name, flat, js))
    segs, pos = [], 0
    where = {}
    for st in order.values():
        n = st[1] // item
        where[st[0]] = pos
        segs.append((pos, pos + n))
        pos += n
    heap = np.empty(pos, dtype=d.np).view(SegmentedHeap)
    sources = []
    import ctypes
    for st, (a, b) in zip(order.values(), segs):
        mem = np.frombuffer((ctypes.c_char * ((b - a) * item)).from_address(st[0]), dtype=np.uint8)
        mine = heap.view(np.uint8)[a * item:b * item]
        mine[...] = mem
        sources.append((mem, mine))
    heap.dvm_segments = np.array(segs, dtype=np.int64).reshape(-1, 2)
    heap.dvm_names = [st[2] for st in order.values()]
    heap.dvm_sources = sources
    heap.dvm_owners = [st[3] for st in order.values()]  # kept alive until the copy back
    translated = []
    for name, flat, js in seen:
        base = np.array([storages[j][0] for j in js.tolist()], dtype=np.int64)
        off = np.array([where[storages[j][0]] for j in js.tolist()], dtype=np.int64)
        translated.append(((flat - base) // item + off).reshape(np.shape(tables[len(translated)][1])))
    return heap, translated


def bind_pointer_heaps(kname, build, runtime: list, arrays: dict) -> None:
    """Append the hidden heap of each ``tl.pointer_type`` dtype and give the kernel its tables as offsets into
    it (``args.pointer_heap``); ``Kernel._launch`` copies a written heap back into its tensors."""
    given = {build.params[j].name: a for j, a in arrays.items()}
    for i in build.heaps:
        p = build.params[i]
        tables = p.pointer_tables
        if any(t in build.written for t in tables):
            raise ArgumentError(f"`{kname}` stores to its pointer table `{build.params[tables[0]].name}`; a table is "
                                "read-only here (the kernel sees it as offsets into the tensors it points to)")
        heap, translated = pointer_heap(kname, p, [(build.params[t].name, runtime[t]) for t in tables], given)
        if len(runtime) != i:
            raise LaunchError(f"internal: heap parameter {p.name} of `{kname}` is not where the build put it")
        for t, tr in zip(tables, translated):
            runtime[t] = arrays[t] = np.ascontiguousarray(tr)
        for j, a in arrays.items():
            if j in tables or (j not in build.written and i not in build.written):
                continue
            if any(np.may_share_memory(a, mem) for mem, _ in heap.dvm_sources):
                raise ArgumentError(f"`{build.params[j].name}` of `{kname}` is also reached through a pointer table, and "
                                    "the kernel writes one of the two; pass a tensor one way (in the table or as an "
                                    "argument) when it is written")
        if i not in build.written:
            heap.dvm_sources = None  # read only: nothing to copy back
        arrays[i] = heap
        runtime.append(heap)


# ---- argument classification -------------------------------------------------------------------------------

_CONSTEXPR_TYPES = (bool, int, float, str, type(None), dt.DType, tuple)


def constexpr_value(kname, name, v):
    if isinstance(v, constexpr):
        v = v.value
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        d = dt.from_numpy(v)
        if d is not None:
            return d
    if not isinstance(v, _CONSTEXPR_TYPES) and not callable(v):
        d = dt.lookup(v) if type(v).__name__ == "dtype" else None  # a torch dtype, as Triton takes one
        if d is not None:
            return d
        raise ArgumentError(f"constexpr `{name}` of `{kname}` must be a compile-time value (int, float, bool, str, "
                            f"dtype, tuple), got {type(v).__name__}")
    return v


def plain_array(kname, name, v: np.ndarray) -> np.ndarray:
    """An argument of a numpy array subclass as a plain array. A memmap is ordinary memory: a base-class view
    shares it, so stores land in the file's mapping. A matrix or a masked array is refused with what to pass
    (their values are not just their memory, or they are not the shape a kernel indexes)."""
    where = f"argument `{name}` of `{kname}`"
    if isinstance(v, np.memmap):
        return v.view(np.ndarray)
    if isinstance(v, np.ma.MaskedArray):
        raise ArgumentError(f"{where} is a MaskedArray; a kernel sees memory, not masks. Pass m.filled(fill_value) "
                            "for the values with the masked elements replaced, or m.data for the raw memory "
                            "(stores land in it), and pass the mask separately if the kernel needs it")
    if isinstance(v, np.matrix):
        raise ArgumentError(f"{where} is an np.matrix; pass np.asarray(m), a plain array sharing its memory")
    raise ArgumentError(f"{where} is a {type(v).__name__}, a numpy array subclass dvmlang does not bind; pass "
                        "np.asarray(x), a plain array sharing its memory")


def classify(kname, name, v) -> TensorSpec | ScalarSpec:
    """The spec a runtime argument gives its parameter (or ``ArgumentError`` for what no kernel can take)."""
    if isinstance(v, np.ndarray):
        d = dt.from_numpy(v.dtype)
        if d is None:
            raise ArgumentError(f"argument `{name}` of `{kname}` has dtype {v.dtype}, which dvmlang does not support; "
                                f"use one of {', '.join(x.name for x in dt.ARRAY_DTYPES)}")
        if not v.flags.c_contiguous:
            raise ArgumentError(f"argument `{name}` of `{kname}` is not C-contiguous (strides {v.strides}); kernels "
                                "address arrays as flat memory. Pass np.ascontiguousarray(x) and copy results back")
        return TensorSpec(d, v.ndim)
    if isinstance(v, bool):
        return ScalarSpec(dt.bool_)
    if isinstance(v, int):
        if dt.int_fits(v, dt.int32):
            return ScalarSpec(dt.int32)
        if dt.int_fits(v, dt.int64):
            return ScalarSpec(dt.int64)
        raise ArgumentError(f"argument `{name}` of `{kname}` = {v} does not fit a 64-bit integer")
    if isinstance(v, float):
        return ScalarSpec(dt.float32)
    if isinstance(v, np.generic):
        d = dt.from_numpy(v.dtype)
        if d is None:
            raise ArgumentError(f"argument `{name}` of `{kname}` has dtype {v.dtype}, which dvmlang does not support")
        return ScalarSpec(d)
    if hasattr(v, "__dvm_array__"):
        return classify(kname, name, v.__dvm_array__())
    kind = type(v).__name__
    hint = "pass np.asarray(x)" if isinstance(v, (list, tuple)) else "pass a numpy array or a number"
    raise ArgumentError(f"argument `{name}` of `{kname}` must be a numpy array or a number, got {kind}; {hint}")


def convert_foreign(kname, src, args, kwargs):
    """``(args, kwargs)`` with every foreign array (``args.is_foreign_array``) bound to a runtime parameter
    replaced by its numpy view, or None when there is none."""
    names, cn = src.params, src.constexpr_params

    def numpy_of(name, v):
        return to_numpy(kname, name, v) if name in names and name not in cn and is_foreign_array(v) else v

    new_args = [numpy_of(n, v) for n, v in zip(names, args)] + list(args[len(names):])
    new_kw = {k: numpy_of(k, v) for k, v in kwargs.items()}
    if all(a is b for a, b in zip(new_args, args)) and all(new_kw[k] is v for k, v in kwargs.items()):
        return None
    return tuple(new_args), new_kw


def describe(v) -> str:
    if isinstance(v, np.ndarray):
        return f"a {v.ndim}-d {v.dtype} array"
    return f"{type(v).__name__} {v!r}"


# ---- binders: the class check and launch keys of one argument class, as straight-line code ----------------------

def make_binder(classes: tuple, constexpr_mask, kw_classes: tuple, constexpr_names, tensors=None):
    """A function ``bind(args, kwargs)`` for launches whose arguments have the argument class ``classes`` (per
    positional argument: its launch key when it is a constexpr (``constexpr_mask``), else ``_class_of`` of it;
    ``kw_classes``: (name, the same) per keyword, in order, constexpr when the name is in ``constexpr_names``),
    as ``Kernel._prepare`` writes the class key: the arguments' launch keys ``(per-argument keys, per-keyword
    (name, key))``, exactly as ``_launch_key`` gives them, when every argument has that class, else None.
    Generated code, one test per argument: what a launch with arguments of a class seen before costs to key
    (the generic path builds the class key and looks it up).

    With ``tensors`` (``_Plan.checks``: per tensor parameter its runtime index, argument position or keyword,
    whether the kernel stores to it, whether it is 1-d), a relaunch's check instead: ``relaunch(args, kwargs,
    key)`` gives ``(flat arrays by runtime index, whether they are distinct arrays that own their memory)``
    when the arguments' launch keys are those of the launch key ``key`` (``Kernel._keys``: its third and fourth
    items), None when they are not, and False when an array the kernel
    stores to is read-only (the general path then raises the error)."""
    env = {"nd": np.ndarray, "_launch_key": _launch_key, "_class_of": _class_of, "copysign": math.copysign}
    head = "def relaunch(args, kwargs, key):" if tensors is not None else "def bind(args, kwargs):"
    lines = [head, f"    if len(args) != {len(classes)} or len(kwargs) != {len(kw_classes)}:", "        return None"]
    if classes:
        lines.append(f"    {', '.join(f'a{i}' for i in range(len(classes)))}, = args")
    keys = []
    exact = tensors is not None  # each argument's key compared with the launch key's, as soon as it is read
    if exact:
        lines.append("    ak, kk = key[2], key[3]")

    def compared(k, against, const):  # (a relaunch's test of a key _bind_one did not compare; a constexpr's
        if exact and k is not None and not const:  # class is its key: the class test compared it)
            lines.extend([f"    if {k} != {against}:", "        return None"])
        return k
    for i, (cls, const) in enumerate(zip(classes, constexpr_mask)):
        against = f"ak[{i}]"
        keys.append(compared(_bind_one(lines, env, f"a{i}", f"k{i}", cls, bool(const), i, exact and against),
                             against, const))
    kw = []
    names = tuple(n for n, _ in kw_classes)
    if kw_classes:
        env["names"] = names
        # the keywords in the class's order (one keyword: the length is checked above)
        lines += [f"    if {names[0]!r} not in kwargs:" if len(names) == 1 else "    if tuple(kwargs) != names:",
                  "        return None"]
        for j, (name, cls) in enumerate(kw_classes):
            lines.append(f"    w{j} = kwargs[{name!r}]")
            against, const = f"kk[{j}][1]", name in constexpr_names
            k = compared(_bind_one(lines, env, f"w{j}", f"m{j}", cls, const, len(classes) + j, exact and against),
                         against, const)
            kw.append(f"({name!r}, {k})")
    if tensors is None:
        akeys, kkeys = f"({''.join(k + ', ' for k in keys)})", f"({''.join(k + ', ' for k in kw)})"
        lines.append(f"    return {akeys}, {kkeys}")
    else:
        arrays = [f"a{at}" if at.__class__ is int else f"w{names.index(at)}" for _, at, _, _ in tensors]
        for n, ((i, _, written, _), v) in enumerate(zip(tensors, arrays)):
            lines.append(f"    f{n} = {v}.flags")
            if written:
                lines += [f"    if not f{n}.writeable:", "        return False"]
        own = [f"f{n}.owndata" for n in range(len(tensors))]
        own += [f"{x} is not {y}" for n, x in enumerate(arrays) for y in arrays[n + 1:]]
        flat = ", ".join(f"{i}: {v if one_d else v + '.ravel()'}" for (i, _, _, one_d), v in zip(tensors, arrays))
        lines.append(f"    return {{{flat}}}, {' and '.join(own) or 'True'}")
    exec(compile("\n".join(lines), "<dvmlang binder>", "exec"), env)  # noqa: S102 - generated from class keys
    return env["relaunch" if tensors is not None else "bind"]


def _bind_one(lines: list, env: dict, v: str, k: str, cls, const: bool, i: int, against: str | None = None):
    """Append the test of one argument ``v`` against its class ``cls`` (its whole launch key when ``const``) and
    the computation of its launch key; returns the key's expression. ``against``: the expression of a launch
    key of this class the argument's is compared with after, which settles an array's dtype, rank and
    contiguity (not yet that it is an array, nor a number's type: True's key is not 1's); an array is then
    compared with it here, field by field, without making its key (None returned)."""
    t = cls[0] if cls.__class__ is tuple and cls else None
    if against and not const and t is not None and t.__class__ is not type:
        lines += [f"    q = {against}",
                  f"    if {v}.__class__ is not nd or {v}.shape != q[1] or {v}.strides != q[2] or "
                  f"({v}.dtype is not q[0] and {v}.dtype != q[0]):",
                  "        return None"]
        return None
    if not const and t is not None and t.__class__ is not type:  # an array: (dtype, rank, contiguous)
        env[f"d{i}"] = t
        lines += [f"    if {v}.__class__ is not nd or {v}.ndim != {cls[1]} or {v}.flags.c_contiguous is not {cls[2]}:",
                  "        return None",
                  f"    {k} = ({v}.dtype, {v}.shape, {v}.strides)",
                  f"    if {k}[0] is not d{i} and {k}[0] != d{i}:",
                  "        return None"]
        return k
    if const and t is int and len(cls) == 2:  # a constexpr int: its value
        lines += [f"    if {v}.__class__ is not int or {v} != {cls[1]!r}:", "        return None"]
        return f"(int, {v})"
    if not const and t is int and len(cls) == 2:  # (int, 32), (int, 64) or (int, None): _class_of's ranges
        in32, in64 = f"{_INT32[0]} <= {v} <= {_INT32[1]}", f"{_INT64[0]} <= {v} <= {_INT64[1]}"
        out = {32: f"not {in32}", 64: f"{in32} or not {in64}"}.get(cls[1], in64)
        lines += [f"    if {v}.__class__ is not int or {out}:", "        return None"]
        return f"(int, {v})"
    if not const and cls == (float,):
        lines += [f"    if {v}.__class__ is not float:", "        return None",
                  f"    {k} = (float, {v}, copysign(1.0, {v})) if {v} == {v} else (float, 'nan')"]
        return k
    # anything else: the generic key, and its class (or, for a constexpr, the key itself) compared
    env[f"c{i}"] = cls
    lines += ["    try:", f"        {k} = _launch_key({v})", "    except Exception:", "        return None",
              f"    if {k if const else f'_class_of({k})'} != c{i}:", "        return None"]
    return k
