"""Kernels as torch ops: ``dvmlang.torch.custom_op`` (docs/torch.md, "Kernels as torch ops").

``custom_op("mylib::name", outputs=fn)`` decorates a *launcher* ``launch(*inputs, *outs)`` that launches
``@dvmlang.kernel``s writing the outputs. It becomes a ``torch.library`` custom op whose real implementation
allocates the outputs ``outputs(*inputs)`` declares (a list of ``(shape, dtype)``) and calls the launcher, and
whose fake (meta) implementation makes empty tensors of those shapes: so the op composes with
``torch.compile`` (``fullgraph=True`` included: dynamo and AOTAutograd trace it through its fake
implementation) and with ``dvmlang.torch.lazy()`` (it runs at once on materialised inputs, as a dvmlang
launch, not a torch fallback).
"""

from __future__ import annotations

import inspect

import torch

from ..errors import DvmError
from ..npu import default_device
from ..runtime import Kernel

from .lazy import STATS, st
from .table import CUSTOM_OPS


def _kernels_of(launch) -> list:
    """The ``@dvmlang.kernel``s the launcher names (its globals and closure), whose launches the op counts."""
    found = []
    code = launch.__code__
    for n in code.co_names:
        k = launch.__globals__.get(n)
        if isinstance(k, Kernel):
            found.append(k)
    for cell in launch.__closure__ or ():
        try:
            k = cell.cell_contents
        except ValueError:
            continue
        if isinstance(k, Kernel):
            found.append(k)
    return list({id(k): k for k in found}.values())


class _Counted:
    """Stands in for a program in the torch stats' list: its kernels' builds and encodes count from now on."""

    def __init__(self, kernels):
        self.kernels = {i: _KT(k) for i, k in enumerate(kernels)}


class _KT:
    def __init__(self, k):
        self.kernel = k

    def cache_info(self):
        return self.kernel.cache_info()


def _count(name, kernels) -> None:
    c = _Counted(kernels)
    for kt in c.kernels.values():
        info = kt.cache_info()
        st._base["builds"] += info.builds
        st._base["encodes"] += info.encodes
    st.track(c, keep=True)


_DEFINED: dict = {}  # name -> (op, schema, the current launcher and declaration)


class CustomOpError(DvmError, TypeError):
    """A ``dvmlang.torch.custom_op`` declared or called wrongly (its name, outputs or inputs)."""


def _outputs(name: str, outputs, args) -> list:
    try:
        decl = outputs(*args)
    except Exception as e:  # noqa: BLE001
        raise CustomOpError(f"custom op {name}: its outputs function failed on these inputs "
                            f"({type(e).__name__}: {e})") from e
    if isinstance(decl, tuple) and len(decl) == 2 and not isinstance(decl[0], tuple) and \
            not isinstance(decl[0], (list, torch.Size)):
        decl = [decl]
    out = []
    for d in (decl if isinstance(decl, (list, tuple)) else [decl]):
        if not (isinstance(d, (tuple, list)) and len(d) == 2 and isinstance(d[1], torch.dtype)):
            raise CustomOpError(f"custom op {name}: outputs(...) must return a list of (shape, torch dtype) pairs, "
                                f"got {decl!r}")
        out.append((tuple(d[0]), d[1]))
    if not out:
        raise CustomOpError(f"custom op {name}: outputs(...) declared no output")
    return out


def custom_op(name: str, *, outputs, n_inputs: int | None = None):
    """``@dvmlang.torch.custom_op("mylib::op", outputs=lambda x, y: [(x.shape, x.dtype)])`` on a launcher
    ``def op(x, y, out): kernel[grid](x, y, out, ...)``: a torch custom op ``op(x, y) -> out`` (a tuple for
    several outputs) with a fake implementation from ``outputs``. Every input is a Tensor; ``n_inputs``
    (default: the launcher's parameters minus the declared outputs, found from its signature) says how many."""
    if not isinstance(name, str) or "::" not in name:
        raise CustomOpError(f"custom_op needs a qualified name 'namespace::op', got {name!r}")
    if not callable(outputs):
        raise CustomOpError(f"custom op {name}: outputs= must be a function of the inputs returning "
                            "[(shape, dtype), ...]")

    def deco(launch):
        params = [p.name for p in inspect.signature(launch).parameters.values()]
        k = n_inputs
        if k is None:
            # the number of outputs is known only from outputs(); its arity is the number of inputs
            k = len([p for p in inspect.signature(outputs).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
        if k < 1 or k > len(params):
            raise CustomOpError(f"custom op {name}: the launcher {launch.__name__}{tuple(params)} must take the "
                                f"{k} input(s) then the output(s)")
        ins = params[:k]
        n_out = len(params) - k
        ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
        schema = "(" + ", ".join(f"Tensor {p}" for p in ins) + f") -> {ret}"

        kernels = _kernels_of(launch)
        _count(name, kernels)
        prev = _DEFINED.get(name)
        if prev is not None:  # the same module run again (a gallery, a test): the op now runs this launcher
            op, schema0, cur = prev
            if schema0 != schema:
                raise CustomOpError(f"custom op {name} is already defined as {schema0}; this launcher makes it "
                                    f"{schema}: pick another name")
            cur.update(launch=launch, outputs=outputs, kernels=kernels)
            op.launcher = launch
            return op
        cur = {"launch": launch, "outputs": outputs, "kernels": kernels}

        def impl(*args):
            launch, outputs, kernels = cur["launch"], cur["outputs"], cur["kernels"]
            outs = [torch.empty(s, dtype=d) for s, d in _outputs(name, outputs, args)]
            if len(outs) != n_out:
                raise CustomOpError(f"custom op {name}: outputs(...) declared {len(outs)} output(s) but the "
                                    f"launcher takes {n_out}")
            before = sum(k.cache_info().launches for k in kernels)
            dev = default_device()
            cycles, us = dev.simulated_cycles, dev.simulated_us
            launch(*[a.contiguous() if a.dim() and not a.is_contiguous() else a for a in args], *outs)
            STATS.launches += sum(k.cache_info().launches for k in kernels) - before
            STATS.cycles += dev.simulated_cycles - cycles  # launches on the default device (the launcher's usual)
            STATS.sim_us += dev.simulated_us - us
            return outs[0] if n_out == 1 else tuple(outs)

        def fake(*args):
            outs = [torch.empty(s, dtype=d, device=args[0].device if args else "cpu")
                    for s, d in _outputs(name, cur["outputs"], args)]
            return outs[0] if n_out == 1 else tuple(outs)

        op = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)
        op.register_fake(fake)
        opname = name.split("::")
        overload = getattr(getattr(getattr(torch.ops, opname[0]), opname[1]), "default")
        CUSTOM_OPS.add(overload)
        op.launcher = launch
        _DEFINED[name] = (op, schema, cur)
        return op
    return deco
