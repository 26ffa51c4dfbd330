"""Calls: ``dl`` builtins (called with the ``Semantic`` as ``_sem``), methods of kernel values, Python
builtins on runtime values (``min``, ``max``, ``int``, ``abs``, ``len``, ``print``), compile-time calls of
other Python functions, and inlined calls of other kernels (with early returns from runtime control flow
collected into a scope op). Also the builtins that need the code generator itself.

A mixin of ``CodeGen`` (see ``codegen``). A callee is inlined when it is a ``KernelFunction``: the frontend
knows nothing else of kernel objects.
"""

from __future__ import annotations

import ast
import builtins
import inspect

from .. import dtypes as dt
from .. import language as dl
from ..errors import CompilationError, ConstexprError, KernelTypeError, UnsupportedSyntaxError
from ..ir.core import Block, defined_in
from . import carry
from .blockptr import tensor_descriptor
from .context import NeedScope, ReturnContext, ReturnExit, is_runtime_value
from .expressions import BoundMethod
from .source import KernelFunction
from .values import block_pointer, pointer, tensor, unwrap


class CallsMixin:
    """Calls, kernel inlining and the generator's own builtins."""

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
        if isinstance(fn, BoundMethod):
            args = [fn.self] + list(args)
            fn = fn.fn
        if getattr(fn, "__dvm_builtin__", False):
            try:
                return fn(*args, _sem=self.sem, **kwargs)
            except TypeError:
                _check_arguments(fn, args, kwargs)  # arguments that do not fit the signature: say so
                raise
        if isinstance(fn, KernelFunction):
            return self.inline(fn, args, kwargs, node)
        if fn is builtins.print:
            return self.device_print("", args, False)
        if fn in (builtins.min, builtins.max):
            if len(args) == 1 and isinstance(unwrap(args[0]), (tuple, list)):
                args = list(unwrap(args[0]))
            if any(is_runtime_value(a) for a in args):
                if any(isinstance(unwrap(a), tensor) and unwrap(a).is_tile for a in args):
                    raise self.error(KernelTypeError, node, f"Python {fn.__name__}() works on scalars; for tiles use "
                                     f"dl.{'minimum' if fn is builtins.min else 'maximum'} or dl.{fn.__name__}(x, axis)")
                r = args[0]
                for a in args[1:]:
                    r = self.sem.binary("minimum" if fn is builtins.min else "maximum", r, a)
                return r
        if fn in (builtins.int, builtins.float, builtins.bool) and args and is_runtime_value(args[0]):
            target = {builtins.int: dt.int32, builtins.float: dt.float32, builtins.bool: dt.bool_}[fn]
            v = self.sem.as_scalar(args[0])
            if fn is builtins.bool:
                return self.sem.truth(v)
            return self.sem.cast(v, target)
        if fn is builtins.abs and args and is_runtime_value(args[0]):
            return self.sem.unary("abs", args[0])
        if fn is builtins.isinstance and len(args) == 2 and not kwargs:
            return _kernel_isinstance(unwrap(args[0]), unwrap(args[1]))
        if fn in (builtins.hasattr, builtins.getattr) and 2 <= len(args) <= 3 and not kwargs and \
                is_runtime_value(args[0]) and isinstance(unwrap(args[1]), str):
            try:
                value = self._tensor_attr(unwrap(args[0]), unwrap(args[1]), node)
            except KernelTypeError:
                if fn is builtins.getattr and len(args) == 3:
                    return args[2]
                if fn is builtins.hasattr:
                    return False
                raise
            return True if fn is builtins.hasattr else value
        if fn in (builtins.range, dl.range, dl.static_range):
            raise self.error(UnsupportedSyntaxError, node, "range objects can only be used as `for` loop iterators")
        if fn is builtins.len and args and isinstance(unwrap(args[0]), tensor):
            t = unwrap(args[0])
            if not t.shape:
                raise self.error(KernelTypeError, node, "len() of a scalar")
            return t.shape[0]
        if any(is_runtime_value(a) for a in list(args) + list(kwargs.values())):
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
        self.build.callees[id(src)] = src
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
            # as Triton: an inlined call's constexpr-ness follows the argument, not the annotation, so a runtime
            # value given to a dl.constexpr parameter is bound as the runtime value it is (a use that needs a
            # compile-time value says so where it happens)
        chain = self.call_chain + ((src.name, self.loc(node)),)
        sub = type(self)(src, self.sem, bound, self.build, chain)
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
        except NeedScope:
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
                self.ret.exits.append(ReturnExit(None, block))
        values = [e.value for e in self.ret.exits]
        node = self.src.tree
        if all(v is None for v in values):
            op = self.b.op("scope", [], [], regions=[block])
            for e in self.ret.exits:
                with self.b.at(e.block):
                    if e.block is block and not exited:
                        self.b.yield_([])
                    else:
                        self.b.exit("return", op, [])
            return None
        if any(v is None for v in values):
            raise self.error(KernelTypeError, node, f"`{self.src.name}` returns a value on some paths and nothing on "
                             "others")
        flat = [as_tuple(v) for v in values]
        if len({len(f) for f in flat}) != 1:
            raise self.error(KernelTypeError, node, f"`{self.src.name}` returns different numbers of values")
        local = defined_in([block])
        templates = [self._unify([f[i] for f in flat], f"return value {i} of {self.src.name}", node, local=local)
                     for i in range(len(flat[0]))]
        pending = []
        for f, e in zip(flat, self.ret.exits):
            with self.b.at(e.block):
                vals = [self._coerce(v, t, "the return value", node) for v, t in zip(f, templates)]
                pending.append((e.block, [h for v, t in zip(vals, templates) for h in carry.handles(v, t)]))
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

    # ---- builtins that need the code generator (dl.static_assert, dl.static_print, dl.device_print) ----
    def static_assert(self, cond, msg=""):
        cond = unwrap(cond)
        if is_runtime_value(cond):
            raise ConstexprError("dl.static_assert needs a compile-time condition",
                                 hint="check runtime values with `if`")
        if not cond:
            raise ConstexprError(f"static assertion failed{': ' + str(unwrap(msg)) if msg else ''}")

    def static_print(self, values):
        vals = [unwrap(v) for v in values]
        if self.dry_run():
            return None
        text = " ".join(repr(v) if is_runtime_value(v) else str(v) for v in vals)
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


def as_tuple(v):
    return tuple(v) if isinstance(v, tuple) else (v,)


def _kernel_isinstance(value, classes) -> bool:
    """``isinstance`` of a kernel value, decided at compile time. As in Triton, a pointer is a tensor (of pointer
    type) and so is a block pointer; compile-time values are checked as Python values."""
    classes = tuple(unwrap(c) for c in classes) if isinstance(classes, (tuple, list)) else (classes,)
    if tensor in classes and isinstance(value, (pointer, block_pointer)):
        return True
    return isinstance(value, classes)
