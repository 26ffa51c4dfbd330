"""``triton.jit``: ``dvmlang.kernel``, accepting Triton's decorator arguments (docs/triton.md says what each
does here)."""

from __future__ import annotations

from ..errors import DvmError
from .runtime.jit import JITFunction

# Triton's @jit keyword arguments. Each is accepted and has no effect, for the reason given.
NO_EFFECT = {
    "version": "a cache version tag: dvmlang's caches are keyed by the kernel's source",
    "repr": "a custom name for the compiled kernel in profiles",
    "launch_metadata": "a hook for Triton's profiler; dvmlang.trace records every launch itself",
    "do_not_specialize": "dvmlang never specialises on integer values (only on dtypes, ranks and constexprs)",
    "do_not_specialize_on_alignment": "dvmlang does not specialise on pointer alignment",
    "debug": "device_assert is always checked on the simulated device, and every access is bounds-checked",
    "noinline": "a kernel called from a kernel is always inlined; the bytecode has no calls",
}


# dvmlang's own options of triton.jit
DVMLANG_OPTIONS = {
    "strict_loads": "an out-of-range load lane is a MemoryFault (dvmlang.kernel's rule), not poison as on a GPU",
    "strict_tiles": "tiles that do not fit UB are a BufferOverflowError (dvmlang.kernel's rule), not strip-mined",
}


def jit(fn=None, **options):
    """``@triton.jit`` or ``@triton.jit(do_not_specialize=[...], ...)``: a ``JITFunction`` (a ``dvmlang.Kernel``
    whose ``warmup`` gives Triton's ``CompiledKernel``). Every Triton option (``NO_EFFECT``) is accepted and has
    no effect here; any other keyword is an error."""
    unknown = [k for k in options if k not in NO_EFFECT and k not in DVMLANG_OPTIONS]
    if unknown:
        raise DvmError(f"triton.jit got {', '.join(f'`{k}`' for k in unknown)}, which Triton's jit does not take; "
                       f"it takes {', '.join([*NO_EFFECT, *DVMLANG_OPTIONS])}")
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)


__all__ = ["jit", "JITFunction", "NO_EFFECT"]
