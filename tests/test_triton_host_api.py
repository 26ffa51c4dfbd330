"""Host names of dvmlang.triton that Triton's tutorials 06, 08 and 09 use: set_allocator, pointer_type
tables, tensor descriptors."""

import pytest

import dvmlang
import dvmlang.triton as triton


def test_set_allocator_takes_a_callable_or_none_and_never_calls_it():
    calls = []
    triton.set_allocator(lambda size, align, stream: calls.append(size))
    triton.set_allocator(None)
    assert calls == []
    with pytest.raises(dvmlang.DvmError, match="callable"):
        triton.set_allocator(3)
