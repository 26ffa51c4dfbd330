"""Compile errors point at the exact expression with file:line:col, a caret span and a rewrite."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

X = np.zeros(16, np.float32)


def compile_error(kernel, *args, **kw):
    with pytest.raises(dvmlang.CompilationError) as info:
        kernel[(1,)](*args, **kw)
    return info.value


@dvmlang.kernel
def uses_try(x_ptr):
    try:
        dl.store(x_ptr, 1.0)
    except Exception:
        pass


@dvmlang.kernel
def uses_with(x_ptr):
    with open("f"):
        pass


@dvmlang.kernel
def uses_lambda(x_ptr):
    f = lambda v: v  # noqa: E731
    dl.store(x_ptr, f(1.0))


@dvmlang.kernel
def uses_matmul(x_ptr, BLOCK: dl.constexpr):
    a = dl.load(x_ptr + dl.arange(0, BLOCK))
    b = a @ a  # noqa: F841 - the error is about this line


@dvmlang.kernel
def shape_mismatch(x_ptr, BLOCK: dl.constexpr):
    a = dl.arange(0, BLOCK)
    b = dl.arange(0, BLOCK * 2)
    c = a + b
    dl.store(x_ptr + a, c)


@dvmlang.kernel
def loop_type_change(x_ptr, n, BLOCK: dl.constexpr):
    acc = dl.zeros((BLOCK,), dl.float32)
    for i in range(n):
        acc = dl.arange(0, BLOCK)
    dl.store(x_ptr + dl.arange(0, BLOCK), acc)


@dvmlang.kernel
def runtime_shape(x_ptr, n):
    a = dl.arange(0, n)
    dl.store(x_ptr + a, a)


@dvmlang.kernel
def numpy_call(x_ptr, BLOCK: dl.constexpr):
    a = dl.load(x_ptr + dl.arange(0, BLOCK))
    dl.store(x_ptr + dl.arange(0, BLOCK), np.exp(a))


@dvmlang.kernel
def undefined_after_loop(x_ptr, n):
    for i in range(n):
        y = i
    dl.store(x_ptr, y)


@dvmlang.kernel
def helper(v):
    return v + undefined_name  # noqa: F821


@dvmlang.kernel
def calls_helper(x_ptr):
    dl.store(x_ptr, helper(1.0))


@dvmlang.kernel
def too_big(x_ptr, BLOCK: dl.constexpr):
    a = dl.zeros((BLOCK, BLOCK), dl.float32)
    b = a + 1.0
    c = b * 2.0
    d = c + b
    dl.store(x_ptr + dl.arange(0, BLOCK)[:, None] * BLOCK + dl.arange(0, BLOCK)[None, :], d + a)


@pytest.mark.parametrize("kernel,args,text,rewrite", [
    (uses_try, (X,), "`Try` is not supported", "check conditions with `if`"),
    (uses_with, (X,), "`With` is not supported", "call the operations directly"),
    (uses_lambda, (X,), "`Lambda` is not supported", "@dvmlang.kernel"),
    (uses_matmul, (X,), "the `@` operator is not supported", "dl.dot(a, b)"),
])
def test_unsupported_constructs(kernel, args, text, rewrite):
    e = compile_error(kernel, *args, BLOCK=16) if "BLOCK" in kernel.source.params else compile_error(kernel, *args)
    msg = str(e)
    assert text in msg and rewrite in msg
    assert "test_diagnostics.py:" in msg and "^" in msg


def test_shape_mismatch_points_at_the_expression():
    e = compile_error(shape_mismatch, X, BLOCK=8)
    assert isinstance(e, dvmlang.KernelTypeError)
    lines = str(e).splitlines()
    assert "cannot broadcast shapes (8,) and (16,)" in lines[0] and "test_diagnostics.py:48:9" in lines[0]
    assert lines[1].strip() == "c = a + b"
    assert lines[2].strip() == "^^^^^"


def test_loop_carried_type_change():
    e = compile_error(loop_type_change, X, 3, BLOCK=8)
    assert "loop-carried `acc` changes type" in str(e) and "float32" in str(e) and "int32" in str(e)


def test_runtime_value_where_constexpr_needed():
    e = compile_error(runtime_shape, X, 4)
    assert isinstance(e, dvmlang.ConstexprError) and "compile-time integers" in str(e)


def test_numpy_call_with_tiles():
    e = compile_error(numpy_call, X, BLOCK=8)
    assert "cannot call the Python function" in str(e) and "dl.exp" in str(e)


def test_name_defined_only_in_loop():
    e = compile_error(undefined_after_loop, X, 3)
    assert "defined only inside the loop" in str(e)


def test_error_in_inlined_kernel_shows_call_chain():
    e = compile_error(calls_helper, X)
    msg = str(e)
    assert "name `undefined_name` is not defined" in msg
    assert "in kernel `helper` called from" in msg and "dl.store(x_ptr, helper(1.0))" in msg


def test_tile_too_big_for_ub_names_buffers():
    with pytest.raises(dvmlang.ResourceError) as info:
        too_big[(1,)](np.zeros(256 * 256, np.float32), BLOCK=256)
    msg = str(info.value)
    assert "does not fit UB" in msg and "KiB" in msg and "192 KiB available" in msg
    assert isinstance(info.value, dvmlang.CompilationError)  # a tile larger than UB is a compile error...
    assert "test_diagnostics.py:" in msg and "^^^" in msg and "hint: use smaller BLOCK" in msg  # ...with its line


def test_failed_static_assert_on_a_pointer_dtype_does_not_blame_the_parameter():
    """`o_ptr.dtype` is known at compile time: the failure is the assertion, not a missing constexpr."""
    @dvmlang.kernel
    def same_dtype(x_ptr, o_ptr, B: dl.constexpr):
        x = dl.load(x_ptr + dl.arange(0, B))
        dl.static_assert(x.dtype == o_ptr.dtype.element_ty)
        dl.store(o_ptr + dl.arange(0, B), x)

    with pytest.raises(dvmlang.ConstexprError) as e:
        same_dtype[(1,)](np.zeros(4, np.float32), np.zeros(4, np.int32), B=4)
    assert "static assertion failed" in str(e.value) and "runtime parameter" not in str(e.value)
