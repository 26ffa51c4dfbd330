"""The examples of examples/multi_npu/ as modules, for the tests that run them (one import each per session)."""

import importlib.util
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent.parent / "examples" / "multi_npu"


def load(name: str):
    mod_name = f"dvmlang_multi_npu_{name}"
    if mod_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(mod_name, DIR / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[mod_name]
