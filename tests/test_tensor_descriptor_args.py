"""Host tensor descriptors (``triton.tools.tensor_descriptor.TensorDescriptor``) as kernel arguments: numeric
results against numpy/torch, the build/encode split, autotune pre_hooks, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest

import dvmlang.triton as triton
import dvmlang.triton.language as tl
from dvmlang.errors import ArgumentError, CompilationError, MemoryFault
from dvmlang.triton.tools.tensor_descriptor import TensorDescriptor

torch = pytest.importorskip("torch")


@triton.jit
def scale2d(x_desc, y_desc, alpha):
    BM: tl.constexpr = x_desc.block_shape[0]
    BN: tl.constexpr = x_desc.block_shape[1]
    i = tl.program_id(0) * BM
    j = tl.program_id(1) * BN
    y_desc.store([i, j], x_desc.load([i, j]) * alpha)


@triton.jit
def copy1d(x_desc, y_desc, B: tl.constexpr):
    i = tl.program_id(0) * B
    y_desc.store([i], x_desc.load([i]))


@triton.jit
def copy3d(x_desc, y_desc):
    b0: tl.constexpr = x_desc.block_shape[0]
    b1: tl.constexpr = x_desc.block_shape[1]
    b2: tl.constexpr = x_desc.block_shape[2]
    offs = [tl.program_id(0) * b0, tl.program_id(1) * b1, tl.program_id(2) * b2]
    y_desc.store(offs, x_desc.load(offs) + 1)


@triton.jit
def read_block(x_desc, out, i, j, BM: tl.constexpr, BN: tl.constexpr):
    v = x_desc.load([i, j])
    tl.store(out + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], v)


def grid_of(shape, block):
    return tuple(-(-s // b) for s, b in zip(shape, block))


@pytest.mark.parametrize("shape", [(32, 32), (40, 36), (7, 20), (64, 4)])
def test_2d_load_store_torch(shape):
    x = torch.randn(shape)
    y = torch.full(shape, -1.0)
    block = [16, 4] if shape[1] == 4 else [16, 16]
    scale2d[grid_of(shape, block)](TensorDescriptor.from_tensor(x, block), TensorDescriptor.from_tensor(y, block), 3.0)
    torch.testing.assert_close(y, 3.0 * x)


def test_2d_numpy_base_and_edge_tiles():
    x = np.arange(20 * 12, dtype=np.float32).reshape(20, 12)
    y = np.full((24, 16), -1.0, np.float32)  # bigger: the descriptor covers 20 x 12 of it
    yd = TensorDescriptor(y, [20, 12], [16, 1], [8, 8])
    scale2d[(3, 2)](TensorDescriptor.from_tensor(x, [8, 8]), yd, 1.0)
    assert np.array_equal(y[:20, :12], x)
    assert (y[20:] == -1).all() and (y[:, 12:] == -1).all()  # stores past the descriptor's edge are dropped


def test_1d_and_3d():
    x = torch.arange(100, dtype=torch.int32)
    y = torch.zeros(100, dtype=torch.int32)
    copy1d[(4,)](TensorDescriptor.from_tensor(x, [32]), TensorDescriptor.from_tensor(y, [32]), 32)
    torch.testing.assert_close(y, x)
    a = torch.randn(3, 10, 20)
    b = torch.zeros(3, 10, 20)
    blk = [2, 8, 8]
    copy3d[grid_of(a.shape, blk)](TensorDescriptor.from_tensor(a, blk), TensorDescriptor.from_tensor(b, blk))
    torch.testing.assert_close(b, a + 1)


def test_zero_and_nan_padding():
    x = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    for padding, fill in (("zero", 0.0), ("nan", np.nan)):
        out = np.empty((8, 8), np.float32)
        read_block[(1,)](TensorDescriptor(x, [6, 8], [8, 1], [8, 8], padding=padding), out, 2, 4, 8, 8)
        want = np.full((8, 8), fill, np.float32)
        want[:4, :4] = x[2:, 4:]
        np.testing.assert_array_equal(out, want)  # NaN == NaN here
    # a negative offset reads the padding as well (every dimension is checked)
    out = np.empty((8, 8), np.float32)
    read_block[(1,)](TensorDescriptor(x, [6, 8], [8, 1], [8, 8], padding="nan"), out, -2, 0, 8, 8)
    assert np.isnan(out[:2]).all() and np.array_equal(out[2:], x[:6])


def test_upstream_padding_host_vs_device():
    """Triton's test_tensor_descriptor_padding: a host descriptor with nan padding gives what the in-kernel one does."""
    @triton.jit
    def device_load(in_ptr, out_ptr, IM, IN, YN, M_BLOCK: tl.constexpr, N_BLOCK: tl.constexpr, padding: tl.constexpr):
        d = tl.make_tensor_descriptor(in_ptr, shape=[IM, IN], strides=[IN, 1], block_shape=[M_BLOCK, N_BLOCK],
                                      padding_option=padding)
        m = tl.program_id(0) * M_BLOCK
        n = tl.program_id(1) * N_BLOCK
        v = d.load([m, n])
        tl.store(out_ptr + (m + tl.arange(0, M_BLOCK))[:, None] * YN + (n + tl.arange(0, N_BLOCK))[None, :], v)

    @triton.jit
    def host_load(in_desc, out_ptr, YN, M_BLOCK: tl.constexpr, N_BLOCK: tl.constexpr):
        m = tl.program_id(0) * M_BLOCK
        n = tl.program_id(1) * N_BLOCK
        v = in_desc.load([m, n])
        tl.store(out_ptr + (m + tl.arange(0, M_BLOCK))[:, None] * YN + (n + tl.arange(0, N_BLOCK))[None, :], v)

    inp = torch.arange(48 * 48, dtype=torch.float32).reshape(48, 48)
    a, b = torch.zeros(64, 64), torch.zeros(64, 64)
    device_load[(2, 2)](inp, a, 48, 48, 64, 32, 32, "nan")
    host_load[(2, 2)](TensorDescriptor(inp, inp.shape, inp.stride(), [32, 32], padding="nan"), b, 64, 32, 32)
    want = torch.full((64, 64), float("nan"))
    want[:48, :48] = inp
    torch.testing.assert_close(a, want, equal_nan=True)
    torch.testing.assert_close(b, want, equal_nan=True)


def test_in_kernel_attributes():
    @triton.jit
    def attrs(d, out):
        tl.static_assert(d.block_shape == [4, 8])
        tl.static_assert(d.dtype == tl.float16)
        tl.store(out + 0, d.shape[0])
        tl.store(out + 1, d.shape[1])
        tl.store(out + 2, d.strides[0])
        tl.store(out + 3, d.strides[1])

    x = torch.zeros(10, 24, dtype=torch.float16)
    out = np.zeros(4, np.int32)
    attrs[(1,)](TensorDescriptor.from_tensor(x[:, :16], [4, 8]), out)
    assert out.tolist() == [10, 16, 24, 1]


def test_strided_base_bounds_checked_against_its_span():
    big = torch.randn(16, 32)
    view = big[2:10, 4:20]  # not contiguous: bound as the flat span from view[0, 0] to view[-1, -1]
    y = torch.zeros(8, 16)
    scale2d[(1, 1)](TensorDescriptor.from_tensor(view, [8, 16]), TensorDescriptor.from_tensor(y, [8, 16]), 2.0)
    torch.testing.assert_close(y, 2 * view)
    # stores land in the view's memory
    scale2d[(1, 1)](TensorDescriptor.from_tensor(y, [8, 16]), TensorDescriptor.from_tensor(view, [8, 16]), 0.5)
    torch.testing.assert_close(big[2:10, 4:20], view)
    torch.testing.assert_close(view, y / 2)
    # a shape that lies about the memory: the access past the span faults before anything is read
    liar = TensorDescriptor(view, [16, 16], [32, 1], [16, 16])
    with pytest.raises(MemoryFault):
        scale2d[(1, 1)](liar, TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16]), 1.0)


def test_two_shapes_one_build_and_no_stale_instance():
    scale2d_local = triton.jit(scale2d.fn)
    outs = []
    for shape in ((32, 32), (24, 40), (32, 32)):
        x = torch.randn(shape)
        y = torch.zeros(shape)
        scale2d_local[grid_of(shape, (16, 16))](TensorDescriptor.from_tensor(x, [16, 16]),
                                                TensorDescriptor.from_tensor(y, [16, 16]), 2.0)
        torch.testing.assert_close(y, 2 * x)
        outs.append(y)
    info = scale2d_local.cache_info()
    assert info.builds == 1 and info.encodes == 2 and info.hits == 1
    # a new block shape is a new build (compile-time, like a constexpr); a new padding too
    x = torch.randn(32, 32)
    y = torch.zeros(32, 32)
    scale2d_local[(4, 2)](TensorDescriptor.from_tensor(x, [8, 16]), TensorDescriptor.from_tensor(y, [8, 16]), 2.0)
    torch.testing.assert_close(y, 2 * x)
    assert scale2d_local.cache_info().builds == 2


def test_aliasing_and_read_only():
    x = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
    d = TensorDescriptor.from_tensor(x, [16, 16])
    scale2d[(1, 1)](d, d, 2.0)  # in place through one descriptor
    np.testing.assert_array_equal(x, 2 * np.arange(256, dtype=np.float32).reshape(16, 16))
    ro = np.ones((16, 16), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        scale2d[(1, 1)](TensorDescriptor.from_tensor(x, [16, 16]), TensorDescriptor.from_tensor(ro, [16, 16]), 1.0)


def test_autotune_pre_hook_sets_block_shape():
    """Triton tutorial 09's matmul_tma_set_block_size_hook: the config's block sizes reach the descriptor."""
    def set_block(nargs):
        nargs["x_desc"].block_shape = [nargs["BM"], nargs["BN"]]
        nargs["y_desc"].block_shape = [nargs["BM"], nargs["BN"]]

    configs = [triton.Config({"BM": bm, "BN": bn}, pre_hook=set_block) for bm, bn in ((8, 16), (16, 16), (32, 32))]

    @triton.autotune(configs=configs, key=["M", "N"], cache_results=False)
    @triton.jit
    def tuned(x_desc, y_desc, M, N, BM: tl.constexpr, BN: tl.constexpr):
        tl.static_assert(x_desc.block_shape == [BM, BN])
        i = tl.program_id(0) * BM
        j = tl.program_id(1) * BN
        y_desc.store([i, j], y_desc.load([i, j]) + x_desc.load([i, j]))  # accumulates: tuning must restore y

    M, N = 40, 48
    x = torch.randn(M, N)
    y = torch.full((M, N), 7.0)
    dummy = [1, 1]
    xd, yd = TensorDescriptor.from_tensor(x, dummy), TensorDescriptor.from_tensor(y, dummy)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
    tuned[grid](xd, yd, M, N)
    torch.testing.assert_close(y, x + 7.0)
    best = tuned.best_config.kwargs
    assert yd.block_shape == [best["BM"], best["BN"]]
    assert len(tuned.configs_timings) == 3


def test_tensor_argument_where_a_descriptor_is_used():
    x = torch.zeros(16, 16)
    with pytest.raises(CompilationError, match="no attribute `block_shape`"):
        scale2d[(1, 1)](x, x, 1.0)


@pytest.mark.parametrize("make, match", [
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 16), [3, 16]), "Shape element 0 must be a power of 2"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 16), [16]), "rank mismatch"),
    (lambda: TensorDescriptor(torch.zeros(16, 16), [16, 16], [16], [16, 16]), "rank mismatch"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(()), []), "rank must not be zero"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros((1,) * 6), [1] * 6), "rank cannot be more than 5"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 16), [16.0, 16]), "must have type `constexpr\\[int\\]`"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 16).t(), [16, 16]), "Last dimension must be contiguous"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 7), [16, 8]), "strides must be 16-byte aligned"),
    (lambda: TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16], padding="inf"), "Illegal value for padding"),
    (lambda: TensorDescriptor(torch.zeros(16, 16), [16, -1], [16, 1], [16, 16]), "negative size"),
    (lambda: TensorDescriptor(torch.zeros(16, 16), [16, 16.5], [16, 1], [16, 16]), "shape must be a list of ints"),
    (lambda: TensorDescriptor.from_tensor([[1.0]], [1, 1]), "numpy array"),
])
def test_construction_errors(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()


def test_launch_errors():
    y = TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16])
    d = TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16])
    d.block_shape = [16, 12]  # changed after construction (as a pre_hook does): checked again at the launch
    with pytest.raises(ArgumentError, match=r"argument `x_desc` of `scale2d`.*Shape element 1 must be a power of 2"):
        scale2d[(1, 1)](d, y, 1.0)
    ints = TensorDescriptor.from_tensor(torch.zeros(16, 16, dtype=torch.int32), [16, 16], padding="nan")
    with pytest.raises(ArgumentError, match="Padding option `nan` is only supported for floating point"):
        copy1d[(1,)](ints, y, 16)
    bad = TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16])
    bad.base = "not a tensor"
    with pytest.raises(ArgumentError, match="base must be a tensor or an array"):
        scale2d[(1, 1)](bad, y, 1.0)
    c = TensorDescriptor.from_tensor(torch.zeros(16, 16, dtype=torch.complex64), [16, 16])
    with pytest.raises(ArgumentError):
        scale2d[(1, 1)](c, y, 1.0)


def test_kernel_errors_name_the_line():
    @triton.jit
    def wrong_rank(d):
        d.load([0])

    @triton.jit
    def wrong_block(d):
        d.store([0, 0], tl.zeros([8, 8], tl.float32))

    @triton.jit
    def no_attr(d):
        d.base

    d = TensorDescriptor.from_tensor(torch.zeros(16, 16), [16, 16])
    with pytest.raises(CompilationError, match=r"test_tensor_descriptor_args.py:\d+.*needs 2 entries"):
        wrong_rank[(1,)](d)
    with pytest.raises(CompilationError, match=r"descriptor store of a \[8, 8\] block .* \[16, 16\]"):
        wrong_block[(1,)](d)
    with pytest.raises(CompilationError, match="a tensor descriptor has no attribute `base`"):
        no_attr[(1,)](d)


def test_in_kernel_descriptor_checks_as_triton():
    @triton.jit
    def small(ptr):
        desc = tl.make_tensor_descriptor(ptr, [128, 128], [128, 1], [1, 2])
        desc.load([0, 0])

    @triton.jit
    def strided(ptr):
        desc = tl.make_tensor_descriptor(ptr, [128, 128], [1, 128], [16, 16])
        desc.load([0, 0])

    @triton.jit
    def nan_int(ptr):
        desc = tl.make_tensor_descriptor(ptr, [128, 128], [128, 1], [16, 16], padding_option="nan")
        desc.load([0, 0])

    x = torch.empty((128, 128), dtype=torch.int32)
    with pytest.raises(CompilationError) as e:
        small[(1,)](x)
    assert "Descriptor block shape must have at least 16 bytes in the last dimension, but got 2 * 4 = 8 bytes" \
        in str(e.value.__cause__)
    with pytest.raises(CompilationError, match="Tensor descriptor last dim must be 1 but got 128"):
        strided[(1,)](x)
    with pytest.raises(CompilationError, match="Padding option `nan` is not supported for integer blocks"):
        nan_int[(1,)](x)


def test_tutorial_09_tma_paths_called_directly():
    """Tutorial 09 takes its TMA paths only when supports_tma() (CUDA); called directly they run here: host
    descriptors with dummy [1, 1] blocks that the autotune pre_hook sets per config."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "examples" / "triton" / "09_persistent_matmul.py"
    spec = importlib.util.spec_from_file_location("tutorial09_tma", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    a = torch.randn(200, 72, dtype=torch.float16)
    b = torch.randn(136, 72, dtype=torch.float16)
    ref = torch.matmul(a.float(), b.float().T)
    for f in (mod.matmul_tma, mod.matmul_tma_persistent):
        c = f(a, b, False)
        assert c.shape == (200, 136) and c.dtype == torch.float16
        torch.testing.assert_close(c.float(), ref, atol=2e-2, rtol=1e-2)


@triton.jit
def _abs_helper(in_desc, out_desc, M_BLOCK: tl.constexpr, N_BLOCK: tl.constexpr):
    moffset = tl.program_id(0) * M_BLOCK
    noffset = tl.program_id(1) * N_BLOCK
    out_desc.store([moffset, noffset], in_desc.load([moffset, noffset]).abs())


def test_descriptor_passed_to_an_inlined_function_and_by_keyword():
    @triton.jit
    def kernel(in_desc, out_desc, M_BLOCK: tl.constexpr, N_BLOCK: tl.constexpr):
        _abs_helper(in_desc, out_desc, M_BLOCK, N_BLOCK)

    inp = torch.randn(32, 128)
    out = torch.zeros(32, 128)
    kernel[(4, 4)](TensorDescriptor.from_tensor(inp, [8, 32]), out_desc=TensorDescriptor.from_tensor(out, [8, 32]),
                   M_BLOCK=8, N_BLOCK=32)
    torch.testing.assert_close(out, inp.abs())


def test_int64_shape_binds_as_int64_scalars():
    x = torch.randn(16, 16)
    y = torch.zeros(16, 16)
    big = TensorDescriptor(x, [2 ** 31, 16], [16, 1], [16, 16])  # a size past int32: the scalars are int64
    scale2d[(1, 1)](big, TensorDescriptor.from_tensor(y, [16, 16]), 1.0)
    torch.testing.assert_close(y, x)
    assert "int64" in scale2d.ir(big, TensorDescriptor.from_tensor(y, [16, 16]), 1.0)


def test_grid_function_sees_the_bound_descriptor():
    x = torch.randn(40, 16)
    y = torch.zeros(40, 16)
    grid = lambda meta: (triton.cdiv(meta["x_desc"].shape[0], meta["x_desc"].block_shape[0]), 1)  # noqa: E731
    scale2d[grid](TensorDescriptor.from_tensor(x, [16, 16]), TensorDescriptor.from_tensor(y, [16, 16]), 1.0)
    torch.testing.assert_close(y, x)


@pytest.mark.parametrize("shape, dim", [((128,), 0), ((16, 32), 1), ((8, 16, 4), 0), ((2, 4, 8, 16), 2)])
def test_upstream_cat_nd(shape, dim):
    """Triton's test_cat_nd (test_core.py): whole-tensor descriptors of ranks 1 to 4."""
    @triton.jit
    def kernel(x_desc, y_desc, z_desc, dim: tl.constexpr, shape: tl.constexpr):
        rank: tl.constexpr = len(shape)
        x = x_desc.load([0] * rank)
        y = y_desc.load([0] * rank)
        z = tl.cat(x, y, dim=dim)
        z_desc.store([0] * rank, z)

    x = torch.rand(shape)
    y = torch.rand(shape)
    z_ref = torch.cat([x, y], dim=dim)
    z = torch.empty_like(z_ref)
    kernel[(1,)](TensorDescriptor.from_tensor(x, block_shape=shape), TensorDescriptor.from_tensor(y, block_shape=shape),
                 TensorDescriptor.from_tensor(z, block_shape=z_ref.shape), dim=dim, shape=shape)
    torch.testing.assert_close(z, z_ref, atol=0, rtol=0)
