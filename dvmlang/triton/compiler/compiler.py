"""``triton.compiler.compiler``: ``CompiledKernel``, what ``kernel.warmup(...)`` returns, and Triton's compile
entry point (``compile`` raises: a kernel compiles at its first launch, or at ``warmup``).

A ``CompiledKernel`` is one encoded launch instance (its ``Bytecode``) with Triton's attributes, given the
numbers of the simulated device where they mean something:

* ``n_regs``: the scalar registers one program of the bytecode uses (its register table; at most 256, the
  bytecode's limit). Tiles live in the Unified Buffer, not in registers.
* ``n_spills``: 0. The register allocator never spills: a kernel needing more than 256 scalar registers
  fails to build with a ``ResourceError``.
* ``metadata.shared``: the Unified Buffer bytes one program occupies on its core (the UB footprint of the
  bytecode, twice it when the kernel is double-buffered), so ``max_shared_mem // metadata.shared`` is how
  many such programs' buffers the UB could hold.
* ``metadata.num_warps``, ``num_stages``, ``num_ctas``: the launch options as given (they have no effect).

``compiled[grid](*args)`` launches it: every parameter positionally, constexprs included, as Triton's compiled
kernels take them. The constexprs must be the ones it was compiled with (Triton ignores them; a different
value here is a ``LaunchError`` rather than a silently different kernel).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...errors import CompilationError, DvmError, LaunchError
from ..runtime.cache import triton_key  # noqa: F401 - torch's Inductor imports it from here (older Triton)

ASTSource = None  # Triton's compiler input; torch's Inductor checks for None


def make_backend(target):
    """Triton's backend object for a target: dvmlang has one, the simulated NPU, with nothing to configure."""
    from ..backends.compiler import BaseBackend
    return BaseBackend(target)


def compile(*_args, **_kwargs):  # noqa: A001 - Triton's name
    raise DvmError("triton.compiler.compile has no dvmlang equivalent: a kernel compiles at its first launch; "
                   "use kernel.warmup(*args, grid=...) (a CompiledKernel) or kernel.encode(grid, *args) (its "
                   "bytecode) ahead of time")


@dataclass(frozen=True)
class KernelMetadata:
    """Triton's ``CompiledKernel.metadata`` fields that mean something here (see the module docstring)."""

    name: str
    shared: int
    num_warps: int
    num_stages: int
    num_ctas: int
    target: object
    hash: str


class CompiledKernel:
    """One encoded launch instance of a ``triton.jit`` kernel, with Triton's attributes (module docstring)."""

    def __init__(self, kernel, bytecode, constexprs: dict, options: dict):
        from ..runtime.driver import TARGET
        self.kernel = kernel
        self.bytecode = bytecode
        self.constexprs = dict(constexprs)
        info = bytecode.kernels[0]
        ub = info.footprint.get("ub", 0)
        shared = 2 * ub if info.double_buffer else ub
        self.name = bytecode.name
        self.metadata = KernelMetadata(self.name, shared, options.get("num_warps", 4), options.get("num_stages", 3),
                                       options.get("num_ctas", 1), TARGET,
                                       hashlib.sha256(bytecode.to_bytes()).hexdigest()[:16])
        self.n_regs = len(info.reg_types)
        self.n_spills = 0
        self.n_max_threads = 1  # one program runs on a core at a time: there are no threads

    def _init_handles(self) -> None:
        """Triton loads the binary onto the GPU here; the bytecode is already encoded, so this does nothing."""

    @property
    def asm(self) -> dict:
        """``{"dvmasm": the bytecode's disassembly}`` (Triton's ``asm`` holds ttir, ptx, cubin, ...)."""
        from ...vm.disasm import disassemble
        return {"dvmasm": disassemble(self.bytecode).text}

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, *args, **kwargs)

    def run(self, grid, *args, **kwargs):
        src = self.kernel.source
        names = src.params
        if len(args) == len(names) - len(src.constexpr_params) and not kwargs:
            # the runtime parameters only (how Triton 3.7 and later launch a compiled kernel): the constexprs are
            # the compiled ones
            runtime = iter(args)
            args = tuple(self.constexprs.get(n) if n in src.constexpr_params else next(runtime) for n in names)
        given = dict(zip(names, args), **kwargs)
        for name, value in self.constexprs.items():
            if name in given and getattr(given[name], "value", given[name]) != value:
                raise LaunchError(f"`{self.name}` was compiled with {name}={value!r} but launched with "
                                  f"{name}={given[name]!r}; warm it up again for the new value")
        return self.kernel[grid](*args, **kwargs)

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.name}: {self.n_regs} registers, {self.metadata.shared} bytes of UB, "
                f"grid {self.bytecode.grid}>")


__all__ = ["CompilationError", "CompiledKernel", "KernelMetadata", "compile", "make_backend", "triton_key", "ASTSource"]
