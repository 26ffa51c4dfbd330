"""One rank of tests/test_torch_distributed.py's process tests, started with the env:// rendezvous variables
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): ``tp_then_faults`` runs the tensor-parallel tiny Llama of
examples/multi_npu, then checks what a rank sees of a peer that does not come and then dies."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import dvmlang.torch  # registers the "dvmlang" backend
from dvmlang.errors import CollectiveTimeout, PeerError

sys.path.append(str(Path(__file__).resolve().parent.parent / "examples" / "multi_npu"))


def tp_then_faults():
    """The tensor-parallel forward (a JSON line per rank), then, on a new group with a 3 s timeout, rank 1 stays
    busy until rank 0's collective has timed out, and dies: rank 0's first collective times out naming it, its
    second gets rank 1's failure (another JSON line)."""
    import tiny_llama as tl
    import tp_llama
    dist.init_process_group(backend="dvmlang", init_method="env://")
    rank = dist.get_rank()
    ids = tp_llama.inputs()
    out, clock, comm_us, comm_bytes = tp_llama.tp_forward(rank, ids)
    with torch.no_grad():
        err = (out - tl.reference()(ids)).abs().max().item()
    print(json.dumps({"rank": rank, "err": err, "clock_us": clock, "comm_us": comm_us, "comm_bytes": comm_bytes}),
          flush=True)
    dvmlang.torch.distributed.configure(timeout_s=3)
    pair = dist.new_group([0, 1])
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:  # busy (waiting on the store, not in a collective) until rank 0 has timed out, then it dies
        store.wait(["rank0_timed_out"])
        raise RuntimeError("rank 1 broke on purpose")
    got = {}
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4), group=pair)
    except CollectiveTimeout as e:
        got["timeout"], got["timeout_s"] = str(e), time.monotonic() - t0
    store.set("rank0_timed_out", "1")
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4), group=pair)
    except PeerError as e:
        got["peer"], got["peer_s"] = str(e), time.monotonic() - t0
    print(json.dumps(got), flush=True)
    os._exit(0)


if __name__ == "__main__":
    {"tp_then_faults": tp_then_faults}[sys.argv[1]]()
