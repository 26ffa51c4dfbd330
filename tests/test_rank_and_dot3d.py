"""Tiles of rank 4 and 5 end to end, and the batched (3-D) ``dl.dot``, against numpy.

Rank 4/5 pointer tiles load and store through DMA_LOAD4/5 and DMA_STORE4/5 (16-bit descriptor operands; an
immediate that does not fit goes through its register); permutes of rank 5 use VPERM5, slices VSLICE5; a
descriptor of more than 5 dims folds its contiguous dims or is refused. ``dl.dot`` of (B, M, K) @ (B, K, N) is
one MMAD on 3-D tiles (B matrix products for the cost model), split over the batch when L0 cannot hold it.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.errors import CompilationError, KernelTypeError
from dvmlang.npu import timing
from dvmlang.npu.profile import PROFILES
from dvmlang.vm import isa

pytestmark = pytest.mark.filterwarnings("ignore::dvmlang.PerformanceWarning")


def names(launch) -> list[str]:
    """The instruction names of a launch's bytecode."""
    return [d.ins.name for d in launch.bytecode.decoded[0]]


# ---- rank 4 and 5: loads, stores, masks ----------------------------------------------------------------------

@dvmlang.kernel
def copy4(x, y, s0, s1, s2, s3, n3, A: dl.constexpr, B: dl.constexpr, C: dl.constexpr, D: dl.constexpr):
    """y (contiguous A x B x C x D) = 2 * x read through runtime strides, the last dim masked to n3 (-1 beyond)."""
    a = dl.arange(0, A)[:, None, None, None]
    b = dl.arange(0, B)[None, :, None, None]
    c = dl.arange(0, C)[None, None, :, None]
    d = dl.arange(0, D)[None, None, None, :]
    v = dl.load(x + a * s0 + b * s1 + c * s2 + d * s3, mask=d < n3, other=-1.0)
    dl.store(y + a * (B * C * D) + b * (C * D) + c * D + d, v * 2)


def test_rank4_load_store_runtime_strides_and_mask():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 3, 4, 8)).astype(np.float32)
    view = base.transpose(1, 0, 2, 3)[:, 1:4]  # (3, 3, 4, 8), not contiguous
    st = [s // 4 for s in view.strides]
    off = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 4
    y = np.zeros((3, 3, 4, 8), np.float32)
    launch = copy4[(1,)](base.reshape(-1)[off:], y, *st, 6, 3, 3, 4, 8)
    ref = 2 * view.copy()
    ref[..., 6:] = -2
    np.testing.assert_array_equal(y, ref)
    assert "DMA_LOAD4" in names(launch) and "DMA_STORE4" in names(launch)


@dvmlang.kernel
def copy5(x, y, n0, A: dl.constexpr, B: dl.constexpr, C: dl.constexpr, D: dl.constexpr, E: dl.constexpr):
    a = dl.arange(0, A)[:, None, None, None, None]
    b = dl.arange(0, B)[None, :, None, None, None]
    c = dl.arange(0, C)[None, None, :, None, None]
    d = dl.arange(0, D)[None, None, None, :, None]
    e = dl.arange(0, E)[None, None, None, None, :]
    off = a * (B * C * D * E) + b * (C * D * E) + c * (D * E) + d * E + e
    v = dl.load(x + off, mask=(a < n0) & (c >= 1), other=7)
    dl.store(y + off, v + 1, mask=e < E - 1)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32])
def test_rank5_load_store_with_box_masks(dtype):
    shape = (3, 2, 3, 2, 8)
    x = np.arange(math.prod(shape)).astype(dtype)
    y = np.full(shape, 5, dtype)
    launch = copy5[(1,)](x, y, 2, *shape)
    v = x.reshape(shape).copy()
    v[2:] = 7
    v[:, :, :1] = 7
    ref = np.full(shape, 5, dtype)
    ref[..., :-1] = (v + 1)[..., :-1]
    np.testing.assert_array_equal(y, ref)
    assert "DMA_LOAD5" in names(launch) and "DMA_STORE5" in names(launch)


@dvmlang.kernel
def block_ptr4(x, y, o0, o1, o2, o3):
    p = dl.make_block_ptr(x, shape=(3, 3, 5, 7), strides=(105, 35, 7, 1), offsets=(o0, o1, o2, o3),
                          block_shape=(2, 2, 4, 8), order=(3, 2, 1, 0))
    v = dl.load(p, boundary_check=(0, 1, 2, 3), padding_option="zero")
    q = dl.make_block_ptr(y, shape=(2, 2, 4, 8), strides=(64, 32, 8, 1), offsets=(0, 0, 0, 0),
                          block_shape=(2, 2, 4, 8), order=(3, 2, 1, 0))
    dl.store(q, v + 1)


@pytest.mark.parametrize("off", [(0, 0, 0, 0), (2, 2, 4, 0), (1, 2, 3, 1)])
def test_rank4_block_pointer_with_boundary_check(off):
    x = np.arange(315, dtype=np.float32).reshape(3, 3, 5, 7)
    y = np.zeros((2, 2, 4, 8), np.float32)
    launch = block_ptr4[(1,)](x, y, *off)
    ref = np.zeros((2, 2, 4, 8), np.float32)
    part = x[off[0]:off[0] + 2, off[1]:off[1] + 2, off[2]:off[2] + 4, off[3]:off[3] + 8]
    ref[tuple(slice(0, n) for n in part.shape)] = part
    np.testing.assert_array_equal(y, ref + 1)
    assert "DMA_LOAD4" in names(launch)


@dvmlang.kernel
def big_strides(x, y, A: dl.constexpr, B: dl.constexpr, C: dl.constexpr, D: dl.constexpr, S: dl.constexpr):
    """The outer stride S is a constant beyond a 16-bit immediate: the descriptor names its register."""
    a = dl.arange(0, A)[:, None, None, None]
    b = dl.arange(0, B)[None, :, None, None]
    c = dl.arange(0, C)[None, None, :, None]
    d = dl.arange(0, D)[None, None, None, :]
    v = dl.load(x + a * S + b * (C * D) + c * D + d)
    dl.store(y + a * (B * C * D) + b * (C * D) + c * D + d, v)


def test_rank4_descriptor_immediate_too_wide_for_16_bits_uses_a_register():
    S = 40_000
    x = np.arange(2 * S, dtype=np.float32)
    y = np.zeros((2, 2, 2, 8), np.float32)
    launch = big_strides[(1,)](x, y, 2, 2, 2, 8, S)
    ref = np.stack([x[i * S:i * S + 32].reshape(2, 2, 8) for i in range(2)])
    np.testing.assert_array_equal(y, ref)
    d = next(d for d in launch.bytecode.decoded[0] if d.ins.name == "DMA_LOAD4")
    assert d.vals["stride0"] & isa.SOP16_REG_BIT  # 40000 is a register, the small strides are immediates
    assert not d.vals["stride3"] & isa.SOP16_REG_BIT and d.vals["stride3"] == 1
    assert "stride0=r" in launch.bytecode.disassemble()


@dvmlang.kernel
def store9(x, z):
    a = dl.load(x + dl.arange(0, 512))
    t = dl.reshape(a, (2, 2, 2, 2, 2, 2, 2, 2, 2))
    off = (dl.arange(0, 2)[:, None, None, None, None, None, None, None, None] * 256 +
           dl.arange(0, 2)[None, :, None, None, None, None, None, None, None] * 128 +
           dl.arange(0, 2)[None, None, :, None, None, None, None, None, None] * 64 +
           dl.arange(0, 2)[None, None, None, :, None, None, None, None, None] * 32 +
           dl.arange(0, 2)[None, None, None, None, :, None, None, None, None] * 16 +
           dl.arange(0, 2)[None, None, None, None, None, :, None, None, None] * 8 +
           dl.arange(0, 2)[None, None, None, None, None, None, :, None, None] * 4 +
           dl.arange(0, 2)[None, None, None, None, None, None, None, :, None] * 2 +
           dl.arange(0, 2)[None, None, None, None, None, None, None, None, :])
    dl.store(z + off, t + 1)


def test_rank9_contiguous_store_folds_to_one_dim():
    """Triton's test_reshape stores a (2,)*9 tile: contiguous constant strides fold into a 1-D descriptor."""
    x = np.arange(512, dtype=np.int32)
    z = np.zeros(512, np.int32)
    launch = store9[(1,)](x, z)
    np.testing.assert_array_equal(z, x + 1)
    assert "DMA_STORE1" in names(launch)


@dvmlang.kernel
def store6_strided(x, z, s):
    """A rank-6 tile whose outer strides are runtime values: nothing folds."""
    a = dl.load(x + dl.arange(0, 64))
    t = dl.reshape(a, (2, 2, 2, 2, 2, 2))
    off = (dl.arange(0, 2)[:, None, None, None, None, None] * s +
           dl.arange(0, 2)[None, :, None, None, None, None] * (2 * s) +
           dl.arange(0, 2)[None, None, :, None, None, None] * (4 * s) +
           dl.arange(0, 2)[None, None, None, :, None, None] * (8 * s) +
           dl.arange(0, 2)[None, None, None, None, :, None] * (16 * s) +
           dl.arange(0, 2)[None, None, None, None, None, :] * (32 * s))
    dl.store(z + off, t)


def test_rank6_descriptor_that_does_not_fold_is_a_clear_error():
    x = np.arange(64, dtype=np.float32)
    z = np.zeros(64, np.float32)
    with pytest.raises(CompilationError, match=r"rank-6 tiles need a DMA descriptor of 6 dims; the DMA takes at "
                                               r"most 5") as e:
        store6_strided[(1,)](x, z, 1)
    assert e.value.hint and "reshape" in e.value.hint


@dvmlang.kernel
def permute6(x, y):
    v = dl.reshape(dl.load(x + dl.arange(0, 64)), (2, 2, 2, 2, 2, 2))
    dl.store(y + dl.arange(0, 64), dl.reshape(dl.permute(v, (5, 4, 3, 2, 1, 0)), (64,)))


def test_rank6_permute_is_a_clear_error():
    x = np.zeros(64, np.float32)
    with pytest.raises(CompilationError, match=r"permutes of rank-6 tiles are not supported \(at most 5 dims\)"):
        permute6[(1,)](x, x)


# ---- rank 4 and 5: permute, trans, reshape, expand_dims, broadcast, reductions, split -------------------------

@dvmlang.kernel
def permute_k(x, y, N: dl.constexpr, SHAPE: dl.constexpr, P: dl.constexpr):
    v = dl.reshape(dl.load(x + dl.arange(0, N)), SHAPE)
    dl.store(y + dl.arange(0, N), dl.reshape(dl.permute(v, P), (N,)))


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_rank4_permute_every_permutation(perm):
    shape = (2, 3, 4, 5)
    x = np.arange(120, dtype=np.int32)
    y = np.zeros(120, np.int32)
    permute_k[(1,)](x, y, 120, shape, perm)
    np.testing.assert_array_equal(y, x.reshape(shape).transpose(perm).ravel())


@pytest.mark.parametrize("perm", list(itertools.permutations(range(5)))[::7] + [(4, 3, 2, 1, 0)])
def test_rank5_permute(perm):
    shape = (2, 3, 2, 4, 3)
    x = np.arange(144, dtype=np.float32)
    y = np.zeros(144, np.float32)
    launch = permute_k[(1,)](x, y, 144, shape, perm)
    np.testing.assert_array_equal(y, x.reshape(shape).transpose(perm).ravel())
    assert ("VPERM5" in names(launch)) == (perm != tuple(range(5)))


@dvmlang.kernel
def trans_k(x, y):
    v = dl.reshape(dl.load(x + dl.arange(0, 48)), (2, 2, 3, 4))
    t = dl.trans(v, 3, 1, 0, 2)
    u = dl.trans(v)  # the last two dims swapped
    dl.store(y + dl.arange(0, 48), dl.reshape(t, (48,)))
    dl.store(y + 48 + dl.arange(0, 48), dl.reshape(u, (48,)))


def test_rank4_trans():
    x = np.arange(48, dtype=np.float32)
    y = np.zeros(96, np.float32)
    trans_k[(1,)](x, y)
    v = x.reshape(2, 2, 3, 4)
    np.testing.assert_array_equal(y[:48], v.transpose(3, 1, 0, 2).ravel())
    np.testing.assert_array_equal(y[48:], v.transpose(0, 1, 3, 2).ravel())


@dvmlang.kernel
def reduce5(x, y, OP: dl.constexpr, AX: dl.constexpr, KEEP: dl.constexpr):
    v = dl.reshape(dl.load(x + dl.arange(0, 96)), (2, 3, 2, 4, 2))
    if OP == "sum":
        r = dl.sum(v, axis=AX, keep_dims=KEEP)
    elif OP == "max":
        r = dl.max(v, axis=AX, keep_dims=KEEP)
    elif OP == "argmin":
        r = dl.argmin(v, axis=AX, keep_dims=KEEP)
    else:
        r = dl.cumsum(v, axis=AX)
    n = r.numel
    dl.store(y + dl.arange(0, n), dl.reshape(r, (n,)).to(dl.float32))


@pytest.mark.parametrize("op", ["sum", "max", "argmin", "cumsum"])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, 4, -1])
@pytest.mark.parametrize("keep", [False, True])
def test_rank5_reductions_and_scans_along_every_axis(op, axis, keep):
    rng = np.random.default_rng(axis + 7)
    x = rng.permutation(96).astype(np.float32)
    v = x.reshape(2, 3, 2, 4, 2)
    if op == "cumsum":
        ref = np.cumsum(v, axis=axis)
    else:
        ref = {"sum": np.sum, "max": np.max, "argmin": np.argmin}[op](v, axis=axis, keepdims=keep)
    ref = ref.astype(np.float32)
    y = np.zeros(ref.size, np.float32)
    reduce5[(1,)](x, y, op, axis, keep)
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-6)


@dvmlang.kernel
def shapes5(x, y):
    v = dl.reshape(dl.load(x + dl.arange(0, 24)), (2, 3, 4))
    e = dl.expand_dims(dl.expand_dims(v, 1), 4)      # (2, 1, 3, 4, 1)
    b = dl.broadcast_to(e, (2, 2, 3, 4, 2))
    w = b * dl.reshape(dl.arange(0, 2).to(dl.float32), (1, 2, 1, 1, 1)) + e
    lo, hi = dl.split(w)                              # VSLICE5 along the last dim
    dl.store(y + dl.arange(0, 48), dl.reshape(lo - hi, (48,)))
    dl.store(y + 48 + dl.arange(0, 96), dl.reshape(w, (96,)))


def test_rank5_expand_dims_broadcast_split():
    x = np.arange(24, dtype=np.float32)
    y = np.zeros(144, np.float32)
    launch = shapes5[(1,)](x, y)
    e = x.reshape(2, 1, 3, 4, 1)
    w = np.broadcast_to(e, (2, 2, 3, 4, 2)) * np.arange(2, dtype=np.float32).reshape(1, 2, 1, 1, 1) + e
    np.testing.assert_array_equal(y[48:], w.ravel())
    np.testing.assert_array_equal(y[:48], (w[..., 0] - w[..., 1]).ravel())
    assert "VSLICE5" in names(launch)


@dvmlang.kernel
def where5(x, y, t):
    a = dl.arange(0, 2)[:, None, None, None, None]
    b = dl.arange(0, 2)[None, :, None, None, None]
    c = dl.arange(0, 3)[None, None, :, None, None]
    d = dl.arange(0, 2)[None, None, None, :, None]
    e = dl.arange(0, 4)[None, None, None, None, :]
    off = a * 48 + b * 24 + c * 8 + d * 4 + e
    v = dl.load(x + off)
    dl.store(y + off, dl.where(v > t, dl.exp(v), -v), mask=(b == 1) | (e < 2))


def test_rank5_elementwise_and_a_mask_that_is_not_a_box():
    """(b == 1) | (e < 2) is not a box of bounds: the store is a scatter, still right."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(96).astype(np.float32)
    y = np.zeros(96, np.float32)
    where5[(1,)](x, y, 0.25)
    v = x.reshape(2, 2, 3, 2, 4)
    keep = (np.arange(2).reshape(1, 2, 1, 1, 1) == 1) | (np.arange(4).reshape(1, 1, 1, 1, 4) < 2)
    ref = np.where(keep, np.where(v > 0.25, np.exp(v), -v), 0)
    np.testing.assert_allclose(y, ref.ravel(), rtol=1e-6)


# ---- batched dot ---------------------------------------------------------------------------------------------

@dvmlang.kernel
def bdot(a_ptr, b_ptr, c_ptr, o_ptr, B: dl.constexpr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr,
         ACC: dl.constexpr, OUT: dl.constexpr):
    ob = dl.arange(0, B)[:, None, None]
    om = dl.arange(0, M)[None, :, None]
    on = dl.arange(0, N)[None, None, :]
    ok = dl.arange(0, K)
    a = dl.load(a_ptr + ob * M * K + om * K + ok[None, None, :])
    b = dl.load(b_ptr + ob * K * N + ok[None, :, None] * N + on)
    if ACC:
        c = dl.load(c_ptr + ob * M * N + om * N + on)
        r = dl.dot(a, b, c, out_dtype=OUT)
    else:
        r = dl.dot(a, b, out_dtype=OUT)
    dl.store(o_ptr + ob * M * N + om * N + on, r)


def _operands(dtype, B, M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return (rng.integers(-128, 128, (B, M, K)).astype(np.int8), rng.integers(-128, 128, (B, K, N)).astype(np.int8),
                rng.integers(-1000, 1000, (B, M, N)).astype(np.int32))
    a = rng.standard_normal((B, M, K)).astype(dtype)
    b = rng.standard_normal((B, K, N)).astype(dtype)
    return a, b, rng.standard_normal((B, M, N)).astype(np.float32)


FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("shape", [(2, 16, 16, 16), (3, 1, 32, 8), (4, 32, 8, 64)])
def test_dot3d_floats_against_numpy(dtype, acc, shape):
    B, M, N, K = shape
    a, b, c = _operands(dtype, B, M, N, K)
    o = np.zeros((B, M, N), np.float32)
    launch = bdot[(1,)](a, b, c, o, B, M, N, K, acc, dl.float32)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (c if acc else 0)
    np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-4)  # products of these inputs are exact in fp32
    assert names(launch).count("MMAD") == 1


def test_dot3d_out_dtype_float16():
    a, b, c = _operands(np.float16, 2, 16, 16, 32, seed=4)
    o = np.zeros((2, 16, 16), np.float16)
    bdot[(1,)](a, b, c, o, 2, 16, 16, 32, False, dl.float16)
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(o, ref)


@pytest.mark.parametrize("acc", [False, True])
def test_dot3d_int8_accumulates_in_int32(acc):
    B, M, N, K = 3, 8, 16, 256
    a, b, c = _operands(np.int8, B, M, N, K, seed=2)
    a[0, 0, :] = 127
    b[0, :, 0] = 127  # 256 * 127 * 127 is not a float32
    o = np.zeros((B, M, N), np.int32)
    bdot[(1,)](a, b, c, o, B, M, N, K, acc, dl.int8)  # Triton: integer inputs give int32 whatever out_dtype says
    ref = np.matmul(a.astype(np.int64), b.astype(np.int64)) + (c if acc else 0)
    np.testing.assert_array_equal(o, ref)


def test_dot3d_batch_larger_than_l0_is_split_into_several_mmads():
    """(8, 32, 64) float64 operands take 128 KiB, twice L0A: the batch runs as MMADs of parts of it."""
    B, M, N, K = 8, 32, 32, 64
    a, b, c = _operands(np.float64, B, M, N, K, seed=5)
    for acc in (False, True):
        o = np.zeros((B, M, N), np.float32)
        launch = bdot[(1,)](a, b, c, o, B, M, N, K, acc, dl.float32)
        np.testing.assert_allclose(o, np.matmul(a, b) + (c if acc else 0), rtol=1e-5, atol=1e-4)
        n = names(launch).count("MMAD")
        assert n > 1 and B % n == 0


def test_dot3d_whose_one_matrix_does_not_fit_l0a_is_a_resource_error():
    """A (128, 512) float16 matrix is 128 KiB, twice L0A: no part of the batch fits (as for a 2-D dot)."""
    a, b, c = _operands(np.float16, 2, 128, 16, 512)
    o = np.zeros((2, 128, 16), np.float32)
    with pytest.raises(dvmlang.errors.ResourceError, match=r"tile \(1, 128, 512\) dl.float16 needs 131072 bytes of "
                                                                r"L0A.*use smaller BLOCK sizes"):
        bdot[(1,)](a, b, c, o, 2, 128, 16, 512, False, dl.float32)


def test_batched_mmad_costs_b_matrix_products():
    p = PROFILES["910B2"] if "910B2" in PROFILES else next(iter(PROFILES.values()))
    f = timing.formula(p, isa.BY_NAME["MMAD"].cost)
    one = f(M=32, N=32, K=64, wide=False)
    assert f(M=32, N=32, K=64, wide=False, B=4) == 4 * one
    assert one == p.cube_startup + 2 * 2 * 4


@dvmlang.kernel
def bdot_loop(a_ptr, b_ptr, o_ptr, B: dl.constexpr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr,
              BK: dl.constexpr):
    """acc = dot(a, b, acc) over K in steps of BK: the accumulator stays in L0C."""
    ob = dl.arange(0, B)[:, None, None]
    om = dl.arange(0, M)[None, :, None]
    on = dl.arange(0, N)[None, None, :]
    acc = dl.zeros((B, M, N), dl.float32)
    for k in range(0, K, BK):
        ok = k + dl.arange(0, BK)
        a = dl.load(a_ptr + ob * M * K + om * K + ok[None, None, :])
        b = dl.load(b_ptr + ob * K * N + ok[None, :, None] * N + on)
        acc = dl.dot(a, b, acc)
    dl.store(o_ptr + ob * M * N + om * N + on, acc)


def test_dot3d_in_a_k_loop():
    B, M, N, K = 2, 16, 32, 128
    a, b, _ = _operands(np.float16, B, M, N, K, seed=6)
    o = np.zeros((B, M, N), np.float32)
    bdot_loop[(1,)](a, b, o, B, M, N, K, 32)
    np.testing.assert_allclose(o, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-4)


@dvmlang.kernel
def dot_shapes(a_ptr, o_ptr, SA: dl.constexpr, SB: dl.constexpr, SC: dl.constexpr):
    a = dl.full(SA, 1.0, dl.float16)
    b = dl.full(SB, 1.0, dl.float16)
    if len(SC) > 0:
        r = dl.dot(a, b, dl.zeros(SC, dl.float32))
    else:
        r = dl.dot(a, b)
    dl.store(o_ptr + dl.arange(0, 1), dl.reshape(dl.sum(r), (1,)))


@pytest.mark.parametrize("sa, sb, sc, msg", [
    ((2, 16, 16), (3, 16, 16), (), r"dl.dot batch sizes differ: \(2, 16, 16\) @ \(3, 16, 16\)"),
    ((2, 16, 16), (16, 16), (), r"dl.dot needs two 2-D tiles, or two 3-D tiles"),
    ((1, 2, 16, 16), (1, 2, 16, 16), (), r"dl.dot needs two 2-D tiles, or two 3-D tiles"),
    ((2, 16, 8), (2, 16, 16), (), r"do not chain: 8 != 16"),
    ((2, 16, 16), (2, 16, 16), (16, 16), r"accumulator shape \(16, 16\) does not match the product shape "
                                         r"\(2, 16, 16\)"),
])
def test_dot3d_shape_errors(sa, sb, sc, msg):
    o = np.zeros(1, np.float32)
    with pytest.raises(KernelTypeError, match=msg):
        dot_shapes[(1,)](o, o, sa, sb, sc)


def test_validator_refuses_an_mmad_whose_batches_differ():
    from dvmlang.vm.families import FAMILIES

    class V:
        def __init__(self, shapes):
            self.shapes = shapes

        def tile(self, d, name):
            return self.shapes[name]

        def same(self, d, what, a, b):
            pass

        def fail(self, d, msg, expected=None, found=None):
            raise AssertionError(msg)

    f16, f32 = dvmlang.dtypes.float16, dvmlang.dtypes.float32
    ok = V({"dst": (f32, (2, 8, 4)), "a": (f16, (2, 8, 16)), "b": (f16, (2, 16, 4))})
    FAMILIES["mmad"].rule(ok, None)
    for bad in ({"dst": (f32, (2, 8, 4)), "a": (f16, (2, 8, 16)), "b": (f16, (3, 16, 4))},
                {"dst": (f32, (8, 4)), "a": (f16, (2, 8, 16)), "b": (f16, (2, 16, 4))},
                {"dst": (f32, (2, 2, 8, 4)), "a": (f16, (2, 2, 8, 16)), "b": (f16, (2, 2, 16, 4))}):
        with pytest.raises(AssertionError, match="matrix shapes do not chain"):
            FAMILIES["mmad"].rule(V(bad), None)
