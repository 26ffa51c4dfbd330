"""One rank's side of a ``"dvmlang"`` process group: what every collective does, whatever carries the bytes.

A collective is one exchange (``dist_transport``): each rank hands in a header (what it called: the collective,
its sequence number, dtypes, shapes, reduction, root; and when its device is ready) and the arrays the others
need. Every rank then checks that the group called the same thing (a ``CollectiveMismatch`` naming each rank's
call if not), computes its own result from the arrays (the same reduction order on every rank: the same bits),
and times the collective from the headers (the algorithm HCCL runs, started when the last member is ready: the
clocks meet). The rank's device runs it on its communication stream; ``Work.wait`` makes the compute stream
wait, and a launch that reads an output of a collective still running waits for it too.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist

from ..errors import CollectiveMismatch
from ..npu import collectives as coll
from ..npu.system import note_comm

_RED = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.BAND: "band", dist.ReduceOp.BOR: "bor",
        dist.ReduceOp.BXOR: "bxor", dist.ReduceOp.AVG: "avg"}


def reduce_name(op) -> str:
    key = getattr(op, "op", op)
    if key not in _RED:
        raise CollectiveMismatch(f"reduction {op} is not supported by the dvmlang backend; use one of "
                                 f"{', '.join(_RED.values())}")
    return _RED[key]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a numpy array (bfloat16 through ml_dtypes), without copying where it can."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.contiguous().numpy()


def write(t: torch.Tensor, a: np.ndarray) -> None:
    """Copy ``a`` into tensor ``t`` (same number of elements)."""
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        src = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    else:
        src = torch.from_numpy(np.ascontiguousarray(a))
    with torch.no_grad():
        t.copy_(src.reshape(t.shape))


def _sig(arrays) -> list:
    return [[a.dtype.name, list(a.shape)] for a in arrays]


def describe(h: dict) -> str:
    args = ", ".join(f"{d}{s}" for d, s in h["sig"][:3]) + (", ..." if len(h["sig"]) > 3 else "")
    extra = "".join(f", {k}={h[k]}" for k in ("reduce", "root", "peer") if h.get(k) is not None)
    return f"{h['op']}({args}{extra})"


class DvmlangWork(dist.Work):
    """A collective's handle: already computed on the host; ``wait`` makes the rank's compute stream wait for its
    end on the simulated device."""

    def __init__(self, comm, record, outputs):
        super().__init__()
        self._comm = comm
        self._record = record
        self._outputs = outputs

    def wait(self, timeout=None) -> bool:
        if self._record is not None:
            self._comm.device.wait(self._record)
            self._comm.release(self._record)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self):
        return self._outputs

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


class Communicator:
    """A rank in a group: its transport, its device, and the group's sequence of collectives."""

    def __init__(self, transport, group_rank: int, global_ranks, device, topology, name: str, shared: bool):
        self.transport = transport
        self.rank = group_rank
        self.global_ranks = list(global_ranks)
        self.size = len(self.global_ranks)
        self.device = device
        self.topology = topology
        self.name = name
        self.shared = shared  # ranks are threads sharing one system: group rank 0 files the group's records
        self.gamma_us = coll.gamma_us_per_byte(device.profile)
        self.seq = 0

    @property
    def label(self) -> str:
        return f"{self.global_ranks}" + (f" ({self.name})" if self.name else "")

    @property
    def me(self) -> int:
        return self.global_ranks[self.rank]

    def exchange(self, op: str, arrays: list, **fields) -> list:
        """Hand in ``arrays`` with a header of ``op`` and ``fields``; every member's ``(header, arrays)``, after
        checking that every member called the same collective."""
        self.seq += 1
        header = {"op": op, "seq": self.seq, "rank": self.me, "ready_us": self.device.ready_us(),
                  "sig": _sig(arrays), **fields}
        what = f"collective #{self.seq} ({describe(header)}) of group {self.label}"
        items = self.transport.exchange(self.seq, (header, arrays), what)
        self._check(items, op)
        return items

    def _check(self, items: list, op: str) -> None:
        keys = ("op", "reduce", "root")
        shape_free = op in ("all_to_all", "barrier", "broadcast", "gather", "scatter")
        ref = items[0][0]
        for h, _ in items[1:]:
            same = all(h.get(k) == ref.get(k) for k in keys)
            if same and not shape_free:
                same = h["sig"] == ref["sig"]
            elif same:
                same = [d for d, _ in h["sig"]] == [d for d, _ in ref["sig"]] or not h["sig"] or not ref["sig"]
            if not same:
                calls = "; ".join(f"rank {h2['rank']} called {describe(h2)}" for h2, _ in items)
                raise CollectiveMismatch(f"collective #{ref['seq']} of group {self.label}: the "
                                         f"ranks called different collectives: {calls}\nhint: every rank of a group "
                                         "must call the same collectives, with the same shapes and dtypes, in the "
                                         "same order")

    def time(self, items: list, op: str, nbytes: int = 0, **kw):
        """The record of ``op`` among the group, started when its last member was ready; filed with the device
        (its stream runs it; its clock waits in ``Work.wait``)."""
        start = max(h["ready_us"] for h, _ in items)
        plan = coll.plan(op, self.global_ranks, self.topology, nbytes, **kw)
        rec = coll.CommRecord.timed(plan, self.topology, start, self.gamma_us, seq=self.seq, tag=self.name)
        self.file(rec)
        return rec

    def file(self, rec) -> None:
        self.device.joined(rec, wait=False)
        if not self.shared or self.rank == 0:
            self.device.system.records.append(rec)
            note_comm(rec)

    def work(self, rec, outputs: list) -> DvmlangWork:
        """The handle of ``rec``, whose outputs a launch must wait for until the work is waited on."""
        self.device.pending_outputs(rec, [to_numpy(t) for t in outputs if isinstance(t, torch.Tensor)])
        return DvmlangWork(self, rec, outputs)

    def release(self, rec) -> None:
        self.device.pending_done(rec)
