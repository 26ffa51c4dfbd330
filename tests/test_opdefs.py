"""The op vocabulary (dvmlang/opdefs.py) drives every layer, and a new row is a whole new op.

``log1p`` was added as one row, following the recipe in docs/architecture.md; the tests below check that
the row alone gave it a ``dl`` function, scalar and vector instructions, a ``dvmlang.ops`` function and a
fusible graph op, each computing numpy's ``log1p``.
"""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang import ops, opdefs
from dvmlang.vm import isa


@pytest.mark.parametrize("name", sorted(opdefs.ELEMENTWISE))
def test_every_row_reaches_every_layer_it_names(name):
    op = opdefs.ELEMENTWISE[name]
    if op.arity == 2 and "compare" not in op.traits:
        assert isa.SCALAR_BINARY[name].fn is op.ref and isa.VECTOR_BINARY[name].fn is op.ref
    if op.arity == 1:
        assert isa.SCALAR_UNARY[name].fn is op.ref and isa.VECTOR_UNARY[name].fn is op.ref
    if op.dl:
        assert getattr(dl, name).__doc__ == op.dl
    if op.tensor:
        assert op.tensor in ops.__all__ and callable(getattr(ops, op.tensor))
        assert name in opdefs.FUSIBLE


def test_ir_kinds_are_one_table():
    from dvmlang.ir import passes, verifier
    assert verifier.KNOWN == frozenset(opdefs.KINDS)
    assert passes.PURE <= passes.REMOVABLE <= verifier.KNOWN
    assert "store" not in passes.REMOVABLE and "load" in passes.REMOVABLE - passes.PURE


X = np.array([-0.5, -1e-7, 0.0, 1e-7, 1e-3, 0.5, 3.0, 100.0], np.float32)


@dvmlang.kernel
def _log1p_kernel(x_ptr, y_ptr, s_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    dl.store(y_ptr + offs, dl.log1p(dl.load(x_ptr + offs, mask=m, other=0.0)), mask=m)
    dl.store(s_ptr, dl.log1p(dl.load(x_ptr + 4)))  # the scalar instruction


def test_new_row_log1p_in_a_kernel_matches_numpy():
    y = np.zeros_like(X)
    s = np.zeros(1, np.float32)
    _log1p_kernel[(1,)](X, y, s, X.size, BLOCK=8)
    np.testing.assert_allclose(y, np.log1p(X), rtol=1e-6, atol=0)
    assert y[3] != 0.0  # log(1 + 1e-7) in float32 would round to 0; log1p keeps it
    np.testing.assert_allclose(s[0], np.log1p(X[4]), rtol=1e-6)
    text = _log1p_kernel.encode((1,), X, y, s, X.size, BLOCK=8).disassemble()
    assert "VLOG1P" in text and "SLOG1P" in text


def test_new_row_log1p_as_a_tensor_op_matches_numpy():
    np.testing.assert_allclose(ops.log1p(dvmlang.tensor(X)).numpy(), np.log1p(X), rtol=1e-6)
    ints = ops.log1p(dvmlang.tensor(np.array([0, 1, 9], np.int32)))  # integers compute in float32
    assert ints.dtype == dl.float32
    np.testing.assert_allclose(ints.numpy(), np.log1p([0.0, 1.0, 9.0]), rtol=1e-6)

    @dvmlang.graph
    def f(x):
        return ops.log1p(ops.mul(x, 1.5)) + 1.0

    np.testing.assert_allclose(f(X), np.log1p(X * 1.5) + 1.0, rtol=1e-6)
    report = f.explain(X)
    assert report.launches == 1 and report.rejections == []  # log1p fuses with its neighbours


def _math_erf(x):
    """The reference: Python's math.erf on each value in float64, rounded to x's dtype."""
    return np.frompyfunc(__import__("math").erf, 1, 1)(x.astype(np.float64)).astype(np.float64).astype(x.dtype)


def test_vectorised_erf_rounds_to_math_erf():
    """erf is vectorised for float32 and narrower (dvmlang/special.py); rounded, it is math.erf's value: every
    float16 and bfloat16 value, and two million float32 ones (random bit patterns, a grid over [-7, 7],
    normals); float64 within one ulp."""
    import ml_dtypes

    fn = opdefs.ELEMENTWISE["erf"].ref
    every = np.arange(1 << 16, dtype=np.uint16)
    rng = np.random.default_rng(0)
    f32 = [rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
           np.linspace(-7, 7, 600_001, dtype=np.float32), rng.standard_normal(400_000).astype(np.float32) * 2,
           np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 0.84375, 1.25, 1 / 0.35, 6.0, 1e-30, 1e-45], np.float32)]
    for x in [every.view(np.float16), every.view(ml_dtypes.bfloat16), *f32]:
        with np.errstate(invalid="ignore"):  # signalling NaN bit patterns, as inside a launch
            got, want = fn(x), _math_erf(x)
        assert got.dtype == x.dtype
        # (compared as float32, which holds every bfloat16 exactly: numpy's testing cannot compare bfloat16 NaNs
        # with every ml_dtypes version)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=str(x.dtype))
    # up to MATH_ERF_MAX elements erf is math.erf itself: the size of an array never changes a bit (a replay's
    # batch of tiles and one program's tile take different ways); every float32 value was compared once, offline
    x = np.concatenate(f32)[:100 * opdefs.MATH_ERF_MAX]
    with np.errstate(invalid="ignore"):
        chunks = [fn(x[i:i + opdefs.MATH_ERF_MAX]) for i in range(0, len(x), opdefs.MATH_ERF_MAX)]
        whole = fn(x)
    np.testing.assert_array_equal(np.concatenate(chunks).view(np.uint32), whole.view(np.uint32))
    from dvmlang import special
    x = rng.standard_normal(200_000) * 3
    ref = _math_erf(x)
    assert (np.abs(special.erf(x) - ref) <= np.spacing(np.abs(ref))).all()
