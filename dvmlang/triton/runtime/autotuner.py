"""``triton.runtime.autotuner``: dvmlang's autotuner (``dvmlang.autotune``)."""

from ...autotune import Autotuner, Heuristics, autotune, heuristics
from ..config import Config

__all__ = ["Autotuner", "Config", "Heuristics", "autotune", "heuristics"]
