"""Regressions of control flow, kernel arguments and the batched device (issue 11): each test failed before
its fix. Every kernel runs on the batched device and on the sequential one, which must agree."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl

BATCHED = dvmlang.npu.Device()
SEQUENTIAL = dvmlang.npu.Device(sequential=True)


def run_both(kernel, grid, make_args, **meta):
    """Run ``kernel`` on both devices with fresh arguments; return the batched run's arguments after
    checking that the sequential run stored the same numbers."""
    results = []
    for device in (BATCHED, SEQUENTIAL):
        args = make_args()
        kernel[grid](*args, device=device, **meta)
        results.append(args)
    for a, b in zip(*results):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    return results[0]


def one(kernel, *scalars, grid=(1,)):
    out = run_both(kernel, grid, lambda: [np.full(1, -7, np.int32), *scalars])[0]
    return int(out[0])


# ---- 1. legal control flow that the IR verifier rejected --------------------------------------------------
@dvmlang.kernel
def nested_if_else_continue(out, n):
    acc = 0
    for j in range(-2, 3):
        if j <= 0:
            if n > 1:
                acc = j
        else:
            continue
    dl.store(out, acc)


@pytest.mark.parametrize("n,expected", [(3, 0), (1, 0)])
def test_value_from_the_only_branch_that_falls_through_is_yielded(n, expected):
    assert one(nested_if_else_continue, n) == expected


@dvmlang.kernel
def continue_in_both_branches(out, n):
    acc = 0
    for j in range(5):
        acc += 1
        if j < n:
            continue
        else:
            continue
    dl.store(out, acc)


def test_continue_in_both_branches_of_an_if():
    assert one(continue_in_both_branches, 2) == 5


@dvmlang.kernel
def break_in_both_branches(out, n):
    acc = 0
    while acc < 100:
        acc += 3
        if acc > n:
            break
        else:
            break
    dl.store(out, acc)


def test_break_in_both_branches_of_an_if():
    assert one(break_in_both_branches, 2) == 3


@dvmlang.kernel
def nested_early_return(out, n):
    acc = 0
    for i in range(4):
        if i > 1:
            if n > 3:
                dl.store(out, acc)
                return
            else:
                acc += 10
        acc += 1
    dl.store(out, acc)


@pytest.mark.parametrize("n,expected", [(5, 2), (1, 24)])
def test_early_return_inside_a_nested_if_else(n, expected):
    assert one(nested_early_return, n) == expected


@dvmlang.kernel
def return_one_branch_changes(out, n):
    x = n * 2
    if n > 0:
        if n > 3:
            return
        else:
            x = x + 1
    else:
        x = x - 1
    dl.store(out, x)


@pytest.mark.parametrize("n,expected", [(2, 5), (5, -7), (-1, -3)])
def test_early_return_next_to_an_assignment(n, expected):
    assert one(return_one_branch_changes, n) == expected


@dvmlang.kernel
def returns_from_both_branches(x):
    if x > 2:
        return x + 1
    else:
        return x - 1


@dvmlang.kernel
def helper_inside_if(out, n):
    r = 0
    if n > 0:
        r = returns_from_both_branches(n)
    dl.store(out, r)


@pytest.mark.parametrize("n,expected", [(3, 4), (1, 0), (0, 0)])
def test_inlined_helper_returning_from_both_branches_inside_an_if(n, expected):
    assert one(helper_inside_if, n) == expected


@dvmlang.kernel
def returns_a_local_on_every_path(x):
    y = x + 1
    if x > 2:
        return y
    return y


@dvmlang.kernel
def helper_returning_a_local(out, n):
    dl.store(out, returns_a_local_on_every_path(n))


def test_inlined_helper_returning_one_local_value_on_every_path():
    assert one(helper_returning_a_local, 3) == 4


@dvmlang.kernel
def store_or_store(a, b, n):
    dl.store(a, 1) if n > 0 else dl.store(b, 2)


@pytest.mark.parametrize("n,expected", [(1, [1, 0]), (0, [0, 2])])
def test_conditional_expression_of_two_stores(n, expected):
    a, b, _ = run_both(store_or_store, (1,), lambda: [np.zeros(1, np.int32), np.zeros(1, np.int32), n])
    assert [int(a[0]), int(b[0])] == expected


# ---- 2. a loop-carried tile that changes type: the error names the assignment, the loop is a note ----------
@dvmlang.kernel
def carried_tile_changes_type(out, n, BLOCK: dl.constexpr):
    acc = dl.zeros((BLOCK,), dl.int32)
    for i in range(n):
        x = dl.arange(0, BLOCK)
        acc = acc + x.to(dl.float32)
    dl.store(out + dl.arange(0, BLOCK), acc)


@dvmlang.kernel
def carried_tile_changes_shape_in_a_branch(out, n, BLOCK: dl.constexpr):
    acc = dl.zeros((BLOCK,), dl.int32)
    for i in range(n):
        if i > 2:
            acc = dl.zeros((2 * BLOCK,), dl.int32)
    dl.store(out + dl.arange(0, BLOCK), acc)


def _line_of(kernel, text):
    import inspect
    lines, start = inspect.getsourcelines(kernel.source.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("kernel,assignment,construct,message", [
    (carried_tile_changes_type, "acc = acc + x.to", "for i in range(n)",
     "loop-carried `acc` changes type: it is a tile<16xint32> before the loop and a tile<16xfloat32> in the body"),
    (carried_tile_changes_shape_in_a_branch, "acc = dl.zeros((2 * BLOCK", "if i > 2",
     "`acc` changes shape: a tile<16xint32> vs a tile<32xint32>"),
])
def test_type_change_points_at_the_assignment(kernel, assignment, construct, message):
    with pytest.raises(dvmlang.KernelTypeError) as info:
        kernel[(1,)](np.zeros(16, np.float32), 3, BLOCK=16)
    e = info.value
    lines = str(e).splitlines()
    assert e.loc.line == _line_of(kernel, assignment) and message in lines[0]
    assert lines[1].strip().startswith(assignment)
    note = next(i for i, line in enumerate(lines) if line.startswith("note: "))
    assert f":{_line_of(kernel, construct)}:" in lines[note] and lines[note + 1].strip().startswith(construct)


# ---- 3. numpy array subclasses as kernel arguments ------------------------------------------------------
@dvmlang.kernel
def add_one(x, out, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out + offs, dl.load(x + offs, mask=m) + 1, mask=m)


def test_memmap_arguments_run_and_stores_land_in_the_file(tmp_path):
    x = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(8,))
    x[:] = np.arange(8)
    out = np.memmap(tmp_path / "out.bin", dtype=np.float32, mode="w+", shape=(8,))
    for device in (BATCHED, SEQUENTIAL):
        out[:] = 0
        add_one[(1,)](x, out, 8, BLOCK=8, device=device)
        out.flush()
        np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", np.float32), np.arange(8) + 1)
    np.testing.assert_array_equal(np.asarray(x), np.arange(8))


@pytest.mark.filterwarnings("ignore:the matrix subclass")
@pytest.mark.parametrize("make,fix", [
    (lambda: np.matrix(np.arange(8, dtype=np.float32)), "np.asarray(m)"),
    (lambda: np.ma.masked_array(np.arange(8, dtype=np.float32), mask=[0, 1] * 4), "m.filled("),
])
def test_matrix_and_masked_array_arguments_say_what_to_pass(make, fix):
    x, out = make(), np.zeros(8, np.float32)
    with pytest.raises(dvmlang.ArgumentError) as info:
        add_one[(1,)](x, out, 8, BLOCK=8)
    msg = str(info.value)
    assert "argument `x` of `add_one`" in msg and type(x).__name__ in msg and fix in msg
    assert not out.any()


def test_masked_array_output_is_refused_before_anything_runs():
    x = np.arange(8, dtype=np.float32)
    out = np.ma.masked_array(np.zeros(8, np.float32))
    with pytest.raises(dvmlang.ArgumentError, match="m.data"):
        add_one[(1,)](x, out, 8, BLOCK=8)
    assert not out.data.any()


# ---- 4. programs storing scalars to one address: last program wins; race detection reports it -------------
@dvmlang.kernel
def store_program_id(out):
    dl.store(out, dl.program_id(0))


@dvmlang.kernel
def store_to_parity_cell(out):
    pid = dl.program_id(0)
    dl.store(out + pid % 2, pid * 10 + 1)


@pytest.mark.parametrize("kernel,grid,expected", [
    (store_program_id, 2, [1]), (store_program_id, 7, [6]),
    (store_to_parity_cell, 2, [1, 11]), (store_to_parity_cell, 9, [81, 71]),
])
def test_scalar_stores_to_one_address_keep_the_last_program(kernel, grid, expected):
    out = run_both(kernel, (grid,), lambda: [np.full(len(expected), -1, np.int32)])[0]
    assert out.tolist() == expected


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("kernel", [store_program_id, store_to_parity_cell])
def test_race_detection_reports_scalar_stores_to_one_address(kernel, sequential):
    device = dvmlang.npu.Device(race_detection=True, sequential=sequential)
    with pytest.raises(dvmlang.RaceDetected, match="both wrote element"):
        kernel[(3,)](np.zeros(2, np.int32), device=device)


# ---- 5. a budget on the body copies static_range unrolls ------------------------------------------------
@dvmlang.kernel
def nested_static_ranges(out):
    acc = 0
    for i in dl.static_range(4096):
        for j in dl.static_range(4096):
            acc += 1
    dl.store(out, acc)


@dvmlang.kernel
def many_static_ranges(out, N: dl.constexpr):
    acc = 0
    for k in dl.static_range(N):
        for i in dl.static_range(4096):
            acc += 1
    dl.store(out, acc)


def test_nested_static_ranges_over_the_unroll_budget_are_an_error_at_the_loop():
    with pytest.raises(dvmlang.CompilationError) as info:
        nested_static_ranges[(1,)](np.zeros(1, np.int32))
    e = info.value
    assert e.loc.line == _line_of(nested_static_ranges, "for j in dl.static_range(4096)")
    assert "65536" in str(e) and "use range(...)" in str(e)


def test_the_unroll_budget_counts_every_copy_and_allows_up_to_it():
    out = np.zeros(1, np.int32)
    many_static_ranges[(1,)](out, N=2)
    assert out[0] == 8192
    with pytest.raises(dvmlang.CompilationError, match="65536"):
        many_static_ranges[(1,)](out, N=17)


# ---- 6. prints inside long loops keep a bounded number of lines ----------------------------------------
@dvmlang.kernel
def print_in_a_long_loop(n):
    for i in range(n):
        print("i", i)


def test_a_print_in_a_long_loop_keeps_the_first_lines_and_counts_the_rest(capsys):
    from dvmlang.npu.launch import PRINT_LIMIT
    n = PRINT_LIMIT + 2500
    for device in (BATCHED, SEQUENTIAL):
        record = print_in_a_long_loop[(2,)](n, device=device)
        assert len(record.prints) == PRINT_LIMIT + 1
        assert record.prints[:2] == ["pid (0) i 0", "pid (0) i 1"]
        assert record.prints[PRINT_LIMIT - 1] == f"pid (0) i {PRINT_LIMIT - 1}"
        assert record.prints[-1] == f"... {2 * n - PRINT_LIMIT} more print lines dropped (a launch keeps the " \
                                    f"first {PRINT_LIMIT})"
        assert capsys.readouterr().out.splitlines() == record.prints
