"""The dvmlang error hierarchy.

Every failure a user can cause raises one of these classes, with a message that says what went wrong,
where (``file:line:col`` for kernel code, section and offset for bytecode, program id and source line
for run-time faults) and how to fix it. Catch ``DvmError`` to catch them all.

Launch-argument errors also derive from the matching built-in class (``TypeError`` or ``ValueError``)
so ordinary Python habits keep working.
"""

from __future__ import annotations

import functools
import os
import types
from dataclasses import dataclass


class DvmError(Exception):
    """Base class of every dvmlang error."""


# --------------------------------------------------------------------------------------------------
# Source locations and compile-time diagnostics


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A span in a source file: 1-based lines, 0-based columns (as Python's ``ast`` reports them)."""

    file: str
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None
    func: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


def source_line(file: str, line: int) -> str:
    """The text of one source line, or "" when the file cannot be read."""
    import linecache

    return linecache.getline(file, line).rstrip("\n")


def render_span(loc: SourceLoc, text: str | None = None) -> str:
    """Render a source line with a ``^^^`` marker under the span of ``loc``. ``text`` is the line when the
    caller has it (run-time faults pass the bytecode's embedded text: a loaded file is never opened);
    ``None`` reads it from the file."""
    if text is None:
        text = source_line(loc.file, loc.line)
    if not text:
        return ""
    start = max(0, loc.col)
    if loc.end_line == loc.line and loc.end_col is not None and loc.end_col > start:
        end = loc.end_col
    else:
        end = len(text.rstrip())
    end = max(end, start + 1)
    return f"    {text}\n    {' ' * start}{'^' * (end - start)}"


class CompilationError(DvmError):
    """A kernel could not be compiled. The message shows ``file:line:col``, the source line with a caret
    span under the offending code, notes pointing at related code (``notes``: (text, loc) pairs, such as the
    loop an assignment sits in), the chain of inlined kernel calls, and the rewrite to use."""

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None,
                 call_chain: tuple[tuple[str, SourceLoc], ...] = (), notes: tuple[tuple[str, SourceLoc], ...] = ()):
        self.message = message
        self.loc = loc
        self.hint = hint
        self.call_chain = call_chain
        self.notes = tuple(notes)
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.loc is not None:
            parts.append(f"{self.loc}: {self.message}")
            span = render_span(self.loc)
            if span:
                parts.append(span)
        else:
            parts.append(self.message)
        for text, site in self.notes:
            parts.append(f"note: {site}: {text}")
            span = render_span(site)
            if span:
                parts.append(span)
        for name, site in self.call_chain:
            parts.append(f"  in kernel `{name}` called from {site}")
            span = render_span(site)
            if span:
                parts.append(span)
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def with_context(self, loc: SourceLoc | None = None,
                     call_chain: tuple[tuple[str, SourceLoc], ...] | None = None) -> "CompilationError":
        """A copy of this error with a location and call chain filled in where they were missing."""
        err = type(self).__new__(type(self))
        CompilationError.__init__(err, self.message, self.loc or loc, self.hint,
                                  self.call_chain if call_chain is None or self.call_chain else call_chain,
                                  self.notes)
        return err


class UnsupportedSyntaxError(CompilationError):
    """A Python construct the kernel language does not support (the message names the rewrite)."""


class KernelTypeError(CompilationError):
    """Operands whose types or shapes do not fit the operation."""


class ConstexprError(CompilationError):
    """A value that must be known at compile time is not, or a ``static_assert`` failed."""


class IRVerificationError(CompilationError):
    """The tile IR broke one of its invariants (a compiler bug if it comes from the frontend)."""


# --------------------------------------------------------------------------------------------------
# Launch-time argument errors


class ArgumentError(DvmError, TypeError):
    """A launch argument has the wrong kind, dtype, or value (names the parameter and what was expected)."""


class LaunchError(DvmError, ValueError):
    """A launch configuration is impossible: a bad grid, a missing constexpr, an unknown keyword."""


# --------------------------------------------------------------------------------------------------
# Bytecode


class BytecodeError(DvmError):
    """Bytecode that cannot be decoded or must not run. ``section``, ``offset``, ``expected`` and
    ``found`` say where and what."""

    kind = "bytecode"

    def __init__(self, message: str, *, section: str | None = None, offset: int | None = None,
                 expected: str | None = None, found: str | None = None):
        self.reason = message
        self.section = section
        self.offset = offset
        self.expected = expected
        self.found = found
        where = []
        if section:
            where.append(f"section {section}")
        if offset is not None:
            where.append(f"offset {offset}")
        text = f"{self.kind} bytecode: {message}"
        if where:
            text += f" ({', '.join(where)})"
        if expected is not None or found is not None:
            text += f"; expected {expected}, found {found}"
        super().__init__(text)


class MalformedBytecodeError(BytecodeError):
    """Decoding failed: bad magic, truncation, sizes that do not add up, bad varints, unknown opcodes."""

    kind = "malformed"


class InvalidBytecodeError(BytecodeError):
    """Decoded but unsafe to run: out-of-range UB operands, bad register/tensor indices, branches into the
    middle of an instruction, waits without a matching set, limits exceeded."""

    kind = "invalid"


class VersionError(MalformedBytecodeError):
    """The container was written by a newer, incompatible major version of dvmlang."""

    kind = "unsupported"


# --------------------------------------------------------------------------------------------------
# Device


class ResourceError(DvmError):
    """A kernel's buffers do not fit the on-chip memory (UB, L1, L0A/B/C); the message breaks the
    footprint down per buffer. It is also Triton's ``OutOfResources`` (``dvmlang.triton``), so it takes Triton's
    constructor too: ``ResourceError(required, limit, name)`` says "out of resource: name, Required: ..., Hardware
    limit: ..." and keeps the three as attributes."""

    def __init__(self, *args):
        if len(args) == 3 and isinstance(args[2], str) and not isinstance(args[0], str):
            self.required, self.limit, self.name = args
            args = (f"out of resource: {self.name}, Required: {self.required}, Hardware limit: {self.limit}. "
                    "Reducing block sizes or `num_stages` may help.",)
        super().__init__(*args)


class BufferOverflowError(ResourceError, CompilationError):
    """A kernel's live tiles do not fit on-chip memory: raised while building, at the source line of the
    largest tile, with the per-buffer breakdown."""

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None,
                 call_chain: tuple = ()):
        CompilationError.__init__(self, message, loc, hint, call_chain)


class DeviceError(DvmError):
    """A fault while the simulated NPU ran a program."""


class MemoryFault(DeviceError):
    """An access outside the tensor it belongs to. Names kernel, program id, tensor, index range and the
    kernel source line (``source``: its text as the bytecode embeds it; "" shows file:line only)."""

    def __init__(self, message: str, *, kernel: str = "", tensor: str = "", index_range=None,
                 program_id=None, loc: SourceLoc | None = None, source: str | None = None):
        self.kernel = kernel
        self.tensor = tensor
        self.index_range = index_range
        self.program_id = program_id
        self.loc = loc
        text = message
        if loc is not None:
            text += f"\n  at {loc}"
            span = render_span(loc, source)
            if span:
                text += "\n" + span
        super().__init__(text)


class WatchdogTimeout(DeviceError):
    """A launch executed more instructions than its watchdog budget allows (a runaway loop): names the kernel,
    the programs, the pc and the source line. The budget is `dvmlang.npu.Device(watchdog=N)`."""


class UninitializedRead(DeviceError):
    """Debug mode: a program read on-chip memory that nothing had written."""


class RaceDetected(DeviceError):
    """Debug mode: two programs wrote the same global-memory bytes without atomics."""


class OutOfMemory(ResourceError):
    """A simulated NPU's HBM cannot hold its resident buffers and what a launch or a collective needs: names the
    device, what was asked for, and the largest buffers it holds."""


class CollectiveError(DeviceError):
    """A collective (or send/recv, or a kernel's wait for a signal) between simulated NPUs could not complete."""


class CollectiveMismatch(CollectiveError):
    """The ranks of a group called different collectives (or one with different shapes, dtypes or reductions) at
    the same point of their sequence: names each rank's call."""


class CollectiveTimeout(CollectiveError):
    """A collective waited longer than its timeout for a peer: names the ranks that never joined."""


class PeerError(CollectiveError):
    """Another rank of the group failed (or finished) before joining: names it and its error."""


class DvmWarning(UserWarning):
    """Base class of dvmlang warnings."""


class PerformanceWarning(DvmWarning):
    """Code that works but maps poorly onto the NPU (for example a gather instead of a DMA)."""


# --------------------------------------------------------------------------------------------------
# How errors reach users: their own frames, not the compiler's

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep


def _user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the entries of dvmlang's own files, nor of the standard library called from them
    (``ast.NodeVisitor.visit``): what is left is the user's code (their call site, their ``@graph``
    function, their combine function) in the same order."""
    kept = []
    inside = False
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file.startswith(_PACKAGE_DIR):
            inside = True
        elif not (inside and file.startswith(_STDLIB_DIR) and "site-packages" not in file):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def warn_user(message: str, category=None) -> None:
    """``warnings.warn`` (``DvmWarning`` by default) attributed to the first caller outside dvmlang's own files:
    the user's call site, however deep in dvmlang the warning is raised."""
    import sys
    import warnings
    level, f = 2, sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        f = f.f_back
        level += 1
    warnings.warn(message, category or DvmWarning, stacklevel=level)


def user_loc() -> SourceLoc | None:
    """Where the user's code is calling from: the innermost frame outside dvmlang's own files (a tensor
    operation's call site, which fused kernels map their instructions to)."""
    import sys
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        f = f.f_back
    if f is None:
        return None
    return SourceLoc(f.f_code.co_filename, f.f_lineno or 0, 0, func=f.f_code.co_name)


def _trim(err: BaseException) -> None:
    err.__traceback__ = _user_traceback(err.__traceback__)
    err.__suppress_context__ = True  # an internal exception dvmlang turned into this error is no news to a user
    if isinstance(err.__cause__, DvmError):
        _trim(err.__cause__)


def user_frames(fn):
    """Decorate a public entry point: a ``DvmError`` raised below it reaches the caller with dvmlang's own
    frames removed, so a user sees their call site and the diagnostic (which names file:line of kernel
    code), not the compiler. ``DVMLANG_TRACEBACK=1`` in the environment keeps every frame, for debugging
    dvmlang itself. Other exceptions are dvmlang bugs and keep their whole traceback."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DvmError as err:
            raise for_user(err)  # about the code that called here; DVMLANG_TRACEBACK=1 shows dvmlang's frames

    return entry


def for_user(err: DvmError) -> DvmError:
    """``err`` as a public entry point raises it (``user_frames``; an entry point a launch goes through inlines
    the decorator's ``try``: ``except DvmError as err: raise for_user(err)``): dvmlang's frames removed, unless
    ``DVMLANG_TRACEBACK=1`` is in the environment."""
    if not os.environ.get("DVMLANG_TRACEBACK"):
        _trim(err)
    return err


def user_frames_methods(cls):
    """Class decorator: ``user_frames`` on every public method and operator (``__add__``, ``__getitem__``,
    ``__exit__``, ...) the class defines itself; private helpers and dvmlang's own protocols
    (``__dvm_array__``) are left alone."""
    for name, f in list(vars(cls).items()):
        dunder = name.startswith("__") and name.endswith("__") and not name.startswith("__dvm")
        if isinstance(f, types.FunctionType) and (dunder or not name.startswith("_")):
            setattr(cls, name, user_frames(f))
    return cls
