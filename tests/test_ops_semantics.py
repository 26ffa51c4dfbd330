"""dvmlang.ops follow numpy's and PyTorch's semantics (kernels follow Triton's): NaN propagates through max,
min, maximum and minimum, and tensor dtypes promote as torch promotes them."""

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.ops as ops
from dvmlang import dtypes as dt

A = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
B = np.array([[np.nan, 0.0, 9.0], [1.0, np.nan, 2.0]], np.float32)


def _graph(a, b):
    return ops.max(a, axis=1), ops.min(a, axis=0), ops.maximum(a, b), ops.minimum(a, b), ops.max(a)


def _numpy(a, b):
    return np.max(a, 1), np.min(a, 0), np.maximum(a, b), np.minimum(a, b), np.max(a)


@pytest.mark.parametrize("mode", ["graph", "unfused", "eager", "lazy"])
def test_nan_propagates_like_numpy(mode):
    if mode in ("graph", "unfused"):
        got = dvmlang.graph(_graph, fuse=mode == "graph")(A, B)
    elif mode == "eager":
        got = _graph(dvmlang.tensor(A), dvmlang.tensor(B))
    else:
        with dvmlang.lazy():
            got = [np.asarray(v) for v in _graph(dvmlang.tensor(A), dvmlang.tensor(B))]
    for g, e in zip(got, _numpy(A, B)):
        np.testing.assert_array_equal(np.asarray(g), e)


def test_nan_propagates_in_a_row_too_long_for_one_tile():
    x = np.random.default_rng(0).random((3, 70_000), dtype=np.float32)
    x[1, 65_000] = np.nan
    np.testing.assert_array_equal(dvmlang.graph(lambda v: ops.max(v, axis=1))(x), np.max(x, axis=1))


def test_kernels_keep_tritons_nan_ignoring_max_and_can_ask_for_propagation():
    @dvmlang.kernel
    def both(x_ptr, out_ptr, N: dl.constexpr):
        x = dl.load(x_ptr + dl.arange(0, N))
        dl.store(out_ptr, dl.max(x, axis=0))
        dl.store(out_ptr + 1, dl.max(x, axis=0, propagate_nan=dl.PropagateNan.ALL))
        dl.store(out_ptr + 2, dl.min(x, axis=0, propagate_nan=dl.PropagateNan.ALL))

    x = np.array([1, np.nan, 7, 2], np.float32)
    out = np.zeros(3, np.float32)
    both[(1,)](x, out, N=4)
    assert out[0] == 7 and np.isnan(out[1]) and np.isnan(out[2])


@pytest.mark.parametrize("a, b, want", [
    (np.float16, ml_dtypes.bfloat16, np.float32), (np.uint8, np.int8, np.int16), (np.uint16, np.int16, np.int32),
    (np.uint32, np.int32, np.int64), (np.uint8, np.int32, np.int32), (np.bool_, np.uint8, np.uint8),
    (ml_dtypes.bfloat16, np.int32, ml_dtypes.bfloat16), (np.float16, np.float32, np.float32),
    (np.int8, np.int64, np.int64)])
def test_tensor_promotion_is_torchs(a, b, want):
    x = (np.arange(6) % 3).astype(a).reshape(2, 3)
    y = (np.arange(6) % 4 + 1).astype(b).reshape(2, 3)
    assert dt.promote_tensors(dt.lookup(np.dtype(a)), dt.lookup(np.dtype(b))).np == np.dtype(want)
    got = dvmlang.graph(lambda p, q: p + q)(x, y)
    assert got.dtype == np.dtype(want)
    np.testing.assert_array_equal(got.astype(np.float64), x.astype(np.float64) + y.astype(np.float64))
    eager = np.asarray(dvmlang.tensor(x) + dvmlang.tensor(y))
    assert eager.dtype == np.dtype(want)
