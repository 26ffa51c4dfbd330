"""Fused activations: GELU (the exact erf form and the tanh approximation) and SiLU, plus SwiGLU.

Each activation is a small ``@dvmlang.kernel`` helper that the launched kernels call; the calls are
inlined, so ``act(x + bias)`` is one pass over memory. The activation is picked by a ``dl.constexpr``
string, which folds the ``if``/``elif`` chain at compile time: each choice is its own specialisation.
"""

import math

import numpy as np

import dvmlang
import dvmlang.language as dl

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)


@dvmlang.kernel
def gelu(x):
    return 0.5 * x * (1.0 + dl.erf(x * INV_SQRT_2))


@dvmlang.kernel
def gelu_tanh(x):
    return 0.5 * x * (1.0 + dl.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


@dvmlang.kernel
def silu(x):
    return x * dl.sigmoid(x)


@dvmlang.kernel
def bias_act_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_cols, ACT: dl.constexpr, BLOCK_R: dl.constexpr,
                    BLOCK_C: dl.constexpr):
    rows = dl.program_id(0) * BLOCK_R + dl.arange(0, BLOCK_R)
    cols = dl.program_id(1) * BLOCK_C + dl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * n_cols + cols[None, :]
    x = dl.load(x_ptr + offs, mask=mask, other=0.0).to(dl.float32)
    x += dl.load(bias_ptr + cols, mask=cols < n_cols, other=0.0)[None, :]
    if ACT == "gelu":
        y = gelu(x)
    elif ACT == "gelu_tanh":
        y = gelu_tanh(x)
    elif ACT == "silu":
        y = silu(x)
    else:
        dl.static_assert(False, "ACT must be 'gelu', 'gelu_tanh' or 'silu'")
    dl.store(y_ptr + offs, y, mask=mask)


@dvmlang.kernel
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    g = dl.load(gate_ptr + offs, mask=mask, other=0.0).to(dl.float32)
    u = dl.load(up_ptr + offs, mask=mask, other=0.0).to(dl.float32)
    dl.store(out_ptr + offs, silu(g) * u, mask=mask)


def bias_act(x, bias, act, block_r=8, block_c=256):
    n_rows, n_cols = x.shape
    y = np.empty_like(x)
    grid = (dl.cdiv(n_rows, block_r), dl.cdiv(n_cols, block_c))
    launch = bias_act_kernel[grid](x, bias, y, n_rows, n_cols, ACT=act, BLOCK_R=block_r, BLOCK_C=block_c)
    return y, launch


def swiglu(gate, up, block=1024):
    out = np.empty_like(gate)
    launch = swiglu_kernel[(dl.cdiv(gate.size, block),)](gate, up, out, gate.size, BLOCK=block)
    return out, launch


_erf = np.vectorize(math.erf)

REFERENCE = {
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def run(n_rows: int = 61, n_cols: int = 700):
    rng = np.random.default_rng(6)
    x = rng.uniform(-5, 5, (n_rows, n_cols)).astype(np.float32)
    bias = rng.uniform(-1, 1, n_cols).astype(np.float32)
    launches = []
    for act, ref in REFERENCE.items():
        y, launch = bias_act(x, bias, act)
        np.testing.assert_allclose(y, ref((x + bias).astype(np.float64)), rtol=1e-5, atol=1e-5, err_msg=act)
        launches.append(launch)
    # the two GELU forms really differ (by up to ~1e-3): the check above tells them apart
    assert np.abs(REFERENCE["gelu"](x) - REFERENCE["gelu_tanh"](x)).max() > 1e-4
    gate = rng.standard_normal(5000).astype(np.float16)
    up = rng.standard_normal(5000).astype(np.float16)
    out, launch = swiglu(gate, up)
    g, u = gate.astype(np.float64), up.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), REFERENCE["silu"](g) * u, rtol=2e-3, atol=2e-3)
    launches.append(launch)
    return launches


if __name__ == "__main__":
    launches = run()
    print(f"activations: correct, {sum(x.cycles for x in launches)} simulated cycles in {len(launches)} launches")
