"""One candidate of an automatic tuning, estimated or simulated: what an executor's worker runs.

A ``Trial`` holds the launch as the caller made it (the kernel or its heuristics wrapper, the grid, the
arguments) and runs ``("estimate", config)``: encode the instance and ask the cost model, or
``("simulate", config)``: launch it on the simulated device from a cold L2 and return its cycles. Every
writeable array is saved before and restored after (a trial changes nothing the caller sees, in this process
or in a worker). A trial pickles (for Ray) without its device; a worker makes a device of the same profile.
"""

from __future__ import annotations

import numpy as np

from ..errors import DvmError
from .space import PROGRAMS


def _writeable_views(values) -> list:
    """Zero-copy numpy views of the writeable arrays among ``values`` (numpy arrays, torch tensors, ...)."""
    from ..args import is_foreign_array, to_numpy
    views, seen = [], set()
    for v in values:
        if hasattr(v.__class__, "__dvm_descriptor__"):
            v = v.base  # a host TensorDescriptor: the kernel writes through it into its base
        if is_foreign_array(v):
            try:
                v = to_numpy("autotune", "argument", v)
            except DvmError:
                continue  # not an array dvmlang can launch with: the launch itself will say so
        if isinstance(v, np.ndarray) and v.flags.writeable and id(v) not in seen:
            seen.add(id(v))
            views.append(v)
    return views


def _trial_session():
    from ..trace.record import Session
    return Session(max_events=0, summary_only=True)


def grid_with(grid, programs: dict | None):
    """``grid`` (a tuple or a function of the meta-parameters) with the sizes of ``programs`` (axis -> size)."""
    if not programs:
        return grid

    def resolve(meta):
        g = grid(meta) if callable(grid) else grid
        g = list(g) if isinstance(g, (tuple, list)) else [g]
        for axis, n in programs.items():
            while len(g) <= axis:
                g.append(1)
            g[axis] = n
        return tuple(g)
    return resolve


def split(config: dict, axis) -> tuple[dict, dict | None]:
    """(constexpr values, grid override) of a candidate dict."""
    kw = {k: v for k, v in config.items() if k != PROGRAMS}
    return kw, ({axis: int(config[PROGRAMS])} if PROGRAMS in config and axis is not None else None)


class Trial:
    def __init__(self, fn, grid, args, kwargs, arg_names, reset_to_zero, device, axis):
        self.fn, self.grid, self.args, self.kwargs = fn, grid, args, kwargs
        self.arg_names, self.reset_to_zero = list(arg_names), list(reset_to_zero)
        self.device, self.profile, self.axis = device, device.profile, axis

    def __getstate__(self):
        state = dict(self.__dict__)
        state["device"] = None
        return state

    def _device(self):
        if self.device is None:
            from ..npu.device import Device
            self.device = Device(self.profile)
        return self.device

    def __call__(self, item):
        what, config = item
        kw, programs = split(config, self.axis)
        grid = grid_with(self.grid, programs)
        if what == "estimate":
            return self.estimate(grid, kw)
        return self.simulate(grid, kw)

    def _kernel_and_kwargs(self, kw):
        """The innermost kernel and the keywords of a launch through any heuristics wrappers."""
        from ..runtime import Kernel
        fn, kwargs = self.fn, {**self.kwargs, **kw}
        while not isinstance(fn, Kernel):
            values = getattr(fn, "values", None)
            if values:
                named = {**dict(zip(self.arg_names, self.args)), **kwargs}
                for name, rule in values.items():
                    kwargs[name] = rule(named)
            fn = fn.fn
        return fn, kwargs

    def estimate(self, grid, kw) -> float:
        from .model import estimate
        kernel, kwargs = self._kernel_and_kwargs(kw)
        bc = kernel.encode(grid, *self.args, device=self._device(), **kwargs)
        return estimate(bc, self.profile).cycles

    def simulate(self, grid, kw) -> float:
        device = self._device()
        saved = [(a, a.copy()) for a in _writeable_views((*self.args, *self.kwargs.values()))]
        try:
            named = {**dict(zip(self.arg_names, self.args)), **self.kwargs}
            for name in self.reset_to_zero:
                for a in _writeable_views((named[name],)):
                    a[...] = 0
            with _trial_session():
                device.l2.flush()
                rec = self.fn.run(grid, *self.args, **self.kwargs, **kw, device=device)
            return float(rec.cycles)
        finally:
            for a, copy in saved:
                np.copyto(a, copy)
