"""Pointer tables (Triton's tutorial 08): int64 addresses from x.data_ptr() in a tensor, loaded and cast with
tl.pointer_type, resolve to the live tensor each address falls in; accesses are bounds-checked against that
tensor; an address inside no tensor is an ArgumentError before anything runs."""

import numpy as np
import pytest
import torch

import dvmlang
import dvmlang.triton as triton
import dvmlang.triton.language as tl


@triton.jit
def _scale_each(ptrs, sizes, n_groups, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    p = tl.load(ptrs + g).to(tl.pointer_type(tl.float32))
    n = tl.load(sizes + g)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        x = tl.load(p + start + offs, mask=start + offs < n)
        tl.store(p + start + offs, x * 2 + 1, mask=start + offs < n)


def test_each_table_entry_reads_and_writes_its_own_tensor():
    xs = [torch.randn(n) for n in (5, 300, 64, 1)]
    want = [x * 2 + 1 for x in xs]
    ptrs = torch.tensor([x.data_ptr() for x in xs])
    sizes = torch.tensor([x.numel() for x in xs], dtype=torch.int32)
    _scale_each[(len(xs),)](ptrs, sizes, len(xs), BLOCK=64)
    for x, w in zip(xs, want):
        torch.testing.assert_close(x, w)


def test_an_access_past_a_tensor_is_a_fault_naming_it_not_a_read_of_its_neighbour():
    xs = [torch.randn(n) for n in (8, 8)]
    before = [x.clone() for x in xs]
    ptrs = torch.tensor([x.data_ptr() for x in xs])
    sizes = torch.tensor([20, 8], dtype=torch.int32)  # the first is told it has 20 elements
    with pytest.raises(dvmlang.MemoryFault, match=r"pointer table .* run 12 elements past its end"):
        _scale_each[(2,)](ptrs, sizes, 2, BLOCK=32)
    for x, b in zip(xs, before):
        assert torch.equal(x, b)


def test_an_address_inside_no_tensor_is_an_argument_error():
    x = torch.randn(4)
    ptrs = torch.tensor([x.data_ptr(), 16])
    sizes = torch.tensor([4, 4], dtype=torch.int32)
    with pytest.raises(dvmlang.ArgumentError, match="inside no live tensor"):
        _scale_each[(2,)](ptrs, sizes, 2, BLOCK=32)


def test_an_array_argument_can_be_pointed_into_and_an_unknown_numpy_array_cannot():
    @triton.jit
    def gather_rows(ptrs, out, src, BLOCK: tl.constexpr):
        g = tl.program_id(0)
        p = tl.load(ptrs + g).to(tl.pointer_type(tl.float32))
        offs = tl.arange(0, BLOCK)
        tl.store(out + g * BLOCK + offs, tl.load(p + offs))

    a = np.arange(64, dtype=np.float32)
    out = np.zeros((3, 16), np.float32)
    ptrs = np.array([a.ctypes.data + 32 * 4, a.ctypes.data, a.ctypes.data + 48 * 4], dtype=np.int64)
    gather_rows[(3,)](ptrs, out, a, BLOCK=16)  # `a` is an argument: its memory is known
    np.testing.assert_array_equal(out, np.stack([a[32:48], a[:16], a[48:]]))
    b = np.arange(64, dtype=np.float32)  # a numpy array that is no argument: numpy arrays are not found by address
    ptrs = np.array([b.ctypes.data], dtype=np.int64)
    with pytest.raises(dvmlang.ArgumentError, match="inside no live tensor"):
        gather_rows[(1,)](ptrs, out, a, BLOCK=16)


def test_a_pointer_not_loaded_from_a_table_is_a_compile_error():
    @triton.jit
    def bad(x, n):
        p = (n + 0).to(tl.pointer_type(tl.float32))
        tl.store(p, 1.0)

    with pytest.raises(dvmlang.CompilationError, match="int64 address|pointer table"):
        bad[(1,)](torch.zeros(2), 3)


def test_a_written_tensor_reached_both_ways_is_refused():
    @triton.jit
    def both(ptrs, direct, BLOCK: tl.constexpr):
        p = tl.load(ptrs).to(tl.pointer_type(tl.float32))
        offs = tl.arange(0, BLOCK)
        tl.store(direct + offs, tl.load(p + offs) + 1)

    x = torch.zeros(16)
    with pytest.raises(dvmlang.ArgumentError, match="one way"):
        both[(1,)](torch.tensor([x.data_ptr()]), x, BLOCK=16)
    y = torch.zeros(16)
    both[(1,)](torch.tensor([x.data_ptr()]), y, BLOCK=16)  # read through the table, written directly: fine
    assert torch.equal(y, x + 1)


def test_bytecode_does_not_depend_on_where_the_tensors_live():
    sizes = torch.tensor([4, 4], dtype=torch.int32)
    digests = set()
    for _ in range(3):
        xs = [torch.randn(4) for _ in range(2)]
        bc = _scale_each.encode((2,), torch.tensor([x.data_ptr() for x in xs]), sizes, 2, BLOCK=32)
        digests.add(bc.code.tobytes())
    assert len(digests) == 1


def test_live_fake_tensors_and_dead_weak_proxies_do_not_break_the_storage_scan():
    """torch.compile leaves FakeTensors alive (their data pointers are not memory) and weak proxies may be dead:
    the scan for the tensors a table points into skips both rather than fail (it raised NotImplementedError)."""
    import weakref
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(16)  # noqa: F841 - kept alive across the launch on purpose

    class Holder:
        pass

    proxy = weakref.proxy(Holder())  # noqa: F841 - dead at once
    xs = [torch.randn(n) for n in (5, 7)]
    want = [x * 2 + 1 for x in xs]
    ptrs = torch.tensor([x.data_ptr() for x in xs])
    _scale_each[(2,)](ptrs, torch.tensor([5, 7], dtype=torch.int32), 2, BLOCK=8)
    for x, w in zip(xs, want):
        torch.testing.assert_close(x, w)
