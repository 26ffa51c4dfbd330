"""A transformer-style block as a tensor program: @dvmlang.graph fuses it, fuse=False runs it op by op.

The graph is captured once with symbolic sizes; every call with a new number of rows only encodes.
"""

import math

import numpy as np

import dvmlang
import dvmlang.ops as ops


def block(x, w, b):
    h = ops.layer_norm(x, w, b, eps=1e-5)
    return ops.gelu(h) * 2.0


fused = dvmlang.graph(block)
unfused = dvmlang.graph(block, fuse=False)


def reference(x, w, b):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * w + b
    erf = np.vectorize(math.erf)
    return (0.5 * h * (1.0 + erf(h / math.sqrt(2.0))) * 2.0).astype(np.float32)


def run():
    rng = np.random.default_rng(7)
    w = rng.standard_normal(768, dtype=np.float32)
    b = rng.standard_normal(768, dtype=np.float32)
    launches = []
    for rows in (5, 37, 256):  # a size of 1 is part of the signature (it broadcasts), so it would capture again
        x = rng.standard_normal((rows, 768), dtype=np.float32)
        y = fused(x, w, b)
        np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-4, atol=1e-4)
        launches.append(fused.last_launch)
    y2 = unfused(x, w, b)
    np.testing.assert_allclose(y2, y, rtol=1e-5, atol=1e-6)
    assert fused.stats.captures == 1, "new row counts must not recapture"
    assert fused.last_launch.cycles * 2 <= unfused.last_launch.cycles, "fusion should at least halve the cycles"
    return launches[-1]


if __name__ == "__main__":
    launch = run()
    print(f"graph_block: correct; fused {fused.last_launch.cycles} cycles in 1 launch vs "
          f"{unfused.last_launch.cycles} cycles in {unfused.stats.launches} launches unfused")
    print(fused.explain(np.zeros((256, 768), np.float32), np.zeros(768, np.float32), np.zeros(768, np.float32)))
