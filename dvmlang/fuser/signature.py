"""What a fused group's kernel is called with, by either build path (``emit`` composes it, ``codegen`` writes it
as text): per tensor its flat array and the strides of the dims it varies along, then the sizes, the symbols the
group's values use, and the logical grid. ``Layout`` says how a tensor lines up with a group's iteration space."""

from __future__ import annotations

from .. import dtypes as dt
from .fusion import Group, is_free
from .graph import Graph, GraphError, Node

GRID_PARAMS = ["G0", "G1", "GN"]  # the logical grid (its first two extents and its size), looped over in-kernel


class Layout:
    """How a tensor of some shape lines up with a group's iteration space (outer..., rows, cols)."""

    __slots__ = ("present", "rank")

    def __init__(self, g: Graph, shape, space):
        r = len(space)
        off = r - len(shape)
        self.present = []  # per space dim: True if the tensor varies along it
        for k in range(r):
            j = k - off
            if j < 0:
                self.present.append(False)
                continue
            d = g.syms.find(shape[j])
            self.present.append(not (isinstance(d, int) and d == 1))
        self.rank = r


class Signature:
    """The parameters of a group's kernel and what the runtime binds to them."""

    def __init__(self, params, inputs, outputs, dims, mode, space, arg_dims, int_dims=(), consts=()):
        self.params = params  # ordered parameter names
        self.inputs = inputs  # external input nodes, in parameter order
        self.outputs = outputs  # output nodes, in parameter order
        self.dims = dims  # symbols passed as float32 runtime scalars (dim nodes)
        self.mode = mode
        self.space = space
        self.arg_dims = arg_dims  # per tensor (inputs, then outputs): the dims whose strides are parameters
        self.int_dims = list(int_dims)  # symbols passed as int32 (offsets and bounds of cat and gather)
        # the graph's constants, passed as runtime scalars of their dtypes (``c<k>``): a kernel is built once for
        # any values of them (a Python number in a program is a runtime value, not a new kernel)
        self.consts = list(consts)

    def scalar_dtype(self, name: str):
        """The dtype of scalar parameter ``name``: a constant's own, float32 for sizes used as numbers, else
        int32."""
        if name[0] == "c" and name[1:].isdigit():
            return self.consts[int(name[1:])].dtype
        return dt.float32 if name.startswith("dim") else dt.int32

    def is_tensor(self, name: str) -> bool:
        return name in ("A", "B") or (name[:2] == "in" and name[2:].isdigit()) or \
            (name[:3] == "out" and name[3:].isdigit())


def free_nodes(grp: Group) -> list[Node]:
    """The free values (constants, sizes, index tiles, scalar arithmetic on them) the group uses, in order."""
    seen = {n.id for n in grp.body()}
    free = []
    for n in grp.body():
        stack = list(n.inputs)
        while stack:
            x = stack.pop()
            if is_free(x) and x.id not in seen:
                seen.add(x.id)
                free.append(x)
                stack.extend(x.inputs)
    return sorted(free, key=lambda x: x.id)  # node ids are a topological order


def _consts(nodes) -> list:
    return [n for n in nodes if n.op == "const"]


def _dims_needed(nodes) -> list:
    out = []
    for n in nodes:
        if n.op == "dim" and n.attrs["sym"] not in out:
            out.append(n.attrs["sym"])
    return out


def _int_dims_needed(g: Graph, nodes) -> list:
    """The symbolic sizes that index arithmetic of ``nodes`` needs as ints (a cat's offsets, a gather's bound)."""
    out = []
    for n in nodes:
        ds = []
        if n.op == "cat":
            ds = list(n.attrs["offsets"]) + [i.shape[n.attrs["axis"]] for i in n.inputs]
        elif n.op == "gather":
            ds = [n.inputs[0].shape[n.attrs["axis"]]]
        for d in ds:
            d = g.syms.find(d)
            if not isinstance(d, int) and d not in out:
                out.append(d)
    return out


def vector_signature(g: Graph, grp: Group) -> Signature:
    space = grp.space
    r = len(space)
    nodes = free_nodes(grp) + grp.body()
    ins, outs = list(grp.inputs), list(grp.outputs)
    dims = _dims_needed(nodes)
    params, arg_dims = [], []
    for kind, tensors in (("in", ins), ("out", outs)):
        for k, x in enumerate(tensors):
            lay = Layout(g, x.shape, space)
            dims_k = [d for d in range(r) if lay.present[d]]
            params += [f"{kind}{k}"] + [f"{kind}{k}_s{d}" for d in dims_k]
            arg_dims.append(dims_k)
    int_dims = _int_dims_needed(g, grp.body())
    consts = _consts(nodes)
    params += ["R", "C"] + (["NCB"] if grp.mode == "tiled" else []) + (["CH"] if grp.mode == "split" else []) + \
        [f"dim{s.id}" for s in dims] + \
        [f"idim{s.id}" for s in int_dims] + [f"c{k}" for k in range(len(consts))] + GRID_PARAMS
    return Signature(params, ins, outs, dims, grp.mode, space, arg_dims, int_dims, consts)


def matmul_parts(g: Graph, grp: Group):
    """(matmul node, operands a and b, epilogue nodes, external inputs of the epilogue, outputs)."""
    mm = grp.nodes[0]
    a, b = mm.inputs
    epilogue = grp.nodes[1:]
    epi_reads = {i.id for n in epilogue for i in n.inputs}
    # an operand of the matmul the epilogue reads too is loaded again in the output's layout
    ext = [i for i in grp.inputs if (i is not a and i is not b) or i.id in epi_reads]
    return mm, a, b, epilogue, ext, list(grp.outputs)


def matmul_signature(g: Graph, grp: Group) -> Signature:
    mm, a, b, epilogue, ext, outs = matmul_parts(g, grp)
    space = mm.shape
    r = len(space)
    nb = r - 2
    if nb > 2:
        raise GraphError("matmul supports at most two batch dimensions")
    dims = _dims_needed(free_nodes(grp) + epilogue)
    consts = _consts(free_nodes(grp) + epilogue)
    la = Layout(g, a.shape, space[:-2] + (a.shape[-2], a.shape[-1]))
    lb = Layout(g, b.shape, space[:-2] + (b.shape[-2], b.shape[-1]))
    params, arg_dims = [], []
    for kind, lay in (("A", la), ("B", lb)):  # operands: the batch dims they vary along, both matrix dims
        dims_k = [d for d in range(nb) if lay.present[d]] + [r - 2, r - 1]
        params += [kind] + [f"{kind}_s{d}" for d in dims_k]
        arg_dims.append(dims_k)
    for kind, tensors in (("in", ext), ("out", outs)):
        for k, x in enumerate(tensors):
            lay = Layout(g, x.shape, space)
            dims_k = [d for d in range(r) if lay.present[d] or (kind == "out" and d >= nb)]
            params += [f"{kind}{k}"] + [f"{kind}{k}_s{d}" for d in dims_k]
            arg_dims.append(dims_k)
    params += ["M", "N", "K", "NBN"] + [f"dim{s.id}" for s in dims] + [f"c{k}" for k in range(len(consts))] + \
        GRID_PARAMS
    return Signature(params, [a, b] + ext, outs, dims, "matmul", space, arg_dims, consts=consts)


def signature(g: Graph, grp: Group) -> Signature:
    return matmul_signature(g, grp) if grp.kind == "matmul" else vector_signature(g, grp)
