"""One build of a kernel: its source and parameter specs -> verified, analysed tile IR."""

from __future__ import annotations

import warnings

from ..errors import PerformanceWarning
from ..ir.builder import Builder
from ..ir.core import Block, Function, Param, ScalarType, Value
from ..ir.passes import run_default_pipeline
from .codegen import CodeGen
from .context import BuildContext
from .semantic import Semantic
from .source import KernelSource
from .blockptr import tensor_descriptor
from .specs import ConstexprSpec, DescriptorSpec, ParamSpec, TensorSpec
from .values import pointer, tensor


def build_ir(src: KernelSource, specs: tuple[ParamSpec, ...]) -> tuple[Function, BuildContext]:
    """The IR of ``src`` specialised on ``specs`` (one per parameter, in order), and what the build read."""
    body = Block()
    params: list[Param] = []
    names: dict = {}
    for name, spec in zip(src.params, specs):
        if isinstance(spec, ConstexprSpec):
            names[name] = spec.value
        elif isinstance(spec, TensorSpec):
            idx = len(params)
            params.append(Param(name, "tensor", spec.dtype, spec.rank))
            names[name] = pointer(idx, spec.dtype, None, name)
        elif isinstance(spec, DescriptorSpec):
            # a host tensor descriptor: its base tensor, then its shape and strides as runtime scalars (the
            # runtime binds them in this order, runtime.Kernel._instance)
            idx = len(params)
            params.append(Param(name, "tensor", spec.dtype, spec.rank))
            parts = []
            for what in ("shape", "stride"):
                for d in range(len(spec.block_shape)):
                    v = Value(ScalarType(spec.index), name=f"{name}_{what}{d}")
                    params.append(Param(f"{name}_{what}{d}", "scalar", spec.index, 0, v))
                    parts.append(tensor(v))
            r = len(spec.block_shape)
            names[name] = tensor_descriptor(idx, spec.dtype, tuple(parts[:r]), tuple(parts[r:]), spec.block_shape,
                                            name, spec.padding)
        else:
            v = Value(ScalarType(spec.dtype), name=name)
            params.append(Param(name, "scalar", spec.dtype, 0, v))
            names[name] = tensor(v)
    fn = Function(src.name, params, body, src.loc(src.tree), src.file, (src.first_line, src.last_line))
    b = Builder(body)
    sem = Semantic(b, params)
    ctx = BuildContext()
    cg = CodeGen(src, sem, names, ctx)
    cg.visit_block(src.tree.body)

    def on_gather(op, reason):
        loc = op.loc
        what = "load" if op.kind == "load" else "store"
        note = (f"{what} in kernel `{src.name}` becomes a gather/scatter because {reason}; element-wise "
                "addressing is much slower than a DMA", loc.file if loc else src.file, loc.line if loc else 0)
        ctx.warnings.append(note)
        warnings.warn_explicit(note[0], PerformanceWarning, note[1], note[2])

    run_default_pipeline(fn, on_gather)
    return fn, ctx
