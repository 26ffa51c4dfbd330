"""The launch record: what a launch of one kernel (or a stack of them) took, as ``Device`` returns it.

Records are made without the dataclass's per-field ``__init__`` (``LaunchRecord.of``): a field a record's own
dict lacks is read from the base it shares with every launch of its kernel, or made when first read (the
figures ``Device._finish`` left in ``_raw``, ``time_us``, ``pipe_busy``, a combined record's sums)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from ..vm import isa
from .profile import Profile

PIPE_LABELS = [isa.PIPE_NAMES[isa.Pipe(q)] for q in range(isa.N_PIPES)]


@dataclass
class LaunchRecord:
    """What a kernel launch did on the device. ``cycles`` is simulated; ``wall_s`` is host time."""

    name: str
    grid: tuple
    cycles: int
    bytes_read: int
    bytes_written: int
    trace: object = None
    time_us: float = 0.0
    cores: int = 0
    waves: int = 0
    kind: str = "vector"
    double_buffer: bool = False
    launch_overhead: int = 0
    pipe_busy: dict = field(default_factory=dict)
    wall_s: float = 0.0
    encode_s: float = 0.0
    profile: Profile | None = None
    prints: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    group: str | None = None
    bytecode: object = None
    instructions: int = 0
    hbm_stretch: float = 1.0
    start: float = 0.0
    members: list = field(default_factory=list)  # the kernels' records of a stacked or summed launch
    stages: list = field(default_factory=list)
    launches: int = 1
    hbm_bytes: float = 0.0  # bytes that crossed HBM (the rest of the traffic hit L2)
    l2_hit_bytes: float = 0.0
    writeback_bytes: float = 0.0  # dirty L2 lines of earlier launches this one evicted to HBM
    dispatched: int = 0  # programs that paid profile.program_dispatch_cycles (beyond their core's first)
    unaligned_cycles: float = 0.0  # DMA cycles lost to bursts off their alignment boundary, all programs
    timing_kept: bool = False  # the timing was the instance's, kept from an earlier launch (docs/device.md)

    @classmethod
    def combined(cls, name: str, parts: list, cycles: int, kind: str, launch_overhead: int, profile: Profile,
                 launches: int = 1) -> "LaunchRecord":
        """One record for several kernels' records: bytes, instructions and pipe time summed (when one of them is
        first read: ``_summed``), ``cycles`` as the caller composed them (side by side, in sequence, or in
        separate launches)."""
        return cls.of(_COMBINED, {
            "name": name, "grid": (), "cycles": cycles, "time_us": cycles / profile.clock_hz * 1e6, "kind": kind,
            "launch_overhead": launch_overhead, "profile": profile, "group": name, "launches": launches,
            "_parts": tuple(parts)})

    def _summed(self) -> None:
        """A combined record's sums of its parts' figures, made fields (each sum from 0 in the parts' order, as
        sum() takes it: one pass over the parts)."""
        d = self.__dict__
        parts = d.pop("_parts")
        read = written = instructions = hbm = hits = back = dispatched = unaligned = 0
        cores = None
        busy: dict = {}
        for r in parts:
            p = r.__dict__
            raw = p.get("_raw")
            if raw is not None and p.keys() <= _FRESH:  # (as Device._finish made it: its fields, not yet unpacked)
                read += raw[0]
                written += raw[1]
                instructions += raw[4]
                hbm += raw[6]
                hits += raw[7]
                back += raw[8]
                shared = p["_shared"]
                dispatched += shared["dispatched"]
                unaligned += raw[9]
                c = shared["cores"]
                each = raw[2]
                for q, label in enumerate(PIPE_LABELS):  # (what pipe_busy would hold: each pipe's, in pipe order)
                    busy[label] = busy.get(label, 0.0) + each[q]
            else:
                read += r.bytes_read
                written += r.bytes_written
                instructions += r.instructions
                hbm += r.hbm_bytes
                hits += r.l2_hit_bytes
                back += r.writeback_bytes
                dispatched += r.dispatched
                unaligned += r.unaligned_cycles
                c = r.cores
                for q, v in r.pipe_busy.items():
                    busy[q] = busy.get(q, 0.0) + v
            if cores is None or c > cores:
                cores = c
        for k, v in (("bytes_read", read), ("bytes_written", written), ("cores", 0 if cores is None else cores),
                     ("instructions", instructions), ("hbm_bytes", hbm), ("l2_hit_bytes", hits),
                     ("writeback_bytes", back), ("dispatched", dispatched), ("unaligned_cycles", unaligned),
                     ("pipe_busy", busy)):
            if k not in d:  # (one set since stays)
                d[k] = v

    def __repr__(self) -> str:
        return (f"<Launch {self.name} grid={self.grid} cycles={self.cycles} ({self.time_us:.2f} us) "
                f"read={self.bytes_read} written={self.bytes_written}>")

    @classmethod
    def of(cls, base: dict, values: dict) -> "LaunchRecord":
        """The record with the fields of ``base`` (a dict from ``LaunchRecord.base``, shared, not copied) and
        ``values`` (taken as the record's own dict), without the generated ``__init__``'s work per field: a
        launch makes one record per kernel, and a 31-field ``__init__`` is a few us. A field ``values`` does
        not hold is read from ``base``, or made when first read (``__getattr__``): the fields of ``_RAW`` from
        the tuple ``values["_raw"]`` (all of them at the first read of one; a launch seldom reads any),
        ``time_us`` from the cycles, ``pipe_busy`` from ``_busy`` (each pipe's busy cycles, in pipe order),
        and ``prints``, ``diagnostics``, ``members`` and ``stages`` empty lists."""
        values["_shared"] = base
        rec = cls.__new__(cls)
        rec.__dict__ = values
        return rec

    def __getattr__(self, name):
        # only for what the record's own dict lacks (the class keeps no field defaults: see below the class)
        d = self.__dict__
        if "_parts" in d and name in _SUMMED:
            self._summed()
            return d[name]
        raw = d.get("_raw")
        if raw is not None:  # a launch's figures as Device._finish left them, made fields (one set earlier stays)
            del d["_raw"]
            for field_name, v in zip(_RAW, raw):
                if field_name not in d:
                    d[field_name] = v
            if name in d:
                return d[name]
        shared = d.get("_shared")
        if shared is not None:
            if name in shared:
                return shared[name]
            later = _LATER.get(name)
            if later is not None:
                value = d[name] = later(self)
                return value
        raise AttributeError(f"'LaunchRecord' object has no attribute {name!r}")

    @staticmethod
    def base(**values) -> dict:
        """The defaults with ``values`` (fields that do not default to a new object), for ``LaunchRecord.of``:
        what every launch of one kernel with the same options records alike."""
        assert not any(name in values for name in _LATER), "a shared base cannot hold a new or derived value"
        d = dict(_RECORD_DEFAULTS)
        d.update(values)
        return d


# What Device._finish leaves in a record's "_raw" tuple, in order ("_busy": pipe_busy's source).
_RAW = ("bytes_read", "bytes_written", "_busy", "bytecode", "instructions", "hbm_stretch", "hbm_bytes", "l2_hit_bytes",
        "writeback_bytes", "unaligned_cycles")
# A record made by LaunchRecord.of reads a field its own dict lacks from its base, or makes it (_LATER) when first
# read: for that, the class keeps no default of a field (a dataclass's __init__ keeps its own).
_RECORD_DEFAULTS = {f.name: f.default for f in fields(LaunchRecord) if f.default is not MISSING}
_LATER = {
    "time_us": lambda r: r.cycles / r.profile.clock_hz * 1e6 if r.profile is not None else 0.0,
    "pipe_busy": lambda r: _pipe_busy(r.__dict__["_busy"]) if "_busy" in r.__dict__ else {},  # (after _raw)
    "prints": lambda r: [], "diagnostics": lambda r: [], "members": lambda r: [], "stages": lambda r: [],
}
assert {f.name for f in fields(LaunchRecord) if f.default_factory is not MISSING} < _LATER.keys()
del _RECORD_DEFAULTS["time_us"]
for _name in _RECORD_DEFAULTS:
    delattr(LaunchRecord, _name)
delattr(LaunchRecord, "time_us")
# the keys of a record as Device._finish makes it (LaunchRecord.combined reads its figures from "_raw" then)
_FRESH = frozenset(("cycles", "_raw", "_shared", "prints", "diagnostics", "timing_kept"))
_SUMMED = frozenset(("bytes_read", "bytes_written", "cores", "instructions", "hbm_bytes", "l2_hit_bytes",
                     "writeback_bytes", "dispatched", "unaligned_cycles", "pipe_busy"))  # (a combined record's)
_COMBINED = LaunchRecord.base()  # (a combined record's own dict holds every field it sets: the rest are defaults)
# a pipe's busy cycles, per pipe in pipe order (a list or an array) -> the record's pipe_busy dict
_pipe_busy = eval(  # noqa: S307 - from the pipe labels
    "lambda b: {" + ", ".join(f"{name!r}: b[{q}]" for q, name in enumerate(PIPE_LABELS)) + "}")
