"""Terminal views of traced launches, built with ``rich``.

``render(launches, view)`` prints one of: ``summary`` (cycles, bandwidth against the roofline, utilisation,
what bounds the kernel), ``source`` (the kernel's lines with their share of the cycles and their
instructions), ``timeline`` (per core, one row per pipe, in block characters), ``disasm`` (the
disassembly with costs), ``table`` (per-instruction totals), ``compare`` (two launches side by side),
``comm`` (the collectives and links of simulated systems: ``records=``) or ``all`` (summary, source, timeline
and disasm of every launch).

Bytecode and user text are always rendered as ``rich.text.Text`` (never markup), so ``ub[0:4096]``
keeps its brackets. Nothing here depends on the clock or on dict order, so a recording console of fixed
width without colour renders the same text every time (the golden tests rely on it).
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.text import Text

from ..errors import DvmError
from .compare import compare_view
from .listing import disasm_view, instruction_table
from .source import source_view
from .stats import analyse  # noqa: F401 - re-exported: the numbers behind the summary
from .summary import summary_view
from .timeline import timeline_view

# the per-launch views: name -> renderable of (launch, width, options); "compare" and "all" are built on them
PER_LAUNCH = {
    "summary": lambda launch, width, o: summary_view(launch),
    "source": lambda launch, width, o: source_view(launch, top=o.get("top", 5),
                                                   instructions=o.get("instructions", True)),
    "timeline": lambda launch, width, o: timeline_view(launch, cycles=o.get("cycles"), cores=o.get("cores"),
                                                       width=width),
    "disasm": lambda launch, width, o: disasm_view(launch, width=width),
    "table": lambda launch, width, o: instruction_table(launch, max_rows=o.get("max_rows", 60), width=width),
}
VIEWS = (*PER_LAUNCH, "compare", "comm", "all")
ALL = ("summary", "source", "timeline", "disasm")
OPTIONS = {
    "cycles": "(start, end) cycle range of the timeline",
    "cores": "cores of the timeline: a count (the first cores with rows) or a list of ids",
    "width": "render width in characters (default: the console's)",
    "kernel": "only launches of the kernel with this name",
    "top": "hot spots in the source view / lines in the comparison",
    "labels": "names of the two launches in the comparison",
    "pair": "indices of the two launches to compare (default (0, 1))",
    "max_rows": "rows of the instruction table",
    "instructions": "show each line's instructions in the source view (default True)",
    "records": "the communication records of the comm view (a session's ``comm``, a system's ``records``)",
    "topology": "the topology the comm view's links belong to (default 910B)",
}


def _check_options(options: dict) -> None:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        known = ", ".join(sorted(OPTIONS))
        raise DvmError(f"unknown trace view option {unknown[0]!r}; the options are {known}")
    w = options.get("width")
    if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 40):
        raise DvmError(f"width must be an int of at least 40 characters, got {w!r}")


def view_of(launch, view: str, width: int = 100, **options):
    """The renderable of one view of one launch."""
    make = PER_LAUNCH.get(view)
    if make is None:
        raise DvmError(f"unknown trace view {view!r}; choose one of {', '.join(VIEWS)}")
    return make(launch, width, options)


def render(launches, view: str = "summary", console: Console | None = None, **options) -> None:
    """Print ``view`` of ``launches`` (``LaunchRecord``s, or one) on ``console`` (a new one by default)."""
    if view not in VIEWS:
        raise DvmError(f"unknown trace view {view!r}; choose one of {', '.join(VIEWS)}")
    _check_options(options)
    console = console or Console()
    width = options.get("width") or console.width
    if view == "comm":  # what simulated NPUs said to each other (trace/comm.py): records, not launches
        from .comm import comm_view
        console.print(comm_view(options.get("records") or [], options.get("topology")), width=width)
        return
    if hasattr(launches, "cycles") and hasattr(launches, "grid"):
        launches = [launches]
    launches = list(launches)
    kernel = options.get("kernel")
    if kernel is not None:
        names = sorted({launch.name for launch in launches})
        launches = [launch for launch in launches if launch.name == kernel]
        if not launches:
            raise DvmError(f"no launch of a kernel named {kernel!r}; recorded: {', '.join(names) or 'none'}")
    if not launches:
        console.print(Text("(no launches recorded)"), width=width)
        return
    if view == "compare":
        i, j = options.get("pair", (0, 1))
        if len(launches) < 2:
            raise DvmError(f"the compare view needs two launches; {len(launches)} recorded")
        if not (0 <= i < len(launches) and 0 <= j < len(launches)) or i == j:
            raise DvmError(f"pair={options.get('pair')!r} must name two different launches of 0..{len(launches) - 1}")
        console.print(compare_view(launches[i], launches[j], labels=options.get("labels"),
                                   top=options.get("top", 8)), width=width)
        return
    views = ALL if view == "all" else (view,)
    options.pop("width", None)
    for n, launch in enumerate(launches):
        if len(launches) > 1 or view == "all":
            console.rule(Text(f"launch {n}: {launch.name} grid={tuple(launch.grid)}"), style="dim")
        parts = []
        for k, v in enumerate(views):
            if k:
                parts.append(Text(""))
            parts.append(view_of(launch, v, width, **options))
        console.print(Group(*parts), width=width)


def compare(a, b, console: Console | None = None, **options) -> None:
    """Print two launches side by side (``labels=("BLOCK=512", "BLOCK=1024")`` names them)."""
    render([a, b], "compare", console=console, **options)
