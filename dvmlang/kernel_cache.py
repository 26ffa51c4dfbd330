"""``@dvmlang.kernel`` builds on disk (``cache``): a later process reads a kernel's build instead of compiling it.

The key is what names the build before it is made: the kernel's file, first line and source text, the spec of
every parameter (dtypes, ranks, constexpr values) and the device profile. What the build turned out to depend
on is stored with it and checked when it is read:

* the source of every kernel it inlined (called kernels, combine functions), read again from their files;
* the globals it read as constants (numbers, strings, dtypes), which must still have those values.

A build is stored only when all of that can be checked: constexpr values of plain types (numbers, strings,
None, dtypes, tuples of them), globals read from the kernel's own module, no pointer tables, no host tensor
descriptors. The performance warnings the build raised are raised again when it is read.
"""

from __future__ import annotations

import hashlib
import linecache
import warnings

from . import cache
from . import dtypes as dt
from .errors import PerformanceWarning
from .frontend.specs import ConstexprSpec, ScalarSpec, TensorSpec
from .vm.container import ParamInfo


def _plain(v):
    """``v`` as JSON-able data that says what it is, or raise ValueError."""
    if v is None or isinstance(v, (bool, str)):
        return [type(v).__name__, v]
    if isinstance(v, int):
        return ["int", v]
    if isinstance(v, float):
        return ["float", repr(v)]
    if isinstance(v, dt.DType):
        return ["dtype", v.name]
    if isinstance(v, tuple):
        return ["tuple", [_plain(x) for x in v]]
    raise ValueError("not a plain value")


def _spec(s) -> list:
    if isinstance(s, TensorSpec):
        return ["tensor", s.dtype.name, s.rank]
    if isinstance(s, ScalarSpec):
        return ["scalar", s.dtype.name]
    if isinstance(s, ConstexprSpec):
        return ["constexpr", _plain(s.value)]
    raise ValueError("not cached")


def _text(file: str, first: int, last: int) -> str:
    return "".join(linecache.getlines(file)[first - 1:last])


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def key(kernel, specs, profile):
    """The cache key of a build, or None when it is not cached (a spec that cannot be named by value)."""
    src = kernel.source
    try:
        spec_key = [_spec(s) for s in specs]
    except ValueError:
        return None
    return ("kernel", src.file, src.first_line, _digest(_text(src.file, src.first_line, src.last_line)),
            tuple(repr(s) for s in spec_key), cache.profile_key(profile), bool(getattr(kernel, "split_tiles", False)))


def store(kernel, specs, profile, build) -> None:
    if cache.root() is None or build.heaps:
        return
    k = key(kernel, specs, profile)
    if k is None:
        return
    globs = kernel.fn.__globals__
    try:
        reads = [[name, _plain(value)] for ns, name, value in build.global_reads if ns is globs]
        if len(reads) != len(build.global_reads):
            return  # a global of another module: not checked when read back
        callees = [[c.file, c.first_line, c.last_line, _digest(_text(c.file, c.first_line, c.last_line))]
                   for c in build.callees]
    except ValueError:
        return
    h = cache.template_fields(build.template)
    h.update(params=[[p.kind, p.name, p.dtype.code, p.rank] for p in build.params], written=sorted(build.written),
             reads=reads, callees=callees, warnings=[list(w) for w in build.warnings])
    cache.store("kernel", k, h, build.template.words)


def load(kernel, specs, profile):
    """What ``runtime.Build`` is made of for these specs, from the disk cache: ((global reads, template, params,
    written params), performance warnings), its warnings raised again; or None (absent, damaged, foreign, or
    built from sources or globals that have changed since)."""
    if cache.root() is None:
        return None
    k = key(kernel, specs, profile)
    if k is None:
        return None
    got = cache.load("kernel", k)
    if got is None:
        return None
    head, words = got
    try:
        globs = kernel.fn.__globals__
        reads = []
        for name, value in head["reads"]:
            cur = globs.get(name)
            cur = getattr(cur, "value", cur) if type(cur).__name__ == "constexpr" else cur
            try:
                if _plain(cur) != value:
                    return None
            except ValueError:
                return None
            reads.append((globs, name, cur))
        for file, first, last, digest in head["callees"]:
            if _digest(_text(file, first, last)) != digest:
                return None
        template = cache.template_from(head, words)
        params = [ParamInfo(kind, name, dt.BY_CODE[code], rank) for kind, name, code, rank in head["params"]]
        written = {int(i) for i in head["written"]}
        notes = [(str(m), str(f), int(line)) for m, f, line in head["warnings"]]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    for message, file, line in notes:
        warnings.warn_explicit(message, PerformanceWarning, file, line)
    return (reads, template, params, written), notes
