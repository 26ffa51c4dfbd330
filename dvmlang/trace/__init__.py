"""Traces of kernel launches: recording (``record``), the numbers behind the views (``stats``), rich
terminal views (``views``: summary, source, timeline, disasm, table, compare) and the Chrome/Perfetto
export (``chrome``). ``dvmlang.trace()`` opens a recording session; see docs/trace.md.

``render``, ``compare``, ``save_chrome`` and ``chrome_trace`` are importable from here; they load on
first use so ``import dvmlang`` does not pay for the views.
"""

_LAZY = {"render": "views", "compare": "views", "save_chrome": "chrome", "chrome_trace": "chrome",
         "analyse": "stats"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dvmlang.trace' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
