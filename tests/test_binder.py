"""The generated binders (args.make_binder) against the generic path they stand in for: for random arguments, a
binder made for one argument class accepts exactly the arguments of that class (runtime.class_key) and gives
exactly their launch keys (Kernel._keys)."""

import math

import ml_dtypes
import numpy as np
from fuzzing import budget
from hypothesis import given
from hypothesis import strategies as st

import dvmlang
import dvmlang.language as dl
from dvmlang.args import _NoLaunchKey, make_binder
from dvmlang.runtime import class_key


@dvmlang.kernel
def _five(a, b, c, d, e, K: dl.constexpr):
    pass


_ARRAYS = st.builds(
    lambda dt, shape, t: (np.zeros(shape, dt).T if t else np.zeros(shape, dt)),
    st.sampled_from([np.float32, np.float16, np.int32, np.int8, np.bool_, ml_dtypes.bfloat16, np.float64]),
    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple), st.booleans())
_SCALARS = st.one_of(
    st.integers(-(1 << 70), 1 << 70), st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**63 - 1,
                                                        2**63, -2**63, -2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, math.nan]), st.booleans(),
    st.none(), st.sampled_from(["x", "y"]), st.sampled_from([np.float32(1.5), np.int32(3), np.int64(3)]),
    st.sampled_from([(1, 2), (1, 2, 3)]))
_VALUES = st.one_of(_ARRAYS, _SCALARS)


def _keys(args, kwargs):
    try:
        return _five._keys((1,), args, kwargs, None)[1:]
    except (TypeError, _NoLaunchKey):
        return None


class _Sub(np.ndarray):
    """An array subclass: the same dtype, shape and strides as a plain array, but not a plain array."""


def _near(v):
    """Values of the same class as ``v`` or of a class next to it: what a binder must tell apart."""
    if isinstance(v, np.ndarray):
        out = [v.copy(), np.zeros(v.shape + (2,), v.dtype), v.astype(np.float32), v.astype(np.int64), v.view(_Sub)]
        if v.ndim >= 1 and v.shape[0] > 1:
            out += [v[::2], v[:1]]  # strided (not contiguous), fewer rows
        if v.ndim == 2 and min(v.shape) > 1:
            out += [v.T, np.ascontiguousarray(v.T)]
        return out
    if isinstance(v, bool) or v is None or isinstance(v, (str, tuple, np.generic)):
        return [v, 0, 1.0, not v if isinstance(v, bool) else v]
    if isinstance(v, int):
        return [v, v + 1, v - 1, -v, float(v), True, np.int32(0)] + [b + d for b in (2**31, -2**31, 2**63, -2**63)
                                                                      for d in (-1, 0, 1)]
    return [v, -v, 0.0, -0.0, math.nan, int(v) if math.isfinite(v) else 0, np.float32(v if abs(v) < 3e38 else 0)]


@budget(300)
@given(st.lists(_VALUES, min_size=5, max_size=5), st.sampled_from([{}, {"K": 4}, {"K": 5}, {"K": "x"}]),
       st.sampled_from([(0,) * 5, (0, 1, 0, 0, 1)]))
def test_a_binder_accepts_its_class_and_gives_its_launch_keys(ref, ref_kw, mask):
    names = {"K"} | ({"b", "e"} if mask[1] else set())
    ref_keys = _keys(tuple(ref), ref_kw)
    if ref_keys is None:
        return
    ref_class = class_key(tuple(ref), ref_keys[0], ref_keys[1], mask, names)
    bind = make_binder(ref_class[0], mask, ref_class[1], names)
    cases = [(tuple(ref), ref_kw), (tuple(ref[:4]), ref_kw), (tuple(ref), {}), (tuple(ref), {"K": 4, "e": 1})]
    cases += [(tuple(ref), {"K": w}) for w in (4, 4.0, True, 5)]
    cases += [(tuple(ref[:i]) + (w,) + tuple(ref[i + 1:]), ref_kw) for i, v in enumerate(ref) for w in _near(v)]
    accepted = 0
    for args, kwargs in cases:
        keys = _keys(args, kwargs)
        same = keys is not None and class_key(args, keys[0], keys[1], mask, names) == ref_class
        got = bind(args, kwargs)
        assert (got is not None) == same, (args, kwargs)
        if same:
            accepted += 1
            assert got == keys and all(type(a) is type(b) for a, b in zip(got[0], keys[0]))
    assert accepted >= 1


@budget(200)
@given(st.lists(_VALUES, min_size=5, max_size=5), st.sampled_from([{"K": 4}, {"K": 4, "e": 1}]),
       st.sampled_from([(0,) * 5, (0, 0, 0, 0, 1)]), st.integers(0, 4))
def test_a_relaunch_check_accepts_exactly_the_previous_keys_and_binds_the_tensors(ref, ref_kw, mask, readonly):
    """args.make_binder(..., tensors): a relaunch's arguments bind when their launch keys are the previous launch's
    (and then as the plan binds them: flat views, owned and distinct or not); an array the kernel stores to
    that is read-only sends the launch to the general path (False)."""
    names = {"K"} | ({"e"} if mask[4] else set())
    ref_keys = _keys(tuple(ref), ref_kw)
    if ref_keys is None:
        return
    ref_class = class_key(tuple(ref), ref_keys[0], ref_keys[1], mask, names)
    tensors = tuple((i, i, i % 2 == 0, v.ndim == 1) for i, v in enumerate(ref)  # (plans bind contiguous arrays)
                    if isinstance(v, np.ndarray) and not mask[i] and v.flags.c_contiguous)
    check = make_binder(ref_class[0], mask, ref_class[1], names, tensors)
    ref_key = ((1,), 0) + ref_keys  # a launch key (Kernel._keys): grid, profile id, then the arguments' keys
    cases = [(tuple(ref), ref_kw)] + [(tuple(ref[:i]) + (w,) + tuple(ref[i + 1:]), ref_kw)
                                      for i, v in enumerate(ref) for w in _near(v)]
    for args, kwargs in cases:
        keys = _keys(args, kwargs)
        got = check(args, kwargs, ref_key)
        if keys != ref_keys or any(type(a) is not type(b) for a, b in zip(keys[0], ref_keys[0])):
            assert got is None, (args, kwargs)
            continue
        flat, own = got
        arrays = [args[i] for i, _, _, _ in tensors]
        assert sorted(flat) == [i for i, _, _, _ in tensors]
        assert all(flat[i].ndim == 1 and (np.shares_memory(flat[i], args[i]) or args[i].size == 0) for i in flat)
        assert own == (all(a.flags.owndata for a in arrays) and len({id(a) for a in arrays}) == len(arrays))
    written = [i for i, _, w, _ in tensors if w]
    if written:
        args = list(ref)
        args[written[readonly % len(written)]] = ro = args[written[readonly % len(written)]].view()  # same strides
        ro.flags.writeable = False
        assert check(tuple(args), ref_kw, ref_key) is False
