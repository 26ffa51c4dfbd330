"""Regression tests for frontend and IR bugs found while writing the gallery and the language reference."""

import warnings

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl


def _no_gather_warnings(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = fn()
    assert not [x for x in w if issubclass(x.category, dvmlang.PerformanceWarning)], [str(x.message) for x in w]
    return result


@dvmlang.kernel
def other_tile_k(x_ptr, out_ptr, n, N: dl.constexpr, MODE: dl.constexpr):
    o = dl.arange(0, N)
    if MODE == "computed":
        other = o.to(dl.float32) * 10.0
    else:  # a reduction result (a 0-d tile) broadcast as the fill value
        other = dl.max(dl.load(x_ptr + o), axis=0)
    dl.store(out_ptr + o, dl.load(x_ptr + o, mask=o < n, other=other))


@pytest.mark.parametrize("mode", ["computed", "reduced"])
def test_load_with_a_tile_other_on_the_dma_path(mode):
    # used to fail with "internal: scalar ... has no register": DMA loads took `other` as a scalar only
    x = np.arange(1, 9, dtype=np.float32)
    out = np.zeros(8, np.float32)
    _no_gather_warnings(lambda: other_tile_k[(1,)](x, out, 5, N=8, MODE=mode))
    fill = np.arange(8) * 10.0 if mode == "computed" else np.full(8, x.max())
    np.testing.assert_array_equal(out, np.where(np.arange(8) < 5, x, fill))


@dvmlang.kernel
def reduced_offset_k(x_ptr, out_ptr, MODE: dl.constexpr):
    o = dl.arange(0, 4)
    s = dl.sum(dl.load(x_ptr + o), axis=0)  # a 0-d tile on the vector unit
    if MODE == "ptr_plus_scalar":
        v = dl.load(x_ptr + s + o)
    elif MODE == "ptr_plus_tile":
        v = dl.load(x_ptr + (s + o))
    else:  # the reduction result as a mask bound
        v = dl.load(x_ptr + 4 + o, mask=o < s - 4, other=-1)
    dl.store(out_ptr + s + o, v)


@pytest.mark.parametrize("mode", ["ptr_plus_scalar", "ptr_plus_tile", "mask_bound"])
def test_reduction_results_as_offsets_stay_dma(mode):
    # used to become gathers/scatters: a one-element tile offset was not recognised as uniform
    x = np.array([0, 1, 2, 3, 10, 11, 12, 13, 14, 15], np.int32)  # the first four sum to 6
    out = np.zeros(12, np.int32)
    _no_gather_warnings(lambda: reduced_offset_k[(1,)](x, out, MODE=mode))
    want = np.zeros(12, np.int32)
    want[6:10] = x[6:10] if mode != "mask_bound" else [10, 11, -1, -1]
    np.testing.assert_array_equal(out, want)


@dvmlang.kernel
def scalar_mem_k(x_ptr, out_ptr, cnt_ptr, old_ptr, n):
    pid = dl.program_id(0)
    v = dl.load(x_ptr + pid, mask=pid < n, other=-1.0)
    dl.store(out_ptr + pid, v * 2.0, mask=pid % 2 == 0)
    old = dl.atomic_add(cnt_ptr, 1)
    dl.store(old_ptr + pid, old)
    if old == 0:  # exactly one program saw the counter at zero
        dl.atomic_max(cnt_ptr + 1, pid + 100)


def test_masked_scalar_loads_stores_and_scalar_atomics():
    # used to be rejected by the lowering ("masked scalar loads/stores are not supported", "scalar atomics
    # are not supported"); Triton kernels use all three, so they go through one-element tiles
    P, n = 7, 4
    x = np.arange(P, dtype=np.float32) + 1
    out = np.full(P, 5.0, np.float32)
    cnt = np.zeros(2, np.int32)
    old = np.full(P, -1, np.int32)
    scalar_mem_k[(P,)](x, out, cnt, old, n)
    v = np.where(np.arange(P) < n, x, -1.0)
    np.testing.assert_array_equal(out, np.where(np.arange(P) % 2 == 0, v * 2, 5.0))
    assert cnt[0] == P and sorted(old.tolist()) == list(range(P))
    assert cnt[1] == 100 + int(np.argmin(old))


@dvmlang.kernel
def ifexp_types_k(x_ptr, n):
    o = dl.arange(0, 4)
    r = dl.load(x_ptr + o) if n > 2 else o
    dl.store(x_ptr + o, r)


def test_conditional_expression_type_error_names_the_expression():
    # the message used to name an internal variable (`__ifexp_<id>`)
    with pytest.raises(dvmlang.KernelTypeError) as info:
        ifexp_types_k[(1,)](np.zeros(4, np.float32), 3)
    msg = str(info.value)
    assert "the conditional expression has different types" in msg and "__ifexp" not in msg
    assert "dl.load(x_ptr + o) if n > 2 else o" in msg and "^^^" in msg


@dvmlang.kernel
def print_order_k(x_ptr):
    i = dl.program_id(0)
    print("i", i, "x", dl.load(x_ptr + i), "done")
    print("dtype", dl.float32)


def test_print_keeps_text_beside_the_value_it_labels(capsys):
    # text after the first value used to be moved in front of all values ("i x 0" / "0.0")
    print_order_k[(2,)](np.array([1.5, 2.5], np.float32))
    assert capsys.readouterr().out.splitlines() == [
        "pid (0) i 0", "pid (0) x 1.5", "pid (0) done", "pid (0) dtype dl.float32",
        "pid (1) i 1", "pid (1) x 2.5", "pid (1) done", "pid (1) dtype dl.float32"]


@dvmlang.kernel
def huge_tile_k(x_ptr, B: dl.constexpr):
    dl.store(x_ptr + dl.arange(0, B), 1.0)


def test_constexpr_note_uses_the_right_article():
    with pytest.raises(dvmlang.KernelTypeError) as info:
        huge_tile_k[(1,)](np.zeros(4, np.float32), B=1 << 23)
    assert "dl.constexpr parameter `B` = 8388608, an int" in str(info.value)


@dvmlang.kernel
def scalar_or_0d_k(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    o = dl.arange(0, BLOCK)
    best = dl.load(x_ptr)  # a scalar register
    for i in range(n):
        best = dl.maximum(best, dl.max(dl.load(x_ptr + i * BLOCK + o), axis=0))  # a 0-d tile
    first = dl.load(x_ptr + 1)
    if n > 1:
        first = dl.min(dl.load(x_ptr + o), axis=0)
    dl.store(out_ptr, best)
    dl.store(out_ptr + 1, first)


def test_a_scalar_and_a_0d_tile_merge_through_loops_and_ifs(rng):
    # used to fail with "`best` changes shape: a scalar dl.float32 vs a tile tile<float32>"
    x = rng.standard_normal(24).astype(np.float32)
    out = np.zeros(2, np.float32)
    scalar_or_0d_k[(1,)](x, out, 3, BLOCK=8)
    assert out[0] == x.max() and out[1] == x[:8].min()
    scalar_or_0d_k[(1,)](x, out, 1, BLOCK=8)
    assert out[0] == max(x[0], x[:8].max()) and out[1] == x[1]


@dvmlang.kernel
def forgot_constexpr_k(x_ptr, BLOCK):
    o = dl.arange(0, BLOCK)
    dl.store(x_ptr + o, 1.0)


def test_a_forgotten_constexpr_annotation_is_named():
    with pytest.raises(dvmlang.ConstexprError) as info:
        forgot_constexpr_k[(1,)](np.zeros(8, np.float32), 8)
    msg = str(info.value)
    assert "`BLOCK` is a runtime parameter; declare it `BLOCK: dl.constexpr`" in msg
    assert "dl.arange(0, BLOCK)" in msg and "^^^" in msg


SCALE_FOR_REBUILD = 3


@dvmlang.kernel
def reads_a_global_k(out_ptr):
    dl.store(out_ptr, SCALE_FOR_REBUILD * 2.0)


def test_changing_a_global_rebuilds_and_does_not_reuse_the_old_instance():
    # used to rebuild but then launch the instance encoded from the old build (same shapes): stale result
    global SCALE_FOR_REBUILD
    out = np.zeros(1, np.float32)
    reads_a_global_k[(1,)](out)
    assert out[0] == 6.0
    SCALE_FOR_REBUILD = 5
    try:
        reads_a_global_k[(1,)](out)
        assert out[0] == 10.0 and reads_a_global_k.cache_info().builds == 2
    finally:
        SCALE_FOR_REBUILD = 3


def test_a_closure_constant_is_built_once_and_a_rebound_one_rebuilds():
    """A kernel made by a factory reads its closure's numbers as constants: its launches share one build (it was
    built again at every launch: the value was checked against the module's globals, where the name is not), and
    a cell rebound to another value is a new build with that value."""
    def factory(scale):
        @dvmlang.kernel
        def scaled(x_ptr, out_ptr, BLOCK: dl.constexpr):
            offs = dl.arange(0, BLOCK)
            dl.store(out_ptr + offs, dl.load(x_ptr + offs) * scale + 1.0)

        def rebind(v):
            nonlocal scale
            scale = v
        return scaled, rebind

    kern, rebind = factory(3.0)
    x = np.arange(8, dtype=np.float32)
    for _ in range(3):
        out = np.zeros(8, np.float32)
        kern[(1,)](x, out, BLOCK=8)
        np.testing.assert_array_equal(out, x * 3.0 + 1.0)
    assert kern.cache_info().builds == 1
    rebind(0.5)
    out = np.zeros(8, np.float32)
    kern[(1,)](x, out, BLOCK=8)
    np.testing.assert_array_equal(out, x * 0.5 + 1.0)
    assert kern.cache_info().builds == 2


@dvmlang.kernel
def _swap_in_loop(x_ptr, out_ptr, n):
    offs = dl.arange(0, 4)
    a = dl.load(x_ptr + offs)
    b = a * 2.0
    i = 0
    j = 1
    for _ in range(n):
        a, b = b, a
        i, j = j, i
    dl.store(out_ptr + offs, a + i * 100.0)


def test_loop_carried_values_that_swap_places():
    x = np.arange(4, dtype=np.float32)
    for n in (0, 1, 2, 3):
        out = np.zeros(4, np.float32)
        _swap_in_loop[(1,)](x, out, n)
        ref = (x * 2 if n % 2 else x) + (100.0 if n % 2 else 0.0)
        np.testing.assert_allclose(out, ref)


@dvmlang.kernel
def _reshape_varargs(x_ptr, out_ptr):
    v = dl.load(x_ptr + dl.arange(0, 6))
    m = v.reshape(2, 3)
    dl.store(out_ptr + dl.arange(0, 2)[:, None] * 3 + dl.arange(0, 3)[None, :], dl.broadcast_to(m, 2, 3) + 1.0)


def test_reshape_with_separate_sizes():
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    _reshape_varargs[(1,)](x, out)
    np.testing.assert_array_equal(out, x + 1)


@dvmlang.kernel
def _checked_sqrt(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    x = dl.load(x_ptr + offs, mask=m, other=1.0)
    dl.device_assert(x >= 0, "negative input to sqrt", mask=m)
    dl.store(out_ptr + offs, dl.sqrt(x), mask=m)


def test_device_assert_traps_with_program_and_line():
    x = np.arange(20, dtype=np.float32)
    out = np.zeros_like(x)
    _checked_sqrt[(3,)](x, out, 20, BLOCK=8)
    np.testing.assert_allclose(out, np.sqrt(x))
    x[13] = -1.0
    with pytest.raises(dvmlang.DeviceError, match=r"(?s)programs \[1\].*negative input to sqrt.*test_language_regressions"):
        _checked_sqrt[(3,)](x, out, 20, BLOCK=8)


@dvmlang.kernel
def _shape_helpers(x_ptr, out_ptr):
    v = dl.load(x_ptr + dl.arange(0, 8))
    m = dl.reshape(v, (4, 2))
    a, b = dl.split(m)
    t = dl.squeeze(dl.unsqueeze(a, 0), 0)
    dl.store(out_ptr + dl.arange(0, 4), dl.fdiv(t, 2.0) + dl.pow(b, 2.0))
    dl.store(out_ptr + 4 + dl.arange(0, 8), dl.ravel(m) * 1.0)


def test_split_squeeze_ravel_pow():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(12, np.float32)
    _shape_helpers[(1,)](x, out)
    np.testing.assert_allclose(out[:4], x[0::2] / 2 + x[1::2] ** 2)
    np.testing.assert_allclose(out[4:], x)
