"""Kernels on the host: argument binding, the build and instance caches, and launches.

``kernel[grid](*args, **constexprs)`` binds the arguments, finds (or makes) the build for the
constexpr values, dtypes and ranks, finds (or encodes) the instance for the runtime values and
shapes, and runs it on the device. A new runtime value or shape only encodes; it never rebuilds.

The caches are keyed by typed records: a build by its ``BuildKey`` (the parameter specs and the device
profile), an instance by its ``InstanceKey`` (the build, the launch keys of the runtime values, the grid).
``Kernel`` is a ``frontend.source.KernelFunction``: all the frontend needs of it to compile it and to inline
it into other kernels.
"""

from __future__ import annotations

import functools
import linecache
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import dtypes as dt
from .args import (_class_of, _launch_key, _NoLaunchKey, bind_pointer_heaps, classify, constexpr_value, convert_foreign,
                   describe, is_foreign_array, make_binder, plain_array, split_launch_options, to_numpy)
from .errors import ArgumentError, DvmError, LaunchError, for_user, user_frames
from .frontend.source import KernelFunction
from .frontend.specs import ConstexprSpec, DescriptorSpec, ParamSpec, ScalarSpec, TensorSpec
from .trace import record as trace_record
from .vm.container import ParamInfo, TargetInfo

MAX_INSTANCES = 256


@dataclass
class CacheInfo:
    """How often a kernel was built (or loaded from the disk cache), encoded, and launched from a cached
    instance."""

    builds: int = 0
    encodes: int = 0
    hits: int = 0
    launches: int = 0
    loads: int = 0  # builds read from the disk cache (dvmlang/cache.py) instead of being made


@dataclass(frozen=True, slots=True)
class BuildKey:
    """What names one build of a kernel: the spec of every parameter, in order, and the device profile."""

    specs: tuple[ParamSpec, ...]
    profile_id: int


_tuple_new = tuple.__new__  # a NamedTuple made as tuple.__new__(cls, values): its __new__ is a Python function


class InstanceKey(NamedTuple):
    """What names one encoded instance of a build: the launch keys of the runtime values (``_launch_key``)
    and the grid (three ints)."""

    build: "Build"
    launch_keys: tuple
    grid: tuple


class LastLaunch(NamedTuple):
    """The latest launch that went through a binding plan: a relaunch with the same ``key`` (grid, profile,
    per-argument launch keys) reuses its build and bytecode outright, and binds its arguments as ``plan``
    says (``_Plan.checks``)."""

    key: tuple
    build: "Build"
    bytecode: object
    plan: "_Plan"


class Build:
    """One specialisation of a kernel: its IR, instruction template and instance encoder. ``parts`` makes it from
    a build read from the disk cache (``kernel_cache``): (global reads, template, params, written params); its
    IR is then made again only if asked for (``Kernel.ir``)."""

    def __init__(self, kernel: "Kernel", specs: tuple[ParamSpec, ...], profile, parts=None):
        from .vm.bytecode import Encoder
        self.profile = profile
        self.warnings: list = []  # (message, file, line) of the performance warnings the build raised
        self.callees: list = []  # the KernelSources the build inlined
        if parts is None:
            from .frontend.build import build_ir
            from .vm.lower import lower
            from .vm.lower.split import fit
            self.fn, ctx = build_ir(kernel.source, specs)
            self.warnings = ctx.warnings  # (the disk cache shows them again when it serves the build)
            self.callees = list(ctx.callees.values())
            self.global_reads = list(ctx.global_reads.values())
            # tiles that do not fit UB as written: in place, then (split_tiles) strip-mined (vm/lower/split.py)
            self.template = fit(self.fn, profile, lower, strip_mine=kernel.split_tiles)
            ub = self.template.footprint.get("ub", 0)
            self.template.double_buffer = profile.double_buffer and 2 * ub <= profile.ub_bytes
            self.params = list(self.fn.params)
            self.written = _written_params(self.fn)
        else:
            self.fn = None
            self.global_reads, self.template, self.params, self.written = parts
        # hidden parameters a tl.pointer_type cast added (frontend/blockptr.py): a heap and its base per dtype
        self.heaps = [i for i, p in enumerate(self.params) if hasattr(p, "pointer_tables")]
        sources = _embedded_sources(self.template.debug)
        target = TargetInfo(profile.name, profile.vector_cores, profile.cube_cores, profile.ub_bytes,
                            profile.l1_bytes, profile.l0a_bytes, profile.l0b_bytes, profile.l0c_bytes)
        infos = [ParamInfo(p.kind, p.name, p.dtype, p.rank) for p in self.params]
        self.encoder = Encoder(self.template, infos, target, sources)

    def still_valid(self) -> bool:
        """Whether every global the build read as a constant still has the value it read."""
        for globs, name, value in self.global_reads:
            cur = globs.get(name)
            cur = getattr(cur, "value", cur) if type(cur).__name__ == "constexpr" else cur
            if type(cur) is not type(value) or cur != value:
                return False
        return True


def _written_params(fn) -> set[int]:
    out = set()
    for op in fn.walk():
        if op.kind in ("dma_store", "scatter", "atomic", "store"):
            out.add(op.attrs["tensor"])
    return out


def _embedded_sources(debug) -> dict:
    spans: dict[str, list[int]] = {}
    for _, loc in debug:
        s = spans.setdefault(loc.file, [loc.line, loc.line])
        s[0] = min(s[0], loc.line)
        s[1] = max(s[1], loc.line)
    out = {}
    for f, (lo, hi) in spans.items():
        lines = linecache.getlines(f)
        if lines:
            lo = max(1, lo - 3)
            out[f] = (lo, "".join(lines[lo - 1:hi]))
    return out


class Kernel(KernelFunction):
    """A ``@dvmlang.kernel`` function. Launch with ``kernel[grid](*args, **constexprs)``."""

    # whether tiles too big for UB may be strip-mined (vm/lower/split.py); else a BufferOverflowError
    split_tiles = False

    def __init__(self, fn):
        if not callable(fn):
            raise DvmError("@dvmlang.kernel decorates a function")
        functools.update_wrapper(self, fn)
        super().__init__(fn)
        self._builds: dict[BuildKey, Build] = {}
        self._instances: OrderedDict[InstanceKey, object] = OrderedDict()
        self._plans: dict = {}  # argument classes -> _Plan
        self._last: LastLaunch | None = None
        self.stats = CacheInfo()

    def __repr__(self) -> str:
        return f"<dvmlang.kernel {self.fn.__qualname__}>"

    def __getitem__(self, grid):
        # a launch is one call of Python code (as triton.jit's); nothing keeps the grid (a grid function may
        # close over the caller's tensors)
        return functools.partial(self._launch, grid)

    @user_frames
    def __call__(self, *args, **kwargs):
        raise DvmError(f"launch `{self.__name__}` with a grid: {self.__name__}[grid](...); inside another kernel "
                       "a call is inlined")

    def cache_info(self) -> CacheInfo:
        return self.stats

    # ---- binding -------------------------------------------------------------------------------------------
    def _bind(self, args, kwargs):
        src = self.source
        names = src.params
        if len(args) > len(names):
            raise ArgumentError(f"`{self.__name__}` takes {len(names)} arguments ({', '.join(names)}) but "
                                f"{len(args)} were given")
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise LaunchError(f"`{self.__name__}` has no parameter `{k}`; its parameters are {', '.join(names)}")
            if k in values:
                raise ArgumentError(f"`{self.__name__}` got two values for `{k}`")
            values[k] = v
        specs = []
        for name in names:
            if name not in values:
                if name in src.defaults:
                    values[name] = src.defaults[name]
                else:
                    what = "the dl.constexpr" if name in src.constexpr_params else "the argument"
                    raise LaunchError(f"`{self.__name__}` is missing {what} `{name}`"
                                      + (f"; pass it as a keyword: {self.__name__}[grid](..., {name}=...)"
                                         if name in src.constexpr_params else ""))
            v = values[name]
            if isinstance(v, np.ndarray) and v.__class__ is not np.ndarray:
                v = values[name] = plain_array(self.__name__, name, v)
            if name in src.constexpr_params:
                specs.append(ConstexprSpec(constexpr_value(self.__name__, name, v)))
            elif v is None:  # Triton: a None pointer is a compile-time None (`if p is not None:` folds)
                specs.append(ConstexprSpec(None))
            elif hasattr(v.__class__, "__dvm_descriptor__"):  # a host TensorDescriptor: checked, as DescriptorArgs
                v = values[name] = v.__dvm_descriptor__(self.__name__, name)
                specs.append(v.spec)
            else:
                if v.__class__ is not np.ndarray and is_foreign_array(v):
                    v = values[name] = to_numpy(self.__name__, name, v)  # torch, __dlpack__, __array_interface__
                specs.append(classify(self.__name__, name, v))
        return values, tuple(specs)

    def _build(self, specs: tuple[ParamSpec, ...], profile) -> Build:
        bkey = BuildKey(specs, id(profile))
        b = self._builds.get(bkey)
        if b is not None and b.profile is profile and (not b.global_reads or b.still_valid()):
            return b
        from . import kernel_cache
        loaded = kernel_cache.load(self, specs, profile)
        if loaded is None:
            b = Build(self, specs, profile)
            self.stats.builds += 1
            kernel_cache.store(self, specs, profile, b)
        else:
            b = Build(self, specs, profile, parts=loaded[0])
            b.warnings = loaded[1]
            self.stats.loads += 1
        self._builds[bkey] = b
        return b

    def _instance(self, build: Build, specs, values, grid):
        runtime = []
        arrays = {}
        for name, spec in zip(self.source.params, specs):
            if isinstance(spec, ConstexprSpec):
                continue
            v = values[name]
            if isinstance(spec, TensorSpec):
                arrays[len(runtime)] = v
            elif isinstance(spec, DescriptorSpec):  # base, shape, strides: the order build_ir made the params
                arrays[len(runtime)] = v.base
                runtime += [v.base, *v.shape, *v.strides]
                continue
            runtime.append(v)
        if build.heaps:
            bind_pointer_heaps(self.__name__, build, runtime, arrays)
        try:
            ikey = InstanceKey(build, tuple(map(_launch_key, runtime)), grid)
        except (TypeError, _NoLaunchKey):
            ikey = None
        return self._lookup_or_encode(build, ikey, runtime, grid), arrays

    def _lookup_or_encode(self, build: Build, ikey: InstanceKey | None, runtime: list, grid):
        """The cached instance for ``ikey`` or a new one encoded from the runtime parameter values (and not
        cached when ``ikey`` is None: a value without a launch key)."""
        bc = self._instances.get(ikey) if ikey is not None else None
        if bc is not None:
            self._instances.move_to_end(ikey)
            self.stats.hits += 1
            return bc
        return self._encode(build, ikey, runtime, grid)

    def _encode(self, build: Build, ikey: InstanceKey | None, runtime, grid):
        t0 = time.perf_counter()
        bc = build.encoder.encode_values(runtime, grid, ikey.launch_keys if ikey is not None else None)
        bc.encode_s = time.perf_counter() - t0
        self.stats.encodes += 1
        if ikey is not None:
            self._instances[ikey] = bc
            if len(self._instances) > MAX_INSTANCES:
                self._instances.popitem(last=False)
        return bc

    def _keys(self, grid, args, kwargs, profile):
        """(launch key, per-argument keys, per-keyword keys) of the raw arguments: the grid, the device profile
        and per argument its dtype, shape and strides (an array; its contiguity follows from them) or its type
        and exact value. Raises ``TypeError`` or ``_NoLaunchKey`` for an argument that has none."""
        akeys = []
        for v in args:  # arrays inline: the common case
            akeys.append((v.dtype, v.shape, v.strides) if v.__class__ is np.ndarray else _launch_key(v))
        akeys = tuple(akeys)
        kkeys = ()
        if kwargs:
            kkeys = tuple([(k, _launch_key(v)) for k, v in kwargs.items()])
        return (grid, id(profile), akeys, kkeys), akeys, kkeys

    def _prepare(self, grid, args, kwargs, device, want_arrays=True):
        """(device, build, bytecode, param index -> array; None for the last when ``want_arrays`` is False and a
        fast path found the instance: an encode has no use for them)."""
        if device is None:
            device = _default_device()
        profile = device.profile
        # Fast paths, keyed on the raw arguments (a grid function is never keyed: it may read anything).
        #  * The launch key — grid, device profile, and per argument dtype, shape and strides, or type and exact
        #    value — names one build and instance. A relaunch with the key of the previous launch reuses its
        #    result outright (``_launch`` for a launch).
        #  * Otherwise the argument classes (dtypes, ranks, contiguity, scalar types, constexpr values) name
        #    the build and the binding plan the ordinary path made for arguments of that class; the plan
        #    names the runtime values, whose launch keys and the grid name the instance (cached or encoded).
        ckey = None
        src = self._source or self.source  # (parsed on first use)
        cp = src.constexpr_mask
        if (grid.__class__ is tuple or grid.__class__ is int) and len(args) <= len(cp):
            last = self._last
            keys = None
            if last is not None:
                build = last.build
                if build.profile is profile and (not build.global_reads or build.still_valid()):
                    keys = last.plan.bind(args, kwargs)
            if keys is not None:  # the previous launch's argument class: its plan
                akeys, kkeys = keys
                lkey = (grid, id(profile), akeys, kkeys)
                plan = last.plan
                lk = last.key  # (the arguments first: they differ for a new shape)
                if lk[2] == akeys and lk[3] == kkeys and lk[1] == lkey[1] and \
                        (grid is lk[0] or _equal_grid(grid, lk[0])):
                    self.stats.hits += 1
                    return device, build, last.bytecode, {i: (args[at] if at.__class__ is int else kwargs[at])
                                                          for i, at in plan.positions} if want_arrays else None
            else:
                try:
                    lkey, akeys, kkeys = self._keys(grid, args, kwargs, profile)
                    ckey = (id(profile),) + class_key(args, akeys, kkeys, cp, src.constexpr_params)
                    plan = self._plans.get(ckey)
                except (TypeError, _NoLaunchKey):
                    conv = convert_foreign(self.__name__, src, args, kwargs)
                    if conv is not None:  # torch tensors and the like: as numpy views, they take the fast paths
                        return self._prepare(grid, conv[0], conv[1], device, want_arrays)
                    ckey = plan = None
            if plan is not None:
                build = plan.build
                if build.profile is profile and (not build.global_reads or build.still_valid()):
                    grid_t = _grid3(self.__name__, grid)
                    if plan.all_args:  # the arguments are the runtime parameters, in order
                        runtime, keys = args, akeys
                    else:
                        sources = plan.sources
                        kw = dict(kkeys)
                        runtime = [args[at] if at.__class__ is int else kwargs[at] for at in sources]
                        keys = tuple([akeys[at] if at.__class__ is int else kw[at] for at in sources])
                    ikey = _tuple_new(InstanceKey, (build, keys, grid_t))  # (InstanceKey(...) without its frame)
                    bc = self._instances.get(ikey)
                    if bc is None:
                        bc = self._encode(build, ikey, runtime, grid_t)
                    else:
                        self._instances.move_to_end(ikey)
                        self.stats.hits += 1
                    self._last = _tuple_new(LastLaunch, (lkey, build, bc, plan))
                    return device, build, bc, {i: runtime[i] for i in plan.tensors} if want_arrays else None
        values, specs = self._bind(args, kwargs)
        grid_t = _grid(self.__name__, grid, values)
        build = self._build(specs, profile)
        bc, arrays = self._instance(build, specs, values, grid_t)
        if ckey is not None:
            plan = _Plan.make(src, build, specs, len(args), kwargs, ckey)
            if plan is not None:
                if len(self._plans) >= MAX_INSTANCES:
                    del self._plans[next(iter(self._plans))]
                self._plans[ckey] = plan
                self._last = LastLaunch(lkey, build, bc, plan)
        return device, build, bc, arrays

    # ---- public entry points ----------------------------------------------------------------------------
    @user_frames
    def prepare(self, grid, *args, device=None, **kwargs):
        """Bind, build and encode a launch without running it: ``(device, bytecode, arrays, alias groups)``,
        ready for ``device.run`` or, with other launches, ``device.run_stack``."""
        return self._prepared(grid, args, split_launch_options(self.__name__, self.source.params, kwargs), device)

    @user_frames
    def run(self, grid, *args, trace=False, device=None, name=None, **kwargs):
        """Same as ``kernel[grid](*args, ...)``."""
        return self._launch(grid, *args, trace=trace, device=device, name=name, **kwargs)

    # the body of prepare, which a launch calls directly
    def _prepared(self, grid, args, kwargs, device, launching=False):
        device, build, bc, arrays = self._prepare(grid, args, kwargs, device)
        if build.heaps and not launching:
            raise LaunchError(f"`{self.__name__}` reads pointer tables (tl.pointer_type): launch it with "
                              f"{self.__name__}[grid](...); prepare() hands its arrays to the caller, who would "
                              "not copy the tensors it points into back")
        for i in build.written:
            a = arrays.get(i)
            if a is not None and not a.flags.writeable:
                raise _read_only(self.__name__, build.params[i].name)
        # C-contiguous (checked when bound): flat views, not copies; a 1-d array is its own flat view
        flat = {i: a if a.ndim == 1 else a.ravel() for i, a in arrays.items()}
        return device, bc, flat, _alias_groups(arrays)

    def _launch(self, grid, *args, trace=False, device=None, name=None, **kwargs):
        """``kernel[grid](*args, ...)`` (and ``run``): bind, find or encode the instance, run it. A dvmlang error
        reaches the caller as ``user_frames`` makes it, inlined: a launch is one call of Python code."""
        try:
            if device is None:
                device = _default_device()
            # A relaunch with the key of the previous launch (grid, profile, per-argument launch keys) reuses its
            # bytecode outright, its arguments checked and bound as ``_prepared`` would (``_Plan.relaunch``).
            # (Its keywords are the plan's parameters, by count and name: a launch option among them, not a
            # parameter, is another key; so the options are split off only on the way to ``_prepared``.)
            last = self._last
            bound = None
            if last is not None:
                key, build, profile = last.key, last.build, device.profile
                if (grid is key[0] or _equal_grid(grid, key[0])) and key[1] == id(profile) and \
                        build.profile is profile and (not build.global_reads or build.still_valid()):
                    bound = last.plan.relaunch(args, kwargs, key)
            if bound:  # (None: another key; False: a read-only array the kernel stores to, which _prepared reports)
                flat, own = bound
                plan = last.plan
                # distinct arrays that own their memory cannot overlap; otherwise what overlaps is one alias group
                alias = plan.identity if own else _alias_groups(
                    {i: args[at] if at.__class__ is int else kwargs[at] for i, at in plan.positions})
                bc = last.bytecode
                self.stats.hits += 1
            else:
                if kwargs:
                    kwargs = split_launch_options(self.__name__, (self._source or self.source).params, kwargs)
                try:
                    device, bc, flat, alias = self._prepared(grid, args, kwargs, device, launching=True)
                except _EmptyGrid:
                    return None  # a grid with no programs: nothing runs (as in Triton)
            session = trace_record.active_session()
            if trace:
                session = trace_record.Session() if not isinstance(trace, trace_record.Session) else trace
            self.stats.launches += 1
            rec = device.run(bc, flat, trace=session, name=name or self.__name__, alias_groups=alias)
            if not bound:  # a relaunch binds no pointer-table heap (build.heaps: no plan, no relaunch)
                for a in flat.values():
                    if a.__class__ is not np.ndarray and hasattr(a, "copy_back"):
                        a.copy_back()  # a pointer-table heap: the tensors it holds get what the launch stored
            rec.encode_s = bc.encode_s
            return rec
        except DvmError as err:
            raise for_user(err)  # about the code that called here; DVMLANG_TRACEBACK=1 shows dvmlang's frames

    def encode(self, grid, *args, device=None, **kwargs):
        """The ``Bytecode`` of one launch instance, without running it. (Its errors reach the caller as
        ``user_frames`` makes them, inlined as in ``_launch``: what a new shape costs is this call.)"""
        try:
            if kwargs:
                kwargs = split_launch_options(self.__name__, (self._source or self.source).params, kwargs)
            return self._prepare(grid, args, kwargs, device, want_arrays=False)[2]
        except DvmError as err:
            raise for_user(err)  # about the code that called here; DVMLANG_TRACEBACK=1 shows dvmlang's frames

    @user_frames
    def warmup(self, *args, grid, device=None, **kwargs):
        """Triton's ``warmup``: bind, build and encode one launch without running it; returns its ``Bytecode``
        (a relaunch with arguments of the same class reuses the build, and with the same shapes the instance)."""
        _, _, bc, _ = self._prepare(grid, args, split_launch_options(self.__name__, self.source.params, kwargs),
                                    device, want_arrays=False)
        return bc

    @user_frames
    def export(self, path, grid, *args, device=None, **kwargs):
        """Encode an instance and save it as a ``.dvmb`` file (ahead-of-time export)."""
        bc = self.encode(grid, *args, device=device, **kwargs)
        return bc.save(path)

    @user_frames
    def ir(self, *args, device=None, **kwargs) -> str:
        """The tile IR of the build these arguments select, as text."""
        from .ir.printer import print_function
        from .npu.device import default_device
        device = device or default_device()
        _, specs = self._bind(args, split_launch_options(self.__name__, self.source.params, kwargs))
        b = self._build(specs, device.profile)
        if b.fn is None:  # read from the disk cache: the IR is made again
            from .frontend.build import build_ir
            b.fn = build_ir(self.source, specs)[0]
        return print_function(b.fn)

    @user_frames
    def build_for(self, *args, device=None, **kwargs) -> Build:
        from .npu.device import default_device
        device = device or default_device()
        _, specs = self._bind(args, split_launch_options(self.__name__, self.source.params, kwargs))
        return self._build(specs, device.profile)


def kernel(fn=None, *, split_tiles: bool = False, **options):
    """Decorator: ``@dvmlang.kernel`` (or ``@dvmlang.kernel()``) turns a Python function into a dvmlang kernel.
    ``split_tiles=True`` lets loops over blocks too big for on-chip memory run strip-mined (as Triton-layer
    kernels do) instead of failing with a ``BufferOverflowError``. No other option (``triton.jit`` takes
    Triton's and says what each does here)."""
    if options:
        raise DvmError(f"dvmlang.kernel takes no options but split_tiles, got {', '.join(f'`{k}`' for k in options)}; "
                       "launch options go to the launch (kernel[grid](..., num_warps=4)); Triton's jit options are "
                       "taken by dvmlang.triton.jit")

    def make(f):
        k = Kernel(f)
        k.split_tiles = bool(split_tiles)
        return k
    return make if fn is None else make(fn)


class _Plan:
    """How the raw arguments of one argument class bind to a build: which argument (position or keyword)
    feeds each runtime parameter. Made by the ordinary binding path; replaying it for arguments of the
    same class gives the same parameter values, in the same order, that binding would. ``checks``: per tensor
    parameter (runtime index, argument position or keyword, whether the kernel stores to it, whether it is 1-d
    and so its own flat view), what a relaunch checks and binds (``Kernel._launch``); ``identity``: the
    alias groups of distinct arrays that own their memory, each its own group."""

    __slots__ = ("build", "sources", "tensors", "positions", "all_args", "checks", "identity", "bind", "relaunch")

    @classmethod
    def make(cls, src, build, specs, nargs, kwargs, ckey):
        if build.heaps or any(s.__class__ is DescriptorSpec for s in specs):
            return None  # hidden heaps are bound from the tables' contents at every launch; a descriptor expands
        sources = []
        tensors = []
        checks = []
        for i, (name, spec) in enumerate(zip(src.params, specs)):
            if isinstance(spec, ConstexprSpec):
                continue
            if i < nargs:
                at = i
            elif name in kwargs:
                at = name
            else:
                return None  # a runtime parameter from a default value: not worth a plan
            if isinstance(spec, TensorSpec):
                tensors.append(len(sources))
                checks.append((len(sources), at, len(sources) in build.written, spec.rank == 1))
            sources.append(at)
        plan = cls()
        plan.build, plan.sources, plan.tensors = build, sources, tensors
        plan.positions = [(i, sources[i]) for i in tensors]  # (runtime index, argument position or keyword)
        plan.all_args = sources == list(range(nargs))
        plan.checks = tuple(checks)
        plan.identity = {i: i for i in tensors}
        # the launch keys of arguments of this class (None for others), and a relaunch's checks: args.make_binder
        plan.bind = make_binder(ckey[1], src.constexpr_mask, ckey[2], src.constexpr_params)
        plan.relaunch = make_binder(ckey[1], src.constexpr_mask, ckey[2], src.constexpr_params, plan.checks)
        return plan


def _equal_grid(grid, kept) -> bool:
    """Whether ``grid`` is the grid ``kept`` (a launch key's) as it is: an int or a tuple of ints, Python's own,
    equal to it. A bool, a float or a numpy value can compare equal to a valid grid (``(2,) == (2.0,)``,
    ``(2,) == (np.array([2]),)``) and still be an error, and an array's ``==`` is not even a bool. (Callers test
    ``grid is kept`` first: a literal grid is the same object each time.)"""
    c = grid.__class__
    return (c is int or (c is tuple and all([g.__class__ is int for g in grid]))) and grid == kept


def _grid3(kname, grid):
    """``_grid`` without its general machinery for the common case, a tuple of 1-3 plain positive ints."""
    if grid.__class__ is tuple:
        n = len(grid)
        if n == 1:
            g = grid[0]
            if g.__class__ is int and g >= 1:
                return (g, 1, 1)
        elif 2 <= n <= 3 and all([g.__class__ is int and g >= 1 for g in grid]):
            return grid + (1,) * (3 - n)
    return _grid(kname, grid, None)


_DEFAULT_DEVICE = None


def _default_device():
    global _DEFAULT_DEVICE
    if _DEFAULT_DEVICE is None:
        from .npu.device import default_device
        _DEFAULT_DEVICE = default_device
    return _DEFAULT_DEVICE()


def _grid(kname, grid, values):
    if callable(grid):
        meta = dict(values)
        try:
            grid = grid(meta)
        except Exception as e:  # noqa: BLE001
            raise LaunchError(f"the grid function of `{kname}` failed: {type(e).__name__}: {e}") from None
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise LaunchError(f"the grid of `{kname}` must be an int or a tuple of 1 to 3 ints, got {grid!r}")
    out = []
    for i, g in enumerate(grid):
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
            raise LaunchError(f"grid dimension {i} of `{kname}` must be an int, got {type(g).__name__} {g!r}")
        g = int(g)
        if g < 0:
            raise LaunchError(f"grid dimension {i} of `{kname}` is {g}; a grid dimension cannot be negative")
        out.append(g)
    if 0 in out:
        raise _EmptyGrid(f"grid {tuple(out)} of `{kname}` has no programs: a launch runs nothing (and returns None), "
                         "but there is nothing to encode or prepare")
    while len(out) < 3:
        out.append(1)
    return tuple(out)


class _EmptyGrid(LaunchError):
    """A grid with a dimension of 0: a launch returns None without running; encoding it is this error."""


def class_key(args, akeys, kkeys, constexpr_mask, constexpr_names) -> tuple:
    """The argument class of a launch from its arguments and their launch keys (``Kernel._keys``): per positional
    argument its launch key when it is a constexpr, else its class (arrays by dtype, rank and contiguity,
    ``args._class_of`` for the rest); per keyword (name, the same). It names the binding plan and, with the
    device profile, the build (``args.make_binder`` tests arguments against one)."""
    nd = np.ndarray
    return (tuple([k if c else (k[0], len(k[1]), a.flags.c_contiguous) if a.__class__ is nd else _class_of(k)
                   for a, k, c in zip(args, akeys, constexpr_mask)]),
            tuple([(n, k if n in constexpr_names else _class_of(k)) for n, k in kkeys]))


def _read_only(kname: str, name: str) -> ArgumentError:
    return ArgumentError(f"`{name}` is read-only but `{kname}` stores to it; pass a writeable array")


def _alias_groups(arrays: dict[int, np.ndarray]) -> dict[int, int]:
    vals = arrays.values()
    if all([a.flags.owndata for a in vals]) and len(set(map(id, vals))) == len(arrays):
        return dict(zip(arrays, arrays))  # distinct arrays that own their memory cannot overlap
    keys = list(arrays)
    group = {k: k for k in keys}
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if group[b] == b and np.may_share_memory(arrays[a], arrays[b]):
                group[b] = group[a]
    return group


@user_frames
def run(bytecode, *args, device=None, trace=False):
    """Run a ``Bytecode`` (for example one loaded from a ``.dvmb`` file) on new arrays and scalars of the same
    signature: one argument per runtime parameter, in order."""
    from .npu.device import default_device
    from .trace.record import Session, active_session
    from .vm.bytecode import Bytecode
    if not isinstance(bytecode, Bytecode):
        raise ArgumentError(f"dvmlang.run expects a dvmlang.Bytecode, got {type(bytecode).__name__}")
    bytecode.validate()
    params = bytecode.params
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise ArgumentError(f"`{bytecode.name}` takes {len(params)} arguments ({names}) but {len(args)} were given")
    infos, scalars, arrays = [], {}, {}
    for i, (p, v) in enumerate(zip(params, args)):
        if isinstance(v, np.ndarray) and v.__class__ is not np.ndarray:
            v = plain_array(bytecode.name, p.name, v)
        elif v.__class__ is not np.ndarray and is_foreign_array(v):
            v = to_numpy(bytecode.name, p.name, v)
        spec = classify(bytecode.name, p.name, v)
        if p.kind == "tensor":
            if not isinstance(spec, TensorSpec) or spec.dtype is not p.dtype or spec.rank != p.rank:
                raise ArgumentError(f"argument `{p.name}` must be a {p.rank}-d {p.dtype.name} array, got "
                                    f"{describe(v)}")
            infos.append(ParamInfo("tensor", p.name, p.dtype, v.ndim, v.shape,
                                   tuple(s // v.itemsize for s in v.strides)))
            arrays[i] = v
        else:
            if not isinstance(spec, ScalarSpec):
                raise ArgumentError(f"argument `{p.name}` must be a {p.dtype.name} scalar, got {describe(v)}")
            if p.dtype.is_int and not isinstance(v, (int, np.integer)):
                raise ArgumentError(f"argument `{p.name}` must be an integer, got {type(v).__name__}")
            if p.dtype.is_int and not dt.int_fits(int(v), p.dtype):
                raise ArgumentError(f"argument `{p.name}` = {v} does not fit {p.dtype.name}")
            infos.append(ParamInfo("scalar", p.name, p.dtype))
            scalars[i] = v
    bc = bytecode.rebind(infos, scalars)
    device = device or default_device()
    session = Session() if trace else active_session()
    return device.run(bc, {i: a.reshape(-1) for i, a in arrays.items()}, trace=session, name=bc.name,
                      alias_groups=_alias_groups(arrays))
