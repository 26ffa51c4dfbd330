"""A readable, MLIR-like text form of tile IR (``print(kernel.ir(...))``)."""

from __future__ import annotations

from .core import Block, Function, Op, Value


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, v: Value) -> str:
        name = self.names.get(v.id)
        if name is None:
            base = v.name if v.name and not v.name.isdigit() else ""
            name = f"%{base}{len(self.names)}" if base else f"%{len(self.names)}"
            self.names[v.id] = name
        return name


def _attr(v) -> str:
    if isinstance(v, Op):
        return f"^{v.kind}@{v.loc.line if v.loc else '?'}"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def print_function(fn: Function) -> str:
    namer = _Namer()
    params = []
    for p in fn.params:
        if p.kind == "tensor":
            params.append(f"{p.name}: tensor<{p.dtype.name}, rank {p.rank}>")
        else:
            params.append(f"{namer(p.value)}: {p.dtype.name}  /* {p.name} */")
    lines = [f"func @{fn.name}({', '.join(params)}) {{"]
    _print_block(fn.body, namer, lines, 1)
    lines.append("}")
    return "\n".join(lines)


def _print_block(block: Block, namer: _Namer, lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for op in block.ops:
        lines.append(pad + _print_op(op, namer))
        if op.regions:
            for i, region in enumerate(op.regions):
                label = _region_label(op, i, namer)
                lines.append(f"{pad}  {label}")
                _print_block(region, namer, lines, depth + 2)
            lines.append(pad + "}")


def _region_label(op: Op, i: int, namer: _Namer) -> str:
    region = op.regions[i]
    args = ", ".join(f"{namer(a)}: {a.type}" for a in region.args)
    names = {"for": ["body"], "while": ["cond", "body"], "if": ["then", "else"], "scope": ["body"]}
    label = names.get(op.kind, [f"region{j}" for j in range(len(op.regions))])[i]
    return f"^{label}({args}):"


def _print_op(op: Op, namer: _Namer) -> str:
    res = ", ".join(namer(r) for r in op.results)
    lhs = f"{res} = " if res else ""
    attrs = {k: v for k, v in op.attrs.items()}
    attr_text = ""
    if attrs:
        attr_text = " {" + ", ".join(f"{k}={_attr(v)}" for k, v in attrs.items()) + "}"
    operands = ", ".join(namer(v) for v in op.operands)
    types = ", ".join(str(r.type) for r in op.results)
    tail = f" : {types}" if types else ""
    loc = f"  // line {op.loc.line}" if op.loc else ""
    head = f"{lhs}{op.kind} {operands}{attr_text}{tail}"
    if op.regions:
        return head + " {" + loc
    return head + loc
