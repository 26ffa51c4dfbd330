"""``triton.language.extra.cuda``: its ``libdevice`` is ``triton.language.extra.libdevice``; ``gdc_wait`` and
``gdc_launch_dependents`` (programmatic dependent launch, tutorial 11) are no-ops, for the reason below.

On a GPU, a kernel launched with ``launch_pdl=True`` may start before the kernel ahead of it has finished;
``gdc_wait()`` blocks until that kernel's memory operations are visible, and ``gdc_launch_dependents()`` lets
the next kernel start early. On the simulated NPU launches run one after another in program order: a kernel
starts only when the one before it has ended and all its stores are in memory. So there is never anything to
wait for (``gdc_wait`` is already satisfied) and no early start to allow (``gdc_launch_dependents`` changes
nothing); the simulated time of a launch is the same with or without them.
"""

import sys as _sys

from .. import libdevice
from ....language.core import builtin


@builtin
def gdc_wait(_sem=None):
    """Wait for the previous kernel's memory operations: a no-op, as launches run in order (module docstring)."""
    return None


@builtin
def gdc_launch_dependents(_sem=None):
    """Let the dependent kernel launch early: a no-op, as launches run in order (module docstring)."""
    return None


_sys.modules[__name__ + ".libdevice"] = libdevice  # `import triton.language.extra.cuda.libdevice` works too

__all__ = ["libdevice", "gdc_wait", "gdc_launch_dependents"]
