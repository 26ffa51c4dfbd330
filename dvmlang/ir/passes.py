"""Small passes over tile IR: common-subexpression elimination, dead-code elimination, and dot accumulation
(``acc += dot(a, b)`` in a loop becomes ``dot(a, b, acc)``, so the accumulator stays in L0C)."""

from __future__ import annotations

from ..opdefs import kinds_with
from .core import Block, Function, Value, uses

PURE = kinds_with("pure")  # the op vocabulary's traits (dvmlang/opdefs.py)
REMOVABLE = kinds_with("removable")  # pure ops plus reads, which have no effect


def _attr_key(attrs: dict):
    items = []
    for k, v in sorted(attrs.items()):
        if isinstance(v, float) and v != v:
            return None  # NaN constants never compare equal; leave them alone
        try:
            hash(v)
        except TypeError:
            return None
        items.append((k, type(v).__name__, v))
    return tuple(items)


def cse(fn: Function) -> None:
    """Replace a pure op by an identical one that dominates it (same block or an enclosing one)."""
    replace: dict[int, Value] = {}
    _cse_block(fn.body, [{}], replace)


def _cse_block(block: Block, scopes: list[dict], replace: dict[int, Value]) -> None:
    table: dict = {}
    scopes = scopes + [table]
    kept = []
    for op in block.ops:
        if replace:
            op.operands = [replace.get(v.id, v) for v in op.operands]
        if op.kind in PURE and not op.regions:
            akey = _attr_key(op.attrs)
            if akey is not None:
                key = (op.kind, tuple(v.id for v in op.operands), akey, tuple(r.type for r in op.results))
                found = None
                for s in reversed(scopes):
                    found = s.get(key)
                    if found is not None:
                        break
                if found is not None:
                    for old, new in zip(op.results, found.results):
                        replace[old.id] = new
                    continue
                table[key] = op
        for r in op.regions:
            _cse_block(r, scopes, replace)
        kept.append(op)
    block.ops[:] = kept


def dce(fn: Function) -> None:
    """Remove ops whose results nobody uses and that have no effect, until nothing changes."""
    while True:
        used: set[int] = set()
        for op in fn.walk():
            used.update(v.id for v in op.operands)
        if not _dce_block(fn.body, used):
            return


def _dce_block(block: Block, used: set[int]) -> bool:
    changed = False
    kept = []
    for op in block.ops:
        for r in op.regions:
            changed |= _dce_block(r, used)
        if op.kind in REMOVABLE and not any(r.id in used for r in op.results):
            changed = True
            continue
        kept.append(op)
    block.ops[:] = kept
    return changed


def accumulate_dots(fn: Function) -> None:
    """In a loop that carries ``acc`` and yields ``acc + dot(a, b)`` (either order), make the dot accumulate:
    ``dot(a, b, acc)``. The cube then adds into its L0C accumulator in place on every K step instead of handing
    each product to the vector core for the add (910B has no L0C -> UB path). The sum is the same: MMAD adds
    the product to the accumulator, as the add did, in the accumulator's dtype."""
    for op in fn.walk():
        if op.kind != "for" or len(op.regions) != 1:
            continue
        body = op.regions[0]
        term = body.terminator
        if term is None or term.kind != "yield":
            continue
        users = uses(body)
        for i, y in enumerate(term.operands):
            add = y.op
            arg = body.args[i + 1]
            if add is None or add.kind != "binary" or add.attrs.get("op") != "add" or add.parent is not body:
                continue
            if len(users.get(y.id, [])) != 1 or len(users.get(arg.id, [])) != 1 or y.type != arg.type:
                continue
            others = [v for v in add.operands if v is not arg]
            if len(others) != 1 or others[0].op is None:
                continue
            d = others[0].op
            if d.kind != "dot" or len(d.operands) != 2 or d.parent is not body or d.result.type != arg.type or \
                    len(users.get(d.result.id, [])) != 1 or arg in d.operands:
                continue
            d.operands.append(arg)
            term.operands[i] = d.result
            body.ops.remove(add)


def run_default_pipeline(fn: Function, on_gather=None) -> None:
    """The build-time pass pipeline: access analysis, then CSE and DCE to clean up after it."""
    from .access import analyse_accesses
    from .verifier import verify

    verify(fn)
    if analyse_accesses(fn, on_gather):
        dce(fn)  # the offsets a guarded access copied into its fallback branch (see analyse_accesses)
    cse(fn)
    dce(fn)
    accumulate_dots(fn)
    verify(fn)
