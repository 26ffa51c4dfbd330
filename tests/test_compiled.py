"""The compiled device path (docs/device.md, "The compiled path") and the reference semantics it is written from:
the statements ``vm.semantics.scalar_expr`` gives compute what the families' functions compute, for every
scalar row and dtype; a budget that ends inside a block stops where the step-by-step path stops; the gallery's
launches give the same records compiled and step by step. (The differential generators compare the compiled,
step-by-step and sequential devices on random programs.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.npu import Device
from dvmlang.vm import isa, semantics
from dvmlang.vm.decode import Decoded

INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
PLAIN = INTS + (np.float32, np.float64, np.bool_)


def _values(dtype, rng, k=24):
    d = np.dtype(dtype)
    if d.kind == "b":
        return [np.bool_(False), np.bool_(True)]
    if d.kind == "f":
        edge = [0.0, -0.0, 1.0, -1.5, 3.25, np.inf, -np.inf, np.nan, 1e30, -7.0]
        return [d.type(x) for x in edge] + [d.type(x) for x in rng.standard_normal(k) * 100]
    info = np.iinfo(d)
    edge = {info.min, info.max, 0, 1, 2, 3, 7, 31, 32, 33, 63, 64, info.max - 1}
    if info.min < 0:
        edge |= {-1, -2, -7, info.min + 1}
    vals = [d.type(x) for x in sorted(edge)]
    hi = info.max if info.max < 2**63 else 2**63 - 1
    return vals + [d.type(x) for x in rng.integers(max(info.min, -2**63), hi, k)]


@pytest.mark.parametrize("name", ["div", "mod", "floordiv", "shl", "shr"])
def test_integer_ops_in_python_numbers_are_the_rows_functions(name):
    rng = np.random.default_rng(0)
    ins = isa.BY_NAME["S" + name.upper()]
    with np.errstate(all="ignore"):
        for dtype in INTS:
            op = semantics.int_scalar_op(name, dtype)
            vals = _values(dtype, rng)
            for a, b in itertools.product(vals, vals):
                want = semantics.sbin(ins.fn, dtype, a, b)
                got = op(a, b)
                assert got.dtype == np.dtype(dtype) and got == want, (name, dtype, a, b, got, want)
            arrays = semantics.int_array_op(name, ins.fn, dtype)
            if arrays is None:
                continue
            a = np.array(vals, dtype)
            for b in vals:
                want = semantics.sbin(ins.fn, dtype, a, b)
                got = arrays(a, b)
                assert got.dtype == np.dtype(dtype) and np.array_equal(got, want), (name, dtype, b)


def _run_statement(d, regs):
    code, names = semantics.scalar_expr(d)
    env = dict(names, np=np, R=regs)
    exec(code, env)  # noqa: S102 - the statement under test
    return regs


@pytest.mark.parametrize("family", ["sbin", "scmp", "ssel"])
def test_scalar_statements_compute_the_families_functions(family):
    """Every row of the family, every plain dtype, one value and one value per program: the statement the
    compiled path runs gives the value (and dtype) of the family's function."""
    rng = np.random.default_rng(1)
    rows = [ins for ins in isa.TABLE if ins.family == family]
    with np.errstate(all="ignore"):
        for ins, dtype in itertools.product(rows, PLAIN):
            if not _valid(ins, family, _dt(dtype)):
                continue  # (the validator refuses the row on this dtype)
            vals = _values(dtype, rng, 6)
            for cc in (range(6) if family == "scmp" else [0]):
                vals_ = {"rd": 0, "ra": 1, "rb": 2, "rc": 3, "cc": cc}
                d = Decoded(0, ins, vals_, dtype=_dt(dtype), set=None, wait=None, head=0)
                for a, b in itertools.product(vals[:8], vals[:8]):
                    for c in (np.bool_(True), np.bool_(False), np.array([True, False, True])):
                        regs = [None, a, b, c]
                        try:
                            want = _reference(family, ins, cc, dtype, a, b, c)
                        except TypeError:
                            with pytest.raises(TypeError):
                                _run_statement(d, regs)
                            continue
                        got = _run_statement(d, regs)[0]
                        assert np.asarray(got).dtype == np.asarray(want).dtype, (ins.name, dtype, a, b)
                        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (ins.name, dtype, a, b, got)
                        if family != "ssel":
                            break


def _valid(ins, family, ty) -> bool:
    rule = ins.dtypes
    return not (rule == "float" and not ty.is_float or rule == "int" and not ty.is_int or
                rule == "intbool" and ty.is_float or rule == "num" and ty.is_bool and family != "scmp")


def _dt(npdt):
    from dvmlang import dtypes
    return next(t for t in dtypes.BY_CODE.values() if t.np == np.dtype(npdt))


def _reference(family, ins, cc, dtype, a, b, c):
    if family == "sbin":
        return semantics.sbin(ins.fn, dtype, a, b)
    if family == "scmp":
        return isa.COMPARE[isa.CC_NAMES[cc]](a, b)
    return semantics.ssel(c, a, b)


@dvmlang.kernel
def _count(out_ptr, n):
    i = 0
    k = 0
    while i < n:
        k = k + i * 3
        k = k ^ (i >> 1)
        i = i + 1
    dl.store(out_ptr + dl.program_id(0), k)


@pytest.mark.parametrize("budget", [7, 40, 41, 43, 400])
def test_a_budget_ending_inside_a_block_stops_where_the_step_by_step_path_stops(budget):
    messages = []
    for compiled in ("always", False):
        with pytest.raises(dvmlang.WatchdogTimeout) as e:
            _count[(3,)](np.zeros(3, np.int32), 1000, device=Device(watchdog=budget, compiled=compiled))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_compiled_blocks_are_made_once_per_template_and_shared_by_instances():
    dev = Device(replay=False)  # (a replaying device records its first untimed launch step by step: npu/replay.py)
    for n in (5, 9, 17):  # three instances of one build; the second launch of each runs compiled blocks
        for _ in range(2):
            out = np.zeros(2, np.int32)
            _count[(2,)](out, n, device=dev)
            want = 0
            for i in range(n):
                want = (want + i * 3) ^ (i >> 1)
            assert out.tolist() == [want, want]
    bc = _count.encode((2,), np.zeros(2, np.int32), 5)
    m = dev.machine(bc)
    made = [t for t in m._compiled.tables[1] + m._compiled.tables[2] if t is not None and not isinstance(t, int)]
    assert made  # (the relaunches ran compiled blocks: with one clock per program, or untimed)
