"""``torch.compile(model, backend="dvmlang")``: the dynamo backend.

Dynamo hands over an FX graph of torch ops; AOTAutograd turns it into core-aten forward and backward graphs
(functionalized, with torch's decompositions to core aten), and each of those is partitioned and lowered onto
dvmlang's fuser by ``partition.CompiledGraph``. The package's entry point (pyproject.toml,
``[project.entry-points.torch_dynamo_backends]``) names ``dvmlang_backend``, so the string works after
``pip install`` without importing dvmlang.
"""

from __future__ import annotations

import hashlib
import weakref

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func

from . import reuse
from .partition import CompiledGraph
from .rewrite import rewrite

# the CompiledGraphs still in use, by the order they were made (explain reads the ones a call made): held weakly, so
# a graph Dynamo dropped is freed with its programs
COMPILED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
MADE = [0]  # CompiledGraphs made so far (the next one's number)


# torch's decomposition of the CPU flash-attention forward into math ops is not consistent with that op's backward
# (which still reads the flash forward's logsumexp): a graph that trains keeps the op whole (a fallback both ways);
# tests/test_torch_compile.py::test_llama_backward_matches_eager fails with it decomposed
_TRAIN_KEEPS = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,)


def decompositions(training: bool = False) -> dict:
    """torch's core-aten decompositions (backward ops, composites such as sdpa, addcmul, silu_backward ...)."""
    table = core_aten_decompositions()
    if training:
        for op in _TRAIN_KEEPS:
            table.pop(op, None)
    return table


def _may_train(example_inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def compile_graph(gm: torch.fx.GraphModule, kind: str):
    """The runner of one AOTAutograd graph: an earlier compiled graph when ``gm`` is that graph at other sizes (a
    Dynamo recompile at a size of 1, the model compiled again: reuse.py), else a new ``CompiledGraph``."""
    # named after the graph: the same model compiles to the same kernel names in every process
    name = f"torch_{kind}_{_fingerprint(gm)}"
    rewrite(gm)
    cg = reuse.find(gm, kind, name)
    if cg is None:
        cg = CompiledGraph(gm, name)
        reuse.register(cg, kind)
    COMPILED[MADE[0]] = cg
    MADE[0] += 1
    return cg


def made_since(n: int) -> list:
    """The CompiledGraphs made from number ``n`` on (``MADE[0]`` before a call) that are still in use, in order."""
    return [cg for k in range(n, MADE[0]) if (cg := COMPILED.get(k)) is not None]


def _fingerprint(gm: torch.fx.GraphModule) -> str:
    """Six hex digits of the graph's nodes (ops, targets, arguments), the same in every process. (Not the graph's
    Python code: a lazy ``GraphModule`` writes that only when asked, which costs a model's first call more than
    the rest of its graph's compile.)"""
    index: dict = {}
    h = hashlib.sha1()
    for i, n in enumerate(gm.graph.nodes):
        index[n] = i
        args = torch.fx.node.map_arg((n.args, n.kwargs), lambda x: f"%{index[x]}")
        h.update(f"{n.op} {n.target} {args}\n".encode())
    return h.hexdigest()[:6]


def _compiler(kind: str):
    def compile_fn(gm: torch.fx.GraphModule, example_inputs):
        cg = compile_graph(gm, kind)
        return make_boxed_func(lambda *args: cg(list(args)))
    return compile_fn


def dvmlang_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The dynamo backend: AOTAutograd with dvmlang forward, backward and inference compilers."""
    return aot_autograd(fw_compiler=_compiler("fw"), bw_compiler=_compiler("bw"),
                        inference_compiler=_compiler("infer"),
                        decompositions=decompositions(_may_train(example_inputs)),
                        keep_inference_input_mutations=True)(gm, example_inputs, **kwargs)


dvmlang_backend.__name__ = "dvmlang"
