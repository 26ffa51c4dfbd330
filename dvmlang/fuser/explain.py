"""``graph.explain(...)``: the fusion report, printable with rich (and as plain text with ``str()``)."""

from __future__ import annotations

import io
import math

from rich.console import Console, Group as RGroup
from rich.text import Text
from rich.tree import Tree

from . import tiling as tl
from .fusion import is_free


class Report:
    def __init__(self, gf, cap, plan, env, profile):
        self.gf = gf
        self.cap = cap
        self.plan = plan
        self.env = env
        self.profile = profile

    # structured access (tests and tools)
    @property
    def groups(self):
        return self.plan.groups

    @property
    def rejections(self):
        return self.plan.rejections

    @property
    def launches(self) -> int:
        if not self.plan.fused:
            return len(self.plan.groups)
        return 1 if self.plan.groups else 0

    def reasons(self) -> list[str]:
        return [r.reason for r in self.plan.rejections]

    def _tiling(self, grp) -> str:
        env = self.env
        try:
            space = tuple(env.value(d) for d in grp.space)
        except KeyError:
            return ""
        if grp.kind == "custom":
            return "user kernel"
        t = self.cap.tiles(self.plan, grp, env, self.profile)
        if grp.kind == "matmul":
            bm, bn, bk = t
            mm = grp.nodes[0]
            tiles = -(-env.value(mm.shape[-2]) // bm) * -(-env.value(mm.shape[-1]) // bn)
            programs = tiles * math.prod(space[:-2])
            return (f"tiles {bm}x{bn}x{bk}, {programs} tiles looped over by {min(programs, self.profile.cube_cores)} "
                    f"persistent programs on {self.profile.cube_cores} cube cores")
        outer = math.prod(space[:-2])
        live = tl.live_bytes_per_element(grp)
        programs = t.grid[0] * outer
        per = -(-programs // self.profile.vector_cores)
        return (f"{grp.mode} tiles {t.br}x{t.bc} over {space}, {programs} tiles looped over by "
                f"{min(programs, self.profile.vector_cores)} persistent programs (up to {per} each, on "
                f"{self.profile.vector_cores} vector cores), {live} live bytes per element")

    def __rich__(self):
        g = self.cap.graph
        p = self.plan
        head = Text(f"graph {g.name}: {len(p.groups)} group(s)")
        if p.fused:
            head.append(f" in {len(p.stages)} stage(s), one stacked launch")
        else:
            head.append(" (unfused: one launch per op)")
        if p.split_reductions:
            head.append(" — split plan: a guarded row did not fit UB or outgrew the row block built")
        tree = Tree(head)
        if g.syms.deductions:
            ded = tree.add(Text("deduced equalities (checked at every call)"))
            for a, b, why in g.syms.deductions:
                ded.add(Text(f"{a} ({a.origin}) == {b}  [{why}]"))
        for si, stage in enumerate(p.stages):
            st = tree.add(Text(f"stage {si}" + (" (side by side)" if len(stage) > 1 and p.fused else "")))
            for grp in stage:
                label = Text(f"{grp.name}  [{grp.kind}" + (f", {grp.mode}" if grp.kind == "vector" else "") + "]")
                node = st.add(label)
                ops = [f"%{n.id} {n.op if n.op != 'reduce' else 'reduce ' + n.attrs['op']}" for n in grp.nodes
                       if not is_free(n)]
                node.add(Text("ops: " + ", ".join(ops)))
                if grp.recompute:
                    node.add(Text("recomputes: " + ", ".join(f"%{n.id} {n.op}" for n in grp.recompute) +
                                  " (elementwise values of a group it was split from, instead of reading them back)"))
                node.add(Text("reads: " + (", ".join(f"%{i.id}" for i in grp.inputs) or "-") + "   writes: " +
                              (", ".join(f"%{o.id}" for o in grp.outputs) or "-")))
                tiling = self._tiling(grp)
                if tiling:
                    node.add(Text("tiling: " + tiling))
                if grp.guard is not None:
                    node.add(Text(f"guard: a whole row of {grp.guard} elements must fit UB and the row block the "
                                  "kernel was built with (its first call's), checked at every call; when it does "
                                  "not, the split plan runs instead (reductions end their groups): no rebuild"))
        if p.rejections:
            rej = tree.add(Text("not fused"))
            for r in p.rejections:
                rej.add(Text(f"{r.producer} -> {r.consumer}: {r.reason}"))
        return RGroup(tree)

    def __str__(self) -> str:
        buf = io.StringIO()
        Console(file=buf, width=120, color_system=None).print(self)
        return buf.getvalue()
