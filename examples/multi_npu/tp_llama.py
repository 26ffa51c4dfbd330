"""Tensor parallelism on simulated NPUs: the tiny Llama of ``tiny_llama.py`` split over 2, 4 and 8 ranks the
Megatron way, each rank compiling its part with ``torch.compile(backend="dvmlang")`` on a simulated 910B of its own,
the partial sums all-reduced between the ranks with HCCL's algorithm and timing. Every rank's logits must equal
the single-device model's.

    python examples/multi_npu/tp_llama.py                      # ranks as threads of one process
    torchrun --nproc-per-node 8 examples/multi_npu/tp_llama.py # ranks as processes (or machines)

The model code is plain torch.distributed; the one dvmlang line is ``import dvmlang.torch`` (which registers the
``"dvmlang"`` backend next to the ``torch.compile`` one)."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0]) == HERE:  # (run as a script: keep examples/ off the import path)
    sys.path.pop(0)
sys.path.append(HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import dvmlang.torch as dvt  # noqa: E402 - registers the "dvmlang" process-group backend
import tiny_llama as tl  # noqa: E402

RANKS = (2, 4, 8)


def inputs():
    return torch.randint(0, tl.VOCAB, (1, 16), generator=torch.Generator().manual_seed(1))


def tp_forward(rank: int, ids):
    """One rank's forward: its shard of the model, compiled for the dvmlang backend."""
    model = torch.compile(tl.shard(tl.reference()), backend="dvmlang")
    dvt.reset_stats()
    with torch.no_grad():
        out = model(ids)
    dev = dvt.distributed.device()
    return out, dev.clock_us, dvt.stats()["comm_us"], dvt.stats()["comm_bytes"]


def run(ranks=RANKS, verbose=False):
    torch._dynamo.reset()  # (what dynamo compiled earlier in this process would make the ranks compile again)
    ids = inputs()
    with torch.no_grad():
        want = tl.reference()(ids)
    rows = []
    for n in ranks:
        t0 = time.perf_counter()
        results = dvt.distributed.run(tp_forward, n, ids)
        wall = time.perf_counter() - t0
        for rank, (out, clock, comm_us, comm_bytes) in enumerate(results):
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{n} ranks, rank {rank}: {m}")
        rows.append((n, results[0][1], results[0][2], results[0][3], wall))
    if verbose:
        print(f"{'ranks':>5} {'simulated':>11} {'in comm':>9} {'sent':>9} {'host':>8}")
        for n, clock, comm, nbytes, wall in rows:
            print(f"{n:>5} {clock:>8.1f} us {comm:>6.1f} us {nbytes / 1024:>6.1f} KB {wall:>6.1f} s")
    return rows


def main():
    """Under torchrun: this process is one rank."""
    dist.init_process_group(backend="dvmlang")
    rank, n = dist.get_rank(), dist.get_world_size()
    ids = inputs()
    t0 = time.perf_counter()
    out, clock, comm_us, comm_bytes = tp_forward(rank, ids)
    with torch.no_grad():
        torch.testing.assert_close(out, tl.reference()(ids), rtol=1e-4, atol=1e-5)
    print(f"rank {rank}/{n}: logits match the single-device model; simulated {clock:.1f} us, {comm_us:.1f} us in "
          f"all-reduces, {comm_bytes / 1024:.1f} KB sent; host {time.perf_counter() - t0:.1f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        main()
    else:
        run(verbose=True)
