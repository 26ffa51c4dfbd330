"""``triton.knobs``: Triton's configuration objects, so programs and Triton's test helpers that read or set them
import and run. No knob has an effect on dvmlang (docs/triton.md): compilation, caching and the device are
configured with dvmlang's own options (``DVMLANG_*`` variables, ``dvmlang.npu.Device``). ``compilation.listener``
is never called."""

from __future__ import annotations

import contextlib
import copy as _copy


class base_knobs:  # noqa: N801 - Triton's name
    knob_descriptors: dict = {}

    def copy(self):
        return _copy.copy(self)

    def reset(self):
        return self

    @contextlib.contextmanager
    def scope(self):
        saved = dict(self.__dict__)
        try:
            yield self
        finally:
            self.__dict__.clear()
            self.__dict__.update(saved)


class _Compilation(base_knobs):
    def __init__(self):
        self.listener = None
        self.override = False
        self.dump_ir = False
        self.always_compile = False


class _Runtime(base_knobs):
    def __init__(self):
        self.interpret = False
        self.debug = False
        self.override_arch = None
        self.launch_enter_hook = None
        self.launch_exit_hook = None


class _Cache(base_knobs):
    def __init__(self):
        self.dir = None
        self.home_dir = None


class _Autotuning(base_knobs):
    def __init__(self):
        self.cache = False
        self.print = False


class _Tool(base_knobs):
    def __init__(self, name):
        self.name = name
        self.version = None
        self.path = None


class _Nvidia(base_knobs):
    def __init__(self):
        self.ptxas = _Tool("ptxas")


class _Amd(base_knobs):
    def __init__(self):
        self.use_buffer_ops = False


compilation = _Compilation()
runtime = _Runtime()
cache = _Cache()
autotuning = _Autotuning()
nvidia = _Nvidia()
amd = _Amd()
propagate_env = True

__all__ = ["base_knobs", "compilation", "runtime", "cache", "autotuning", "nvidia", "amd", "propagate_env"]
