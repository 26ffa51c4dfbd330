"""Loops: ``for`` over ``range``/``dl.range`` (a runtime loop), ``dl.static_range`` (unrolled), ``while``,
and the discovery of loop-carried values.

Loop-carried values are found by a dry run of the loop body into a scratch block, as Triton does: names the
body assigns that exist before the loop are carried, Python numbers adopt the type the body gives them, and
any other change of type or shape is an error (``carry`` decides, part by part, what is carried).

A mixin of ``CodeGen`` (see ``codegen``); merging and coercion (``_unify``, ``_coerce``) are in ``statements``.
"""

from __future__ import annotations

import ast
import builtins
import math

from .. import dtypes as dt
from .. import language as dl
from ..errors import CompilationError, ConstexprError, KernelTypeError, UnsupportedSyntaxError
from ..ir.core import Block, ScalarType, Value
from . import carry
from .carry import kind_of
from .context import LoopContext, assigned_names, is_runtime_value
from .values import Undefined, block_pointer, pointer, tensor, unwrap

# The most loop bodies dl.static_range may unroll in one build, nested copies and inlined kernels included.
UNROLL_BUDGET = 65536


class LoopsMixin:
    """``for`` and ``while`` loops of the code generator."""

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
        if any(is_runtime_value(v) for v in (lo, hi, step)):
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
                raise self.error(KernelTypeError, node.iter, f"range {what} must be an integer, got {kind_of(v)}")
            if isinstance(v, (pointer, block_pointer)):
                raise self.error(KernelTypeError, node.iter, f"range {what} must be an integer, got a pointer")
            vals.append(self.sem.as_scalar(v, f"range {what}") if is_runtime_value(v) else v)
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
        assigned = set(assigned_names(node.body))
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
            c = self.sem.as_scalar(c, "a `while` condition") if is_runtime_value(c) else \
                self.sem.const(bool(unwrap(c)), dt.bool_)
            c = self.sem.truth(c)
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
        return None if is_runtime_value(v) else bool(v)

    def _bind_block(self, values, carried, templates):
        it = iter(values)
        for k, t in zip(carried, templates):
            self.names[k] = carry.rebuild(t, it)

    def _init_handles(self, carried, templates, node):
        vals = [self._coerce(self.names[k], t, k, node) for k, t in zip(carried, templates)]
        return [h for v, t in zip(vals, templates) for h in carry.handles(v, t)]

    def _discover_carried(self, node, stmts, bind_iv_type=None, cond=None):
        """Dry-run the loop body to find which names (and which parts of them) it changes, and their types."""
        assigned = assigned_names(stmts)
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
        return ends, list(ctx.exit_values)
