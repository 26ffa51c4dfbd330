"""``dvmlang.torch.explain(model, *inputs)``: the partition of a model under the dvmlang backend.

It compiles ``model`` afresh (its own dynamo cache entry: the backend is a new object), calls it once on the
inputs (under ``torch.no_grad()`` unless ``grad=True``), and reports for every FX graph made: the fused regions
with their ops (and the dvmlang groups each one became), the fallbacks and why, and the launches one call
makes. ``str(report)`` is plain text; it prints with rich as a tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import backend as be
from . import stats as st
from .partition import op_name


@dataclass
class GraphReport:
    name: str
    steps: list  # (kind, [op names], reason, [group names])
    fallbacks: dict
    launches: int = 0


@dataclass
class Explanation:
    graphs: list = field(default_factory=list)
    launches_per_call: int = 0
    fallback_ops: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    runtime_reasons: dict = field(default_factory=dict)  # region -> why a call ran it eagerly

    @property
    def fallback_reasons(self) -> dict:
        """Every op that ran in torch eager, with its reason (the first graph's that gave one)."""
        out: dict = {}
        for g in self.graphs:
            for k, v in g.fallbacks.items():
                out.setdefault(k, v)
        for k in self.fallback_ops:
            out.setdefault(k, "ran eagerly at run time: " + "; ".join(self.runtime_reasons.values()))
        return out

    @property
    def regions(self) -> int:
        return sum(1 for g in self.graphs for s in g.steps if s[0] == "region")

    def lines(self) -> list[str]:
        out = [f"dvmlang.torch.explain: {len(self.graphs)} graph(s), {self.regions} fused region(s), "
               f"{self.launches_per_call} launch(es) per call, fallbacks: "
               + (", ".join(f"{k} x{v}" for k, v in sorted(self.fallback_ops.items())) or "none")]
        for g in self.graphs:
            out.append(f"graph {g.name}")
            for kind, names, reason, groups in g.steps:
                if kind == "region":
                    out.append(f"  region ({len(names)} ops -> {len(groups)} dvmlang group(s), one launch): "
                               + ", ".join(names))
                    for grp in groups:
                        out.append(f"    group {grp}")
                elif kind == "eager":
                    out.append(f"  fallback {', '.join(names)}: {reason}")
                elif kind == "custom":
                    out.append(f"  custom op {', '.join(names)}: its launcher's dvmlang kernels (one launch each)")
            if g.fallbacks:
                out.append("  fallbacks: " + "; ".join(f"{k}: {v}" for k, v in g.fallbacks.items()))
        for region, why in self.runtime_reasons.items():
            out.append(f"runtime fallback {region}: {why}")
        if self.stats:
            out.append(f"simulated {self.stats.get('simulated_us', 0.0):.1f} us on the NPU; fallbacks "
                       f"{self.stats.get('eager_fallback_us', 0.0):.0f} us in torch eager on the host (not simulated)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __rich__(self):
        from rich.tree import Tree
        lines = self.lines()
        tree = Tree(lines[0])
        graph = item = tree
        for ln in lines[1:]:
            if ln.startswith("graph "):
                graph = item = tree.add(ln)
            elif ln.startswith("    group "):
                item.add(ln.strip())
            else:
                item = graph.add(ln.strip())
        return tree


def _compact(nodes) -> list[str]:
    return [op_name(n) for n in nodes if n.op == "call_function"]


def explain(model, *inputs, dynamic=None, grad: bool = False, **kwargs) -> Explanation:
    """Compile ``model`` with the dvmlang backend, call it once on ``inputs``, and report the partition."""
    start = be.MADE[0]

    def fresh(gm, example_inputs, **kw):  # a new backend object: dynamo compiles anew for it
        return be.dvmlang_backend(gm, example_inputs, **kw)

    compiled = torch.compile(model, backend=fresh, dynamic=dynamic)
    snap = st.stats()
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        compiled(*inputs, **kwargs)
    after = st.stats()
    rep = Explanation(launches_per_call=after["launches"] - snap["launches"],
                      fallback_ops={k: v - snap["fallback_ops"].get(k, 0) for k, v in after["fallback_ops"].items()
                                    if v - snap["fallback_ops"].get(k, 0)})
    rep.stats = {k: after[k] - snap[k] for k in ("builds", "encodes", "launches", "cycles", "simulated_us",
                                                 "eager_fallback_us")}
    rep.runtime_reasons = {k: v for k, v in after["runtime_reasons"].items() if snap["runtime_reasons"].get(k) != v}
    for cg in be.made_since(start):
        steps = []
        for s in cg.steps:
            groups = []
            if s.kind == "region" and s.program is not None:
                groups = [f"{g.name} [{g.kind}]: " + ", ".join(f"%{n.id} {n.op}" for n in g.nodes)
                          for g in s.program.plan.groups]
            if s.kind in ("region", "eager", "custom"):
                steps.append((s.kind, _compact(s.nodes), s.reason, groups))
        rep.graphs.append(GraphReport(cg.name, steps, dict(cg.fallbacks)))
    return rep
