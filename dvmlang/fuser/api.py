"""``@dvmlang.graph``: capture once per symbolic signature, fuse once, encode per call.

A call binds the symbols to the arguments' sizes, checks every deduced equality, picks the fused plan (or
its split fallback when a guarded row does not fit UB or outgrew its row block), tiles each group (at its
first call; later calls keep the tiles, tiling.py), encodes each group's kernel (a new shape only encodes), and runs
all of them as one stacked launch: dependent groups in sequence through workspaces, independent groups
side by side on disjoint cores.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from ..errors import user_frames_methods
from ..npu import LaunchRecord, default_device
from ..trace.record import active_session
from . import captured_args as ca
from . import ahead, foreign
from . import tiling as tl
from . import instance, instance_calls, structure
from .build import Ahead, GroupKernel
from .instance import SPLIT
from .launch import ProgramLaunch, _input_classes, _materialise, kernel_name
from .canonical import canonicalize
from .fusion import Group, Plan, plan
from .binder import Binder, Env
from .graph import Graph, GraphError, GraphValue, Node, ScalarArg, Tracer

_capture_lock = threading.RLock()
_MISSING = object()


@dataclass
class GraphStats:
    """What a ``@dvmlang.graph`` did: captures (symbolic signatures), calls, launches, calls that ran a split plan
    (fallbacks), and its kernels' builds made by calls (a structure built before, in this process or read from
    disk, is not a build), builds read from the disk cache (loads), encodes (instances for new shapes) and builds
    made ahead of need (a split plan's, on a background thread)."""

    captures: int = 0
    calls: int = 0
    launches: int = 0
    fallbacks: int = 0
    builds: int = 0
    loads: int = 0
    encodes: int = 0
    built_ahead: int = 0  # builds made before a call needed them (a split plan's, after the first call)


class Run(NamedTuple):
    """What ``Program.run`` did: every stored value by node id, the launch record (None when nothing ran) and the
    number of launches."""

    values: dict
    record: LaunchRecord | None
    launches: int


class Program:
    """A captured graph with its fusion plan(s) and generated kernels; ``run`` executes it on arrays.

    Shared by ``@dvmlang.graph`` (one Program per symbolic signature) and ``dvmlang.lazy()`` (one per
    flushed pending graph)."""

    def __init__(self, graph: Graph, fuse: bool, profile, name: str | None = None, stats=None):
        from .build import fuser_path
        path = fuser_path()
        parts = profile.vector_cores if fuse and path == "compose" else None
        k = structure.key(graph, fuse, path, profile)
        hit = structure.get(k) if k is not None else None
        if hit is None:
            canonicalize(graph, parts, fuse)
            planned = plan(graph, fuse, row_fits=lambda grp, cols: tl.row_fits(grp, cols, profile))
            if k is not None:
                structure.put(k, graph, planned)
        else:  # the same structure planned before: its graph and plan (callers use positions, not our nodes)
            graph, planned = hit
        self.graph = graph
        self.fuse = fuse
        self.name = name or graph.name
        self.plan = planned
        self.kernels: dict = {}  # (plan id, group id) -> GroupKernel
        self._shared: dict = {}  # GroupKernel.key -> GroupKernel (kernels shared between the plans)
        self._tiles: dict = {}  # GroupKernel.key -> the tiles the kernel was built with
        self.fallbacks = 0
        self._binder = None
        self._launches: dict = {}  # id(plan) -> its ProgramLaunch
        self.encode_s = 0.0  # host seconds spent preparing launches (building, binding arguments, encoding)
        self.stats = stats  # where the kernels count their builds and encodes too (a GraphStats), or None
        self._ahead = Ahead()  # work done off the critical path: instance functions, the split plan's kernels
        self._watch = None  # (guarded rows' sizes at the first call, its env, profile) until a row changes
        self._fast: dict = {}  # id(plan) -> its instance function (instance.py), None where it has none
        self._generic_runs: dict = {}  # id(plan) -> calls the generic path ran (the function is written at 2)
        self._seeds: dict = {}  # id(plan) -> instances generic runs encoded before its function was written

    def bind(self, inputs: dict[int, np.ndarray]):
        if self._binder is None:
            self._binder = Binder(self.graph)
        return self._binder.bind([inputs[n.id] for n in self.graph.inputs])

    def choose(self, env, profile) -> Plan:
        p = self.plan
        if not p.has_fallback:
            return p
        for grp in p.groups:
            if grp.mode == "row" and grp.guard is not None:
                cols = env.value(grp.space[-1])
                kept = self._tiles.get(self.kernel(p, grp).key)
                if not tl.row_fits(grp, cols, profile) or (kept is not None and cols > kept.bc):
                    return p.fallback  # the row does not fit UB, or outgrew the row block built: no rebuild
        return p

    def run(self, inputs: dict[int, np.ndarray], device, session=None, values: dict | None = None,
            encode_only: bool = False, consts: dict | None = None) -> Run:
        """Execute on ``inputs`` (input node id -> array). ``values`` may preset arrays for outputs; ``consts`` gives
        constants other values than the graph's (const node id -> value: a lazy program reused for another flush).
        With ``encode_only`` nothing runs: the record is None and ``launches`` the stacked launch's items.

        A plan that has run twice has its instance function (instance.py): the call's host work as one
        straight-line function. It returns None for anything it does not cover, and the generic path runs."""
        if values is None and not encode_only:
            done = self._ahead.done
            if done is not None and not done.is_set() and id(self.plan) not in self._fast:
                # the worker is writing the instance functions: this call takes them, so that which path a call
                # runs (and so which arrays the device's L2 model sees) never depends on the worker's progress
                self._ahead.wait()
            if self._fast:
                r = self.run_fast([inputs[n.id] for n in self.graph.inputs], device, session, consts)
                if r is not None:
                    return r
        env = self.bind(inputs)
        chosen = self.choose(env, device.profile)
        if self._watch is not None:
            if chosen is not self.plan:
                self._watch = None  # (the split plan's kernels are built on demand by this call)
            elif ahead.rows(self, env) != self._watch[0]:
                self._varied()
        if chosen is not self.plan:
            if self._ahead.done is not None and values is None and not encode_only:
                # the split plan's kernels and instance function are being made ahead: take them when ready
                self._ahead.wait()
                r = self.run_fast([inputs[n.id] for n in self.graph.inputs], device, session, consts)
                if r is not None:
                    return r
            self.fallbacks += 1
            self._ahead.wait()  # (the split plan's kernels are being built ahead: take them when they are ready)
        preset = bool(values)
        values = dict(values or {})
        values.update(inputs)
        launch = self._launches.get(id(chosen))
        if launch is None:
            launch = self._launches[id(chosen)] = ProgramLaunch(self, chosen)
        record, launches = launch.replay(env, values, device, session, encode_only, consts)
        if not encode_only and not preset and self.fuse and instance.INLINE:
            self._seed(chosen, env, consts, launch.last_bcs, inputs)
        for o in self.graph.outputs:
            values[o.id] = _materialise(o, values, env)
        if chosen is self.plan and not self._ahead.started and not encode_only:
            ahead.after_first_call(self, env, device.profile)
        if not encode_only:
            self._written(chosen, launch, device.profile)
        return Run(values, record, launches)

    def run_fast(self, arrays: list, device, session=None, consts: dict | None = None) -> Run | None:
        """``run`` through the plans' instance functions (arrays in the graph's input order), or None: the call
        needs the generic path."""
        fn = self._fast.get(id(self.plan))
        if fn is None:
            return None
        r = fn(arrays, device, session, consts)
        if r is SPLIT:
            fn = self._fast.get(id(self.plan.fallback))
            r = fn(arrays, device, session, consts) if fn is not None else None
        return r

    def _seed(self, p: Plan, env, consts, bcs, inputs) -> None:
        """After a generic run of plan ``p``: its instances, kept by the plan's instance function for these sizes
        (or kept until it is written), so that a call at sizes seen before encodes nothing, whichever path ran
        first. Only when the function would have encoded the same words: inputs C-contiguous over buffers no
        other input shares (both paths address each as an array of its own: the addresses follow the arrays'
        lengths, ``launch.ProgramLaunch._group``)."""
        if not all(a.flags.c_contiguous for a in inputs.values()) or _input_classes(self.graph.inputs, inputs):
            return
        fn = self._fast.get(id(p), _MISSING)
        if fn is None:  # (the plan has no function)
            return
        item = (dict(env.values), None if consts is None else dict(consts), list(bcs))
        if fn is not _MISSING:
            instance_calls.seed(fn, *item)
        else:
            pending = self._seeds.setdefault(id(p), [])
            if len(pending) < 16:
                pending.append(item)

    def _store(self, p: Plan, fn) -> None:
        """Make ``fn`` plan ``p``'s instance function, with the instances generic runs encoded before it."""
        if fn is not None:
            for item in self._seeds.pop(id(p), ()):
                instance_calls.seed(fn, *item)
        self._fast[id(p)] = fn

    def _written(self, p: Plan, launch: ProgramLaunch, profile) -> None:
        """After a generic run of plan ``p``: have its instance function written. The fused plan's is written by
        the worker after the first call (``ahead.work_ahead``), or at its second generic run when the worker is not
        to; the split plan's, which most programs never run, is handed to the worker at its first run (the
        next call of the split plan waits for it: which path a call runs never depends on the worker's
        progress). Written again when the tiles it was written with have changed."""
        key = id(p)
        n = self._generic_runs[key] = self._generic_runs.get(key, 0) + 1
        fn = self._fast.get(key, _MISSING)
        if fn is _MISSING:
            done = self._ahead.done
            # (not while the worker is to write it: calls take the generic path meanwhile, no call stalls for it)
            if done is None or done.is_set():
                if p is not self.plan and self._ahead.started and self._writable():
                    self._ahead.start(ahead.write_ahead, weakref.ref(self), p, profile)
                elif n >= 2:
                    self._store(p, instance.generate(self, launch, profile, self._binder, Run, Env))
        elif fn is not None and any(self._tiles.get(k) is not t for k, t in fn.kept):
            self._store(p, instance.generate(self, launch, profile, self._binder, Run, Env))

    def _writable(self) -> bool:
        """Whether the plan can have an instance function (fused, and every kernel composed: a text-path kernel
        has none)."""
        return self.fuse and instance.ENABLED and all(gk.text is None for gk in list(self.kernels.values()))

    def _varied(self) -> None:
        """A call's guarded rows differ from the first call's (``ahead.varied``; the instance function calls it)."""
        ahead.varied(self)

    def _write_function(self, p: Plan, profile) -> None:
        """Write plan ``p``'s instance function, unless it has one (or functions are switched off)."""
        if self._fast.get(id(p)) is not None or not instance.ENABLED:
            return
        launch = self._launches.get(id(p))
        if launch is None:
            launch = self._launches.setdefault(id(p), ProgramLaunch(self, p))
        fn = instance.generate(self, launch, profile, self._binder, Run, Env)
        if self._fast.get(id(p)) is None:  # (None: the plan has something a function does not cover)
            self._store(p, fn)

    def kernel(self, p: Plan, grp: Group) -> GroupKernel:
        key = (id(p), grp.id)
        gk = self.kernels.get(key)
        if gk is None:
            gk = GroupKernel(self.graph, grp, kernel_name(self.name, grp), sink=self.stats)
            # a group of the split fallback plan that computes what one of the fused plan does (the same
            # operations on the same nodes) shares that kernel, its builds and its tiles
            gk.key = (grp.kind, grp.mode, tuple(n.id for n in grp.body()), tuple(n.id for n in gk.sig.inputs),
                      tuple(n.id for n in gk.sig.outputs))
            gk = self._shared.setdefault(gk.key, gk)
            self.kernels[key] = gk
        return gk

    def tiles(self, p: Plan, grp: Group, env, profile):
        """The group's tiles at this call's sizes (tiling.vector_tiles / matmul_tiles), kept across calls."""
        key = self.kernel(p, grp).key

        def design(d):
            v = env.value(d)
            return v if isinstance(self.graph.syms.find(d), int) else max(v, tl.DESIGN_SIZE)

        kept = self._tiles.get(key)
        if grp.kind == "matmul":
            t = tl.matmul_tiles(grp, env, profile, kept, design)
        else:
            t = tl.vector_tiles(grp, tuple(env.value(d) for d in grp.space), profile, kept,
                                tuple(design(d) for d in grp.space))
            if kept is not None and (t.br, t.bc, t.fits) == (kept.br, kept.bc, kept.fits):
                return t  # (the same blocks at this call's grid: the instance functions written with them hold)
        self._tiles[key] = t
        return t

def _signature(args, static: dict, names, fn=None, ones: bool = True, floats: bool = False):
    """The capture key of a call: the arguments' structure, per array its dtype and its static dims' sizes (and,
    with ``ones``, which dims are 1), per constant its value (with ``floats``, a float argument's is not: it is a
    runtime scalar, ``graph.ScalarArg``), and the arrays ``fn`` closes over (captured_args). (Dtypes are checked
    when a new key is captured.)"""
    key = tuple(_RUNTIME_FLOAT if floats and a.__class__ is float else ca.key_of(name, a, static, name, ones)
                for name, a in zip(names, args))
    return key + (ca.closure_key(fn),) if fn is not None else key


_RUNTIME_FLOAT = ("float", "per call")


class _Baked(Exception):
    """A capture needed the value of a float argument: capture again with the floats as constants."""


def _ones(arrays) -> tuple:
    """Which dims of each array are 1 (the part of a call's signature a size-1 capture is keyed by; False for a
    float argument)."""
    return tuple([a.__class__ is np.ndarray and 1 in a.shape and tuple([n == 1 for n in a.shape]) for a in arrays])


def _has_ones(args) -> bool:
    return any(1 in a.shape for arr in args for _, _, a in ca.leaves("", arr))


@user_frames_methods
class GraphFunction:
    """A tensor program of ``dvmlang.ops`` compiled with fusion. Call it with numpy arrays."""

    def __init__(self, fn, fuse: bool = True, static: dict | None = None, device=None, name: str | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.fuse = fuse
        self.static = {k: tuple(v) for k, v in (static or {}).items()}
        self.device = device
        self.name = name or fn.__name__
        self.signature = inspect.signature(fn)
        self.names = list(self.signature.parameters)
        # the trailing parameters' defaults, when every parameter is positional and those have defaults
        tail = []
        for p in reversed(self.signature.parameters.values()):
            if p.kind is not p.POSITIONAL_OR_KEYWORD or p.default is p.empty:
                break
            tail.insert(0, p.default)
        plain = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in self.signature.parameters.values())
        self._tail = tuple(tail) if plain and tail else None
        self._captured: dict = {}  # signature -> Program (None: the generic capture cannot serve it)
        self._generic_ok: dict = {}  # signature with its size-1 dims -> whether the generic capture takes it
        # (dtypes and ranks, closure key) -> [the generic capture's (program, where each input comes from), {which
        # dims are 1 (_ones) -> a size-1 capture's}]
        self._direct: dict = {}
        # float arguments are runtime scalars (``graph.ScalarArg``) until a capture needs one's value as a Python
        # number; from then on they are constants of the capture, keyed by value
        self._floats = True
        self.stats = GraphStats()
        self.last_launch = None

    def __repr__(self) -> str:
        return f"<dvmlang.graph {self.name} fuse={self.fuse}>"

    # ---- capture ---------------------------------------------------------------------------------------
    def _arguments(self, args, kwargs, torch_in=None) -> tuple:
        """The arguments in parameter order, keywords and defaults applied; numpy scalars as 0-d arrays.
        ``torch_in``: whether any is a torch tensor, when the caller has looked (None: look)."""
        if torch_in is None:
            torch_in = foreign.first_torch((args, kwargs)) is not None
        if torch_in:  # torch tensors: as zero-copy numpy views
            args = foreign.numpy_in(args, f"an argument of `{self.name}`")
            kwargs = foreign.numpy_in(kwargs, f"an argument of `{self.name}`")
        if any(isinstance(a, np.generic) for a in args) or any(isinstance(a, np.generic) for a in kwargs.values()):
            args = tuple(np.asarray(a) if isinstance(a, np.generic) else a for a in args)
            kwargs = {k: np.asarray(v) if isinstance(v, np.generic) else v for k, v in kwargs.items()}
        if not kwargs and len(args) == len(self.names):
            return args
        if not kwargs and self._tail is not None and len(self.names) - len(self._tail) <= len(args) < len(self.names):
            return args + self._tail[len(args) - len(self.names):]  # trailing defaults
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise GraphError(f"`{self.name}` takes the arguments ({', '.join(self.names)}): {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[n] for n in self.names)

    def capture(self, *args, **kwargs) -> Program:
        return self._program(self._arguments(args, kwargs))

    def _program(self, args) -> Program:
        """The captured Program for arguments in parameter order (``_arguments``), captured on first use (see
        ``_keyed``); a capture that needs a float argument's value starts again with floats keyed by value."""
        try:
            return self._keyed(args)
        except _Baked:
            return self._keyed(args)

    def _keyed(self, args) -> Program:
        """The captured Program for ``args``.

        A size of 1 is a size like any other: the *generic* capture (every non-static dim a symbol) serves a call
        whose size-1 dims it can take. It cannot when an operation broadcasts one of them (a deduced equality
        fails at binding) or the function compared a size with a number while capturing (its Python may have
        chosen by it), nor when capturing with symbols fails (``squeeze`` of a dim not proven 1): then the call
        runs the capture with its size-1 dims as 1s, keyed by which dims are 1."""
        floats = self._floats
        key = _signature(args, self.static, self.names, self.fn, ones=False, floats=floats)
        cap = self._captured.get(key, _MISSING)
        if cap is _MISSING:
            try:
                cap = self._capture(args, generic=True)
            except GraphError:
                if not _has_ones(args):
                    raise
                cap = None
            else:
                self.stats.captures += 1
            self._captured[key] = cap
        if cap is not None and not (cap.compared_sizes and _has_ones(args)):
            if not _has_ones(args):
                return cap
            ok = self._generic_ok.get(key1 := _signature(args, self.static, self.names, self.fn, floats=floats))
            if ok is None:
                try:
                    cap.bind(self._inputs(cap, args))
                    ok = True
                except GraphError:
                    ok = False
                self._generic_ok[key1] = ok
            if ok:
                return cap
        key1 = _signature(args, self.static, self.names, self.fn, floats=floats)
        spec = self._captured.get(("ones", key1))
        if spec is None:
            spec = self._capture(args)
            self._captured[("ones", key1)] = spec
            self.stats.captures += 1
        return spec

    def _capture(self, args, generic: bool = False) -> Program:
        if len(args) != len(self.names):
            raise GraphError(f"`{self.name}` takes {len(self.names)} arguments ({', '.join(self.names)}), "
                             f"got {len(args)}")
        g = Graph(self.name)
        paths = {}
        values = []
        runtime = False  # whether a float argument is a runtime scalar of this capture
        for pos, (name, a) in enumerate(zip(self.names, args)):
            if self._floats and a.__class__ is float:
                values.append(ScalarArg(name, a, pos))
                runtime = True
                continue
            def make(path_name, path, arr, pos=pos):
                if dt.from_numpy(arr.dtype) is None:
                    raise GraphError(f"argument `{path_name}` has dtype {arr.dtype}, which dvmlang does not support")
                static = self.static.get(path_name, ())
                shape = []
                for i, s in enumerate(arr.shape):
                    if s == 1 and not generic:
                        shape.append(1)
                    elif i in static:
                        shape.append(int(s))
                    else:
                        shape.append(g.syms.new(f"{path_name}.shape[{i}]"))
                n = g.add(Node("input", [], tuple(shape), dt.from_numpy(arr.dtype), {"name": path_name}, path_name))
                g.inputs.append(n)
                paths[n] = (pos, path)
                return GraphValue(n, g)
            values.append(ca.rebuild(name, a, make))
        with _capture_lock:
            prev = Tracer.graph
            Tracer.graph = g
            try:
                out = self.fn(*values)
            except Exception:
                if not runtime:
                    raise
                self._bake_floats()  # (it may have needed a float's value: the capture with values tells)
                raise _Baked from None
            finally:
                Tracer.graph = prev
        outs = out if isinstance(out, (tuple, list)) else (out,)
        g.output_tuple = isinstance(out, (tuple, list))
        for o in outs:
            if not isinstance(o, GraphValue) or o.graph is not g:
                if runtime:
                    self._bake_floats()
                    raise _Baked
                raise GraphError(f"`{self.name}` must return graph values computed from its arguments, got {o!r}")
            g.outputs.append(o.node)
        if runtime and _holds_scalar_arg([n.attrs for n in g.nodes]):
            self._bake_floats()  # (an operation kept the argument itself, not its constant: take values)
            raise _Baked
        prog = Program(g, self.fuse, (self.device or default_device()).profile, self.name, self.stats)
        prog.arg_paths = [paths.get(n) for n in g.inputs]  # None: an array the function closes over
        prog.compared_sizes = g.syms.compared
        return prog

    def _bake_floats(self) -> None:
        """Floats are constants of the capture from now on (keyed by value): calls that took them as runtime
        scalars straight to a program (``_direct``) go the generic way again."""
        self._floats = False
        self._direct.clear()

    def _inputs(self, prog: Program, args) -> dict:
        out = {}
        for n, where in zip(prog.graph.inputs, prog.arg_paths):
            if where is None:
                out[n.id] = prog.graph.closures[n]
            elif not where[1]:
                out[n.id] = ca._array(args[where[0]])  # (an argument itself, the common case)
            else:
                out[n.id] = ca.fetch(args, *where)
        return out

    # ---- calls -----------------------------------------------------------------------------------------
    def __call__(self, *args, device=None, **kwargs):
        device = device or self.device or default_device()
        raw = args
        floats = self._floats
        # numpy arrays (and floats, while they are runtime scalars): nothing to convert
        if not kwargs and all([a.__class__ is np.ndarray or (floats and a.__class__ is float) for a in args]):
            like = None
            if self._direct:
                r = self._call_direct(args, device)
                if r is not None:
                    return r
            if len(args) != len(self.names):
                args = self._arguments(args, kwargs, False)
        else:
            like = foreign.first_torch((args, kwargs))  # torch in, torch out
            args = self._arguments(args, kwargs, like is not None)
        prog = self._program(args)
        inputs = self._inputs(prog, args)
        before = prog.fallbacks
        r = prog.run(inputs, device, active_session(), consts=_consts(prog, args))
        if like is None and not kwargs and prog._fast:
            self._remember_direct(prog, args, raw)
        return self._returned(prog, before, r, like)

    def _returned(self, prog: Program, before: int, r, like=None):
        """What a call returns, from its run ``r`` (values, record, launches), counted in ``stats``."""
        values, record, launches = r
        self.stats.calls += 1
        self.stats.launches += launches
        self.stats.fallbacks += prog.fallbacks - before
        if record is not None:
            self.last_launch = record
        outs = [values[o.id] for o in prog.graph.outputs]
        if like is not None:
            outs = foreign.torch_out(outs, like)
        return tuple(outs) if prog.graph.output_tuple else outs[0]

    def _direct_key(self, args) -> tuple:
        return tuple([(a.dtype, a.ndim) if a.__class__ is np.ndarray else _RUNTIME_FLOAT for a in args]), \
            ca.closure_key(self.fn)

    def _remember_direct(self, prog: Program, args, raw) -> None:
        """After a call of numpy arrays (``raw``, positional; ``args`` with the defaults) that a capture served:
        calls with the same dtypes, ranks and closed-over arrays go straight to its instance functions
        (``_call_direct``). A capture specialised to the call's size-1 dims serves the calls with those dims of
        size 1 (``_ones``). Float arguments pass their values as the runtime scalars they are. Not for a capture
        that compared sizes (its size-1 calls have a capture of their own), arrays inside containers, arrays from
        defaults, or floats that are constants of the capture."""
        floats = self._floats
        if prog.compared_sizes or not all([a.__class__ is np.ndarray or (floats and a.__class__ is float)
                                           for a in raw]):
            return
        if any(w is not None and (w[1] or w[0] >= len(raw)) for w in prog.arg_paths):
            return
        if any(pos >= len(raw) for _, pos in prog.graph.scalar_args) and \
                (self._tail is None or len(raw) < len(self.names) - len(self._tail)):
            return  # (a float from a keyword; one from a trailing default is that default: ``_call_direct``)
        entry = (prog, [w[0] if w is not None else prog.graph.closures[n]
                        for n, w in zip(prog.graph.inputs, prog.arg_paths)])
        d = self._direct.setdefault(self._direct_key(raw), [None, {}])
        if self._captured.get(_signature(args, self.static, self.names, self.fn, ones=False, floats=floats)) is prog:
            d[0] = entry
        elif self._captured.get(("ones", _signature(args, self.static, self.names, self.fn, floats=floats))) is prog:
            d[1][_ones(raw)] = entry

    def _call_direct(self, args, device):
        """A call of numpy arrays, through the instance functions of the program that served calls like it; None
        when they cannot take it (the generic path then runs the call)."""
        d = self._direct.get(self._direct_key(args))
        if d is None:
            return None
        entry = d[1].get(_ones(args)) if d[1] else None
        if entry is None:
            entry = d[0]
            if entry is None:
                return None
        prog, order = entry
        arrays = [args[p] if p.__class__ is int else p for p in order]
        before = prog.fallbacks
        if prog.graph.scalar_args and len(args) < len(self.names):  # (floats from trailing defaults)
            args = args + self._tail[len(args) - len(self.names):]
        r = prog.run_fast(arrays, device, active_session(), _consts(prog, args))
        return None if r is None else self._returned(prog, before, r)

    def encode(self, *args, device=None, **kwargs) -> list:
        """The bytecode of every kernel a call with these arguments launches (one per group, in launch order),
        encoded for their shapes and nothing run: what a new shape costs, apart from simulating it. (Outputs are
        allocated, not computed.)"""
        device = device or self.device or default_device()
        args = self._arguments(args, kwargs)
        prog = self._program(args)
        _, _, items = prog.run(self._inputs(prog, args), device, encode_only=True, consts=_consts(prog, args))
        return [it.bytecode for stage in items for it in stage]

    # ---- reporting -------------------------------------------------------------------------------------
    def explain(self, *args, device=None, **kwargs):
        """A report (prints with rich) of the fusion groups for these arguments, their tiling, and why every
        rejected pair was rejected."""
        from .explain import Report
        device = device or self.device or default_device()
        args = self._arguments(args, kwargs)
        prog = self._program(args)
        env = prog.bind(self._inputs(prog, args))
        chosen = prog.choose(env, device.profile)
        return Report(self, prog, chosen, env, device.profile)


def _consts(prog: Program, args) -> dict | None:
    """The values of a call's float arguments for the constants bound to them (const node id -> value)."""
    bound = prog.graph.scalar_args
    return {n.id: args[pos] for n, pos in bound} if bound else None


def _holds_scalar_arg(v) -> bool:
    if v.__class__ is ScalarArg:
        return True
    if isinstance(v, dict):
        return any(_holds_scalar_arg(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_holds_scalar_arg(x) for x in v)
    return False


def graph(fn=None, *, fuse: bool = True, static: dict | None = None, device=None, name: str | None = None):
    """Decorator: ``@dvmlang.graph`` compiles a function of ``dvmlang.ops`` with fusion; ``fuse=False`` runs one
    kernel per op (the unfused baseline). ``static={"w": (0,)}`` keeps named dimensions as constants."""
    if fn is None:
        return lambda f: GraphFunction(f, fuse=fuse, static=static, device=device, name=name)
    return GraphFunction(fn, fuse=fuse, static=static, device=device, name=name)
