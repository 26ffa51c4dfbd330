"""A tiny Llama (2 layers) in plain torch, and the same model tensor-parallel the Megatron way: attention heads and
the MLP's hidden units split over the ranks (column-parallel q/k/v and gate/up projections, row-parallel output
and down projections whose partial sums are all-reduced), everything else replicated.

Nothing here knows about dvmlang: it is ordinary torch.distributed code. ``tp_llama.py`` and ``ddp_train.py`` run
it on simulated NPUs (as threads here, or under ``torchrun``)."""

import math

import torch
import torch.distributed as dist
from torch import nn

VOCAB, HIDDEN, HEADS, FFN, LAYERS = 128, 64, 8, 128, 2


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, pos):
    """Rotary position embedding of x [b, h, s, d]."""
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def attention(q, k, v):
    s = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v


class Block(nn.Module):
    def __init__(self, heads=HEADS, ffn=FFN):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        hd = HIDDEN // HEADS
        self.q, self.k, self.v = (nn.Linear(HIDDEN, heads * hd, bias=False) for _ in range(3))
        self.o = nn.Linear(heads * hd, HIDDEN, bias=False)
        self.gate, self.up = nn.Linear(HIDDEN, ffn, bias=False), nn.Linear(HIDDEN, ffn, bias=False)
        self.down = nn.Linear(ffn, HIDDEN, bias=False)

    def mix(self, y):  # the sum over the model's parts (one rank holds them all here)
        return y

    def enter(self, x):  # where a rank's part of the model starts
        return x

    def forward(self, x):
        b, s, _ = x.shape
        h = self.enter(self.norm1(x))
        pos = torch.arange(s)
        split = lambda t: t.view(b, s, self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        a = attention(rotary(q, pos), rotary(k, pos), v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.mix(self.o(a))
        h = self.enter(self.norm2(x))
        return x + self.mix(self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h)))


class TinyLlama(nn.Module):
    def __init__(self, block=Block):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(block() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def reference(seed=0):
    torch.manual_seed(seed)
    return TinyLlama().eval()


# ---- tensor parallel, the Megatron way ---------------------------------------------------------------------------

class _Reduce(torch.autograd.Function):
    """Sum the ranks' partial results (forward); the gradient passes through (backward)."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class _Copy(torch.autograd.Function):
    """The identity forward; the ranks' input gradients summed backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g


class TPBlock(Block):
    def __init__(self):
        world = dist.get_world_size()
        assert HEADS % world == 0 and FFN % world == 0, "heads and FFN units must divide over the ranks"
        super().__init__(heads=HEADS // world, ffn=FFN // world)

    def mix(self, y):
        return _Reduce.apply(y)

    def enter(self, x):
        return _Copy.apply(x)


def shard(full: TinyLlama) -> TinyLlama:
    """This rank's part of ``full``: column-parallel weights keep their rows, row-parallel ones their columns."""
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = TinyLlama(block=TPBlock).eval()
    sd = {}
    for name, w in full.state_dict().items():
        leaf = name.split(".")[-2] if name.endswith("weight") else ""
        if leaf in ("q", "k", "v", "gate", "up"):
            w = w.chunk(world, 0)[rank]
        elif leaf in ("o", "down"):
            w = w.chunk(world, 1)[rank]
        sd[name] = w.clone()
    tp.load_state_dict(sd)
    return tp
