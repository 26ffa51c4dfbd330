"""``triton.Config``: ``dvmlang.Config``, with GPU backend compile options taken out of the constexpr values.

Triton passes AMD's compile options through a config's kwargs (``triton.Config({"BLOCK_M": 128,
"matrix_instr_nonkdim": 16, "waves_per_eu": 2}, ...)``); the launcher hands them to the backend, not to the
kernel. Here they have no effect: they are kept in ``backend_options`` (and shown by ``repr``), and the rest of
the kwargs are the kernel's constexprs as usual.
"""

from __future__ import annotations

from ..autotune import Config as _Config
from ..errors import LaunchError

# backend compile options Triton programs put in Config kwargs, and why each has no effect here
BACKEND_OPTIONS = {
    "matrix_instr_nonkdim": "AMD's MFMA instruction shape; the cube unit has one matmul shape",
    "waves_per_eu": "AMD's occupancy hint; a program runs on one core",
    "kpack": "AMD's operand packing for MFMA",
    "instruction_sched_variant": "AMD's instruction scheduling variant",
}


class Config(_Config):
    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook=None, ir_override=None):
        if ir_override is not None:
            raise LaunchError("Config(ir_override=...) replaces Triton's compiler IR, which dvmlang does not have")
        kwargs = dict(kwargs) if isinstance(kwargs, dict) else kwargs
        backend = {}
        if isinstance(kwargs, dict):
            backend = {k: kwargs.pop(k) for k in list(kwargs) if k in BACKEND_OPTIONS}
        super().__init__(kwargs, num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas, maxnreg=maxnreg,
                         pre_hook=pre_hook)
        self.backend_options = backend

    def __repr__(self) -> str:
        base = super().__repr__()
        extra = ", ".join(f"{k}: {v}" for k, v in self.backend_options.items())
        return f"{base}, {extra}" if extra and base else base or extra


__all__ = ["Config", "BACKEND_OPTIONS"]
