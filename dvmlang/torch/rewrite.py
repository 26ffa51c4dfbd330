"""FX rewrites before partitioning: patterns whose literal lowering exceeds what the fuser runs, replaced by an
equivalent op it does run. Each rewrite keeps torch's metadata (``meta["val"]``) on the nodes it makes.

* **repeat_kv** (grouped-query attention): ``x[:, :, None].expand(b, h, r, s, d).reshape(b, h * r, s, d)`` is a
  rank-5 broadcast, beyond the fuser's four dims; it is ``repeat_interleave(x, r, dim=1)``, a gather along the
  head dim (``aten_scatter``'s lowering).
"""

from __future__ import annotations

import sympy
import torch

from .lower import expr_of

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _exprs(node) -> list | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    return [expr_of(s) for s in val.shape]


def _repeat_kv(gm: torch.fx.GraphModule, view) -> bool:
    src = view.args[0]
    if src.op == "call_function" and src.target is aten.clone.default:
        src = src.args[0]
    if not (src.op == "call_function" and src.target is aten.expand.default):
        return False
    u = src.args[0]
    shape_u, shape_e, shape_v = _exprs(u), _exprs(src), _exprs(view)
    if not shape_u or not shape_e or not shape_v or len(shape_u) != len(shape_e) or \
            len(shape_v) != len(shape_e) - 1:
        return False
    diff = [k for k, (a, b) in enumerate(zip(shape_u, shape_e)) if sympy.simplify(a - b) != 0]
    if len(diff) != 1 or diff[0] == 0:
        return False
    p = diff[0]
    r = shape_e[p]
    if shape_u[p] != 1 or not isinstance(r, int):
        return False
    want = shape_e[:p - 1] + [shape_e[p - 1] * r] + shape_e[p + 1:]
    if any(sympy.simplify(a - b) != 0 for a, b in zip(want, shape_v)):
        return False
    g = gm.graph
    with g.inserting_before(view):
        sq = g.call_function(aten.squeeze.dim, (u, p))
        sq.meta["val"] = u.meta["val"].squeeze(p)
        rep = g.call_function(aten.repeat_interleave.self_int, (sq, r, p - 1))
        rep.meta["val"] = view.meta["val"]
    view.replace_all_uses_with(rep)
    return True


def rewrite(gm: torch.fx.GraphModule) -> None:
    changed = False
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target in _VIEWS:
            changed |= _repeat_kv(gm, n)
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
