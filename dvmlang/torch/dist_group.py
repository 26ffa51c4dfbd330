"""``DvmlangProcessGroup``: a ``torch.distributed.ProcessGroup`` written in Python whose collectives run between
simulated NPUs (``dist_comm``). torch calls these methods for ``dist.all_reduce`` and friends, DDP's reducer and
the functional collectives alike; each returns a finished ``Work`` whose ``wait`` advances the simulated clock."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ..errors import CollectiveMismatch, DvmError
from ..npu import collectives as coll
from ..npu.system import note_comm
from .dist_comm import Communicator, reduce_name, to_numpy, write


def _flat(t: torch.Tensor) -> np.ndarray:
    return to_numpy(t).reshape(-1) if t.dim() else to_numpy(t).reshape(1)


class DvmlangProcessGroup(dist.ProcessGroup):
    """The ``"dvmlang"`` backend's group: one rank of it, on its own simulated NPU."""

    def __init__(self, comm: Communicator):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._name = ""
        self._desc = ""

    # torch keeps a group's name on its C++ backends; a group written in Python keeps its own
    def _set_group_name(self, name: str) -> None:
        self._name = name

    @property
    def group_name(self) -> str:
        return self._name

    def _set_group_desc(self, desc: str) -> None:
        self._desc = desc

    @property
    def group_desc(self) -> str:
        return self._desc

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "dvmlang"

    @property
    def device(self):
        return self.comm.device

    def __repr__(self) -> str:
        return f"<DvmlangProcessGroup rank {self.comm.rank} of {self.comm.global_ranks}>"

    # ---- all-reduce -----------------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        red = reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        c = self.comm
        items = c.exchange("all_reduce", [to_numpy(t) for t in tensors], reduce=red)
        for k, t in enumerate(tensors):
            write(t, coll.reduce([arrs[k] for _, arrs in items], red))
        rec = c.time(items, "all_reduce", sum(a.nbytes for a in items[c.rank][1]))
        return c.work(rec, list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    # ---- all-gather -----------------------------------------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        c = self.comm
        items = c.exchange("all_gather", [to_numpy(t) for t in input_tensors])
        for k, outs in enumerate(output_tensors):
            if len(outs) != c.size:
                raise DvmError(f"all_gather: {len(outs)} output tensors for a group of {c.size}")
            for out, (_, arrs) in zip(outs, items):
                write(out, arrs[k])
        total = sum(int(o.numel()) * o.element_size() for outs in output_tensors for o in outs)
        return c.work(c.time(items, "all_gather", total), [o for outs in output_tensors for o in outs])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        c = self.comm
        items = c.exchange("all_gather", [_flat(input)])
        whole = np.concatenate([arrs[0] for _, arrs in items])
        if whole.size != output.numel():
            raise DvmError(f"all_gather_into_tensor: the output holds {output.numel()} elements, the ranks' inputs "
                           f"{whole.size}")
        write(output, whole)
        return c.work(c.time(items, "all_gather", whole.nbytes), [output])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        work = None
        for o, i in zip(outputs, inputs):
            work = self.all_gather_single(o, i, opts)
        return work

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    # ---- reduce-scatter -------------------------------------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        red = reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        c = self.comm
        arrays = [to_numpy(t) for lst in input_lists for t in lst]
        items = c.exchange("reduce_scatter", arrays, reduce=red)
        for k, out in enumerate(output_tensors):
            write(out, coll.reduce([arrs[k * c.size + c.rank] for _, arrs in items], red))
        return c.work(c.time(items, "reduce_scatter", sum(a.nbytes for a in arrays)), list(output_tensors))

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        red = reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        c = self.comm
        flat = _flat(input)
        if flat.size % c.size or flat.size // c.size != output.numel():
            raise DvmError(f"reduce_scatter_tensor: the input's {flat.size} elements must be {c.size} times the "
                           f"output's {output.numel()}")
        items = c.exchange("reduce_scatter", [flat], reduce=red)
        n = output.numel()
        write(output, coll.reduce([arrs[0][c.rank * n:(c.rank + 1) * n] for _, arrs in items], red))
        return c.work(c.time(items, "reduce_scatter", flat.nbytes), [output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        work = None
        for o, i in zip(outputs, inputs):
            work = self.reduce_scatter_single(o, i, opts)
        return work

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    # ---- broadcast, reduce, gather, scatter ---------------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        c = self.comm
        root = opts.rootRank if opts is not None else 0
        mine = [to_numpy(t) for t in tensors] if c.rank == root else []
        items = c.exchange("broadcast", mine, root=root, shapes=[list(t.shape) for t in tensors])
        src = items[root][1]
        for t, a in zip(tensors, src):
            write(t, a)
        rec = c.time(items, "broadcast", sum(a.nbytes for a in src), root=c.global_ranks[root])
        return c.work(rec, list(tensors))

    def reduce(self, tensors, opts=None):
        red = reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        c = self.comm
        root = opts.rootRank if opts is not None else 0
        items = c.exchange("reduce", [to_numpy(t) for t in tensors], reduce=red, root=root)
        if c.rank == root:
            for k, t in enumerate(tensors):
                write(t, coll.reduce([arrs[k] for _, arrs in items], red))
        rec = c.time(items, "all_reduce", sum(int(t.numel()) * t.element_size() for t in tensors))
        return c.work(rec, list(tensors))

    def gather(self, output_lists, inputs, opts=None):
        c = self.comm
        root = opts.rootRank if opts is not None else 0
        items = c.exchange("gather", [to_numpy(t) for t in inputs], root=root)
        if c.rank == root:
            for k, outs in enumerate(output_lists):
                for out, (_, arrs) in zip(outs, items):
                    write(out, arrs[k])
        rec = c.time(items, "all_gather", c.size * sum(int(t.numel()) * t.element_size() for t in inputs))
        return c.work(rec, [o for outs in output_lists for o in outs])

    def scatter(self, outputs, input_lists, opts=None):
        c = self.comm
        root = opts.rootRank if opts is not None else 0
        mine = [to_numpy(t) for lst in input_lists for t in lst] if c.rank == root else []
        items = c.exchange("scatter", mine, root=root)
        src = items[root][1]
        for k, out in enumerate(outputs):
            write(out, src[k * c.size + c.rank])
        rec = c.time(items, "broadcast", sum(a.nbytes for a in src), root=c.global_ranks[root])
        return c.work(rec, list(outputs))

    # ---- all-to-all -----------------------------------------------------------------------------------------------
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        c = self.comm
        rows = input.shape[0] if input.dim() else 1
        ins = list(input_split_sizes) or [rows // c.size] * c.size
        if len(ins) != c.size or sum(ins) != rows:
            raise DvmError(f"all_to_all_single: input_split_sizes {ins} must be {c.size} counts summing to the "
                           f"input's {rows} rows")
        items = c.exchange("all_to_all", [to_numpy(input)], splits=ins)
        outs = list(output_split_sizes) or [items[i][0]["splits"][c.rank] for i in range(c.size)]
        got = [items[i][0]["splits"][c.rank] for i in range(c.size)]
        if outs != got:
            calls = "; ".join(f"rank {h['rank']} sends {h['splits']}" for h, _ in items)
            raise CollectiveMismatch(f"all_to_all_single #{c.seq}: rank {c.me} expects {outs} rows from the ranks but "
                                     f"they send {got}: {calls}")
        parts = []
        for i, (h, arrs) in enumerate(items):
            off = sum(h["splits"][:c.rank])
            parts.append(arrs[0][off:off + h["splits"][c.rank]])
        whole = np.concatenate(parts) if parts else np.zeros(0)
        write(output, whole)
        row_bytes = [arrs[0].nbytes // max(1, arrs[0].shape[0] if arrs[0].ndim else 1) for _, arrs in items]
        matrix = [[h["splits"][j] * row_bytes[i] for j in range(c.size)] for i, (h, _) in enumerate(items)]
        return c.work(c.time(items, "all_to_all", matrix=matrix), [output])

    def alltoall(self, outputs, inputs, opts=None):
        c = self.comm
        items = c.exchange("all_to_all", [to_numpy(t) for t in inputs])
        for i, out in enumerate(outputs):
            write(out, items[i][1][c.rank])
        matrix = [[int(a.nbytes) for a in arrs] for _, arrs in items]
        return c.work(c.time(items, "all_to_all", matrix=matrix), list(outputs))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    # ---- point to point and barrier -------------------------------------------------------------------------------
    def send(self, tensors, dst: int, tag: int = 0):
        c = self.comm
        arrays = [to_numpy(t) for t in tensors]
        c.transport.put(dst, tag, ({"ready_us": c.device.ready_us(), "sig": [[a.dtype.name, list(a.shape)]
                                                                            for a in arrays]}, arrays))
        head, _ = c.transport.get(dst, ("ack", tag), f"send to rank {c.global_ranks[dst]} (tag {tag})")
        return c.work(self._p2p(c.me, c.global_ranks[dst], arrays, head["ready_us"]), [])

    def recv(self, tensors, src: int, tag: int = 0):
        c = self.comm
        head, arrays = c.transport.get(src, tag, f"recv from rank {c.global_ranks[src]} (tag {tag})")
        mine = [[str(to_numpy(t).dtype), list(t.shape)] for t in tensors]
        if [[d, s] for d, s in head["sig"]] != mine and \
                [int(np.prod(s)) for _, s in head["sig"]] != [t.numel() for t in tensors]:
            raise CollectiveMismatch(f"rank {c.me} receives {mine} from rank {c.global_ranks[src]}, which sent "
                                     f"{head['sig']}")
        for t, a in zip(tensors, arrays):
            write(t, a)
        ready = c.device.ready_us()
        c.transport.put(src, ("ack", tag), ({"ready_us": ready}, []))
        return c.work(self._p2p(c.global_ranks[src], c.me, arrays, head["ready_us"]), list(tensors))

    def recv_anysource(self, tensors, tag: int = 0):
        raise DvmError("the dvmlang backend does not support recv from any source; name the sender (src=...)")

    def _p2p(self, src: int, dst: int, arrays, other_ready: float):
        c = self.comm
        start = max(c.device.ready_us(), other_ready)
        plan = coll.plan("send", [src, dst], c.topology, sum(a.nbytes for a in arrays), src=src, dst=dst)
        rec = coll.CommRecord.timed(plan, c.topology, start, c.gamma_us, seq=c.seq, tag=c.name)
        c.device.joined(rec, wait=False)
        if not c.shared or c.me == src:  # (ranks as threads share one system: the sender files it)
            c.device.system.records.append(rec)
            note_comm(rec)
        return rec

    def barrier(self, opts=None):
        c = self.comm
        items = c.exchange("barrier", [])
        return c.work(c.time(items, "barrier"), [])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)
