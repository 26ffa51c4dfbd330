"""torch dtypes are accepted wherever dvmlang takes a dtype (issue 14), read by name: dvmlang never imports
torch for it."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang import dtypes as dt

torch = pytest.importorskip("torch")

PAIRS = [(torch.bool, dt.bool_), (torch.int8, dt.int8), (torch.uint8, dt.uint8), (torch.int16, dt.int16),
         (torch.int32, dt.int32), (torch.int64, dt.int64), (torch.float16, dt.float16), (torch.half, dt.float16),
         (torch.bfloat16, dt.bfloat16), (torch.float32, dt.float32), (torch.float64, dt.float64),
         (torch.float8_e4m3fn, dt.float8e4nv), (torch.float8_e5m2, dt.float8e5), (torch.uint32, dt.uint32)]


@pytest.mark.parametrize("tdt, d", PAIRS, ids=lambda p: str(p))
def test_each_torch_dtype_is_dvmlangs(tdt, d):
    assert dt.lookup(tdt) is d


def test_torch_dtypes_dvmlang_lacks_are_not_dtypes():
    assert dt.lookup(torch.complex64) is None and dt.lookup(torch.float8_e4m3fnuz) is None


@dvmlang.kernel
def cast_k(x_ptr, o_ptr):
    x = dl.load(x_ptr + dl.arange(0, 4))
    dl.store(o_ptr + dl.arange(0, 4), x.to(torch.float16) + dl.zeros((4,), dtype=torch.float32))


def test_torch_dtypes_in_kernels_and_ops():
    x = np.array([0.1, 1.1, 2.1, 3.1], np.float32)
    o = np.zeros(4, np.float32)
    cast_k[(1,)](x, o)
    np.testing.assert_array_equal(o, x.astype(np.float16).astype(np.float32))
    y = dvmlang.ops.cast(dvmlang.tensor(x), torch.bfloat16)
    assert y.dtype is dt.bfloat16


@dvmlang.kernel
def bad_k(o_ptr):
    dl.store(o_ptr + dl.arange(0, 4), dl.zeros((4,), dtype=torch.complex64))


def test_a_torch_dtype_dvmlang_lacks_is_a_clear_error():
    with pytest.raises(dvmlang.errors.KernelTypeError, match="is not a dtype"):
        bad_k[(1,)](np.zeros(4, np.float32))
