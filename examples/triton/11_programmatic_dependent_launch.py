"""
Programmatic Dependent Launch
=====================

Triton's tutorial 11 (python/tutorials/11-programmatic-dependent-launch.py, MIT, (c) the Triton authors: see
LICENSE here), run on dvmlang's simulated NPU. Changed from the tutorial:

* the imports: ``import dvmlang.triton as triton``, ``import dvmlang.triton.language as tl``.
* device: ``device="cuda"`` is ``device="cpu"`` (four lines).
* sizes: the benchmark sweeps 2**16 .. 2**20 elements (the tutorial: 2**23 .. 2**27; ``--full`` runs that).
* ``supports_pdl()`` is True: the tutorial's ``is_cuda() and torch.cuda.get_device_capability()[0] >= 9``
  is False on the simulated NPU (and asks torch.cuda), which would print "PDL is not supported on this
  device" and run nothing. Here PDL is supported trivially: ``tl.extra.cuda.gdc_wait()`` and
  ``gdc_launch_dependents()`` are no-ops, and ``launch_pdl=True`` is accepted with no effect, because
  launches run one after another in program order (a kernel starts only when the previous one has ended and
  its stores are in memory), which is what ``gdc_wait`` waits for (docs/triton.md, "Tutorials").
* the ``__main__`` block is ``run()`` (the gallery's entry point), which seeds torch first and validates
  98432 elements as well as 1024 (several programs, a masked tail); ``validate`` prints ✅ or ❌ and
  ``run()`` asserts the result equals torch's exactly (the tutorial's check is ``atol=1.0``); the benchmark's
  ``save_path="."`` (a CSV and a plot in the working directory) is kept only when the file runs as a script.

No other line changed. The PDL and No PDL columns are the same: the same bytecode, the same simulated time.
"""

import sys

import torch
import dvmlang.triton as triton
import dvmlang.triton.language as tl


def is_cuda():
    return triton.runtime.driver.active.get_current_target().backend == "cuda"


def supports_pdl():
    return True  # dvmlang: was is_cuda() and torch.cuda.get_device_capability()[0] >= 9


# In this example
@triton.jit
def add_kernel(x_ptr,  #
               y_ptr,  #
               output_ptr,  #
               n_elements,  #
               BLOCK_SIZE: tl.constexpr,  #
               USE_GDC: tl.constexpr,  #
               ):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    if USE_GDC:
        # GDC wait waits for ALL programs in the the prior kernel to complete before continuing.
        # This ensures any memory operations happen before the wait in program order,
        # e.g. if the prior kernel writes to x or y the new values will be visible.
        tl.extra.cuda.gdc_wait()

    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    if USE_GDC:
        # GDC launch dependents hints the runtime system to launch dependent kernels.
        # These dependent kernels must also be launched with PDL enabled.
        # Once GDC launch has been issued by ALL programs or
        # programs have finished, the dependent grid can begin if there are enough resources.
        # Note: this by itself provides no additional memory-ordering guarentees, unlike `gdc_wait`
        tl.extra.cuda.gdc_launch_dependents()
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, launch_pdl: bool = True):
    output = torch.empty_like(x)
    assert x.device == y.device and output.device == x.device
    n_elements = output.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    add_kernel[grid](
        x, y, output, n_elements, BLOCK_SIZE=1024,
        USE_GDC=launch_pdl,  # set constexpr in kernel to use grid dependence control
        launch_pdl=launch_pdl,  # launch kernel with PDL flag set enabled
    )
    return output


def validate(n_elements):
    x = torch.rand(n_elements, device="cpu", dtype=torch.float32)
    y = torch.rand(n_elements, device="cpu", dtype=torch.float32)

    torch_result = x + y
    add_result = add(x, y)

    torch_vs_add = "✅" if torch.allclose(torch_result, add_result, atol=1.0) else "❌"
    print(f"Number of Elements={n_elements} verification naive vs: ", end="")
    print(f"add: {torch_vs_add}")
    assert torch.equal(add_result, torch_result), "add and torch differ"  # dvmlang: what it prints, exactly


TUTORIAL_SIZES = [2**i for i in range(23, 28, 1)]  # the tutorial's sweep
SIZES = TUTORIAL_SIZES if __name__ == "__main__" and "--full" in sys.argv else [2**i for i in range(16, 21, 1)]


@triton.testing.perf_report(
    triton.testing.Benchmark(
        x_names=["size"],
        x_vals=SIZES,
        x_log=False,
        line_arg="provider",
        line_vals=["pdl-fp32", "fp32"],
        line_names=["PDL", "No PDL"],
        styles=[("red", "-"), ("blue", "-")],
        ylabel='GB/s',
        plot_name="pdl-performance",
        args={},
    ))
def benchmark(size, provider):
    x = torch.rand(size, device="cpu", dtype=torch.float32)
    y = torch.rand(size, device="cpu", dtype=torch.float32)

    quantiles = [0.5, 0.2, 0.8]

    fn = lambda: add(x, y, "pdl" in provider)

    ms, min_ms, max_ms = triton.testing.do_bench_cudagraph(fn, quantiles=quantiles, rep=100)

    gbps = lambda ms: 3 * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)
    return gbps(ms), gbps(max_ms), gbps(min_ms)


def run(save_path=""):
    torch.manual_seed(0)  # dvmlang: a repeatable run

    if supports_pdl():
        validate(1024)
        validate(98432)  # dvmlang: several programs, a masked tail
        return benchmark.run(print_data=True, show_plots=True, save_path=save_path)
    else:
        print("PDL is not supported on this device")


if __name__ == "__main__":
    run(save_path=".")
