"""Python AST -> tile IR: the code generator of one kernel body.

A whitelisting ``ast.NodeVisitor`` in the spirit of Triton's ``code_generator.py``: every visited node sets
the source location; every failure becomes a ``CompilationError`` at that node; constructs the language
does not have are rejected by name with the rewrite to use. Control flow goes beyond Triton: ``break``,
``continue`` and early ``return`` are structured exits in the IR.

The visitor is one class assembled from one mixin per job (``statements``, ``loops``, ``expressions``,
``calls``) because ``ast.NodeVisitor`` dispatches ``visit_<Node>`` on a single object and every job recurses
into the others (a statement visits expressions, a conditional expression builds an ``if``, a call inlines
a body of statements) over one shared state: the names in scope, the enclosing loops, the builder's
position. This module owns that state, the dispatch with its error handling, and the diagnostics.
"""

from __future__ import annotations

import ast

from ..errors import CompilationError, ConstexprError, DvmError, SourceLoc, UnsupportedSyntaxError
from ..ir.builder import Builder
from .calls import CallsMixin
from .context import BlockExit, BuildContext, CellNamespace, LoopContext, NeedScope, ReturnContext, is_runtime_value
from .expressions import ExpressionsMixin
from .loops import LoopsMixin
from .semantic import Semantic
from .source import KernelSource
from .statements import StatementsMixin
from .values import unwrap

# what to write instead of a construct kernels do not have
_REWRITES = {
    "Try": "kernels cannot catch exceptions; check conditions with `if` and dl.static_assert",
    "TryStar": "kernels cannot catch exceptions",
    "With": "kernels have no context managers; call the operations directly",
    "AsyncWith": "kernels have no context managers",
    "ClassDef": "define classes outside the kernel and pass compile-time values in",
    "FunctionDef": "define helper functions at module level with @dvmlang.kernel and call them",
    "AsyncFunctionDef": "define helpers at module level with @dvmlang.kernel",
    "Lambda": "define the function at module level with @dvmlang.kernel and pass it by name",
    "Global": "read globals as compile-time constants; pass runtime values as arguments",
    "Nonlocal": "pass values as arguments instead",
    "Yield": "kernels are not generators; store results with dl.store",
    "YieldFrom": "kernels are not generators; store results with dl.store",
    "Await": "kernels are not coroutines",
    "AsyncFor": "use a plain `for ... in range(...)` loop",
    "Delete": "names cannot be deleted inside a kernel; reassign them instead",
    "Import": "import modules at the top of the file, outside the kernel",
    "ImportFrom": "import modules at the top of the file, outside the kernel",
    "Raise": "use dl.static_assert for compile-time checks",
    "ListComp": "use dl.static_range loops or tiles instead of comprehensions",
    "SetComp": "use tiles instead of comprehensions",
    "DictComp": "use tiles instead of comprehensions",
    "GeneratorExp": "use tiles instead of generator expressions",
    "Set": "use a tuple of compile-time values",
    "Dict": "use separate compile-time parameters",
    "NamedExpr": "assign with a separate statement",
    "Match": "use if/elif/else",
}

# attributes that are compile-time facts of a runtime value (`ptr.dtype`, `x.shape`), not uses of its value
_STATIC_ATTRS = frozenset({"dtype", "type", "shape", "element_ty", "numel", "ndim"})


class CodeGen(StatementsMixin, LoopsMixin, ExpressionsMixin, CallsMixin, ast.NodeVisitor):
    """Compiles one function body (the kernel itself, or an inlined callee) into the current block."""

    def __init__(self, src: KernelSource, sem: Semantic, names: dict, build: BuildContext, call_chain: tuple = ()):
        self.src = src
        self.sem = sem
        self.b: Builder = sem.b
        self.names = names
        self.call_chain = call_chain
        self.build = build  # the build's shared state: dry-run depth, unroll count, printed text, global reads
        self.loops: list[LoopContext] = []
        self.ret: ReturnContext | None = None
        self.is_top = not call_chain
        self.return_value = None
        self.rt_depth = 0  # how many runtime ifs/loops enclose the code being compiled
        self.stmt = None  # the statement being compiled
        self.origins: dict[int, tuple] = {}  # id(runtime value) -> (value, the statement that assigned it)
        self.globals = src.fn.__globals__
        self.closure = {}  # name -> (its value, its cell: where a build checks it is still the value it read)
        if src.fn.__closure__:
            for name, cell in zip(src.fn.__code__.co_freevars, src.fn.__closure__):
                try:
                    self.closure[name] = (cell.cell_contents, CellNamespace(cell))
                except ValueError:
                    pass
        sem.codegen = self

    # ---- errors and locations -----------------------------------------------------------------------
    def loc(self, node) -> SourceLoc:
        if isinstance(node, SourceLoc):
            return node
        return self.src.loc(node)

    def error(self, cls, node, msg, hint=None, notes=()):
        return cls(msg, self.loc(node), hint, self.call_chain, notes)

    def visit(self, node):
        saved = self.b.loc
        if hasattr(node, "lineno"):
            self.b.loc = self.loc(node)
        try:
            return super().visit(node)
        except (BlockExit, NeedScope):
            raise
        except CompilationError as e:
            if e.loc is None:
                note = self._constexpr_note(node, isinstance(e, ConstexprError))
                if note:
                    e = type(e)(e.message + note, None, e.hint, e.call_chain)
                raise e.with_context(self.loc(node), self.call_chain) from e.__cause__  # Triton's tests read it
            raise
        except DvmError as e:
            raise self.error(CompilationError, node, str(e)) from None
        except RecursionError:
            raise self.error(CompilationError, node, "the kernel nests too deeply (recursion limit reached)",
                             "a kernel may not call itself") from None
        except Exception as e:  # noqa: BLE001 - never let a Python traceback escape from the compiler
            raise self.error(CompilationError, node, f"{type(e).__name__}: {e}") from None
        finally:
            self.b.loc = saved

    def _constexpr_note(self, node, needs_constexpr=False) -> str:
        """Name the constexpr parameters an offending expression uses, with their values; where a
        compile-time value was needed, also name the runtime parameters it uses (a forgotten annotation)."""
        if needs_constexpr:
            params = []
            # `ptr.dtype`, `x.shape`: compile-time facts of a runtime value, not a use of its value
            static = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in _STATIC_ATTRS}
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and n.id in self.src.params and n.id not in self.src.constexpr_params \
                        and id(n) not in static and is_runtime_value(self.names.get(n.id)) and n.id not in params:
                    params.append(n.id)
            if params:
                return " (" + ", ".join(f"`{p}` is a runtime parameter; declare it `{p}: dl.constexpr` to make it a "
                                        "compile-time value" for p in params) + ")"
        found = []
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.src.constexpr_params and n.id in self.names and \
                    n.id not in [f[0] for f in found]:
                v = unwrap(self.names[n.id])
                if not is_runtime_value(v):
                    found.append((n.id, v))
        if not found:
            return ""
        def kind(v):
            name = type(v).__name__
            return ("an " if name[0] in "aeiou" else "a ") + name
        return " (" + ", ".join(f"dl.constexpr parameter `{k}` = {v!r}, {kind(v)}" for k, v in found) + ")"

    def generic_visit(self, node):
        name = type(node).__name__
        hint = _REWRITES.get(name)
        raise self.error(UnsupportedSyntaxError, node, f"`{name}` is not supported in a dvmlang kernel", hint)

    def dry_run(self) -> bool:
        """Whether the code being compiled is a dry run (loop-carried discovery, a constant probe): no IR kept."""
        return self.build.dry_depth > 0
