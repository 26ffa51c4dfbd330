"""Microscaled ("mx") matrix products: ``dl.dot_scaled``, Triton's ``tl.dot_scaled``.

The cube unit multiplies fp16/bf16 tiles, not fp4/fp8 ones, so ``dot_scaled`` is a composition of existing
operations, the software emulation Triton defines for hardware without native mx formats: each operand is
decoded to the compute dtype (``float16`` if either format is ``"fp16"``, else ``bfloat16``), multiplied by its
per-32-element e8m0 scale broadcast along K, and the two go through ``dot`` (accumulating in ``float32``).

Every e2m1, e4m3 and e5m2 value, and every scale ``2^(s-127)``, is exact in ``bfloat16``; in ``float16`` the
fp4/fp8 values are exact but a scaled value can round, underflow or overflow, and a bf16 operand rounds (as in
Triton).
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import ConstexprError, KernelTypeError
from ..frontend.values import is_runtime, unwrap
from .core import bool_const, builtin

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
SCALE_GROUP = 32  # elements along K that share one e8m0 scale

# the dtype each format's values have, and the same-sized integer dtypes that hold their bits
_FLOAT = {"e4m3": dt.float8e4nv, "e5m2": dt.float8e5, "bf16": dt.bfloat16, "fp16": dt.float16}
_BITS = {"e2m1": (dt.uint8, dt.int8), "e4m3": (dt.uint8, dt.int8), "e5m2": (dt.uint8, dt.int8),
         "bf16": (dt.uint16, dt.int16), "fp16": (dt.uint16, dt.int16)}


def _format(f, side):
    f = unwrap(f)
    if is_runtime(f) or not isinstance(f, str):
        raise ConstexprError(f"dl.dot_scaled's {side}_format must be a compile-time string, got {f!r}",
                             hint=f"one of {', '.join(map(repr, FORMATS))}, or a dl.constexpr parameter holding one")
    if f not in FORMATS:
        other = " (Triton names it but implements no dot with it)" if f in ("e2m3", "e3m2") else ""
        raise KernelTypeError(f"dl.dot_scaled: unknown {side}_format {f!r}{other}",
                              hint=f"the formats are {', '.join(map(repr, FORMATS))}")
    return f


def _operand(sem, x, fmt, side):
    """The operand, checked: a tile whose dtype holds ``fmt`` (its float dtype or the bits of one)."""
    x = sem.to_tensor(x)
    if not x.is_tile:
        raise KernelTypeError(f"dl.dot_scaled's {side} operand must be a tile, got a scalar")
    ok = _BITS[fmt] + ((_FLOAT[fmt],) if fmt in _FLOAT else ())
    if x.dtype not in ok:
        what = "two e2m1 values per byte, the first in the low 4 bits" if fmt == "e2m1" else f"{fmt} values"
        raise KernelTypeError(f"dl.dot_scaled: the {side} operand has dtype {x.dtype}, which cannot hold {what} "
                              f"({side}_format={fmt!r} takes {' or '.join(map(str, ok))})",
                              hint=f"load it as {ok[0]}, or pass the {side}_format its values are in")
    return x


def _interleave(sem, lo, hi, axis):
    """``lo`` and ``hi`` alternating along ``axis``, which doubles."""
    r = len(lo.shape)
    if axis == r - 1:
        return sem.interleave(lo, hi)
    j = sem.join(lo, hi)  # (..., n, ..., 2)
    perm = tuple(range(axis + 1)) + (r,) + tuple(range(axis + 1, r))
    shape = list(lo.shape)
    shape[axis] *= 2
    return sem.reshape(sem.permute(j, perm), tuple(shape))


def _e2m1(sem, packed, axis, cdt):
    """Unpack two e2m1 (fp4) values per byte along ``axis`` (the low nibble first) and decode them to ``cdt``.

    Each nibble ``s e e m`` is moved into the bits of an e4m3 value, ``s 0 0 e e m 0 0``, while still packed
    (byte-sized work on the half-size tile): that e4m3 value is the e2m1 value times ``2^-6`` (bias 7 against 1),
    for the normal values and the subnormal 0.5 alike, so the fp8 conversion and one multiply by 64 decode it
    exactly."""
    lo = sem.binary("or", sem.binary("shl", sem.binary("and", packed, 0x7), 2),
                    sem.binary("shl", sem.binary("and", packed, 0x8), 4))
    hi = sem.binary("or", sem.binary("and", sem.binary("shr", packed, 2), 0x1C), sem.binary("and", packed, 0x80))
    e4m3 = sem.cast(_interleave(sem, lo, hi, axis), dt.float8e4nv, bitcast=True)
    return sem.binary("mul", sem.cast(e4m3, cdt), sem.const(64.0, cdt))


def _e8m0(sem, scale, cdt, fast_math):
    """e8m0 scale bytes as ``2^(s-127)`` in ``cdt`` (through float32, where every one is exact): 0 is 2^-127,
    255 is NaN (``fast_math`` leaves it +inf)."""
    s32 = sem.cast(scale, dt.uint32)
    f = sem.cast(sem.binary("shl", s32, 23), dt.float32, bitcast=True)
    f = sem.where(sem.compare("eq", s32, 0), sem.const(2.0 ** -127, dt.float32), f)
    if not fast_math:
        f = sem.where(sem.compare("eq", s32, 255), sem.const(float("nan"), dt.float32), f)
    return sem.cast(f, cdt)


def _scaled(sem, v, scale, side, fmt, fast_math):
    """``v`` (lhs (M, K) or rhs (K, N), decoded) times its scale, each scale covering 32 elements along K. The
    product is taken in a grouped view, (M, K/32, 32) * (M, K/32, 1) or (K/32, 32, N) * (K/32, 1, N), so the
    scale broadcasts inside the multiply and no (M, K) scale tile is built."""
    scale = sem.to_tensor(scale)
    shape, cdt = v.shape, v.dtype
    batch, rows, k = (shape[:-2], shape[-2], shape[-1]) if side == "lhs" else (shape[:-2], shape[-1], shape[-2])
    if not scale.is_tile or scale.dtype not in (dt.uint8, dt.int8):
        got = f"dtype {scale.dtype}" if scale.is_tile else "a scalar"
        raise KernelTypeError(f"dl.dot_scaled's {side}_scale must be a uint8 tile of e8m0 exponents, got {got}",
                              hint="one byte per 32 elements along K: the value 2^(s - 127)")
    if k % SCALE_GROUP:
        raise KernelTypeError(f"dl.dot_scaled with a {side}_scale needs K to be a multiple of {SCALE_GROUP}, "
                              f"got K = {k}", hint=f"each scale covers {SCALE_GROUP} consecutive elements along K")
    groups = k // SCALE_GROUP
    want = batch + (rows, groups)
    if scale.shape != want:
        dim = "M" if side == "lhs" else "N"
        raise KernelTypeError(f"dl.dot_scaled's {side}_scale has shape {scale.shape}, but the {fmt} {side} operand "
                              f"needs {want}: ({dim}, K / {SCALE_GROUP}) with {dim} = {rows}, K = {k}",
                              hint=f"{side}_scale is laid out ({dim}, K / {SCALE_GROUP}) for "
                                   f"{'lhs (M, K)' if side == 'lhs' else 'rhs (K, N) too'}")
    f = _e8m0(sem, sem.cast(scale, dt.uint8, bitcast=True), cdt, fast_math)
    if side == "lhs":
        grouped, f = batch + (rows, groups, SCALE_GROUP), sem.expand_dims(f, -1)
    else:  # only the small (N, K/32) scale tile is transposed
        grouped, f = batch + (groups, SCALE_GROUP, rows), sem.expand_dims(sem.trans(f), -2)
    return sem.reshape(sem.binary("mul", sem.reshape(v, grouped), f), shape)


def _decode(sem, x, scale, fmt, side, k_pack, fast_math, cdt):
    """The operand decoded to ``cdt`` and scaled: lhs as (M, K), rhs as (K, N)."""
    r = len(x.shape)
    x = sem.cast(x, dt.uint8 if fmt == "e2m1" else _FLOAT[fmt], bitcast=True)  # the bits as the format's dtype
    if fmt == "e2m1":
        k_axis = r - 1 if side == "lhs" else r - 2
        mn_axis = r - 2 if side == "lhs" else r - 1
        v = _e2m1(sem, x, k_axis if k_pack else mn_axis, cdt)
    else:
        v = sem.cast(x, cdt)
    return v if scale is None else _scaled(sem, v, scale, side, fmt, fast_math)


def _work(fmt, scale):
    """How many temporaries decoding an operand takes (the heavier one is decoded first, so that fewer of its
    temporaries are live next to the other decoded operand)."""
    return (fmt == "e2m1") * 2 + (scale is not None) + (fmt not in ("bf16", "fp16"))


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, lhs_k_pack=True,
               rhs_k_pack=True, out_dtype=dt.float32, _sem=None):
    """The matrix product of two tiles in microscaling (OCP MX) formats, accumulated in ``float32``.

    ``lhs_format``/``rhs_format`` are ``"e2m1"`` (fp4: uint8 tiles, two values per byte along K, the first in the
    low 4 bits), ``"e4m3"``, ``"e5m2"`` (uint8 or the fp8 dtype), ``"bf16"``, ``"fp16"``. ``lhs_scale`` (M, K/32)
    and ``rhs_scale`` (N, K/32) are uint8 e8m0 exponents, one per 32 elements along K (the value ``2^(s-127)``;
    255 is NaN), or None. Operands are decoded to ``float16`` if either format is ``"fp16"`` and to ``bfloat16``
    otherwise, scaled, and multiplied by ``dot``; ``acc`` (float32, (M, N)) is added. ``lhs_k_pack=False``
    (``rhs_k_pack=False``) means an e2m1 operand is packed along M (N) instead. ``fast_math`` skips the NaN of
    scale 255."""
    sem = _sem
    lf, rf = _format(lhs_format, "lhs"), _format(rhs_format, "rhs")
    fast_math = bool_const(fast_math, "fast_math")
    packs = {"lhs": bool_const(lhs_k_pack, "lhs_k_pack"), "rhs": bool_const(rhs_k_pack, "rhs_k_pack")}
    for side, fmt in (("lhs", lf), ("rhs", rf)):
        if not packs[side] and fmt != "e2m1":
            raise KernelTypeError(f"dl.dot_scaled: {side}_k_pack=False needs an e2m1 {side} operand, got "
                                  f"{side}_format={fmt!r}", hint="only fp4 values are packed, two per byte")
    od = sem.dtype_arg(out_dtype)
    if od is not dt.float32:
        raise KernelTypeError(f"dl.dot_scaled accumulates in float32; out_dtype={od} is not supported (as in Triton)",
                              hint="convert the result instead: dl.dot_scaled(...).to(dtype)")
    a, b = _operand(sem, lhs, lf, "lhs"), _operand(sem, rhs, rf, "rhs")
    if len(a.shape) != len(b.shape) or len(a.shape) not in (2, 3):
        raise KernelTypeError(f"dl.dot_scaled needs two 2-D (or two 3-D, batched) tiles, got shapes {a.shape} and "
                              f"{b.shape}")
    # the logical shapes: an e2m1 tile holds twice as many values along its packed dimension
    la, lb = list(a.shape), list(b.shape)
    if lf == "e2m1":
        la[-1 if packs["lhs"] else -2] *= 2
    if rf == "e2m1":
        lb[-2 if packs["rhs"] else -1] *= 2
    if la[-1] != lb[-2]:
        raise KernelTypeError(f"dl.dot_scaled: the {lf} lhs {tuple(a.shape)} holds K = {la[-1]} values per row but "
                              f"the {rf} rhs {tuple(b.shape)} holds K = {lb[-2]} per column",
                              hint="an e2m1 operand packs two values per byte along K: (M, K // 2) or (K // 2, N)")
    if len(a.shape) == 3 and la[0] != lb[0]:
        raise KernelTypeError(f"dl.dot_scaled: batch sizes {la[0]} and {lb[0]} differ")
    cdt = dt.float16 if "fp16" in (lf, rf) else dt.bfloat16
    ls, rs = unwrap(lhs_scale), unwrap(rhs_scale)
    sides = [("lhs", a, ls, lf), ("rhs", b, rs, rf)]
    decoded = {side: _decode(sem, v, s, f, side, packs[side], fast_math, cdt)
               for side, v, s, f in sorted(sides, key=lambda t: -_work(t[3], t[2]))}
    x, y = decoded["lhs"], decoded["rhs"]
    acc = unwrap(acc)
    if acc is not None:
        acc = sem.to_tensor(acc)
        shape = tuple(la[:-1]) + (lb[-1],)
        if acc.dtype is not dt.float32 or acc.shape != shape:
            raise KernelTypeError(f"dl.dot_scaled's acc must be a float32 tile of the product's shape {shape}, got "
                                  f"{acc.dtype} {acc.shape if acc.is_tile else 'scalar'}",
                                  hint="start it with dl.zeros((M, N), dl.float32)")
    return sem.dot(x, y, acc, dt.float32)


__all__ = ["dot_scaled"]
