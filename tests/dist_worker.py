"""One rank of tests/test_torch_distributed.py's process tests, started with the env:// rendezvous variables
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): ``tp`` runs the tensor-parallel tiny Llama of examples/multi_npu and
prints a JSON line; ``faults`` checks what a rank sees of a peer that does not come and then dies."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import dvmlang.torch  # noqa: F401 - registers the "dvmlang" backend
from dvmlang.errors import CollectiveTimeout, PeerError

sys.path.append(str(Path(__file__).resolve().parent.parent / "examples" / "multi_npu"))


def tp():
    import tp_llama
    import tiny_llama as tl
    dist.init_process_group(backend="dvmlang", init_method="env://")
    ids = tp_llama.inputs()
    out, clock, comm_us, comm_bytes = tp_llama.tp_forward(dist.get_rank(), ids)
    with torch.no_grad():
        err = (out - tl.reference()(ids)).abs().max().item()
    print(json.dumps({"rank": dist.get_rank(), "err": err, "clock_us": clock, "comm_us": comm_us,
                      "comm_bytes": comm_bytes}), flush=True)
    dist.destroy_process_group()


def faults():
    """Rank 1 is alive but busy past rank 0's timeout, then dies: rank 0's first collective times out naming it, its
    second gets rank 1's failure."""
    dist.init_process_group(backend="dvmlang", init_method="env://")
    if dist.get_rank() == 1:
        time.sleep(6)
        raise RuntimeError("rank 1 broke on purpose")
    out = {}
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
    except CollectiveTimeout as e:
        out["timeout"] = str(e)
        out["timeout_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
    except PeerError as e:
        out["peer"] = str(e)
        out["peer_s"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    {"tp": tp, "faults": faults}[sys.argv[1]]()
