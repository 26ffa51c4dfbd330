"""Host-side arguments and launches as Triton programs use them: torch CPU tensors (zero-copy, every dtype),
__dlpack__/__array_interface__ objects, strided views, None pointers, launch options, empty grids, warmup."""

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

torch = pytest.importorskip("torch")


@dvmlang.kernel
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) + dl.load(y_ptr + offs, mask=mask), mask=mask)


@dvmlang.kernel
def copy(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask), mask=mask)


@dvmlang.kernel
def scale2d(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BM: dl.constexpr, BN: dl.constexpr):
    """out[i, j] = 2 * x[i, j], both addressed through their own strides (Triton style)."""
    rm = dl.arange(0, BM)
    rn = dl.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)
    v = dl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=m)
    dl.store(out_ptr + rm[:, None] * som + rn[None, :] * son, v * 2, mask=m)


@dvmlang.kernel
def bias_add(x_ptr, b_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    v = dl.load(x_ptr + offs, mask=m)
    if b_ptr is not None:
        v = v + dl.load(b_ptr + offs, mask=m)
    dl.store(out_ptr + offs, v, mask=m)


@dvmlang.kernel
def bias_flag(x_ptr, b_ptr, out_ptr, n, HAS_BIAS: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    v = dl.load(x_ptr + offs, mask=m)
    if HAS_BIAS:
        v = v + dl.load(b_ptr + offs, mask=m)
    dl.store(out_ptr + offs, v, mask=m)


@dvmlang.kernel
def none_side(x_ptr, b_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    v = dl.load(x_ptr + offs, mask=m)
    if b_ptr is None:
        v = v * 3
    dl.store(out_ptr + offs, v, mask=m)


@dvmlang.kernel
def store_to(x_ptr, b_ptr, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    dl.store(b_ptr + offs, dl.load(x_ptr + offs))


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.uint8, torch.bool]


def _sample(dtype, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g) * 4 - 2).to(dtype)
    return torch.randint(0, 50, (n,), generator=g).to(dtype)


# ---- 1. torch CPU tensors ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_copy_every_dtype_stores_into_the_tensor(dtype):
    x = _sample(dtype, 100)
    out = torch.zeros(100, dtype=dtype)
    copy[(4,)](x, out, 100, BLOCK=32)
    assert torch.equal(out, x)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d is not torch.bool], ids=str)
def test_torch_add_matches_eager(dtype):
    x, y = _sample(dtype, 70, 1), _sample(dtype, 70, 2)
    out = torch.zeros(70, dtype=dtype)
    add[(3,)](x, y, out, 70, BLOCK=32)
    assert torch.equal(out, x + y)


def test_torch_bfloat16_is_zero_copy_ml_dtypes():
    from dvmlang.args import to_numpy
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    a = to_numpy("k", "x", x)
    assert a.dtype == ml_dtypes.bfloat16
    a[0] = 7.0
    assert x[0].item() == 7.0  # the same memory


def test_torch_requires_grad_tensor_shares_storage():
    x = torch.rand(50, requires_grad=True)
    out = torch.zeros(50, requires_grad=True)
    copy[(2,)](x, out, 50, BLOCK=32)
    assert torch.equal(out.detach(), x.detach())


def test_torch_2d_contiguous_tensor_keeps_rank_and_memory():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = torch.zeros(3, 4)
    copy[(1,)](x, out, 12, BLOCK=16)
    assert torch.equal(out, x)


def test_torch_relaunch_reuses_the_build():
    k = dvmlang.kernel(copy.fn)
    for _ in range(3):
        x = torch.rand(40)
        out = torch.zeros(40)
        k[(2,)](x, out, 40, BLOCK=32)
        assert torch.equal(out, x)
    assert k.cache_info().builds == 1
    assert k.cache_info().encodes == 1


def test_torch_unsupported_dtype_names_argument():
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `copy`.*complex64"):
        copy[(1,)](torch.zeros(4, dtype=torch.complex64), torch.zeros(4), 4, BLOCK=4)


def test_torch_meta_device_is_refused():
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `copy` is a torch tensor on `meta`"):
        copy[(1,)](torch.zeros(4, device="meta"), torch.zeros(4), 4, BLOCK=4)


def test_torch_mixed_with_numpy():
    x = torch.rand(30)
    out = np.zeros(30, np.float32)
    copy[(1,)](x, out, 30, BLOCK=32)
    np.testing.assert_array_equal(out, x.numpy())


# ---- 2. __dlpack__ and __array_interface__ objects ----------------------------------------------------

class ArrayInterface:
    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPack:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterface, DLPack])
def test_foreign_array_objects_bind_zero_copy(wrap):
    x = np.arange(20, dtype=np.float32)
    out = np.zeros(20, np.float32)
    copy[(1,)](wrap(x), wrap(out), 20, BLOCK=32)
    np.testing.assert_array_equal(out, x)


def test_object_array_interface_is_refused():
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `copy`"):
        copy[(1,)](ArrayInterface(np.array([object()] * 4)), np.zeros(4, np.float32), 4, BLOCK=4)


# ---- 3. strided views: a pointer to the first element, the kernel's strides decide -----------------------

def test_transposed_tensor_through_its_strides():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = base.t()  # (4, 3), not contiguous
    out = torch.zeros(4, 3)
    scale2d[(1,)](x, out, 4, 3, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=4, BN=4)
    assert torch.equal(out, x * 2)


def test_store_into_a_column_view_lands_in_the_base():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    expect = base.clone()
    expect[:, 1] *= 2
    col = base[:, 1]
    scale2d[(1,)](col, col, 3, 1, col.stride(0), 0, col.stride(0), 0, BM=4, BN=1)
    assert torch.equal(base, expect)


def test_strided_store_into_transposed_output():
    x = torch.rand(5, 6)
    out_base = torch.zeros(6, 5)
    out = out_base.t()  # (5, 6) view, strides (1, 5)
    scale2d[(1,)](x, out, 5, 6, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=8, BN=8)
    assert torch.equal(out, x * 2)
    assert torch.equal(out_base, (x * 2).t())


def test_strided_view_with_offset_reads_from_its_first_element():
    base = torch.arange(40, dtype=torch.int32).reshape(5, 8)
    x = base[1:4, 2:7]  # offset view, rows of stride 8
    out = torch.zeros(3, 5, dtype=torch.int32)
    scale2d[(1,)](x, out, 3, 5, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BM=4, BN=8)
    assert torch.equal(out, x * 2)


def test_strided_view_access_past_its_memory_faults():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    col = base[:, 1]  # spans elements 1..9 of the base: 9 elements from its first
    with pytest.raises(dvmlang.DvmError, match="out-of-bounds access to `x_ptr`"):
        scale2d[(1,)](col, torch.zeros(4), 4, 1, col.stride(0), 0, 1, 0, BM=4, BN=1)


def test_numpy_negative_stride_via_array_interface_is_refused():
    a = np.arange(10, dtype=np.float32)[::-1]
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `copy` has a negative stride"):
        copy[(1,)](ArrayInterface(a), np.zeros(10, np.float32), 10, BLOCK=16)


def test_plain_numpy_non_contiguous_is_still_refused():
    a = np.zeros((10, 10), np.float32)[:, ::2]
    with pytest.raises(dvmlang.ArgumentError, match="not C-contiguous"):
        copy[(1,)](a, np.zeros(10, np.float32), 10, BLOCK=16)


# ---- 4. None pointers --------------------------------------------------------------------------------------

def test_none_pointer_is_a_compile_time_none():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    bias_add[(1,)](x, None, out, 8, BLOCK=8)
    np.testing.assert_array_equal(out, x)
    none_side[(1,)](x, None, out, 8, BLOCK=8)
    np.testing.assert_array_equal(out, x * 3)


def test_none_pointer_with_constexpr_flag_and_separate_builds():
    k = dvmlang.kernel(bias_flag.fn)
    x = torch.arange(8, dtype=torch.float32)
    b = torch.full((8,), 10.0)
    out = torch.zeros(8)
    k[(1,)](x, None, out, 8, HAS_BIAS=False, BLOCK=8)
    assert torch.equal(out, x)
    k[(1,)](x, b, out, 8, HAS_BIAS=True, BLOCK=8)
    assert torch.equal(out, x + b)
    k[(1,)](x, None, out, 8, HAS_BIAS=False, BLOCK=8)
    assert torch.equal(out, x)
    assert k.cache_info().builds == 2  # None and a tensor are two specialisations


def test_is_not_none_on_a_real_pointer_folds():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    bias_add[(1,)](x, x, out, 8, BLOCK=8)
    np.testing.assert_array_equal(out, x + x)


def test_none_used_as_a_pointer_is_a_compile_error():
    with pytest.raises(dvmlang.DvmError, match="NoneType"):
        store_to[(1,)](np.zeros(8, np.float32), None, BLOCK=8)


# ---- 5. launch options -------------------------------------------------------------------------------------

def test_triton_launch_options_are_accepted_and_change_nothing():
    x = torch.rand(64)
    out = torch.zeros(64)
    ref = add[(2,)](x, x, out, 64, BLOCK=32)
    out2 = torch.zeros(64)
    rec = add[(2,)](x, x, out2, 64, BLOCK=32, num_warps=8, num_stages=2, num_ctas=1, maxnreg=None,
                    enable_fp_fusion=False, launch_cooperative_grid=False, launch_pdl=False, debug=None,
                    extern_libs={"libdevice": "/nowhere/libdevice.10.bc"})
    assert torch.equal(out2, x + x) and torch.equal(out2, out)
    assert rec.cycles == ref.cycles
    bc1 = add.encode((2,), x, x, out, 64, BLOCK=32)
    bc2 = add.encode((2,), x, x, out, 64, BLOCK=32, num_warps=2)
    assert bc1.to_bytes() == bc2.to_bytes()


@pytest.mark.parametrize("opt, value, match", [("num_warps", 3, "power of 2"), ("num_warps", 0, "positive"),
                                               ("num_stages", -1, ">= 0"), ("maxnreg", 0, "positive"),
                                               ("enable_fp_fusion", 1, "bool"), ("extern_libs", "libdevice", "dict")])
def test_bad_launch_option_value(opt, value, match):
    x = np.zeros(4, np.float32)
    with pytest.raises(dvmlang.LaunchError, match=f"launch option `{opt}` of `copy` must be.*{match}"):
        copy[(1,)](x, x, 4, BLOCK=4, **{opt: value})


def test_a_relaunch_checks_its_launch_options_as_a_first_launch_does():
    """A relaunch's plan takes keywords that are its parameters, by count and name; launch options beside them
    go the general way, which checks them (and then drops them) as on a first launch."""
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    copy[(1,)](x, out, 4, BLOCK=4)
    hits = copy.cache_info().hits
    with pytest.raises(dvmlang.LaunchError, match="launch option `num_warps` of `copy` must be"):
        copy[(1,)](x, out, 4, BLOCK=4, num_warps=3)
    out[:] = 0
    copy[(1,)](x, out, 4, BLOCK=4, num_warps=4)
    np.testing.assert_array_equal(out, x)
    with pytest.raises(dvmlang.DvmError, match="missing the dl.constexpr `BLOCK`"):
        copy[(1,)](x, out, 4, num_warps=4)  # (an option in place of the constexpr: still missing)
    assert copy.cache_info().hits > hits  # (the instance was found again: only the options were checked)


def test_unknown_keyword_still_an_error():
    x = np.zeros(4, np.float32)
    with pytest.raises(dvmlang.LaunchError, match="has no parameter `num_warp`"):
        copy[(1,)](x, x, 4, BLOCK=4, num_warp=4)


def test_a_parameter_named_like_an_option_takes_the_value():
    @dvmlang.kernel
    def k(out_ptr, num_warps: dl.constexpr):
        dl.store(out_ptr + dl.arange(0, 4), dl.full((4,), num_warps, dl.int32))
    out = np.zeros(4, np.int32)
    k[(1,)](out, num_warps=3)  # 3 would be refused as a launch option
    np.testing.assert_array_equal(out, 3)


# ---- 6. empty grids ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("grid", [(0,), (2, 0), (1, 1, 0), 0, lambda meta: (0,)])
def test_empty_grid_runs_nothing(grid):
    x = torch.rand(8)
    out = torch.full((8,), -1.0)
    assert copy[grid](x, out, 8, BLOCK=8) is None
    assert torch.equal(out, torch.full((8,), -1.0))


def test_negative_grid_is_still_an_error():
    x = np.zeros(4, np.float32)
    with pytest.raises(dvmlang.LaunchError, match="cannot be negative"):
        copy[(2, -1)](x, x, 4, BLOCK=4)


def test_empty_grid_cannot_be_encoded():
    x = np.zeros(4, np.float32)
    with pytest.raises(dvmlang.LaunchError, match="has no programs"):
        copy.encode((0,), x, x, 4, BLOCK=4)


def test_empty_grid_still_checks_arguments():
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `copy`"):
        copy[(0,)]([1.0], np.zeros(4, np.float32), 4, BLOCK=4)


# ---- 7. warmup ---------------------------------------------------------------------------------------------

def test_warmup_builds_and_encodes_without_running():
    k = dvmlang.kernel(copy.fn)
    x = torch.rand(40)
    out = torch.zeros(40)
    bc = k.warmup(x, out, 40, BLOCK=32, grid=(2,), num_warps=4)
    assert isinstance(bc, dvmlang.Bytecode)
    assert torch.equal(out, torch.zeros(40))  # nothing ran
    assert k.cache_info().builds == 1 and k.cache_info().launches == 0
    k[(2,)](x, out, 40, BLOCK=32)
    assert torch.equal(out, x)
    assert k.cache_info().builds == 1 and k.cache_info().encodes == 1  # the launch reused the warmup
    rec = dvmlang.run(bc, x, torch.zeros(40), 40)
    assert rec.cycles > 0


def test_warmup_with_grid_function():
    bc = copy.warmup(np.zeros(40, np.float32), np.zeros(40, np.float32), 40, BLOCK=32,
                     grid=lambda meta: (dl.cdiv(meta["n"], meta["BLOCK"]),))
    assert isinstance(bc, dvmlang.Bytecode)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float64], ids=str)
def test_torch_fp8_and_float64_copy(dtype):
    x = (torch.rand(16) * 4 - 2).to(dtype)
    out = torch.zeros(16, dtype=dtype)
    copy[(1,)](x, out, 16, BLOCK=16)
    assert torch.equal(out.view(torch.uint8) if dtype.itemsize == 1 else out,
                       x.view(torch.uint8) if dtype.itemsize == 1 else x)


def test_torch_read_only_numpy_view_stored_to_is_refused():
    x = np.zeros(8, np.float32)
    x.flags.writeable = False
    with pytest.raises(dvmlang.ArgumentError, match="read-only"):
        copy[(1,)](np.zeros(8, np.float32), ArrayInterface(x), 8, BLOCK=8)


@dvmlang.kernel
def block_ptr_add1(x_ptr, o_ptr, M, N, sm, sn, BM: dl.constexpr, BN: dl.constexpr):
    bp = dl.make_block_ptr(x_ptr, shape=(M, N), strides=(sm, sn), offsets=(0, 0), block_shape=(BM, BN), order=(1, 0))
    v = dl.load(bp, boundary_check=(0, 1))
    ob = dl.make_block_ptr(o_ptr, shape=(M, N), strides=(N, 1), offsets=(0, 0), block_shape=(BM, BN), order=(1, 0))
    dl.store(ob, v + 1, boundary_check=(0, 1))


def test_block_pointer_over_a_transposed_tensor():
    x = torch.rand(6, 5).t()
    out = torch.zeros(5, 6)
    block_ptr_add1[(1,)](x, out, 5, 6, x.stride(0), x.stride(1), BM=8, BN=8)
    assert torch.equal(out, x + 1)


_BAD_GRIDS = [((2,), (2.0,)), ((1,), (True,)), ((2,), 2.0), ((2,), np.array([2])), ((2,), np.array([2, 1])),
              ((2,), (np.array([2]),)), ((2,), (np.array([2, 1]),))]


@pytest.mark.parametrize("how", ["launch", "encode"])
@pytest.mark.parametrize("first, bad", _BAD_GRIDS)
def test_a_grid_refused_on_its_own_is_refused_after_a_launch_with_an_equal_grid(first, bad, how):
    """A relaunch takes the previous launch's instance when its grid equals the previous one's, but a float, a
    bool or an array can equal a valid grid and still be an error: refused as on a kernel's first launch, the
    same LaunchError, not run with the previous grid and not a bare ValueError from an array's ==."""
    from sample_kernels import add
    x, o = np.ones(32, np.float32), np.empty(32, np.float32)

    def refusal(k):
        with pytest.raises(dvmlang.LaunchError) as info:
            if how == "launch":
                k[bad](x, x, o, 32, BLOCK=16)
            else:
                k.encode(bad, x, x, o, 32, BLOCK=16)
        return str(info.value)
    alone = refusal(dvmlang.kernel(add.fn))
    k = dvmlang.kernel(add.fn)
    k[first](x, x, o, 32, BLOCK=16)
    assert refusal(k) == alone
