"""``triton.language.extra.cuda``: its ``libdevice`` is ``triton.language.extra.libdevice``."""

import sys as _sys

from .. import libdevice

_sys.modules[__name__ + ".libdevice"] = libdevice  # `import triton.language.extra.cuda.libdevice` works too

__all__ = ["libdevice"]
