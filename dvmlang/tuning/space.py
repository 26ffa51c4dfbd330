"""The search space of ``autotune(configs="auto")``: a kernel's tunable knobs, found from its source, and their
candidate values under the device's limits.

A knob is a constexpr parameter the call does not pass, or the grid's persistence:

* **tile** — a constexpr that sizes a tile (``dl.arange(0, X)``, a shape in ``dl.zeros((X, Y))``/``dl.full``)
  or steps a loop (``range(a, b, X)``). Tiles are powers of two (``dl.arange`` needs them). From 16 (one
  32-byte-aligned fp16 row of a cube fractal, so a tile never wastes the 16x16 cube) to 256 in a kernel with
  ``dot`` (L0A/L0B hold 64 KiB: a 128 x 256 fp16 operand), from 1 to the largest power of two whose fp32 tile
  fits a quarter of UB in a vector kernel (a loop step from 8: one 32-byte burst of fp32). Which combinations fit UB/L1/L0A/L0B/L0C is decided by the
  compiler: a candidate that does not fit is reported as such and never simulated.
* **group** — a constexpr named ``GROUP*`` (tutorial 03's ``GROUP_SIZE_M``, the program-id swizzle): 1 to 16.
* **programs** — a constexpr named ``NUM_SMS``/``NUM_CORES``/``NUM_PROGRAMS``/``NUM_PROGS`` that the call
  does not pass (the grid function reads it from ``meta``), or, for a kernel whose axis ``a`` is *persistent*
  (``program_id(a)`` and ``num_programs(a)`` appear only as the start and step of ``range(pid, n, nprog)``
  loops, so any grid size covers the same work), the grid's size along ``a``: ``Config.programs``. Values:
  a half, one, two and four times the cores the kernel runs on (cube cores for a kernel with ``dot``, vector
  cores otherwise), and the grid the call gave.

``num_stages`` is not a knob: the compiler double-buffers every loop with loads whose ping-pong buffers fit
and falls back to single buffering otherwise, which was never slower (docs/language.md). The device has no
separate cube/vector split to choose: a kernel with both runs each program on one cube core and its two
vector cores, and its persistence knob counts cube cores.

``hints`` adds or restricts knobs: ``{"BLOCK_M": [64, 128]}`` (those values only), ``{"GROUP_SIZE_M": 8}``
(fixed), ``{"EXTRA": [1, 2]}`` (a constexpr the search cannot classify), ``{"programs": [24, 48]}``.
"""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import dataclass

from ..errors import LaunchError

PROGRAM_NAMES = ("NUM_SMS", "NUM_CORES", "NUM_PROGRAMS", "NUM_PROGS")
PROGRAMS = "programs"  # the hint name of the grid-persistence knob
MAX_CANDIDATES = 4096


@dataclass(frozen=True)
class Knob:
    name: str  # a constexpr parameter, or "programs" (the grid's size along ``axis``)
    kind: str  # "tile", "group", "programs", "hint"
    values: tuple
    why: str  # where in the source it was found, in words
    axis: int | None = None  # for the grid's persistence


def _call_name(node) -> str:
    f = node.func if isinstance(node, ast.Call) else node
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _axis(call: ast.Call):
    args = list(call.args) + [k.value for k in call.keywords if k.arg == "axis"]
    if not args:
        return 0
    a = args[0]
    return a.value if isinstance(a, ast.Constant) and isinstance(a.value, int) else None


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Uses(ast.NodeVisitor):
    """How each name is used in a kernel body: tile sizes, loop steps, persistent loops."""

    def __init__(self):
        self.tile: dict[str, int] = {}  # name -> line of a use as a tile dim or loop step
        self.steps: set[str] = set()  # names used as a loop step
        self.has_dot = False
        self.pid_vars: dict[str, tuple[str, int]] = {}  # variable -> ("program_id"|"num_programs", axis)
        self.axis_calls: list[tuple[str, object, ast.AST]] = []  # (kind, axis, node)
        self.loop_headers: set[int] = set()  # ids of nodes that are the start/step of a persistent loop

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) \
                and _call_name(node.value) in ("program_id", "num_programs"):
            self.pid_vars[node.targets[0].id] = (_call_name(node.value), _axis(node.value))
        self.generic_visit(node)

    def visit_Call(self, node):
        name = _call_name(node)
        if name in ("dot", "dot_scaled"):
            self.has_dot = True
        if name == "arange" and len(node.args) >= 2:
            for n in _names(node.args[1]):
                self.tile.setdefault(n, node.lineno)
        if name in ("zeros", "full", "empty", "zeros_like", "reshape", "view", "broadcast_to") and node.args:
            shape = node.args[1] if name in ("reshape", "view", "broadcast_to") and len(node.args) > 1 else \
                node.args[0]
            if isinstance(shape, (ast.Tuple, ast.List)):
                for e in shape.elts:
                    if isinstance(e, ast.Name):
                        self.tile.setdefault(e.id, node.lineno)
        if name in ("program_id", "num_programs"):
            self.axis_calls.append((name, _axis(node), node))
        self.generic_visit(node)

    def visit_For(self, node):
        it = node.iter
        if isinstance(it, ast.Call) and _call_name(it) in ("range", "static_range") and len(it.args) == 3:
            step = it.args[2]
            if isinstance(step, ast.Name) and step.id not in self.pid_vars:
                self.tile.setdefault(step.id, node.lineno)
                self.steps.add(step.id)
            start = it.args[0]
            kinds = [self._pid_kind(start), self._pid_kind(step)]
            if kinds[0] and kinds[1] and kinds[0][0] == "program_id" and kinds[1][0] == "num_programs" and \
                    kinds[0][1] == kinds[1][1]:
                self.loop_headers.update((id(start), id(step)))
        self.generic_visit(node)

    def _pid_kind(self, node):
        if isinstance(node, ast.Call) and _call_name(node) in ("program_id", "num_programs"):
            return _call_name(node), _axis(node)
        if isinstance(node, ast.Name) and node.id in self.pid_vars:
            return self.pid_vars[node.id]
        return None


def persistent_axes(tree) -> set[int]:
    """Grid axes along which the kernel is persistent: ``program_id(a)`` and ``num_programs(a)`` (directly or
    through a variable assigned once from them) appear only as the start and step of ``range`` loops."""
    uses = _Uses()
    uses.visit(tree)
    axes = set()
    for a in {ax for _, ax, _ in uses.axis_calls}:
        if a is None:
            continue
        ok, seen_loop = True, False
        var_names = {v for v, (_, ax) in uses.pid_vars.items() if ax == a}
        assigned = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name) and n.targets[0].id in var_names}
        for kind, ax, node in uses.axis_calls:
            if ax != a:
                continue
            if id(node) in uses.loop_headers:
                seen_loop = True
            elif id(node) not in assigned:
                ok = False
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in var_names and isinstance(n.ctx, ast.Load):
                if id(n) in uses.loop_headers:
                    seen_loop = True
                else:
                    ok = False
        if ok and seen_loop:
            axes.add(a)
    return axes


def _pow2(lo: int, hi: int) -> tuple:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return tuple(out)


def _values(v) -> tuple:
    if isinstance(v, (list, tuple, range, set, frozenset)):
        vals = tuple(sorted(v, key=repr)) if isinstance(v, (set, frozenset)) else tuple(v)
    else:
        vals = (v,)
    if not vals:
        raise LaunchError("an autotune hint needs at least one value")
    return vals


def discover(kernel, given: set, hints: dict | None, profile, grid_axes_given: tuple | None = None) -> list[Knob]:
    """The knobs of ``kernel`` for a call that passes the parameters ``given``. ``grid_axes_given``: the grid
    the call gave (sizes per axis), for the persistence knob's values."""
    src = kernel.source
    tree = src.tree
    uses = _Uses()
    uses.visit(tree)
    hints = dict(hints or {})
    unknown = [h for h in hints if h != PROGRAMS and h not in src.params]
    if unknown:
        raise LaunchError(f"autotune hints of `{src.name}` name {', '.join(map(repr, unknown))}, which "
                          f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'}; its parameters "
                          f"are {', '.join(src.params)} (and `{PROGRAMS}`, the grid's persistence)")
    cores = profile.cube_cores if uses.has_dot else profile.vector_cores
    tile_hi = 256 if uses.has_dot else max(1, 1 << int(math.log2(profile.ub_bytes // 4 // 4)))
    tile_lo = 16 if uses.has_dot else 1
    knobs = []
    for name in src.params:
        if name not in src.constexpr_params or name in given:
            continue
        if name in hints:
            knobs.append(Knob(name, "hint", _values(hints[name]), "given by hints="))
            continue
        if name in src.defaults:
            continue  # a default value: not tuned unless hinted
        line = src.first_line + uses.tile.get(name, 1) - 1
        if name.upper() in PROGRAM_NAMES:
            knobs.append(Knob(name, "programs", tuple(sorted({max(1, cores // 2), cores, 2 * cores, 4 * cores})),
                              "a program count (read by the grid function)"))
        elif name.upper().startswith("GROUP"):
            knobs.append(Knob(name, "group", (1, 2, 4, 8, 16), "a group size (program-id swizzle)"))
        elif name in uses.tile:
            # a loop step moves at least one aligned burst of fp32 per trip
            lo = max(tile_lo, profile.alignment // 4) if name in uses.steps else tile_lo
            knobs.append(Knob(name, "tile", _pow2(lo, tile_hi), f"a tile size or loop step ({src.file}:{line})"))
        else:
            raise LaunchError(
                f"autotune(configs=\"auto\") of `{src.name}`: the constexpr `{name}` is not passed and its use does "
                "not say what values it may take (it is not a tile size, a loop step, a group size or a program "
                f"count); pass it at the call, or give its values with hints={{{name!r}: [...]}}")
    for name in hints:
        if name != PROGRAMS and name in src.params and name not in src.constexpr_params:
            raise LaunchError(f"autotune hint {name!r} of `{src.name}` is not a constexpr parameter: only "
                              "constexprs (dl.constexpr) are tuned")
        if name in given and name != PROGRAMS:
            raise LaunchError(f"autotune hint {name!r} of `{src.name}` is also passed at the call: pass each "
                              "constexpr one way")
    axes = sorted(persistent_axes(tree))
    if PROGRAMS in hints:
        if not axes:
            raise LaunchError(f"autotune hint `{PROGRAMS}` of `{src.name}`: the kernel is not persistent (no grid "
                              "axis whose program_id/num_programs are only the start and step of range loops), so "
                              "its grid size is not free to choose")
        knobs.append(Knob(PROGRAMS, "programs", _values(hints[PROGRAMS]), "given by hints=", axes[0]))
    elif axes:
        a = axes[0]
        vals = {max(1, cores // 2), cores, 2 * cores, 4 * cores}
        if grid_axes_given and a < len(grid_axes_given) and grid_axes_given[a]:
            vals.add(int(grid_axes_given[a]))
        knobs.append(Knob(PROGRAMS, "programs", tuple(sorted(vals)),
                          f"the grid's size along axis {a} (a persistent loop)", a))
    return knobs


def candidates(knobs: list[Knob]) -> list[dict]:
    """Every combination of the knobs' values, in a canonical order (sorted by the values' reprs), as dicts
    name -> value; ``programs`` is kept under its own name."""
    if not knobs:
        return [{}]
    total = math.prod(len(k.values) for k in knobs)
    if total > MAX_CANDIDATES:
        raise LaunchError(f"autotune search space has {total:,} candidates ({' x '.join(f'{k.name}: {len(k.values)}' for k in knobs)}), "
                          f"more than {MAX_CANDIDATES:,}: restrict it with hints=")
    names = [k.name for k in knobs]
    out = [dict(zip(names, combo)) for combo in itertools.product(*(k.values for k in knobs))]
    return sorted(out, key=canonical)


def canonical(c: dict) -> str:
    return repr(sorted((k, repr(v)) for k, v in c.items()))
