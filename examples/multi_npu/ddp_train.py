"""Data parallelism on simulated NPUs: one training step of the tiny Llama under ``DistributedDataParallel`` over 2
ranks, each compiling the model with ``torch.compile(backend="dvmlang")`` on a simulated NPU of its own and taking
half of the batch. DDP all-reduces the gradients (issued from its backward hooks without waiting: they run on the
simulated NPU's communication stream); every rank's gradients must equal the single-device model's on the whole
batch, and so must the weights after the optimizer step.

    python examples/multi_npu/ddp_train.py                       # ranks as threads
    torchrun --nproc-per-node 2 examples/multi_npu/ddp_train.py  # ranks as processes
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0]) == HERE:
    sys.path.pop(0)
sys.path.append(HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import dvmlang.torch as dvt  # noqa: E402
import tiny_llama as tl  # noqa: E402

RANKS = 2
BATCH, SEQ = 4, 12


def batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, tl.VOCAB, (BATCH, SEQ + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def loss_of(model, ids, targets):
    logits = model(ids)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, tl.VOCAB), targets.reshape(-1))


def reference():
    """The single-device step on the whole batch: (gradients, weights after the step)."""
    model = tl.reference().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, targets = batch()
    loss_of(model, ids, targets).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    return grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def ddp_step(rank: int, world: int):
    """This rank's step on its share of the batch: (gradients, weights after the step, simulated us, comm us)."""
    model = tl.reference().train()
    ddp = DDP(model)
    compiled = torch.compile(ddp, backend="dvmlang")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ids, targets = batch()
    share = BATCH // world
    mine = slice(rank * share, (rank + 1) * share)
    dvt.reset_stats()
    loss_of(compiled, ids[mine], targets[mine]).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    clock = dvt.distributed.synchronize()  # (the step's time includes its all-reduces)
    return grads, {n: p.detach().clone() for n, p in model.named_parameters()}, clock, dvt.stats()["comm_us"]


def check(grads, weights, want_grads, want_weights, who):
    for n in want_grads:
        torch.testing.assert_close(grads[n], want_grads[n], rtol=1e-4, atol=1e-5, msg=lambda m: f"{who} grad {n}: {m}")
        torch.testing.assert_close(weights[n], want_weights[n], rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{who} weight {n}: {m}")


def run(verbose=False):
    torch._dynamo.reset()  # (what dynamo compiled earlier in this process would make the ranks compile again)
    want_grads, want_weights = reference()
    results = dvt.distributed.run(ddp_step, RANKS, RANKS)
    for rank, (grads, weights, clock, comm) in enumerate(results):
        check(grads, weights, want_grads, want_weights, f"rank {rank}")
    if verbose:
        for rank, (_, _, clock, comm) in enumerate(results):
            print(f"rank {rank}: gradients and weights equal the single-device step; simulated {clock:.1f} us, "
                  f"{comm:.1f} us of it in all-reduces")
    return [(clock, comm) for _, _, clock, comm in results]


def main():
    dist.init_process_group(backend="dvmlang")
    rank, world = dist.get_rank(), dist.get_world_size()
    grads, weights, clock, comm = ddp_step(rank, world)
    check(grads, weights, *reference(), f"rank {rank}")
    print(f"rank {rank}/{world}: DDP step equals the single-device step; simulated {clock:.1f} us, {comm:.1f} us in "
          "all-reduces", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        main()
    else:
        run(verbose=True)
