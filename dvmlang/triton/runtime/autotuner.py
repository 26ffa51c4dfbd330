"""``triton.runtime.autotuner``: dvmlang's autotuner (``dvmlang.autotune``)."""

from ...autotune import Autotuner, Config, Heuristics, autotune, heuristics

__all__ = ["Autotuner", "Config", "Heuristics", "autotune", "heuristics"]
