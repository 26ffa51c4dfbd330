"""Build every fusion group's kernel by composing fragments into a skeleton (DVM's way; design §2, §8).

A group's kernel is one of two skeletons:

* **vector** (tiled, row and loop modes): the parameter prologue; a persistent program loop over the logical
  grid (``for vp in range(pid, GN, nprog)``); per logical program its coordinates, the DMA loads of its inputs'
  boxes, the group's operations (each a row of ``fragments.FRAGMENTS``) and the DMA stores of its outputs. Loop
  mode wraps the per-column work in a column-block loop with the reductions' accumulators carried across it.
  The innermost loop that loads is emitted twice (ping-pong buffers) when both copies fit UB.
* **matmul**: the same program loop around a K loop (DMA into L1, L1 -> L0A/L0B, MMAD into an L0C accumulator,
  ping-pong), then the elementwise epilogue on the accumulator (FixPipe stores it straight to GM when there is
  no epilogue).

Everything is written as instructions over virtual tiles and registers (``vm.compose``); the link allocates,
places events and assembles. No source text, no IR, no generic lowering: a build costs a few microseconds per
instruction. The text path (``codegen``: a ``@dvmlang.kernel`` source per group through the frontend) stays as
the differential oracle (``DVMLANG_FUSER=text``).

Both paths take the same arguments (``Signature``): per tensor its flat array and the strides of the dims it
varies along, then the sizes, the symbols the group's values use, and the logical grid.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import BufferOverflowError
from ..vm import isa
from ..vm.compose import Reg
from ..vm.lower.program import Template
from .fragments import FRAGMENTS, identity
from .fusion import Group, memory_operands
from .graph import Graph, Node
from .kernel_context import KernelContext
from .signature import Layout, Signature, free_nodes, matmul_parts

# ---- the vector skeleton -------------------------------------------------------------------------------------

def _program_coords(k: KernelContext, vp: Reg, outer: int, tiled: bool, loc) -> None:
    """pid, the outer coordinates and the block's first row and column of logical program ``vp``."""
    s = k.scalar
    pp = k.per_program
    pid = pp["pid"] = k.s_op("mod", vp, s["G0"], dt.int32, loc)
    if outer >= 1:
        t = k.s_op("div", vp, s["G0"], dt.int32, loc)
        pp["o0"] = k.s_op("mod", t, s["G1"], dt.int32, loc) if outer == 2 else t
    if outer == 2:
        g01 = k.s_op("mul", s["G0"], s["G1"], dt.int32, loc)
        pp["o1"] = k.s_op("div", vp, g01, dt.int32, loc)
    if tiled:
        rb = k.s_op("div", pid, s["NCB"], dt.int32, loc)
        cb = k.s_op("mod", pid, s["NCB"], dt.int32, loc)
        pp["row0"] = k.s_op("mul", rb, k.constant(k.br, dt.int32), dt.int32, loc)
        pp["col0"] = k.s_op("mul", cb, k.constant(k.bc, dt.int32), dt.int32, loc)
        pp["cols_left"] = k.s_op("sub", s["C"], pp["col0"], dt.int32, loc)
    else:
        pp["row0"] = k.s_op("mul", pid, k.constant(k.br, dt.int32), dt.int32, loc)
        pp["col0"] = None
        pp["cols_left"] = s["C"]
    pp["rows_left"] = k.s_op("sub", s["R"], pp["row0"], dt.int32, loc)


def _persistent(k: KernelContext, body, copies: int, loc) -> None:
    """``for vp in range(program_id, GN, num_programs): body(vp, copy)``, the body emitted ``copies`` times per
    trip (ping-pong)."""
    c = k.c
    pid = k.sreg(dt.int32)
    c.emit("PID", {"rd": pid, "axis": 0}, dt.int32, loc)
    nprog = k.sreg(dt.int32)
    c.emit("NPROG", {"rd": nprog, "axis": 0}, dt.int32, loc)
    vp = k.sreg(dt.int32)
    c.emit("MOV", {"rd": vp, "rs": pid}, dt.int32, loc)
    head, exit_ = c.label("head"), c.label("exit")
    start = c.loop_begin()
    c.place(head)

    def one(copy):
        cond = k.sreg(dt.bool_)
        c.emit("SCMP", {"rd": cond, "ra": vp, "rb": k.scalar["GN"], "cc": isa.CC_NAMES.index("lt")}, dt.int32, loc)
        c.branch("BRZ", exit_, loc, rc=cond)
        k.per_program = {}
        body(vp, copy)
        c.emit("SADD", {"rd": vp, "ra": vp, "rb": nprog}, dt.int32, loc)

    c.unrolled(one, copies)
    c.branch("JMP", head, loc)
    c.place(exit_)
    c.loop_end(start)


def _vector_body(k: KernelContext, free: list, vp: Reg, loc) -> None:
    g, grp, sig = k.g, k.grp, k.sig
    space = sig.space
    r = len(space)
    outer = r - 2 if r >= 2 else 0
    mode = grp.mode
    split = mode == "split"  # loop mode over one row in chunks: program pid reduces columns [pid*CH, pid*CH + CH)
    _program_coords(k, vp, outer, mode == "tiled", loc)
    if split:
        pid = k.per_program["pid"]
        k.per_program["row0"] = None
        k.per_program["rows_left"] = k.scalar["R"]
        cstart = k.s_op("mul", pid, k.scalar["CH"], dt.int32, loc)
        cend = k.s_op("minimum", k.s_op("add", cstart, k.scalar["CH"], dt.int32, loc), k.scalar["C"], dt.int32, loc)
        k.per_program["cbound"] = cend
    ins = sig.inputs
    tile_reads = {i.id for n in grp.body() for i in n.inputs if i not in memory_operands(n)}
    values = k.values
    values.clear()
    for n in free:
        if n.op != "iota" and n.id in k.hoisted:
            values[n.id] = k.hoisted[n.id]

    def load_inputs(along_cols=None):
        for j, x in enumerate(ins):
            if x.id not in tile_reads:
                continue
            lay = Layout(g, x.shape, space)
            if along_cols is not None and along_cols != (r >= 1 and lay.present[r - 1]):
                continue
            values[x.id] = k.load("in", j, x, loc=k.loc(k.first_user.get(x.id)))

    def compute(n: Node):
        mem = memory_operands(n)  # read from memory by the fragment itself, at positions of its own
        values[n.id] = FRAGMENTS[n.op].emit(k, n, [None if i in mem else values[i.id] for i in n.inputs])

    def free_values(iota: bool, along_cols: bool | None = None):
        for n in free:
            if (n.op == "iota") == iota and n.id not in values and \
                    (along_cols is None or along_cols == Layout(g, n.shape, space).present[r - 1]):
                compute(n)

    def store(j: int, o: Node):
        k.store(j, o, values[o.id], loc=k.loc(o) or loc)

    if mode not in ("loop", "split"):
        load_inputs()
        free_values(False)
        free_values(True)
        for n in grp.body():
            compute(n)
        for j, o in enumerate(sig.outputs):
            store(j, o)
        return
    # loop mode: per-row work that needs no reduction before the column loop, everything else in it, the work
    # on the reductions' results after it
    body_ids = {n.id for n in grp.body()}
    after, before = set(), set()
    for n in grp.body():
        if n.op != "reduce" and any(i.id in after or i.op == "reduce" and i in grp.body() for i in n.inputs):
            after.add(n.id)
    for n in grp.body():  # a cumsum scans the columns: it, and what uses it, run in the column loop
        if n.op not in ("reduce", "cumsum") and n.id not in after and \
                not (r >= 1 and Layout(g, n.shape, space).present[r - 1]) and \
                all(i.id in before for i in n.inputs if i.id in body_ids):
            before.add(n.id)
    c = k.c
    for n in grp.body():
        if n.op in ("reduce", "cumsum"):
            rows = k.br if Layout(g, n.shape, space).present[r - 2] or n.op == "reduce" else 1
            acc = k.tile((k.br if n.op == "reduce" else rows, 1), n.dtype, f"{n.op} accumulator", k.loc(n))
            ident = k.constant(identity(n.attrs.get("op", "sum"), n.dtype), n.dtype)
            c.emit("VDUP", {"rs": ident, "dst": c.ref(acc)}, n.dtype, k.loc(n), writes=[acc])
            k.acc[n.id] = acc
    free_values(False)
    free_values(True, along_cols=False)  # (row and outer indices: the same in every column block)
    load_inputs(along_cols=False)
    for n in grp.body():
        if n.id in before:
            compute(n)
    # the column loop: for c0 in range(0, C, BC) (a split group's: over its chunk)
    c0 = k.sreg(dt.int32)
    c.emit("MOV", {"rd": c0, "rs": cstart if split else k.constant(0, dt.int32)}, dt.int32, loc)
    bound = cend if split else k.scalar["C"]
    head, exit_ = c.label("col head"), c.label("col exit")
    start = c.loop_begin()
    c.place(head)
    outer_pp = dict(k.per_program)
    outer_values = dict(values)

    def column_block(copy):
        k.per_program = dict(outer_pp)
        values.clear()
        values.update(outer_values)
        cond = k.sreg(dt.bool_)
        c.emit("SCMP", {"rd": cond, "ra": c0, "rb": bound, "cc": isa.CC_NAMES.index("lt")}, dt.int32, loc)
        c.branch("BRZ", exit_, loc, rc=cond)
        k.per_program["col0"] = c0
        k.per_program["cols_left"] = k.s_op("sub", bound, c0, dt.int32, loc)
        load_inputs(along_cols=True)
        free_values(True)
        for n in grp.body():
            if n.id not in after and n.id not in before:
                compute(n)
        for j, o in enumerate(sig.outputs):
            if o.id not in after and o.id not in before and o.op != "reduce":
                store(j, o)
        c.emit("SADD", {"rd": c0, "ra": c0, "rb": k.constant(k.bc, dt.int32)}, dt.int32, loc)

    c.unrolled(column_block, 2 if k.double and any(
        x.id in tile_reads and r >= 1 and Layout(g, x.shape, space).present[r - 1] for x in ins) else 1)
    c.branch("JMP", head, loc)
    c.place(exit_)
    c.loop_end(start)
    k.per_program = outer_pp
    values.clear()
    values.update(outer_values)
    for n in grp.body():
        if n.op in ("reduce", "cumsum"):
            values[n.id] = k.acc[n.id]
    for n in grp.body():
        if n.id in after:
            compute(n)
    for j, o in enumerate(sig.outputs):
        if o.op == "reduce" and o.attrs.get("split"):
            k.store(j, o, values[o.id], loc=k.loc(o) or loc, at=k.per_program["pid"])  # partial pid
        elif o.id in after or o.id in before or o.op == "reduce":
            store(j, o)


def _hoist_free(k: KernelContext, free: list) -> None:
    """Free scalars (constants, sizes and arithmetic on them) are the same for every program: computed once,
    before the program loop."""
    k.hoisted = {}
    for n in free:
        if n.op == "iota":
            continue
        k.hoisted[n.id] = FRAGMENTS[n.op].emit(k, n, [k.hoisted[i.id] for i in n.inputs])


def compose_vector(g: Graph, grp: Group, name: str, sig: Signature, tiles, profile, double: bool = True,
                   loc=None) -> Template:
    k = KernelContext(g, grp, sig, name, tiles)
    k.double = double
    k.locate(loc)
    k.declare(k.fallback_loc)
    free = free_nodes(grp)
    _hoist_free(k, free)
    ins = sig.inputs
    loads = any(i.id in {x.id for n in grp.body() for x in n.inputs if x not in memory_operands(n)} for i in ins) or \
        any(n.op in ("gather", "cat") for n in grp.body())
    copies = 2 if double and grp.mode != "loop" and loads else 1
    _persistent(k, lambda vp, copy: _vector_body(k, free, vp, loc), copies, loc)
    return k.c.finish(profile)


# ---- the matmul skeleton -------------------------------------------------------------------------------------

def _matmul_body(k: KernelContext, vp: Reg, loc) -> None:
    g, grp, sig = k.g, k.grp, k.sig
    mm, a, b, epilogue, ext, outs = matmul_parts(g, grp)
    c = k.c
    space = sig.space
    r = len(space)
    nb = r - 2
    bm, bn, bk = k.tiles
    s = k.scalar
    pp = k.per_program
    pid = k.s_op("mod", vp, s["G0"], dt.int32, loc)
    if nb >= 1:
        t = k.s_op("div", vp, s["G0"], dt.int32, loc)
        pp["o0"] = k.s_op("mod", t, s["G1"], dt.int32, loc) if nb == 2 else t
    if nb == 2:
        g01 = k.s_op("mul", s["G0"], s["G1"], dt.int32, loc)
        pp["o1"] = k.s_op("div", vp, g01, dt.int32, loc)
    rb = k.s_op("div", pid, s["NBN"], dt.int32, loc)
    row0 = k.s_op("mul", rb, k.constant(bm, dt.int32), dt.int32, loc)
    cb = k.s_op("mod", pid, s["NBN"], dt.int32, loc)
    col0 = k.s_op("mul", cb, k.constant(bn, dt.int32), dt.int32, loc)
    rows_left = k.s_op("sub", s["M"], row0, dt.int32, loc)
    cols_left = k.s_op("sub", s["N"], col0, dt.int32, loc)
    mloc = k.loc(mm) or loc
    cdt = dt.float32 if mm.dtype.is_float else dt.int32
    acc = k.tile((bm, bn), cdt, "accumulator (L0C)", mloc, "l0c")
    c.emit("L0C_FILL", {"rs": k.constant(0.0 if cdt.is_float else 0, cdt), "dst": c.ref(acc)}, cdt, mloc,
           writes=[acc])
    c.code.uses_cube = True

    def operand_base(kind: str, lay: Layout, row_dim: int | None, row0_):
        """The operand's base offset for this program: its batch coordinates (and its block's first row or
        column) times the strides."""
        base = 0
        for d in range(nb):
            if lay.present[d]:
                t = k.s_op("mul", pp[f"o{d}"], s[f"{kind}_s{d}"], dt.int32, mloc)
                base = t if base == 0 else k.s_op("add", base, t, dt.int32, mloc)
        t = k.s_op("mul", row0_, s[f"{kind}_s{row_dim}"], dt.int32, mloc)
        return t if base == 0 else k.s_op("add", base, t, dt.int32, mloc)

    la = Layout(g, a.shape, space[:-2] + (a.shape[-2], a.shape[-1]))
    lb = Layout(g, b.shape, space[:-2] + (b.shape[-2], b.shape[-1]))
    a_base = operand_base("A", la, r - 2, row0)
    b_base = operand_base("B", lb, r - 1, col0)
    kk = k.sreg(dt.int32)
    c.emit("MOV", {"rd": kk, "rs": k.constant(0, dt.int32)}, dt.int32, mloc)
    head, exit_ = c.label("k head"), c.label("k exit")
    start = c.loop_begin()
    c.place(head)

    def k_step(copy):
        cond = k.sreg(dt.bool_)
        c.emit("SCMP", {"rd": cond, "ra": kk, "rb": s["K"], "cc": isa.CC_NAMES.index("lt")}, dt.int32, mloc)
        c.branch("BRZ", exit_, mloc, rc=cond)
        k_left = k.s_op("sub", s["K"], kk, dt.int32, mloc)
        tiles = []
        for kind, base, shape, stride_dims, bounds, dtype in (
                ("A", a_base, (bm, bk), (r - 2, r - 1), ((0, rows_left), (0, k_left)), a.dtype),
                ("B", b_base, (bk, bn), (r - 2, r - 1), ((0, k_left), (0, cols_left)), b.dtype)):
            step = s[f"{kind}_s{r - 1 if kind == 'A' else r - 2}"]
            off = k.s_op("mul", kk, step, dt.int32, mloc)
            addr = k.s_op("add", base, off, dt.int32, mloc)
            t = k.tile(shape, dtype, f"{kind} (L1)", mloc, "l1")
            ins = isa.DMA_LOAD_L1[2]
            vals = {"base": c.sop(addr), "gm": 0, "tensor": k.tensor[kind], "dst": c.ref(t), "pad": 0,
                    "pad_undef": 0, "keep": 0}
            for d, (sd, (lo, hi)) in enumerate(zip(stride_dims, bounds)):
                vals[f"stride{d}"] = c.sop(s[f"{kind}_s{sd}"])
                vals[f"lo{d}"] = c.sop(lo)
                vals[f"hi{d}"] = c.sop(hi)
            e = c.emit(ins.name, vals, dtype, mloc, reads=[("gm", k.tensor[kind], 0)], writes=[t])
            e.reloc_param = k.tensor[kind]
            tiles.append(t)
        l0 = []
        for t, space_, mv in ((tiles[0], "l0a", "L1_TO_L0A"), (tiles[1], "l0b", "L1_TO_L0B")):
            t0 = k.tile(t.shape, t.dtype, f"dot {space_}", mloc, space_)
            c.emit(mv, {"dst": c.ref(t0), "src": c.ref(t)}, t.dtype, mloc, reads=[t], writes=[t0])
            l0.append(t0)
        c.emit("MMAD", {"init": 0, "dst": c.ref(acc), "a": c.ref(l0[0]), "b": c.ref(l0[1])}, a.dtype, mloc,
               reads=[l0[0], l0[1], acc], writes=[acc])
        c.emit("SADD", {"rd": kk, "ra": kk, "rb": k.constant(bk, dt.int32)}, dt.int32, mloc)

    c.unrolled(k_step, 2 if k.double else 1)
    c.branch("JMP", head, mloc)
    c.place(exit_)
    c.loop_end(start)
    # the epilogue, on the output tile (BM, BN): the accumulator in UB, the epilogue's inputs, its ops, the stores
    pp["row0"], pp["col0"], pp["rows_left"], pp["cols_left"] = row0, col0, rows_left, cols_left
    k.br, k.bc = bm, bn
    values = k.values
    values.clear()
    values.update(k.hoisted)
    if not epilogue and all(o is mm for o in outs) and mm.dtype in (dt.float32, dt.float16, dt.bfloat16, dt.int32) \
            and (mm.dtype.is_float or cdt is dt.int32):
        for j, o in enumerate(outs):
            k.store(j, o, acc, loc=mloc)  # FixPipe converts and stores the accumulator
        return
    ub = k.tile((bm, bn), cdt, "accumulator result", mloc)
    c.emit("FIX_L0C_TO_UB", {"dst": c.ref(ub), "src": c.ref(acc)}, cdt, mloc, reads=[acc], writes=[ub])
    values[mm.id] = k.cast(ub, mm.dtype, mloc)
    for j, x in enumerate(ext):
        values[x.id] = k.load("in", j, x, loc=k.loc(k.first_user.get(x.id)))
    for n in free_nodes(grp):
        if n.id not in values:
            values[n.id] = FRAGMENTS[n.op].emit(k, n, [values[i.id] for i in n.inputs])
    for n in epilogue:
        values[n.id] = FRAGMENTS[n.op].emit(k, n, [values[i.id] for i in n.inputs])
    for j, o in enumerate(outs):
        k.store(j, o, values[o.id], loc=k.loc(o) or loc)


def compose_matmul(g: Graph, grp: Group, name: str, sig: Signature, tiles, profile, double: bool = True,
                   loc=None) -> Template:
    k = KernelContext(g, grp, sig, name, tiles)
    k.double = double
    k.locate(loc)
    k.declare(k.fallback_loc)
    _hoist_free(k, free_nodes(grp))
    _persistent(k, lambda vp, copy: _matmul_body(k, vp, loc), 1, loc)
    return k.c.finish(profile)


def compose(g: Graph, grp: Group, name: str, sig: Signature, tiles, profile, loc=None) -> Template:
    """The group's kernel: ping-pong where the loads' loop allows, single-buffered when both copies do not fit."""
    make = compose_matmul if grp.kind == "matmul" else compose_vector
    if profile.double_buffer:
        try:
            return make(g, grp, name, sig, tiles, profile, True, loc)
        except BufferOverflowError:
            pass
    return make(g, grp, name, sig, tiles, profile, False, loc)


__all__ = ["compose"]
