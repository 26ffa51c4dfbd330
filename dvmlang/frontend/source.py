"""What the frontend compiles: a kernel function's parsed source, and the base class of kernel functions.

``KernelFunction`` is all the frontend knows of a kernel object: the Python function and, parsed once, its
``KernelSource`` (the AST, the parameters, which are ``dl.constexpr``, their defaults, source spans). A call of
a ``KernelFunction`` inside a kernel is inlined through it. ``runtime.Kernel`` derives from it and adds the
caches and launches, so the frontend never imports the runtime.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import NamedTuple

from ..errors import DvmError, SourceLoc, UnsupportedSyntaxError
from .values import constexpr


class KernelSource:
    """The parsed source of one ``@dvmlang.kernel`` function, shared by every build of it."""

    def __init__(self, fn, captured: "CapturedSource | None" = None):
        self.fn = fn
        self.name = fn.__name__
        captured = captured or capture(fn)
        if isinstance(captured, Exception):
            raise DvmError(f"cannot read the source of `{fn.__name__}` ({captured}); dvmlang kernels must be defined "
                           "in a file, not typed at an interactive prompt") from None
        lines, start = captured.lines, captured.first_line
        self.file = captured.file
        self._locs: dict[int, tuple] = {}
        text = "".join(lines)
        first = lines[0]
        self.indent = len(first) - len(first.lstrip())
        self.line_offset = start - 1
        dedented = textwrap.dedent(text)
        self._text_lines = dedented.splitlines()
        tree = ast.parse(dedented)
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise DvmError(f"@dvmlang.kernel must decorate a function, got {type(fdef).__name__}")
        self.tree = fdef
        self.first_line = start
        self.last_line = start + len(lines) - 1
        self.params = [a.arg for a in fdef.args.args]
        if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs or fdef.args.posonlyargs:
            raise UnsupportedSyntaxError("kernels take plain positional parameters only (no *args, **kwargs, "
                                         "keyword-only or positional-only parameters)", self.loc(fdef))
        self.constexpr_params = set()
        for a in fdef.args.args:
            if a.annotation is not None and is_constexpr_annotation(a.annotation, fn.__globals__):
                self.constexpr_params.add(a.arg)
        # per position: is the parameter a dl.constexpr (what the launch fast path keys by value)
        self.constexpr_mask = tuple(p in self.constexpr_params for p in self.params)
        self.defaults = {}
        if fn.__defaults__:
            for name, value in zip(self.params[-len(fn.__defaults__):], fn.__defaults__):
                self.defaults[name] = value

    def loc(self, node) -> SourceLoc:
        # every build asks for the same spans; the entry holds its node, so the id cannot be reused
        hit = self._locs.get(id(node))
        if hit is not None:
            return hit[1]
        lineno = getattr(node, "lineno", 1)
        line = lineno + self.line_offset
        col = self._chars(lineno, getattr(node, "col_offset", 0)) + self.indent
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        if end_col is not None:
            end_col = self._chars(end_line or lineno, end_col)
        loc = SourceLoc(self.file, line, col, end_line + self.line_offset if end_line else None,
                        end_col + self.indent if end_col is not None else None, self.name)
        self._locs[id(node)] = (node, loc)
        return loc


    def _chars(self, lineno: int, col: int) -> int:
        """A column of the dedented source in characters: ``ast`` gives UTF-8 byte offsets, which differ on a
        line with non-ASCII identifiers or strings."""
        if not 1 <= lineno <= len(self._text_lines):
            return col
        text = self._text_lines[lineno - 1]
        if text.isascii():
            return col
        return len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def is_constexpr_annotation(node, globs) -> bool:
    """Whether a parameter or assignment annotation says ``dl.constexpr``."""
    if isinstance(node, ast.Attribute) and node.attr == "constexpr":
        return True
    if isinstance(node, ast.Name):
        return node.id == "constexpr" or globs.get(node.id) is constexpr
    if isinstance(node, ast.Constant) and node.value == "constexpr":
        return True
    return False


class CapturedSource(NamedTuple):
    """A kernel's source text as it was when the kernel was decorated."""

    lines: list[str]
    first_line: int
    file: str


def capture(fn) -> "CapturedSource | Exception":
    """The source of ``fn`` now (or the error reading it, raised when the kernel is first compiled)."""
    try:
        lines, start = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError) as e:
        return e
    return CapturedSource(list(lines), start, file)


class KernelFunction:
    """A Python function written in the kernel language. Its source is read at decoration, as Triton reads it
    (a file edited after the import does not change the kernel), and parsed on first use."""

    def __init__(self, fn):
        self.fn = fn
        self.captured = capture(fn)
        self._source: KernelSource | None = None

    @property
    def source(self) -> KernelSource:
        if self._source is None:
            self._source = KernelSource(self.fn, self.captured)
        return self._source
