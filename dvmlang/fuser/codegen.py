"""The text path of fused kernels (the differential oracle of ``emit``): a ``@dvmlang.kernel`` source per
fusion group, compiled by the frontend like a hand-written kernel (``DVMLANG_FUSER=text``).

It takes the same arguments as the composed kernel (``emit.Signature``). Tile sizes are constexpr parameters
(``BR``, ``BC`` or ``BM``, ``BN``, ``BK``) chosen per call by the auto-tiler; everything that depends on the
shapes of a call (extents, strides, offsets) is a runtime argument, so a new shape only encodes.
"""

from __future__ import annotations

import itertools
import linecache
import types
import weakref

import numpy as np

from .. import dtypes as dt
from .. import language as dl
from .. import opdefs
from ..runtime import kernel
from .signature import Layout, Signature, free_nodes, matmul_parts
from .fusion import Group, memory_operands
from .graph import Graph, Node

_counter = itertools.count()
# kernel text -> its Kernel, while anything holds that Kernel: graphs whose groups generate the same text (the
# same graph built again, another graph with a group of the same ops, a lazy program seen before) share one
# Kernel and its builds, as two call sites of one @dvmlang.kernel do
_BUILT: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()

class Source:
    def __init__(self):
        self.lines: list[str] = []
        self.indent = 1

    def __call__(self, text: str):
        self.lines.append("    " * self.indent + text)


# partial results of column blocks combined (NaN-propagating, numpy's rule)
_COMBINE = {"sum": "{} + {}", "prod": "{} * {}", "max": "dl.maximum({}, {}, propagate_nan=dl.PropagateNan.ALL)",
            "min": "dl.minimum({}, {}, propagate_nan=dl.PropagateNan.ALL)"}


def _ident(op: str, d: dt.DType) -> str:
    if op == "sum":
        return "0.0" if d.is_float else "0"
    if op == "prod":
        return "1.0" if d.is_float else "1"
    if d.is_float:
        return '-float("inf")' if op == "max" else 'float("inf")'
    info = np.iinfo(d.np)
    return repr(int(info.min if op == "max" else info.max))


def emit_value(src: Source, g: Graph, n: Node, names: dict, idx: dict) -> str:
    """One node as an expression over tiles ``names``; ``idx`` maps rows/cols/outer to index expressions."""
    a = [names.get(i.id) for i in n.inputs]
    op = n.op
    if op in opdefs.FUSIBLE:
        return opdefs.ELEMENTWISE[op].fuse.format(*a)
    if op == "where":
        return f"dl.where({a[0]}, {a[1]}, {a[2]})"
    if op == "cast":
        return f"({a[0]}).to(dl.{n.dtype.name})"
    if op == "broadcast_to":
        return a[0]
    if op == "const":
        return idx["const"](n)  # a runtime parameter of the constant's dtype (emit.Signature.consts)
    if op == "dim":
        return idx["dim"](n.attrs["sym"])
    if op == "iota":
        rank = len(n.shape)
        ax = n.attrs["axis"]
        along = g.syms.find(n.shape[ax])
        if isinstance(along, int) and along == 1:  # (broadcast over the box: 0)
            return "dl.zeros((1, 1), dl.int32)"
        if ax == rank - 1:
            return f"({idx['cols']})[None, :]"
        if ax == rank - 2:
            return f"({idx['rows']})[:, None]"
        return idx["outer"](ax)
    raise AssertionError(f"no code for {op}")


class KernelText:
    """Generated source plus the signature the runtime calls it with."""

    def __init__(self, name, text, sig: Signature):
        self.name = name
        self.text = text
        self.sig = sig
        self.kernel = None

    def compile(self):
        """Turn the text into a ``Kernel`` (the one already made from the same text, while it lives). The source
        is registered with linecache for the frontend, the trace viewer and error messages, for as long as the
        ``Kernel`` lives (its programs' caches decide)."""
        if self.kernel is None:
            key = (self.name, self.text)
            k = _BUILT.get(key)
            if k is None:
                filename = f"<dvmlang fused {self.name} #{next(_counter)}>"
                lines = self.text.splitlines(True)
                linecache.cache[filename] = (len(self.text), None, lines, filename)
                # the source spells the decorator as a user does (@dvmlang.kernel); its namespace binds that name
                # to the decorator alone, without the package root (which imports the fuser)
                ns = {"dl": dl, "dvmlang": types.SimpleNamespace(kernel=kernel)}
                if "libdevice." in self.text:  # (two-operand C math: atan2, hypot, copysign)
                    from ..triton.language.extra import libdevice
                    ns["libdevice"] = libdevice
                exec(compile(self.text, filename, "exec"), ns)  # noqa: S102 - our own generated code
                k = ns[self.name]
                weakref.finalize(k, linecache.cache.pop, filename, None)
                _BUILT[key] = k
            self.kernel = k
        return self.kernel


def _origin(g: Graph, d) -> str:
    """A size as a message names it: a number, or where the symbol comes from (``w.shape[0]``)."""
    d = g.syms.find(d)
    return str(d) if isinstance(d, int) else d.origin.replace('"', "'")


def _persistent_header(src: Source, outer: int) -> None:
    """A generated kernel is persistent: it is launched with at most one program per core (``persistent_grid``)
    and each program loops over the logical grid's programs (``vp``), so programs beyond the core count cost a
    loop iteration rather than a dispatch (docs/device.md, ``program_dispatch_cycles``)."""
    src("for vp in range(dl.program_id(0), GN, dl.num_programs(0)):")
    src.indent += 1
    src("pid = vp % G0")
    for d in range(outer):
        src(f"o{d} = (vp // G0) % G1" if d == 0 else "o1 = vp // (G0 * G1)")


def kernel_text(g: Graph, grp: Group, name: str, sig: Signature) -> KernelText:
    return (matmul_kernel if grp.kind == "matmul" else vector_kernel)(g, grp, name, sig)


def vector_kernel(g: Graph, grp: Group, name: str, sig: Signature) -> KernelText:
    space = grp.space
    r = len(space)
    outer = r - 2 if r >= 2 else 0
    free = free_nodes(grp)
    ins, outs, params = sig.inputs, sig.outputs, sig.params
    src = Source()
    src.indent = 0
    src("@dvmlang.kernel")
    src(f"def {name}({', '.join(params)}, BR: dl.constexpr, BC: dl.constexpr):")
    src.indent = 1
    src(f'"""Fused group {grp.name} ({grp.mode} tiling) of graph `{g.name}`."""')
    _persistent_header(src, outer)
    if grp.mode == "tiled":
        src("rows = (pid // NCB) * BR + dl.arange(0, BR)")
    else:
        src("rows = pid * BR + dl.arange(0, BR)")
    src("rmask = rows < R")

    def address(kind, k, lay: Layout, rows_v, cols_v):
        terms = []
        for d in range(outer):
            if lay.present[d]:
                terms.append(f"o{d} * {kind}{k}_s{d}")
        if r >= 2 and lay.present[r - 2]:
            terms.append(f"{rows_v}[:, None] * {kind}{k}_s{r - 2}")
        if r >= 1 and lay.present[r - 1]:
            terms.append(f"{cols_v}[None, :] * {kind}{k}_s{r - 1}")
        expr = f"{kind}{k}" + "".join(f" + {t}" for t in terms)
        rr = "BR" if r >= 2 and lay.present[r - 2] else "1"
        cc = "BC" if r >= 1 and lay.present[r - 1] else "1"
        if rr == "1" and cc == "1":
            expr = f"dl.broadcast_to({expr}, (1, 1))"
        elif rr == "1":
            expr = f"dl.broadcast_to({expr}, (1, BC))"
        elif cc == "1":
            expr = f"dl.broadcast_to({expr}, (BR, 1))"
        rm = "rmask[:, None]" if rr == "BR" else None
        cm = "cmask[None, :]" if cc == "BC" else None
        mask = " & ".join(m for m in (rm, cm) if m) or None
        return expr, mask, (rr, cc)

    names: dict[int, str] = {}
    cnames = {n.id: f"c{k}" for k, n in enumerate(sig.consts)}
    idx = {"rows": "rows", "cols": "cols", "dim": lambda s: f"dim{s.id}", "const": lambda n: cnames[n.id],
           "outer": lambda ax: f"o{ax}"}

    body_ids = {n.id for n in grp.body()}
    # inputs read only at positions of their own (a gather's table, a cat's parts) are not loaded as tiles
    tile_reads = {i.id for n in grp.body() for i in n.inputs if i not in memory_operands(n)}
    in_index = {x.id: k for k, x in enumerate(ins)}

    def size(d) -> str:
        d = g.syms.find(d)
        return str(d) if isinstance(d, int) else f"idim{d.id}"

    def index_of(d) -> str:
        return f"o{d}" if d < outer else "rows[:, None]" if d == r - 2 else "cols[None, :]"

    def tile_of(n: Node):
        lay = Layout(g, n.shape, space)
        rr = "BR" if r >= 2 and lay.present[r - 2] else "1"
        cc = "BC" if r >= 1 and lay.present[r - 1] else "1"
        masks = [m for m, p in (("rmask[:, None]", rr == "BR"), ("cmask[None, :]", cc == "BC")) if p]
        return (rr, cc), " & ".join(masks) or None

    def load_at(x: Node, repl: dict, tile, mask) -> str:
        """A load of input ``x`` over the tile ``tile``, with the index of space dim d replaced by repl[d]."""
        k = in_index[x.id]
        lay = Layout(g, x.shape, space)
        terms = [f"({repl[d] if d in repl else index_of(d)}) * in{k}_s{d}" for d in range(r) if lay.present[d]]
        expr = f"dl.broadcast_to(in{k}{''.join(' + ' + t for t in terms)}, ({tile[0]}, {tile[1]}))"
        return f"dl.load({expr}{f', mask={mask}, other=0' if mask else ''})"

    def emit_memory_read(n: Node) -> str:
        tile, mask = tile_of(n)
        ax = n.attrs["axis"]
        if n.op == "gather":
            table, idx = n.inputs[0], names[n.inputs[1].id]
            bound = size(table.shape[ax])
            src(f"dl.device_assert(({idx} >= 0) & ({idx} < {bound}), \"dvmlang.ops gather (%{n.id} of graph "
                f"`{g.name}`): an index is outside [0, {_origin(g, table.shape[ax])})\"{f', mask={mask}' if mask else ''})")
            return load_at(table, {ax: idx}, tile, mask)
        acc = None
        for j, (part, off) in enumerate(zip(n.inputs, n.attrs["offsets"])):
            o = size(off)
            lo = f"({index_of(ax)} >= {o})" if j else None
            hi = f"({index_of(ax)} < {o} + {size(part.shape[ax])})" if j < len(n.inputs) - 1 else None
            inside = " & ".join(c for c in (lo, hi) if c) or "True"
            src(f"m{n.id}_{j} = {inside}")
            m = f"m{n.id}_{j}" + (f" & {mask}" if mask else "")
            if part.id in in_index:
                src(f"p{n.id}_{j} = {load_at(part, {ax: f'{index_of(ax)} - {o}'}, tile, m)}")
            else:  # (computed in the kernel: a number broadcast)
                src(f"p{n.id}_{j} = dl.broadcast_to({names[part.id]}, ({tile[0]}, {tile[1]}))")
            acc = f"p{n.id}_{j}" if acc is None else f"dl.where(m{n.id}_{j}, p{n.id}_{j}, {acc})"
            if j:
                src(f"c{n.id}_{j} = {acc}")
                acc = f"c{n.id}_{j}"
        return acc

    def emit_loads(along_cols=None):
        """Load the inputs; ``along_cols`` True/False: only those that vary / do not vary along the columns."""
        for k, x in enumerate(ins):
            if x.id not in tile_reads:
                continue
            lay = Layout(g, x.shape, space)
            if along_cols is not None and along_cols != (r >= 1 and lay.present[r - 1]):
                continue
            expr, mask, _ = address("in", k, lay, "rows", "cols")
            m = f", mask={mask}, other=0" if mask else ""
            src(f"x{k} = dl.load({expr}{m})")
            names[x.id] = f"x{k}"

    def emit_node(n: Node):
        if n.op == "reduce":
            op = n.attrs["op"]
            v = names[n.inputs[0].id]
            masked = f"dl.where(cmask[None, :], {v}, {_ident(op, n.dtype)})"
            nan = ", propagate_nan=dl.PropagateNan.ALL" if op in ("max", "min") else ""  # numpy's NaN rule, not Triton's
            red = f"dl.{op}({masked}, axis=1, keep_dims=True{nan})"
            if grp.mode == "loop":
                src(f"r{n.id} = {red}")
                combine = _COMBINE[op].format(f"acc{n.id}", f"r{n.id}")
                src(f"acc{n.id} = {combine}")
                names[n.id] = f"acc{n.id}"
            else:
                src(f"v{n.id} = {red}")
                names[n.id] = f"v{n.id}"
            return
        if n.op in ("gather", "cat"):
            src(f"v{n.id} = {emit_memory_read(n)}")
            names[n.id] = f"v{n.id}"
            return
        if n.op == "cumsum":
            (rr, cc), _ = tile_of(n)
            v = names[n.inputs[0].id]
            op = n.attrs.get("op", "sum")
            src(f"t{n.id} = dl.where(cmask[None, :], dl.broadcast_to({v}, ({rr}, BC)), {_ident(op, n.dtype)})")
            if grp.mode == "loop":
                comb = _COMBINE[op]
                nan = ", propagate_nan=dl.PropagateNan.ALL" if op in ("max", "min") else ""
                src(f"v{n.id} = " + comb.format(f"dl.cum{op}(t{n.id}, axis=1)", f"cs{n.id}"))
                src(f"cs{n.id} = " + comb.format(f"cs{n.id}", f"dl.{op}(t{n.id}, axis=1, keep_dims=True{nan})"))
            else:
                src(f"v{n.id} = dl.cum{op}(t{n.id}, axis=1)")
            names[n.id] = f"v{n.id}"
            return
        if n.op == "sort":  # a whole row in one tile (row mode): the columns past the row sort last
            (rr, cc), _ = tile_of(n)
            desc = bool(n.attrs.get("descending", False))
            pad = ('-float("inf")' if desc else 'float("nan")') if n.dtype.is_float else \
                repr(int(np.iinfo(n.dtype.np).min if desc else np.iinfo(n.dtype.np).max))
            src(f"t{n.id} = dl.where(cmask[None, :], dl.broadcast_to({names[n.inputs[0].id]}, ({rr}, BC)), {pad})")
            src(f"v{n.id} = dl.sort(t{n.id}, dim=1, descending={desc})")
            names[n.id] = f"v{n.id}"
            return
        src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
        names[n.id] = f"v{n.id}"

    def emit_store(k, n: Node):
        lay = Layout(g, n.shape, space)
        expr, mask, (rr, cc) = address("out", k, lay, "rows", "cols")
        v = names[n.id]
        val = f"dl.broadcast_to({v}, ({rr}, {cc}))"
        m = f", mask={mask}" if mask else ""
        src(f"dl.store({expr}, {val}{m})")

    reduce_nodes = [n for n in grp.body() if n.op == "reduce"]
    if grp.mode == "loop":
        # after the loop: the per-row work on the reductions' results; before it: per-row work that needs no
        # reduction (it does not change along the columns); in it: everything else
        after = set()
        for n in grp.body():
            if n.op != "reduce" and any(i.id in after or i.op == "reduce" and i in grp.body() for i in n.inputs):
                after.add(n.id)
        before = set()
        for n in grp.body():  # a cumsum scans the columns: it, and what uses it, run in the column loop
            if n.op not in ("reduce", "cumsum") and n.id not in after and \
                    not (r >= 1 and Layout(g, n.shape, space).present[r - 1]) and \
                    all(i.id in before for i in n.inputs if i.id in body_ids):
                before.add(n.id)
        for n in reduce_nodes:
            src(f"acc{n.id} = dl.full((BR, 1), {_ident(n.attrs['op'], n.dtype)}, dl.{n.dtype.name})")
        for n in grp.body():
            if n.op == "cumsum":
                src(f"cs{n.id} = dl.full(({tile_of(n)[0][0]}, 1), {_ident(n.attrs.get('op', 'sum'), n.dtype)}, "
                    f"dl.{n.dtype.name})")
        for n in free:  # (row and outer indices too: the same in every column block)
            if n.op != "iota" or not Layout(g, n.shape, space).present[r - 1]:
                src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
                names[n.id] = f"v{n.id}"
        emit_loads(along_cols=False)
        for n in grp.body():
            if n.id in before:
                emit_node(n)
        src("for c0 in range(0, C, BC):")
        src.indent += 1
        src("cols = c0 + dl.arange(0, BC)")
        src("cmask = cols < C")
        emit_loads(along_cols=True)
        for n in free:
            if n.op == "iota" and Layout(g, n.shape, space).present[r - 1]:
                src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
                names[n.id] = f"v{n.id}"
        for n in grp.body():
            if n.id not in after and n.id not in before:
                emit_node(n)
        for k, o in enumerate(outs):
            if o.id not in after and o.id not in before and o.op != "reduce":
                emit_store(k, o)
        src.indent -= 1
        for n in grp.body():
            if n.id in after:
                emit_node(n)
        for k, o in enumerate(outs):
            if o.id in after or o.id in before or o.op == "reduce":
                emit_store(k, o)
    else:
        if grp.mode == "tiled":
            src("cols = (pid % NCB) * BC + dl.arange(0, BC)")
        else:
            src("cols = dl.arange(0, BC)")
        src("cmask = cols < C")
        emit_loads()
        for n in free:
            src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
            names[n.id] = f"v{n.id}"
        for n in grp.body():
            emit_node(n)
        for k, o in enumerate(outs):
            emit_store(k, o)
    text = "\n".join(src.lines) + "\n"
    return KernelText(name, text, sig)


def matmul_kernel(g: Graph, grp: Group, name: str, sig: Signature) -> KernelText:
    mm, a, b, epilogue, ext, outs = matmul_parts(g, grp)
    space = mm.shape
    r = len(space)
    nb = r - 2  # batch dims (<= 2)
    free = free_nodes(grp)
    params = sig.params
    la = Layout(g, a.shape, space[:-2] + (a.shape[-2], a.shape[-1]))
    lb = Layout(g, b.shape, space[:-2] + (b.shape[-2], b.shape[-1]))
    src = Source()
    src.indent = 0
    src("@dvmlang.kernel")
    src(f"def {name}({', '.join(params)}, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):")
    src.indent = 1
    src(f'"""Fused group {grp.name}: batched matmul on the cube with an elementwise epilogue."""')
    _persistent_header(src, nb)
    src("rm = (pid // NBN) * BM + dl.arange(0, BM)")
    src("rn = (pid % NBN) * BN + dl.arange(0, BN)")
    src("rk = dl.arange(0, BK)")

    def batch_terms(kind, lay: Layout):
        return "".join(f" + o{d} * {kind}_s{d}" for d in range(nb) if lay.present[d])

    src(f"a_ptrs = A{batch_terms('A', la)} + rm[:, None] * A_s{r - 2} + rk[None, :] * A_s{r - 1}")
    src(f"b_ptrs = B{batch_terms('B', lb)} + rk[:, None] * B_s{r - 2} + rn[None, :] * B_s{r - 1}")
    src("acc = dl.zeros((BM, BN), dl.float32)" if not mm.dtype.is_int else "acc = dl.zeros((BM, BN), dl.int32)")
    src("for k in range(0, K, BK):")
    src.indent += 1
    src("a = dl.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0)")
    src("b = dl.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0)")
    src("acc = dl.dot(a, b, acc)")
    src(f"a_ptrs += BK * A_s{r - 1}")
    src(f"b_ptrs += BK * B_s{r - 2}")
    src.indent -= 1
    names = {mm.id: "v_mm"}
    src(f"v_mm = acc.to(dl.{mm.dtype.name})")
    src("mmask = (rm[:, None] < M) & (rn[None, :] < N)")
    cnames = {n.id: f"c{k}" for k, n in enumerate(sig.consts)}
    idx = {"rows": "rm", "cols": "rn", "dim": lambda s: f"dim{s.id}", "outer": lambda ax: f"o{ax}",
           "const": lambda n: cnames[n.id]}
    for k, x in enumerate(ext):
        lay = Layout(g, x.shape, space)
        terms = [f"o{d} * in{k}_s{d}" for d in range(nb) if lay.present[d]]
        rr = lay.present[r - 2]
        cc = lay.present[r - 1]
        if rr:
            terms.append(f"rm[:, None] * in{k}_s{r - 2}")
        if cc:
            terms.append(f"rn[None, :] * in{k}_s{r - 1}")
        shape = f"({'BM' if rr else 1}, {'BN' if cc else 1})"
        mask = " & ".join(m for m in ("(rm[:, None] < M)" if rr else "", "(rn[None, :] < N)" if cc else "") if m)
        m = f", mask={mask}, other=0" if mask else ""
        src(f"x{k} = dl.load(dl.broadcast_to(in{k}{''.join(' + ' + t for t in terms)}, {shape}){m})")
        names[x.id] = f"x{k}"
    for n in free:
        src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
        names[n.id] = f"v{n.id}"
    for n in epilogue:
        src(f"v{n.id} = {emit_value(src, g, n, names, idx)}")
        names[n.id] = f"v{n.id}"
    for k, o in enumerate(outs):
        lay = Layout(g, o.shape, space)
        terms = [f"o{d} * out{k}_s{d}" for d in range(nb) if lay.present[d]]
        terms += [f"rm[:, None] * out{k}_s{r - 2}", f"rn[None, :] * out{k}_s{r - 1}"]
        src(f"dl.store(out{k} + {' + '.join(terms)}, dl.broadcast_to({names[o.id]}, (BM, BN)), mask=mmask)")
    text = "\n".join(src.lines) + "\n"
    return KernelText(name, text, sig)
