"""
Low-Memory Dropout
==================

Triton's tutorial 04 (python/tutorials/04-low-memory-dropout.py, MIT, (c) the Triton authors: see LICENSE
here), run on dvmlang's simulated NPU. Changed from the tutorial:

* the imports: ``import dvmlang.triton as triton``, ``import dvmlang.triton.language as tl``.
* ``DEVICE``: unchanged (``get_active_torch_device()`` is ``torch.device("cpu")`` here).
* sizes: the tutorial's (10 elements).
* the statements that run the kernels and print the tables are in ``run()`` (the gallery's entry point), not
  at module level, with ``torch.manual_seed(0)`` first so the run is repeatable.
* ``run()`` checks what the tutorial only prints, against torch: the baseline dropout is
  ``torch.where(x_keep, x / (1 - p), 0)``; the seeded dropout keeps exactly the elements whose Philox
  uniform (Triton's ``tl.rand``, recomputed here in numpy) is above ``p``, the same seed
  gives the same output and another seed another one; and the same on 100,003 elements (98 programs).
  ``numpy`` is imported for that reference.

* ``import tabulate`` is inside a ``try``: tabulate is not a dvmlang dependency, so without it a stand-in prints
  the same rows (one per line, unaligned).

No other line changed. The tutorial has no benchmark.
"""

# %%
# Baseline
# --------
#
# The *dropout* operator was first introduced in [SRIVASTAVA2014]_ as a way to improve the performance
# of deep neural networks in low-data regime (i.e. regularization).
#
# It takes a vector as input and produces a vector of the same shape as output. Each scalar in the
# output has a probability :math:`p` of being changed to zero and otherwise it is copied from the input.
# This forces the network to perform well even when only :math:`1 - p` scalars from the input are available.
#
# At evaluation time we want to use the full power of the network so we set :math:`p=0`. Naively this would
# increase the norm of the output (which can be a bad thing, e.g. it can lead to artificial decrease
# in the output softmax temperature). To prevent this we multiply the output by :math:`\frac{1}{1 - p}`, which
# keeps the norm consistent regardless of the dropout probability.
#
# Let's first take a look at the baseline implementation.

import numpy as np
try:
    import tabulate
except ImportError:  # not a dvmlang dependency: a stand-in that prints the same rows, one per line
    import types
    tabulate = types.SimpleNamespace(tabulate=lambda rows: "\n".join("  ".join(map(str, r)) for r in rows))
import torch

import dvmlang.triton as triton
import dvmlang.triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def _dropout(
    x_ptr,  # pointer to the input
    x_keep_ptr,  # pointer to a mask of 0s and 1s
    output_ptr,  # pointer to the output
    n_elements,  # number of elements in the `x` tensor
    p,  # probability that an element of `x` is changed to zero
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # Load data
    x = tl.load(x_ptr + offsets, mask=mask)
    x_keep = tl.load(x_keep_ptr + offsets, mask=mask)
    # The line below is the crucial part, described in the paragraph above!
    output = tl.where(x_keep, x / (1 - p), 0.0)
    # Write-back output
    tl.store(output_ptr + offsets, output, mask=mask)


def dropout(x, x_keep, p):
    output = torch.empty_like(x)
    assert x.is_contiguous()
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    _dropout[grid](x, x_keep, output, n_elements, p, BLOCK_SIZE=1024)
    return output


# %%
# Seeded dropout
# --------------
#
# The above implementation of dropout works fine, but it can be a bit awkward to deal with. Firstly
# we need to store the dropout mask for backpropagation. Secondly, dropout state management can get
# very tricky when using recompute/checkpointing (e.g. see all the notes about `preserve_rng_state` in
# https://pytorch.org/docs/stable/checkpoint.html). In this tutorial we'll describe an alternative implementation
# that (1) has a smaller memory footprint; (2) requires less data movement; and (3) simplifies the management
# of persisting randomness across multiple invocations of the kernel.
#
# Pseudo-random number generation in Triton is simple! In this tutorial we will use the
# :code:`triton.language.rand` function which generates a block of uniformly distributed :code:`float32`
# values in [0, 1), given a seed and a block of :code:`int32` offsets. But if you need it, Triton also provides
# other :ref:`random number generation strategies<Random Number Generation>`.
#
# .. note::
#    Triton's implementation of PRNG is based on the Philox algorithm (described on [SALMON2011]_).
#
# Let's put it all together.


@triton.jit
def _seeded_dropout(
    x_ptr,
    output_ptr,
    n_elements,
    p,
    seed,
    BLOCK_SIZE: tl.constexpr,
):
    # compute memory offsets of elements handled by this instance
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # load data from x
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # randomly prune it
    random = tl.rand(seed, offsets)
    x_keep = random > p
    # write-back
    output = tl.where(x_keep, x / (1 - p), 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


def seeded_dropout(x, p, seed):
    output = torch.empty_like(x)
    assert x.is_contiguous()
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    _seeded_dropout[grid](x, output, n_elements, p, seed, BLOCK_SIZE=1024)
    return output


# %%
# Et Voilà! We have a triton kernel that applies the same dropout mask provided the seed is the same!
# If you'd like explore further applications of pseudorandomness in GPU programming, we encourage you
# to explore the `python/triton/language/random.py`!

# %%
# Exercises
# ---------
#
# 1. Extend the kernel to operate over a matrix and use a vector of seeds - one per row.
# 2. Add support for striding.
# 3. (challenge) Implement a kernel for sparse Johnson-Lindenstrauss transform which generates the projection matrix on the fly each time using a seed.

# %%
# References
# ----------
#
# .. [SALMON2011] John K. Salmon, Mark A. Moraes, Ron O. Dror, and David E. Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", 2011
# .. [SRIVASTAVA2014] Nitish Srivastava and Geoffrey Hinton and Alex Krizhevsky and Ilya Sutskever and Ruslan Salakhutdinov, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting", JMLR 2014


# ---- dvmlang: the tutorial's statements, and checks of what they print ------------------------------------------

PHILOX_KEY_A, PHILOX_KEY_B, PHILOX_ROUND_A, PHILOX_ROUND_B = 0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57
MASK32 = 0xFFFFFFFF


def reference_rand(seed, offsets):
    """Triton's ``tl.rand(seed, offsets)``: 10 rounds of Philox4x32 on the counter (offset, 0, 0, 0) with the
    key (seed lo, seed hi), then ``uint_to_uniform_float``; in numpy uint64 arithmetic on 32-bit words."""
    c0 = offsets.numpy().astype(np.uint32).astype(np.uint64)
    c1, c2, c3 = (np.zeros_like(c0) for _ in range(3))
    k0, k1 = np.uint64(seed & MASK32), np.uint64((seed >> 32) & MASK32)
    round_a, round_b, m = np.uint64(PHILOX_ROUND_A), np.uint64(PHILOX_ROUND_B), np.uint64(MASK32)
    for _ in range(10):
        _c0, _c2 = c0, c2
        c0 = ((round_b * _c2) >> np.uint64(32)) ^ c1 ^ k0  # umulhi: the high word of the 64-bit product
        c2 = ((round_a * _c0) >> np.uint64(32)) ^ c3 ^ k1
        c1 = (round_b * _c2) & m
        c3 = (round_a * _c0) & m
        k0, k1 = (k0 + np.uint64(PHILOX_KEY_A)) & m, (k1 + np.uint64(PHILOX_KEY_B)) & m
    x = c0.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x).astype(np.int32)
    return torch.from_numpy(x.astype(np.float32) * np.float32(4.6566127342e-10))


def check_seeded(x, output, p, seed):
    keep = reference_rand(seed, torch.arange(x.numel(), dtype=torch.int32)) > p
    assert torch.equal(output, torch.where(keep, x / (1 - p), 0.0)), "the kept elements are not Philox's"


def run():
    torch.manual_seed(0)
    # Input tensor
    x = torch.randn(size=(10, ), device=DEVICE)
    # Dropout mask
    p = 0.5
    x_keep = (torch.rand(size=(10, ), device=DEVICE) > p).to(torch.int32)
    #
    output = dropout(x, x_keep=x_keep, p=p)
    print(tabulate.tabulate([
        ["input"] + x.tolist(),
        ["keep mask"] + x_keep.tolist(),
        ["output"] + output.tolist(),
    ]))

    assert torch.equal(output, torch.where(x_keep.bool(), x / (1 - p), 0.0)), "dropout and torch differ"

    x = torch.randn(size=(10, ), device=DEVICE)
    # Compare this to the baseline - dropout mask is never instantiated!
    output = seeded_dropout(x, p=0.5, seed=123)
    output2 = seeded_dropout(x, p=0.5, seed=123)
    output3 = seeded_dropout(x, p=0.5, seed=512)

    print(
        tabulate.tabulate([
            ["input"] + x.tolist(),
            ["output (seed = 123)"] + output.tolist(),
            ["output (seed = 123)"] + output2.tolist(),
            ["output (seed = 512)"] + output3.tolist(),
        ]))

    assert torch.equal(output, output2), "the same seed gave different outputs"
    assert not torch.equal(output, output3), "two seeds gave the same output"
    check_seeded(x, output, 0.5, 123)
    check_seeded(x, output3, 0.5, 512)
    big = torch.randn(100_003, device=DEVICE)
    check_seeded(big, seeded_dropout(big, p=0.3, seed=2024), 0.3, 2024)


if __name__ == "__main__":
    run()
