"""A fused program's launches for a new shape: what each call of a plan does, worked out once per plan.

``ProgramLaunch`` is made the first time a ``Program`` runs a plan. It holds, per group of the plan, everything
that does not depend on the call: the group's kernel and signature, how each output's shape follows from the
symbols, which arguments are plain arrays and which are views, the constants' typed values, how the sizes and
the grid follow from the symbols. ``replay(env, values, device)`` then does only the per-call work: allocate the
outputs, take each tensor's flat view and strides, compute the scalars and the grid, find or encode each
kernel's instance (``GroupKernel.prepare``), and run them all as one stacked launch.
"""

from __future__ import annotations

import re
import time
import warnings
from typing import NamedTuple

import numpy as np

from ..errors import PerformanceWarning
from ..npu import LaunchRecord
from . import tiling as tl
from .fusion import VIEWS, Group, Plan
from .graph import GraphError, Node, Sym


class GroupLaunch:
    """One group's launch in a plan: what a call needs beyond the call's sizes."""

    __slots__ = ("grp", "gk", "sig", "kind", "mode", "space", "outs", "tensors", "dims", "int_dims", "consts",
                 "mm", "gather", "tensor_at", "bases")

    def __init__(self, prog, p: Plan, grp: Group):
        self.grp = grp
        self.gk = gk = prog.kernel(p, grp)
        self.sig = gk.sig
        self.kind = grp.kind
        self.mode = grp.mode
        fields = grp.memo.get(("launch", gk.path))
        if fields is None:  # (the same for every program that shares the plan)
            fields = grp.memo[("launch", gk.path)] = self._fields(prog.graph, grp, gk)
        (self.space, self.outs, self.tensors, self.dims, self.int_dims, self.consts, self.mm, self.gather,
         self.tensor_at, self.bases) = fields

    @staticmethod
    def _fields(g, grp: Group, gk) -> tuple:
        sig = gk.sig
        space = tuple(_dim_ref(g, d) for d in grp.space)
        # (each output's id, shape, dtype and order in memory: canonical._store_in_order, None when C order)
        outs = [(o.id, tuple(_dim_ref(g, d) for d in o.shape), o.dtype.np, o.attrs.get("order"))
                for o in grp.outputs]
        tensors = []
        for j, x in enumerate(sig.inputs + sig.outputs):
            operand = grp.kind == "matmul" and j < 2
            own = tuple(_dim_ref(g, d) for d in x.shape[-2:]) if operand else None
            tensors.append((x, own, sig.arg_dims[j], x.op not in VIEWS and x.op != "broadcast_to"))
        mm = None
        if grp.kind == "matmul":
            m = grp.nodes[0]
            mm = (_dim_ref(g, m.shape[-2]), _dim_ref(g, m.shape[-1]), _dim_ref(g, m.inputs[0].shape[-1]))
        at, k = [], 0
        for _, _, arg_dims, _ in tensors:  # where the flat arrays are among the arguments
            at.append(k)
            k += 1 + len(arg_dims)
        # what each tensor parameter is stored in (the node under its views): parameters over different nodes
        # cannot share memory, unless both nodes are inputs the caller passed over one buffer
        return (space, outs, tensors, [_dim_ref(g, s) for s in sig.dims], [_dim_ref(g, s) for s in sig.int_dims],
                [_typed(n.attrs["value"], n) for n in sig.consts], mm,
                gk.text is not None and any(n.op == "gather" for n in grp.nodes), tuple(at),
                tuple(_base(x).id for x, _, _, _ in tensors))

    def const_values(self, consts: dict) -> list:
        """The constants' values with ``consts`` (node id -> value) taking the place of the graph's."""
        return [_typed(consts[n.id], n) if n.id in consts else v for n, v in zip(self.sig.consts, self.consts)]


def _base(n: Node) -> Node:
    while n.op in VIEWS:
        n = n.inputs[0]
    return n


def _typed(value, n: Node):
    """A constant as its kernel parameter takes it: a numpy scalar of the node's dtype."""
    return np.array(value).astype(n.dtype.np)[()]


def _dim_ref(g, d):
    """A dimension as a launch reads it: a size (>= 0), or ~ the root id of its symbol's class (``binder.Env.values``
    key) for a symbol."""
    d = g.syms.find(d)
    return d if isinstance(d, int) else ~d.id


class ProgramLaunch:
    """The launches of one plan of a program (``replay`` per call)."""

    def __init__(self, prog, p: Plan):
        self.prog = prog
        self.plan = p
        self.stages = [[GroupLaunch(prog, p, grp) if grp.kind != "custom" else grp for grp in stage]
                       for stage in p.stages]

    def replay(self, env, values: dict, device, session, encode_only: bool = False, consts: dict | None = None):
        """Run the plan on the call's bound sizes (``env``) and arrays (``values``: input node id -> array; the
        outputs are added): one stacked launch (one launch per kernel for an unfused program). With
        ``encode_only``, (None, the stages of launch items) and nothing runs."""
        prog = self.prog
        sv = env.values

        def size(d):
            return d if d >= 0 else sv[~d]

        t0 = time.perf_counter()
        classes = _input_classes(prog.graph.inputs, values)
        stages = []
        for stage in self.stages:
            items = []
            for gl in stage:
                if gl.__class__ is not GroupLaunch:
                    items.extend(_custom(gl, env, values, device, kernel_name(prog.name, gl)))
                    continue
                item = self._group(gl, env, size, values, device, consts, classes)
                if item is not None:
                    items.append(item)
            if items:
                stages.append(items)
        prog.encode_s += time.perf_counter() - t0
        self.last_bcs = [it.bytecode for st in stages for it in st]  # (the plan's instance function keeps them)
        if encode_only:
            return None, stages
        if not stages:
            return None, 0
        if prog.fuse:
            return device.run_stack(stages, name=prog.name, trace=session), 1
        records = [device.run_stack([[item]], name=item.name, trace=session) for st in stages for item in st]
        return _total(prog.name, records), len(records)

    def _group(self, gl: GroupLaunch, env, size, values, device, consts=None, classes=None):
        empty = True
        for oid, shape, npdt, order in gl.outs:
            arr = values.get(oid)
            if arr is None:
                if order is None:
                    arr = values[oid] = np.empty(tuple([size(d) for d in shape]), dtype=npdt)
                else:  # stored in the order its reader views it: the kernel writes through the strides
                    arr = values[oid] = np.empty(tuple([size(shape[i]) for i in order]), npdt).transpose(
                        np.argsort(order))
            empty = empty and arr.size == 0
        if empty and gl.outs:
            return None  # nothing to compute (a size-0 dim): no launch
        prog = self.prog
        space = tuple([size(d) for d in gl.space])
        r = len(space)
        args = []
        for x, own, arg_dims, plain in gl.tensors:
            arr = values.get(x.id) if plain else None
            if arr is not None and _root(arr, x, not classes):
                # an array over its own memory (outputs, most inputs), or an input the caller sliced (_root): its
                # flat view and its strides in elements along the space's dims, lined up on the right (0 along a
                # dim of 1, which it does not vary along)
                args.append(arr.reshape(-1))
                item = arr.itemsize
                pad = r - arr.ndim
                shape, st = arr.shape, arr.strides
                args += [0 if d < pad or shape[d - pad] == 1 else st[d - pad] // item for d in arg_dims]
                continue
            shape = space if own is None else space[:-2] + (size(own[0]), size(own[1]))
            flat, strides = _addressing(x, values, env, shape, not classes)
            args.append(flat)
            args += [strides[d] for d in arg_dims]
        profile = device.profile
        kept = prog._tiles.get(gl.gk.key)
        if gl.kind == "matmul":
            m, n_, k = size(gl.mm[0]), size(gl.mm[1]), size(gl.mm[2])
            tiles = kept if kept is not None else prog.tiles(self.plan, gl.grp, env, profile)
            bm, bn, _ = tiles
            nbn = -(-n_ // bn)
            batch = space[:-2]
            grid = ((-(-m // bm)) * nbn, batch[0] if len(batch) > 0 else 1, batch[1] if len(batch) > 1 else 1)
            args += [m, n_, k, nbn]
            args += [float(size(d)) for d in gl.dims]
            cores = profile.cube_cores
        else:
            if kept is not None and kept.fits:  # the tiles kept since the first call, at this call's sizes
                t = tl.vector_tiles(gl.grp, space, profile, kept)
                if t.br != kept.br or t.bc != kept.bc:
                    prog._tiles[gl.gk.key] = t
            else:
                t = prog.tiles(self.plan, gl.grp, env, profile)
            if not t.fits:
                raise GraphError(f"group {gl.grp.name}: a row of {space[-1]} elements does not fit UB")
            tiles = (t.br, t.bc)
            outer = space[:-2] if r >= 2 else ()
            grid = (t.grid[0], outer[0] if len(outer) > 0 else 1, outer[1] if len(outer) > 1 else 1)
            args += [space[-2] if r >= 2 else 1, space[-1] if r >= 1 else 1]
            if gl.mode == "tiled":
                args.append(t.ncb)
            elif gl.mode == "split":
                args.append(-(-space[-1] // t.grid[0]))  # CH: the columns each of the partials reduces
            args += [float(size(d)) for d in gl.dims]
            args += [size(d) for d in gl.int_dims]
            cores = profile.vector_cores
        args += gl.consts if consts is None else gl.const_values(consts)
        total = grid[0] * grid[1] * grid[2]
        args += [grid[0], grid[1], total]  # the logical grid, looped over by at most one program per core
        launch_grid = (max(1, min(total, cores)), 1, 1)
        if gl.gather:
            with warnings.catch_warnings():  # the table load is a gather by design (ops.gather)
                warnings.filterwarnings("ignore", message=r".*becomes a gather/scatter", category=PerformanceWarning)
                bc, flat, alias = gl.gk.prepare(tiles, launch_grid, args, device, gl.tensor_at)
        else:
            bases = gl.bases if not classes else tuple([classes.get(b, b) for b in gl.bases])
            bc, flat, alias = gl.gk.prepare(tiles, launch_grid, args, device, gl.tensor_at, bases)
        return StackItem(bc, flat, gl.gk.name, alias)


class StackItem(NamedTuple):
    """One kernel of a stacked launch, as ``Device.run_stack`` takes it."""

    bytecode: object
    arrays: list
    name: str
    alias: object


def _input_classes(inputs, values) -> dict:
    """For inputs the caller passed over one buffer (the same array twice, two views of one array): input node
    id -> the id of the first of them; empty when every input has a buffer of its own (the common case)."""
    roots: dict = {}
    out: dict = {}
    for n in inputs:
        a = values[n.id]
        root = a
        while root.base is not None and root.base.__class__ is np.ndarray:
            root = root.base
        key = id(root) if root.base is None else id(root.base)
        first = roots.setdefault(key, n.id)
        if first != n.id:
            out[n.id] = first
    return out


def _custom(grp: Group, env, values, device, name: str) -> list[StackItem]:
    """The launch of an ``ops.custom`` call: the user kernel prepared on its materialised inputs and new outputs."""
    call = grp.nodes[0]
    ins = iter(call.inputs)
    args = []
    for c in call.attrs["consts"]:
        if c is None:
            args.append(np.ascontiguousarray(_materialise(next(ins), values, env)))
        elif isinstance(c, Sym):
            args.append(env.value(c))
        else:
            args.append(c)
    outs = []
    for o in sorted(grp.outputs, key=lambda x: x.attrs["index"]):
        arr = np.empty(tuple(env.value(d) for d in o.shape), dtype=o.dtype.np)
        values[o.id] = arr
        outs.append(arr)
    grid = call.attrs["grid"]
    if callable(grid):
        grid = grid(*[a.shape if isinstance(a, np.ndarray) else a for a in args])
    kernel = call.attrs["kernel"]
    _, bc, flat, alias = kernel.prepare(grid, *args, *outs, device=device, **call.attrs["constexprs"])
    return [StackItem(bc, flat, name, alias)]


def _total(name, records):
    """One record summing separate launches (the unfused baseline)."""
    total = LaunchRecord.combined(name, records, sum(r.cycles for r in records), "unfused",
                                  sum(r.launch_overhead for r in records), records[0].profile, len(records))
    total.members = [m for r in records for m in r.members]
    return total


def _materialise(n: Node, values, env) -> np.ndarray:
    """The numpy array (or view) of a stored value; views are applied to the stored array."""
    if n.id in values:
        return values[n.id]
    if n.op in VIEWS:
        base = _materialise(n.inputs[0], values, env)
        if n.op == "reshape":
            v = base.reshape(tuple(env.value(d) for d in n.shape))
            if v.size and n.inputs[0].op in VIEWS and not np.shares_memory(v, base) and _computed(n):
                raise GraphError(f"internal: the reshape %{n.id} of a computed value is not a view")
        elif n.op == "slice":
            a, start = n.attrs["axis"], env.value(n.attrs["start"])
            step = n.attrs["step"]
            stop = start + step * env.value(n.shape[a])
            v = base[(slice(None),) * a + (slice(start, stop, step),)]
        else:
            v = base.transpose(n.attrs["perm"])
        values[n.id] = v
        return v
    if n.op == "broadcast_to":
        base = _materialise(n.inputs[0], values, env)
        return np.broadcast_to(base, tuple(env.value(d) for d in n.shape))
    if n.op in ("const", "dim", "iota"):  # free values no group computes when they are outputs themselves
        shape = tuple(env.value(d) for d in n.shape)
        if n.op == "iota":
            ax = n.attrs["axis"]
            idx = np.arange(shape[ax]).reshape((-1,) + (1,) * (len(shape) - 1 - ax))
            return np.broadcast_to(idx.astype(n.dtype.np), shape)
        value = n.attrs["value"] if n.op == "const" else env.value(n.attrs["sym"])
        return np.full(shape, value, dtype=n.dtype.np)
    raise GraphError(f"internal: value %{n.id} ({n.op}) was never computed")


def _computed(n: Node) -> bool:
    """Whether the value under a chain of views is computed in the launch (not an input)."""
    while n.op in VIEWS:
        n = n.inputs[0]
    return n.op != "input"


def _c_contiguous(shape, strides) -> bool:
    expect = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1:
            if strides[d] != expect:
                return False
            expect *= shape[d]
    return True


def _root(arr: np.ndarray, n: Node, own: bool) -> bool:
    """Whether the kernels address ``arr``, the stored value of ``n``, as an array of its own: C-contiguous over
    its own memory, or, with ``own`` (no two inputs share a buffer), a C-contiguous input whatever its base (a
    caller's slice: as the instance function addresses it)."""
    return arr.flags.c_contiguous and (arr.base is None or (own and n.op == "input"))


def _view_address(n: Node, values, env, own: bool = False):
    """(root array, offset in elements, shape, strides in elements) of a stored value reached through views of an
    array over its own memory, by arithmetic on the chain of views (no numpy view is made, no data pointer
    read); None when the chain starts from a view the caller made, or a reshape is not a view (the numpy way
    then). ``own``: no two inputs share a buffer, so a C-contiguous input is a root whatever its base (as the
    instance function addresses it)."""
    arr = values.get(n.id)
    if arr is not None:
        if not _root(arr, n, own):
            return None
        item = arr.itemsize
        return arr, 0, arr.shape, tuple([s // item for s in arr.strides])
    if n.op not in VIEWS:
        return None
    b = _view_address(n.inputs[0], values, env, own)
    if b is None:
        return None
    root, off, shape, strides = b
    if n.op == "slice":
        a, step = n.attrs["axis"], n.attrs["step"]
        if step < 1:
            return None
        off += env.value(n.attrs["start"]) * strides[a]
        shape = shape[:a] + (env.value(n.shape[a]),) + shape[a + 1:]
        strides = strides[:a] + (strides[a] * step,) + strides[a + 1:]
    elif n.op == "permute":
        p = n.attrs["perm"]
        shape, strides = tuple([shape[i] for i in p]), tuple([strides[i] for i in p])
    else:  # a reshape is a view of a chain whose elements are in memory order (numpy's way otherwise: a split)
        if not _c_contiguous(shape, strides):
            return None
        shape = tuple([env.value(d) for d in n.shape])
        st, acc = [], 1
        for d in reversed(shape):
            st.append(acc)
            acc *= d
        strides = tuple(reversed(st))
    return root, off, shape, strides


def _addressing(n: Node, values, env, space, own: bool = False):
    """(flat array starting at the value's first element, strides along the iteration space) of a stored
    value: a contiguous array is passed as it is; a view as its root array from the view's first element
    (``own``: ``_view_address``'s)."""
    va = _view_address(n, values, env, own)
    if va is not None:
        root, off, shape, strides = va
        flat = root.reshape(-1)
        if off:
            flat = flat[off:]
        pad = len(space) - len(shape)
        return flat, [0] * pad + [0 if d == 1 else st for d, st in zip(shape, strides)]
    arr = _materialise(n, values, env)
    item = arr.itemsize
    if arr.base is None and arr.flags.c_contiguous:
        flat = arr.reshape(-1)
    else:
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not root.flags.c_contiguous or any(st < 0 or st % item for st in arr.strides) or \
                root.dtype != arr.dtype:
            # a view the kernel cannot address from its root: negative or misaligned strides, or another
            # dtype's bytes (x_int16.view(bfloat16)); the kernel reads a contiguous copy
            arr = root = np.ascontiguousarray(arr)
        off = (arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // item
        flat = root.reshape(-1)[off:]
    pad = len(space) - arr.ndim
    strides = [0] * pad + [0 if dim == 1 else st // item for dim, st in zip(arr.shape, arr.strides)]
    return flat, strides


def kernel_name(graph_name: str, grp: Group) -> str:
    """The launch name of a group: the graph's name and the group's (a Python identifier)."""
    kname = re.sub(r"\W", "_", f"{graph_name}_{grp.name}")
    return kname if kname[0].isalpha() else "k" + kname
