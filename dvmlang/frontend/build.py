"""One build of a kernel: parameter specs -> verified, analysed tile IR."""

from __future__ import annotations

import contextlib
import warnings

from ..errors import PerformanceWarning
from ..ir.builder import Builder
from ..ir.core import Block, Function, Param, ScalarType, Value
from ..ir.passes import run_default_pipeline
from .codegen import CodeGen, KernelSource
from .semantic import Semantic
from .values import pointer, tensor


# The most loop bodies dl.static_range may unroll in one build, nested copies and inlined kernels included.
UNROLL_BUDGET = 65536


class BuildContext:
    """Per-build state shared by the code generators of a kernel and everything it inlines."""

    def __init__(self):
        self.dry_depth = 0
        self.unrolled = 0  # body copies dl.static_range has unrolled so far (dry runs not counted)
        self.unrolling: list[int] = []  # the iteration counts of the static_range loops being unrolled
        self.global_reads: dict = {}
        self.static_prints: list[str] = []

    @contextlib.contextmanager
    def dry(self):
        self.dry_depth += 1
        try:
            yield
        finally:
            self.dry_depth -= 1


def build_ir(src: KernelSource, specs: list[tuple]) -> tuple[Function, BuildContext]:
    """``specs`` gives each parameter: ("tensor", dtype, rank) | ("scalar", dtype) | ("constexpr", value)."""
    body = Block()
    params: list[Param] = []
    names: dict = {}
    for name, spec in zip(src.params, specs):
        kind = spec[0]
        if kind == "constexpr":
            names[name] = spec[1]
        elif kind == "tensor":
            idx = len(params)
            params.append(Param(name, "tensor", spec[1], spec[2]))
            names[name] = pointer(idx, spec[1], None, name)
        else:
            v = Value(ScalarType(spec[1]), name=name)
            params.append(Param(name, "scalar", spec[1], 0, v))
            names[name] = tensor(v)
    fn = Function(src.name, params, body, src.loc(src.tree), src.file, (src.first_line, src.last_line))
    b = Builder(body)
    sem = Semantic(b, params)
    ctx = BuildContext()
    cg = CodeGen(src, sem, names, build=ctx)
    cg.visit_block(src.tree.body)

    def on_gather(op, reason):
        loc = op.loc
        what = "load" if op.kind == "load" else "store"
        warnings.warn_explicit(f"{what} in kernel `{src.name}` becomes a gather/scatter because {reason}; "
                               "element-wise addressing is much slower than a DMA",
                               PerformanceWarning, loc.file if loc else src.file, loc.line if loc else 0)

    run_default_pipeline(fn, on_gather)
    return fn, ctx
