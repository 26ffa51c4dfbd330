"""Python AST -> tile IR.

A whitelisting ``ast.NodeVisitor`` in the spirit of Triton's code generator: every visited node sets
the source location; every failure becomes a ``CompilationError`` at that node; constructs the
language does not have are rejected by name with the rewrite to use. Control flow goes beyond
Triton: ``break``, ``continue`` and early ``return`` are structured exits in the IR.

Loop-carried values are found by a dry run of the loop body into a scratch block: names the body
assigns that exist before the loop are carried, Python numbers adopt the type the body gives them, and
any other change of type or shape is an error.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap

from .. import dtypes as dt
from ..errors import (CompilationError, ConstexprError, DvmError, KernelTypeError, SourceLoc,
                      UnsupportedSyntaxError)
from ..ir.builder import Builder
from ..ir.core import Block, Op, ScalarType, Value, defined_in
from . import carry
from .blockptr import descriptor_load, descriptor_store, load_block, store_block, tensor_descriptor
from .carry import _kind
from .semantic import Semantic
from .values import Undefined, block_pointer, constexpr, pointer, tensor, unwrap

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
           ast.LShift: "shl", ast.RShift: "shr"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert", ast.Not: "not"}

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


class _Exit(Exception):
    """Internal: the rest of a block is unreachable."""


class _NeedScope(Exception):
    """Internal: an inlined kernel returns from inside runtime control flow."""


class LoopContext:
    def __init__(self, op: Op | None, names: list[str], templates: list, kind: str):
        self.op = op
        self.names = names
        self.templates = templates  # per carried name: a value whose type every exit must give
        self.kind = kind
        self.exit_values: list = []  # dry run: (kind, {name: value}) at break/continue


class ReturnContext:
    def __init__(self):
        self.exits: list[tuple[Op, list, Block]] = []  # (exit op, values, block)


def _assigned_names(stmts) -> list[str]:
    """Names a list of statements may (re)bind, in first-assignment order."""
    found: list[str] = []

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store) and node.id not in found:
                found.append(node.id)

        def visit_FunctionDef(self, node):
            pass

        visit_Lambda = visit_FunctionDef

    for s in stmts:
        V().visit(s)
    return found


_STATIC_ATTRS = frozenset({"dtype", "type", "shape", "element_ty", "numel", "ndim"})


class KernelSource:
    """The parsed source of one ``@dvmlang.kernel`` function, shared by every build of it."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise DvmError(f"cannot read the source of `{fn.__name__}` ({e}); dvmlang kernels must be defined "
                           "in a file, not typed at an interactive prompt") from None
        self.file = inspect.getsourcefile(fn) or fn.__code__.co_filename
        self._locs: dict[int, tuple] = {}
        text = "".join(lines)
        first = lines[0]
        self.indent = len(first) - len(first.lstrip())
        self.line_offset = start - 1
        tree = ast.parse(textwrap.dedent(text))
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
        self.annotations = {}
        for a in fdef.args.args:
            self.annotations[a.arg] = a.annotation
        self.constexpr_params = set()
        for a in fdef.args.args:
            if a.annotation is not None and _is_constexpr_annotation(a.annotation, fn.__globals__):
                self.constexpr_params.add(a.arg)
        self.defaults = {}
        if fn.__defaults__:
            for name, value in zip(self.params[-len(fn.__defaults__):], fn.__defaults__):
                self.defaults[name] = value

    def loc(self, node) -> SourceLoc:
        # every build asks for the same spans; the entry holds its node, so the id cannot be reused
        hit = self._locs.get(id(node))
        if hit is not None:
            return hit[1]
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.indent
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        loc = SourceLoc(self.file, line, col, end_line + self.line_offset if end_line else None,
                        end_col + self.indent if end_col is not None else None, self.name)
        self._locs[id(node)] = (node, loc)
        return loc


def _is_constexpr_annotation(node, globs) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "constexpr":
        return True
    if isinstance(node, ast.Name):
        return node.id == "constexpr" or globs.get(node.id) is constexpr
    if isinstance(node, ast.Constant) and node.value == "constexpr":
        return True
    return False


class CodeGen(ast.NodeVisitor):
    """Compiles one function body (the kernel itself, or an inlined callee) into the current block."""

    def __init__(self, src: KernelSource, sem: Semantic, names: dict, call_chain: tuple = (),
                 build=None):
        self.src = src
        self.sem = sem
        self.b: Builder = sem.b
        self.names = names
        self.call_chain = call_chain
        self.build = build  # the BuildContext: dry-run flag, warnings, printers, global reads
        self.loops: list[LoopContext] = []
        self.ret: ReturnContext | None = None
        self.is_top = not call_chain
        self.return_value = None
        self.rt_depth = 0  # how many runtime ifs/loops enclose the code being compiled
        self.stmt = None  # the statement being compiled
        self.origins: dict[int, tuple] = {}  # id(runtime value) -> (value, the statement that assigned it)
        self.globals = src.fn.__globals__
        self.closure = {}
        if src.fn.__closure__:
            for name, cell in zip(src.fn.__code__.co_freevars, src.fn.__closure__):
                try:
                    self.closure[name] = cell.cell_contents
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
        except (_Exit, _NeedScope):
            raise
        except CompilationError as e:
            if e.loc is None:
                note = self._constexpr_note(node, isinstance(e, ConstexprError))
                if note:
                    e = type(e)(e.message + note, None, e.hint, e.call_chain)
                raise e.with_context(self.loc(node), self.call_chain) from None
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
                        and id(n) not in static and _runtime(self.names.get(n.id)) and n.id not in params:
                    params.append(n.id)
            if params:
                return " (" + ", ".join(f"`{p}` is a runtime parameter; declare it `{p}: dl.constexpr` to make it a "
                                        "compile-time value" for p in params) + ")"
        found = []
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.src.constexpr_params and n.id in self.names and \
                    n.id not in [f[0] for f in found]:
                v = unwrap(self.names[n.id])
                if not _runtime(v):
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

    # ---- statements ---------------------------------------------------------------------------------------
    def visit_block(self, stmts) -> bool:
        """Visit statements; return True if the block ended in an exit (break/continue/return)."""
        for i, s in enumerate(stmts):
            self.stmt = s
            try:
                self.visit(s)
            except _Exit:
                return True
        return False

    def visit_Pass(self, node):
        return None

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None  # docstring
        self.visit(node.value)

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        value = self.visit(node.value)
        if _is_constexpr_annotation(node.annotation, self.globals) and _runtime(value):
            raise self.error(ConstexprError, node, f"`{ast.unparse(node.target)}` is annotated dl.constexpr but "
                             "its value is only known at run time")
        self.assign(node.target, value)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(UnsupportedSyntaxError, node, "only names can be updated with an augmented "
                             "assignment", "tiles are immutable values: x = dl.where(mask, new, x)")
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(UnsupportedSyntaxError, node, f"operator {type(node.op).__name__} is not supported",
                             "use dl.dot(a, b) for matrix products")
        cur = self.lookup(node.target.id, node.target)
        value = self.sem.binary(op, cur, self.visit(node.value))
        self.assign(node.target, value)

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            if _runtime(value):
                self.origins[id(value)] = (value, self.stmt)
            self.names[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            value = unwrap(value)
            if not isinstance(value, (tuple, list)):
                raise self.error(KernelTypeError, target, f"cannot unpack {_kind(value)} into "
                                 f"{len(target.elts)} names")
            if len(value) != len(target.elts):
                raise self.error(KernelTypeError, target, f"cannot unpack {len(value)} values into "
                                 f"{len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
            return
        if isinstance(target, ast.Subscript):
            raise self.error(UnsupportedSyntaxError, target, "tiles are immutable: element assignment is not "
                             "supported", "build the new tile with dl.where(mask, new, x)")
        raise self.error(UnsupportedSyntaxError, target, f"cannot assign to {type(target).__name__}")

    def visit_Return(self, node):
        value = self.visit(node.value) if node.value is not None else None
        if self.is_top:
            if value is not None:
                raise self.error(KernelTypeError, node, "a kernel cannot return a value",
                                 "store results through a pointer with dl.store")
            if self.dry_run():
                raise _Exit()
            self.b.exit("return", None, [])
            raise _Exit()
        # inlined callee: a return outside runtime control flow simply ends the inlined body
        if self.ret is None:
            if self.rt_depth > 0:
                raise _NeedScope()
            self.return_value = value
            raise _Exit()
        self.ret.exits.append((None, value, self.b.block))
        raise _Exit()

    def visit_Break(self, node):
        self._loop_exit(node, "break")

    def visit_Continue(self, node):
        self._loop_exit(node, "continue")

    def _loop_exit(self, node, kind):
        if not self.loops:
            raise self.error(UnsupportedSyntaxError, node, f"`{kind}` outside a loop")
        loop = self.loops[-1]
        if loop.kind == "static":
            raise self.error(UnsupportedSyntaxError, node, f"`{kind}` inside dl.static_range is not supported",
                             "use a runtime `range` loop, which supports break and continue")
        current = [self.names.get(n) for n in loop.names]
        if loop.op is None:  # dry run: remember the values for type discovery
            loop.exit_values.append(dict(zip(loop.names, current)))
            raise _Exit()
        values = [self._coerce(v, t, n, node) for v, t, n in zip(current, loop.templates, loop.names)]
        self.b.exit(kind, loop.op, [h for v, t in zip(values, loop.templates) for h in carry.handles(v, t)])
        raise _Exit()

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        msg = self.visit(node.msg) if node.msg is not None else ""
        if _runtime(cond):
            raise self.error(UnsupportedSyntaxError, node, "`assert` needs a compile-time condition",
                             "use dl.static_assert for compile-time checks; check runtime values with `if`")
        self.static_assert(cond, msg)

    def visit_If(self, node):
        cond = self.visit(node.test)
        cond = unwrap(cond)
        if not _runtime(cond):
            return self.visit_block(node.body if cond else node.orelse) and self._raise_exit()
        cond = self.sem.as_scalar(cond, "an `if` condition")
        cond = self.sem.truth(cond)
        self._runtime_if(node, cond, lambda: self.visit_block(node.body), lambda: self.visit_block(node.orelse))

    def _raise_exit(self):
        raise _Exit()

    def _runtime_if(self, node, cond: tensor, then_fn, else_fn):
        """Build an ``if`` op: visit both branches, merge the names they change."""
        before = dict(self.names)
        then_block, else_block = Block(), Block()
        self.rt_depth += 1
        try:
            with self.b.at(then_block):
                then_exit = then_fn()
            then_names = self.names
            self.names = dict(before)
            with self.b.at(else_block):
                else_exit = else_fn()
            else_names = self.names
        finally:
            self.rt_depth -= 1
        if then_exit and else_exit:
            self.names = before
            self.b.op("if", [cond.handle], [], regions=[then_block, else_block])
            raise _Exit()
        merged = dict(before)
        live = [(then_names, then_block)] if not then_exit else []
        if not else_exit:
            live.append((else_names, else_block))
        keys = [k for k in dict.fromkeys(list(then_names) + list(else_names))]
        local = defined_in([then_block, else_block])
        carried, templates = [], []
        for k in keys:
            vals = [names.get(k) for names, _ in live]
            if all(v is vals[0] for v in vals) and not carry.holds_local(vals[0], local):
                if vals[0] is not None:
                    merged[k] = vals[0]
                continue
            if any(v is None for v in vals) or any(isinstance(v, Undefined) for v in vals):
                where = "one branch" if len(live) > 1 else "a branch"
                merged[k] = Undefined(k, f"`{k}` is assigned in only {where} of the `if` at line "
                                         f"{self.loc(node).line}; assign it before the `if` or in every branch")
                continue
            t = self._unify(vals, k, node, local=local)
            if not t.any_carried:
                merged[k] = vals[0]
                continue
            carried.append(k)
            templates.append(t)
        for names, block in live:
            with self.b.at(block):
                vals = [self._coerce(names[k], t, k, node) for k, t in zip(carried, templates)]
                self.b.yield_([h for v, t in zip(vals, templates) for h in carry.handles(v, t)])
        result_types = [ty for t in templates for ty in carry.types(t)]
        op = self.b.op("if", [cond.handle], result_types, regions=[then_block, else_block])
        it = iter(op.results)
        for k, t in zip(carried, templates):
            merged[k] = carry.rebuild(t, it)
            at = next((self.origins[id(n[k])] for n, _ in live if id(n[k]) in self.origins), None)
            if at is not None:  # a later type error names the assignment in the branch
                self.origins[id(merged[k])] = (merged[k], at[1])
        self.names = merged
        return op

    def visit_For(self, node):
        if node.orelse:
            raise self.error(UnsupportedSyntaxError, node, "`for ... else` is not supported",
                             "set a flag before `break` and test it after the loop")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(UnsupportedSyntaxError, it, "kernels can only loop over range(...), dl.range(...) or "
                             "dl.static_range(...)", "iterate over indices: for i in range(n)")
        func = self.visit(it.func)
        args = [self.visit(a) for a in it.args]
        kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
        from .. import language as dl
        if func is dl.static_range:
            return self._static_for(node, dl.static_range(*args, **kwargs).args)
        if func is builtins.range or func is dl.range:
            if func is builtins.range and kwargs:
                raise self.error(KernelTypeError, it, "range() takes no keyword arguments")
            r = dl.range(*args, **kwargs) if func is dl.range else dl.range(*args)
            return self._runtime_for(node, r.args)
        raise self.error(UnsupportedSyntaxError, it, "kernels can only loop over range(...), dl.range(...) or "
                         "dl.static_range(...)")

    def _range_args(self, args):
        a1, a2, step = (unwrap(a) for a in args)
        if a2 is None:
            a1, a2 = 0, a1
        return a1, a2, step

    def _static_for(self, node, args):
        lo, hi, step = self._range_args(args)
        if any(_runtime(v) for v in (lo, hi, step)):
            raise self.error(ConstexprError, node.iter, "dl.static_range bounds must be compile-time integers",
                             "use range(...) for a loop with runtime bounds")
        if step == 0:
            raise self.error(KernelTypeError, node.iter, "range step must not be zero")
        n = len(builtins.range(lo, hi, step))
        if n > 4096:
            raise self.error(KernelTypeError, node.iter, f"dl.static_range unrolls {n} iterations, more than 4096",
                             "use range(...) for long loops")
        self._claim_unroll(node, n)
        self.loops.append(LoopContext(None, [], [], "static"))
        self.build.unrolling.append(n)
        try:
            for i in builtins.range(lo, hi, step):
                self.assign(node.target, i)
                if self.visit_block(node.body):
                    raise self.error(UnsupportedSyntaxError, node, "an exit inside dl.static_range is not supported")
        finally:
            self.loops.pop()
            self.build.unrolling.pop()

    def _claim_unroll(self, node, n):
        """Count ``n`` body copies against the build's unroll budget; a loop that would exceed it, by itself
        inside the static loops around it or with the copies unrolled before, is an error at its line."""
        from .build import UNROLL_BUDGET
        nested = math.prod(self.build.unrolling) * n
        total = self.build.unrolled + (0 if self.dry_run() else n)
        if nested > UNROLL_BUDGET or total > UNROLL_BUDGET:
            what = (f"{nested} body copies inside the static loops around it" if nested > UNROLL_BUDGET
                    else f"{total} body copies with the static loops before it")
            raise self.error(CompilationError, node.iter, f"dl.static_range unrolls {what}, more than the "
                             f"budget of {UNROLL_BUDGET} per kernel",
                             "use range(...) for a runtime loop (at least for the outer loops)")
        self.build.unrolled = total

    def _runtime_for(self, node, args):
        lo, hi, step = self._range_args(args)
        if isinstance(step, int) and step == 0:
            raise self.error(KernelTypeError, node.iter, "range step must not be zero")
        vals = []
        for v, what in ((lo, "start"), (hi, "stop"), (step, "step")):
            if isinstance(v, float) or (isinstance(v, tensor) and not (v.dtype.is_int or v.dtype.is_bool)):
                raise self.error(KernelTypeError, node.iter, f"range {what} must be an integer, got {_kind(v)}")
            if isinstance(v, (pointer, block_pointer)):
                raise self.error(KernelTypeError, node.iter, f"range {what} must be an integer, got a pointer")
            vals.append(self.sem.as_scalar(v, f"range {what}") if _runtime(v) else v)
        idt = dt.int64 if any(isinstance(v, tensor) and v.dtype in (dt.int64, dt.uint64) for v in vals) else dt.int32
        lo_t, hi_t, st_t = (self.sem.cast(v, idt) if isinstance(v, tensor) else self.sem.const(v, idt) for v in vals)
        if not isinstance(node.target, ast.Name):
            raise self.error(UnsupportedSyntaxError, node.target, "the loop variable must be a single name")
        var = node.target.id
        iv_type = ScalarType(idt)

        def bind_iv(block_arg):
            self.names[var] = tensor(block_arg)

        carried, templates = self._discover_carried(node, node.body, bind_iv_type=(var, iv_type))
        init_handles = self._init_handles(carried, templates, node)
        op = self.b.for_op(lo_t.handle, hi_t.handle, st_t.handle, init_handles)
        body = op.regions[0]
        before = dict(self.names)
        self._bind_block(body.args[1:], carried, templates)
        bind_iv(body.args[0])
        self._visit_loop_body(op, node, node.body, body, carried, templates, "for")
        self._after_loop(node, before, op, carried, templates, var)

    def _visit_loop_body(self, op, node, stmts, body, carried, templates, kind):
        ctx = LoopContext(op, carried, templates, kind)
        self.loops.append(ctx)
        self.rt_depth += 1
        try:
            with self.b.at(body):
                exited = self.visit_block(stmts)
                if not exited:
                    vals = [self._coerce(self.names.get(k), t, k, node) for k, t in zip(carried, templates)]
                    self.b.yield_([h for v, t in zip(vals, templates) for h in carry.handles(v, t)])
        finally:
            self.loops.pop()
            self.rt_depth -= 1

    def _after_loop(self, node, before, op, carried, templates, loop_var=None):
        inner = self.names
        self.names = dict(before)
        self._bind_block(op.results, carried, templates)
        line = self.loc(node).line
        for k, v in inner.items():
            if k not in before and k != loop_var:
                self.names[k] = Undefined(k, f"`{k}` is defined only inside the loop at line {line}; "
                                             "initialise it before the loop to use it afterwards")
        if loop_var is not None and loop_var not in before:
            self.names[loop_var] = Undefined(loop_var, f"the loop variable `{loop_var}` of the loop at line {line} "
                                                       "is not available after the loop; keep a copy in another name")

    def visit_While(self, node):
        if node.orelse:
            raise self.error(UnsupportedSyntaxError, node, "`while ... else` is not supported",
                             "set a flag before `break` and test it after the loop")
        # A condition that is a compile-time False skips the loop entirely.
        test_names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        assigned = set(_assigned_names(node.body))
        if not (test_names & assigned):
            probe = self._probe_static(node.test)
            if probe is not None and not probe:
                return None
        carried, templates = self._discover_carried(node, node.body, cond=node.test)
        init_handles = self._init_handles(carried, templates, node)
        op = self.b.while_op(init_handles)
        cond_block, body = op.regions
        before = dict(self.names)
        self._bind_block(cond_block.args, carried, templates)
        with self.b.at(cond_block):
            c = self.visit(node.test)
            c = self.sem.truth(self.sem.as_scalar(c, "a `while` condition") if _runtime(c) else self.sem.const(bool(unwrap(c)), dt.bool_))
            self.b.yield_([c.handle])
        self.names = dict(before)
        self._bind_block(body.args, carried, templates)
        self._visit_loop_body(op, node, node.body, body, carried, templates, "while")
        self._after_loop(node, before, op, carried, templates)

    def _probe_static(self, test):
        """Evaluate a loop condition if it is a compile-time constant (no IR is kept)."""
        scratch = Block()
        saved_names = dict(self.names)
        try:
            with self.b.at(scratch), self.build.dry():
                v = unwrap(self.visit(test))
        finally:
            self.names = saved_names
        return None if _runtime(v) else bool(v)

    def _bind_block(self, values, carried, templates):
        it = iter(values)
        for k, t in zip(carried, templates):
            self.names[k] = carry.rebuild(t, it)

    def _init_handles(self, carried, templates, node):
        vals = [self._coerce(self.names[k], t, k, node) for k, t in zip(carried, templates)]
        return [h for v, t in zip(vals, templates) for h in carry.handles(v, t)]

    def _discover_carried(self, node, stmts, bind_iv_type=None, cond=None):
        """Dry-run the loop body to find which names (and which parts of them) it changes, and their types."""
        assigned = _assigned_names(stmts)
        if bind_iv_type is not None and bind_iv_type[0] in assigned:
            assigned.remove(bind_iv_type[0])
        candidates = [n for n in assigned if n in self.names and not isinstance(self.names[n], Undefined)]
        tmpl: dict = {k: None for k in candidates}
        for _ in range(6):
            placeholders = {k: self.names[k] if tmpl[k] is None else carry.placeholder(tmpl[k]) for k in candidates}
            ends, exits = self._dry_body(stmts, candidates, placeholders, bind_iv_type, cond)
            new = {}
            for k in candidates:
                observed = [e[k] for e in ends + exits if k in e]
                if not observed or all(carry.same(o, placeholders[k]) for o in observed):
                    new[k] = tmpl[k]
                    continue
                if any(o is None or isinstance(o, Undefined) for o in observed):
                    new[k] = tmpl[k]
                    continue
                t = self._unify([self.names[k]] + observed, k, node, loop=True)
                new[k] = t if t.any_carried else None
            stable = all((new[k] is None) == (tmpl[k] is None) and
                         (new[k] is None or new[k].sig() == tmpl[k].sig()) for k in candidates)
            tmpl = new
            if stable:
                break
        carried = [k for k in candidates if tmpl[k] is not None]
        return carried, [tmpl[k] for k in carried]

    def _dry_body(self, stmts, candidates, placeholders, bind_iv_type, cond):
        scratch = Block()
        saved_names = dict(self.names)
        saved_loops = self.loops
        ctx = LoopContext(None, candidates, [], "dry")
        self.rt_depth += 1
        try:
            with self.b.at(scratch), self.build.dry():
                self.names = dict(saved_names)
                self.names.update(placeholders)
                if bind_iv_type is not None:
                    self.names[bind_iv_type[0]] = tensor(Value(bind_iv_type[1]))
                if cond is not None:
                    self.visit(cond)
                self.loops = saved_loops + [ctx]
                exited = self.visit_block(stmts)
                ends = [] if exited else [{k: self.names.get(k) for k in candidates}]
        finally:
            self.names = saved_names
            self.loops = saved_loops
            self.rt_depth -= 1
        return ends, [e for e in ctx.exit_values]

    # ---- merging values from several paths -------------------------------------------------------------
    def _unify(self, vals, name, node, loop=False, local=frozenset()) -> carry.Tmpl:
        try:
            return carry.unify(vals, name, loop, local)
        except KernelTypeError as e:
            raise self._merge_error(e, vals, node, loop) from None

    def _merge_error(self, e, vals, node, loop):
        """The error of values that cannot be merged where paths meet, at the assignment inside ``node`` (the
        `if` or loop) that made one of them differ, with ``node`` as a note; at ``node`` if none is known."""
        construct = self.loc(node)
        inside = []
        for v in vals:
            at = self.origins.get(id(v))
            if at is not None and at[0] is v and at[1] is not None:
                loc = self.loc(at[1])
                if loc.file == construct.file and construct.line < loc.line <= (construct.end_line or loc.line):
                    inside.append((v, at[1]))
        if not inside:
            return self.error(KernelTypeError, node, e.message, e.hint)

        def conflicts(v):
            try:
                carry.unify([vals[0], v], "", loop)
                return False
            except KernelTypeError:
                return True

        stmt = next((st for v, st in inside if conflicts(v)), inside[0][1])
        what = "loop" if loop else "`if`"
        return self.error(KernelTypeError, stmt, e.message, e.hint, notes=[(f"in the {what} here", construct)])

    def _coerce(self, v, t: carry.Tmpl, name, node):
        if isinstance(v, Undefined) or v is None:
            raise self.error(KernelTypeError, node, f"`{name}` is not defined on every path here")
        try:
            return carry.coerce(self.sem, v, t, name)
        except KernelTypeError as e:
            raise self.error(KernelTypeError, node, e.message, e.hint) from None

    # ---- expressions ------------------------------------------------------------------------------------
    def visit_Constant(self, node):
        return node.value

    def visit_Name(self, node):
        return self.lookup(node.id, node)

    def lookup(self, name, node):
        if name in self.names:
            v = self.names[name]
            if isinstance(v, Undefined):
                raise self.error(KernelTypeError, node, v.reason)
            return v
        if name in self.closure:
            return self._global_value(name, self.closure[name], node)
        if name in self.globals:
            return self._global_value(name, self.globals[name], node)
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.error(KernelTypeError, node, f"name `{name}` is not defined")

    def _global_value(self, name, value, node):
        import types

        import numpy as np
        if isinstance(value, constexpr):
            value = value.value
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)) or \
                callable(value):
            return value
        if isinstance(value, (bool, int, float, str, type(None), dt.DType, tuple)):
            if self.build is not None:
                self.build.global_reads[(id(self.globals), name)] = (self.globals, name, value)
            return value
        if isinstance(value, np.ndarray):
            raise self.error(KernelTypeError, node, f"global `{name}` is a numpy array; kernels cannot read arrays "
                             "from globals", "pass the array as a kernel argument")
        raise self.error(KernelTypeError, node, f"global `{name}` is {_kind(value)}, which a kernel cannot use",
                         "kernels read numbers, dtypes and dl.constexpr values from globals")

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        attr = node.attr
        base_u = unwrap(base)
        if _runtime(base_u):
            return self._tensor_attr(base_u, attr, node)
        if isinstance(base_u, dt.DType):
            if attr in ("is_floating", "is_fp"):
                return lambda: base_u.is_float
            if attr == "primitive_bitwidth":
                return base_u.bits
            if attr == "element_ty":
                return base_u
        try:
            return getattr(base_u, attr)
        except AttributeError:
            raise self.error(KernelTypeError, node, f"{_kind(base_u)} has no attribute `{attr}`") from None

    def _tensor_attr(self, t, attr, node):
        from .. import language as dl
        if isinstance(t, tensor_descriptor):
            if attr == "load":
                return _method(lambda offsets: descriptor_load(self.sem, t, offsets))
            if attr == "store":
                return _method(lambda offsets, value: descriptor_store(self.sem, t, offsets, value))
            if attr == "block_shape":
                return t.block_shape
            raise self.error(KernelTypeError, node, f"a tensor descriptor has no attribute `{attr}`")
        if attr == "dtype":
            return t.dtype
        if attr == "shape":
            return tuple(t.shape)
        if attr == "T" and isinstance(t, tensor):
            return self.sem.trans(t)
        if attr == "numel" and isinstance(t, tensor):
            return t.numel
        if attr in dl.TENSOR_METHODS:
            fn = getattr(dl, dl.TENSOR_METHODS[attr])
            return _BoundMethod(fn, t)
        raise self.error(KernelTypeError, node, f"{_kind(t)} has no attribute `{attr}`")

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            raise self.error(UnsupportedSyntaxError, node, "the `@` operator is not supported", "use dl.dot(a, b)")
        lhs = self.visit(node.left)
        rhs = self.visit(node.right)
        return self.sem.binary(_BINOPS[type(node.op)], lhs, rhs)

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        return self.sem.unary(_UNARY[type(node.op)], v)

    def visit_BoolOp(self, node):
        kind = "and" if isinstance(node.op, ast.And) else "or"
        result = self.visit(node.values[0])
        for expr in node.values[1:]:
            r = unwrap(result)
            if not _runtime(r):
                if (kind == "and" and not r) or (kind == "or" and r):
                    return result
                result = self.visit(expr)
                continue
            rhs = self.visit(expr)
            if not _runtime(rhs):
                if (kind == "and" and rhs) or (kind == "or" and not rhs):
                    result = self.sem.truth(r)
                else:
                    result = bool(rhs)
                continue
            result = self.sem.logical(kind, r, rhs)
        return result

    def visit_Compare(self, node):
        left = self.visit(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)):
                right = self.visit(comp)
                if _runtime(left) or _runtime(right):
                    raise self.error(UnsupportedSyntaxError, node, f"`{type(op).__name__}` only works on compile-time "
                                     "values", "compare runtime values with == and !=")
                l, r = unwrap(left), unwrap(right)
                v = {ast.In: lambda: l in r, ast.NotIn: lambda: l not in r, ast.Is: lambda: l is r,
                     ast.IsNot: lambda: l is not r}[type(op)]()
            else:
                right = self.visit(comp)
                v = self.sem.compare(_CMPOPS[type(op)], left, right)
            result = v if result is None else self.sem.binary("and", result, v) if (_runtime(result) or _runtime(v)) \
                else (result and v)
            left = right
        return result

    def visit_IfExp(self, node):
        cond = unwrap(self.visit(node.test))
        if not _runtime(cond):
            return self.visit(node.body if cond else node.orelse)
        cond = self.sem.truth(self.sem.as_scalar(cond, "a conditional expression"))
        key = f"__ifexp_{id(node)}"

        def branch(expr):
            def run():
                self.names[key] = self.visit(expr)
                return False
            return run

        try:
            self._runtime_if(node, cond, branch(node.body), branch(node.orelse))
        except KernelTypeError as e:
            if f"`{key}`" not in e.message:
                raise
            # the merge names the value by its internal key: name the expression instead
            raise self.error(KernelTypeError, node, e.message.replace(f"`{key}`", "the conditional expression"),
                             e.hint) from None
        value = self.names.pop(key, None)  # absent when both sides give None (two stores)
        if isinstance(value, Undefined):
            raise self.error(KernelTypeError, node, "both sides of a conditional expression must give a value")
        return value

    def visit_Tuple(self, node):
        return tuple(self._visit_elts(node.elts))

    def visit_List(self, node):
        return list(self._visit_elts(node.elts))

    def _visit_elts(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = unwrap(self.visit(e.value))
                out.extend(v)
            else:
                out.append(self.visit(e))
        return out

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = unwrap(self.visit(v.value))
                if _runtime(val):
                    raise self.error(UnsupportedSyntaxError, v, "f-strings can only format compile-time values",
                                     "print runtime values with print(prefix, value)")
                spec = self.visit(v.format_spec) if v.format_spec is not None else ""
                if v.conversion == ord("r"):
                    val = repr(val)
                elif v.conversion == ord("s"):
                    val = str(val)
                parts.append(format(val, spec))
        return "".join(parts)

    def visit_FormattedValue(self, node):
        return self.visit_JoinedStr(ast.JoinedStr(values=[node]))

    def visit_Subscript(self, node):
        base = unwrap(self.visit(node.value))
        idx = self.visit(node.slice)
        if isinstance(base, (tensor, pointer)):
            return self._index_tensor(base, idx, node)
        if _runtime(idx):
            raise self.error(KernelTypeError, node, "a compile-time sequence cannot be indexed by a runtime value")
        try:
            return base[unwrap(idx)]
        except Exception as e:  # noqa: BLE001
            raise self.error(KernelTypeError, node, f"cannot index {_kind(base)}: {e}") from None

    def visit_Slice(self, node):
        lo = self.visit(node.lower) if node.lower is not None else None
        hi = self.visit(node.upper) if node.upper is not None else None
        st = self.visit(node.step) if node.step is not None else None
        return slice(unwrap(lo), unwrap(hi), unwrap(st))

    def _index_tensor(self, base, idx, node):
        idx = unwrap(idx)
        if not isinstance(idx, tuple):
            idx = (idx,)
        if isinstance(base, pointer):
            if all(i is None or (isinstance(i, slice) and i == slice(None)) for i in idx):
                return self.sem.ptr_with(base, lambda off: self._index_tensor(off, idx, node))
            raise self.error(UnsupportedSyntaxError, node, "pointer tiles only support [:, None]-style indexing")
        shape = list(base.shape)
        if base.is_scalar and all(i is None for i in idx):
            return self.sem.reshape(base, (1,) * len(idx))
        n_real = sum(1 for i in idx if i is not None)
        if n_real > len(shape):
            raise self.error(KernelTypeError, node, f"too many indices for a tile of shape {base.shape}")
        starts, sizes, out_shape = [], [], []
        d = 0
        drop = []
        for i in idx:
            if i is None:
                out_shape.append(1)
                continue
            if isinstance(i, slice):
                lo, hi, st = i.start, i.stop, i.step
                if any(_runtime(v) for v in (lo, hi, st)) or (st not in (None, 1)):
                    raise self.error(UnsupportedSyntaxError, node, "tile slices need compile-time bounds and step 1",
                                     "use dl.where with a mask for data-dependent selection")
                r = builtins.range(shape[d])[slice(lo, hi)]
                if len(r) == 0:
                    raise self.error(KernelTypeError, node, f"the slice selects nothing from dimension {d} of "
                                     f"size {shape[d]}")
                starts.append(r.start)
                sizes.append(len(r))
                out_shape.append(len(r))
            elif isinstance(i, int):
                if not -shape[d] <= i < shape[d]:
                    raise self.error(KernelTypeError, node, f"index {i} is out of range for dimension {d} of size "
                                     f"{shape[d]}")
                starts.append(i % shape[d])
                sizes.append(1)
                drop.append(d)
            elif i is Ellipsis:
                raise self.error(UnsupportedSyntaxError, node, "`...` is not supported in tile indexing")
            else:
                raise self.error(UnsupportedSyntaxError, node, "tiles can only be indexed by None, compile-time "
                                 "integers and slices", "use a mask with dl.where to select by runtime values")
            d += 1
        while d < len(shape):
            starts.append(0)
            sizes.append(shape[d])
            out_shape.append(shape[d])
            d += 1
        v = base
        if tuple(sizes) != tuple(shape):
            v = self.sem.slice(v, starts, sizes)
        if tuple(out_shape) != v.shape:
            v = self.sem.reshape(v, tuple(out_shape)) if out_shape else self.sem.as_scalar(v)
        return v

    def visit_Starred(self, node):
        raise self.error(UnsupportedSyntaxError, node, "starred expressions are only allowed in calls and tuples")

    # ---- calls ------------------------------------------------------------------------------------------
    def visit_Call(self, node):
        fn = self.visit(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = unwrap(self.visit(a.value))
                if not isinstance(v, (tuple, list)):
                    raise self.error(KernelTypeError, a, "only compile-time tuples can be unpacked with *")
                args.extend(v)
            else:
                args.append(self.visit(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.error(UnsupportedSyntaxError, k, "`**kwargs` is not supported in kernel calls")
            kwargs[k.arg] = self.visit(k.value)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node):
        from .. import language as dl
        from ..runtime import Kernel
        if isinstance(fn, _BoundMethod):
            args = [fn.self] + list(args)
            fn = fn.fn
        if getattr(fn, "__dvm_builtin__", False):
            try:
                return fn(*args, _sem=self.sem, **kwargs)
            except TypeError:
                _check_arguments(fn, args, kwargs)  # arguments that do not fit the signature: say so
                raise
        if isinstance(fn, Kernel):
            return self.inline(fn, args, kwargs, node)
        if fn is builtins.print:
            return self.device_print("", args, False)
        if fn in (builtins.min, builtins.max):
            if len(args) == 1 and isinstance(unwrap(args[0]), (tuple, list)):
                args = list(unwrap(args[0]))
            if any(_runtime(a) for a in args):
                if any(isinstance(unwrap(a), tensor) and unwrap(a).is_tile for a in args):
                    raise self.error(KernelTypeError, node, f"Python {fn.__name__}() works on scalars; for tiles use "
                                     f"dl.{'minimum' if fn is builtins.min else 'maximum'} or dl.{fn.__name__}(x, axis)")
                r = args[0]
                for a in args[1:]:
                    r = self.sem.binary("minimum" if fn is builtins.min else "maximum", r, a)
                return r
        if fn in (builtins.int, builtins.float, builtins.bool) and args and _runtime(args[0]):
            target = {builtins.int: dt.int32, builtins.float: dt.float32, builtins.bool: dt.bool_}[fn]
            v = self.sem.as_scalar(args[0])
            if fn is builtins.bool:
                return self.sem.truth(v)
            return self.sem.cast(v, target)
        if fn is builtins.abs and args and _runtime(args[0]):
            return self.sem.unary("abs", args[0])
        if fn in (builtins.range, dl.range, dl.static_range):
            raise self.error(UnsupportedSyntaxError, node, "range objects can only be used as `for` loop iterators")
        if fn is builtins.len and args and isinstance(unwrap(args[0]), tensor):
            t = unwrap(args[0])
            if not t.shape:
                raise self.error(KernelTypeError, node, "len() of a scalar")
            return t.shape[0]
        if any(_runtime(a) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
            mod = getattr(fn, "__module__", "") or ""
            hint = "use the dl equivalent (dl.exp, dl.sum, ...)" if mod.startswith("numpy") or "math" in mod else \
                "decorate the helper with @dvmlang.kernel so it is inlined"
            raise self.error(UnsupportedSyntaxError, node, f"cannot call the Python function `{name}` with runtime "
                             "values inside a kernel", hint)
        try:
            return fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
        except CompilationError:
            raise
        except Exception as e:  # noqa: BLE001
            name = getattr(fn, "__name__", repr(fn))
            raise self.error(ConstexprError, node, f"evaluating `{name}(...)` at compile time failed: "
                             f"{type(e).__name__}: {e}") from None

    def inline(self, kernel, args, kwargs, node):
        src = kernel.source
        if len(self.call_chain) > 32:
            raise self.error(CompilationError, node, "kernel calls nest more than 32 deep",
                             "a kernel cannot call itself recursively")
        bound = {}
        params = src.params
        if len(args) > len(params):
            raise self.error(KernelTypeError, node, f"`{src.name}` takes {len(params)} arguments but "
                             f"{len(args)} were given")
        for p, a in zip(params, args):
            bound[p] = a
        for k, v in kwargs.items():
            if k not in params:
                raise self.error(KernelTypeError, node, f"`{src.name}` has no parameter `{k}`")
            if k in bound:
                raise self.error(KernelTypeError, node, f"`{src.name}` got two values for `{k}`")
            bound[k] = v
        for p in params:
            if p not in bound:
                if p in src.defaults:
                    bound[p] = src.defaults[p]
                else:
                    raise self.error(KernelTypeError, node, f"`{src.name}` is missing the argument `{p}`")
            if p in src.constexpr_params and _runtime(bound[p]):
                raise self.error(ConstexprError, node, f"parameter `{p}` of `{src.name}` is dl.constexpr, but the "
                                 "argument is only known at run time")
        chain = self.call_chain + ((src.name, self.loc(node)),)
        sub = CodeGen(src, self.sem, bound, chain, self.build)
        try:
            return sub.run_inlined()
        finally:
            self.sem.codegen = self

    def run_inlined(self):
        body = self.src.tree.body
        initial = dict(self.names)
        scratch = Block()
        try:
            with self.b.at(scratch):
                self.visit_block(body)
        except _NeedScope:
            self.names = initial
        else:
            for op in scratch.ops:
                self.b.block.append(op)
            return self.return_value
        # Early returns: collect them into a scope whose results are the returned values.
        self.ret = ReturnContext()
        block = Block()
        with self.b.at(block):
            exited = self.visit_block(body)
            if not exited:
                self.ret.exits.append((None, None, block))
        values = [v for _, v, _ in self.ret.exits]
        node = self.src.tree
        if all(v is None for v in values):
            op = self.b.op("scope", [], [], regions=[block])
            for _, _, blk in self.ret.exits:
                with self.b.at(blk):
                    if blk is block and not exited:
                        self.b.yield_([])
                    else:
                        self.b.exit("return", op, [])
            return None
        if any(v is None for v in values):
            raise self.error(KernelTypeError, node, f"`{self.src.name}` returns a value on some paths and nothing on "
                             "others")
        flat = [_as_tuple(v) for v in values]
        if len({len(f) for f in flat}) != 1:
            raise self.error(KernelTypeError, node, f"`{self.src.name}` returns different numbers of values")
        local = defined_in([block])
        templates = [self._unify([f[i] for f in flat], f"return value {i} of {self.src.name}", node, local=local)
                     for i in range(len(flat[0]))]
        pending = []
        for f, (_, _, blk) in zip(flat, self.ret.exits):
            with self.b.at(blk):
                vals = [self._coerce(v, t, "the return value", node) for v, t in zip(f, templates)]
                pending.append((blk, [h for v, t in zip(vals, templates) for h in carry.handles(v, t)]))
        op = self.b.op("scope", [], [ty for t in templates for ty in carry.types(t)], regions=[block])
        for blk, hs in pending:
            with self.b.at(blk):
                if blk is block and not exited:
                    self.b.yield_(hs)
                else:
                    self.b.exit("return", op, hs)
        it = iter(op.results)
        outs = tuple(carry.rebuild(t, it) for t in templates)
        return outs if isinstance(values[0], tuple) else outs[0]

    # ---- combine functions (reduce / associative_scan) --------------------------------------------------
    def _combine_inputs(self, input, what):
        single = not isinstance(unwrap(input), (tuple, list))
        xs = [self.sem.to_tensor(v) for v in ((input,) if single else unwrap(input))]
        if not xs or any(x.is_scalar for x in xs):
            raise KernelTypeError(f"{what} needs tiles")
        if any(x.shape != xs[0].shape for x in xs):
            raise KernelTypeError(f"{what}: all inputs must have one shape, got {[x.shape for x in xs]}")
        return single, xs

    def _combine(self, fn, a, b, single, what):
        from ..runtime import Kernel
        if not isinstance(fn, Kernel):
            raise KernelTypeError(f"{what}: combine_fn must be a @dvmlang.kernel function, got {fn!r}",
                                  hint="decorate the combine function with @dvmlang.kernel")
        out = self.inline(fn, list(a) + list(b), {}, self.b.loc)
        outs = [out] if single else list(unwrap(out)) if isinstance(unwrap(out), (tuple, list)) else [out]
        if len(outs) != len(a):
            raise KernelTypeError(f"{what}: combine_fn returned {len(outs)} values, expected {len(a)}")
        res = []
        for o, x in zip(outs, a):
            o = self.sem.to_tensor(o)
            if o.shape != x.shape:
                o = self.sem.broadcast_to(o, x.shape)
            res.append(self.sem.cast(o, x.dtype))
        return res

    def _cut(self, x, axis, start, size):
        starts = [0] * len(x.shape)
        sizes = list(x.shape)
        starts[axis] = start
        sizes[axis] = size
        if tuple(sizes) == x.shape:
            return x
        return self.sem.slice(x, starts, sizes)

    def combine_reduce(self, input, axis, fn, keep_dims):
        single, xs = self._combine_inputs(input, "dl.reduce")
        axis = unwrap(axis)
        if axis is None:
            xs = [self.sem.reshape(x, (x.numel,)) for x in xs]
            axis = 0
        rank = len(xs[0].shape)
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise KernelTypeError(f"dl.reduce axis {axis!r} is out of range for shape {xs[0].shape}")
        axis %= rank
        shape = xs[0].shape
        n = shape[axis]
        while n > 1:
            h = n // 2
            evens = [self._cut(x, axis, 0, 2 * h) for x in xs]
            paired = shape[:axis] + (h, 2) + shape[axis + 1:]
            halves = []
            for j in (0, 1):
                part = []
                for x in evens:
                    y = self.sem.reshape(x, paired)
                    y = self._cut(y, axis + 1, j, 1)
                    part.append(self.sem.reshape(y, shape[:axis] + (h,) + shape[axis + 1:]))
                halves.append(part)
            combined = self._combine(fn, halves[0], halves[1], single, "dl.reduce")
            if n % 2:
                combined = [self.sem.cat(c, self._cut(x, axis, n - 1, 1), axis) for c, x in zip(combined, xs)]
            xs = combined
            n = h + n % 2
            shape = xs[0].shape
        out = [self.sem.reshape(x, shape[:axis] + shape[axis + 1:]) if not keep_dims else x for x in xs]
        return out[0] if single else tuple(out)

    def combine_scan(self, input, axis, fn, reverse):
        single, xs = self._combine_inputs(input, "dl.associative_scan")
        rank = len(xs[0].shape)
        axis = unwrap(axis)
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise KernelTypeError(f"dl.associative_scan axis {axis!r} is out of range for shape {xs[0].shape}")
        axis %= rank
        n = xs[0].shape[axis]
        k = 1
        while k < n:
            lo = [self._cut(x, axis, 0, n - k) for x in xs]
            hi = [self._cut(x, axis, k, n - k) for x in xs]
            # the part earlier in scan order is the first argument: a reverse scan runs from the end (Triton)
            first, second = (hi, lo) if reverse else (lo, hi)
            c = self._combine(fn, first, second, single, "dl.associative_scan")
            if reverse:
                xs = [self.sem.cat(cc, self._cut(x, axis, n - k, k), axis) for cc, x in zip(c, xs)]
            else:
                xs = [self.sem.cat(self._cut(x, axis, 0, k), cc, axis) for cc, x in zip(c, xs)]
            k *= 2
        return xs[0] if single else tuple(xs)

    # ---- builtins that need the code generator -------------------------------------------------------
    def dry_run(self) -> bool:
        return self.build is not None and self.build.dry_depth > 0

    def static_assert(self, cond, msg=""):
        cond = unwrap(cond)
        if _runtime(cond):
            raise ConstexprError("dl.static_assert needs a compile-time condition",
                                 hint="check runtime values with `if`")
        if not cond:
            raise ConstexprError(f"static assertion failed{': ' + str(unwrap(msg)) if msg else ''}")

    def static_print(self, values):
        vals = [unwrap(v) for v in values]
        if self.dry_run():
            return None
        text = " ".join(repr(v) if _runtime(v) else str(v) for v in vals)
        if self.build is not None:
            self.build.static_prints.append(text)
        builtins.print(text)
        return None

    def device_print(self, prefix, values, hex):
        """One line per runtime value, each led by the text written before it (so ``print("a", x, "b", y)``
        prints ``a <x>`` then ``b <y>``); text after the last value gets a line of its own."""
        prefix = unwrap(prefix)
        if not isinstance(prefix, str):
            values = (prefix,) + tuple(values)
            prefix = ""
        parts = [prefix] if prefix else []
        printed = False
        for v in values:
            v = unwrap(v)
            if isinstance(v, (pointer, block_pointer, tensor_descriptor)):
                raise KernelTypeError("cannot print a pointer", hint="print the offsets or the loaded values")
            if not isinstance(v, tensor):
                parts.append(v if isinstance(v, str) else str(v))
                continue
            self.b.print(" ".join(parts), [v.handle], hex)
            parts = []
            printed = True
        if parts or not printed:
            self.b.print(" ".join(parts), [], hex)
        return None

    def load(self, ptr, mask, other, boundary_check, padding_option):
        ptr = unwrap(ptr)
        if isinstance(ptr, block_pointer):
            return load_block(self.sem, ptr, boundary_check, padding_option)
        return self.sem.load(ptr, mask, other)

    def store(self, ptr, value, mask, boundary_check):
        ptr = unwrap(ptr)
        if isinstance(ptr, block_pointer):
            return store_block(self.sem, ptr, value, boundary_check)
        return self.sem.store(ptr, value, mask)


_SIGNATURES: dict = {}


def _check_arguments(fn, args, kwargs) -> None:
    """A call of a ``dl`` function whose arguments do not fit its parameters (an unknown keyword, a missing
    or extra argument) is a ``KernelTypeError`` whose hint is the signature. Checked only after a call raised
    ``TypeError``, so well-formed calls cost nothing."""
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        name = getattr(fn, "__name__", "function")
        shown = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "_sem"])
        raise KernelTypeError(f"dl.{name}(): {e}", hint=f"the signature is dl.{name}{shown}") from None


def _method(f):
    """A compiler-provided method of a kernel value, callable with runtime arguments."""
    def m(*args, _sem=None, **kw):
        return f(*args, **kw)
    m.__dvm_builtin__ = True
    return m


class _BoundMethod:
    __slots__ = ("fn", "self")

    def __init__(self, fn, self_):
        self.fn = fn
        self.self = self_


# ---- helpers over frontend values --------------------------------------------------------------------


_RUNTIME_VALUES = (tensor, pointer, block_pointer, tensor_descriptor)


def _runtime(v) -> bool:
    return isinstance(unwrap(v), _RUNTIME_VALUES)


def _as_tuple(v):
    return tuple(v) if isinstance(v, tuple) else (v,)


