"""Pass 1: number the ops in program order and compute each value's live interval.

A value defined outside a loop and used inside it stays live until the loop ends (it is read again at every
iteration), and so do a ``for`` loop's bound and step.
"""

from __future__ import annotations

from ...ir.core import Block, Function
from .program import Liveness


def liveness(fn: Function) -> Liveness:
    live = Liveness({}, {}, {}, {})
    _number(live, fn.body, 0)
    _extend_loop_uses(live, fn.body, [])
    return live


def _number(live: Liveness, block: Block, n: int) -> int:
    """Number ops in program order (``n`` counts the positions handed out, two per op: its own and its end);
    record where each value is defined and last used."""
    pos, last_use, def_pos = live.pos, live.last_use, live.def_pos
    for op in block.ops:
        pos[id(op)] = p = n * 2
        n += 1
        for v in op.operands:
            last_use[v.id] = max(last_use.get(v.id, -1), p)
        for r in op.regions:
            for a in r.args:
                def_pos.setdefault(a.id, p)
            n = _number(live, r, n)
        live.op_end[id(op)] = n * 2 + 1
        n += 1
        for r in op.results:
            def_pos.setdefault(r.id, p)
    return n


def _extend_loop_uses(live: Liveness, block: Block, loops: list):
    """A value defined outside a loop and used inside it stays live until the loop ends."""
    last_use, op_end = live.last_use, live.op_end
    for op in block.ops:
        if op.kind == "for":
            # the bound and the step are read again at every iteration
            for v in op.operands[1:3]:
                last_use[v.id] = max(last_use[v.id], op_end[id(op)])
        for v in op.operands:
            dpos = live.def_pos.get(v.id, -1)
            for lp in loops:
                if dpos < live.pos[id(lp)]:
                    last_use[v.id] = max(last_use[v.id], op_end[id(lp)])
                    break
        for r in op.regions:
            _extend_loop_uses(live, r, loops + [op] if op.kind in ("for", "while") else loops)
