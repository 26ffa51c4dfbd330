"""Statements: assignments, ``return``/``break``/``continue``, ``assert``, ``if``, and how values merge
where paths meet (after an ``if``, at a loop's exits, at an inlined kernel's returns).

A mixin of ``CodeGen`` (see ``codegen``): its methods use the generator's state (``names``, ``loops``,
``b``, ``sem``) and its ``visit``/``error``. Loops are in ``loops``.
"""

from __future__ import annotations

import ast

from ..errors import ConstexprError, KernelTypeError, UnsupportedSyntaxError
from ..ir.core import Block, defined_in
from . import carry
from .carry import kind_of
from .context import BlockExit, NeedScope, ReturnExit, is_runtime_value
from .expressions import BINOPS
from .source import is_constexpr_annotation
from .values import Undefined, number, tensor, unwrap


class StatementsMixin:
    """Simple statements, exits and ``if`` of the code generator."""

    def visit_block(self, stmts) -> bool:
        """Visit statements; return True if the block ended in an exit (break/continue/return)."""
        for s in stmts:
            self.stmt = s
            try:
                self.visit(s)
            except BlockExit:
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
            self.assign(target, value, plain=True)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        value = self.visit(node.value)
        annotated = is_constexpr_annotation(node.annotation, self.globals)
        if annotated and is_runtime_value(value):
            raise self.error(ConstexprError, node, f"`{ast.unparse(node.target)}` is annotated dl.constexpr but "
                             "its value is only known at run time")
        self.assign(node.target, value, plain=not annotated)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(UnsupportedSyntaxError, node, "only names can be updated with an augmented "
                             "assignment", "tiles are immutable values: x = dl.where(mask, new, x)")
        op = BINOPS.get(type(node.op))
        if op is None:
            raise self.error(UnsupportedSyntaxError, node, f"operator {type(node.op).__name__} is not supported",
                             "use dl.dot(a, b) for matrix products")
        cur = self.lookup(node.target.id, node.target)
        value = self.sem.binary(op, cur, self.visit(node.value))
        self.assign(node.target, value)

    def assign(self, target, value, plain=False):
        """Bind ``target``. A ``plain`` assignment (``k = 7``, not annotated ``dl.constexpr``) of a bare number binds
        a ``number``: Triton's runtime scalar in arithmetic, its value where a compile-time one is needed."""
        if isinstance(target, ast.Name):
            if plain and value.__class__ in (int, float, bool):
                value = number(value)  # a bare number (a constexpr stays one: dl.constexpr(0.5), a global)
            if is_runtime_value(value):
                self.origins[id(value)] = (value, self.stmt)
            self.names[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            value = unwrap(value)
            if not isinstance(value, (tuple, list)):
                raise self.error(KernelTypeError, target, f"cannot unpack {kind_of(value)} into "
                                 f"{len(target.elts)} names")
            if len(value) != len(target.elts):
                raise self.error(KernelTypeError, target, f"cannot unpack {len(value)} values into "
                                 f"{len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, plain)
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
                raise BlockExit()
            self.b.exit("return", None, [])
            raise BlockExit()
        # inlined callee: a return outside runtime control flow simply ends the inlined body
        if self.ret is None:
            if self.rt_depth > 0:
                raise NeedScope()
            self.return_value = value
            raise BlockExit()
        self.ret.exits.append(ReturnExit(value, self.b.block))
        raise BlockExit()

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
            raise BlockExit()
        values = [self._coerce(v, t, n, node) for v, t, n in zip(current, loop.templates, loop.names)]
        self.b.exit(kind, loop.op, [h for v, t in zip(values, loop.templates) for h in carry.handles(v, t)])
        raise BlockExit()

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        msg = self.visit(node.msg) if node.msg is not None else ""
        if is_runtime_value(cond):
            raise self.error(UnsupportedSyntaxError, node, "`assert` needs a compile-time condition",
                             "use dl.static_assert for compile-time checks; check runtime values with `if`")
        self.static_assert(cond, msg)

    def visit_If(self, node):
        cond = self.visit(node.test)
        cond = unwrap(cond)
        if not is_runtime_value(cond):
            return self.visit_block(node.body if cond else node.orelse) and self._raise_exit()
        cond = self.sem.as_scalar(cond, "an `if` condition")
        cond = self.sem.truth(cond)
        self._runtime_if(node, cond, lambda: self.visit_block(node.body), lambda: self.visit_block(node.orelse))

    def _raise_exit(self):
        raise BlockExit()

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
            raise BlockExit()
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
