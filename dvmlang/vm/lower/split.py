"""Building a kernel whose tiles do not fit on-chip memory as it is written: ``fit`` asks lowering again, each time
for less.

1. As written (``lower``).
2. A temporary dead after its last use: elementwise results computed in place over an operand that dies there
   (``placement.dead_operand_buffer``), with some UB kept free above the tiles for what the emitters stage there
   (scalar splat slots, the cube's staging buffers). Nothing is warned: only the addresses change.
3. Only when ``strip_mine`` (Triton-layer kernels; ``dvmlang.kernel(split_tiles=True)``): loops over GPU-sized
   blocks run over blocks half as long, twice as often (``ir.split.halve_loops``), as many times as it takes,
   with one ``PerformanceWarning`` that gives the numbers (the tile that did not fit, the block lengths, the
   loops' lines). The extra iterations are simulated like any others: the trace and the cycle counts show them.

If nothing fits, the first ``BufferOverflowError`` (the kernel as written) is raised.
"""

from __future__ import annotations

from ...errors import BufferOverflowError, PerformanceWarning, warn_user
from ...ir.split import halve_loops
from ...ir.verifier import verify

# UB kept free above the tiles, tried in turn when the tiles fit but what is staged above them did not
RESERVES = (0, 512, 4096)
MAX_HALVINGS = 8  # a block 256 times shorter at most


def fit(fn, profile, lower, strip_mine: bool = False):
    """The template of ``fn`` (``lower(fn, profile)``), asking again as the module docstring says."""
    try:
        return lower(fn, profile)
    except BufferOverflowError as e:
        first = e
    for reserve in RESERVES:
        fn.meta.update(inplace=True, ub_reserve=reserve)
        try:
            return lower(fn, profile)
        except BufferOverflowError:
            pass
    if not strip_mine:
        _reset(fn)
        raise first
    splits = []
    for _ in range(MAX_HALVINGS):
        done = halve_loops(fn)
        if not done:
            break
        verify(fn)
        splits += done
        for reserve in RESERVES:
            fn.meta.update(inplace=True, ub_reserve=reserve)
            try:
                template = lower(fn, profile)
            except BufferOverflowError:
                continue
            _warn(fn, splits, first, profile)
            return template
    _reset(fn)
    raise first


def _reset(fn) -> None:
    fn.meta.pop("inplace", None)
    fn.meta.pop("ub_reserve", None)


def _warn(fn, splits, first, profile) -> None:
    by_loop: dict = {}
    for s in splits:
        key = str(s.loc) if s.loc is not None else "?"
        start = by_loop.get(key, (s.block, s.nbytes))
        by_loop[key] = (start[0], start[1], s.chunk)
    parts = [f"the loop at {where} runs blocks of {chunk} instead of {block} ({block // chunk} times as many "
             f"iterations; its largest tile {nb / 1024:.1f} KiB -> {nb * chunk / block / 1024:.1f} KiB)"
             for where, (block, nb, chunk) in by_loop.items()]
    head = str(first).splitlines()[0]
    warn_user(f"kernel `{fn.name}` was strip-mined to fit {profile.name}'s Unified Buffer "
              f"({profile.ub_bytes // 1024} KiB): {'; '.join(parts)}. As written: {head.split(': ', 1)[-1]}",
              PerformanceWarning)


__all__ = ["fit"]
