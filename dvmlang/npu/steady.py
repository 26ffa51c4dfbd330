"""The steady launch: a member of a stacked launch (``Device.run_stack``, what a fused program's call makes) whose
timing is kept (``timing_cache``) and whose path is replayed (``replay``) runs its replay and takes its record
without the launch's machinery.

What every such relaunch of one launch base repeats is worked out once (``make``) and kept with the base
(``LaunchBase.steady``): its own ``Launch`` (its rates already holding the kept transfer totals, as
``Timing.restore`` leaves them), the kept timing, the state the one-program prefix ends in or the batch's program
ids and coordinates (read-only arrays, as ``state.programs`` makes them), and what the kept timing was found for:
the timing key's inputs (the alias groups, in order, and each tensor's bytes, in order; the key is a function of
them: ``timing_cache.key``). A call then

* checks those inputs against the call's (the same key, so the same kept timing: ``LaunchBase.timed`` would find
  the same ``Timing`` object, which it checks is still kept), and that the base's replay and kept timing are still
  the ones it was made with; anything else goes the general way (``Device._run_kernel``), unchanged;
* runs the replay on the batch, exactly as ``Device._one`` and ``Device._replay_batch`` run it (the same function,
  the same registers, the same watchdog test, decided once: the budget and the path are the base's);
* takes the record from ``Device._finish`` with the kept figures, as every untimed launch does: the L2 model
  settles with the same totals, so HBM bytes, hits, write-backs and the roofline are worked out from the L2 state
  of that moment, never assumed.

What it leaves out: the launch's reset (its rates' dicts emptied and refilled with the same values, the
alias-group sizes recomputed) and the timing key's tuple. The launch holds no array after it returns (the L2
model forgets an array's line when the array is freed: holding one would change what L2 holds). A fault in the
replay propagates as it does on the general path, and the base's steady state is dropped (the next launch makes
it anew), as it is when the base's replay or kept timing changed. A launch of the base while another holds its
launch (another thread's) goes the general way. Not used (the general path runs): traced launches, devices in
debug or race-detection mode, with ``timing_cache`` other than True, ``replay=False`` or ``sequential=True``.
``tests/test_steady.py`` compares results, records (cycles, bytes, instructions, pipe times, L2 figures) and
faults with ``Device(replay=False)`` and the sequential device, on random programs, torch models, alternating
shapes, aliases and a trace requested mid-stream.
"""

from __future__ import annotations

import weakref

from . import replay as _replay
from .execute import quietly
from .launch import Launch, _imm_reader
from .replay import Parts, Replay
from .state import Batch, programs
from .timing_cache import key as timing_key


class Steady:
    """What every steady relaunch of one launch base repeats (see the module's docstring)."""

    __slots__ = ("spare", "rp", "kept", "key", "alias", "alias_items", "sizes", "one", "state", "prefix", "pids", "coords",
                 "grid", "zero_regs", "whole")

    def fits(self, arrays: dict, alias: dict) -> bool:
        """Whether a launch on ``arrays`` with ``alias`` has the timing key this was made for."""
        if alias is not self.alias and list(alias.items()) != self.alias_items:
            return False
        sizes = self.sizes
        if len(arrays) != len(sizes):
            return False
        for (q, a), (q0, n) in zip(arrays.items(), sizes):
            if q != q0 or a.nbytes != n:
                return False
        return True


def make(device, base, bc, arrays: dict, alias: dict) -> Steady | None:
    """The steady state of ``base`` for a launch of ``bc`` on ``arrays`` (None when its launches are not steady:
    no replay, no kept timing for this key, a budget the path would exceed, several batches)."""
    rp = base.replay
    if (rp.__class__ is not Replay and rp.__class__ is not Parts) or not base.fixed:
        return None
    L = Launch.of(base.fields, bc, arrays, alias)
    key = timing_key(L)
    kept = base.timing.get(key)
    L.arrays = L.bc = None
    if kept is None:
        return None
    kept.restore(L.rates)
    L.untimed = True
    st = Steady()
    st.spare, st.rp, st.kept, st.key = [L], rp, kept, key
    st.alias, st.alias_items = alias, list(alias.items())
    st.sizes = [(q, a.nbytes) for q, a in arrays.items()]
    P = base.programs
    st.one = P == 1
    m = base.machine
    if st.one:
        state = base.after_prefix
        if state is None or L.watchdog <= m.prefix or state[1] + rp.n > L.watchdog:
            return None  # (Device._one: the prefix run again, or the steps one by one)
        st.state, st.prefix = state, m.prefix
    else:
        kern = base.kern
        if device._batch_size(kern, P)[1] < P or rp.n > L.watchdog:
            return None  # (Device._replay_batch: several batches, or the steps one by one)
        st.grid, st.zero_regs = kern.grid, m.zero_regs
        st.whole = rp.__class__ is Replay  # (replay.Parts make batches of their groups)
        st.pids, st.coords = programs(0, P, kern.grid[0], kern.grid[1])
    base.steady = st
    return st


def run(device, base, st: Steady, bc, arrays: dict, alias: dict):
    """The record of a launch of ``bc`` on ``arrays`` (``st.fits`` them) through the kept replay and timing."""
    if base.replay is not st.rp or base.timing.get(st.key) is not st.kept:
        base.steady = None  # (made anew from the next launch that finds a replay and a kept timing)
        return None
    try:
        L = st.spare.pop()  # (another thread's launch of this base holds it: the general way, with a launch of its own)
    except IndexError:
        return None
    L.bc, L.arrays, L.alias = bc, arrays, alias
    L.rates.alias = alias
    L.imm = _imm_reader(bc)
    if L.prints_seen:
        L.prints = []
        L.prints_seen = 0
    if L.diagnostics:
        L.diagnostics = []
    try:
        if st.one:
            L.executed = st.prefix
            b = L.parked
            b = b.resume(st.state) if b is not None else Batch.resumed(st.state)
            quietly(_replay.run, st.rp, b, L)
        else:
            L.executed = 0
            b = Batch(st.pids, st.grid, st.zero_regs, uniform=True, coords=st.coords) if st.whole else None
            quietly(_replay.run, st.rp, b, L)
        record = device._finish(base, L, *st.kept.figures())[0]
    except BaseException:
        base.steady = None
        L.arrays = L.bc = None
        raise
    record.timing_kept = True
    if st.one:
        b.park()
        L.parked = b
    L.arrays = L.bc = None
    st.spare.append(L)
    return record


# ---- the members of a stacked launch ---------------------------------------------------------------------------


class _Member:
    """What a member of a stacked launch has at every call of one stack (``_row``): its bytecode (a weak reference:
    the plan does not keep a program's instances alive) and name, its cores and share of HBM, the clock its stage
    started at last with its launch base for it (``Device._bases``, one tuple: another thread's call of the stack
    reads both or neither), and its alias groups when it has none of its own (one per tensor)."""

    __slots__ = ("bc", "name", "cores", "share", "based", "ident")


def _row(stage, prof) -> list:
    """A stage's members' ``_Member`` (made at a call of a stack whose kernels were not those of the one kept)."""
    shares = split_cores(stage, prof)
    row = []
    for (bc, _, kname, _), cores in zip(stage, shares):
        m = _Member()
        m.bc, m.name, m.cores, m.share = weakref.ref(bc), kname, cores, cores / sum(shares)
        m.based = m.ident = None
        row.append(m)
    return row


def _kept(device, stages, prof, options):
    """The plan kept for a stack of exactly these kernels (the same bytecodes and names, stage by stage), or
    None."""
    kept = device.__dict__.get("_stacks", {}).get(_first(stages))
    if kept is None or kept[0] is not prof or kept[1] != options or len(kept[2]) != len(stages):
        return None
    plan = kept[2]
    for stage, row in zip(stages, plan):
        if len(stage) != len(row):
            return None
        for item, m in zip(stage, row):
            if item[0] is not m.bc() or item[2] != m.name:
                return None
    return plan


def _first(stages) -> int | None:
    """The id of a stack's first bytecode (what its plan is kept under), None for a stack of no kernel."""
    bc = _first_bytecode(stages)
    return None if bc is None else id(bc)


def _first_bytecode(stages):
    for stage in stages:
        for item in stage:
            return item[0]
    return None


def members(device, stages) -> tuple[list, float]:
    """The records of the kernels of a stacked launch (``Device.run_stack``, untraced, on a device that takes the
    steady way) and the clock after its last stage: a member whose timing is kept and whose path is replayed runs
    its steady launch (``run``), any other through ``Device._run_kernel``, as ``run_stack``'s general way runs
    it. What does not change between calls of one stack (each stage's split of the cores and HBM, the members'
    launch bases while their stages start at the same clock, the alias groups a member without aliases has) is
    worked out at its first call."""
    prof = device.profile
    options = (device.debug, device.watchdog, device.race_detection)
    plan = _kept(device, stages, prof, options)
    made = [] if plan is None else None
    out = []
    clock = 0.0
    for k, stage in enumerate(stages):
        for bc, _, _, _ in stage:
            device._ready(bc)
        if made is None:
            row = plan[k]
        else:
            row = _row(stage, prof)
            made.append(row)
        longest = 0.0
        for (bc, arrays, kname, alias), m in zip(stage, row):
            based = m.based
            if based is None or based[0] != clock:  # (the plan is for this profile and these options)
                based = m.based = (clock, device._bases(bc, 0, kname, m.cores, 0, kname, clock, m.share))
            base = based[1]
            if alias:
                al = alias
            else:  # (one alias group per tensor: the dict made once for these tensors)
                al = m.ident
                if al is None or al.keys() != arrays.keys():
                    al = m.ident = {q: q for q in arrays}
            rec = None
            st = base.steady or (make(device, base, bc, arrays, al) if base.replay else None)
            if st is not None and st.fits(arrays, al):
                rec = run(device, base, st, bc, arrays, al)
            if rec is None:
                rec = device._run_kernel(bc, 0, arrays, None, kname, alias, cores=m.cores, overhead=0, start=clock,
                                         group=kname, hbm_share=m.share)
            out.append(rec)
            if rec.cycles > longest:
                longest = rec.cycles
        clock += longest
    if made is not None and out:  # (kept with the device under its first bytecode's id while that bytecode lives:
        stacks = device.__dict__.setdefault("_stacks", {})  # the plan holds the members' launch bases and machines)
        if len(stacks) >= 64:
            stacks.clear()
        first = _first_bytecode(stages)
        key = id(first)
        stacks[key] = (prof, options, made, weakref.ref(first, lambda ref: _forget(stacks, key, ref)))
    return out, clock


def _forget(stacks: dict, key: int, ref) -> None:
    """A stack's first bytecode was freed: its plan goes (unless another stack's plan took the id since)."""
    kept = stacks.get(key)
    if kept is not None and kept[3] is ref:
        del stacks[key]


def split_cores(stage, prof) -> list[int]:
    """Cores for each kernel of a stage: every kernel gets at least one, the rest go by program count."""
    if len(stage) == 1:
        bc = stage[0][0]
        return [prof.cube_cores if bc.kernels[0].mix else prof.vector_cores]
    kerns = [bc.kernels[0] for bc, _, _, _ in stage]
    progs = [k.grid[0] * k.grid[1] * k.grid[2] for k in kerns]
    same, n_same = {}, {}  # mix -> the programs of the stage's kernels of that kind, summed in order; their count
    for k, p in zip(kerns, progs):
        same[k.mix] = same.get(k.mix, 0) + p
        n_same[k.mix] = n_same.get(k.mix, 0) + 1
    out = []
    for k, p in zip(kerns, progs):
        pool = prof.cube_cores if k.mix else prof.vector_cores
        share = max(1, int(pool * p / max(1, same[k.mix])))
        out.append(min(share, max(1, pool - (n_same[k.mix] - 1))))
    return out
