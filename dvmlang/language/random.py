"""Random numbers in the kernel language: Triton's Philox generator, value for value (``philox``,
``randint``, ``rand``, ``randn`` and their four-block forms, ``uint_to_uniform_float``, Box-Muller).
"""

from __future__ import annotations

from ..errors import KernelTypeError
from .core import int_const, builtin, int32, int64, uint32, uint64

N_ROUNDS_DEFAULT = 10
# Philox key increments (Weyl constants) and round multipliers, for 32-bit and 64-bit counters
_PHILOX_CONSTANTS = {32: (0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57),
                     64: (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B, 0xD2E7470EE14C6C93, 0xCA5A826395121157)}


@builtin
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """``n_rounds`` rounds of Philox on the counter (c0, c1, c2, c3) with the key (k0, k1), all ``uint32``
    (Philox4x32) or all ``uint64`` (Philox4x64); returns the four output words."""
    c = [_sem.to_tensor(v) for v in (c0, c1, c2, c3)]
    if c[0].dtype not in (uint32, uint64) or any(v.dtype is not c[0].dtype for v in c):
        raise KernelTypeError(f"dl.philox_impl needs four uint32 or four uint64 counters, got "
                              f"{', '.join(str(v.dtype) for v in c)}",
                              hint="use dl.philox, which converts the counters and splits the seed")
    d = c[0].dtype
    key_a, key_b, round_a, round_b = _PHILOX_CONSTANTS[d.bits]
    k = [_sem.cast(_sem.to_tensor(v), d) for v in (k0, k1)]
    c0, c1, c2, c3 = c
    for _ in range(int_const(n_rounds, "n_rounds")):
        _c0, _c2 = c0, c2
        c0 = _sem.binary("xor", _sem.binary("xor", _sem.umulhi(round_b, _c2), c1), k[0])
        c2 = _sem.binary("xor", _sem.binary("xor", _sem.umulhi(round_a, _c0), c3), k[1])
        c1 = _sem.binary("mul", round_b, _c2)
        c3 = _sem.binary("mul", round_a, _c0)
        k = [_sem.binary("add", k[0], key_a), _sem.binary("add", k[1], key_b)]
    return c0, c1, c2, c3


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Philox keyed by an integer ``seed`` (as ``uint64``: the low and high 32 bits key 32-bit counters, the
    whole seed keys 64-bit ones) on counters of 32 or 64 bits (their bits reinterpreted as unsigned)."""
    seed = _sem.to_tensor(seed)
    if not seed.dtype.is_int:
        raise KernelTypeError(f"the Philox seed must be an integer, got {seed.dtype}", hint="pass an int seed")
    seed = _sem.cast(seed, uint64)
    c = [_sem.to_tensor(v) for v in (c0, c1, c2, c3)]
    bits = c[0].dtype.bits
    if bits not in (32, 64) or any(v.dtype.bits != bits for v in c):
        raise KernelTypeError(f"dl.philox needs four 32-bit or four 64-bit counters, got "
                              f"{', '.join(str(v.dtype) for v in c)}", hint="cast the counters with .to(dl.uint32)")
    d = uint32 if bits == 32 else uint64
    if bits == 32:
        k0 = _sem.cast(_sem.binary("and", seed, 0xFFFFFFFF), uint32)
        k1 = _sem.cast(_sem.binary("and", _sem.binary("shr", seed, 32), 0xFFFFFFFF), uint32)
    else:
        k0, k1 = seed, _sem.cast(0, uint64)
    c = [_sem.cast(v, d, True) for v in c]
    return philox_impl(*c, k0, k1, n_rounds, _sem=_sem)


@builtin
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of random ``uint32`` for a scalar ``seed`` and a block of integer ``offset`` s: Philox4x32 on
    the counter (offset low 32 bits, offset high 32 bits, 0, 0)."""
    offset = _sem.to_tensor(offset)
    if not offset.dtype.is_int:
        raise KernelTypeError(f"random-number offsets must be integers, got {offset.dtype}",
                              hint="use dl.arange-based integer offsets")
    lo = _sem.cast(offset, uint32)
    zero = _sem.full(offset.shape, 0, uint32) if offset.is_tile else _sem.cast(0, uint32)
    hi = _sem.cast(_sem.binary("shr", offset, 32), uint32) if offset.dtype.bits > 32 else zero
    return philox(seed, lo, hi, zero, zero, n_rounds, _sem=_sem)


@builtin
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``uint32`` for a scalar ``seed`` and a block of integer offsets (the first word of
    ``randint4x``)."""
    return randint4x(seed, offset, n_rounds, _sem=_sem)[0]


@builtin
def uint_to_uniform_float(x, _sem=None):
    """Random 32- or 64-bit integers to ``float32`` uniform in [0, 1) (Triton's mapping: the bits read as signed,
    negatives folded onto non-negatives, times a scale just below 2**-31 or 2**-63)."""
    x = _sem.to_tensor(x)
    if x.dtype in (int32, uint32):
        x, scale = _sem.cast(x, int32, True), 4.6566127342e-10
    elif x.dtype in (int64, uint64):
        x, scale = _sem.cast(x, int64, True), 1.0842020432385337e-19
    else:
        raise KernelTypeError(f"dl.uint_to_uniform_float needs 32- or 64-bit integers, got {x.dtype}")
    x = _sem.where(_sem.compare("lt", x, 0), _sem.binary("sub", _sem.unary("neg", x), 1), x)
    return _sem.binary("mul", x, scale)


@builtin
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``float32`` uniform in [0, 1) for a scalar ``seed`` and a block of integer offsets."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds, _sem=_sem), _sem=_sem)


@builtin
def rand4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of random ``float32`` uniform in [0, 1) (from the four words of ``randint4x``)."""
    return tuple(uint_to_uniform_float(v, _sem=_sem) for v in randint4x(seed, offset, n_rounds, _sem=_sem))


@builtin
def pair_uniform_to_normal(u1, u2, _sem=None):
    """The Box-Muller transform: two uniform blocks to two standard normal blocks."""
    u1 = _sem.binary("maximum", 1.0e-7, u1)
    th = _sem.binary("mul", 6.283185307179586, u2)
    r = _sem.unary("sqrt", _sem.binary("mul", -2.0, _sem.unary("log", u1)))
    return _sem.binary("mul", r, _sem.unary("cos", th)), _sem.binary("mul", r, _sem.unary("sin", th))


@builtin
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """A block of random ``float32`` from the standard normal distribution (Box-Muller on the first two words
    of ``randint4x``)."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds, _sem=_sem)
    return pair_uniform_to_normal(uint_to_uniform_float(i1, _sem=_sem), uint_to_uniform_float(i2, _sem=_sem),
                                  _sem=_sem)[0]


@builtin
def randn4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _sem=None):
    """Four blocks of standard normal ``float32`` (Box-Muller on the pairs of ``rand4x``)."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds, _sem=_sem)
    return pair_uniform_to_normal(u1, u2, _sem=_sem) + pair_uniform_to_normal(u3, u4, _sem=_sem)


__all__ = ["philox_impl", "philox", "randint4x", "randint", "uint_to_uniform_float", "rand", "rand4x",
           "pair_uniform_to_normal", "randn", "randn4x"]
