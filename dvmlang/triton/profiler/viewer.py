"""``triton.profiler.viewer``: read a ``.hatchet`` file ``proton.finalize`` wrote and print its tree.

``parse(metric_names, file_name)`` returns ``(tree, metrics)``: the tree (nested dicts as in the file) and the
metric names to show. Besides the file's own metrics (``time (ns)``, ``count``, scope metrics), the derived
metrics Triton's viewer offers are computed from them: ``time/s``, ``time/ms``, ``time/us``, ``time/ns``,
``avg_time/ms``, and ``tflop16/s``, ``tflop8/s``, ``tflop/s``, ``gbyte/s`` from a frame's ``flops16``,
``flops8``, ``flops``, ``bytes`` over its simulated time (nan where the time is 0, host code, or the frame has
no such metric: a kernel's frame has only its time and count, since ``launch_metadata`` is not called here).
"""

from __future__ import annotations

import json

from ...errors import DvmError

_TIME = {"time/s": 1e-9, "time/ms": 1e-6, "time/us": 1e-3, "time/ns": 1.0}
_RATE = {"tflop16/s": ("flops16", 1e-12), "tflop8/s": ("flops8", 1e-12), "tflop/s": ("flops", 1e-12),
         "gflop/s": ("flops", 1e-9), "gbyte/s": ("bytes", 1e-9), "tbyte/s": ("bytes", 1e-12)}


def _value(m: dict, name: str) -> float:
    t = m.get("time (ns)", 0.0)
    if name in _TIME:
        return t * _TIME[name]
    if name == "avg_time/ms":
        return t * 1e-6 / m["count"] if m.get("count") else float("nan")
    if name in _RATE:
        key, scale = _RATE[name]
        return m[key] * scale / (t * 1e-9) if t and key in m else float("nan")
    if name in m:
        return m[name]
    raise DvmError(f"proton viewer: no metric {name!r} (have {', '.join(sorted(m))}, and the derived "
                   f"{', '.join(list(_TIME) + ['avg_time/ms'] + list(_RATE))})")


def parse(metric_names, file_name):
    with open(file_name) as f:
        data = json.load(f)
    tree = data[0] if isinstance(data, list) else data
    for name in metric_names:
        _value(tree["metrics"], name)  # an unknown name fails here, as Triton's parse does
    return tree, list(metric_names)


def format_tree(tree, metrics) -> str:
    lines = []

    def walk(node, depth):
        vals = " ".join(f"{_value(node['metrics'], m):.3f}" for m in metrics)
        lines.append(f"{'  ' * depth}{vals} {node['frame']['name']}")
        for c in node.get("children", []):
            walk(c, depth + 1)
    walk(tree, 0)
    return "\n".join(lines)


def print_tree(tree, metrics, depth=100, format=None, print_sorted=False):
    print(format_tree(tree, metrics))
