"""``dvmlang.ops``: tensor operations for ``@dvmlang.graph`` functions (and ``dvmlang.tensor`` values).

The operations live in three modules of the fuser, gathered here: ``ops_core`` (elementwise math from the op
vocabulary, comparisons, ``where``, ``cast``, ``broadcast_to``, ``reshape``, ``permute``, reductions, ``matmul`` and
the composites), ``ops_index`` (slicing, ``cat``, ``gather``/``index_select``/``embedding``, ``expand`` and the other
views) and ``ops_make`` (``full``/``arange``/``tril`` and masks, ``argmax``/``argmin``, ``cumsum``, losses, integer and
logical ops). ``dvmlang/ops.py`` installs this module as ``dvmlang.ops``, and it installs itself as the
``TensorOperators`` that Python operators on values call.
"""

import functools
import sys

from ..errors import user_frames
from . import ops_core as _core
from . import ops_index as _ops_index
from . import foreign as _foreign
from . import ops_make as _ops_make
from .operators import TensorOperators

globals().update({k: v for k, v in vars(_core).items() if not k.startswith("__")})
__all__ = list(_core.__all__)
for _mod in (_ops_index, _ops_make):
    globals().update({k: getattr(_mod, k) for k in _mod.__all__})
    __all__ += [n for n in _mod.__all__ if n not in __all__]
del _mod



def _torch_io(fn):
    """Torch in, torch out: an op called on torch tensors (and no dvmlang values) runs on zero-copy
    ``dvmlang.tensor`` views of them and returns torch tensors; next to dvmlang values, torch tensors count as
    numpy arrays (fuser/foreign.py)."""
    @functools.wraps(fn)
    def op(*args, **kwargs):
        like = _foreign.first_torch((args, kwargs))
        if like is None:
            return fn(*args, **kwargs)
        where = f"an argument of dvmlang.ops.{fn.__name__}"
        if _has_values((args, kwargs)):
            return fn(*_foreign.numpy_in(args, where), **_foreign.numpy_in(kwargs, where))
        from .lazy.tensor import tensor
        out = fn(*_foreign.numpy_in(args, where, tensor), **_foreign.numpy_in(kwargs, where, tensor))
        return _foreign.torch_out(out, like)
    return op


def _has_values(obj, depth=0) -> bool:
    if isinstance(obj, TensorOperators):
        return True
    if depth < 4 and isinstance(obj, dict):
        obj = list(obj.values())
    return depth < 4 and isinstance(obj, (list, tuple)) and any(_has_values(v, depth + 1) for v in obj)


# A dvmlang error from any op reaches the caller with dvmlang's frames removed (errors.user_frames).
for _name in __all__:
    globals()[_name] = user_frames(_torch_io(globals()[_name]))
del _name
TensorOperators._ops = sys.modules[__name__]
