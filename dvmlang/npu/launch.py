"""One run of a kernel: what its steps read at run time (GM tensors, immediates, the launch's rates and
options), and what it collects (instruction count for the watchdog, device prints, diagnostics, race log)."""

from __future__ import annotations

import functools
import sys

import numpy as np

from .races import RaceLog
from .timing import Rates
from .timing_cache import Timing
from .timing_cache import key as timing_key

PRINT_LIMIT = 10_000  # the most device-print lines one launch keeps


class Launch:
    """What one run of a bytecode needs: GM tensors, scalar values, profile, options; complete when
    constructed. ``Launch.base`` is what every launch of one kernel instance with the same options shares;
    ``Launch.of`` makes a launch from it (what ``Device`` does; the constructor is the same in one call)."""

    def __init__(self, bc, kernel, arrays: dict[int, np.ndarray], profile, *, watchdog: int, debug=False,
                 kernel_name="", active_cores=1, alias_groups=None, loc_of_pc=None, race_detection=False,
                 share: float = 1.0):
        self.__dict__.update(Launch.base(kernel, profile, watchdog=watchdog, debug=debug, kernel_name=kernel_name,
                                         active_cores=active_cores, loc_of_pc=loc_of_pc,
                                         race_detection=race_detection, share=share))
        self._start(bc, arrays, alias_groups or {p: p for p in arrays})

    @staticmethod
    def base(kernel, profile, *, watchdog: int, debug, kernel_name, active_cores, loc_of_pc, race_detection,
             share) -> dict:
        """The fields every launch of ``kernel`` (a bytecode's ``KernelInfo``) with these options has alike."""
        return {"kernel": kernel, "profile": profile, "debug": debug,
                "watchdog": watchdog,  # the instruction budget of each program (Device(watchdog=N))
                "name": kernel_name or kernel.name, "loc_of_pc": loc_of_pc or _no_location,
                "race_detection": race_detection, "rate_constants": Rates.constants(profile, active_cores, share),
                "untimed": False}

    @classmethod
    def of(cls, base: dict, bc, arrays: dict, alias: dict) -> "Launch":
        """A launch of ``bc`` with ``base``'s fields (``Launch.base``) on ``arrays``."""
        L = cls.__new__(cls)
        L.__dict__.update(base)
        L._start(bc, arrays, alias)
        return L

    def _start(self, bc, arrays: dict, alias: dict, rates=None) -> None:
        """Everything one run of ``bc`` on ``arrays`` has of its own (``rates``: a finished launch's, reset, and
        its lists kept when they are empty: a launch's record holds what they held, see ``Device._finish``)."""
        self.bc = bc
        self.arrays = arrays
        self.alias = alias
        self.executed = 0  # instructions run so far, one per batch and step (the record's instructions)
        self.imm = _imm_reader(bc)
        if rates is None:
            self.rates = Rates(self.profile, arrays, alias, 0, constants=self.rate_constants)
            self.prints: list = []  # (pid, sequence, prefix, value, hex, numpy dtype): see add_prints
            self.diagnostics: list[str] = []
            self.parked = None  # a one-program launch's batch, kept to be resumed by the next (Device._one)
        else:
            rates.reset(arrays, alias)
            if self.prints_seen:
                self.prints = []
            if self.diagnostics:
                self.diagnostics = []
        self.prints_seen = 0
        self.untimed = False  # run the numerics alone: the timing is the instance's (timing_cache)
        self.races = RaceLog() if self.race_detection else None

    def where(self, pc: int) -> str:
        """``at file:line:col`` of ``pc`` on a line of its own, for an error message ("" without a line
        table entry)."""
        loc = self.loc_of_pc(pc)
        return f"\n  at {loc}" if loc is not None else ""

    def add_prints(self, entries: list) -> None:
        """Buffer device-print lines, keeping only the first ``PRINT_LIMIT`` in output order (by program,
        then sequence), so a print inside a long loop cannot exhaust memory."""
        self.prints.extend(entries)
        self.prints_seen += len(entries)
        if len(self.prints) > 2 * PRINT_LIMIT:
            self.prints.sort(key=_print_order)
            del self.prints[PRINT_LIMIT:]

    def print_lines(self) -> list[str]:
        """The print lines to show, in output order, as text, and a last line saying how many were dropped."""
        if not self.prints_seen:
            return []
        self.prints.sort(key=_print_order)
        del self.prints[PRINT_LIMIT:]
        dropped = self.prints_seen - len(self.prints)
        out = []
        for pid, seq, prefix, val, hexa, npdt in self.prints:
            if val is None:
                text = ""
            else:
                arr = np.asarray(val)
                if hexa and arr.dtype.kind in "iu":
                    text = np.array2string(arr, formatter={"int": lambda x: hex(int(x))}) if arr.ndim else hex(int(arr))
                else:
                    text = np.array2string(arr, threshold=64) if arr.ndim else str(arr.item() if hasattr(arr, "item") else arr)
            sep = " " if prefix and text else ""
            out.append(f"pid ({pid}) {prefix}{sep}{text}")
        if dropped:
            out.append(f"... {dropped} more print lines dropped (a launch keeps the first {PRINT_LIMIT})")
        return out


class LaunchBase:
    """What every launch of one kernel instance with the same options has alike, made once (``Device._bases``):
    the kernel (``KernelInfo``) and its machine, its programs, cores, fixed cycles and share of HBM, the launch's
    fixed fields (``Launch.base``), the record's (``LaunchRecord.base``), a finished launch kept to be reset
    for the next one instead of making a new one (``launch``, ``release``) and, for one program, its state
    after the machine's prefix (``after_prefix``, ``Device._one``)."""

    __slots__ = ("kern", "machine", "profile", "options", "fields", "record", "programs", "cores", "overhead",
                 "share", "spare", "after_prefix", "fixed", "timing", "replay", "steady")

    def __init__(self, kern, machine, profile, options: tuple, fields: dict, record: dict, programs: int,
                 cores: int, overhead: int, share: float):
        self.kern, self.machine, self.profile, self.options = kern, machine, profile, options
        self.fields, self.record = fields, record
        self.programs, self.cores, self.overhead, self.share = programs, cores, overhead, share
        self.spare: list = []
        self.after_prefix = None  # a one-program launch's state after its machine's prefix (Device._one)
        self.fixed = False  # whether its timing is the instance's (timing_cache.fixed; not in debug or race mode)
        self.timing: dict = {}  # timing_cache.key -> the instance's timing (timing_cache.Timing)
        # its untimed launches' path as one function (replay.Replay), or its groups of programs' (replay.Parts;
        # replay.Pending while they are recorded); None: not yet tried, False: none
        self.replay = None
        self.steady = None  # what its steady relaunches in a stacked launch repeat (steady.Steady), once made

    def launch(self, bc, arrays: dict, alias: dict) -> Launch:
        """A launch of ``bc`` on ``arrays``: the spare one reset, or a new one (when another run holds it)."""
        try:
            L = self.spare.pop()
        except IndexError:
            return Launch.of(self.fields, bc, arrays, alias)
        L._start(bc, arrays, alias, L.rates)
        return L

    def timed(self, L: Launch, mode):
        """(the kept timing of launch ``L``'s instance, or None; the key it is kept under, or None when it is not
        kept) for a device whose ``timing_cache`` is ``mode``; sets ``L.untimed`` when the numerics alone run."""
        if not mode or not self.fixed:
            L.untimed = False
            return None, None
        k = timing_key(L)
        t = self.timing.get(k)
        L.untimed = t is not None and mode is True
        return t, k

    def keep(self, L: Launch, k, figures: tuple) -> None:
        """Keep the timing a launch timed in full found (``figures``: body, busy, bytes read and written,
        instructions), or check it against the kept one (``Device(timing_cache="check")``)."""
        t = Timing(*figures, L.rates)
        kept = self.timing.get(k)
        if kept is not None:
            kept.check(t, L.name)
        else:
            if len(self.timing) >= 16:
                self.timing.clear()
            self.timing[k] = t

    def release(self, L: Launch) -> None:
        """Keep the finished launch ``L`` for the next one, holding none of its arrays (nor anything a record
        of it holds)."""
        if not self.spare:
            L.arrays = L.bc = None  # the arrays, and the bytecode (which holds this base: no cycle)
            self.spare.append(L)


def _no_location(pc):
    return None


def _print_order(entry) -> tuple:
    return entry[0], entry[1]


@functools.cache
def _int_reading(npdt):
    """(mask, sign bit or 0, scalar type) of an integer dtype, whose immediate ``_imm_reader`` reads from the
    word's low bytes in Python numbers; False for any other dtype, one not in the host's byte order, or on a
    big-endian host (then it reads the word's bytes as numpy lays them out)."""
    d = np.dtype(npdt)
    if d.kind not in "iu" or not d.isnative or sys.byteorder != "little":
        return False
    bits = 8 * d.itemsize
    return (1 << bits) - 1, (1 << (bits - 1)) if d.kind == "i" else 0, d.type


def block_immediates(L, words: tuple, fetch) -> tuple:
    """The immediates of the code words ``words`` ((word index, dtype) of a compiled block's MOVIs, in order;
    ``fetch``: an ``operator.itemgetter`` of their indices) of launch ``L``'s instance, kept with the instance
    under the words' values: read once per instance, read again when a word was edited (as ``_imm_reader``
    does)."""
    bc = L.bc
    bits = fetch(bc.code)
    kept = bc.__dict__.get("_block_imms")
    if kept is None:
        kept = bc.__dict__["_block_imms"] = {}
    hit = kept.get(words)
    if hit is not None and hit[0] == bits:
        return hit[1]
    imm = L.imm
    values = tuple(imm(w, t) for w, t in words)
    kept[words] = (bits, values)
    return values


def _imm_reader(bc):
    """word index -> the immediate in that code word as a numpy scalar of ``npdt``. Remembered on the bytecode
    with the word it was read from, so a relaunch reads each immediate once and an edited word is read again."""
    code = bc.code
    made = bc.__dict__.get("_imm_reader")
    if made is not None and made[0] is code:
        return made[1]
    cache = bc.__dict__.setdefault("_immediates", {})

    def imm(w: int, npdt):
        key = (w, npdt)
        word = code[w]
        hit = cache.get(key)
        if hit is not None and hit[0] == word:
            return hit[1]
        ints = _int_reading(npdt)
        if ints:  # an integer dtype: its low bytes in Python numbers, the numpy scalar the lines below make
            mask, sign, scalar = ints
            v = word & mask
            v = scalar(v - (sign << 1) if v & sign else v)
        else:
            raw = np.array([word], dtype=np.uint64).view(np.uint8)
            v = raw[:np.dtype(npdt).itemsize].view(npdt)[0] if npdt != np.bool_ else np.bool_(raw[0] != 0)
        cache[key] = (word, v)
        return v
    bc.__dict__["_imm_reader"] = (code, imm)  # one reader per code array: it reads the words as they are at each call
    return imm
