"""The arguments of a ``@dvmlang.graph`` call as a capture sees them: arrays (also inside nested lists, tuples and
dicts, each one graph input named by its path, ``params['w'][0]``), constants of the capture, and the numpy
arrays the function closes over.

A call's signature is its arguments' structure (container kinds, dict keys, lengths), per array its dtype and
which dims are 1 or static, per constant its value, and the identity of the arrays the function's own free
variables and globals name (rebinding one, ``W = new_array``, captures again; writing into one in place is seen
by the next call, which reads the array itself).
"""

from __future__ import annotations

import numpy as np

from .graph import GraphError


def _constant(v) -> bool:
    """Whether ``v`` is a plain constant (numbers, strings, None, tuples of them) a capture can depend on."""
    if isinstance(v, tuple):
        return all(_constant(x) for x in v)
    return isinstance(v, (bool, int, float, str, type(None)))


def exact(v):
    """A constant as a key that tells apart what ``==`` does not: a float by its bits (-0.0 is not 0.0, and a NaN
    equals a NaN), a numpy scalar by its bytes, inside tuples too."""
    if v.__class__ is float:
        return v.hex()
    if isinstance(v, np.generic):
        return v.tobytes()
    if v.__class__ is tuple:
        return tuple([exact(x) for x in v])
    return v


def _array(a):
    return a.__dvm_array__() if hasattr(a, "__dvm_array__") else a


def leaves(name: str, a, path=()):
    """(path name, path of keys, array) for every array in ``a`` (an array, or nested lists/tuples/dicts)."""
    a = _array(a)
    if isinstance(a, np.ndarray):
        yield name, path, a
    elif isinstance(a, dict):
        for k, v in a.items():
            yield from leaves(f"{name}[{k!r}]", v, path + (k,))
    elif isinstance(a, (list, tuple)) and not _constant(a):
        for i, v in enumerate(a):
            yield from leaves(f"{name}[{i}]", v, path + (i,))


def key_of(name: str, a, static: dict, top: str, ones: bool = True):
    """The signature of one argument (recursively through containers); ``ones``: whether a dim of size 1 is part
    of it (a capture that specialises size-1 dims) or just a size (the generic capture)."""
    a = _array(a)
    if isinstance(a, np.ndarray):
        st = static.get(name)
        if st:
            dims = tuple(s if ((ones and s == 1) or i in st) else -1 for i, s in enumerate(a.shape))
        elif ones:
            dims = tuple(1 if s == 1 else -1 for s in a.shape)
        else:
            dims = (-1,) * a.ndim
        return ("t", a.dtype, dims)
    if isinstance(a, (bool, int, float, str, type(None))) or (isinstance(a, tuple) and _constant(a)):
        return ("s", type(a).__name__, exact(a))  # a constant of the capture, like a constexpr
    if isinstance(a, dict):
        return ("d", tuple((k, key_of(f"{name}[{k!r}]", v, static, top, ones)) for k, v in a.items()))
    if isinstance(a, (list, tuple)):
        return ("l" if isinstance(a, list) else "u",
                tuple(key_of(f"{name}[{i}]", v, static, top, ones) for i, v in enumerate(a)))
    raise GraphError(f"argument `{name}` must be a numpy array, a number, or lists/tuples/dicts of them, got "
                     f"{type(a).__name__}")


def rebuild(name: str, a, make, path=()):
    """``a`` with every array replaced by ``make(path name, path of keys, array)`` (containers rebuilt as they
    were)."""
    a = _array(a)
    if isinstance(a, np.ndarray):
        return make(name, path, a)
    if isinstance(a, dict):
        return {k: rebuild(f"{name}[{k!r}]", v, make, path + (k,)) for k, v in a.items()}
    if isinstance(a, (list, tuple)) and not _constant(a):
        out = [rebuild(f"{name}[{i}]", v, make, path + (i,)) for i, v in enumerate(a)]
        return out if isinstance(a, list) else tuple(out)
    return a


def fetch(args, pos: int, path: tuple):
    """The array at ``path`` inside argument ``pos``."""
    a = args[pos]
    for k in path:
        a = _array(a)[k]
    return _array(a)


def _ids(v, depth=0):
    if isinstance(v, np.ndarray):
        return id(v)
    if depth < 2 and isinstance(v, dict):
        return tuple((k, _ids(x, depth + 1)) for k, x in v.items() if isinstance(x, (np.ndarray, dict, list, tuple)))
    if depth < 2 and isinstance(v, (list, tuple)):
        return tuple(_ids(x, depth + 1) for x in v if isinstance(x, (np.ndarray, dict, list, tuple)))
    return None


def closure_key(fn) -> tuple:
    """The identities of the arrays ``fn``'s free variables and globals name (a rebinding captures again)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ()
    items = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            v = cell.cell_contents
        except ValueError:  # not bound yet
            continue
        k = _ids(v)
        if k:
            items.append((name, k))
    glb = getattr(fn, "__globals__", {})
    for name in code.co_names:
        v = glb.get(name)
        if isinstance(v, (np.ndarray, dict, list, tuple)):
            k = _ids(v)
            if k:
                items.append((name, k))
    return tuple(items)
