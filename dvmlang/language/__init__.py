"""The kernel language: ``import dvmlang.language as dl``.

Every function here is usable inside a ``@dvmlang.kernel``; ``cdiv`` and ``next_power_of_2`` also work
on the host. Inside a kernel the compiler passes each call a ``_sem`` argument (the typed IR builder);
called anywhere else, a kernel-only function raises ``DvmError`` saying so.

One module per family: ``core`` (dtypes, program ids, creation, casts, loop iterators), ``shape``,
``elementwise`` (the math functions, generated from the op vocabulary's unary rows), ``reductions``
(reductions, scans, sorting, ``dot``), ``scaled`` (``dot_scaled``), ``memory``, ``debug`` (compile-time
checks, printing, hints), ``random``, ``shmem`` (communication between the NPUs of a system: ``remote_store``,
``signal``, ``wait``); ``math`` is Triton's ``tl.math`` namespace.
"""

from ..frontend.values import block_pointer, constexpr, pointer, tensor
from ..frontend.blockptr import tensor_descriptor
from . import core, debug, elementwise, math, memory, random, reductions, scaled, shape, shmem
from .core import *  # noqa: F403 - the builtins each module lists in its __all__
from .core import (bfloat16, bool_, builtin, cdiv, dtype, float8e4nv, float8e5, float16, float32, float64, int1, int8,
                   int16, int32, int64, next_power_of_2, range, static_range, uint8, uint16, uint32, uint64)
from .debug import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .memory import *  # noqa: F403
from .random import *  # noqa: F403
from .random import N_ROUNDS_DEFAULT
from .reductions import *  # noqa: F403
from .scaled import *  # noqa: F403
from .shape import *  # noqa: F403
from .shmem import *  # noqa: F403
from .core import _item  # noqa: F401 - the function of x.item(), not a dl name
from .shape import view

__all__ = ["constexpr", "tensor", "pointer", "block_pointer", "tensor_descriptor", "dtype", *core.__all__,
           *shape.__all__, *elementwise.__all__, *reductions.__all__, *scaled.__all__, *memory.__all__, *debug.__all__,
           *random.__all__, *shmem.__all__, "math"]

# `x.<method>(...)` on a kernel value: the dl function it calls, with x as the first argument
TENSOR_METHODS = {
    "to": "cast", "reshape": "reshape", "view": "reshape", "broadcast_to": "broadcast_to",
    "expand_dims": "expand_dims", "trans": "trans", "permute": "permute", "sum": "sum", "max": "max",
    "min": "min", "argmax": "argmax", "argmin": "argmin", "cumsum": "cumsum", "cumprod": "cumprod",
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "abs": "abs",
    "sigmoid": "sigmoid", "reduce": "reduce", "associative_scan": "associative_scan", "ravel": "ravel",
    "cast": "cast", "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos", "erf": "erf", "rsqrt": "rsqrt",
    "xor_sum": "xor_sum", "split": "split", "squeeze": "squeeze", "unsqueeze": "unsqueeze", "tanh": "tanh",
    "softmax": "softmax", "cdiv": "cdiv", "logical_and": "logical_and", "logical_or": "logical_or",
    "atomic_add": "atomic_add", "atomic_max": "atomic_max", "atomic_min": "atomic_min", "atomic_xchg": "atomic_xchg",
    "atomic_and": "atomic_and", "atomic_or": "atomic_or", "atomic_xor": "atomic_xor", "atomic_cas": "atomic_cas",
    "advance": "advance", "flip": "flip", "interleave": "interleave", "join": "join", "reduce_or": "reduce_or",
    "sort": "sort", "topk": "topk", "gather": "gather", "histogram": "histogram", "item": "_item",
    "sqrt_rn": "sqrt_rn", "div_rn": "div_rn", "fdiv": "fdiv", "fma": "fma", "umulhi": "umulhi",
}
