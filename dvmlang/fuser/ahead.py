"""What a program hands the background worker (``build.Ahead``), so that no call waits for it: after the first
call, the fused plan's instance function; once a guarded row changes (or at once, for a row that is a length),
the split plan's kernels, built for the rows just past the row block and decoded; at the split plan's first run,
its instance function (``api.Program._written``). The worker holds a program weakly: one dropped before its
turn is not kept alive for it."""

from __future__ import annotations

import weakref


def after_first_call(prog, env, profile) -> None:
    """After the fused plan's first call (its launch keeps the tiles): its guarded rows' sizes watched for a
    change; its instance function written by the worker; the split plan built ahead at once when a row is a
    length (``growing``)."""
    prog._ahead.started = True
    if prog.plan.has_fallback:
        prog._watch = (rows(prog, env), env, profile)
    if prog._writable():
        prog._ahead.start(work_ahead, weakref.ref(prog), profile)
    if prog._watch is not None and growing(prog):
        varied(prog)


def rows(prog, env) -> tuple:
    """The sizes of the fused plan's guarded rows (a row-mode group's row, which takes the split plan when it
    outgrows its row block) at a call."""
    return tuple([env.value(grp.space[-1]) for grp in prog.plan.groups
                  if grp.mode == "row" and grp.guard is not None])


def growing(prog) -> bool:
    """Whether a guarded row's size also sizes another axis than a tensor's last: the rows of attention's keys, a
    matmul's reduction. Such a size is a length or a count, likely to change from call to call; a size that only
    ever is a last axis (a hidden or feature size) is not."""
    find = prog.graph.syms.find
    guarded = {find(grp.space[-1]).id for grp in prog.plan.groups if grp.mode == "row" and grp.guard is not None}
    return any(not isinstance(s, int) and s.id in guarded
               for n in prog.graph.nodes for s in map(find, n.shape[:-1]))


def varied(prog) -> None:
    """A call's guarded rows differ from the first call's: hand the split plan's build to the worker, so that the
    call whose row outgrows its block only encodes. Not before (unless ``growing``): most guarded rows are a
    hidden size that never changes, and a program whose rows never change never needs the split plan (as Dynamo
    marks a dim dynamic once it has changed). A row that outgrows its block at its first change builds the
    split plan's kernels in that call."""
    watch, prog._watch = prog._watch, None
    if watch is not None:
        prog._ahead.start(split_ahead, weakref.ref(prog), watch[1], watch[2])


def work_ahead(ref, profile) -> None:
    """The worker's job after a program's first call: the fused plan's instance function, so that no later call
    waits for Python to compile it."""
    prog = ref()
    if prog is not None:
        prog._write_function(prog.plan, profile)


def write_ahead(ref, p, profile) -> None:
    """The worker's job at a plan's first run: its instance function."""
    prog = ref()
    if prog is not None:
        prog._write_function(p, profile)


def split_ahead(ref, env, profile) -> None:
    """The worker's job once a guarded row has changed: the split plan's kernels, built and decoded (validated, if
    not trusted), so that neither waits for the call that needs them."""
    prog = ref()
    if prog is None:
        return
    build_split_plan(prog, env, profile)
    for grp in prog.plan.fallback.groups:
        if grp.kind != "custom":
            for b in list(prog.kernel(prog.plan.fallback, grp)._builds.values()):
                enc = getattr(b, "encoder", None)
                if enc is not None and enc.decoded is None:
                    enc.validate_template(trust=True)


def build_split_plan(prog, env, profile) -> None:
    """Build the split plan's kernels for the lengths it will run (a guarded row just past the row block the fused
    plan was built with), so that the call whose row outgrows the block only encodes."""
    p, fb = prog.plan, prog.plan.fallback
    values = dict(env.values)
    for grp in p.groups:
        if grp.mode == "row" and grp.guard is not None:
            kept = prog._tiles.get(prog.kernel(p, grp).key)
            root = env.roots[prog.graph.syms.find(grp.space[-1]).id]
            if kept is not None:
                values[root] = max(values[root], kept.bc + 1)
    at = type(env)(prog.graph, values, env.roots)
    for grp in fb.groups:
        if grp.kind == "custom":
            continue
        gk = prog.kernel(fb, grp)
        if gk.text is None:
            t = prog.tiles(fb, grp, at, profile)
            gk.build(t if grp.kind == "matmul" else (t.br, t.bc), profile, ahead=True)
