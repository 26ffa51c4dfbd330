"""Pass 5: synchronisation. Every dependency between two pipes (a read after a write, a write after a read
or a write of overlapping bytes) gets a ``set`` on its producer and a ``wait`` on its consumer; loop bodies are
scanned twice over, for the hazards between one iteration and the next. Producers a pipe has already waited
for (pipes run in order) need no second wait; sets and waits beyond the one each head word carries become
standalone SET/WAIT instructions."""

from __future__ import annotations

from .. import isa
from .program import Emitted, Label


def _span(rng) -> tuple:
    """(bucket, lo, hi) of an access range: on-chip ranges overlap by address within their space; a tensor in
    GM is a bucket of its own whose accesses all overlap."""
    if rng[0] == "gm":
        return rng, 0, 1
    return rng[0], rng[1], rng[2]


def insert_sync(items: list) -> None:
    """Give every cross-pipe dependency a set on its producer and a wait on its consumer."""
    instrs = []
    # loop bodies: [head label position, back-edge jump position] in instruction indices
    label_pos = {}
    for x in items:
        if x.__class__ is Label:
            label_pos[id(x)] = len(instrs)
        else:
            instrs.append(x)
    back_edges = {}
    for i, e in enumerate(instrs):
        t = e.target
        if t is not None and label_pos.get(id(t), i + 1) <= i:
            back_edges[i] = label_pos[id(t)]
    deps: dict[int, dict[int, int]] = {}  # consumer index -> {producer pipe: producer index}

    def scan(order, state, nested=True):
        for i in order:
            visit(i, state)
            if nested and i in back_edges:
                # at a back edge, go over the body once more with the state the edge carries: this finds the
                # hazards between one iteration and the next
                scan(range(back_edges[i], i + 1), state, nested=False)

    pipes = [e.ins.pipe for e in instrs]
    reads = [[_span(r) for r in e.reads] for e in instrs]
    writes = [[_span(r) for r in e.writes] for e in instrs]

    def need(i, q, cand):
        d = deps.get(i)
        if d is None:
            deps[i] = {q: cand}
        else:
            d[q] = _later(d.get(q), cand, i)

    def visit(i, state):
        # state: bucket -> [[lo, hi, writer index or None, reader indices]], in the order they were recorded.
        # A read depends on the overlapping writers of other pipes and joins the first overlapping entry's
        # readers; a write depends on the overlapping writers and readers of other pipes and replaces the
        # entries it overlaps (checking and recording range by range gives the same dependencies: an
        # instruction's own accesses are on its own pipe).
        p = pipes[i]
        for key, lo, hi in reads[i]:
            entries = state.get(key)
            if entries is None:
                state[key] = [[lo, hi, None, [i]]]
                continue
            joined = False
            for entry in entries:
                if entry[0] < hi and lo < entry[1]:
                    widx = entry[2]
                    if widx is not None and pipes[widx] != p:
                        need(i, pipes[widx], widx)
                    if not joined:
                        entry[3].append(i)
                        joined = True
            if not joined:
                entries.append([lo, hi, None, [i]])
        for key, lo, hi in writes[i]:
            entries = state.get(key)
            if entries is None:
                state[key] = [[lo, hi, i, []]]
                continue
            gone = []
            for k, entry in enumerate(entries):
                if entry[0] < hi and lo < entry[1]:
                    widx = entry[2]
                    if widx is not None and pipes[widx] != p:
                        need(i, pipes[widx], widx)
                    for ridx in entry[3]:
                        q = pipes[ridx]
                        if q != p:
                            need(i, q, ridx)
                    gone.append(k)
            for k in reversed(gone):
                del entries[k]
            entries.append([lo, hi, i, []])

    scan(range(len(instrs)), {})
    counters: dict = {}
    set_by: dict = {}
    block_starts = set(label_pos.values())
    synced: dict = {}  # (consumer pipe, producer pipe) -> rank of the producer already waited for
    for i in range(len(instrs)):
        if i in block_starts:
            synced.clear()
        if i not in deps:
            continue
        e = instrs[i]
        for q, widx in sorted(deps[i].items()):
            rank = _rank(widx, i)
            key_sync = (int(e.ins.pipe), int(q))
            if key_sync in synced and synced[key_sync] >= rank:
                continue  # the pipes run in order: an earlier wait already covers this producer
            synced[key_sync] = rank
            prod = instrs[widx]
            key = (widx, int(e.ins.pipe))
            ev = set_by.get(key)
            if ev is None:
                pair = (int(q), int(e.ins.pipe))
                ev = counters.get(pair, 0)
                counters[pair] = (ev + 1) % isa.N_EVENTS
                set_by[key] = ev
                if prod.set is None:
                    prod.set = (e.ins.pipe, ev)
                elif prod.extra_sets is None:
                    prod.extra_sets = [(e.ins.pipe, ev)]
                else:
                    prod.extra_sets.append((e.ins.pipe, ev))
            w = (q, ev)
            if e.wait is None:
                e.wait = w
            elif e.wait != w:
                if e.extra_waits is None:
                    e.extra_waits = [w]
                else:
                    e.extra_waits.append(w)
    # materialise extra sets/waits as standalone instructions on the right pipes
    out = []
    for x in items:
        if isinstance(x, Emitted) and x.extra_waits:
            for (q, ev) in x.extra_waits:
                out.append(Emitted(isa.BY_NAME["WAIT"], {"src": int(q), "dst": int(x.ins.pipe), "event": ev}, None,
                                   x.loc))
        out.append(x)
        if isinstance(x, Emitted) and x.extra_sets:
            for (dst, ev) in x.extra_sets:
                s = Emitted(isa.BY_NAME["SET"], {"src": int(x.ins.pipe), "dst": int(dst), "event": ev}, None, x.loc)
                out.append(s)
    items[:] = out


def _rank(producer: int, consumer: int) -> int:
    """Issue order of a producer as seen by its consumer: producers before the consumer in program order are
    later when their index is larger; producers after it (previous iteration) come before all of those."""
    return producer if producer < consumer else producer - 1_000_000


def _later(cur, cand, consumer):
    """Of two producers on one pipe, the one issued last before the consumer (pipes run in order)."""
    if cur is None:
        return cand
    return cand if _rank(cand, consumer) > _rank(cur, consumer) else cur
