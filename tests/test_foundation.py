"""The foundation: every construct of the first language slice, against numpy."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from sample_kernels import add, loop_sum, softmax




@pytest.mark.parametrize("n,block", [(10_000, 1024), (1, 1024), (1024, 1024), (1025, 256), (7, 8), (999, 100)])
def test_vector_add_sizes(rng, n, block):
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    out = np.full_like(x, -1.0)
    launch = add[(dl.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    np.testing.assert_array_equal(out, x + y)
    assert launch.cycles > 0
    assert launch.name == "add" and launch.grid == (dl.cdiv(n, block), 1, 1)
    assert launch.bytes_read == 2 * 4 * n and launch.bytes_written == 4 * n
    assert launch.trace is None


def test_issue_example_prints_cycles(rng):
    x = rng.random(10_000, dtype=np.float32)
    y = rng.random(10_000, dtype=np.float32)
    out = np.empty_like(x)
    launch = add[(dl.cdiv(10_000, 1024),)](x, y, out, 10_000, BLOCK=1024)
    assert np.allclose(out, x + y)
    assert isinstance(launch.cycles, int) and launch.cycles > 0


def test_cdiv_on_host_and_next_power_of_2():
    assert dl.cdiv(10, 3) == 4 and dl.cdiv(9, 3) == 3 and dl.cdiv(0, 5) == 0
    assert dl.next_power_of_2(1000) == 1024 and dl.next_power_of_2(1) == 1


@dvmlang.kernel
def elementwise(x_ptr, y_ptr, out_ptr, n, scale, shift, BLOCK: dl.constexpr, OP: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    x = dl.load(x_ptr + offs, mask=m, other=1.0)
    y = dl.load(y_ptr + offs, mask=m, other=1.0)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x / y
    elif OP == "scalar":
        r = x * scale + shift
    elif OP == "rscalar":
        r = shift - x / scale
    elif OP == "exp":
        r = dl.exp(x)
    elif OP == "log":
        r = dl.log(x)
    elif OP == "sqrt":
        r = dl.sqrt(x)
    elif OP == "abs":
        r = dl.abs(x - y)
    elif OP == "maximum":
        r = dl.maximum(x, y)
    elif OP == "minimum":
        r = dl.minimum(x, y)
    elif OP == "where":
        r = dl.where(x > y, x, y * 2.0)
    elif OP == "cmp":
        r = (x < y).to(dl.float32) + (x >= 0.5).to(dl.float32) * 2.0 + (x == x).to(dl.float32) * 4.0
    else:
        r = -x
    dl.store(out_ptr + offs, r, mask=m)


REF = {
    "add": lambda x, y, s, t: x + y, "sub": lambda x, y, s, t: x - y, "mul": lambda x, y, s, t: x * y,
    "div": lambda x, y, s, t: x / y, "scalar": lambda x, y, s, t: x * np.float32(s) + np.float32(t),
    "rscalar": lambda x, y, s, t: np.float32(t) - x / np.float32(s), "exp": lambda x, y, s, t: np.exp(x),
    "log": lambda x, y, s, t: np.log(x), "sqrt": lambda x, y, s, t: np.sqrt(x),
    "abs": lambda x, y, s, t: np.abs(x - y), "maximum": lambda x, y, s, t: np.maximum(x, y),
    "minimum": lambda x, y, s, t: np.minimum(x, y), "where": lambda x, y, s, t: np.where(x > y, x, y * 2),
    "cmp": lambda x, y, s, t: (x < y) + (x >= 0.5) * 2.0 + 4.0, "neg": lambda x, y, s, t: -x,
}


@pytest.mark.parametrize("op", sorted(REF))
def test_elementwise_ops(rng, op):
    n = 777
    x = rng.random(n, dtype=np.float32) + 0.1
    y = rng.random(n, dtype=np.float32) + 0.1
    out = np.zeros(n, np.float32)
    elementwise[(dl.cdiv(n, 128),)](x, y, out, n, 1.5, -0.25, BLOCK=128, OP=op)
    np.testing.assert_allclose(out, REF[op](x, y, 1.5, -0.25).astype(np.float32), rtol=1e-6, atol=1e-7)


@dvmlang.kernel
def reduce2d(x_ptr, out_ptr, n_rows, n_cols, BR: dl.constexpr, BC: dl.constexpr, OP: dl.constexpr,
             AXIS: dl.constexpr):
    rows = dl.program_id(0) * BR + dl.arange(0, BR)
    cols = dl.arange(0, BC)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    fill = 0.0 if OP == "sum" else (-1e30 if OP == "max" else 1e30)
    x = dl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=fill)
    if OP == "sum":
        r = dl.sum(x, axis=AXIS)
    elif OP == "max":
        r = dl.max(x, axis=AXIS)
    else:
        r = dl.min(x, axis=AXIS)
    if AXIS == 1:
        dl.store(out_ptr + rows, r, mask=rows < n_rows)
    else:
        dl.store(out_ptr + dl.program_id(0) * BC + cols, r, mask=cols < n_cols)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_2d(rng, op, axis):
    R, C = 37, 29
    x = rng.standard_normal((R, C), dtype=np.float32)
    BR, BC = 16, 32
    progs = dl.cdiv(R, BR)
    if axis == 1:
        out = np.zeros(R, np.float32)
        reduce2d[(progs,)](x, out, R, C, BR=BR, BC=BC, OP=op, AXIS=1)
        ref = getattr(np, op)(x, axis=1)
    else:
        out = np.zeros(progs * BC, np.float32)
        reduce2d[(progs,)](x, out, R, C, BR=BR, BC=BC, OP=op, AXIS=0)
        ref = np.concatenate([getattr(np, op)(x[i * BR:(i + 1) * BR], axis=0).tolist() + [0] * (BC - C)
                              for i in range(progs)]).astype(np.float32)
        out = out.reshape(progs, BC)[:, :C].reshape(-1)
        ref = ref.reshape(progs, BC)[:, :C].reshape(-1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)




@pytest.mark.parametrize("n_cols", [1, 100, 128, 129, 1000])
def test_loop_carried_tile_and_scalar(rng, n_cols):
    x = rng.random((5, n_cols), dtype=np.float32)
    out = np.zeros(5, np.float32)
    loop_sum[(5,)](x, out, n_cols, n_cols, BLOCK=128)
    iters = dl.cdiv(n_cols, 128)
    ref = x.sum(axis=1) + (1000.0 if iters > 3 else -1000.0)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@dvmlang.kernel
def fill(out_ptr, n, value, BLOCK: dl.constexpr):
    pid = dl.program_id(0)
    offs = pid * BLOCK + dl.arange(0, BLOCK)
    v = dl.full((BLOCK,), 3, dl.int32) * pid + dl.num_programs(0)
    z = dl.zeros((BLOCK,), dl.float32) + value
    dl.store(out_ptr + offs, v.to(dl.float32) + z, mask=offs < n)


def test_full_zeros_program_ids(rng):
    n = 50
    out = np.zeros(n, np.float32)
    fill[(dl.cdiv(n, 16),)](out, n, 0.5, BLOCK=16)
    pid = np.arange(n) // 16
    np.testing.assert_allclose(out, 3 * pid + 4 + 0.5)


@dvmlang.kernel
def scale_int(x_ptr, out_ptr, n, k, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    dl.store(out_ptr + offs, x * k + 1, mask=offs < n)


def test_int32_arrays_and_runtime_int(rng):
    x = rng.integers(-1000, 1000, 300, dtype=np.int32)
    out = np.zeros_like(x)
    scale_int[(3,)](x, out, 300, 7, BLOCK=128)
    np.testing.assert_array_equal(out, x * 7 + 1)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.int8])
def test_other_array_dtypes(rng, dtype):
    import ml_dtypes
    dt_ = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    x = (rng.random(100) * 10).astype(dt_)
    y = (rng.random(100) * 10).astype(dt_)
    out = np.zeros_like(x)
    add[(1,)](x, y, out, 100, BLOCK=128)
    np.testing.assert_array_equal(out, (x + y).astype(dt_))


@dvmlang.kernel
def copy_bool(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs, mask=offs < n)
    dl.store(out_ptr + offs, x == 0, mask=offs < n)


def test_bool_arrays():
    x = np.array([True, False, True, False, False])
    out = np.zeros(5, bool)
    copy_bool[(1,)](x, out, 5, BLOCK=8)
    np.testing.assert_array_equal(out, ~x)




@pytest.mark.parametrize("shape", [(1, 1), (3, 1000), (64, 13), (5, 256)])
def test_softmax(rng, shape):
    x = rng.standard_normal(shape, dtype=np.float32)
    out = np.empty_like(x)
    softmax[(shape[0],)](out, x, shape[1], shape[1], BLOCK=dl.next_power_of_2(shape[1]))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_batched_and_sequential_paths_agree(rng, sequential_device):
    x = rng.standard_normal((33, 100), dtype=np.float32)
    a, b = np.empty_like(x), np.empty_like(x)
    la = softmax[(33,)](a, x, 100, 100, BLOCK=128)
    lb = softmax[(33,)](b, x, 100, 100, BLOCK=128, device=sequential_device)
    np.testing.assert_array_equal(a, b)
    assert la.cycles == lb.cycles


def test_inputs_are_not_modified(rng):
    x = rng.random(100, dtype=np.float32)
    y = rng.random(100, dtype=np.float32)
    xc, yc = x.copy(), y.copy()
    out = np.zeros(100, np.float32)
    add[(1,)](x, y, out, 100, BLOCK=128)
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(y, yc)


def test_new_shapes_encode_but_do_not_rebuild(rng):
    @dvmlang.kernel
    def k(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    for n in (10, 20, 30, 10):
        x = rng.random(n, dtype=np.float32)
        out = np.zeros_like(x)
        k[(1,)](x, out, n, BLOCK=32)
        np.testing.assert_array_equal(out, 2 * x)
    info = k.cache_info()
    assert info.builds == 1 and info.encodes == 3 and info.hits == 1 and info.launches == 4
    k[(1,)](np.zeros(5, np.float32), np.zeros(5, np.float32), 5, BLOCK=64)
    assert k.cache_info().builds == 2
