"""A plan's instance function: one straight-line Python function per plan of a program that does all of a call's
host work for a new shape (design §2: a new shape encodes, nothing else).

``ProgramLaunch.replay`` works a call out generically: it walks the groups, their tensors and their dims, looks
each size up by its symbol, asks the tiling for tiles, and the kernel for its build and instance. Once a plan has
run (its tiles and builds are known), ``generate`` writes that work for that plan as one function, with the
structure unrolled and everything that does not depend on the call's sizes a constant:

* bind: each argument's rank, contiguity and sizes; the symbols' classes, derived sizes and deduced checks;
* the plan's guards (a guarded row that outgrew its block takes the split plan);
* per group: allocate its outputs, the flat view and the strides of each tensor (arithmetic on the sizes, for
  values stored by the program and the views over them), the scalars and the grid, the instance from the
  kernel's instances or its encoder;
* one stacked launch, and the program's outputs.

Anything the function does not cover returns None before it has changed anything a caller can see (a wrong
argument, a size of 0, an input that is not C-contiguous, two inputs over one buffer, tiles changed since it was
written); the generic path then runs the call and reports any error as it always has.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from .build import alias_groups
from .fusion import VIEWS, Plan
from .instance_calls import _SIZED, _consts_key, _flat, _instance, _piece, _take
from .instance_encode import encode_all
from .launch import GroupLaunch, StackItem, _addressing, _input_classes, _materialise

ENABLED = os.environ.get("DVMLANG_INSTANCE_FN", "1") != "0"  # 0: every call takes the generic path
_POOLS = 4  # sets of intermediate buffers a program keeps (calls on as many threads at once reuse them)
INLINE = os.environ.get("DVMLANG_INSTANCE_INLINE", "1") != "0"  # 0: encode through the kernels' instances
SPLIT = object()  # what a plan's function returns when the call's sizes take the split plan


def _number(expr: str, times: int = 1) -> int | None:
    """The value of a stride expression that is a product of numbers (``"8*4"``), times ``times``; else None."""
    parts = expr.split("*")
    return math.prod(map(int, parts)) * times if all(p.isdigit() for p in parts) else None


class _Unsupported(Exception):
    """The plan has something the generated function does not write (the generic path runs it)."""


class _Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.ns: dict = {}
        self.indent = 1

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def const(self, name: str, value) -> str:
        self.ns[name] = value
        return name


def generate(prog, launch, profile, binder, run_type, env_type):
    """The instance function of ``launch`` (a ``ProgramLaunch``) for ``profile``, or None when the plan has
    something it does not cover. It takes (arrays in the graph's input order, device, session, consts) and returns
    a ``Run`` (``run_type``), ``SPLIT`` or None (run the generic path). ``binder``: the program's ``binder.Binder``;
    ``env_type``: ``binder.Env``, for the generic helpers a rare tensor needs."""
    if not ENABLED:
        return None
    try:
        return _Generator(prog, launch, profile, binder, run_type, env_type).function()
    except _Unsupported:
        return None


class _Generator:
    def __init__(self, prog, launch, profile, binder, run_type, env_type):
        self.prog, self.launch, self.profile = prog, launch, profile
        self.binder, self.run_type, self.env_type = binder, run_type, env_type
        self.g = prog.graph
        self.w = _Writer()
        self.bound: dict[int, str] = {}  # root symbol id -> its variable
        self.stored: dict[int, str] = {}  # node id -> the variable of its array
        self.kept: list = []  # (GroupKernel.key, the tiles written in)
        self.inline = INLINE  # the encodes written out (encode_all), not through the kernels' instances
        self.encodes: list = []  # per kernel: (tag, GroupKernel, build, argument expressions, position -> array)

    # ---- sizes -------------------------------------------------------------------------------------------
    def dim(self, d) -> str:
        """A dim ref of ``launch`` (a size >= 0, or ~root id) as an expression."""
        if d >= 0:
            return str(d)
        v = self.bound.get(~d)
        if v is None:
            raise _Unsupported
        return v

    def node_dim(self, d) -> str:
        d = self.g.syms.find(d)
        return str(d) if isinstance(d, int) else self.dim(~d.id)

    def _poly(self, items, roots) -> str:
        terms = []
        for m, c in items:
            factors = ([str(c)] if c != 1 or not m else []) + [self.bound_of(roots[a]) for a in m]
            terms.append("*".join(factors))
        return "(" + (" + ".join(terms) or "0") + ")"

    def bound_of(self, root: int) -> str:
        v = self.bound.get(root)
        if v is None:
            raise _Unsupported
        return v

    # ---- the function ------------------------------------------------------------------------------------
    def function(self):
        prog, w, g = self.prog, self.w, self.g
        p: Plan = self.launch.plan
        if not prog.fuse or any(gl.__class__ is not GroupLaunch for st in self.launch.stages for gl in st):
            raise _Unsupported
        w.ns.update(np=np, empty=np.empty, StackItem=StackItem, _instance=_instance, _take=_take, _flat=_flat,
                    _piece=_piece,
                    _addressing=_addressing,
                    _materialise=_materialise, alias_groups=alias_groups, _input_classes=_input_classes,
                    perf_counter=time.perf_counter, SPLIT=SPLIT, Run=self.run_type)
        w.ns["PROFILE"] = self.profile
        w.ns["PROG"] = prog
        w("if device.profile is not PROFILE:")
        w("    return None")
        self.bind()
        self.guards(p)
        w("t0 = perf_counter()")
        ins = g.inputs
        w("values = {" + ", ".join(f"{n.id}: a{i}" for i, n in enumerate(ins)) + "}")
        if len(ins) > 1:
            w.const("INPUTS", list(ins))
            # (inputs over buffers of their own, the common case, cannot share one unless one array is passed twice)
            ids = ", ".join(f"id(a{i})" for i in range(len(ins)))
            bases = " or ".join(f"a{i}.base is not None" for i in range(len(ins)))
            w(f"if len({{{ids}}}) != {len(ins)} or {bases}:")
            w("    if _input_classes(INPUTS, values):")
            w("        return None")
        for i, n in enumerate(ins):
            self.stored[n.id] = f"a{i}"
        w.const("KEPT", self.kept)
        w("tiles = PROG._tiles")  # (the tiles each group was written with, still the program's)
        w("for key, kept in KEPT:")
        w("    if tiles.get(key) is not kept:")
        w("        return None")
        self.pooled = self.poolable()
        pool_at = len(w.lines)  # (the pool is taken here when the call uses one: known once the groups are written)
        self.slot = {oid: k for k, oid in enumerate(self.pooled)}
        self.views = 0  # the pool's slots for flat views and pieces kept across calls (after the buffers)
        self.needs_env = False
        body_at = len(w.lines)
        self.ws = _Writer()  # the body of ``sized``: the work that depends on the call's sizes alone
        self.ws.ns = w.ns
        self.sized_params: list[str] = []  # its parameters beyond the sizes: the tensors' flat arrays
        self.flat_of: dict[str, str] = {}  # an array's variable -> the variable of its flat view
        self.entry_of: dict[str, str] = {}  # an input's variable -> the variable of its kept flat view (``_flat``)
        self.items: list[list[str]] = []  # per stage, each group's StackItem (made per call)
        self.tags: list[str] = []
        for k, stage in enumerate(self.launch.stages):
            self.items.append([])
            for j, gl in enumerate(stage):
                self.group(f"{k}_{j}", gl)
        self.sized()
        w("stages = [" + ", ".join("[" + ", ".join(items) + "]" for items in self.items) + "]")
        w("PROG.encode_s += perf_counter() - t0")
        w("record = device.run_stack(stages, name=NAME, trace=session)")
        if self.pooled or self.views:
            w.const("POOL", [])
            w.const("FRESH", [np.empty(0, dt) for dt in self.pooled.values()] + [None] * self.views)
            w.lines[pool_at:pool_at] = ["    try:", "        pool = POOL.pop()", "    except IndexError:",
                                        "        pool = FRESH[:]"]
            w(f"if len(POOL) < {_POOLS}:")
            w("    POOL.append(pool)")
        w.const("NAME", prog.name)
        for o in g.outputs:
            if o.id not in self.stored:
                self.needs_env = True
                w.const(f"N{o.id}", o)
                w(f"values[{o.id}] = _materialise(N{o.id}, values, env)")
        w("return Run(values, record, 1)")
        if self.needs_env:
            w.const("ENV", self.env_type)
            w.const("G", g)
            w.const("ROOTS", self.binder.roots)
            env = "{" + ", ".join(f"{r}: {v}" for r, v in self.bound.items()) + "}"
            w.lines.insert(body_at, "    " + f"env = ENV(G, {env}, ROOTS)")
        src = "def instance(arrays, device, session, consts):\n" + "\n".join(w.lines) + "\n"
        code = compile(src, f"<dvmlang instance {prog.name}>", "exec")
        exec(code, w.ns)  # noqa: S102 - our own generated code
        fn = w.ns["instance"]
        fn.source = src
        fn.sized_source = self.sized_source
        fn.kept = self.kept
        fn.roots = list(self.bound)  # the root symbols whose sizes key the instances (``SIZED``), in order
        fn.instances = w.ns.get("SIZED")  # sizes -> the kernels' instances (None: a plan with no kernel)
        fn.kernels = len(self.tags)
        return fn

    def sized(self) -> None:
        """What a call's sizes alone decide, kept per program by the sizes (``SIZED``): each group's grid,
        scalars and instance (its bytecode, encoded at a new shape). A call at sizes seen before takes the
        instances with one lookup; a new one runs ``sized``, the generated function that works them out (the
        kernels' own instance caches first) and returns None when a group's guard fails."""
        w, ws = self.w, self.ws
        if not self.tags:  # a plan with no kernel (only views): nothing the sizes decide
            self.sized_source = ""
            w("bcs = ()")
            return
        if self.inline:
            if not encode_all(self.ws, self.encodes):
                raise _Unsupported  # (the generic path reports it)
        sizes = list(self.bound.values())
        params = sizes + ["consts"] + self.sized_params
        bcs = ", ".join(f"bc{t}" for t in self.tags)
        src = f"def sized({', '.join(params)}):\n" + "\n".join(ws.lines) + f"\n    return ({bcs},)\n"
        code = compile(src, f"<dvmlang sizes {self.prog.name}>", "exec")
        exec(code, w.ns)  # noqa: S102 - our own generated code
        w.ns["SIZED"] = {}
        w.ns["_consts_key"] = _consts_key
        self.sized_source = src
        # (a tuple whatever the count of sizes: the key ``instance_calls.seed`` gives the generic run's instances)
        w("skey = (" + "".join(f"{v}, " for v in sizes) + "None if consts is None else _consts_key(consts),)")
        w("bcs = SIZED.get(skey)")
        w("if bcs is None:")
        w(f"    bcs = sized({', '.join(params)})")
        w("    if bcs is None:")
        w("        return None")
        w(f"    if len(SIZED) >= {_SIZED}:")
        w("        del SIZED[next(iter(SIZED))]")
        w("    SIZED[skey] = bcs")
        w("else:")
        for t in self.tags:
            w(f"    GS{t}.hits += 1")
            w(f"    GS{t}.launches += 1")

    def bind(self) -> None:
        """The ``Binder``'s checks, unrolled: any mismatch returns None (the generic binder reports it)."""
        w, g = self.w, self.g
        binder = self.binder
        roots = binder.roots
        n_in = len(binder.inputs)
        w(f"if len(arrays) != {n_in}:")
        w("    return None")
        if n_in:
            w(", ".join(f"a{i}" for i in range(n_in)) + ("," if n_in == 1 else "") + " = arrays")
        for i, (_, rank, dims) in enumerate(binder.inputs):
            w(f"if a{i}.ndim != {rank} or not a{i}.flags.c_contiguous:")
            w("    return None")
            if rank:
                names = []
                for axis, static, sym in dims:
                    names.append(f"d{i}_{axis}")
                w(", ".join(names) + ("," if rank == 1 else "") + f" = a{i}.shape")
                for axis, static, sym in dims:
                    v = f"d{i}_{axis}"
                    if sym is None:
                        if static == 0:
                            raise _Unsupported
                        w(f"if {v} != {static}:")
                        w("    return None")
                        continue
                    self._set(roots[sym.id], v)
        for s in binder.derived:
            kind = s.expr[0]
            if kind == "poly":
                e = self._poly(s.expr[1], roots)
            else:
                x, y = self._poly(s.expr[1], roots), self._poly(s.expr[2], roots)
                w(f"if {y} == 0:")
                w("    return None")
                e = f"({x} // {y})" if kind == "floordiv" else f"({x} % {y})"
            tmp = f"v{s.id}"
            w(f"{tmp} = {e}")
            w(f"if {tmp} < 0:")
            w("    return None")
            self._set(roots[s.id], tmp)
        for kind, a, b, _ in g.syms.checks:
            va = self._poly(tuple(a.items()), roots)
            vb = self._poly(tuple(b.items()), roots)
            w(f"if {va} {'!=' if kind == 'eq' else '>'} {vb}:")
            w("    return None")
        for root, number, _, _ in binder.numbers:
            if root in self.bound:
                w(f"if {self.bound[root]} != {number}:")
                w("    return None")
        if self.bound:  # a size of 0: nothing to compute in some groups (the generic path skips their launches)
            w("if 0 in (" + ", ".join(self.bound.values()) + ",):")
            w("    return None")

    def _set(self, root: int, v: str) -> None:
        w = self.w
        prev = self.bound.get(root)
        if prev is None:
            name = f"s{root}"
            w(f"{name} = {v}")
            self.bound[root] = name
        else:
            w(f"if {v} != {prev}:")
            w("    return None")

    def guards(self, p: Plan) -> None:
        """The choice ``Program.choose`` makes, for this plan: the fused plan while every guarded row fits the row
        block it was built with (a kept block holds every row no wider), the split plan otherwise."""
        prog, w = self.prog, self.w
        main = prog.plan
        if not main.has_fallback:
            return
        conds, rows = [], []
        for grp in main.groups:
            if grp.mode == "row" and grp.guard is not None:
                kept = prog._tiles.get(prog.kernel(main, grp).key)
                if kept is None or not kept.fits:
                    raise _Unsupported
                rows.append(self.node_dim(grp.space[-1]))
                conds.append(f"{rows[-1]} > {kept.bc}")
        cond = " or ".join(conds) or "False"
        if p is main:
            w(f"if {cond}:")
            w("    return SPLIT")
            # (a guarded row that changed has the split plan built ahead, ``Program._varied``)
            w(f"if PROG._watch is not None and ({', '.join(rows)},) != PROG._watch[0]:")
            w("    PROG._varied()")
        else:
            w(f"if not ({cond}):")
            w("    return None")
            w("PROG.fallbacks += 1")
            w("PROG._ahead.wait()")

    def flat_view(self, root: str, flat: str) -> None:
        """Write ``flat = root.reshape(-1)``, as the same array at every call that passes the same input: the
        device's L2 model knows a buffer by its array (one lookup for an array it has seen; a launch on arrays
        it found whole in L2 before is one lookup more), so a new view at every call of a weight it holds would
        be a new array to place at every launch. A 1-D input is its own flat view; another input's is kept in
        the pool (``_flat``) for as long as the input lives, without holding it."""
        w = self.w
        if root[0] == "a" and len(self.g.inputs[int(root[1:])].shape) == 1:
            w(f"{flat} = {root}")  # (the binding checked it is 1-D and C-contiguous)
            return
        if root[0] != "a":
            w(f"{flat} = {root}.reshape(-1)")  # (an output made by this call: a new array anyway)
            return
        k = len(self.pooled) + self.views
        self.views += 1
        self.entry_of[root] = f"e_{root}"
        w(f"e_{root} = pool[{k}]")
        w(f"if e_{root} is None or e_{root}[0]() is not {root}:")
        w(f"    e_{root} = _flat(pool, {k}, {root})")
        w(f"{flat} = e_{root}[1]")

    def piece(self, f: str, root: str, flat: str, off: str) -> None:
        """Write ``f = flat[off:]``: kept across calls with the input's flat view (``_flat``), or in a slot of the
        pool for a pooled intermediate's (which the pool holds anyway)."""
        w = self.w
        e = self.entry_of.get(root)
        if e is not None:
            w(f"{f} = _piece({e}[2], {flat}, {off})")
        elif root[0] == "o" and int(root[1:]) in self.slot:
            k = len(self.pooled) + self.views
            self.views += 1
            if not off.isdigit():
                w(f"off{f} = {off}")
                off = f"off{f}"
            w(f"c = pool[{k}]")
            w(f"if c is not None and c[0] is {flat} and c[1] == {off}:")
            w(f"    {f} = c[2]")
            w("else:")
            w(f"    {f} = {flat}[{off}:]")
            w(f"    pool[{k}] = ({flat}, {off}, {f})")
        else:
            w(f"{f} = {flat}[{off}:]")

    def poolable(self) -> dict:
        """The values a call stores only for its own later groups (node id -> dtype): no output of the program is
        one or a view of one, and every group reads them as plain memory (``address``). They live in buffers the
        program keeps across calls (a caching allocator's job on a device): a call takes a set of them, so calls
        on several threads never share one, and gives it back when its launch is done."""
        escape = set()
        for o in self.g.outputs:
            n = o
            escape.add(n.id)
            while n.op in VIEWS or n.op == "broadcast_to":
                n = n.inputs[0]
                escape.add(n.id)
        outs = {}
        for stage in self.launch.stages:
            for gl in stage:
                for oid, _, npdt, _ in gl.outs:
                    outs[oid] = np.dtype(npdt)
        before = dict(self.stored)
        self.stored.update({oid: "o" for oid in outs})
        try:
            for stage in self.launch.stages:
                for gl in stage:
                    for x, *_ in gl.tensors:
                        if self.address(x) is None:  # read the generic way, which looks at its base: not pooled
                            n = x
                            escape.add(n.id)
                            while n.op in VIEWS or n.op == "broadcast_to":
                                n = n.inputs[0]
                                escape.add(n.id)
        finally:
            self.stored = before
        return {oid: dt for oid, dt in outs.items() if oid not in escape}

    # ---- a group -----------------------------------------------------------------------------------------
    def address(self, n):
        """(array variable, offset, shape, strides) of a value stored by the program or an input, through its
        views, as expressions; None when it is something else (a broadcast, a reshape of a strided view)."""
        v = self.stored.get(n.id)
        if v is not None:
            shape = [self.node_dim(d) for d in n.shape]
            order = n.attrs.get("order")
            if order is not None:  # (its buffer holds permute(value, order) in C order)
                mem = _c_strides([shape[i] for i in order])
                strides = [""] * len(shape)
                for i, o in enumerate(order):
                    strides[o] = mem[i]
                return v, "0", shape, strides, False
            return v, "0", shape, _c_strides(shape), True
        if n.op not in VIEWS:
            return None
        b = self.address(n.inputs[0])
        if b is None:
            return None
        root, off, shape, strides, contiguous = b
        if n.op == "slice":
            a, step = n.attrs["axis"], n.attrs["step"]
            if step < 1:
                return None
            start = self.node_dim(n.attrs["start"])
            if start != "0":
                off = f"({off} + {start}*{strides[a]})" if off != "0" else f"{start}*{strides[a]}"
            shape = shape[:a] + [self.node_dim(n.shape[a])] + shape[a + 1:]
            strides = strides[:a] + [strides[a] if step == 1 else f"{strides[a]}*{step}"] + strides[a + 1:]
            return root, off, shape, strides, False
        if n.op == "permute":
            perm = n.attrs["perm"]
            shape, strides = [shape[i] for i in perm], [strides[i] for i in perm]
            # (contiguous again when it undoes the order a value is stored in: canonical._store_in_order)
            return root, off, shape, strides, off == "0" and strides == _c_strides(shape)
        out = [self.node_dim(d) for d in n.shape]
        if not contiguous:
            # a reshape of a strided view is a view at any sizes when it only inserts or removes dims of size 1
            # (the other dims, in order, are the same expressions: each keeps its stride) or splits a dim that
            # is a number into numbers (canonical._splits_only): each part's stride is the dim's times the parts
            # after it
            st_out = self._split(shape, strides, out)
            if st_out is None:
                return None  # (otherwise whether it is one depends on the sizes)
            return root, off, out, st_out, False
        return root, off, out, _c_strides(out), True

    @staticmethod
    def _split(shape, strides, out) -> list | None:
        """The stride expressions of ``out``, a reshape of a strided view (``shape``, ``strides``: expressions) that
        only inserts or removes dims of 1, splits dims that are numbers into numbers (``canonical._splits_only``
        decides on symbols) and merges runs of dims that are numbers whose strides, numbers, nest (each the next
        one's times its size), else None (the generic path lets numpy work the strides out)."""
        olds = [(d, st) for d, st in zip(shape, strides) if d != "1"]
        news = [i for i, d in enumerate(out) if d != "1"]
        got = ["0"] * len(out)
        j = 0
        i = 0
        while i < len(olds):
            d, st = olds[i]
            i += 1
            if j < len(news) and out[news[j]] == d:
                got[news[j]] = st
                j += 1
                continue
            if not d.isdigit():
                return None
            if j < len(news) and out[news[j]].isdigit() and int(out[news[j]]) > int(d):
                # a run of dims that are numbers merged into one (the heads of a batch, (B, H) -> B*H): a view when
                # each dim's stride, a number, is the next one's times its size; the merged dim takes the last's
                size, inner = int(d), st
                while size < int(out[news[j]]) and i < len(olds) and olds[i][0].isdigit() and \
                        _number(inner) is not None and _number(inner) == _number(olds[i][1], int(olds[i][0])):
                    size *= int(olds[i][0])
                    inner = olds[i][1]
                    i += 1
                if size != int(out[news[j]]):
                    return None
                got[news[j]] = inner
                j += 1
                continue
            rest = int(d)
            while rest > 1 and j < len(news) and out[news[j]].isdigit() and int(out[news[j]]) > 0 and \
                    rest % int(out[news[j]]) == 0:
                rest //= int(out[news[j]])
                got[news[j]] = st if rest == 1 else f"{st}*{rest}"
                j += 1
            if rest != 1:
                return None
        return got if j == len(news) else None

    def group(self, tag: str, gl: GroupLaunch) -> None:
        prog, w, profile = self.prog, self.w, self.profile
        gk = gl.gk
        if gk.text is not None:
            raise _Unsupported
        kept = prog._tiles.get(gk.key)
        if kept is None:
            raise _Unsupported
        w.const(f"GK{tag}", gk)
        self.kept.append((gk.key, kept))
        for oid, shape, npdt, order in gl.outs:
            if 0 in shape:
                raise _Unsupported  # (an empty output: the generic path skips the launch)
            w.const(f"DT{oid}", np.dtype(npdt))
            dims = ", ".join(self.dim(d) for d in shape) + ("," if len(shape) == 1 else "")
            k = self.slot.get(oid) if self.pooled else None
            # stored in the order its reader views it (canonical._store_in_order): its memory is (mem), viewed in
            # the value's order
            mem = dims if order is None else ", ".join(self.dim(shape[i]) for i in order) + ","
            view = "" if order is None else f".transpose({tuple(int(i) for i in np.argsort(order))})"
            if k is None and order is not None:
                w(f"fl_o{oid} = empty(({mem}), DT{oid})")
                w(f"o{oid} = values[{oid}] = fl_o{oid}{view}")
                w(f"fl_o{oid} = fl_o{oid}.reshape(-1)")
                self.flat_of[f"o{oid}"] = f"fl_o{oid}"
            elif k is None:
                w(f"o{oid} = values[{oid}] = empty(({dims}), DT{oid})")
            else:  # an intermediate: a piece of the program's buffer for it, grown when a call needs more
                n = " * ".join(self.dim(d) for d in shape if self.dim(d) != "1") or "1"
                if not n.isdigit():
                    w(f"n{oid} = {n}")
                    n = f"n{oid}"
                w(f"fl_o{oid} = pool[{k}]")  # (the piece of the last call of this size: ``_take``)
                w(f"if fl_o{oid}.size != {n} or fl_o{oid}.base is None:")
                w(f"    fl_o{oid} = _take(pool, {k}, {n}, DT{oid})")
                w(f"o{oid} = values[{oid}] = fl_o{oid}.reshape(({mem})){view}")
                self.flat_of[f"o{oid}"] = f"fl_o{oid}"
            self.stored[oid] = f"o{oid}"
        space = [self.dim(d) for d in gl.space]
        r = len(space)
        args: list[str] = []  # the arguments, in parameter order
        keys: list[str] = []  # the same with each array's length in its place (the instance key)
        flats: list[str] = []  # the tensors' flat arrays
        strided: list[str] = []  # the strides of the tensors addressed the generic way
        for k, (x, own, arg_dims, plain) in enumerate(gl.tensors):
            a = self.address(x)
            f = f"f{tag}_{k}"
            if a is None:
                self.needs_env = True
                w.const(f"X{tag}_{k}", x)
                shp = space if own is None else space[:-2] + [self.dim(own[0]), self.dim(own[1])]
                # (no two inputs share a buffer here: the generic path addresses the tensor so too)
                w(f"{f}, st{tag}_{k} = _addressing(X{tag}_{k}, values, env, ({', '.join(shp)},), True)")
                strided.append(f"st{tag}_{k}")
                flats.append(f)
                args.append(f)
                keys.append(f"{f}.shape[0]")
                for d in arg_dims:
                    args.append(f"st{tag}_{k}[{d}]")
                    keys.append(args[-1])
                continue
            root, off, shape, strides, _ = a
            flat = self.flat_of.get(root)
            if flat is None:  # (each array's flat view made once per call)
                flat = self.flat_of[root] = f"fl_{root}"
                self.flat_view(root, flat)
            if off != "0":
                self.piece(f, root, flat, off)
            else:
                f = flat
            flats.append(f)
            args.append(f)
            keys.append(f"{f}.shape[0]")
            pad = r - len(shape)
            for d in arg_dims:
                if d < pad:
                    e = "0"
                else:
                    size, st = shape[d - pad], strides[d - pad]
                    e = "0" if size == "1" else (st if size.isdigit() else f"({st} if {size} != 1 else 0)")
                args.append(e)
                keys.append(e)
        for v in flats + strided:
            if v not in self.sized_params:
                self.sized_params.append(v)
        w = self.ws  # from here: what the sizes alone decide (``sized``)
        if gl.kind == "matmul":
            bm, bn, _ = kept
            m, n_, kk = (self.dim(d) for d in gl.mm)
            nbn = _folded(f"-(-{n_} // {bn})")
            if not nbn.isdigit():
                w(f"nbn{tag} = {nbn}")
                nbn = f"nbn{tag}"
            batch = space[:-2]
            g0, g1, g2 = (_folded(f"(-(-{m} // {bm})) * {nbn}"), batch[0] if len(batch) > 0 else "1",
                          batch[1] if len(batch) > 1 else "1")
            scal = [m, n_, kk, nbn] + [f"float({self.dim(d)})" for d in gl.dims]
            tiles = tuple(kept)
            cores = profile.cube_cores
        else:
            if not kept.fits:
                raise _Unsupported
            rows = f"max(1, {space[-2]})" if r >= 2 else "1"
            cols = f"max(1, {space[-1]})" if r >= 1 else "1"
            outer = space[:-2] if r >= 2 else []
            tiles = (kept.br, kept.bc)
            if gl.mode == "split":
                g0 = str(kept.grid[0])
                extra = [f"-(-{space[-1]} // {kept.grid[0]})"]  # CH: the columns each of the partials reduces
            else:
                if gl.mode == "row":
                    w(f"if {cols} > {kept.bc}:")
                    w("    return None")
                ncb = "1" if gl.mode in ("row", "loop") else _folded(f"-(-{cols} // {kept.bc})")
                if not ncb.isdigit():
                    w(f"ncb{tag} = {ncb}")
                    ncb = f"ncb{tag}"
                w(f"g{tag} = {_folded(_folded(f'-(-{rows} // {kept.br})') + f' * {ncb}')}")
                prod = " * ".join(f"max(1, {d})" for d in outer if d != "1") if r > 2 else ""
                w(f"if g{tag}{' * ' + prod if prod else ''} > {profile.max_programs}:")
                w("    return None")
                g0 = f"g{tag}"
                extra = [ncb] if gl.mode == "tiled" else []
            g1 = outer[0] if len(outer) > 0 else "1"
            g2 = outer[1] if len(outer) > 1 else "1"
            scal = [space[-2] if r >= 2 else "1", space[-1] if r >= 1 else "1"] + extra
            scal += [f"float({self.dim(d)})" for d in gl.dims] + [self.dim(d) for d in gl.int_dims]
            cores = profile.vector_cores
        if g1 == "1" and g2 == "1":
            w(f"T{tag} = {g0}")
            grid = f"T{tag}, 1"
        else:
            w(f"T{tag} = {g0} * {g1} * {g2}")
            grid = f"{g0}, {g1}"
        if gl.consts:
            w.const(f"C{tag}", gl.consts)
            w.const(f"GL{tag}", gl)
            w(f"c{tag} = C{tag} if consts is None else GL{tag}.const_values(consts)")
            consts = f", *c{tag}"
            bits = f", *[x.tobytes() for x in c{tag}]"  # (a constant by its bits: -0.0 is not 0.0)
        else:
            consts = bits = ""
        args += scal
        keys += scal
        w(f"lg{tag} = (T{tag} if T{tag} < {cores} else {cores}) or 1, 1, 1")
        build = gk._builds.get(tiles)
        if build is None or build.encoder.target.name != profile.name:
            raise _Unsupported
        at = gl.tensor_at
        arrays = "{" + ", ".join(f"{i}: {f}" for i, f in zip(at, flats)) + "}"
        if self.inline:
            # the arguments by parameter position: the constants one by one, then the logical grid
            consts_at = [f"c{tag}[{j}]" for j in range(len(gl.consts))]
            self.encodes.append((tag, gk, build, args + consts_at + [x.strip() for x in grid.split(",")] +
                                 [f"T{tag}"], dict(zip(at, flats)), dict(zip(consts_at, gl.consts))))
        else:
            w(f"args{tag} = [{', '.join(args)}{consts}, {grid}, T{tag}]")
            w.const(f"B{tag}", build)
            w.const(f"I{tag}", gk._instances)
            w.const(f"TILES{tag}", tiles)
            # the instance key: the arguments with each array's length in its place (GroupKernel.prepare's key)
            w(f"ikey{tag} = (TILES{tag}, lg{tag}, ({', '.join(keys)}{bits}, {grid}, T{tag}), {id(profile)})")
            w(f"bc{tag} = _instance(GK{tag}, B{tag}, I{tag}, ikey{tag}, args{tag}, lg{tag}, {arrays})")
        w = self.w  # per call again: the arrays and the launch's item
        w.const(f"GS{tag}", gk.stats)
        n = len(self.tags)
        self.tags.append(tag)
        if len(set(gl.bases)) == len(gl.bases):
            w.const(f"ALIAS{tag}", {i: i for i in at})
            alias = f"ALIAS{tag}"
        else:
            w.const(f"BASES{tag}", gl.bases)
            w(f"arrs{tag} = {arrays}")
            arrays = f"arrs{tag}"
            alias = f"alias_groups(arrs{tag}, BASES{tag})"
        self.items[-1].append(f"StackItem(bcs[{n}], {arrays}, {gk.name!r}, {alias})")


def _folded(e: str) -> str:
    """``e`` computed when it has no variables (``-(-max(1, 256) // 64)``: ``4``)."""
    if all(ch in "0123456789-+*/() ,max" for ch in e):
        return str(eval(e, {"max": max}))  # noqa: S307 - digits, operators and max only
    return e


def _c_strides(shape: list[str]) -> list[str]:
    """The strides in elements of a C-contiguous array of ``shape`` (expressions)."""
    out, acc = [], "1"
    for d in reversed(shape):
        out.append(acc)
        if acc == "1":
            acc = d
        elif d != "1":
            acc = str(int(acc) * int(d)) if acc.isdigit() and d.isdigit() else f"{acc}*{d}"
    return list(reversed(out))

