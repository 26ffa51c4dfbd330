"""The gallery's list of examples, and its kernels on edge shapes the examples' defaults do not cover. (That every
example runs, checks itself and stays on DMA is tests/test_golden_bytecode.py, which runs each once.)"""

import importlib.util
import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dvmlang

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def load(name):
    mod_name = f"dvmlang_gallery_{name}"
    if mod_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(mod_name, EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[mod_name]


def test_the_gallery_has_the_issue_examples():
    want = {"vector_add", "softmax", "layernorm", "rmsnorm", "activations", "matmul", "matmul_bias_relu", "argmax",
            "cumsum", "flash_attention", "transpose", "first_above", "histogram"}
    assert want <= set(NAMES)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (64, 64, 32), (17, 129, 33), (65, 7, 200)])
def test_matmul_edge_shapes(rng, M, N, K):
    mm = load("matmul")
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c, _ = mm.matmul(a, b)
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-3,
                               atol=2e-2)


def test_matmul_new_shapes_encode_without_rebuilding(rng):
    mm = load("matmul")
    mm.matmul(np.ones((16, 16), np.float16), np.ones((16, 16), np.float16))
    builds = mm.matmul_kernel.cache_info().builds
    for M, N, K in [(3, 5, 7), (100, 3, 65)]:
        c, _ = mm.matmul(np.ones((M, K), np.float16), np.ones((K, N), np.float16))
        assert (c == K).all()
    assert mm.matmul_kernel.cache_info().builds == builds


def test_matmul_bias_relu_edges(rng):
    mod = load("matmul_bias_relu")
    a = rng.standard_normal((1, 70)).astype(np.float16)
    b = rng.standard_normal((70, 65)).astype(np.float16)
    bias = rng.standard_normal(65).astype(np.float16)
    c, _ = mod.matmul_bias_relu(a, b, bias)
    np.testing.assert_allclose(c.astype(np.float32), mod.reference(a, b, bias), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("seq_len", [1, 64, 65])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_sequence_lengths(rng, seq_len, causal):
    fa = load("flash_attention")
    q, k, v = (rng.standard_normal((2, seq_len, 64)).astype(np.float16) for _ in range(3))
    o, _ = fa.attention(q, k, v, causal=causal)
    np.testing.assert_allclose(o.astype(np.float64), fa.reference(q, k, v, causal), rtol=2e-3, atol=2e-3)


def test_flash_attention_other_head_dim_and_blocks(rng):
    fa = load("flash_attention")
    q, k, v = (rng.standard_normal((1, 50, 32)).astype(np.float16) for _ in range(3))
    o, _ = fa.attention(q, k, v, causal=True, block_m=16, block_n=32)
    np.testing.assert_allclose(o.astype(np.float64), fa.reference(q, k, v, True), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("shape", [(1, 1), (1, 300), (257, 1)])
def test_row_kernels_on_thin_shapes(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    am = load("argmax")
    out, _ = am.argmax_rows(x)
    np.testing.assert_array_equal(out, np.argmax(x, axis=1))
    cs = load("cumsum")
    y, _ = cs.cumsum_rows(x)
    np.testing.assert_allclose(y, np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
    rn = load("rmsnorm")
    xb = x.astype(ml_dtypes.bfloat16)
    w = np.ones(shape[1], ml_dtypes.bfloat16)
    yb, _ = rn.rmsnorm(xb, w)
    np.testing.assert_allclose(yb.astype(np.float32), rn.reference(xb, w), rtol=1e-2, atol=1e-2)
    tr = load("transpose")
    t, _ = tr.transpose(x)
    np.testing.assert_array_equal(t, x.T)


def test_argmax_handles_nan_free_ties_across_blocks():
    am = load("argmax")
    x = np.zeros((2, 600), np.float32)
    x[0, [5, 300, 599]] = 7.0  # equal maxima in three different blocks
    x[1, 599] = -1.0
    out, _ = am.argmax_rows(x)
    assert out.tolist() == [5, 0]


def test_first_above_without_any_hit_and_with_hits_everywhere(rng):
    fa = load("first_above")
    x = rng.uniform(0, 1, (9, 77)).astype(np.float32)
    for thr, want in [(2.0, -1), (-1.0, 0)]:
        out = np.full(9, -7, np.int32)
        fa.first_above_kernel[(9,)](x, out, 77, 77, thr, BLOCK=32)
        assert (out == want).all()


def test_histogram_tiny_and_one_bin(rng):
    h = load("histogram")
    x = np.array([0.5], np.float32)
    hist, _ = h.histogram(x, 4, 0.0, 1.0)
    assert hist.tolist() == [0, 0, 1, 0]
    x = rng.uniform(-1, 1, 999).astype(np.float32)
    hist, _ = h.histogram(x, 1, -1.0, 1.0)
    assert hist.tolist() == [999]


def test_activations_reject_an_unknown_name():
    act = load("activations")
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(dvmlang.ConstexprError, match="ACT must be"):
        act.bias_act(x, np.zeros(3, np.float32), "relu6")


def test_gelu_forms_match_on_fp16_inputs(rng):
    act = load("activations")
    x = rng.uniform(-4, 4, (5, 300)).astype(np.float16)
    bias = np.zeros(300, np.float16)
    for name, ref in act.REFERENCE.items():
        y, _ = act.bias_act(x, bias, name)
        np.testing.assert_allclose(y.astype(np.float64), ref(x.astype(np.float64)), rtol=2e-3, atol=2e-3)
    assert math.isclose(float(act.REFERENCE["gelu"](np.array([1.0]))[0]), 0.8413447460685429, rel_tol=1e-12)
