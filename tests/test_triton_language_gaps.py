"""Language gaps Triton's own unit tests found (issue 13): each test states Triton's behaviour and checks dvmlang
against a reference written here."""

import ml_dtypes
import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
import dvmlang.triton as triton
import dvmlang.triton.language as tl
from dvmlang.errors import DeviceError, KernelTypeError


# ---- dtypes carry Triton's host API ------------------------------------------------------------------------------

def test_dtype_host_attributes_are_tritons():
    assert tl.float16.primitive_bitwidth == 16 and tl.int1.primitive_bitwidth == 1
    assert [d.fp_mantissa_width for d in (tl.float16, tl.bfloat16, tl.float32, tl.float64)] == [10, 7, 23, 52]
    assert (tl.float8e4nv.fp_mantissa_width, tl.float8e5.fp_mantissa_width) == (3, 2)
    assert [d.exponent_bias for d in (tl.float16, tl.bfloat16, tl.float32, tl.float8e4nv, tl.float8e5)] == \
        [15, 127, 127, 7, 15]
    assert tl.float32.is_floating() and not tl.int32.is_floating() and tl.bfloat16.is_bf16()
    assert tl.int8.is_int_signed() and tl.uint8.is_int_unsigned() and tl.uint32.is_uint32()
    assert tl.float8e5.is_fp8() and tl.float8e4nv.is_fp8e4nv() and not tl.float16.is_fp8e4b15()
    assert tl.float16.is_standard_floating() and not tl.float8e5.is_standard_floating()
    assert tl.int16.int_bitwidth == 16 and tl.uint16.int_signedness == "unsigned"
    with pytest.raises(AttributeError):
        tl.int32.fp_mantissa_width
    with pytest.raises(AttributeError):
        tl.int32.no_such_predicate


def test_is_int_reads_as_a_bool_and_calls_as_tritons_method():
    """dvmlang's ``d.is_int`` is a property; Triton's ``d.is_int()`` a method: one value serves both."""
    assert tl.int32.is_int and tl.int32.is_int() is True and not tl.float32.is_int and tl.float32.is_int() is False
    assert tl.int1.is_bool() is True and repr(tl.int1.is_bool) == "True"


@dvmlang.kernel
def dtype_methods_k(x_ptr, o_ptr):
    x = dl.load(x_ptr + dl.arange(0, 4))
    if x.dtype.is_floating() and x.dtype.primitive_bitwidth == 16 and x.dtype.fp_mantissa_width == 10:
        dl.store(o_ptr + dl.arange(0, 4), x * 2)
    else:
        dl.store(o_ptr + dl.arange(0, 4), x)


def test_dtype_methods_inside_kernels():
    x = np.arange(4, dtype=np.float16)
    o = np.zeros(4, np.float16)
    dtype_methods_k[(1,)](x, o)
    np.testing.assert_array_equal(o, x * 2)


# ---- shapes, expand_dims, squeeze, indexing ------------------------------------------------------------------------

@dvmlang.kernel
def shapes_k(o_ptr, N: dl.constexpr):
    a = dl.arange(0, N)
    dl.static_assert(a.shape == [N])
    dl.static_assert(dl.expand_dims(a, (0, -1)).shape == [1, N, 1])
    dl.static_assert(dl.expand_dims(a, (-4, 2, -1)).shape == [1, N, 1, 1])
    dl.static_assert(dl.expand_dims(a, (3, 1, 2)).shape == [N, 1, 1, 1])
    dl.static_assert(dl.unsqueeze(a, -2).shape == [1, N])
    dl.static_assert(dl.squeeze(dl.expand_dims(a, 0), -2).shape == [N])
    dl.static_assert(dl.sum(a).shape == [])
    dl.static_assert(a.shape != [N, 1])
    s = dl.sum(a)
    t = s[None, None, :]  # as Triton: None adds a unit dimension, a full slice keeps the value as it is
    dl.static_assert(t.shape == [1, 1])
    dl.store(o_ptr + dl.arange(0, 1)[:, None], t)


def test_shapes_compare_equal_to_lists():
    o = np.zeros(1, np.int32)
    shapes_k[(1,)](o, N=8)
    assert o[0] == 28


@dvmlang.kernel
def expand_bad_k(o_ptr, AXES: dl.constexpr):
    dl.store(o_ptr + dl.arange(0, 4), dl.reshape(dl.expand_dims(dl.arange(0, 4), AXES), (4,)))


@pytest.mark.parametrize("axes, message", [(-3, "invalid axis -3"), (2, "invalid axis 2"),
                                           ((0, 0), r"duplicate axes, normalized axes = \[0, 0\]"),
                                           ((0, -3), r"duplicate axes, normalized axes = \[0, 0\]")])
def test_expand_dims_errors_are_tritons(axes, message):
    with pytest.raises(KernelTypeError, match=message):
        expand_bad_k[(1,)](np.zeros(4, np.int32), AXES=axes)


@dvmlang.kernel
def squeeze_bad_k(o_ptr):
    dl.store(o_ptr + dl.arange(0, 4), dl.squeeze(dl.expand_dims(dl.arange(0, 4), 1), -3))


def test_squeeze_out_of_range_is_an_error():
    with pytest.raises(KernelTypeError, match="invalid axis -3"):
        squeeze_bad_k[(1,)](np.zeros(4, np.int32))


# ---- isinstance, hasattr, getattr, the dtype of a constant ---------------------------------------------------------

@dvmlang.kernel
def introspect_k(x_ptr, o_ptr):
    x = dl.load(x_ptr + dl.arange(0, 4))
    dl.static_assert(isinstance(x, dl.tensor))
    dl.static_assert(isinstance(x_ptr, dl.tensor))  # as Triton: a pointer is a tensor of pointer type
    dl.static_assert(not isinstance(x, (dl.constexpr, int)))
    dl.static_assert(isinstance(dl.make_tensor_descriptor(x_ptr, [4], [1], [4]), dl.tensor_descriptor))
    dl.static_assert(hasattr(x, "dtype") and not hasattr(x, "no_such_attribute"))
    dl.static_assert(getattr(x, "no_such_attribute", 7) == 7)
    one = 1
    big = 2 ** 40
    dl.static_assert(one.dtype == dl.int32 and big.dtype == dl.int64 and (0.5).dtype == dl.float32)
    dl.store(o_ptr + dl.arange(0, 4), dl.full([4], one, dtype=one.dtype) + getattr(x, "T"))


def test_isinstance_hasattr_getattr_and_constant_dtype():
    x = np.arange(4, dtype=np.int32)
    o = np.zeros(4, np.int32)
    introspect_k[(1,)](x, o)
    np.testing.assert_array_equal(o, x + 1)


@dvmlang.kernel
def member_fns_k(x_ptr, o_ptr):
    x = dl.load(x_ptr + dl.arange(0, 8))
    dl.store(o_ptr + dl.arange(0, 8), x.sqrt_rn() + x.div_rn(2.0) + x.fma(x, 1.0) + x.fdiv(4.0))


def test_tritons_math_member_functions():
    x = np.linspace(0.5, 4, 8, dtype=np.float32)
    o = np.zeros(8, np.float32)
    member_fns_k[(1,)](x, o)
    np.testing.assert_allclose(o, np.sqrt(x) + x / 2 + (x * x + 1) + x / 4, rtol=1e-6)


def test_mixed_signedness_division_uses_tritons_wording():
    @dvmlang.kernel
    def div_k(x_ptr, y_ptr, o_ptr):
        o = dl.arange(0, 4)
        dl.store(o_ptr + o, dl.load(x_ptr + o) // dl.load(y_ptr + o))

    with pytest.raises(KernelTypeError, match="Cannot use .* because they have different signedness"):
        div_k[(1,)](np.ones(4, np.int32), np.ones(4, np.uint32), np.zeros(4, np.int32))


# ---- atomic_poll -----------------------------------------------------------------------------------------------------

@dvmlang.kernel
def poll_k(flag_ptr, o_ptr, expected, TIMEOUT: dl.constexpr):
    if TIMEOUT is None:
        matched = dl.atomic_poll(flag_ptr, expected)
    else:
        matched = dl.atomic_poll(flag_ptr, expected, timeout_ns=TIMEOUT)
    dl.store(o_ptr, matched)


@pytest.mark.parametrize("flag, timeout, expected", [(1, None, True), (1, 0, True), (0, 0, False), (5, 100, True)])
def test_atomic_poll_reads_the_flag_once(flag, timeout, expected):
    f = np.array([flag], np.int32)
    o = np.zeros(1, np.bool_)
    poll_k[(1,)](f, o, 5 if flag == 5 else 1, TIMEOUT=timeout)
    assert bool(o[0]) is expected and f[0] == flag  # the flag is read, never changed


def test_atomic_poll_without_timeout_that_cannot_match_is_a_device_error():
    with pytest.raises(DeviceError, match="atomic_poll"):
        poll_k[(1,)](np.zeros(1, np.int32), np.zeros(1, np.bool_), 1, TIMEOUT=None)


# ---- reinterpreted fp8 arguments (triton.reinterpret) ---------------------------------------------------------------

@dvmlang.kernel
def fp8_dot_k(a_ptr, b_ptr, c_ptr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr, BM: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rk = dl.arange(0, K)
    rn = dl.arange(0, N)
    a = dl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = dl.load(b_ptr + rk[:, None] * N + rn[None, :])
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], dl.dot(a, b))


@pytest.mark.parametrize("fp8", [ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn])
def test_reinterpreted_fp8_arguments_launch(fp8):
    """Triton's tests pass fp8 data as ``triton.reinterpret(uint8_tensor, tl.float8e5)``; the wrapper is read with
    its own dtype, and fp8 windows with row strides load correctly (numpy cannot stride fp8 arrays itself)."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-2, 2, (32, 16)).astype(fp8)
    b = rng.uniform(-2, 2, (16, 16)).astype(fp8)
    c = np.zeros((32, 16), np.float32)
    dtype = tl.float8e5 if fp8 is ml_dtypes.float8_e5m2 else tl.float8e4nv
    fp8_dot_k[(2,)](triton.reinterpret(a.view(np.uint8), dtype), triton.reinterpret(b.view(np.uint8), dtype), c,
                    M=32, N=16, K=16, BM=16)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_strided_fp8_views_match_numpy():
    g = (np.arange(64) % 17).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    v = dvmlang.dtypes.as_strided(g[3:], (4, 5), (12, 1))
    ref = np.lib.stride_tricks.as_strided(g.view(np.uint8)[3:], (4, 5), (12, 1)).view(g.dtype)
    assert v.dtype == g.dtype
    np.testing.assert_array_equal(v.astype(np.float32), ref.astype(np.float32))



# ---- runtime values given to constexpr parameters of inlined helpers -------------------------------------------------

@dvmlang.kernel
def scale_helper(x, n: dl.constexpr):
    return x * n


@dvmlang.kernel
def arange_helper(n: dl.constexpr):
    return dl.arange(0, n)


@dvmlang.kernel
def runtime_to_constexpr_k(x_ptr, o_ptr, s, USE_ARANGE: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, 4))
    if USE_ARANGE:
        x = x + arange_helper(s)
    dl.store(o_ptr + dl.arange(0, 4), scale_helper(x, s) + scale_helper(x, 2))


def test_runtime_values_bind_to_constexpr_parameters_of_helpers():
    """Triton decides an inlined call's constexprs by the arguments: a runtime value given to a constexpr
    parameter is that runtime value; a use that needs a compile-time value fails where it is."""
    x = np.arange(4, dtype=np.float32)
    o = np.zeros(4, np.float32)
    runtime_to_constexpr_k[(1,)](x, o, 3.0, USE_ARANGE=False)
    np.testing.assert_array_equal(o, x * 3 + x * 2)
    with pytest.raises(dvmlang.errors.CompilationError, match="arange"):
        runtime_to_constexpr_k[(1,)](x, o, 4, USE_ARANGE=True)


def test_dvmlang_kernel_refuses_options_it_would_ignore():
    def f(x_ptr):
        pass

    assert isinstance(dvmlang.kernel()(f), dvmlang.Kernel)
    with pytest.raises(dvmlang.errors.DvmError, match="takes no options.*`num_warps`"):
        dvmlang.kernel(num_warps=4)(f)


# ---- strided views: a pointer to the first element, bounds are the storage's ---------------------------------------

@dvmlang.kernel
def read_flat_k(x_ptr, o_ptr, N: dl.constexpr, START: dl.constexpr):
    offs = dl.arange(0, N)
    dl.store(o_ptr + offs, dl.load(x_ptr + START + offs))


def test_a_strided_torch_view_reads_up_to_the_end_of_its_storage():
    """As Triton: a non-contiguous view is a pointer to its first element; what the kernel reads is up to its own
    offsets, within the memory the view lives in (here past the view's last element), and past that a fault."""
    torch = pytest.importorskip("torch")
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    view = base[1:, :3]  # first element is base[1, 0] (flat 8); its last element is flat 34
    o = np.zeros(32, np.float32)
    read_flat_k[(1,)](view, o, N=32, START=0)  # flat 8 .. 39: past the view's last element, inside the storage
    np.testing.assert_array_equal(o, np.arange(8, 40, dtype=np.float32))
    with pytest.raises(dvmlang.errors.MemoryFault):
        read_flat_k[(1,)](view, o, N=32, START=1)  # flat 40 is past the storage
