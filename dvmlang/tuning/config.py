"""``dvmlang.Config`` (``dvmlang.autotune.Config``): one autotuning candidate."""

from __future__ import annotations

from ..errors import LaunchError

# Config options that shape a launch on a GPU. Each is accepted; docs/triton.md says what it means here.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class Config:
    """One candidate: constexpr values (``kwargs``) and launch options, as Triton's ``triton.Config``.

    ``num_warps``, ``num_ctas`` and ``maxnreg`` have no effect on the simulated NPU (a program runs on one
    core, and its tiles are whole-tile instructions, not threads); ``num_stages`` is recorded but buffering
    depth is chosen by the compiler. ``pre_hook(nargs)`` runs before each launch with this config."""

    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook=None):
        if not isinstance(kwargs, dict):
            raise LaunchError(f"Config takes a dict of constexpr values, got {type(kwargs).__name__}")
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        self.programs = None  # dvmlang's own: {axis: grid size} of a persistent kernel (configs="auto" sets it)

    def all_kwargs(self) -> dict:
        """The constexpr values and the launch options that are set, as one dict (Triton's method)."""
        opts = {k: getattr(self, k) for k in LAUNCH_OPTIONS if getattr(self, k) is not None}
        return {**self.kwargs, **opts}

    def __repr__(self) -> str:
        parts = [f"{k}: {v}" for k, v in self.all_kwargs().items()]
        parts += [f"programs[{a}]: {n}" for a, n in (self.programs or {}).items()]
        return ", ".join(parts)
