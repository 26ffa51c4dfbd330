"""``triton.language.math``: ``dvmlang.language.math`` (every unary math function of the op vocabulary, with
Triton's spellings ``max``/``min``, ``fdiv``, ``div_rn``, ``sqrt_rn``, ``umulhi``, ``fma``)."""

from ...language.math import *  # noqa: F403
from ...language.math import __all__  # noqa: F401
