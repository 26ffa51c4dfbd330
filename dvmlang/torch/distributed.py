"""``torch.distributed`` on simulated NPUs: the ``"dvmlang"`` process-group backend.

``torch.distributed.init_process_group(backend="dvmlang")`` (under ``torchrun --nproc-per-node N``, or any
rendezvous torch supports) puts each rank on a simulated NPU of its own: its ``torch.compile(backend="dvmlang")``
regions run on that device, and its collectives run between the devices with HCCL's algorithms and timing
(``dvmlang.npu.collectives``), their bytes carried by torch's own store, so ranks on several machines work as
ranks on one. ``run(fn, n)`` runs ``fn(rank)`` as n ranks on threads of this process (tests, notebooks).

``configure(profile=..., topology=..., timeout_s=...)`` before ``init_process_group`` (or the environment:
``DVMLANG_PROFILE``, ``DVMLANG_TOPOLOGY``, ``DVMLANG_DIST_TIMEOUT``) picks the device and the servers. See
docs/distributed.md.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ..errors import DvmError
from ..npu import set_default_device
from ..npu.system import System
from .dist_comm import Communicator
from .dist_group import DvmlangProcessGroup
from .dist_transport import StoreTransport, ThreadTransport

BACKEND = "dvmlang"
_CONFIG: dict = {"profile": None, "topology": None, "timeout_s": None, "hbm_bytes": None}
_THREAD = threading.local()  # ranks as threads: .system, the System they share
_PROCESS: dict = {"system": None, "transports": [], "hooked": False}


def configure(profile=None, topology=None, *, timeout_s: float | None = None, hbm_bytes: int | None = None) -> None:
    """The simulated device and topology of the ranks this process starts (call before ``init_process_group``)."""
    _CONFIG.update(profile=profile, topology=topology, timeout_s=timeout_s, hbm_bytes=hbm_bytes)


def _timeout_s(torch_timeout) -> float:
    if _CONFIG["timeout_s"] is not None:
        return float(_CONFIG["timeout_s"])
    env = os.environ.get("DVMLANG_DIST_TIMEOUT")
    if env:
        return float(env)
    seconds = torch_timeout.total_seconds() if torch_timeout is not None else 300.0
    return min(seconds, 300.0)


def _new_system(size: int, timeout_s: float) -> System:
    return System(size, _CONFIG["profile"] or os.environ.get("DVMLANG_PROFILE") or None,
                  _CONFIG["topology"] or os.environ.get("DVMLANG_TOPOLOGY") or None,
                  hbm_bytes=_CONFIG["hbm_bytes"], timeout_s=timeout_s)


def _create(opts, backend_options=None):
    """The backend's constructor (``Backend.register_backend(..., extended_api=True)``)."""
    rank, size = opts.group_rank, opts.group_size
    global_ranks = list(opts.global_ranks_in_group) or list(range(size))
    timeout_s = _timeout_s(opts.timeout)
    group_id = str(opts.group_id)
    system = getattr(_THREAD, "system", None)
    if system is not None:  # ranks as threads of this process, sharing one system
        made = _THREAD.groups = getattr(_THREAD, "groups", {})
        n = made[tuple(global_ranks)] = made.get(tuple(global_ranks), 0) + 1  # (every rank makes its groups in order)
        group_id = f"{n}" if n > 1 else ""
        transport = ThreadTransport(system, f"{tuple(global_ranks)}#{n}", rank, global_ranks)
        shared = True
    else:
        system = _PROCESS["system"]
        if system is None:  # the first group this process makes is the world
            system = _PROCESS["system"] = _new_system(max(global_ranks) + 1, timeout_s)
            set_default_device(system[global_ranks[rank]])
        transport = StoreTransport(opts.store, rank, size, global_ranks, timeout_s)
        _PROCESS["transports"].append(transport)
        _hook_failures()
        shared = False
    me = global_ranks[rank]
    if me >= len(system):
        raise DvmError(f"rank {me} has no simulated device: the world has {len(system)}")
    comm = Communicator(transport, rank, global_ranks, system[me], system.topology, group_id, shared)
    return DvmlangProcessGroup(comm)


def _hook_failures() -> None:
    """A rank that dies of an exception tells its peers (who then raise ``PeerError`` instead of waiting), and one
    that ends tells them it is gone."""
    if _PROCESS["hooked"]:
        return
    _PROCESS["hooked"] = True
    previous = sys.excepthook

    def hook(kind, value, tb):
        rank = os.environ.get("RANK", "?")
        message = f"rank {rank} failed: {kind.__name__}: {str(value).splitlines()[0] if str(value) else ''}"
        for t in _PROCESS["transports"]:
            t.fail(message)
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(lambda: [t.finish() for t in _PROCESS["transports"]])


def device():
    """This rank's simulated NPU (a ``dvmlang.npu.SystemDevice``): its clock, memory, and record of events."""
    sysm = getattr(_THREAD, "system", None) or _PROCESS["system"]
    if sysm is None or not dist.is_initialized():
        raise DvmError("no dvmlang process group: call torch.distributed.init_process_group(backend='dvmlang') first")
    return sysm[dist.get_rank()]


def synchronize() -> float:
    """This rank's compute stream waits for everything its communication stream has issued (what
    ``torch.cuda.synchronize`` is to a GPU: DDP's all-reduces are futures torch waits for outside the simulated
    device); returns the rank's clock."""
    dev = device()
    dev.clock_us = max(dev.clock_us, dev.comm_free_us)
    return dev.clock_us


def system() -> System:
    """The system this rank's device belongs to (in a process of its own, the other devices are never used)."""
    sysm = getattr(_THREAD, "system", None) or _PROCESS["system"]
    if sysm is None:
        raise DvmError("no dvmlang process group: call torch.distributed.init_process_group(backend='dvmlang') first")
    return sysm


def place(module: torch.nn.Module, prefix: str = "") -> int:
    """Count ``module``'s parameters and buffers as resident in this rank's HBM (an ``OutOfMemory`` naming the
    largest if they do not fit); returns the bytes placed."""
    dev = device()
    total = 0
    for name, t in list(module.named_parameters(prefix)) + list(module.named_buffers(prefix)):
        n = int(t.numel()) * t.element_size()
        dev.place(n, name=name or "tensor")
        total += n
    return total


# ---- ranks as threads ----------------------------------------------------------------------------------------------

class _ThreadWorlds:
    """torch.distributed's ``_world`` as one world per thread (the ranks of ``run``)."""

    def __init__(self, default):
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_local", threading.local())

    def _get(self):
        w = getattr(self._local, "world", None)
        return self._default if w is None else w

    def __getattr__(self, name):
        return getattr(self._get(), name)

    def __setattr__(self, name, value):
        setattr(self._get(), name, value)


class _RankWorld(c10d._World):
    """One rank's torch.distributed state: ``_World`` keeps its groups in module globals; here they are the rank's."""

    def __init__(self):
        super().__init__()
        self._own = {"pg_map": {}, "pg_names": {}, "pg_group_ranks": {}, "pg_backend_config": {}, "group_count": 0,
                     "tags_to_pg": {}, "pg_to_tag": {}}


def _own_property(name):
    return property(lambda self: self._own[name], lambda self, value: self._own.__setitem__(name, value))


for _name in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "group_count", "tags_to_pg", "pg_to_tag"):
    if isinstance(getattr(c10d._World, _name, None), property):
        setattr(_RankWorld, _name, _own_property(_name))

_RUN_LOCK = threading.Lock()


@contextlib.contextmanager
def _thread_worlds():
    with _RUN_LOCK:
        old = c10d._world
        worlds = _ThreadWorlds(old)
        c10d._world = worlds
        hook = sys.excepthook  # (init_process_group wraps it on every rank's thread)
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        try:
            with torch.autograd.set_multithreading_enabled(False):
                yield worlds
        finally:
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
            c10d._world = old
            sys.excepthook = hook


def run(fn, world_size: int, *args, system: System | None = None, profile=None, topology=None,
        timeout_s: float = 60.0, hbm_bytes: int | None = None, **kwargs) -> list:
    """Run ``fn(rank, *args, **kwargs)`` as ``world_size`` ranks on threads of this process, each with a
    ``"dvmlang"`` process group initialised and its own simulated NPU (of ``system``, or a new ``System``);
    returns the results in rank order. One rank runs at a time; a rank waiting for a collective lets the others
    run. A rank that fails makes the others' pending collectives raise ``PeerError``; the first failure is
    raised."""
    sysm = system if system is not None else System(world_size, profile, topology, timeout_s=timeout_s,
                                                    hbm_bytes=hbm_bytes)
    if len(sysm) < world_size:
        raise DvmError(f"the system has {len(sysm)} devices, fewer than the {world_size} ranks")
    store = dist.HashStore()

    with _thread_worlds() as worlds:
        def body(rank):
            worlds._local.world = _RankWorld()
            _THREAD.system = sysm
            _THREAD.groups = {}
            try:
                dist.init_process_group(BACKEND, rank=rank, world_size=world_size, store=store)
                result = fn(rank, *args, **kwargs)
                dist.destroy_process_group()
                return result
            finally:
                _THREAD.system = None
                worlds._local.world = None

        return sysm.spmd(body, ranks=range(world_size))


def register() -> None:
    """Register the backend with torch (done when this module is imported)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


register()
