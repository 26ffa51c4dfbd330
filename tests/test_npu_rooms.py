"""The simulator's tables: one step builder per ISA family, one cost formula per cost kind, and the facts the
decoder attaches to each step for the trace."""

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device, timing
from dvmlang.npu.units import BUILDERS, check
from dvmlang.npu.units.registry import builds
from dvmlang.vm import isa


def test_every_isa_family_has_exactly_one_builder_and_no_builder_is_orphaned():
    families = {ins.family for ins in isa.TABLE}
    assert set(BUILDERS) == families
    check()


def test_a_second_builder_for_a_family_is_refused():
    with pytest.raises(AssertionError, match="two step builders"):
        builds("vbin")(lambda m, d: None)
    assert BUILDERS["vbin"].__name__ == "vbin"


def test_every_cost_kind_has_one_formula():
    assert set(timing.COSTS) == {ins.cost.kind for ins in isa.TABLE}


def test_transfers_are_the_rows_on_the_gm_port():
    """The MTEs, and FixPipe where it writes GM (its stores and, on 910B, the handoffs through a GM workspace)."""
    from dvmlang.npu.profile import PROFILES
    for ins in isa.TABLE:
        if timing.uses_port(ins.cost, PROFILES["910B2"]):
            assert ins.pipe in (isa.Pipe.MTE2, isa.Pipe.MTE3, isa.Pipe.FIXPIPE), ins.name
        if timing.uses_port(ins.cost, PROFILES["910B2"].with_(l0c_to_ub=True)):
            assert ins.cost.kind != "handoff", ins.name


@dvmlang.kernel
def _dot(a_ptr, b_ptr, c_ptr, M: dl.constexpr, N: dl.constexpr, K: dl.constexpr):
    rm = dl.arange(0, M)
    rn = dl.arange(0, N)
    rk = dl.arange(0, K)
    a = dl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = dl.load(b_ptr + rk[:, None] * N + rn[None, :])
    dl.store(c_ptr + rm[:, None] * N + rn[None, :], dl.dot(a, b))


def test_steps_carry_the_facts_the_trace_reads():
    a = np.ones((32, 64), np.float16)
    b = np.ones((64, 16), np.float16)
    c = np.zeros((32, 16), np.float32)
    device = Device()
    launch = _dot[(1,)](a, b, c, M=32, N=16, K=64, device=device, trace=True)
    np.testing.assert_array_equal(c, np.full((32, 16), 64.0, np.float32))
    steps = device.machine(launch.bytecode).steps
    mmad = next(s for s in steps if s.ins.name == "MMAD")
    assert mmad.facts.macs == 32 * 64 * 16
    assert {t.field: t.space for t in mmad.facts.tiles} == {"dst": "l0c", "a": "l0a", "b": "l0b"}
    assert mmad.facts.ub is None
    info = launch.trace.steps[mmad.index]
    assert info.work == 32 * 64 * 16 and info.ub is None
    for s in steps:
        if s.ins.family == "dma_load":
            assert s.facts.tiles[0].space == s.ins.spaces["dst"]
            assert s.port and s.latency == device.profile.dma_latency
        if s.pipe == isa.Pipe.VECTOR and s.facts.tiles:
            biggest = max(t.nbytes for t in s.facts.tiles)
            assert s.facts.repeats == -(-biggest // device.profile.vector_bytes_per_cycle)


def test_every_family_has_its_reference_semantics():
    """vm/semantics.SEMANTICS covers the ISA's families exactly (what an instruction computes, in one place)."""
    from dvmlang.vm import isa, semantics
    assert semantics.SEMANTICS.keys() == {ins.family for ins in isa.TABLE}
