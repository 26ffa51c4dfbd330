"""The compiled device path: a kernel's steps as host code, one Python function per straight-line region.

A machine's steps fall into basic blocks: a block starts at the first step, at the end of the machine's pure
prefix, at every branch target and after every branch, jump and END, and ends at the next such step. The
second time a block is about to run in a mode (``COMPILE_AFTER``), its code is generated once per machine
(so once per kernel template and profile; an instance's values, its immediates, grid and tensors, are read
from the launch as the steps read them) and compiled: one function that runs every step of the block for a
whole batch of programs. Scalar instructions become Python statements on the registers, from the expressions
of their families' reference semantics (``vm.semantics.SCALAR``); every other instruction calls the step the
machine built for it (the NPU's numerics, memory model and bounds checks, unchanged). The block's cycles come
from the same cost formulas and the same pipe clock as the step-by-step path, in one of three modes:

* ``one``: the batch's programs share one pipe clock (``Batch.scalar``); the clock is kept in local Python
  floats for the whole block, in the order and with the arithmetic of ``timing.advance_one``, so the same
  doubles;
* ``many``: a clock per program; each step calls ``timing.advance``, as the step-by-step path does;
* ``untimed``: no clock at all (a relaunch whose timing was computed once for its instance, see
  ``timing_cache``).

A block ends its run with the index of the step to go on from, ``END``, or ``(branch step, condition)`` when
its last step is a branch whose condition differs between programs (the scheduler splits the batch,
``execute``). So the scheduler, the watchdog (a block runs only when it fits the budget; otherwise its steps
run one by one and stop where the step-by-step path stops) and every result, cycle and fault are those of the
step-by-step path.
"""

from __future__ import annotations

import operator

import numpy as np

from ..errors import DvmError, InvalidBytecodeError
from ..vm import isa, semantics
from ..vm import semantics as sem
from ..vm.decode import sop_parts
from .launch import block_immediates
from .state import Slot, place_among, prod
from .timing import advance

END = -1
COMPILE_AFTER = 1  # a block runs this many times step by step (per mode) before its code is generated
SMALL_BYTES = 256 << 10  # a block's vector instructions run directly when its largest tile, all rows, fits this
MODES = ("one", "many", "untimed")
STEP_ERRORS = (ValueError, IndexError, TypeError, OverflowError, MemoryError, FloatingPointError, ZeroDivisionError,
               KeyError)


class Block:
    """A compiled block: ``fn(batch, launch)`` runs steps ``start``..``end - 1`` (``n`` of them); ``small``, when
    the block has vector instructions, runs them for a batch of at most ``rows`` programs directly (see
    ``_Tiles``)."""

    __slots__ = ("fn", "small", "rows", "start", "end", "n")

    def __init__(self, fn, small, rows: int, start: int, end: int):
        self.fn, self.small, self.rows, self.start, self.end, self.n = fn, small, rows, start, end, end - start



class Compiled:
    """The blocks of a machine, per mode: ``tables[mode][i]`` is None for a step that does not start a block,
    the number of times the block starting there has run step by step, or its ``Block``."""

    def __init__(self, m, eager: bool = False):
        self.m = m
        steps = m.steps
        n = len(steps)
        starts = {0, m.prefix}
        for s in steps:
            if s.kind in ("jmp", "br_z", "br_nz", "end"):
                starts.add(s.index + 1)
                if s.target is not None:
                    starts.add(s.target)
        self.starts = sorted(x for x in starts if x < n)
        self.ends = dict(zip(self.starts, self.starts[1:] + [n]))
        first = COMPILE_AFTER if not eager else 0
        self.tables = []
        for mode in MODES:
            tab = [None] * n
            for i in self.starts:
                tab[i] = first
            self.tables.append(tab)
        if eager:
            for k in range(len(MODES)):
                for i in self.starts:
                    self.tables[k][i] = self.block(k, i)

    def block(self, mode: int, i: int) -> Block:
        """The block starting at step ``i`` compiled for ``MODES[mode]`` (made once)."""
        blk = self.tables[mode][i]
        if blk.__class__ is not Block:
            end = self.ends[i]
            m = self.m
            fn = _generate(m, i, end, MODES[mode], False)
            biggest = _tile_bytes(m, i, end)
            small = _generate(m, i, end, MODES[mode], True) if biggest else None
            rows = SMALL_BYTES // biggest if biggest else -1
            blk = self.tables[mode][i] = Block(fn, small, rows, i, end)
        return blk


def compiled(m, eager: bool = False) -> Compiled:
    """The machine's compiled blocks, made when first asked for (``eager``: every block compiled at once)."""
    key = "_compiled_eager" if eager else "_compiled"
    c = m.__dict__.get(key)
    if c is None:
        c = Compiled(m, eager)
        setattr(m, key, c)
    return c


# ---- code generation -------------------------------------------------------------------------------------


def _generate(m, start: int, end: int, mode: str, small: bool = False):
    """The function running steps ``start``..``end - 1`` of machine ``m`` in ``mode`` (``small``: its vector
    instructions run directly, see ``_Tiles``)."""
    steps = m.steps
    dispatch = m.profile.scalar_dispatch
    env = {"np": np, "ADV": advance, "DvmError": DvmError, "ERRORS": STEP_ERRORS, "invalid": _invalid,
           "END": END, "D": dispatch}
    body: list[str] = []
    pipes = sorted({s.pipe for s in steps[start:end]} | {q for s in steps[start:end] if s.kind == "barrier"
                                                          for q in s.drain})
    one = mode == "one"
    timed = mode != "untimed"

    def store_clock(lines, ind=""):
        if not one:
            return
        lines.append(f"{ind}b.t_issue = ti; b.done = dn; b.port_free = pp")
        for q in pipes:
            lines.append(f"{ind}FR[{q}] = f{q}; BU[{q}] = u{q}; FI[{q}] = s{q}")

    tiles = _Tiles(m, env) if small else None
    head = ["def block(b, L):", "    R = b.regs", "    k = %d" % start]
    movis = [d for d in m.decoded[start:end] if d.ins.family == "movi"]
    if len(movis) >= 4:  # the block's immediates read at once (kept with the instance)
        words = tuple((d.pc + 1, d.dtype.np) for d in movis)
        env["IMMS"], env["W"] = block_immediates, words
        env["WI"] = operator.itemgetter(*(w for w, _ in words))
        head.append("    IM = IMMS(L, W, WI)")
        movi_at = {d.pc: j for j, d in enumerate(movis)}
    else:
        movi_at = {}
    if one:
        head += ["    FR = b.pipe_free; BU = b.pipe_busy; FI = b.pipe_first; FL = b.flags",
                 "    ti = b.t_issue; dn = b.done; pp = b.port_free"]
        head += [f"    f{q} = FR[{q}]; u{q} = BU[{q}]; s{q} = FI[{q}]" for q in pipes]
    for s in steps[start:end]:
        d = m.decoded[s.index]
        env[f"ST{s.index}"] = s
        lines = [f"k = {s.index}"]
        expr = semantics.scalar_expr(d) if s.kind == "op" else None
        if d.pc in movi_at:
            expr = (f"R[{d.vals['rd']}] = IM[{movi_at[d.pc]}]", {})
        transfer = s.cost is None
        if s.kind in ("set", "wait", "barrier", "jmp") or (s.kind == "op" and s.ins.family == "nop"):
            pass  # no numerics (the step's function does nothing)
        elif s.kind in ("br_z", "br_nz"):
            lines.append(f"c = R[{d.vals['rc']}]")
        elif s.kind == "end":
            pass
        elif expr is not None:
            code, names = expr
            env.update(names)
            lines.append(code)
        elif tiles is not None and tiles.emit(d, lines):
            pass
        else:
            env[f"S{s.index}"] = s.fn
            lines.append(f"{'r = ' if transfer else ''}S{s.index}(b, L)")
            if tiles is not None:
                tiles.forget()  # (the step may have changed any tile, or global memory under a view of it)
        if timed:
            lines += _clock(s, one, end, store_clock)
        body += lines
    last = steps[end - 1]
    tail: list[str] = []
    if last.kind == "end":
        store_clock(tail)
        tail.append("return END")
    elif last.kind == "jmp":
        store_clock(tail)
        tail.append(f"return {last.target}")
    elif last.kind in ("br_z", "br_nz"):
        store_clock(tail)
        taken, rest = (last.target, end) if last.kind == "br_nz" else (end, last.target)
        tail += ["if c.__class__ is np.ndarray and c.ndim:", f"    return ST{last.index}, c",
                 f"return {taken} if c else {rest}"]
    else:
        store_clock(tail)
        tail.append(f"return {end}")
    if tiles is not None and tiles.used:
        head.insert(2, "    MU = b.mem['ub']")
    lines = head + ["    try:"] + ["        " + x for x in body + tail] + [
        "    except DvmError:", "        raise", "    except ERRORS as e:",
        "        raise invalid(STEPS[k], e) from None"]
    env["STEPS"] = steps
    src = "\n".join(lines)
    code = compile(src, f"<dvmlang block {m.kernel.name}:{steps[start].pc}:{mode}>", "exec")
    exec(code, env)  # noqa: S102 - generated from the machine's own steps
    return env["block"]


def _invalid(s, e) -> InvalidBytecodeError:
    """What the step-by-step path raises when step ``s`` cannot execute."""
    return InvalidBytecodeError(f"{s.ins.name} at pc {s.pc} cannot execute: {e}", section="code", offset=s.pc * 8)


def _clock(s, one: bool, end: int, store_clock) -> list[str]:
    """The pipe-clock statements of step ``s`` (after its numerics; a transfer's cycles are in ``r``)."""
    i = s.index
    transfer = s.cost is None
    if not one:
        cost = "r if r is not None else 1" if transfer else repr(s.cost)
        return [f"ADV(ST{i}, b, {cost}, D)"]
    out = []
    if transfer:
        # as execute does for a batch with one clock: one cost for all, or a clock each from here on
        out += ["if r is None:", "    r = 1",
                "elif r.__class__ is not float and r.__class__ is not int:",
                "    if r.__class__ is np.ndarray and r.size > 1:",
                "        c0 = r.flat[0]",
                "        if not (r == c0).all():"]
        spill: list[str] = []
        store_clock(spill, "            ")
        out += spill + ["            b.spread()", f"            ADV(ST{i}, b, r, D)", f"            return {i + 1}",
                        "        r = c0.item()", "    else:", "        r = r.item()"]
        cost = "r"
    else:
        cost = repr(s.cost)
    p = s.pipe
    out.append("issue = ti + D")
    if s.kind == "barrier":
        drain = list(s.drain)
        out.append(f"t = max(issue, {', '.join(f'f{q}' for q in drain)})" if drain else "t = issue")
        out += [f"f{q} = t" for q in drain]
        out.append("ti = t")
        return out
    out += [f"st = f{p}", "if issue > st:", "    st = issue"]
    if s.port:
        out += ["if pp > st:", "    st = pp"]
    if s.wait_key is not None:
        out += [f"w = FL.get({s.wait_key!r})", "if w is not None and w > st:", "    st = w"]
    out += [f"e = st + {cost}", f"f{p} = e"]
    if s.port:
        out.append("pp = e")
    out += [f"u{p} += {cost}", f"if st < s{p}:", f"    s{p} = st"]
    if s.latency:
        out += [f"e = e + {s.latency!r}", "if e > dn:", "    dn = e"]
    if s.set_key is not None:
        out.append(f"FL[{s.set_key!r}] = e")
    out.append("ti = e" if p == 0 else "ti = issue")
    return out


# ---- vector instructions run directly -------------------------------------------------------------------------

# families _Tiles runs directly, with the reader fields (and whether they are read at the destination's rank)
_DIRECT = {"vbin": (("a", "b"), True), "vbins": (("a",), False), "vun": (("a",), False), "vcmp": (("a", "b"), True),
           "vcmps": (("a",), False), "vsel": (("c", "a", "b"), True), "vcast": (("a",), False),
           "vfma": (("a", "b", "c"), True), "vdup": ((), False), "viota": ((), False), "vcopy": (("a",), True),
           "vreduce": (("a",), False)}


def _tile_bytes(m, start: int, end: int) -> int:
    """The largest tile (one program's bytes) a vector instruction of steps ``start``..``end - 1`` that
    ``_Tiles`` runs reads or writes; 0 when there is none."""
    out = 0
    for d in m.decoded[start:end]:
        if d.ins.family in _DIRECT:
            for t in m.steps[m.index_of_pc[d.pc]].facts.tiles:
                out = max(out, t.nbytes)
    return out


def slot_line(m, env: dict, space: str, mem: str, addr: int, nbytes: int, var: str) -> str:
    """The line storing ``var`` (a whole tile) at ``addr`` of ``space`` (its slots' dict the expression ``mem``), as
    a writer stores it: alone when no other tile range of the kernel overlaps it, else among the slots it cuts."""
    env.update(Slot=Slot, place_among=place_among)
    if (space, addr, nbytes) in m.alone:  # (nothing to cut away)
        return f"{mem}[{addr}] = Slot({var}, {nbytes})"
    name = f"ST_{space}_{addr}_{nbytes}"
    env[name] = m.starts(space, addr, nbytes)
    return f"place_among({mem}, {addr}, {nbytes}, Slot({var}, {nbytes}), {name})"


def _full(shape, rank) -> tuple:
    """A tile's shape padded with leading 1s to ``rank`` dims (None: as it is), as its reader gives it."""
    return tuple(shape) if rank is None or rank <= len(shape) else (1,) * (rank - len(shape)) + tuple(shape)


def _finished(m, d, fam: str, fn, rank, npdt, dshape: tuple) -> bool:
    """Whether the writer's ``finish`` would leave ``fn``'s result as it is (its dtype the tile's, its shape the
    tile's after the rows): an elementwise ufunc (or a select) gives a dtype its operands' dtypes decide and the
    shape they broadcast to, so a call on arrays of their dtypes and shapes (one row each) tells. The operands
    ``_Tiles`` reads are the tiles' own dtypes and shapes (what their writers finished them to)."""
    v = d.vals
    if fam == "vsel":
        fields, fn = ("c", "a", "b"), np.where
    elif fam in ("vbin", "vcmp") and isinstance(fn, np.ufunc) and fn.nin == 2:
        fields = ("a", "b")
    elif fam in ("vun", "vbins", "vcmps") and isinstance(fn, np.ufunc) and fn.nin == (1 if fam == "vun" else 2):
        fields = ("a",)
    else:
        return False
    args = []
    for name in fields:
        _, dtp, shape = m.layout(v[name])
        args.append(np.zeros((1,) + _full(shape, rank), dtp.np))
    if fam in ("vbins", "vcmps"):
        _, adt, ashape = m.layout(v["a"])
        s = np.zeros((1,) * (len(ashape) + 1), adt.np)  # (``lift`` of the register: the operand's dtype)
        args = [s, args[0]] if v["rev"] else [args[0], s]
    try:
        with np.errstate(all="ignore"):
            out = fn(*args)
    except (TypeError, ValueError):
        return False
    return out.__class__ is np.ndarray and out.dtype == npdt and out.shape[1:] == dshape


class _Tiles:
    """The code of a block's vector instructions for a small batch: each computes its result at once with the
    family's function (``vm.semantics``, or the row's numpy function) on whole arrays, as the step's own
    function would when its value is read (the same numpy operations on the same values: the step-by-step path
    leaves elementwise results pending, to evaluate long chains over large batches in cache-sized chunks),
    and stores it in the unified buffer (``state.place``, as the step's writer does). A result a later
    instruction of the block reads at the same address, size and dtype is taken from a local variable instead
    of the buffer; any other step the block calls may change any tile (or global memory under a tile that
    views it), so after one the block reads the buffer again."""

    def __init__(self, m, env: dict):
        self.m, self.env = m, env
        self.local: dict = {}  # (addr, nbytes, dtype) -> (variable, shape)
        self.used = False
        self.n = 0
        env.update({"sem": sem, "np": np, "Slot": Slot, "place_among": place_among, "lift": sem.lift})

    def forget(self) -> None:
        self.local.clear()

    def forget_range(self, lo: int, hi: int) -> None:
        """Forget the locals of the unified-buffer bytes [lo, hi) (a step overwrote them, and nothing else)."""
        for key in [k for k in self.local if k[0] < hi and lo < k[0] + k[1]]:
            del self.local[key]

    def _read(self, d, field: str, rank, lines: list) -> str:
        m = self.m
        addr, dtp, shape = m.layout(d.vals[field])
        nbytes = prod(shape) * dtp.itemsize
        full = _full(shape, rank)
        hit = self.local.get((addr, nbytes, dtp.np))
        if hit is not None and d.ins.spaces[field] == "ub":
            var, have = hit
            return var if have == full else f"{var}.reshape(({var}.shape[0],) + {full!r})"
        name = f"RD{d.pc}_{field}"
        self.env[name] = m.reader(d.vals[field], d.ins.spaces[field], rank)
        self.n += 1
        var = f"t{self.n}"
        lines.append(f"{var} = {name}(b, L)")
        if d.ins.spaces[field] == "ub":
            self.local[(addr, nbytes, dtp.np)] = (var, full)
        return var

    def emit(self, d, lines: list) -> bool:
        """Append the code running vector instruction ``d`` directly; False when its family is not run so."""
        fam = d.ins.family
        spec = _DIRECT.get(fam)
        if spec is None or d.ins.spaces.get("dst") != "ub":
            return False
        m, env, v, pc = self.m, self.env, d.vals, d.pc
        fields, at_dst = spec
        daddr, ddt, dshape = m.layout(v["dst"])
        rank = len(dshape) if at_dst else None
        ops = [self._read(d, f, rank, lines) for f in fields]
        f = f"F{pc}"
        if fam == "vbin" or fam == "vun":
            env[f] = d.ins.fn
            expr = f"{f}({', '.join(ops)})"
        elif fam in ("vbins", "vcmps"):
            env[f] = d.ins.fn if fam == "vbins" else isa.COMPARE[isa.CC_NAMES[v["cc"]]]
            _, adt, ashape = m.layout(v["a"])
            env[f"A{pc}"] = adt.np
            s = f"lift(R[{v['rs']}], {len(ashape)}, A{pc})"
            expr = f"{f}({s}, {ops[0]})" if v["rev"] else f"{f}({ops[0]}, {s})"
        elif fam == "vcmp":
            env[f] = isa.COMPARE[isa.CC_NAMES[v["cc"]]]
            expr = f"{f}({ops[0]}, {ops[1]})"
        elif fam == "vsel":
            expr = f"np.where({ops[0]}, {ops[1]}, {ops[2]})"
        elif fam == "vcast":
            env[f"T{pc}"] = d.dtype.np
            expr = f"sem.converted({ops[0]}, T{pc}, {bool(v['bitcast'])}, {bool(v['rtz'])})"
        elif fam == "vfma":
            env[f"T{pc}"] = d.dtype.np
            expr = f"sem.vfma({ops[0]}, {ops[1]}, {ops[2]}, T{pc})"
        elif fam == "vdup":
            env[f"T{pc}"] = ddt.np
            lines.append(f"s_ = lift(R[{v['rs']}], {len(dshape)}, T{pc})")
            expr = f"np.broadcast_to(s_, (s_.shape[0],) + {tuple(dshape)!r})"
        elif fam == "viota":
            _, start = sop_parts(v["start"])
            value = sem.viota(start, dshape[0])
            value.setflags(write=False)
            env[f"V{pc}"] = value
            expr = f"V{pc}"
        elif fam == "vcopy":
            expr = f"np.broadcast_to({ops[0]}, ({ops[0]}.shape[0],) + {tuple(dshape)!r})"
        else:  # vreduce
            _, adt, _ = m.layout(v["a"])
            env[f] = sem.reducer(isa.REDUCE_OPS[v["op"]], v["axis"] + 1,
                                 np.float32 if adt in sem.WIDE_REDUCE else None, ddt.np, dshape)
            expr = f"{f}({ops[0]})"
        nbytes = prod(dshape) * ddt.itemsize
        self.n += 1
        var = f"t{self.n}"
        if _finished(m, d, fam, env.get(f), rank, ddt.np, tuple(dshape)):
            lines.append(f"{var} = {expr}")
        else:
            env[f"FIN{pc}"] = m.writer(v["dst"]).finish
            lines.append(f"{var} = FIN{pc}({expr})")
        self.store(daddr, nbytes, ddt.np, tuple(dshape), var, lines)
        return True

    def store(self, daddr: int, nbytes: int, npdt, shape: tuple, var: str, lines: list) -> None:
        """The line storing ``var`` (a tile of ``shape``) at ``daddr`` of the unified buffer, as the writer stores
        it; ``var`` holds those bytes from here on."""
        lines.append(slot_line(self.m, self.env, "ub", "MU", daddr, nbytes, var))
        self.used = True
        end = daddr + nbytes
        for key in [k for k in self.local if k[0] < end and daddr < k[0] + k[1]]:
            del self.local[key]  # (what the store cut away, or replaced)
        self.local[(daddr, nbytes, npdt)] = (var, shape)
