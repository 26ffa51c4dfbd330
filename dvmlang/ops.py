"""``dvmlang.ops`` is the fuser's ``dvmlang/fuser/ops.py``: this module installs that module under its own name, so
``import dvmlang.ops``, ``from dvmlang import ops`` and ``from dvmlang.ops import exp`` all reach it."""

import sys

from .fuser import ops as _ops

sys.modules[__name__] = _ops
