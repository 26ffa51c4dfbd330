"""The L2 model across launches (npu/l2.py) against a plain LRU model written from its documented rules: random
sequences of launches over arrays, views of them and aliases, with flushes, freed arrays and evictions, give the
same HBM, hit and write-back bytes launch by launch."""

import weakref
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dvmlang
from dvmlang.npu.l2 import L2Cache
from dvmlang.npu.timing import Rates


class _Oracle:
    """An LRU of lines keyed by (root buffer, byte offset, bytes), least recently used first."""

    def __init__(self, capacity):
        self.capacity, self.lines = capacity, OrderedDict()  # key -> [bytes, dirty]

    @staticmethod
    def key(a):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        return (id(root), a.__array_interface__["data"][0] - root.__array_interface__["data"][0], a.nbytes)

    def forget(self, dead_roots):
        for k in [k for k in self.lines if k[0] in dead_roots]:
            del self.lines[k]

    def settle(self, arrays, alias, reads, writes, sizes, limit):
        resident = {}
        for q, a in arrays.items():
            line = self.lines.get(self.key(a))
            if line is not None:
                resident[alias[q]] = max(resident.get(alias[q], 0), line[0])
        hbm = hits = 0.0
        for g, r in reads.items():
            if sizes[g] <= limit:
                cold = max(0.0, min(sizes[g], r) - resident.get(g, 0))
                hbm, hits = hbm + cold, hits + r - cold
            else:
                hbm += r
        hbm += sum(w for g, w in writes.items() if sizes[g] > limit)
        back, done = 0.0, set()
        for q, a in arrays.items():
            g = alias[q]
            r, w = reads.get(g, 0.0), writes.get(g, 0.0)
            if g in done or not (r or w):
                continue
            done.add(g)
            if a.nbytes > self.capacity:
                back += sum(d for _, d in self.lines.values())
                self.lines.clear()
                continue
            k = self.key(a)
            n, d = min(a.nbytes, r + w), min(a.nbytes, w)
            if k in self.lines:
                old = self.lines.pop(k)
                n = max(n, old[0])
                d = min(n, d + old[1])
            self.lines[k] = [n, d]
        while sum(v[0] for v in self.lines.values()) > self.capacity:  # room made once the launch is done
            back += self.lines.pop(next(iter(self.lines)))[1]
        return hbm + back, hits, back


_OPS = st.lists(st.one_of(
    st.tuples(st.just("launch"), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 3)),
                                          min_size=1, max_size=4), st.booleans()),
    st.tuples(st.just("free"), st.integers(0, 3)),
    st.tuples(st.just("flush"))), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_the_l2_model_is_an_lru_of_tensor_lines(ops):
    prof = dvmlang.npu.get_profile(None)
    capacity = 6000
    l2, oracle = L2Cache(capacity), _Oracle(capacity)
    roots = [np.zeros(n, np.uint8) for n in (1000, 2500, 4000, 7000)]

    def views(i):  # a root, a window of it, or the root's first half (a different line of the same buffer)
        r = roots[i % 4]
        return r if i < 4 else r[:len(r) // 2] if i % 2 == 0 else r[8:]

    for op in ops:
        if op[0] == "free":
            gone = roots[op[1]]
            roots[op[1]] = np.zeros(len(gone), np.uint8)  # a new buffer, cold
            oracle.forget({id(gone)})
            del gone  # freed now (nothing else holds it): its weak references' callbacks run at once
            assert l2.used == sum(v[0] for v in oracle.lines.values()) and len(l2.lines) == len(oracle.lines)
        elif op[0] == "flush":
            l2.flush()
            oracle.lines.clear()
        else:
            _, uses, merged = op
            arrays = {q: views(i) for q, (i, _, _) in enumerate(uses)}
            # alias groups: each array alone, or (merged) arrays of one buffer in one group
            alias = {q: (min(p for p in arrays if oracle.key(arrays[p])[0] == oracle.key(a)[0]) if merged else q)
                     for q, a in arrays.items()}
            rates = Rates(prof, arrays, alias, 1)
            for q, (i, r, w) in enumerate(uses):
                g, n = alias[q], arrays[q].nbytes
                if r:
                    rates.group_reads[g] = rates.group_reads.get(g, 0.0) + float(r * n // 2)
                if w:
                    rates.group_writes[g] = rates.group_writes.get(g, 0.0) + float(w * n // 2)
            want = oracle.settle(arrays, alias, dict(rates.group_reads), dict(rates.group_writes), rates.group_bytes,
                                 prof.l2_bytes)
            assert l2.settle(arrays, alias, rates) == want
            assert l2.used == sum(v[0] for v in oracle.lines.values()) and len(l2.lines) == len(oracle.lines)
            arrays = rates = None  # only L2's weak references to the views remain


def test_without_l2_across_launches_every_launch_starts_cold_and_writes_cross_hbm():
    prof = dvmlang.npu.get_profile(None).with_(l2_across_launches=False)
    l2 = L2Cache(1 << 20)
    small, big = np.zeros(1000, np.uint8), np.zeros(prof.l2_bytes + 8, np.uint8)
    arrays, alias = {0: small, 1: big, 2: small}, {0: 0, 1: 1, 2: 2}
    for _ in range(2):  # the second launch finds nothing either
        rates = Rates(prof, arrays, alias, 1)
        rates.group_reads.update({0: 3000.0, 1: 50.0})  # small read three times: once from HBM, twice hits
        rates.group_writes.update({2: 700.0})
        assert l2.settle(arrays, alias, rates) == (1000.0 + 50.0 + 700.0, 2000.0, 0.0)
        assert rates.resident == {} and not l2.lines and l2.used == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.permutations(range(4)), st.integers(1, 4), st.lists(st.integers(0, 3), min_size=8,
                                                                                  max_size=8)),
                min_size=1, max_size=12))
def test_relaunches_on_tensors_l2_holds_whole_take_the_short_way_to_the_same_result(launches):
    """Launches over the same arrays (a relaunch, L2Cache._steady once their lines are whole) give the LRU
    model's results, then evictions and flushes in between send them the long way again."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(9000), _Oracle(9000)
    roots = [np.zeros(n, np.uint8) for n in (1000, 2000, 3000, 4000)]
    for order, k, rw in launches:
        arrays = {q: roots[i] for q, i in enumerate(order[:k])}
        alias = {q: q for q in arrays}
        rates = _rates(prof, arrays, alias, rw)
        want = oracle.settle(arrays, alias, dict(rates.group_reads), dict(rates.group_writes), rates.group_bytes,
                             prof.l2_bytes)
        assert l2.settle(arrays, alias, rates) == want
        assert l2.used == sum(v[0] for v in oracle.lines.values())
        assert {k: tuple(v) for k, v in oracle.lines.items()} == {
            line.key: (line.bytes, line.dirty) for line in sorted(l2.lines.values(), key=lambda x: x.stamp)}
        assert list(oracle.lines) == [line.key for line in sorted(l2.lines.values(), key=lambda x: x.stamp)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.permutations(range(4)), st.integers(1, 4), st.lists(st.integers(0, 3), min_size=8,
                                                                                  max_size=8)),
                min_size=1, max_size=12))
def test_relaunches_on_parts_of_tensors_l2_holds_take_the_short_way_to_the_same_result(launches):
    """Launches that move a part of each tensor (a kernel reading one head of a projection's output): once L2 holds
    at least what a launch moves of each (a partial ``_Set``), its relaunches take ``L2Cache._steady`` and give the
    LRU model's results; a launch that moves more than L2 holds goes the long way and grows the lines."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(9000), _Oracle(9000)
    roots = [np.zeros(n, np.uint8) for n in (1000, 2000, 3000, 4000)]
    short = 0
    steady = l2._steady

    def counted(*a):
        nonlocal short
        got = steady(*a)
        short += got is not None
        return got
    l2._steady = counted
    for order, k, rw in launches * 2:
        arrays = {q: roots[i] for q, i in enumerate(order[:k])}
        alias = {q: q for q in arrays}
        rates = _rates(prof, arrays, alias, rw, part=8)
        want = oracle.settle(arrays, alias, dict(rates.group_reads), dict(rates.group_writes), rates.group_bytes,
                             prof.l2_bytes)
        assert l2.settle(arrays, alias, rates) == want
        assert {k: tuple(v) for k, v in oracle.lines.items()} == {
            line.key: (line.bytes, line.dirty) for line in sorted(l2.lines.values(), key=lambda x: x.stamp)}
        assert list(oracle.lines) == [line.key for line in sorted(l2.lines.values(), key=lambda x: x.stamp)]
    if len(launches) == 1 and all(launches[0][2][:2 * launches[0][1]]):
        assert short, "a relaunch on the same parts took the long way"


def _rates(prof, arrays, alias, rw, part=1):
    """The rates of a launch on ``arrays`` (each its own group) that reads ``rw[2q]`` times ``1/part`` of array q's
    bytes and writes ``rw[2q + 1]`` times half of that."""
    rates = Rates(prof, arrays, alias, 1)
    for q, a in arrays.items():
        r, w = rw[2 * q], rw[2 * q + 1]
        if r:
            rates.group_reads[q] = float(r * a.nbytes // part)
        if w:
            rates.group_writes[q] = float(w * a.nbytes // part // 2)
    return rates


_PATTERNS = [(0, 1, 2, 3), (4, 5, 6, 7), (0, 5, 2, 7), (4, 1, 6, 3), (3, 2, 1, 0)]  # < 4: a root, >= 4: a view


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("launch"), st.integers(0, len(_PATTERNS) - 1), st.lists(st.integers(0, 3), min_size=8,
                                                                                 max_size=8)),
    st.tuples(st.just("free"), st.integers(0, 3)),
    st.tuples(st.just("view"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("flush"))), min_size=1, max_size=30))
def test_relaunches_with_one_alias_dict_find_their_arrays_again_only_while_they_live(ops):
    """A kernel's relaunches pass one alias dict: L2Cache remembers the arrays of a launch that found them whole
    (``_Set``) and finds them again by their ids. A view freed and another made (often at the same address,
    so the same id) or a root freed must not be taken for the array before; flushes and evictions between
    launches must send them the long way again. Every launch gives the LRU model's results."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(9000), _Oracle(9000)
    roots = [np.zeros(n, np.uint8) for n in (1000, 2000, 3000, 2500)]
    views = [r[8:] for r in roots]
    alias = {q: q for q in range(4)}
    alive = {id(r): weakref.ref(r) for r in roots}  # every root made, until it is freed

    def reap():  # the model forgets the roots freed (a view may have held a replaced root until now)
        gone = {k for k, ref in alive.items() if ref() is None}
        oracle.forget(gone)
        for k in gone:
            del alive[k]

    for op in ops:
        if op[0] == "free":  # the root and its view dropped; a new buffer of the same size, cold
            i = op[1]
            views[i] = None
            reap()  # (before a new root can take a freed one's id)
            roots[i] = np.zeros(len(roots[i]), np.uint8)
            views[i] = roots[i][8:]
            alive[id(roots[i])] = weakref.ref(roots[i])
        elif op[0] == "view":  # a view freed, and a new one of a root made right after (likely the same id)
            i, j = op[1], op[2]
            views[i] = None
            views[i] = roots[j][16 + 8 * i:]
        elif op[0] == "flush":
            l2.flush()
            oracle.lines.clear()
        else:
            _, pattern, rw = op
            arrays = {q: (roots[i] if i < 4 else views[i - 4]) for q, i in enumerate(_PATTERNS[pattern])}
            rates = _rates(prof, arrays, alias, rw)
            want = oracle.settle(arrays, alias, dict(rates.group_reads), dict(rates.group_writes),
                                 rates.group_bytes, prof.l2_bytes)
            assert l2.settle(arrays, alias, rates) == want
            assert list(oracle.lines) == [line.key for line in sorted(l2.lines.values(), key=lambda x: x.stamp)]
            assert {k: tuple(v) for k, v in oracle.lines.items()} == {
                line.key: (line.bytes, line.dirty) for line in l2.lines.values()}
            arrays = rates = None  # (no other name of this test holds an array: a freed one goes at once)
        reap()


def _settle_both(l2, oracle, prof, arrays, alias, rw):
    rates = _rates(prof, arrays, alias, rw)
    want = oracle.settle(arrays, alias, dict(rates.group_reads), dict(rates.group_writes), rates.group_bytes,
                         prof.l2_bytes)
    got = l2.settle(arrays, alias, rates)
    assert got == want
    assert [line.key for line in sorted(l2.lines.values(), key=lambda x: x.stamp)] == list(oracle.lines)
    return got


def test_a_remembered_launch_is_not_taken_for_one_on_a_new_array_at_the_same_address():
    """A view freed and a new one of another buffer made at once usually gets the freed one's id: the launch
    after must not find the old view's whole line through the arrays' ids."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(1 << 16), _Oracle(1 << 16)
    roots = [np.zeros(1000, np.uint8), np.zeros(3000, np.uint8)]
    alias = {0: 0, 1: 1}
    reused = 0
    for trial in range(20):
        view = roots[0][8:]
        for _ in range(2):  # read whole: the second launch remembers the set
            _settle_both(l2, oracle, prof, {0: roots[1], 1: view}, alias, [1, 0, 1, 0])
        old = id(view)
        view = None
        view = roots[1][16 + trial:]  # a new array (another buffer's bytes), most likely at the freed address
        reused += id(view) == old
        hbm, hits, _ = _settle_both(l2, oracle, prof, {0: roots[1], 1: view}, alias, [1, 0, 1, 0])
        assert hbm > 0  # the new view's line is cold
    assert reused  # the case this test is about happened


def test_a_remembered_launch_goes_the_long_way_after_its_lines_left_l2():
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(8000), _Oracle(8000)
    small = [np.zeros(1000, np.uint8), np.zeros(2000, np.uint8)]
    big = np.zeros(7000, np.uint8)
    alias = {0: 0, 1: 1}
    for _ in range(3):
        for _ in range(2):
            _settle_both(l2, oracle, prof, {0: small[0], 1: small[1]}, alias, [1, 1, 1, 0])
        _settle_both(l2, oracle, prof, {0: big}, {0: 0}, [1, 0])  # evicts both small arrays' lines
        hbm, _, back = _settle_both(l2, oracle, prof, {0: small[0], 1: small[1]}, alias, [1, 0, 1, 0])
        assert hbm >= 3000 and back == 0
        l2.flush()
        oracle.lines.clear()


def test_an_array_l2_knows_cannot_be_resized_in_place():
    """What L2Cache._Set relies on: an array keeps its id and its size together while L2 holds a weak
    reference to it (numpy refuses to resize it in place)."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(1 << 16), _Oracle(1 << 16)
    a = np.zeros(1000, np.uint8)
    _settle_both(l2, oracle, prof, {0: a}, {0: 0}, [1, 0])
    with pytest.raises(ValueError):
        a.resize(3000, refcheck=False)
    assert a.nbytes == 1000


def test_a_remembered_launch_keeps_the_short_way_while_other_lines_leave_l2():
    """A launch on other arrays whose lines leave L2 (their arrays freed, as a program's outputs are after every
    call) does not make a remembered launch's set stale: the relaunch finds the same set, with the LRU model's
    results; once one of its own lines leaves L2 it goes the long way, still with the model's results."""
    prof = dvmlang.npu.get_profile(None)
    l2, oracle = L2Cache(1 << 16), _Oracle(1 << 16)
    keep = [np.zeros(1000, np.uint8), np.zeros(2000, np.uint8)]
    alias = {0: 0, 1: 1}
    for _ in range(2):
        _settle_both(l2, oracle, prof, {0: keep[0], 1: keep[1]}, alias, [1, 0, 1, 0])
    (kept,) = l2._sets.values()
    for _ in range(3):
        out = np.zeros(500, np.uint8)
        _settle_both(l2, oracle, prof, {0: keep[0], 1: out}, alias, [1, 0, 0, 1])
        del out
        oracle.forget({k[0] for k in oracle.lines if k[0] not in {id(a) for a in keep}})
        hbm, hits, back = _settle_both(l2, oracle, prof, {0: keep[0], 1: keep[1]}, alias, [1, 0, 1, 0])
        assert hbm == 0 and hits == 3000 and back == 0
        assert l2._sets.get((id(keep[0]), id(keep[1]))) is kept, "the set was made again"
    l2.flush()
    oracle.lines.clear()
    hbm, _, _ = _settle_both(l2, oracle, prof, {0: keep[0], 1: keep[1]}, alias, [1, 0, 1, 0])
    assert hbm == 3000
