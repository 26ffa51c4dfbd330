"""``triton.tools.mxfp``: host helpers for the OCP microscaling formats (tutorial 10 imports them).

``MXFP4Tensor`` holds fp4 e2m1 codes (one per uint8: sign, two exponent bits, one mantissa bit; the values
0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), ``MXScaleTensor`` e8m0 block scales (a biased power of two,
255 is NaN), with Triton's methods: ``random``, ``to(float32)``, conversion from floats (round to the nearest
code, ties to the even code, saturating at 6), and packing two fp4 codes per byte along a dimension
(``to_packed_tensor`` / ``unpack_packed_tensor``). The arithmetic is numpy's; torch is not imported here: with
torch loaded (the program imported it) the results are torch tensors, as Triton's are, else numpy arrays.
"""

from __future__ import annotations

import sys

import numpy as np

from ...errors import DvmError

# the magnitudes of the 8 fp4 e2m1 codes 0..7 (the sign is bit 3)
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _out(a: np.ndarray, device=None):
    torch = sys.modules.get("torch")
    if torch is None:
        return a
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(device) if device is not None and str(device) != "cpu" else t


def _float32(dtype) -> None:
    if str(dtype) not in ("torch.float32", "float32", "<class 'numpy.float32'>") and dtype is not np.float32:
        raise DvmError(f"mxfp: only float32 conversion is supported (as in Triton), got {dtype}")


def _rng():
    torch = sys.modules.get("torch")
    if torch is not None:  # follow torch's seed (torch.manual_seed), as Triton's helpers draw with torch
        return np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,)).item()))
    return np.random.default_rng()


class _Codes:
    """What both formats' tensors share: made from float data (converted to codes) or a size (codes drawn by
    ``random``)."""

    def __init__(self, data=None, size=None, device=None):
        self.device = device
        if data is not None:
            self.device = getattr(data, "device", device)
            self.data = _out(self._from_float(_np(data).astype(np.float32)), self.device)
            self.size = tuple(self.data.shape)
        elif size is not None:
            self.size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        else:
            raise DvmError(f"{type(self).__name__} needs data or size")


class MXFP4Tensor(_Codes):
    """fp4 e2m1 codes (``data``: uint8, one code per element)."""


    def random(self):
        """Every code equally likely (sign, exponent and mantissa bits drawn independently)."""
        r = _rng()
        s = r.integers(0, 2, self.size, dtype=np.uint8)
        e = r.integers(0, 4, self.size, dtype=np.uint8)
        m = r.integers(0, 2, self.size, dtype=np.uint8)
        self.data = _out((s << 3) | (e << 1) | m, self.device)
        return self

    def to(self, dtype):
        """The codes' values as float32."""
        _float32(dtype)
        d = _np(self.data)
        v = _E2M1[d & 0x7] * np.where(d & 0x8, -1.0, 1.0).astype(np.float32)
        return _out(v.astype(np.float32), self.device)

    def _from_float(self, values: np.ndarray) -> np.ndarray:
        """The nearest code of each value: ties go to the even code (mantissa bit 0), magnitudes beyond 6 and
        infinities and NaNs saturate to 6, the sign is kept (zero included)."""
        sign = np.signbit(values).astype(np.uint8) << 3
        mag = np.abs(values)
        mag = np.where(np.isnan(mag) | np.isinf(mag), np.float32(6.0), mag)
        dist = np.abs(mag[..., None] - _E2M1)
        ties = dist == dist.min(-1, keepdims=True)
        even = ties & (np.arange(8) % 2 == 0)
        pick = np.where(even.any(-1), np.argmax(even, -1), np.argmax(ties, -1)).astype(np.uint8)
        return (sign | pick).astype(np.uint8)

    def to_packed_tensor(self, dim):
        """Two codes per uint8 along ``dim`` (the first in the low nibble), padded with a zero code when the
        dimension is odd."""
        d = _np(self.data)
        if not 0 <= dim < d.ndim:
            raise DvmError(f"to_packed_tensor: dim {dim} is not a dimension of a {d.ndim}-d tensor")
        if d.shape[dim] % 2:
            pad = [(0, 0)] * d.ndim
            pad[dim] = (0, 1)
            d = np.pad(d, pad)
        lo = np.take(d, np.arange(0, d.shape[dim], 2), axis=dim)
        hi = np.take(d, np.arange(1, d.shape[dim], 2), axis=dim)
        return _out(((hi << 4) | lo).astype(np.uint8), self.device)

    def unpack_packed_tensor(self, packed_tensor, dim, original_shape):
        """The codes of a packed tensor, one per uint8, with the padding removed."""
        p = _np(packed_tensor)
        both = np.stack((p & 0xF, (p >> 4) & 0xF), axis=dim + 1)
        shape = list(p.shape)
        shape[dim] *= 2
        d = both.reshape(shape)
        d = np.take(d, np.arange(original_shape[dim]), axis=dim)
        return _out(d.astype(np.uint8), self.device)


def fp8e8m0_to_float32(scale):
    """e8m0 scale bytes as float32: 2**(e - 127), 255 is NaN."""
    s = _np(scale).view(np.uint8) if _np(scale).dtype != np.uint8 else _np(scale)
    bits = np.maximum(s.astype(np.int32) << 23, 0x00400000)
    bits = np.where(s == 255, 0x7FC00000, bits).astype(np.int32)
    return _out(bits.view(np.float32))


class MXScaleTensor(_Codes):
    """e8m0 block scales (``data``: uint8 biased exponents)."""


    def random(self, low=None, high=None):
        """Exponents drawn uniformly from those of ``low`` .. ``high`` (never the NaN code)."""
        lo = 0 if low is None else max(0, int(np.log2(low)) + 127)
        hi = 254 if high is None else min(254, max(0, int(np.log2(high)) + 127))
        if lo > hi:
            raise DvmError("MXScaleTensor.random: low must not be above high")
        self.data = _out(_rng().integers(lo, hi + 1, self.size).astype(np.uint8), self.device)
        return self

    def to(self, dtype):
        _float32(dtype)
        return fp8e8m0_to_float32(self.data)

    def _from_float(self, values: np.ndarray) -> np.ndarray:
        """floor(log2(value)) biased by 127, clamped to 0..254; non-positive, NaN and infinite values are 255."""
        bad = np.isnan(values) | np.isinf(values) | (values <= 0)
        e = np.floor(np.log2(np.where(bad, 1.0, values))).astype(np.int32) + 127
        return np.where(bad, 255, np.clip(e, 0, 254)).astype(np.uint8)


__all__ = ["MXFP4Tensor", "MXScaleTensor", "fp8e8m0_to_float32"]
