"""``torch.compile(model, backend="dvmlang")``: the dynamo backend.

Dynamo hands over an FX graph of torch ops; AOTAutograd turns it into core-aten forward and backward graphs
(functionalized, with torch's decompositions to core aten), and each of those is partitioned and lowered onto
dvmlang's fuser by ``partition.CompiledGraph``. The package's entry point (pyproject.toml,
``[project.entry-points.torch_dynamo_backends]``) names ``dvmlang_backend``, so the string works after
``pip install`` without importing dvmlang.
"""

from __future__ import annotations

import itertools

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func

from .partition import CompiledGraph

_counter = itertools.count()
COMPILED: list = []  # every CompiledGraph, in order (explain reads the ones a call made)


def decompositions() -> dict:
    """torch's core-aten decompositions (backward ops, composites such as sdpa, addcmul, silu_backward ...)."""
    return core_aten_decompositions()


def _compiler(kind: str):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        cg = CompiledGraph(gm, f"torch{next(_counter)}_{kind}")
        COMPILED.append(cg)
        return make_boxed_func(lambda *args: cg(list(args)))
    return compile_graph


def dvmlang_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The dynamo backend: AOTAutograd with dvmlang forward, backward and inference compilers."""
    return aot_autograd(fw_compiler=_compiler("fw"), bw_compiler=_compiler("bw"),
                        inference_compiler=_compiler("infer"), decompositions=decompositions(),
                        keep_inference_input_mutations=True)(gm, example_inputs, **kwargs)


dvmlang_backend.__name__ = "dvmlang"
