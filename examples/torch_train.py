"""Training under `torch.compile(model, backend="dvmlang")`: an MLP block (Linear, SiLU, LayerNorm, GELU) trained
for a few AdamW steps. AOTAutograd's forward and backward graphs both run on the simulated NPU (each one fused
region, one launch), and every loss and gradient equals eager PyTorch's (fp32, rtol 1e-3)."""

import os
import sys

# run as a script, this folder is sys.path[0], and its triton/ (Triton's tutorials) would shadow the `triton`
# package torch probes for at import
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import torch  # noqa: E402

import dvmlang.torch as dt  # noqa: E402


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.SiLU(), torch.nn.LayerNorm(64),
                               torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


def run(steps: int = 4, verbose: bool = False):
    model, ref = make(), make()
    compiled = torch.compile(model, backend="dvmlang")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    dt.reset_stats()
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss_ref = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        loss_ref.backward()
        torch.testing.assert_close(loss, loss_ref, rtol=1e-3, atol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-6)
        opt.step(), opt_ref.step()
        opt.zero_grad(), opt_ref.zero_grad()
        losses.append((loss.item(), loss_ref.item()))
    s = dt.stats()
    assert s["fallback_ops"] == {}, s["fallback_ops"]
    assert losses[-1][0] < losses[0][0], "the loss goes down"
    if verbose:
        for i, (a, b) in enumerate(losses):
            print(f"step {i}: loss {a:.6f} (eager {b:.6f})")
        print(f"{s['launches']} launches ({s['launches'] // steps} per step: forward + backward), "
              f"{s['simulated_us']:.1f} us simulated, {s['builds']} builds, {s['encodes']} encodes")
    return dt.launches()


if __name__ == "__main__":
    run(verbose=True)
