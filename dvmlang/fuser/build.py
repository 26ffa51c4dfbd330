"""A fusion group's kernel: its builds (one per tiles), kept by content, and its launch instances.

``GroupKernel`` is what a ``Program`` holds per group. Its build path is ``compose`` (``emit``: fragments into a
skeleton, straight to a ``Template``; the default) or ``text`` (``codegen``: a ``@dvmlang.kernel`` source through
the frontend; the differential oracle, chosen with ``DVMLANG_FUSER=text``). Either way it takes the same
arguments (``emit.Signature``) and hands back what ``Device.run_stack`` runs.

Composed builds are content-addressed: the key is the group's structure without its name (every operation,
dtype, attribute and layout, the symbols as the group's own numbering, the tiles, the device profile, and the
source lines the instructions map to), so groups that differ only in name, the same group in another program,
a second ``@graph`` or a Dynamo recompile share one build (``BUILDS``; ``cache`` adds a copy on disk for later
processes). Groups that differ only in their source lines (a model's q, k and v projections, its two norms)
share one composition (``PATTERNS``): the second gets the first's words with its own line table.
"""

from __future__ import annotations

import gc
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import replace

import numpy as np

from .. import cache
from .. import dtypes as dt
from ..runtime import CacheInfo
from ..errors import BytecodeError
from ..vm.bytecode import Encoder
from ..vm.container import ParamInfo, TargetInfo
from . import emit
from . import signature as sg
from .fusion import Group
from .graph import Graph, GraphError, Node

MAX_BUILDS = 4096
MAX_INSTANCES = 256
# structure key -> ComposedBuild, most recently used last (shared by every program of the process)
BUILDS: OrderedDict = OrderedDict()
# the structure key with source lines as their order of appearance -> (a build of that pattern, its source
# locations in that order): a group of the same pattern takes its words and gets a line table of its own
PATTERNS: OrderedDict = OrderedDict()


def forget() -> None:
    """Nothing built or planned in this process any more (the disk cache is left alone)."""
    from . import structure
    BUILDS.clear()
    PATTERNS.clear()
    structure.forget()


class _PausedGC:
    """``with PAUSED_GC:`` the cyclic garbage collector does not run (re-entrant, across threads). A build makes
    thousands of small objects that live on (instructions, slots, templates); with the collector on, they
    trigger collections that walk every object of the process, which cost a decoder block's first call as
    much as its builds. Reference counting still frees everything acyclic at once; cycles made meanwhile are
    collected at the first collection after the pause."""

    def __init__(self):
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    def __enter__(self):
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1

    def __exit__(self, *exc):
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._resume:
                gc.enable()


PAUSED_GC = _PausedGC()


def fuser_path() -> str:
    """``compose`` (the default) or ``text`` (``DVMLANG_FUSER=text``: the differential oracle)."""
    p = os.environ.get("DVMLANG_FUSER", "compose")
    if p not in ("compose", "text"):
        raise GraphError(f"DVMLANG_FUSER must be `compose` or `text`, got `{p}`")
    return p


def trusted() -> bool:
    """Whether the device may run a template composed here without the validator's pass (it decodes it only):
    the fragments are validated, and the composition keeps what the validator checks by construction (slots
    allocated inside the footprint, registers numbered by dtype, every wait after its set, relocations made by
    the assembler). ``DVMLANG_VALIDATE=always`` validates them too, as the test suite does for every one; a
    template loaded from the disk cache, a ``.dvmb`` file or any other bytes is always validated."""
    return os.environ.get("DVMLANG_VALIDATE", "") != "always"


class Ahead:
    """Work done ahead of need, on the process's background worker (one daemon thread, started once: handing it
    work is putting it in a queue, so the call that hands it over does not wait for a thread to start).
    ``DVMLANG_BUILD_AHEAD=0``: done at once, on the caller's thread. ``wait`` returns when it is done; an error
    in it is left to the call that needs the work (it builds what is missing itself and reports any error)."""

    __slots__ = ("started", "done")

    def __init__(self):
        self.started = False
        self.done = None

    def start(self, fn, *args) -> None:
        self.started = True
        if os.environ.get("DVMLANG_BUILD_AHEAD", "1") == "0":
            _quietly(fn, args)
            return
        self.done = threading.Event()
        _pending(1)
        _WORK.put((fn, args, self.done))
        _worker()

    def wait(self) -> None:
        done = self.done
        if done is not None:
            done.wait()
            if self.done is done:  # (not work handed over meanwhile, by another thread's call)
                self.done = None


def settle() -> None:
    """Wait until the background worker has done everything handed to it so far (at once when it has nothing
    left: no round trip through its thread)."""
    if _PENDING[0] and _WORKER and _WORKER[0].is_alive():
        done = threading.Event()
        _pending(1)
        _WORK.put((lambda: None, (), done))
        done.wait()


def _quietly(fn, args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the call that needs the work builds it and reports any error
        pass


_WORK: queue.SimpleQueue = queue.SimpleQueue()
_WORKER: list = []
_PENDING = [0]  # pieces of work handed to the worker and not done yet
_PENDING_LOCK = threading.Lock()


def _pending(n: int) -> None:
    with _PENDING_LOCK:
        _PENDING[0] += n

_WORKER_CPU = [0.0]  # thread CPU seconds the worker has spent on work handed to it


def worker_cpu() -> float:
    """Thread CPU seconds the background worker has spent so far (what a benchmark charges the calls that handed
    it work: ``benchmarks/paper/ops.py``)."""
    return _WORKER_CPU[0]


_WORKER_LOCK = threading.Lock()


def _worker() -> None:
    """Start the worker unless it runs (``dvmlang``'s preload thread starts it after ``import dvmlang``: starting a
    thread waits until the new thread runs, which the first call that hands over work would otherwise wait for, up
    to tens of milliseconds while another thread holds the interpreter)."""
    if _WORKER and _WORKER[0].is_alive():
        return
    with _WORKER_LOCK:
        if _WORKER and _WORKER[0].is_alive():
            return
        _start_worker()


def _start_worker() -> None:
    def run():
        while True:
            fn, args, done = _WORK.get()
            c = time.thread_time()
            _quietly(fn, args)
            _WORKER_CPU[0] += time.thread_time() - c
            _pending(-1)
            done.set()
            time.sleep(0)  # let the caller's thread run between pieces of work

    t = threading.Thread(target=run, name="dvmlang-build-ahead", daemon=True)
    _WORKER[:] = [t]
    t.start()


class ComposedBuild:
    """A composed kernel: its template and encoder, and the parameters' records."""

    __slots__ = ("template", "encoder", "infos", "int_args")

    def __init__(self, template, infos: list[ParamInfo], profile, trusted: bool = False, validate: bool = False):
        self.template = template
        self.infos = infos
        ub = template.footprint.get("ub", 0)
        template.double_buffer = profile.double_buffer and 2 * ub <= profile.ub_bytes
        target = TargetInfo(profile.name, profile.vector_cores, profile.cube_cores, profile.ub_bytes,
                            profile.l1_bytes, profile.l0a_bytes, profile.l0b_bytes, profile.l0c_bytes)
        self.encoder = Encoder(template, infos, target, _sources(template.debug), validate=validate)
        self.encoder.trusted = trusted
        self.int_args = [i for i, p in enumerate(infos) if p.kind == "scalar" and p.dtype is dt.int32]

    def relocated(self, locs: list, own: list, infos: list[ParamInfo], profile) -> "ComposedBuild | None":
        """This build for a group of the same pattern whose source locations are ``own`` (``locs``: this build's,
        in the same order): the same words with the line table mapped across; None when the template holds
        anything else that names a place (a trap's message) or a line outside ``locs``."""
        t = self.template
        if t.strings:
            return None
        where = {_loc_key(loc): i for i, loc in enumerate(locs)}
        debug = []
        for pc, loc in t.debug:
            i = where.get(_loc_key(loc))
            if i is None:
                return None
            debug.append((pc, own[i]))
        return ComposedBuild(replace(t, debug=debug), infos, profile, self.encoder.trusted)


def _sources(debug) -> dict:
    from ..runtime import _embedded_sources
    return _embedded_sources(debug)


def _loc_key(loc):
    return None if loc is None else (loc.file, loc.line, loc.col)


def structure_key(g: Graph, grp: Group, sig: sg.Signature, tiles, profile) -> tuple:
    """The key of a composed build (``pattern_key``'s, with the source locations themselves)."""
    pattern, locs = pattern_key(g, grp, sig, tiles, profile)
    return pattern + (("locs",) + tuple(_loc_key(loc) for loc in locs),)


def pattern_key(g: Graph, grp: Group, sig: sg.Signature, tiles, profile) -> tuple[tuple, list]:
    """What a composed build depends on, without the group's name: the operations in order with their dtypes,
    attributes, operands (numbered within the group), layouts over the iteration space and source lines; the
    inputs and outputs; the tiles; the profile. Sizes are runtime parameters, so a symbol's identity counts only
    where the kernel reads it as a value (a size used as a number, a cat's offsets, a gather's bound): two
    programs whose sizes happen to coincide differently share their builds. Source locations count by their order
    of first appearance (returned with the key): groups that differ only in where their lines are share a
    composition."""
    syms: dict[int, int] = {}
    locs: dict = {}  # location key -> (its number, the location)

    def place(loc):
        if loc is None:
            return None
        k = _loc_key(loc)
        got = locs.get(k)
        if got is None:
            got = locs[k] = (len(locs), loc)
        return got[0]

    def sym(d):
        d = g.syms.find(d)
        if isinstance(d, int):
            return d
        return ("s", syms.setdefault(d.id, len(syms)))

    def extent(d):
        d = g.syms.find(d)
        return d if isinstance(d, int) else "s"

    local: dict[int, int] = {}
    space = sig.space

    def ref(n: Node):
        return local.setdefault(n.id, len(local))

    parts = [grp.kind, grp.mode, len(space), tuple(extent(d) for d in space), tiles, cache.profile_key(profile)]
    for x in sig.inputs:
        parts.append(("in", ref(x), x.dtype.code, tuple(sg.Layout(g, x.shape, space).present)))
    for n in sg.free_nodes(grp) + grp.body():
        attrs = []
        for k, v in sorted(n.attrs.items()):
            if n.op == "const" and k == "value":
                continue  # a runtime parameter of the kernel
            if k == "sym":
                v = sym(v)
            elif k == "offsets":
                v = tuple(sym(o) for o in v)
            attrs.append((k, v if isinstance(v, (int, float, str, bool, tuple, type(None))) else repr(v)))
        extra = ()
        if n.op in ("gather", "cat"):
            ax = n.attrs["axis"]
            extra = tuple(sym(i.shape[ax]) for i in n.inputs)
        parts.append((ref(n), n.op, n.dtype.code, tuple(ref(i) for i in n.inputs), tuple(attrs),
                      tuple(sg.Layout(g, n.shape, space).present), extra, place(getattr(n, "loc", None))))
    parts.append(("out",) + tuple(ref(o) for o in sig.outputs))
    parts.append(("dims",) + tuple(sym(s) for s in sig.dims) + ("idims",) + tuple(sym(s) for s in sig.int_dims))
    return tuple(parts), [loc for _, loc in locs.values()]


def _load(key, profile) -> ComposedBuild | None:
    """The composed build of ``key`` from the disk cache, or None (absent, damaged or foreign: a miss)."""
    got = cache.load_signed("composed", key)
    if got is None:
        return None
    head, words, signed = got
    try:
        template = cache.template_from(head, words)
        infos = []
        for kind, name, code, rank in head["params"]:
            if kind not in ("tensor", "scalar") or not isinstance(name, str) or not isinstance(rank, int):
                return None
            infos.append(ParamInfo(kind, name, dt.BY_CODE[code], rank))
        # bytes this process cannot vouch for are validated now: one the validator refuses is a miss
        return ComposedBuild(template, infos, profile, trusted=signed and trusted(), validate=not signed)
    except (ValueError, KeyError, TypeError, IndexError, BytecodeError):
        return None


class GroupKernel:
    """One group's kernel in a program: its signature, its builds by tiles and its launch instances."""

    def __init__(self, g: Graph, grp: Group, name: str, path: str | None = None, sink=None):
        self.g = g
        self.grp = grp
        self.name = name
        self.path = path or fuser_path()
        self.sig = grp.memo.get("sig")
        if self.sig is None:
            self.sig = grp.memo["sig"] = sg.signature(g, grp)
        self.stats = CacheInfo()
        self.sink = sink  # a GraphStats counting this kernel's builds, loads and encodes too, or None
        self.build_s = 0.0  # host seconds spent building (misses only)
        self.built_ahead = 0  # builds made before a call needed them (``stats.builds`` counts the calls')
        self._builds: dict = {}  # tiles -> ComposedBuild
        self._instances: OrderedDict = OrderedDict()  # (tiles, grid, scalars, sizes) -> Bytecode
        self.text = None  # the text path's KernelText
        self.key = None  # set by the program: kernels of its plans that are the same share one GroupKernel
        if self.path == "text":
            from .codegen import kernel_text
            self.text = kernel_text(g, grp, name, self.sig)
            self.text.compile()

    @property
    def kernel(self):
        """The text path's ``@dvmlang.kernel`` (None on the compose path)."""
        return self.text.kernel if self.text is not None else None

    def builds(self) -> list:
        """The builds this kernel has used (one per tiles; shared with every kernel of the same structure)."""
        if self.text is not None:
            return list(self.text.kernel._builds.values())
        return list(self._builds.values())

    def cache_info(self) -> CacheInfo:
        if self.text is not None:
            return self.text.kernel.cache_info()
        return self.stats

    def build(self, tiles, profile, ahead: bool = False) -> ComposedBuild:
        """The build for ``tiles``: this kernel's, else one of the same structure in memory or on disk, else a new
        one. ``ahead``: built before any call needs it (counted apart from the builds calls made)."""
        b = self._builds.get(tiles)
        if b is not None and b.encoder.target.name == profile.name:
            return b
        memo = self.grp.memo
        keys = memo.get((tiles, profile))
        if keys is None:
            pattern, locs = pattern_key(self.g, self.grp, self.sig, tiles, profile)
            keys = memo[(tiles, profile)] = (pattern, locs, pattern + (("locs",) + tuple(map(_loc_key, locs)),))
        pattern, locs, key = keys
        b = BUILDS.get(key)
        if b is None:
            t0 = time.perf_counter()
            seen = PATTERNS.get(pattern)
            if seen is not None:  # the same composition at other source lines: its words, our line table
                b = seen[0].relocated(seen[1], locs, self.param_infos(), profile)
            if b is None:
                b = _load(key, profile)
                if b is not None:
                    self.stats.loads += 1
                    if self.sink is not None:
                        self.sink.loads += 1
            if b is None:
                with PAUSED_GC:
                    template = emit.compose(self.g, self.grp, self.name, self.sig, tiles, profile,
                                            loc=getattr(self.grp, "loc", None))
                    b = ComposedBuild(template, self.param_infos(), profile, trusted=trusted())
                if cache.root() is not None:
                    cache.store("composed", key, {**cache.template_fields(template), "params": [
                        [p.kind, p.name, p.dtype.code, p.rank] for p in b.infos]}, template.words)
                if ahead:  # (not a call's build: counted apart, so "no build after the first call" stays true)
                    self.built_ahead += 1
                    if self.sink is not None:
                        self.sink.built_ahead += 1
                else:
                    self.stats.builds += 1
                    if self.sink is not None:
                        self.sink.builds += 1
            self.build_s += time.perf_counter() - t0
            BUILDS[key] = b
            PATTERNS[pattern] = (b, locs)
            for table in (BUILDS, PATTERNS):
                if len(table) > MAX_BUILDS:
                    table.popitem(last=False)
        else:
            BUILDS.move_to_end(key)
        self._builds[tiles] = b
        return b

    def param_infos(self) -> list[ParamInfo]:
        sig = self.sig
        return [ParamInfo("tensor", p, self._tensor_dtype(p), 1) if sig.is_tensor(p) else
                ParamInfo("scalar", p, sig.scalar_dtype(p)) for p in sig.params]

    def _tensor_dtype(self, p: str) -> dt.DType:
        sig = self.sig
        if p == "A":
            return sig.inputs[0].dtype
        if p == "B":
            return sig.inputs[1].dtype
        if p.startswith("in"):
            return sig.inputs[int(p[2:]) + (2 if sig.mode == "matmul" else 0)].dtype
        return sig.outputs[int(p[3:])].dtype

    def prepare(self, tiles, grid, args, device, tensor_at=None, bases=None):
        """(bytecode, param index -> flat array, alias groups) of one launch: ``args`` in parameter order (flat
        arrays for tensors, numbers for scalars; ``tensor_at``: the tensors' positions, when the caller knows;
        ``bases``: per tensor, what it is stored in, when the caller knows: tensors over different ones cannot
        share memory)."""
        if self.text is not None:
            names = ("BM", "BN", "BK") if self.sig.mode == "matmul" else ("BR", "BC")
            st = self.text.kernel.stats
            before = (st.builds, st.encodes)
            _, bc, flat, alias = self.text.kernel.prepare(grid, *args, device=device, **dict(zip(names, tiles)))
            if self.sink is not None:
                self.sink.builds += st.builds - before[0]
                self.sink.encodes += st.encodes - before[1]
            return bc, flat, alias
        b = self._builds.get(tiles)
        if b is None or b.encoder.target.name != device.profile.name:
            b = self.build(tiles, device.profile)
        if tensor_at is None:
            tensor_at = [i for i, a in enumerate(args) if a.__class__ is np.ndarray]
        arrays = {i: args[i] for i in tensor_at}
        # the instance: by the scalars (sizes, strides, constants) and the arrays' lengths (their places in GM); a
        # constant (a numpy scalar) by its bits: -0.0 equals 0.0, and NaN is never equal to itself
        ikey = (tiles, grid, tuple([a.shape[0] if a.__class__ is np.ndarray else
                                    a.tobytes() if isinstance(a, np.generic) else a for a in args]),
                id(device.profile))
        bc = self._instances.get(ikey)
        if bc is None:
            ints = [args[i] for i in b.int_args]
            if ints and (max(ints) >= 1 << 31 or min(ints) < -(1 << 31)):
                i = next(i for i in b.int_args if not -(1 << 31) <= args[i] < 1 << 31)
                raise GraphError(f"kernel `{self.name}`: the size argument {self.sig.params[i]} = {args[i]} does not "
                                 "fit int32")
            t0 = time.perf_counter()
            bc = b.encoder.encode_values(args, grid)
            bc.encode_s = time.perf_counter() - t0
            self.stats.encodes += 1
            if self.sink is not None:
                self.sink.encodes += 1
            self._instances[ikey] = bc
            if len(self._instances) > MAX_INSTANCES:
                self._instances.popitem(last=False)
        else:
            self.stats.hits += 1
        self.stats.launches += 1
        return bc, arrays, alias_groups(arrays, bases)


def alias_groups(arrays: dict, bases=None) -> dict:
    """Which of a launch's arrays may share memory (param index -> the index of its group): arrays over distinct
    buffers are their own groups; only arrays over one buffer are compared (``np.may_share_memory``). ``bases``
    (per array, in order, what it is stored in) says which can share a buffer, without looking."""
    by_root: dict = {}
    if bases is not None:
        for (i, a), b in zip(arrays.items(), bases):
            by_root.setdefault(b, []).append(i)
    for i, a in (arrays.items() if bases is None else ()):
        root = a
        while True:
            b = root.base
            if b is None:
                key = id(root)
                break
            if b.__class__ is np.ndarray:
                root = b
                continue
            key = id(b)  # an array over a buffer of another kind: arrays over that buffer are compared
            break
        by_root.setdefault(key, []).append(i)
    if len(by_root) == len(arrays):
        return {i: i for i in arrays}
    group = {i: i for i in arrays}
    for members in by_root.values():
        for j, a in enumerate(members):
            for b in members[j + 1:]:
                if group[b] == b and np.may_share_memory(arrays[a], arrays[b]):
                    group[b] = group[a]
    return group
