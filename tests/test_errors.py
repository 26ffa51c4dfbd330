"""Bad input gets a clear dvmlang error that names what, where, and how to fix it."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl


@dvmlang.kernel
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) + dl.load(y_ptr + offs, mask=mask), mask=mask)


@dvmlang.kernel
def unmasked(x_ptr, out_ptr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    x = dl.load(x_ptr + offs)
    dl.store(out_ptr + offs, x)


X = np.zeros(10, np.float32)


def test_too_many_arguments():
    with pytest.raises(dvmlang.ArgumentError, match=r"takes 5 arguments \(x_ptr, y_ptr, out_ptr, n, BLOCK\)"):
        add[(1,)](X, X, X, 10, 16, 3)


def test_missing_argument_names_it():
    with pytest.raises(dvmlang.LaunchError, match="missing the argument `n`"):
        add[(1,)](X, X, X, BLOCK=16)


def test_missing_constexpr_names_it():
    with pytest.raises(dvmlang.LaunchError, match="missing the dl.constexpr `BLOCK`"):
        add[(1,)](X, X, X, 10)


def test_list_instead_of_array():
    with pytest.raises(dvmlang.ArgumentError, match=r"`y_ptr` of `add` must be a numpy array or a number, got list"):
        add[(1,)](X, [1.0, 2.0], X, 10, BLOCK=16)


def test_unsupported_dtype():
    with pytest.raises(dvmlang.ArgumentError, match="`x_ptr` of `add` has dtype complex64"):
        add[(1,)](X.astype(np.complex64), X, X, 10, BLOCK=16)


@pytest.mark.parametrize("grid", [(-3,), (2, -1), ()])
def test_bad_grid(grid):
    with pytest.raises(dvmlang.LaunchError, match="grid"):
        add[grid](X, X, X, 10, BLOCK=16)


def test_grid_of_wrong_type():
    with pytest.raises(dvmlang.LaunchError, match="must be an int"):
        add[(1.5,)](X, X, X, 10, BLOCK=16)


def test_float_for_int_constexpr_names_parameter():
    with pytest.raises(dvmlang.ConstexprError) as info:
        add[(1,)](X, X, X, 10, BLOCK=16.0)
    msg = str(info.value)
    assert "`BLOCK` = 16.0" in msg and "test_errors.py:12:" in msg and "^^^" in msg


def test_unknown_keyword():
    with pytest.raises(dvmlang.LaunchError, match="has no parameter `BLOK`"):
        add[(1,)](X, X, X, 10, BLOK=16)


def test_non_contiguous_array():
    a = np.zeros((10, 10), np.float32)[:, ::2]
    with pytest.raises(dvmlang.ArgumentError, match="not C-contiguous"):
        add[(1,)](a, X, X, 10, BLOCK=16)


def test_argument_errors_are_also_builtin_errors():
    with pytest.raises(TypeError):
        add[(1,)](X, "x", X, 10, BLOCK=16)
    with pytest.raises(ValueError):
        add[(-1,)](X, X, X, 10, BLOCK=16)


def test_unmasked_out_of_bounds_load_faults_with_line():
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(16, np.float32)
    with pytest.raises(dvmlang.MemoryFault) as info:
        unmasked[(1,)](x, out, BLOCK=16)
    e = info.value
    assert e.tensor == "x_ptr" and e.index_range == (0, 15) and e.program_id == (0, 0, 0)
    assert "test_errors.py:20" in str(e) and "x = dl.load(x_ptr + offs)" in str(e)
    assert not out.any(), "a faulting launch must not have stored anything it did not reach"


def test_masked_load_does_not_fault():
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    add[(1,)](x, x, out, 10, BLOCK=16)
    np.testing.assert_array_equal(out, 2 * x)


def test_out_of_bounds_store_faults_and_names_program():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(20, np.float32)
    with pytest.raises(dvmlang.MemoryFault, match=r"`out_ptr`.*program 1 touched elements \[16, 31\]"):
        unmasked[(2,)](x, out, BLOCK=16)


def test_read_only_output_rejected():
    out = np.zeros(10, np.float32)
    out.flags.writeable = False
    with pytest.raises(dvmlang.ArgumentError, match="read-only"):
        add[(1,)](X, X, out, 10, BLOCK=16)


def test_calling_a_kernel_directly_explains_the_grid():
    with pytest.raises(dvmlang.DvmError, match=r"add\[grid\]"):
        add(X, X, X, 10, BLOCK=16)


def test_dl_functions_outside_kernels():
    with pytest.raises(dvmlang.DvmError, match="only be used inside a @dvmlang.kernel"):
        dl.exp(1.0)
