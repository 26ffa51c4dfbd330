"""``import triton`` bound to ``dvmlang.triton``: a program written for Triton runs without editing its imports.

    import dvmlang.triton
    dvmlang.triton.bind()          # from here on, `import triton` and `import triton.language as tl` are dvmlang's
    import liger_kernel.ops.rms_norm  # a package's kernels, as it ships them

``dvmlang trace --triton SCRIPT.py`` does the same before it runs the script. The binding is an import hook (a
``sys.meta_path`` finder): ``triton`` and every ``triton.X`` that ``dvmlang.triton.X`` provides is that module,
so ``triton.language is dvmlang.triton.language``. A ``triton.X`` that dvmlang does not provide is not found
(``ModuleNotFoundError``, as for a Triton build without that backend), so packages that probe optional pieces
(``triton.experimental.gluon``, ``triton.backends.nvidia``) take their fallbacks. ``unbind()`` removes the hook.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys


class TritonAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The finder: ``triton[.X]`` is ``dvmlang.triton[.X]``."""

    def find_spec(self, name, path=None, target=None):
        if name != "triton" and not name.startswith("triton."):
            return None
        try:
            importlib.import_module("dvmlang." + name)
        except ModuleNotFoundError as e:
            if e.name is not None and e.name.startswith("dvmlang.triton"):
                return None  # dvmlang does not provide it: not found, as without that piece of Triton
            raise
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return importlib.import_module("dvmlang." + spec.name)

    def exec_module(self, module):
        pass  # the dvmlang module is already executed; the same object is bound under both names


def bind() -> TritonAlias:
    """Make ``import triton`` give ``dvmlang.triton`` (idempotent). A ``triton`` imported before this call keeps
    its own modules in ``sys.modules``: bind before anything imports triton."""
    for finder in sys.meta_path:
        if isinstance(finder, TritonAlias):
            return finder
    finder = TritonAlias()
    sys.meta_path.insert(0, finder)
    return finder


def unbind() -> None:
    """Remove the hook and the ``triton`` names it bound."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TritonAlias)]
    for name in [n for n in sys.modules if n == "triton" or n.startswith("triton.")]:
        if getattr(sys.modules[name], "__name__", "").startswith("dvmlang.triton"):
            del sys.modules[name]


__all__ = ["bind", "unbind", "TritonAlias"]
