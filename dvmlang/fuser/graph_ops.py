"""The fuser's structural op table: every graph op that is not a row of the op vocabulary (``opdefs``), with its
kind, traits, typing rule and the torch ops whose lowering makes it, in one place (as ``opdefs`` is for the
elementwise ops).

``fusion`` reads its sets from here (what is free, a view, a scan, a memory read, what needs a whole row in one
tile), ``fragments`` has one row per computing op here (a test checks), ``ops_*`` build the nodes, and
docs/fusion.md's and docs/torch.md's tables are generated from it (``python -m dvmlang.torch.coverage``).

Kinds: ``input``; ``free`` (constants, sizes, index tiles: computed in every kernel that uses them); ``view``
(never computed: read through strides); ``elementwise``; ``reduction`` and ``scan`` (along the columns: loop
mode carries them across column blocks); ``row`` (needs a whole row in one tile: row mode, a launch-time guard
when the row is a symbol); ``memory`` (reads some operands from memory at positions of its own: their producers
store them); ``matmul`` (the cube); ``custom`` (a user kernel).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GraphOp:
    name: str
    kind: str
    typing: str  # the shape and dtype rule, in words
    doc: str
    torch: tuple = ()  # aten ops whose lowering makes this op (beyond composing it with others)
    memory_operands: str = ""  # "first" | "parts": the operands read from memory (kind "memory"; see below)
    isa: str = ""  # the instruction the fragment is built on, where one stands out


GRAPH_OPS: dict[str, GraphOp] = {op.name: op for op in [
    GraphOp("input", "input", "a graph argument: its shape (symbols) and dtype", "an argument of the program"),
    GraphOp("const", "free", "rank 0, the number's dtype", "a number: a runtime scalar parameter of the kernels",
            ("full", "scalar_tensor", "zeros", "ones")),
    GraphOp("dim", "free", "rank 0, float32", "a size used as a number (per call)"),
    GraphOp("iota", "free", "its shape, int32; attrs axis", "the index along one axis of the current box",
            ("arange",), isa="VIOTA"),
    GraphOp("reshape", "view", "the same elements, a new shape (checked per call when symbolic)",
            "a view (a copy kernel when it reorders a computed value)", ("view", "reshape", "flatten")),
    GraphOp("permute", "view", "dims reordered; attrs perm", "a view", ("permute", "transpose", "t")),
    GraphOp("slice", "view", "one dim narrowed; attrs axis, start, step", "a view", ("slice", "select", "split")),
    GraphOp("where", "elementwise", "broadcast of three operands, the values' promoted dtype", "select",
            ("where",), isa="VSEL"),
    GraphOp("cast", "elementwise", "the operand's shape, attrs dtype", "conversion", ("_to_copy",), isa="VCAST"),
    GraphOp("broadcast_to", "elementwise", "broadcast to a shape", "materialised by the store that needs it",
            ("expand",)),
    GraphOp("reduce", "reduction", "the operand with reduced dims 1 (keepdims); attrs op (sum, prod, max, min), axes",
            "a reduction over the last dim (others moved last by views)", ("sum", "prod", "amax", "mean", "var"),
            isa="VREDUCE"),
    GraphOp("cumsum", "scan", "the operand's shape; attrs op (sum when absent, prod, max, min); int32 for integer "
            "sums and products", "an inclusive running sum, product, maximum or minimum",
            ("cumsum", "cumprod", "cummax", "cummin"), isa="VSCAN"),
    GraphOp("sort", "row", "the operand's shape and dtype; attrs descending", "sorted along the last dim (NaN the "
            "largest)", (), isa="VSORT"),
    GraphOp("gather", "memory", "the index's shape, the table's dtype; attrs axis", "a read at the index's "
            "positions along one axis (checked on the device)", ("gather", "index_select", "embedding", "index"),
            memory_operands="first", isa="DMA gather"),
    GraphOp("cat", "memory", "parts joined along attrs axis (offsets)", "each part read at the output index less "
            "its offset (a number broadcast is computed in the kernel)", ("cat", "constant_pad_nd", "slice_scatter"),
            memory_operands="parts"),
    GraphOp("matmul", "matmul", "(..., M, K) @ (..., K, N), batch dims broadcast", "on the cube, with an "
            "elementwise epilogue", ("mm", "addmm", "bmm", "convolution", "_grouped_mm"), isa="MMAD"),
    GraphOp("custom", "custom", "a user @dvmlang.kernel call", "ops.custom"),
    GraphOp("custom_out", "view", "one output of a custom call", "an output array of a user kernel"),
]}

FREE = frozenset(n for n, op in GRAPH_OPS.items() if op.kind == "free")
VIEWS = frozenset(n for n, op in GRAPH_OPS.items() if op.kind == "view" and n != "custom_out")
SCANS = frozenset(n for n, op in GRAPH_OPS.items() if op.kind == "scan")
ROW_OPS = frozenset(n for n, op in GRAPH_OPS.items() if op.kind == "row")
MEMORY_READ_OPS = frozenset(n for n, op in GRAPH_OPS.items() if op.kind == "memory")
# kinds whose ops a vector kernel computes (a fragment each)
COMPUTED_KINDS = ("free", "elementwise", "reduction", "scan", "row", "memory")


def memory_operands_of(op: str):
    """``n -> the operands n reads from memory`` for a memory op: a gather's table; a cat's parts, but for a
    number broadcast (``F.pad``'s value, a convolution's zero padding: ``canonical`` marks one that only cats read),
    which the cat's kernel computes where the part lies instead of a kernel storing it for the cat to read."""
    if GRAPH_OPS[op].memory_operands == "first":
        return lambda n: n.inputs[:1]
    return lambda n: [p for p in n.inputs if not filled(p)]


def filled(part) -> bool:
    """Whether a cat's part is a number broadcast computed in the cat's kernel (the same value at every position)."""
    return part.op == "broadcast_to" and part.attrs.get("free_scalar", False)


def table_rows() -> list[str]:
    """docs/fusion.md's table of graph ops (generated)."""
    out = ["| graph op | kind | typing | torch ops lowered onto it | instruction |", "|---|---|---|---|---|"]
    for op in GRAPH_OPS.values():
        torch_ = ", ".join(f"`{t}`" for t in op.torch)
        out.append(f"| `{op.name}` | {op.kind} | {op.typing} | {torch_} | {op.isa} |")
    out.append("| every `opdefs` row with a tensor name | elementwise | numpy broadcasting, the row's dtype rule | "
               "`add`, `mul`, `exp`, ... | `V<OP>` |")
    return out
