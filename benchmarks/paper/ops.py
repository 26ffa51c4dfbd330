"""Operator and subgraph levels of the paper evaluation: each workload over the request stream (its token
dimension is the request's length), on the simulated device, for three systems, plus TorchInductor's compile
cost for the same function.

* ``dvmlang``: ``@dvmlang.graph`` fused and specialised per instance (a new length encodes; the first call
  builds).
* ``per-op eager``: ``dvmlang.graph(fn, fuse=False)``: one kernel per op, each its own launch (what PyTorch
  eager and MindSpore's kernel-by-kernel mode do).
* ``bucketed``: shape-generic offline kernels, compiled once per bucket (powers of two) for the bucket's largest
  length and run masked on inputs padded to it; their compile cost is offline (0 here), their padding cost is
  the device time of the padded rows.
* ``inductor-static`` / ``inductor-dynamic``: ``torch.compile`` compile time per new length on this host
  (``dynamic=False`` recompiles per shape; ``dynamic=True`` compiles a symbolic graph once or twice). They do not
  run on the simulated device (device time NaN).

Every dvmlang result is checked against numpy (the bucketed one on its unpadded rows).
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass

import numpy as np

import dvmlang
import dvmlang.ops as ops

from .common import InductorTimer, row

D = 1024  # hidden size of the operator workloads
H, HD = 8, 64  # attention heads and head dim
F = 1024  # MLP width (subgraphs)


@dataclass
class Workload:
    name: str
    level: str
    graph: object  # the dvmlang.ops function (its torch twin is in _torch_workloads)
    reference: object  # numpy reference, independent of dvmlang
    args: object  # (rng, length) -> numpy arrays; the first dim of the first array is the length
    tol: float = 2e-3
    padded: tuple = (0,)  # which arguments carry the length on their first dim (padded for buckets)
    seq_axis: int = 0  # the length's axis in those arguments and in the output
    static: dict | None = None  # dvmlang.graph(static=...): dims kept constant (the weights' sizes)


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _f16(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def _np_erf(x):
    """erf to about 1.5e-7 (Abramowitz and Stegun 7.1.26), in float64."""
    x = np.asarray(x, np.float64)
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _np_gelu(x):
    return 0.5 * x * (1.0 + _np_erf(x / np.sqrt(2.0)))


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_layernorm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b


def _np_rmsnorm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _np_rotary(x, cos, sin):
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def _np_attention(q, k, v):
    s = q.astype(np.float32) @ np.swapaxes(k.astype(np.float32), -1, -2) / np.sqrt(q.shape[-1])
    L = s.shape[-1]
    s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
    return _np_softmax(s) @ v.astype(np.float32)


def _np_mlp(x, w1, w3, w2):
    a, g = x.astype(np.float32) @ w3.astype(np.float32), x.astype(np.float32) @ w1.astype(np.float32)
    return (a * (g / (1 + np.exp(-g)))) @ w2.astype(np.float32)


# ---- the graph functions (dvmlang.ops) and their torch twins ------------------------------------------------

def g_chain(x, y):
    return ops.cast((x + y) * 0.5 - x * y, "float16")


def g_rotary(x, cos, sin):
    half = x.shape[-1] // 2
    rot = ops.cat([-ops.narrow(x, -1, half, half), ops.narrow(x, -1, 0, half)], axis=-1)
    return x * cos + rot * sin


def g_mm_bias_gelu(x, w, b):
    return ops.gelu(x @ w + b)


def g_attention(q, k, v):
    return ops.scaled_dot_product_attention(q, k, v, causal=True)


def g_mlp(x, w1, w3, w2):
    return ops.swiglu(x @ w3, x @ w1) @ w2


def g_decoder(x, wn1, wq, wk, wv, wo, wn2, w1, w3, w2):
    L = x.shape[0]
    h = ops.rms_norm(x, wn1)
    q, k, v = (ops.transpose(ops.reshape(h @ w, (L, H, HD)), 0, 1) for w in (wq, wk, wv))
    a = ops.reshape(ops.transpose(ops.scaled_dot_product_attention(q, k, v, causal=True), 0, 1), (L, H * HD))
    x = x + a @ wo
    return x + g_mlp(ops.rms_norm(x, wn2), w1, w3, w2)


def _t():
    import torch
    return torch


def t_decoder(x, wn1, wq, wk, wv, wo, wn2, w1, w3, w2):
    torch = _t()
    L = x.shape[0]

    def rms(v, w):
        return v * torch.rsqrt((v.float() * v.float()).mean(-1, keepdim=True) + 1e-6).to(v.dtype) * w
    h = rms(x, wn1)
    q, k, v = ((h @ w).view(L, H, HD).transpose(0, 1) for w in (wq, wk, wv))
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(L, H * HD)
    x = x + a @ wo
    g = rms(x, wn2)
    return x + (torch.nn.functional.silu(g @ w1) * (g @ w3)) @ w2


def _np_decoder(x, wn1, wq, wk, wv, wo, wn2, w1, w3, w2):
    f = [a.astype(np.float32) for a in (x, wn1, wq, wk, wv, wo, wn2, w1, w3, w2)]
    x, wn1, wq, wk, wv, wo, wn2, w1, w3, w2 = f
    L = x.shape[0]
    h = _np_rmsnorm(x, wn1)
    q, k, v = (np.swapaxes((h @ w).reshape(L, H, HD), 0, 1) for w in (wq, wk, wv))
    a = np.swapaxes(_np_attention(q, k, v), 0, 1).reshape(L, H * HD)
    x = x + a @ wo
    return x + _np_mlp(_np_rmsnorm(x, wn2), w1, w3, w2)


def _torch_workloads():
    """name -> torch function (imported lazily: the operator level runs without torch for dvmlang's systems)."""
    torch = _t()
    F_ = torch.nn.functional
    return {
        "softmax": lambda x: torch.softmax(x, -1),
        "layernorm": lambda x, w, b: F_.layer_norm(x, (x.shape[-1],), w, b),
        "rmsnorm": lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
        "gelu": lambda x: F_.gelu(x),
        "add/mul/cast chain": lambda x, y: ((x + y) * 0.5 - x * y).half(),
        "reduction (row sum)": lambda x: x.sum(-1),
        "matmul": lambda x, w: x @ w,
        "matmul + bias + gelu": lambda x, w, b: F_.gelu(x @ w + b),
        "transpose": lambda x: (x.t() * 2.0).contiguous(),
        "rotary embedding": lambda x, c, s: x * c + torch.cat([-x[..., x.shape[-1] // 2:],
                                                                x[..., :x.shape[-1] // 2]], -1) * s,
        "attention": lambda q, k, v: F_.scaled_dot_product_attention(q, k, v, is_causal=True),
        "swiglu mlp": lambda x, w1, w3, w2: (F_.silu(x @ w1) * (x @ w3)) @ w2,
        "decoder block": t_decoder,
    }


def _decoder_args(rng, L):
    d = H * HD
    w = lambda *s: _f16(rng, *s, scale=s[0] ** -0.5)  # noqa: E731
    return (_f16(rng, L, d), _f16(rng, d), w(d, d), w(d, d), w(d, d), w(d, d), _f16(rng, d), w(d, F), w(d, F),
            w(F, d))


WORKLOADS = [
    Workload("softmax", "operator", ops.softmax, _np_softmax, lambda r, L: (_f32(r, L, D),)),
    Workload("layernorm", "operator", ops.layer_norm, _np_layernorm,
             lambda r, L: (_f32(r, L, D), _f32(r, D), _f32(r, D))),
    Workload("rmsnorm", "operator", ops.rms_norm, _np_rmsnorm, lambda r, L: (_f32(r, L, D), _f32(r, D))),
    Workload("gelu", "operator", ops.gelu, _np_gelu, lambda r, L: (_f32(r, L, D),)),
    Workload("add/mul/cast chain", "operator", g_chain,
             lambda x, y: ((x + y) * 0.5 - x * y).astype(np.float16), lambda r, L: (_f32(r, L, D), _f32(r, L, D)),
             padded=(0, 1)),
    Workload("reduction (row sum)", "operator", lambda x: ops.sum(x, axis=-1), lambda x: x.sum(-1),
             lambda r, L: (_f32(r, L, D),), tol=1e-3),
    Workload("matmul", "operator", ops.matmul, lambda x, w: x.astype(np.float32) @ w.astype(np.float32),
             lambda r, L: (_f16(r, L, D), _f16(r, D, D, scale=D ** -0.5)), tol=2e-2),
    Workload("matmul + bias + gelu", "operator", g_mm_bias_gelu,
             lambda x, w, b: _np_gelu(x.astype(np.float32) @ w.astype(np.float32) + b.astype(np.float32)),
             lambda r, L: (_f16(r, L, D), _f16(r, D, D, scale=D ** -0.5), _f16(r, D)), tol=2e-2),
    Workload("transpose", "operator", lambda x: ops.transpose(x, 0, 1) * 2.0, lambda x: x.T * 2.0,
             lambda r, L: (_f32(r, L, D),)),
    Workload("rotary embedding", "operator", g_rotary, _np_rotary,
             lambda r, L: (_f32(r, L, H, 2 * HD), _f32(r, L, 1, 2 * HD), _f32(r, L, 1, 2 * HD)), padded=(0, 1, 2)),
    Workload("attention", "subgraph", g_attention, _np_attention,
             lambda r, L: tuple(_f16(r, H, L, HD) for _ in range(3)), tol=2e-2, padded=(0, 1, 2), seq_axis=1),
    Workload("swiglu mlp", "subgraph", g_mlp, _np_mlp,
             lambda r, L: (_f16(r, L, H * HD), _f16(r, H * HD, F, scale=(H * HD) ** -0.5),
                           _f16(r, H * HD, F, scale=(H * HD) ** -0.5), _f16(r, F, H * HD, scale=F ** -0.5)),
             tol=3e-2),
    Workload("decoder block", "subgraph", g_decoder, _np_decoder, _decoder_args, tol=5e-2,
             static={w: (0, 1) for w in ("wq", "wk", "wv", "wo")}),
]


def bucket(L: int) -> int:
    """The bucket of an offline, shape-generic build: the next power of two (at least 16)."""
    return max(16, 1 << (L - 1).bit_length())


def _unpad(w: Workload, out, L: int):
    """The rows of a bucketed result that belong to the request (the transpose has the length on axis 1)."""
    axis = 1 if w.name == "transpose" else w.seq_axis
    return np.take(np.asarray(out), np.arange(L), axis=axis)


def _check(w: Workload, out, args):
    ref = np.asarray(w.reference(*args), np.float32)
    got = np.asarray(out, np.float32)
    err = float(np.abs(got - ref).max()) / max(1.0, float(np.abs(ref).max()))
    if not err <= w.tol:
        raise AssertionError(f"{w.name} at length {args[0].shape[w.seq_axis]}: error {err:.3g} > {w.tol}")


def _pad(w: Workload, args, L: int, B: int):
    """The arguments padded to the bucket's length B (zeros in the extra rows), for the bucketed system."""
    out = []
    for i, a in enumerate(args):
        if i in w.padded:
            shape = list(a.shape)
            shape[w.seq_axis] = B
            p = np.zeros(shape, a.dtype)
            p[(slice(None),) * w.seq_axis + (slice(0, L),)] = a
            a = p
        out.append(a)
    return out


def _device_call(fn, args):
    """(output, launch record, host seconds excluding nothing): one call on the default device from a cold L2."""
    dvmlang.npu.default_device().l2.flush()
    t0 = time.perf_counter()
    out = fn(*args)
    return out, fn.last_launch, time.perf_counter() - t0


class _NoSimulation:
    """While entered, the device runs nothing: a launch only makes the checks it makes before it runs (the fit, the
    validation), so what a call costs on the host is measured without the simulator's work (nor the caches it
    fills with its tiles: a real host does not simulate). As ``benchmarks/compile_cost.py`` does."""

    def __enter__(self):
        from dvmlang.npu.device import Device
        self.saved = Device.run_stack

        def run_stack(dev, stages, name=None, trace=None):
            for st in stages:
                for it in st:
                    dev._ready(it[0])
            return None
        Device.run_stack = run_stack
        return self

    def __exit__(self, *exc):
        from dvmlang.npu.device import Device
        Device.run_stack = self.saved


def _host_pass(w: Workload, stream: list[int], pad: bool = False, fuse: bool = True, offline=None) -> list[float]:
    """Thread CPU seconds of each request's call of a fresh ``@graph`` of ``w`` (nothing built before in this
    process), simulation off: the first call builds, a new length encodes, a length seen before replays. What a
    call hands the background worker (the split plan built ahead, the instance functions written) is charged to
    that call: the worker's thread CPU for it, waited for after the call, outside its timing.
    ``pad``: inputs padded to their bucket. ``offline(L)``: a key whose first calls are made untimed before the
    timed one (what is built offline: a bucket's kernels, per-op kernels).

    The requests' inputs are made before their calls (in pieces of at most ``_INPUT_BYTES``), and the calls run
    one after another: a host driving an NPU does not generate megabytes of inputs on its own CPU between two
    calls, which here would evict the interpreter's working set from the caches before every call
    (``benchmarks/compile_cost.py`` prints both ways)."""
    from dvmlang.fuser import build, codegen
    from dvmlang.vm import validator
    build.settle()
    build.forget()
    codegen._BUILT.clear()
    validator._VERDICTS.clear()  # (the device pass launched the same code: its verdicts are not the host pass's)
    g = dvmlang.graph(w.graph, fuse=fuse, static=w.static)
    rng = np.random.default_rng(0)
    out, seen = [], set()
    gc.collect()
    gc.freeze()  # (what the process made before, Inductor's graphs among it, is not the call's to scan)
    with _NoSimulation():
        k = 0
        while k < len(stream):
            piece, nbytes = [], 0
            while k < len(stream) and (not piece or nbytes < _INPUT_BYTES):
                L = stream[k]
                args = w.args(rng, L)
                if pad:
                    args = _pad(w, args, L, bucket(L))
                piece.append((L, args))
                nbytes += sum(a.nbytes for a in args)
                k += 1
            for L, args in piece:
                if offline is not None and offline(L) not in seen:
                    seen.add(offline(L))
                    g(*args)
                    g(*args)  # (the second call writes the plan's instance function: offline too)
            for L, args in piece:
                w0 = build.worker_cpu()
                t0 = time.thread_time()
                g(*args)
                spent = time.thread_time() - t0
                build.settle()
                out.append(spent + build.worker_cpu() - w0)
            del piece
    gc.unfreeze()
    return out


_INPUT_BYTES = 256 << 20


def _aten_ops(fn, args) -> int:
    """How many aten operations torch eager dispatches for ``fn`` on arguments of these ranks and dtypes (counted
    with a ``TorchDispatchMode`` at length 1; the count does not depend on the length)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    tensors = [torch.from_numpy(a.astype(np.float32) if a.dtype == np.float16 else a) for a in args]
    with Count():
        fn(*tensors)
    return Count.n


def _op_dispatch_s(repeat: int = 200) -> float:
    """Torch eager's host time for one operation on this CPU with nothing to compute: an add of two
    one-element tensors, the median thread CPU time of ``repeat`` calls made one after another (as dvmlang's
    calls are timed, ``_host_pass``)."""
    import torch
    x, y = torch.ones(1), torch.ones(1)
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        torch.add(x, y)
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def run(quick: bool, stream: list[int], inductor_lengths: int, log=print, inductor_workloads=None) -> list[dict]:
    """One row per (workload, system, request); simulated figures are computed once per distinct length (they
    depend only on the shape) and repeated for its requests, host and compile times are those of the request's
    own call. ``inductor_workloads``: the workloads whose Inductor compile cost is measured (None: all).

    ``host_s`` is what the stream charges each call on the host, and ``compile_s`` dvmlang's at a new length:
    dvmlang's own host work for the call, measured in a second pass over the stream with the simulation off
    (``_host_pass``: a build at the first call, an encode at a new length, a replay otherwise); per-op eager's is
    torch eager's dispatch of the same function's aten ops, each at the host cost of one operation with nothing
    to compute, both measured in this run (``_aten_ops`` x ``_op_dispatch_s``; without torch, dvmlang's own
    per-op pass); the bucketed kernels' is a replay of their bucket's instance (its build is offline)."""
    rows = []
    torch_fns = None
    try:
        torch_fns = _torch_workloads()
    except ImportError:
        log("torch is not installed: the Inductor compile-cost rows are left out")
    op_s = _op_dispatch_s() if torch_fns is not None else None
    if op_s is not None:
        log(f"  torch eager: {op_s * 1e6:.2f} us of host time per operation (the per-op eager systems' dispatch)")
    for w in WORKLOADS:
        t_w = time.perf_counter()
        rng = np.random.default_rng(0)
        name = w.name.replace(" ", "_").replace("/", "_")
        fused = dvmlang.graph(w.graph, name=name, static=w.static)
        per_op = dvmlang.graph(w.graph, fuse=False, name=name + "_per_op", static=w.static)
        bucketed = dvmlang.graph(w.graph, name=name + "_bucketed", static=w.static)
        seen: dict = {}
        for L in stream:
            if L in seen:
                continue
            args = w.args(rng, L)
            out, rec, _ = _device_call(fused, args)
            _check(w, out, args)
            out_u, rec_u, _ = _device_call(per_op, args)
            _check(w, out_u, args)
            out_b, rec_b, _ = _device_call(bucketed, _pad(w, args, L, bucket(L)))
            _check(w, _unpad(w, out_b, L), args)
            seen[L] = (rec, rec_u, rec_b)
        host = _host_pass(w, stream)
        host_b = _host_pass(w, stream, pad=True, offline=bucket)
        if torch_fns is not None:
            host_u = [_aten_ops(torch_fns[w.name], w.args(np.random.default_rng(0), 1)) * op_s] * len(stream)
        else:  # (eager's kernels exist: the first call's builds are not charged)
            host_u = _host_pass(w, stream, fuse=False, offline=lambda L: 0)
        firsts = set()
        for i, L in enumerate(stream):
            new = L not in firsts
            firsts.add(L)
            rec_f, rec_u, rec_b = seen[L]
            ov = rec_f.profile.launch_overhead_us
            for system, r, c, h in (("dvmlang", rec_f, host[i] if new else 0.0, host[i]),
                                    ("per-op eager", rec_u, 0.0, host_u[i]),
                                    ("bucketed", rec_b, 0.0, host_b[i])):
                rows.append(row(w.level, w.name, system, i, L, compile_s=c, device_us=r.time_us, host_s=h,
                                launches=r.launches, gm_bytes=r.bytes_read + r.bytes_written,
                                launch_overhead_us=ov))
        if torch_fns is not None and inductor_lengths and (inductor_workloads is None or w.name in inductor_workloads):
            rows += _inductor_rows(w, torch_fns[w.name], stream, inductor_lengths, log)
        log(f"  {w.level:9} {w.name:22} {len(set(stream))} lengths in {time.perf_counter() - t_w:.1f}s")
    return rows


def _inductor_rows(w: Workload, fn, stream, n: int, log) -> list[dict]:
    """Inductor's compile time at the first ``n`` distinct lengths of the stream (in arrival order), static and
    dynamic; the other requests are not measured (their compile_s is NaN for static, whose every new length
    recompiles, and 0 for a repeated length)."""
    import torch
    rows = []
    firsts = []
    for L in stream:
        if L not in firsts:
            firsts.append(L)
    measure = set(firsts[:n])
    rng = np.random.default_rng(1)
    for system, dynamic in (("inductor-static", False), ("inductor-dynamic", True)):
        timer = InductorTimer(fn, dynamic)
        done = set()
        for i, L in enumerate(stream):
            if L in done:
                c = 0.0
            elif L in measure:
                args = [torch.from_numpy(a) for a in w.args(rng, L)]
                c = timer.compile_s(*args)
                done.add(L)
            else:
                c = float("nan")
            rows.append(row(w.level, w.name, system, i, L, compile_s=c))
    return rows
