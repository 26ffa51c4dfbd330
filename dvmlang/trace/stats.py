"""The numbers behind the views: launch analysis (roofline, peaks, what bounds the kernel), per-line totals
and busy time per time bin. Pure functions over ``LaunchRecord``/``LaunchTrace``, no rendering."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..vm import isa

PIPE_ORDER = [isa.Pipe.SCALAR, isa.Pipe.MTE2, isa.Pipe.VECTOR, isa.Pipe.CUBE, isa.Pipe.MTE1, isa.Pipe.FIXPIPE,
              isa.Pipe.MTE3]
PIPE_NAMES = [isa.PIPE_NAMES[p] for p in PIPE_ORDER]


def pipe_name(p: int) -> str:
    return isa.PIPE_NAMES[isa.Pipe(p)]


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_count(n: float) -> str:
    """Compact counts for narrow columns: 1,234 / 12.3K / 4.56M."""
    n = float(n)
    if abs(n) < 100_000:
        return f"{n:,.0f}"
    if abs(n) < 100_000_000:
        return f"{n / 1e3:,.0f}K"
    return f"{n / 1e6:,.0f}M"


def short_file(path: str | None) -> str:
    return path.rsplit("/", 1)[-1] if path else "?"


@dataclass
class Bound:
    name: str
    cycles: float
    why: str


@dataclass
class Analysis:
    """What the summary view shows, as numbers (tests and the comparison view use them too)."""

    name: str
    cycles: int
    time_us: float
    overhead: int
    body: float
    programs: int
    cores: int
    core_kind: str
    waves: int
    last_wave: int
    bytes_read: int
    bytes_written: int
    bandwidth: float  # bytes/s over the whole launch
    body_bandwidth: float  # bytes/s while programs run
    roofline_fraction: float
    memory_floor_cycles: float
    busy: dict  # pipe name -> busy cycles summed over programs
    utilisation: dict  # pipe name -> busy / (cores x body)
    instructions: int
    vector_work: float  # 256-byte repeats
    vector_peak_fraction: float
    cube_macs: float
    cube_peak_fraction: float
    bounds: list = field(default_factory=list)  # [Bound], largest first
    hbm_bytes: float = 0.0  # what crossed HBM; the rest hit L2
    l2_hit_bytes: float = 0.0
    writeback_bytes: float = 0.0

    @property
    def bound(self) -> str:
        return self.bounds[0].name if self.bounds else "-"


def analyse(launch) -> Analysis:
    """Everything the summary needs from one ``LaunchRecord`` (exact: never depends on recorded rows)."""
    p = launch.profile
    cycles = max(1, int(launch.cycles))
    overhead = int(launch.launch_overhead)
    body = max(1.0, float(cycles - overhead))
    cores = max(1, int(launch.cores))
    programs = int(np.prod(launch.grid))
    moved = launch.bytes_read + launch.bytes_written
    busy = {name: float(launch.pipe_busy.get(name, 0.0)) for name in PIPE_NAMES}
    util = {name: b / (cores * body) for name, b in busy.items()}
    total_cores = p.cube_cores if launch.kind == "mix" else p.vector_cores
    waves = int(launch.waves)
    last_wave = programs - (waves - 1) * total_cores if waves else 0
    hbm = float(getattr(launch, "hbm_bytes", moved))
    mem_floor = max(hbm / p.hbm_bytes_per_cycle, moved / p.l2_bytes_per_cycle)
    tr = launch.trace
    vector_work = cube_macs = 0.0
    if tr is not None and tr.step_count is not None:
        for s in tr.steps:
            if s.work:
                if s.pipe == isa.Pipe.VECTOR:
                    vector_work += s.work * tr.step_count[s.index]
                elif s.pipe == isa.Pipe.CUBE:
                    cube_macs += s.work * tr.step_count[s.index]
    handoff = 0.0
    if tr is not None and tr.step_cycles is not None:
        handoff = sum(float(tr.step_cycles[s.index]) for s in tr.steps
                      if isa.BY_NAME[s.name].cost.kind == "handoff") / cores
    per_core = {name: b / cores for name, b in busy.items()}
    executed = int(tr.step_count.sum()) if tr is not None and tr.step_count is not None else int(launch.instructions)
    dispatch = executed * p.scalar_dispatch / cores
    bounds = [
        Bound("memory (HBM / DMA)", max(mem_floor, per_core["MTE2"], per_core["MTE3"]),
              f"HBM/L2 floor {mem_floor:,.0f} cycles for {fmt_bytes(hbm)} from HBM of {fmt_bytes(moved)} moved; "
              f"DMA pipes busy {max(per_core['MTE2'], per_core['MTE3']):,.0f} cycles per core"),
        Bound("vector", per_core["VECTOR"], f"VECTOR busy {per_core['VECTOR']:,.0f} cycles per core"),
        Bound("cube", per_core["CUBE"] + 0.0, f"CUBE busy {per_core['CUBE']:,.0f} cycles per core"),
        Bound("scalar decoding", per_core["SCALAR"] + dispatch,
              f"{executed:,} instructions decoded at {p.scalar_dispatch} cycles each, plus scalar work"),
        Bound("launch overhead", float(overhead), f"{p.launch_overhead_us:g} us fixed cost per launch"),
    ]
    units = max(b.cycles for b in bounds[:4])
    dispatched = int(getattr(launch, "dispatched", 0))
    dispatch_cycles = dispatched * p.program_dispatch_cycles / cores
    bounds.append(Bound("latency (pipes waiting)", max(0.0, body - units - dispatch_cycles),
                        "time no unit is busy enough to explain: DMA latency, set/wait chains, handoff flags"))
    bounds.append(Bound("program dispatch", dispatch_cycles,
                        f"{dispatched:,} programs beyond the first wave, {p.program_dispatch_cycles:,} cycles each "
                        "to start (grid = cores and a loop inside avoids it)"))
    bounds.append(Bound("cube <-> vector handoff", handoff,
                        "tiles between L0C and UB go through a GM workspace at "
                        f"{p.handoff_bytes_per_cycle:g} B/cycle, plus a cross-core flag (part of the time above)"))
    unaligned = float(getattr(launch, "unaligned_cycles", 0.0)) / cores
    bounds.append(Bound("unaligned GM bursts", unaligned,
                        f"DMA bursts not starting on a {p.gm_align_bytes} B boundary (or their own size) move at "
                        f"{100 * p.unaligned_efficiency:.0f}% (part of the DMA time above)"))
    bounds.sort(key=lambda b: -b.cycles)
    return Analysis(
        name=launch.name, cycles=int(launch.cycles), time_us=float(launch.time_us), overhead=overhead, body=body,
        programs=programs, cores=cores, core_kind="cube (AIC)" if launch.kind == "mix" else "vector (AIV)",
        waves=waves, last_wave=last_wave, bytes_read=int(launch.bytes_read), bytes_written=int(launch.bytes_written),
        bandwidth=moved / (cycles / p.clock_hz), body_bandwidth=moved / (body / p.clock_hz),
        roofline_fraction=moved / (cycles / p.clock_hz) / p.hbm_bytes_per_s, memory_floor_cycles=mem_floor,
        busy=busy, utilisation=util, instructions=executed, vector_work=vector_work,
        vector_peak_fraction=vector_work / (cores * body), cube_macs=cube_macs,
        cube_peak_fraction=cube_macs / (cores * body * p.cube_macs_per_cycle), bounds=bounds, hbm_bytes=hbm,
        l2_hit_bytes=float(getattr(launch, "l2_hit_bytes", 0.0)),
        writeback_bytes=float(getattr(launch, "writeback_bytes", 0.0)))


@dataclass
class LineStats:
    file: str | None
    line: int | None
    text: str
    cycles: float = 0.0
    count: int = 0
    nbytes: float = 0.0
    pipes: dict = field(default_factory=dict)  # pipe name -> cycles
    steps: list = field(default_factory=list)  # StepInfo, in pc order

    @property
    def main_pipe(self) -> str:
        return max(self.pipes, key=self.pipes.get) if self.pipes else ""


def line_stats(tr) -> tuple[list[LineStats], float]:
    """Exact per-source-line totals (every program, whatever was recorded), in source order, and the total
    instruction cycles. Instructions without a line (the prologue) come first with ``line=None``."""
    by: dict = {}
    for s in tr.steps:
        key = (s.file, s.line)
        st = by.get(key)
        if st is None:
            st = by[key] = LineStats(s.file, s.line, tr.source_line(s.file, s.line))
        st.steps.append(s)
        if tr.step_count is None:
            continue
        c = float(tr.step_cycles[s.index])
        st.cycles += c
        st.count += int(tr.step_count[s.index])
        st.nbytes += float(tr.step_bytes[s.index])
        if tr.step_count[s.index]:
            st.pipes[s.pipe_name] = st.pipes.get(s.pipe_name, 0.0) + c
    total = float(tr.step_cycles.sum()) if tr.step_cycles is not None else 0.0
    order = sorted(by.values(), key=lambda x: (x.line is not None, x.file or "", x.line or 0))
    return order, total


def busy_per_bin(start: np.ndarray, end: np.ndarray, edges: np.ndarray, weight: np.ndarray | None = None):
    """For intervals [start, end) with optional weight per unit time, the weighted busy time inside each bin
    ``[edges[j], edges[j + 1])`` (exact, vectorised: F(t) = sum of w * clip(t - s, 0, e - s))."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    w = np.ones_like(start) if weight is None else np.asarray(weight, dtype=np.float64)
    if len(start) == 0:
        return np.zeros(len(edges) - 1)
    so = np.argsort(start, kind="stable")
    eo = np.argsort(end, kind="stable")
    s_sorted, e_sorted = start[so], end[eo]
    cw_s = np.concatenate([[0.0], np.cumsum(w[so])])
    cws_s = np.concatenate([[0.0], np.cumsum(w[so] * s_sorted)])
    cw_e = np.concatenate([[0.0], np.cumsum(w[eo])])
    cwe_e = np.concatenate([[0.0], np.cumsum(w[eo] * e_sorted)])
    ks = np.searchsorted(s_sorted, edges, side="right")
    ke = np.searchsorted(e_sorted, edges, side="right")
    F = (edges * cw_s[ks] - cws_s[ks]) - (edges * cw_e[ke] - cwe_e[ke])
    return np.diff(F)


def nice_step(span: float, slots: int) -> float:
    """A 1/2/5 x 10^k step that cuts ``span`` into at most ``slots`` pieces."""
    if span <= 0 or slots <= 0:
        return 1.0
    raw = span / slots
    k = 10 ** np.floor(np.log10(raw))
    for m in (1, 2, 5, 10):
        if m * k >= raw:
            return float(m * k)
    return float(10 * k)
